"""ThreadSanitizer over the native backends' threads: the BLS's watcher, Triton's response and release callbacks,
the token source's timer threads.

Builds both backends with `build.sh --sanitize thread`, serves the synthetic runtime with libtsan preloaded into
tritonserver only (its own code is not instrumented; its pthread calls are intercepted, so the backends' locking
is checked against it; a second preloaded library drops LD_PRELOAD, so the bash that tritonserver forks for each
python stub, and the stub, start without it), runs bursts through the BLS and the ensemble with half the streams cancelled, then stops the
server with streams in flight (SIGTERM; every thread's stack is saved if a model is still loaded 3 s before the exit
timeout). Reports: ThreadSanitizer warnings found in the sanitizer logs, counted by whether a backend is on their
stacks and whether a racing access's top frame is the backends' own code.

    python bench/native_tsan.py --out bench/results/native_tsan.json
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tritongen import native
from tritongen.demo.model import make_demo_model
from tritongen.serve import TritonServer, backend_dir

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "native"))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--streams", type=int, default=16)
    p.add_argument("--backends", type=Path, help="a --sanitize thread build to reuse (its --prefix)")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "native_tsan.json")
    args = p.parse_args(argv)

    from stopclients import Streams, clean
    from test_bls_served import _render
    work = Path(tempfile.mkdtemp(prefix="native-tsan-"))
    t0 = time.monotonic()
    backends = args.backends or work / "backends"
    if args.backends is None:
        subprocess.run([str(native.BUILD_SCRIPT), "--prefix", str(backends), "--build-dir", str(work / "build"),
                        "--sanitize", "thread"], check=True, capture_output=True)
    build_s = time.monotonic() - t0
    os.environ[native.ENV_DIR] = str(backends)
    folder = backend_dir(work / "backend-dir", native.BACKENDS)
    stub = folder / "python" / "triton_python_backend_stub"
    real = stub.resolve()
    stub.unlink()
    stub.write_text(f"#!/bin/sh\nunset LD_PRELOAD TSAN_OPTIONS\nexec {real} \"$@\"\n")
    stub.chmod(0o755)
    repo = _render(make_demo_model(work / "tiny-llama"), work / "repo", **{"synthetic.itl_ms": 2})
    logs = work / "tsan"
    logs.mkdir()
    libtsan = subprocess.run(["g++", "-print-file-name=libtsan.so"], capture_output=True, text=True).stdout.strip()
    # tritonserver forks `bash -c <stub command>` for each python model: with LD_PRELOAD inherited, bash runs under
    # the TSan runtime too. A second preloaded library drops LD_PRELOAD from the environment once both are loaded,
    # so only tritonserver (and the backends it dlopens) runs under TSan.
    (work / "drop_preload.c").write_text(
        '#include <stdlib.h>\n__attribute__((constructor)) static void drop(void) { unsetenv("LD_PRELOAD"); }\n')
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(work / "libdrop_preload.so"), str(work / "drop_preload.c")],
                   check=True)
    env = dict(os.environ, LD_PRELOAD=f"{libtsan}:{work / 'libdrop_preload.so'}",
               TSAN_OPTIONS=f"log_path={logs}/tsan:report_signal_unsafe=0:second_deadlock_stack=1:die_after_fork=0")
    server = TritonServer(repo, log_path=work / "tritonserver.log", env=env, grace_s=15, supervise=False,
                          extra_args=[f"--backend-directory={folder}"])
    server.start(timeout=600)
    outcomes = []
    hang: list[str] = []
    try:
        for model in ("tensorrt_llm_bls", "ensemble"):
            done = Streams(server.grpc_url, args.streams, max_tokens=40, model=model).start()
            cancelled = Streams(server.grpc_url, args.streams, max_tokens=400, model=model, cancel_after=3).start()
            outcomes += done.join(300) + cancelled.join(300)
        held = Streams(server.grpc_url, args.streams).start()
        held.wait_streaming(300)
        os.kill(server.process.pid, signal.SIGTERM)
        # A model still loaded 3 s before the exit timeout runs out: every thread's stack, the backends' kept.
        deadline = time.monotonic() + 120
        while server.process.poll() is None and time.monotonic() < deadline:
            if not hang and "Timeout 3: Found" in (work / "tritonserver.log").read_text(errors="replace"):
                stacks = subprocess.run(["gdb", "-p", str(server.process.pid), "-batch", "-nx", "-ex",
                                         "thread apply all bt 30"], capture_output=True, text=True,
                                        timeout=600).stdout
                (logs / "exit-stacks.txt").write_text(stacks)
                hang = [t for t in stacks.split("\nThread ")[1:] if "tritongen" in t] or ["no thread in tritongen"]
            time.sleep(0.5)
        code = server.process.poll()
        outcomes += held.join(60)
    finally:
        server.stop(grace=5)
    reports = [r for path in sorted(logs.glob("tsan*")) for r in parse_reports(path.read_text(errors="replace"))]
    in_code = [r for r in reports if r["top_frames_in_backend"]]
    distinct: dict[str, dict] = {}
    for r in in_code:
        distinct.setdefault(r["kind"] + " @ " + r["top_frames_in_backend"][0], r)
    result = {"build_s": round(build_s, 1), "exit_code": code, "streams": len(outcomes),
              "unclean": sum(o.ending not in ("final", "cancelled") and not clean(o) for o in outcomes),
              "tsan_reports": len(reports),
              "backend_on_stack": sum(bool(r["backend_frames"]) for r in reports),
              "in_backend_code": len(in_code), "in_backend_code_distinct": list(distinct.values()),
              "reports_with_backend_on_stack": [r for r in reports if r["backend_frames"]][:10], "logs": str(logs),
              "exit_stacks_in_backends": [t[:4000] for t in hang]}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "reports_with_backend_on_stack"}, indent=1))
    return 0


def parse_reports(text: str) -> list[dict]:
    """Each ThreadSanitizer report: its kind, the backend frames anywhere on its stacks, and the top frame of each of
    its stacks (the first below the TSan runtime) where that frame is the backends' own code. tritonserver is not
    instrumented: its atomics are invisible to TSan, so races between its own threads (gRPC, its response paths) are
    reported with the backend's call into tritonserver on the stack; only a top frame in the backend is ours."""
    out = []
    for block in text.split("==================")[1:]:
        if "WARNING: ThreadSanitizer" not in block:
            continue
        tops, access, seen_top = [], False, False
        for line in block.splitlines():
            frame = line.strip()
            if frame.startswith("#"):
                if access and not seen_top and "libtsan.so" not in frame:
                    seen_top = True
                    if "libtriton_tritongen_" in frame:
                        tops.append(frame.split(" ", 1)[1][:300])
            else:  # a section's heading: only the racing accesses' and the lock acquisitions' stacks count
                access = frame.startswith(("Read of", "Write of", "Previous read", "Previous write", "Atomic")) \
                    or "acquired here" in frame
                seen_top = False
        out.append({"kind": block.split("WARNING: ThreadSanitizer: ")[1].split("\n")[0].strip(),
                    "backend_frames": [line.strip()[:300] for line in block.splitlines()
                                       if "libtriton_tritongen_" in line][:6],
                    "top_frames_in_backend": tops})
    return out


if __name__ == "__main__":
    sys.exit(main())
