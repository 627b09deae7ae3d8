"""The native backends built with AddressSanitizer and UndefinedBehaviorSanitizer (build.sh --sanitize
address,undefined): the native unit tests' driver and a served burst (streams through the BLS and the ensemble,
half of them cancelled, then a SIGTERM with streams in flight) produce no sanitizer report.

Leak detection is off: tritonserver and the python stubs (which inherit LD_PRELOAD) free some of their own memory
only at exit, and LeakSanitizer would report that, not this repository's code. UBSan aborts on its first finding
(-fno-sanitize-recover), so a report also shows as a crashed server.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stopclients import Streams, clean
from test_bls_served import _render

pytestmark = pytest.mark.integration
HERE = Path(__file__).parent
REPORT = ("ERROR: AddressSanitizer", "runtime error:", "ERROR: UndefinedBehaviorSanitizer")


@pytest.fixture(scope="module")
def asan_backends(tmp_path_factory) -> Path:
    from tritongen import native

    base = tmp_path_factory.mktemp("asan")
    subprocess.run([str(native.BUILD_SCRIPT), "--prefix", str(base / "backends"), "--build-dir", str(base / "build"),
                    "--sanitize", "address,undefined"], check=True, capture_output=True)
    return base / "backends"


def _reports(folder: Path) -> list[str]:
    return [f"{p.name}: {p.read_text(errors='replace')[:2000]}" for p in folder.glob("san.*")
            if any(marker in p.read_text(errors="replace") for marker in REPORT)]


def test_the_native_unit_tests_are_clean_under_asan_and_ubsan(tmp_path):
    env = dict(os.environ, TRITONGEN_NATIVE_SANITIZE="address,undefined",
               ASAN_OPTIONS=f"detect_leaks=0:log_path={tmp_path}/san", UBSAN_OPTIONS=f"log_path={tmp_path}/san")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           str(HERE / "test_native_detok.py")], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:]
    assert _reports(tmp_path) == []


def test_a_served_burst_with_cancellations_and_a_stop_is_clean(asan_backends, tiny_model, tmp_path, monkeypatch):
    from tritongen import native
    from tritongen.serve import TritonServer

    monkeypatch.setenv(native.ENV_DIR, str(asan_backends))
    repo = _render(tiny_model, tmp_path / "repo", **{"synthetic.itl_ms": 2})
    logs = tmp_path / "sanitizer"
    logs.mkdir()
    libasan = subprocess.run(["g++", "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    env = dict(os.environ, LD_PRELOAD=libasan, ASAN_OPTIONS=f"detect_leaks=0:log_path={logs}/san",
               UBSAN_OPTIONS=f"print_stacktrace=1:log_path={logs}/san")
    server = TritonServer(repo, log_path=tmp_path / "tritonserver.log", env=env, grace_s=12, supervise=False)
    server.start(timeout=300)
    try:
        for model in ("tensorrt_llm_bls", "ensemble"):
            done = Streams(server.grpc_url, 16, max_tokens=40, model=model).start()
            cancelled = Streams(server.grpc_url, 16, max_tokens=400, model=model, cancel_after=3).start()
            assert [o for o in done.join(120) if o.ending != "final"] == []
            assert [o for o in cancelled.join(120) if o.ending != "cancelled"] == []
        held = Streams(server.grpc_url, 16).start()
        held.wait_streaming()
        t0 = time.monotonic()
        os.kill(server.process.pid, signal.SIGTERM)
        code = server.process.wait(timeout=60)
        assert [o for o in held.join(30) if not clean(o)] == []
    finally:
        server.stop(grace=5)
    assert _reports(logs) == []
    assert code == 0 and time.monotonic() - t0 < 12, server.log_tail()
