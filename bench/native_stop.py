"""Stop under load: SIGTERM to tritonserver and to `tritongen serve` with streams in flight through the native BLS.

Per repetition: a server of the synthetic runtime (native token source, native BLS) holds `--streams` gRPC streams
that would run for minutes; then SIGTERM goes to tritonserver (as a container runtime stops a pod) or to
`tritongen serve` (which drains for its grace period). Counted: crashes (a signal exit or a non-zero code),
processes of the server left alive (python stubs), /dev/shm regions left, clients without a final response or a
clean UNAVAILABLE, and the seconds from SIGTERM to exit.

    python bench/native_stop.py --streams 256 --reps 20 --out bench/results/native_stop_h200.json

(H200 host figure; on 2 CPU cores use e.g. --streams 32 --reps 2.)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tritongen.demo.model import make_demo_model
from tritongen.ports import free_ports
from tritongen.serve import SHM_PREFIX, TritonServer

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "native"))


def _repo(work: Path, itl_ms: float, max_batch_size: int) -> Path:
    import yaml

    from specs import apply_overrides, render_spec
    model = make_demo_model(work / "tiny-llama")
    data = yaml.safe_load((ROOT / "examples" / "synthetic-cpu.yaml").read_text())
    data["model"]["checkpoint"] = str(model)
    apply_overrides(data, {"synthetic.ttft_ms": 5, "synthetic.itl_ms": itl_ms,
                           "serving.max_batch_size": max_batch_size})
    spec = work / "spec.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    repo = work / "repo"
    render_spec(spec, repo)
    return repo


def _leftovers(pids, regions):
    import psutil

    alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    return alive, [r for r in regions if (Path("/dev/shm") / r).exists()]


def _stacks(pid: int, path: Path) -> None:
    """Every thread's stack of a server that did not exit (gdb where installed), for the diagnosis."""
    import shutil

    if shutil.which("gdb"):
        out = subprocess.run(["gdb", "-p", str(pid), "-batch", "-ex", "thread apply all bt"], capture_output=True,
                             text=True, timeout=120)
        path.write_text(out.stdout + out.stderr)
    else:  # kernel view: each thread's state and where it sleeps
        rows = []
        for task in sorted(Path(f"/proc/{pid}/task").iterdir()):
            comm = (task / "comm").read_text().strip()
            wchan = (task / "wchan").read_text().strip() if (task / "wchan").exists() else "?"
            state = (task / "stat").read_text().split(")")[-1].split()[0]
            rows.append(f"{task.name} {comm} {state} {wchan}")
        path.write_text("\n".join(rows) + "\n")
    print(f"server {pid} did not exit: thread stacks in {path}", file=sys.stderr)


# In tritonserver's log: a fatal signal (15 is the stop itself), an assertion, the exit timeout, glibc's heap checks.
CRASH_MARKS = re.compile(r"Signal \((?!15\))\d+\)|ASSERTION FAILED|Exit timeout expired|Segmentation fault|double free|"
                         r"malloc\(\)")


def _kill_serve(proc, children, grace: float, work: Path):
    """SIGKILL to serve; then wait for its tritonserver, which is not this process's child: its exit code cannot be
    read, so a crash is read from its log (a signal, an assertion, the exit timeout). (code, seconds to exit)."""
    import psutil

    server = next(c for c in children if c.name() == "tritonserver")
    log = Path(os.readlink(f"/proc/{server.pid}/fd/1"))
    t0 = time.monotonic()
    proc.kill()
    proc.wait()
    while time.monotonic() - t0 < grace + 60:
        try:
            if server.status() == psutil.STATUS_ZOMBIE:
                break
        except psutil.NoSuchProcess:
            break
        time.sleep(0.05)
    else:
        _stacks(server.pid, work / "stacks-serve-kill.txt")
        server.kill()
        return "hung", time.monotonic() - t0
    took = time.monotonic() - t0
    text = log.read_text(errors="replace") if log.exists() else ""
    marks = sorted(set(CRASH_MARKS.findall(text)))
    if marks:
        log.rename(work / f"tritonserver-serve-kill-{time.time_ns()}.log")
    return (f"log: {', '.join(marks)}" if marks else 0), took


def _one(target: str, repo: Path, work: Path, streams: int, grace: float, client_processes: int,
         entries: tuple[str, ...] = ("tensorrt_llm_bls",), budget_for: str = "serve") -> dict:
    import psutil

    from stopclients import ProcessStreams, Streams, clean

    http, grpc, metrics = free_ports(3)
    if target == "tritonserver":
        server = TritonServer(repo, http_port=http, grpc_port=grpc, metrics_port=metrics, grace_s=grace,
                              log_path=work / "tritonserver.log", supervise=False,
                              budget_for=budget_for).start(timeout=600)
        proc = server.process
    else:  # serve, or serve-kill: SIGKILL to serve, whose tritonserver gets SIGTERM from the kernel (PDEATHSIG)
        proc = subprocess.Popen([sys.executable, "-m", "tritongen.cli", "serve", str(repo), "--http-port", str(http),
                                 "--grpc-port", str(grpc), "--metrics-port", str(metrics), "--grace-period",
                                 str(grace)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for line in proc.stdout:
            if line.startswith("ready"):
                break
    children = psutil.Process(proc.pid).children(recursive=True)
    regions = {a for c in children for a in c.cmdline() if a.startswith(SHM_PREFIX)}
    url = f"127.0.0.1:{grpc}"
    clients = (ProcessStreams(url, streams, processes=client_processes, models=entries) if client_processes > 1
               else Streams(url, streams, model=entries[0])).start()
    clients.wait_streaming(timeout=600)
    t0 = time.monotonic()
    at_stop = sum(o.responses for o in getattr(clients, "outcomes", []))
    if target == "serve-kill":
        code, took = _kill_serve(proc, children, grace, work)
    else:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=grace + 60)
        except subprocess.TimeoutExpired:
            _stacks(proc.pid, work / f"stacks-{target}.txt")
            proc.kill()
            code = "hung"
        took = time.monotonic() - t0
    outcomes = clients.join(timeout=60)
    alive, shm = _leftovers([c.pid for c in children], regions)
    for pid in alive:
        os.kill(pid, signal.SIGKILL)
    for region in shm:
        (Path("/dev/shm") / region).unlink(missing_ok=True)
    log = work / "tritonserver.log"
    if target == "tritonserver" and log.exists():
        log.rename(work / f"tritonserver-{time.time_ns()}.log")
    return {"target": target, "exit_code": code, "crashed": code != 0,
            "seconds_to_exit": round(took, 2), "orphans": len(alive), "shm_left": len(shm),
            "clients": len(outcomes), "without_clean_final": sum(not clean(o) for o in outcomes),
            "stopping_errors": sum("the server is stopping" in o.message for o in outcomes),
            "completed": sum(o.ending == "final" for o in outcomes),
            "responses_per_client": round(sum(o.responses for o in outcomes) / max(1, len(outcomes)), 1),
            "responses_at_stop_per_client": round(at_stop / max(1, len(outcomes)), 1)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--streams", type=int, default=256)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--target", choices=("tritonserver", "serve", "serve-kill", "both"), default="both",
                   help="who gets the signal: SIGTERM to tritonserver or to serve, or SIGKILL to serve (serve-kill)")
    p.add_argument("--grace", type=float, default=30.0, help="grace period (s), spent as StopBudget.of(grace, 'serve') says (30: "
                   "drain 15 s, --exit-timeout-secs=27, as the generated compose file)")
    p.add_argument("--itl-ms", type=float, default=5.0)
    p.add_argument("--budget", choices=("serve", "compose", "k8s"), default="serve",
                   help="--target tritonserver: the stop budget (drain, --exit-timeout-secs) of this deployment kind")
    p.add_argument("--entries", default="tensorrt_llm_bls",
                   help="entry models the client processes take in turn, e.g. ensemble,tensorrt_llm_bls,tensorrt_llm "
                        "(needs --client-processes >= their count; one process: the first)")
    p.add_argument("--client-processes", type=int, default=8,
                   help="client processes holding the streams (one reads about 4,000 responses/s: fewer than the "
                        "server streams builds a backlog that a stopping server cannot deliver in its grace period)")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "native_stop.json")
    args = p.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="native-stop-"))
    print(f"work folder (server logs, stacks of a server that did not exit): {work}", file=sys.stderr)
    repo = _repo(work, args.itl_ms, max(args.streams, 64))
    targets = ("tritonserver", "serve") if args.target == "both" else (args.target,)
    runs = []
    for rep in range(args.reps):
        for target in targets:
            run = _one(target, repo, work, args.streams, args.grace, args.client_processes,
                       tuple(args.entries.split(",")), args.budget)
            run["rep"] = rep
            print(json.dumps(run), flush=True)
            runs.append(run)
    totals = {t: {k: sum(r[k] for r in runs if r["target"] == t)
                  for k in ("crashed", "orphans", "shm_left", "without_clean_final")} |
              {"max_seconds_to_exit": max(r["seconds_to_exit"] for r in runs if r["target"] == t)} for t in targets}
    result = {"streams": args.streams, "entries": args.entries, "budget": args.budget, "client_processes": args.client_processes, "reps": args.reps, "grace_s": args.grace, "itl_ms": args.itl_ms,
              "totals": totals, "runs": runs}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(totals, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
