"""tritonserver's RSS after bursts of streams through the native BLS: does it settle, and if not, what grows.

    .venv/bin/python bench/rss_bursts.py [--streams 160] [--bursts 10] [--tokens 32]
        [--env MALLOC_ARENA_MAX=2 ...] [--trim] [--model-dir build/tiny-llama] > rss.json

Serves examples/synthetic-cpu.yaml (native BLS, native token source; its queue raised so that every stream of a
burst runs) on the embedded tritonserver, warms every path with one burst of 4 streams, then sends `--bursts`
bursts of `--streams` concurrent gRPC streams to tensorrt_llm_bls and waits for each to end. After each burst, once
the server is idle, it reads tritonserver's memory from /proc: RSS, anonymous RSS, the [heap] mapping's RSS and
that of the other anonymous mappings (glibc's per-thread malloc arenas, large allocations, thread stacks). With `--trim` it first
asks glibc to give free heap back (gdb calls malloc_trim(0) in tritonserver), so what is left is memory in use:
growth that `--trim` removes is freed memory glibc keeps, not a leak. `--env` sets variables for tritonserver
(e.g. MALLOC_ARENA_MAX). Writes one JSON object to stdout: each burst's figures, the growth per burst over the last 5
bursts, and `settled` (each of the last 5 bursts grows RSS by < 0.1 MiB).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
SETTLED_MIB = 0.1


def memory(pid: int) -> dict[str, float]:
    """tritonserver's RSS, anonymous RSS, the [heap] mapping's RSS and that of the other anonymous mappings (glibc's
    per-thread malloc arenas, large allocations, thread stacks), MiB."""
    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    out = {"rss_mib": int(status["VmRSS"].split()[0]) / 1024, "anon_mib": int(status["RssAnon"].split()[0]) / 1024}
    heap = other = 0.0
    mappings = 0
    name: str | None = None
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        head = line.split()
        if not head[0].endswith(":"):  # a mapping's first line: range perms offset dev inode [name]
            name = head[5] if len(head) > 5 else ""
        elif head[0] == "Rss:" and name is not None:
            if name == "[heap]":
                heap += int(head[1])
            elif name == "" and int(head[1]):
                other += int(head[1])
                mappings += 1
    out.update(heap_mib=heap / 1024, other_anon_mib=other / 1024, other_anon_mappings=mappings)
    return out


def malloc_trim(pid: int) -> str:
    """glibc's malloc_trim(0) inside the process (gdb attaches for a moment); gdb's last line."""
    done = subprocess.run(["gdb", "-p", str(pid), "-batch", "-nx", "-ex", "call (int) malloc_trim(0)"],
                          capture_output=True, text=True, timeout=300)
    lines = [line for line in done.stdout.splitlines() if line.startswith("$")]
    return lines[-1] if lines else (done.stderr.strip().splitlines() or ["gdb: no output"])[-1]


def heaptrack_attach(pid: int, work: Path) -> subprocess.Popen:
    """heaptrack injected into the running tritonserver; it records until the process exits."""
    for old in work.glob("heaptrack.*"):
        old.unlink()
    proc = subprocess.Popen(["heaptrack", "-p", str(pid)], cwd=work, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 300
    while not list(work.glob("heaptrack.*")) and time.monotonic() < deadline:
        time.sleep(0.5)
    return proc


def heaptrack_leaks(tracker: subprocess.Popen | None, work: Path, lines: int = 60) -> list[str] | str:
    """heaptrack_print's leak section: allocations made after the attach and not freed when the server exited."""
    if tracker is None:
        return "heaptrack did not attach"
    try:
        tracker.wait(timeout=300)
    except subprocess.TimeoutExpired:
        tracker.kill()
    files = sorted(work.glob("heaptrack.*"))
    if not files:
        return "heaptrack wrote no data: " + (tracker.stdout.read()[-500:] if tracker.stdout else "")
    out = subprocess.run(["heaptrack_print", "--print-leaks", "1", "--print-peaks", "0", "--print-allocators", "0",
                          "--print-temporary", "0",
                          "-f", str(files[-1])], capture_output=True, text=True, timeout=600).stdout.splitlines()
    start = next((i for i, line in enumerate(out) if "MEMORY LEAKS" in line), 0)
    tail = [line for line in out if line.startswith(("total", "peak", "leaked", "calls"))]
    return out[start:start + lines] + tail


def burst(url: str, streams: int, tokens: int) -> tuple[int, list[str]]:
    """`streams` concurrent streams to tensorrt_llm_bls; (answered, errors)."""
    from streaming_text import grpc_responses

    errors: list[str] = []

    def one(i: int) -> None:
        inputs = {"text_input": np.array([[f"Burst request {i} tells a story about"]], dtype=object),
                  "max_tokens": np.array([[tokens]], np.int32), "stream": np.array([[True]])}
        try:
            grpc_responses(url, "tensorrt_llm_bls", inputs, timeout=600)
        except Exception as err:  # noqa: BLE001 - counted, the bench goes on
            errors.append(str(err)[:200])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return streams - len(errors), errors


def idle(server, deadline_s: float = 120.0) -> None:
    """Until tensorrt_llm_bls holds no request (its pending count is 0)."""
    import urllib.request

    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        text = urllib.request.urlopen(server.metrics_url, timeout=10).read().decode()
        pending = [line for line in text.splitlines()
                   if line.startswith("nv_inference_pending_request_count") and 'model="tensorrt_llm_bls"' in line]
        if pending and all(float(line.rsplit(" ", 1)[1]) == 0 for line in pending):
            return
        time.sleep(0.2)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", default=str(ROOT / "build" / "tiny-llama"), help="made if missing")
    ap.add_argument("--streams", type=int, default=160)
    ap.add_argument("--bursts", type=int, default=10)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="for tritonserver")
    ap.add_argument("--trim", action="store_true", help="malloc_trim(0) in tritonserver before each reading")
    ap.add_argument("--heaptrack", action="store_true",
                    help="attach heaptrack after the first burst; report what was allocated then and never freed")
    ap.add_argument("--work", default="/tmp/tritongen-bench-rss")
    args = ap.parse_args()

    from specs import render_spec
    from streaming_text import start_server

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    data = yaml.safe_load((ROOT / "examples" / "synthetic-cpu.yaml").read_text())
    model_dir = Path(args.model_dir).resolve()
    if not model_dir.exists():
        from tritongen.demo.model import make_demo_model

        make_demo_model(model_dir)
    data["model"]["checkpoint"] = str(model_dir)
    data["synthetic"] = {"ttft_ms": 5, "itl_ms": 10}
    data["serving"]["dynamic_batching"] = {"max_queue_size": args.streams}  # every stream of a burst runs
    data["serving"]["bls"] = "native"
    spec = work / "spec.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    repo = work / f"repo-{os.getpid()}"
    render_spec(spec, repo)
    env = dict(kv.split("=", 1) for kv in args.env)
    os.environ.update(env)  # the server inherits them (serve's server_env starts from os.environ)
    server = start_server(repo, work / "tritonserver.log")
    pid = server.process.pid
    rows = []
    tracker = None

    def reading(label: str, answered: int, errors: list[str], seconds: float) -> None:
        idle(server)
        trimmed = malloc_trim(pid) if args.trim else None
        row = {"after": label, "answered": answered, "errors": len(errors), "seconds": round(seconds, 1),
               **{k: round(v, 2) for k, v in memory(pid).items()}}
        if trimmed is not None:
            row["malloc_trim"] = trimmed
        if errors:
            row["first_error"] = errors[0]
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)

    try:
        t0 = time.monotonic()
        answered, errors = burst(server.grpc_url, 4, args.tokens)
        reading("warm-up", answered, errors, time.monotonic() - t0)
        for i in range(1, args.bursts + 1):
            t0 = time.monotonic()
            answered, errors = burst(server.grpc_url, args.streams, args.tokens)
            reading(f"burst {i}", answered, errors, time.monotonic() - t0)
            if i == 1 and args.heaptrack:
                tracker = heaptrack_attach(pid, work)
    finally:
        server.stop(grace=60)
    leaks = heaptrack_leaks(tracker, work) if args.heaptrack else None
    growth = [round(b["rss_mib"] - a["rss_mib"], 2) for a, b in zip(rows, rows[1:])]
    last5 = growth[-5:]
    result = {"streams": args.streams, "bursts": args.bursts, "tokens": args.tokens, "env": env, "trim": args.trim,
              "rows": rows, "rss_growth_per_burst_mib": growth, "last5_growth_mib": last5,
              "last5_mean_growth_mib": round(sum(last5) / len(last5), 3) if last5 else None,
              "settled": bool(last5) and all(g < SETTLED_MIB for g in last5),
              "errors": sum(r["errors"] for r in rows)}
    if leaks is not None:
        result["heaptrack_leaks"] = leaks
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
