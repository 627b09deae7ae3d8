"""Where the ensemble's hop costs at a fast source: tritonserver's CPU per thread (by thread name) and, where `perf`
is installed, its hottest symbols, for each layout under the same closed-loop load.

    python bench/itl_hop_profile.py --itl-ms 2 --levels 256 --processes 8 --duration 10 \
        --layouts tensorrt_llm,tensorrt_llm_bls,ensemble --out bench/results/itl_hop_profile.json

Serves the synthetic runtime as bench/engine_speed.py does (same spec, same client: bench/streamclient.py) and, for
each layout, measures over the client's window: delivered tok/s, ITL p50, and from /proc every tritonserver thread's
user + system CPU (the busiest 16 threads, by tid: tritonserver leaves its threads unnamed). A thread near 1.0
core is the hop that limits the path; `perf` (linux-tools, on the host) names it: `perf record -g` samples
tritonserver over the same window and the top (thread, library, symbol) entries by self time are kept per layout,
so a busy tid's symbols say which hop it is (gRPC completion queue, ensemble scheduler, BLS callbacks, source). Writes one JSON file; prints it.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))

import engine_speed  # noqa: E402
import streamclient  # noqa: E402

CLK_TCK = 100
TOP_THREADS = 16


def thread_cpu(pid: int) -> dict[str, float]:
    """{"name:tid": CPU seconds} of each thread of one process, from /proc/PID/task/*/stat."""
    out: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        out[f"{name}:{task.name}"] = (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime
    return out


def perf_start(pid: int, seconds: float, work: Path) -> tuple[subprocess.Popen, Path] | str:
    """`perf record -g` on tritonserver for `seconds`, or why not."""
    perf = shutil.which("perf")
    if perf is None:
        return "perf not installed"
    data = work / f"perf-{time.monotonic_ns()}.data"
    return subprocess.Popen([perf, "record", "-g", "-F", "499", "-p", str(pid), "-o", str(data), "--", "sleep",
                             f"{seconds:g}"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True), data


def perf_top(started: tuple[subprocess.Popen, Path] | str, lines: int = 60) -> list[str] | str:
    """The top symbols by self time of the recording, by thread name, library and symbol."""
    if isinstance(started, str):
        return started
    proc, data = started
    out = proc.communicate(timeout=600)[0]
    if proc.returncode != 0 or not data.exists():
        return f"perf record failed: {out.strip()[-300:]}"
    rep = subprocess.run(["perf", "report", "-i", str(data), "--stdio", "--no-children", "--sort", "tid,dso,symbol",
                          "-g", "none", "--percent-limit", "0.2"], capture_output=True, text=True, timeout=600)
    return [line for line in rep.stdout.splitlines() if line.strip() and not line.startswith("#")][:lines]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--levels", default="256")
    ap.add_argument("--processes", type=int, default=8)
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--warmup", type=float, default=3.0)
    ap.add_argument("--layouts", default="tensorrt_llm,tensorrt_llm_bls,ensemble")
    ap.add_argument("--itl-ms", type=float, default=2.0)
    ap.add_argument("--ttft-ms", type=float, default=20.0)
    ap.add_argument("--output-tokens", type=int, default=128)
    ap.add_argument("--input-tokens", type=int, default=128)
    ap.add_argument("--checkpoint", default=str(ROOT / "build" / "tiny-llama"))
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--no-perf", action="store_true")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "itl_hop_profile.json")
    args = ap.parse_args(argv)
    args.levels = [int(x) for x in args.levels.split(",")]
    if not Path(args.checkpoint).exists():
        from tritongen.demo.model import make_demo_model

        make_demo_model(Path(args.checkpoint))

    runs = []
    with tempfile.TemporaryDirectory(prefix="itl-hop-") as tmp:
        server, overrides = engine_speed.render_and_start(args, Path(tmp))
        pid = server.process.pid
        try:
            for level in args.levels:
                processes = min(args.processes, level)
                for layout in [x for x in args.layouts.split(",") if x]:
                    cfg = streamclient.Config(server.grpc_url, layout, processes, math.ceil(level / processes),
                                              args.duration, args.warmup, args.output_tokens, args.input_tokens)
                    samples: list[dict] = []
                    profile: list = []

                    samplers: list[threading.Thread] = []

                    def on_start(start: float, window: tuple[float, float]) -> None:
                        def sampler() -> None:
                            time.sleep(max(0.0, window[0] - time.monotonic()))
                            samples.append(thread_cpu(pid))
                            perf = None if args.no_perf else perf_start(pid, window[1] - window[0], Path(tmp))
                            time.sleep(max(0.0, window[1] - time.monotonic()))
                            samples.append(thread_cpu(pid))
                            if perf is not None:
                                profile.append(perf_top(perf))
                        samplers.append(threading.Thread(target=sampler, daemon=True))
                        samplers[-1].start()

                    r = streamclient.run(cfg, *streamclient.prepare(cfg), on_start=on_start)
                    for t in samplers:
                        t.join(timeout=900)
                    threads = {}
                    if len(samples) == 2:
                        used = {t: cpu - samples[0].get(t, 0.0) for t, cpu in samples[1].items()}
                        for t, cpu in sorted(used.items(), key=lambda kv: -kv[1])[:TOP_THREADS]:
                            threads[t] = round(cpu / args.duration, 3)
                    runs.append({"layout": layout, "streams": level, "tok_per_s": r.get("tok_per_s"),
                                 "itl_ms_p50": r.get("itl_ms_p50"), "errors": r.get("errors"),
                                 "text_exact": f"{r.get('text_exact')}/{r.get('text_checked')}",
                                 "offered_tok_per_s": round(engine_speed.offered_tok_per_s(
                                     level, args.output_tokens, args.ttft_ms, args.itl_ms), 1),
                                 "tritonserver_cores": round(sum(used.values()) / args.duration, 2) if threads else None,
                                 "busiest_threads_cores": threads,
                                 "perf_top": profile[0] if profile else None})
                    print(f"{layout:>16} {streamclient.summary_line(r)}", file=sys.stderr, flush=True)
        finally:
            server.stop()
    result = {"itl_ms": args.itl_ms, "overrides": {k: str(v) for k, v in overrides.items()}, "runs": runs}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
