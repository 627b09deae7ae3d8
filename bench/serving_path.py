"""Streamed tokens per second per CPU core that the default streaming path sustains (runtime `synthetic`).

The deployment is examples/synthetic-cpu.yaml (the tiny demo tokenizer; a tensorrt_llm model that emits one
token every --itl-ms per request with no model behind it), served by the embedded tritonserver and driven by
`tritongen loadtest` (gRPC ModelStreamInfer into `ensemble`, closed loop, N users). With the model out of the
way, what costs CPU is the serving path itself: tritonserver (gRPC, the ensemble scheduler), preprocessing
(once per request), postprocessing (once per streamed response) and the synthetic token source (which stands
in for the TensorRT-LLM backend's own response path).

Per level, all users start at once; the CPU seconds of every server process (tritonserver and each python backend
stub, by model) are read with psutil every 0.2 s, and the reads nearest the measured window's edges (warm-up after
the first request sent, to 0.5 s before the run's end) are used, and the tokens the source emitted in between
from its counter tritongen_llm_output_tokens_total. Emitted is not received: tokens queued in the path when the
window closes were emitted but not yet received, so under saturation the source's rate is above the client's
(the load test checks the two totals over whole requests, not over the window). Both are reported
(`emitted_tok_per_s`, `received_tok_per_s`), with what the closed loop offers (`offered_tok_per_s`: users x
1000 / ITL, the source having no TTFT here). emitted tokens / (serving-path CPU seconds) is the rate per core;
the per-process split says where the cost is; all CPU figures are of this run's own window. The load generator
runs on the same host: its CPU (`client_cpu_fraction`, of one core) is what the server could not use.

    .venv/bin/python bench/serving_path.py [--levels 8,32] [--duration 12] [--warmup 3] [--itl-ms 5]
        [--stream-interval N] [--model ensemble|tensorrt_llm_bls] [--path text|ids]

--stream-interval sets serving.stream_interval (tokens per streamed response); --model the Triton model the load
test calls (the ensemble, or its only step, the BLS, directly); --path ids has the load generator call tensorrt_llm
with token ids and detokenize itself (tritongen.token_ids), so no python model of the text path runs per response.

Writes bench/results/serving_path.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
import yaml

from tritongen.demo.model import make_demo_model
from tritongen.loadtests.prom import scrape
from tritongen.loadtests.samples import read_samples, sample_files
from tritongen.render import render_for
from tritongen.plan import plan_from_file
from tritongen.render import write_repository
from tritongen.serve import TritonServer

ROOT = Path(__file__).resolve().parent.parent
PATH_MODELS = ("tritonserver", "preprocessing", "postprocessing", "tensorrt_llm_bls")


def _process_name(proc: psutil.Process) -> str:
    cmd = proc.cmdline()
    if cmd and cmd[0].endswith("tritonserver"):
        return "tritonserver"
    for part in cmd:
        if part.endswith("/1/model.py"):
            return Path(part).parent.parent.name
    return proc.name()


def cpu_by_process(root: psutil.Process) -> dict[str, float]:
    """CPU seconds (user + system) of tritonserver and each python backend stub, by model name."""
    out: dict[str, float] = {}
    for proc in [root, *root.children(recursive=True)]:
        try:
            t = proc.cpu_times()
            out[_process_name(proc)] = out.get(_process_name(proc), 0.0) + t.user + t.system
        except psutil.NoSuchProcess:
            continue
    return out


def tokens_sent(metrics_url: str) -> float:
    snap = scrape(metrics_url)
    return sum(v for (name, _), v in snap.values.items() if name == "tritongen_llm_output_tokens_total")


def measure_level(server, spec: Path, users: int, duration: float, warmup: float, out: Path,
                  model: str = "ensemble", path: str = "text", itl_ms: float = 5.0) -> dict:
    """Run one closed-loop level; sample CPU and the token counter at the window's edges."""
    root = psutil.Process(server.process.pid)
    # CPU and the token counter are sampled all along (wall clock); the window's edges are chosen afterwards,
    # from the first request *sent* (the samples' send times), which is only known once requests complete.
    marks: list[tuple[float, dict[str, float], float]] = []
    done = threading.Event()

    def sample_all() -> None:
        while not done.is_set():
            marks.append((time.time(), cpu_by_process(root), tokens_sent(server.metrics_url)))
            done.wait(0.2)

    # -r users: every user starts at once, so the load is whole from the first request on.
    cmd = [sys.executable, "-m", "tritongen.cli", "loadtest", str(spec), "--url", server.grpc_url,
           "--metrics-url", server.metrics_url, "-u", str(users), "-r", str(users), "-t", f"{duration:g}",
           "--warmup", f"{warmup:g}", "--out", str(out)]
    # The ids path calls tensorrt_llm itself; the load generator tokenizes and detokenizes.
    cmd += ["--path", "ids"] if path == "ids" else ["--model", model]
    sampler = threading.Thread(target=sample_all, daemon=True)
    sampler.start()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        log, _ = proc.communicate(timeout=duration + 300)
    finally:
        done.set()
        sampler.join()
    sent = [s.send_wall_ns / 1e9 for s in read_samples(sample_files(next((out / "samples").glob("level-*"))))]
    if not sent:
        raise SystemExit(f"no request was sent: {log[-2000:]}")
    t0 = min(sent)
    # The load's own window, with a margin at the end so the drain stays out.
    nearest = lambda at: min(marks, key=lambda m: abs(m[0] - at))  # noqa: E731
    (w0, cpu0, tok0), (w1, cpu1, tok1) = nearest(t0 + warmup), nearest(t0 + duration - 0.5)
    wall = w1 - w0
    cpu = {k: cpu1.get(k, 0.0) - cpu0.get(k, 0.0) for k in cpu1}
    path_cpu = sum(v for k, v in cpu.items() if k in PATH_MODELS)
    tokens = tok1 - tok0
    summary = json.loads((out / "loadtest.json").read_text())
    level = summary["levels"][0]
    metrics = level["metrics"]
    return {
        "users": users, "window_s": wall, "tokens_emitted": tokens, "emitted_tok_per_s": tokens / wall,
        "received_tok_per_s": metrics["output_token_throughput"], "offered_tok_per_s": users * 1000.0 / itl_ms,
        "errors": metrics["error_count"],
        "cpu_s": cpu, "cores_used": {k: v / wall for k, v in cpu.items()},
        "serving_path_cpu_s": path_cpu,
        "serving_path_emitted_tokens_per_cpu_s": tokens / path_cpu if path_cpu else None,
        "all_server_emitted_tokens_per_cpu_s": tokens / sum(cpu.values()) if cpu else None,
        "us_per_emitted_token": {k: 1e6 * v / tokens for k, v in cpu.items()} if tokens else {},
        "client": {"itl_p50_ms": (metrics["itl_ms"] or {}).get("p50"),
                   "itl_p99_ms": (metrics["itl_ms"] or {}).get("p99"),
                   "whole_request_tokens_equal": level["tokens"]["equal"],
                   "client_cpu_fraction": level["load_generator"]["max_cpu_fraction"]},
        "log_tail": log.splitlines()[-6:],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", default="8,32")
    parser.add_argument("--duration", type=float, default=12)
    parser.add_argument("--warmup", type=float, default=3)
    parser.add_argument("--itl-ms", type=float, default=5)
    parser.add_argument("--output-tokens", type=int, default=128)
    parser.add_argument("--stream-interval", type=int, default=1)
    parser.add_argument("--model", default="ensemble", choices=("ensemble", "tensorrt_llm_bls"))
    parser.add_argument("--path", default="text", choices=("text", "ids"),
                        help="ids: the load generator sends token ids to tensorrt_llm and detokenizes (--model unused)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "serving_path.json"))
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="serving-path-"))
    model = make_demo_model(work / "tiny-llama")
    data = yaml.safe_load((ROOT / "examples" / "synthetic-cpu.yaml").read_text())
    data["model"]["checkpoint"] = str(model)
    data["synthetic"] = {"ttft_ms": 0, "itl_ms": args.itl_ms}
    data["validation"]["load"]["output_tokens"] = {"mean": args.output_tokens, "stddev": 0}
    data["validation"]["slo"] = {"max_error_rate": 0.0}
    data.setdefault("serving", {})["stream_interval"] = args.stream_interval
    spec = work / "synthetic.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    sp, plan = plan_from_file(spec)
    repo = work / "model_repository"
    write_repository(render_for(plan), repo)
    server = TritonServer(repo, log_path=work / "tritonserver.log")
    server.start(timeout=240)
    results = []
    try:
        for users in (int(x) for x in args.levels.split(",")):
            r = measure_level(server, spec, users, args.duration, args.warmup, work / f"u{users}", args.model,
                              args.path, args.itl_ms)
            results.append(r)
            print(f"users {users}: offered {r['offered_tok_per_s']:.0f} tok/s; emitted {r['emitted_tok_per_s']:.0f} "
                  f"(source counter), received {r['received_tok_per_s']:.0f} (client); {r['errors']} errors; "
                  f"serving path {r['serving_path_emitted_tokens_per_cpu_s'] or 0:.0f} emitted tok per CPU-s; "
                  f"client CPU {r['client']['client_cpu_fraction']}; server CPU cores: "
                  + ", ".join(f"{k} {v:.2f}" for k, v in sorted(r["cores_used"].items())), flush=True)
    finally:
        server.stop()
    record = {"machine": {"cpu_count": psutil.cpu_count(), "load_avg_at_end": list(psutil.getloadavg()),
                          "python": platform.python_version()},
              "args": vars(args), "levels": results}
    Path(args.out).write_text(json.dumps(record, indent=2) + "\n")
    print(f"results: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
