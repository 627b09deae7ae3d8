"""ThreadSanitizer over the native backends' threads: the BLS's watcher, Triton's response and release callbacks,
the token source's timer threads.

Builds both backends with `build.sh --sanitize thread`, serves the synthetic runtime with libtsan preloaded into
tritonserver (its own code is not instrumented; its pthread calls are intercepted, so the backends' locking is
checked against it; the python stubs are started without it, through a wrapper, since Python under a preloaded
TSan runtime does not start), runs bursts through the BLS and the ensemble with half the streams cancelled, then stops the
server with streams in flight (SIGTERM). Reports: ThreadSanitizer warnings found in the sanitizer logs, by
backend frame.

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
    env = dict(os.environ, LD_PRELOAD=libtsan,
               TSAN_OPTIONS=f"log_path={logs}/tsan:report_signal_unsafe=0:second_deadlock_stack=1:die_after_fork=0")
    server = TritonServer(repo, log_path=work / "tritonserver.log", env=env, grace_s=15, supervise=False,
                          extra_args=[f"--backend-directory={folder}"])
    server.start(timeout=600)
    outcomes = []
    try:
        for model in ("tensorrt_llm_bls", "ensemble"):
            done = Streams(server.grpc_url, args.streams, max_tokens=40, model=model).start()
            cancelled = Streams(server.grpc_url, args.streams, max_tokens=400, model=model, cancel_after=3).start()
            outcomes += done.join(300) + cancelled.join(300)
        held = Streams(server.grpc_url, args.streams).start()
        held.wait_streaming(300)
        os.kill(server.process.pid, signal.SIGTERM)
        code = server.process.wait(timeout=120)
        outcomes += held.join(60)
    finally:
        server.stop(grace=5)
    reports = []
    for path in sorted(logs.glob("tsan*")):
        for block in path.read_text(errors="replace").split("==================")[1:]:
            if "WARNING: ThreadSanitizer" in block:
                ours = [line.strip() for line in block.splitlines() if "libtriton_tritongen_" in line]
                reports.append({"kind": block.split("WARNING: ThreadSanitizer: ")[1].split("\n")[0].strip(),
                                "backend_frames": ours[:6]})
    result = {"build_s": round(build_s, 1), "exit_code": code, "streams": len(outcomes),
              "unclean": sum(o.ending not in ("final", "cancelled") and not clean(o) for o in outcomes),
              "tsan_reports": len(reports), "in_backend_frames": sum(bool(r["backend_frames"]) for r in reports),
              "reports": reports[:20], "logs": str(logs)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "reports"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
