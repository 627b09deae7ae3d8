"""The native backends built with AddressSanitizer and UndefinedBehaviorSanitizer (build.sh --sanitize
address,undefined): the native unit tests' drivers (detok.h, the LoRA resend's .npy reader) and a served burst
(streams through the BLS and the ensemble, then a SIGTERM with streams in flight, which the BLS cancels) produce no
sanitizer report.

Leak detection is off: tritonserver and the python stubs (which inherit LD_PRELOAD) free some of their own memory
only at exit, and LeakSanitizer would report that, not this repository's code. UBSan aborts on its first finding
(-fno-sanitize-recover), so a report also shows as a crashed server.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
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
                           str(HERE / "test_native_detok.py"), str(HERE / "test_lora_resend_reader.py")], env=env,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:]
    assert _reports(tmp_path) == []


def test_a_served_burst_and_a_stop_with_streams_in_flight_are_clean(asan_backends, tiny_model, tmp_path,
                                                                      monkeypatch):
    from tritongen import native
    from tritongen.serve import TritonServer

    monkeypatch.setenv(native.ENV_DIR, str(asan_backends))
    repo = _render(tiny_model, tmp_path / "repo", **{"synthetic.itl_ms": 2})
    logs = tmp_path / "sanitizer"
    logs.mkdir()
    libasan = subprocess.run(["g++", "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    env = dict(os.environ, LD_PRELOAD=libasan, UBSAN_OPTIONS=f"print_stacktrace=1:log_path={logs}/san",
               ASAN_OPTIONS=f"detect_leaks=0:suppressions={HERE / 'asan.supp'}:log_path={logs}/san")
    server = TritonServer(repo, log_path=tmp_path / "tritonserver.log", env=env, grace_s=12, supervise=False)
    server.start(timeout=300)
    try:
        for model in ("tensorrt_llm_bls", "ensemble"):
            burst = Streams(server.grpc_url, 32, max_tokens=40, model=model).start()
            assert [o for o in burst.join(120) if o.ending != "final"] == []
        # Cancellation inside the backends: the stopping server makes the BLS cancel every LLM request in flight.
        # (Clients do not cancel gRPC streams here: with the sanitizer runtime preloaded, tritonserver's own gRPC
        # stream handler aborts on a cancelled stream, asan.supp says where.)
        held = Streams(server.grpc_url, 16).start()
        held.wait_streaming()
        os.kill(server.process.pid, signal.SIGTERM)
        assert [o for o in held.join(60) if not clean(o)] == []
        assert any("the server is stopping" in o.message for o in held.outcomes)
    finally:
        # Under the preloaded runtime tritonserver can hang in its own exit after unloading every model: killed.
        server.stop(grace=20)
    assert _reports(logs) == []
