"""Memory after bursts: RSS of tritonserver and of each python stub, before and after 160 concurrent streams and
after each of 10 such bursts: memory must settle back after a burst.

    .venv/bin/python bench/memory.py [--model-dir build/tiny-llama] [--streams 160] [--bursts 10] [--tokens 32]

Serves examples/tiny-cpu.yaml (its queue raised to hold a whole burst, so every stream runs) on the embedded
tritonserver; each burst sends `--streams` gRPC streams to tensorrt_llm_bls at once and waits for all of them,
then 3 s for the server to settle. Prints one line per measurement and writes bench/results/memory-<time>.json.
Growth that does not settle shows as an RSS that keeps rising from burst to burst, not as the first burst's rise
(allocator pools and tokenizer caches fill once).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

import numpy as np
import psutil
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))


def rss_mb(server) -> dict[str, float]:
    """{process: RSS MiB}: tritonserver and each stub, named by its model (instances numbered)."""
    out = {"tritonserver": psutil.Process(server.process.pid).memory_info().rss / 2**20}
    seen: dict[str, int] = {}
    for pid, name in sorted(server.stubs.items()):
        model = name.removeprefix("model ").strip("'")
        seen[model] = seen.get(model, 0) + 1
        try:
            out[f"{model}#{seen[model]}"] = psutil.Process(pid).memory_info().rss / 2**20
        except psutil.NoSuchProcess:
            out[f"{model}#{seen[model]}"] = float("nan")
    return out


def burst(url: str, streams: int, tokens: int) -> tuple[int, int]:
    """`streams` concurrent streams; (answered, failed)."""
    from streaming_text import grpc_responses

    failed = []

    def one(i: int) -> None:
        inputs = {"text_input": np.array([[f"Burst request {i} tells a story about"]], dtype=object),
                  "max_tokens": np.array([[tokens]], np.int32), "min_tokens": np.array([[tokens]], np.int32),
                  "stream": np.array([[True]])}
        try:
            grpc_responses(url, "tensorrt_llm_bls", inputs, timeout=600)
        except Exception as err:  # noqa: BLE001 - counted, the bench goes on
            failed.append(str(err)[:200])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return streams - len(failed), len(failed)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", default=str(ROOT / "build" / "tiny-llama"))
    ap.add_argument("--streams", type=int, default=160)
    ap.add_argument("--bursts", type=int, default=10)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--work", default="/tmp/tritongen-bench-memory")
    args = ap.parse_args()

    from specs import render_spec
    from streaming_text import start_server

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    data = yaml.safe_load((ROOT / "examples" / "tiny-cpu.yaml").read_text())
    data["model"]["checkpoint"] = str(Path(args.model_dir).resolve())
    data["serving"]["dynamic_batching"]["max_queue_size"] = args.streams  # every stream of a burst runs
    spec = work / "spec.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    repo = work / f"repo-{int(time.time())}"
    render_spec(spec, repo)
    server = start_server(repo, work / "tritonserver.log")
    rows = []
    try:
        burst(server.grpc_url, 4, args.tokens)  # warm every path once
        time.sleep(3)
        rows.append({"after": "warm-up", **rss_mb(server)})
        for i in range(1, args.bursts + 1):
            started = time.monotonic()
            ok, failed = burst(server.grpc_url, args.streams, args.tokens)
            time.sleep(3)
            rows.append({"after": f"burst {i} ({ok} ok, {failed} failed, {time.monotonic() - started:.0f} s)",
                         **rss_mb(server)})
            print(json.dumps(rows[-1]), flush=True)
    except Exception:
        # Say why the server went away (the supervisor's reason: a dead stub, an exit) before the traceback.
        print(f"server failure: {server.failure}\n{server.log_tail(20)}", file=sys.stderr, flush=True)
        raise
    finally:
        server.stop()
    names = [k for k in rows[0] if k != "after"]
    print(f"\n{'RSS MiB':<40}" + "".join(f"{n[:18]:>20}" for n in names))
    for row in rows:
        print(f"{row['after']:<40}" + "".join(f"{row[n]:>20.0f}" for n in names))
    out = ROOT / "bench" / "results" / f"memory-{time.strftime('%Y%m%dT%H%M%S')}.json"
    out.write_text(json.dumps({"streams": args.streams, "bursts": args.bursts, "tokens": args.tokens,
                               "rows": rows}, indent=2) + "\n")
    print(f"written {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
