"""Process hygiene: a restart is not refused by old connections, stubs do not outlive their server, and `serve`
leaves no process or shared-memory region behind however it ends."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from streaming_text import render_repo


def _time_wait_port() -> int:
    """A port with no listener whose last connection sits in TIME_WAIT (its server side closed first), left by a
    listener that set SO_REUSEADDR as tritonserver's do."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    conn, _ = listener.accept()
    conn.close()  # the side that closes first keeps TIME_WAIT on this port
    time.sleep(0.1)
    client.close()
    listener.close()
    return port


def test_a_test_without_the_integration_marker_cannot_start_tritonserver(tmp_path):
    """The guard of tests/conftest.py: `-m "not integration"` must never start a tritonserver."""
    from conftest import TritonserverOutsideIntegration, starts_tritonserver

    fake = tmp_path / "bin" / "tritonserver"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    with pytest.raises(TritonserverOutsideIntegration, match="is not marked `integration`"):
        subprocess.Popen([str(fake), "--model-repository=/nowhere"])
    with pytest.raises(TritonserverOutsideIntegration):
        subprocess.run([sys.executable, "-m", "tritongen", "serve", str(tmp_path)], check=False)
    assert starts_tritonserver(["/venv/bin/tritongen", "up", "spec.yaml"])
    # The frontend alone (serve --triton-url) and any other program may run.
    assert not starts_tritonserver([sys.executable, "-m", "tritongen", "serve", "repo", "--triton-url", "h:1"])
    assert subprocess.run([sys.executable, "-c", "pass"], check=True).returncode == 0


def test_a_port_whose_old_connections_wait_is_not_in_use():
    from tritongen.serve import port_in_use

    port = _time_wait_port()
    states = {c.status for c in psutil.net_connections("tcp") if c.laddr and c.laddr.port == port}
    assert psutil.CONN_TIME_WAIT in states, states
    assert not port_in_use(port)
    with socket.socket() as s:  # and a real listener is still seen
        s.bind(("0.0.0.0", 0))
        s.listen()
        assert port_in_use(s.getsockname()[1])


def _gone(pids, timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        if not alive:
            return []
        time.sleep(0.2)
    return alive


@pytest.mark.integration
def test_stubs_exit_when_their_server_is_killed(tiny_model, tmp_path):
    from tritongen.serve import TritonServer

    repo = render_repo(tiny_model, tmp_path / "repo")
    server = TritonServer(repo, log_path=tmp_path / "tritonserver.log", supervise=False).start(timeout=300)
    try:
        stubs = list(server.stubs)
        # preprocessing, postprocessing, tensorrt_llm (the default tensorrt_llm_bls is native: no stub)
        assert len(stubs) >= 3, server.stubs
        os.kill(server.process.pid, signal.SIGKILL)
        server.process.wait(timeout=10)
        assert _gone(stubs, timeout=15) == [], {p: server.stubs[p] for p in stubs if psutil.pid_exists(p)}
    finally:
        server.stop(grace=5)
    assert not [r for r in server.shm_regions if (Path("/dev/shm") / r).exists()]


@pytest.mark.integration
def test_ctrl_c_to_the_group_stops_serve_and_leaves_nothing(tiny_model, tmp_path):
    repo = render_repo(tiny_model, tmp_path / "repo")
    log = (tmp_path / "serve.log").open("wb")
    state = tmp_path / "state"
    serve = subprocess.Popen([sys.executable, "-m", "tritongen", "serve", str(repo)], stdout=log,
                             stderr=subprocess.STDOUT, start_new_session=True,
                             env={**os.environ, "TRITONGEN_STATE": str(state)})
    try:
        deadline = time.monotonic() + 300
        while not list(state.glob("*.json")) and time.monotonic() < deadline:
            assert serve.poll() is None, (tmp_path / "serve.log").read_text()
            time.sleep(0.5)
        tree = psutil.Process(serve.pid).children(recursive=True)
        stubs = [p for p in tree if "triton_python_backend_stub" in " ".join(p.cmdline())]
        regions = {a for p in stubs for a in p.cmdline() if a.startswith("triton_python_backend_shm_region_")}
        assert stubs and regions
        [state_file] = state.glob("*.json")
        assert json.loads(state_file.read_text())["pid"] == serve.pid  # where generate/loadtest find it
        started = time.monotonic()
        os.killpg(serve.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
        assert serve.wait(timeout=30) == 0
        assert time.monotonic() - started < 30
        assert _gone([p.pid for p in tree], timeout=5) == []
        assert not [r for r in regions if (Path("/dev/shm") / r).exists()]
        assert not state_file.exists()
    finally:
        if serve.poll() is None:
            os.killpg(serve.pid, signal.SIGKILL)
        log.close()
