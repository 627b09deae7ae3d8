"""How many steps does generation run after a client leaves? Per entry (tensorrt_llm_bls, tensorrt_llm, ensemble)
and per `serving.ensemble` setting (bls: the BLS serves `ensemble` itself; triton: Triton's ensemble scheduler in
front of tensorrt_llm_bls).

One embedded tritonserver per setting serves the synthetic runtime (native token source, paced at --itl-ms, one
token per response). Per entry and round, --streams gRPC streams each cancel after --cancel-after responses
(tritonclient's stop_stream(cancel_requests=True), as a client that leaves). The source's own counter
tritongen_llm_output_tokens_total, read before the round and once its active-request gauge is back at 0, against
the responses the clients received, gives the steps each stream ran after its client stopped reading:
(server tokens - client responses) / streams. A stream that is not stopped runs to --max-tokens.

    .venv/bin/python bench/ensemble_cancel.py [--streams 16] [--cancel-after 5] [--itl-ms 5] [--max-tokens 2000]
        [--repeat 3] [--name ensemble_cancel]

Writes bench/results/<name>.json and prints the table.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tritongen.demo.model import make_demo_model

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "native"))

ENTRIES = ("tensorrt_llm_bls", "tensorrt_llm", "ensemble")


def _repo(work: Path, setting: str, itl_ms: float, batch: int) -> Path:
    import yaml

    from specs import apply_overrides, render_spec
    model = make_demo_model(work / "tiny-llama")
    data = yaml.safe_load((ROOT / "examples" / "synthetic-cpu.yaml").read_text())
    data["model"]["checkpoint"] = str(model)
    apply_overrides(data, {"synthetic.ttft_ms": 5, "synthetic.itl_ms": itl_ms, "serving.max_batch_size": batch,
                           "serving.ensemble": setting})
    spec = work / f"{setting}.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    repo = work / f"repo-{setting}"
    render_spec(spec, repo)
    return repo


def _counters(server) -> tuple[float, float]:
    """(tokens generated, active requests) of the token source."""
    with urllib.request.urlopen(server.metrics_url, timeout=10) as r:
        text = r.read().decode()
    found = {"tritongen_llm_output_tokens": 0.0, "tritongen_llm_active_requests": 0.0}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name = sample.name.removesuffix("_total")
            if name in found and sample.labels.get("model") == "tensorrt_llm":
                found[name] += sample.value
    return found["tritongen_llm_output_tokens"], found["tritongen_llm_active_requests"]


def _round(server, entry: str, args) -> dict:
    from stopclients import Streams

    deadline = time.monotonic() + 60
    while _counters(server)[1] and time.monotonic() < deadline:
        time.sleep(0.05)
    before, _ = _counters(server)
    streams = Streams(server.grpc_url, args.streams, model=entry, max_tokens=args.max_tokens,
                      cancel_after=args.cancel_after).start()
    outcomes = streams.join(120)
    left = time.monotonic()
    limit = left + args.max_tokens * args.itl_ms / 1000 + 30
    while _counters(server)[1] and time.monotonic() < limit:
        time.sleep(0.01)
    idle_s = time.monotonic() - left
    after, active = _counters(server)
    received = sum(o.responses for o in outcomes)
    return {"entry": entry, "streams": args.streams, "cancelled": sum(o.ending == "cancelled" for o in outcomes),
            "client_responses": received, "server_tokens": after - before,
            "steps_after_leaving": (after - before - received) / args.streams,
            "active_after": active, "seconds_to_idle": round(idle_s, 3)}


def main(argv: list[str] | None = None) -> int:
    from streaming_text import start_server

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--streams", type=int, default=16)
    p.add_argument("--cancel-after", type=int, default=5)
    p.add_argument("--itl-ms", type=float, default=5.0)
    p.add_argument("--max-tokens", type=int, default=2000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--settings", default="bls,triton")
    p.add_argument("--name", default="ensemble_cancel")
    args = p.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="ensemble-cancel-") as tmp:
        work = Path(tmp)
        for setting in args.settings.split(","):
            repo = _repo(work, setting, args.itl_ms, max(8, args.streams))
            server = start_server(repo, work / f"tritonserver-{setting}.log")
            try:
                for r in range(args.repeat):
                    for entry in ENTRIES:
                        row = {"setting": setting, "round": r, **_round(server, entry, args)}
                        print(f"  {setting:6} {entry:16} round {r}: {row['steps_after_leaving']:8.1f} steps after "
                              f"leaving, idle in {row['seconds_to_idle']:.2f} s", flush=True)
                        rows.append(row)
            finally:
                server.stop()
    table = ["| serving.ensemble | entry | steps after the client left (median of rounds, per stream) | "
             "max | seconds to idle (median) |", "|---|---|---|---|---|"]
    for setting in args.settings.split(","):
        for entry in ENTRIES:
            mine = [r for r in rows if r["setting"] == setting and r["entry"] == entry]
            steps = [r["steps_after_leaving"] for r in mine]
            table.append(f"| {setting} | {entry} | {statistics.median(steps):.1f} | {max(steps):.1f} | "
                         f"{statistics.median(r['seconds_to_idle'] for r in mine):.2f} |")
    print("\n".join(table))
    out = ROOT / "bench" / "results" / f"{args.name}.json"
    out.write_text(json.dumps({"args": vars(args), "host": platform.node(), "cpus": __import__("os").cpu_count(),
                               "rows": rows, "table": table}, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
