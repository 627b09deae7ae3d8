"""Process hygiene: a restart is not refused by old connections, stubs do not outlive their server, and `serve`
leaves no process or shared-memory region behind however it ends."""

from __future__ import annotations

import contextlib
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
    from conftest import TritonserverOutsideIntegration

    fake = tmp_path / "bin" / "tritonserver"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    with pytest.raises(TritonserverOutsideIntegration, match="is not marked `integration`"):
        subprocess.Popen([str(fake), "--model-repository=/nowhere"])
    assert subprocess.run([sys.executable, "-c", "pass"], check=True).returncode == 0


# Every way the project starts a server, each refused by the guard before any process starts.
_STARTS = {
    "python -m tritongen serve": [sys.executable, "-m", "tritongen", "serve", "repo"],
    "python -m tritongen.cli serve": [sys.executable, "-m", "tritongen.cli", "serve", "repo"],
    "python -m tritongen.cli up": [sys.executable, "-m", "tritongen.cli", "up", "spec.yaml"],
    "python -m tritongen.cli demo": [sys.executable, "-m", "tritongen.cli", "demo"],
    "python -m tritongen.cli verify --load": [sys.executable, "-m", "tritongen.cli", "verify", "repo", "--load"],
    "tritongen up (console script)": ["/venv/bin/tritongen", "up", "spec.yaml"],
    "tritongen --debug serve": ["tritongen", "--debug", "serve", "repo"],
    "tritongen demo (shell string)": "tritongen demo",
    "tritongen verify --load (shell string)": "cd /x && tritongen verify repo --load",
}


@pytest.mark.parametrize("argv", list(_STARTS.values()), ids=list(_STARTS))
def test_the_guard_sees_each_way_tritongen_starts_a_server(argv):
    from conftest import TritonserverOutsideIntegration, starts_tritonserver

    assert starts_tritonserver(argv)
    with pytest.raises(TritonserverOutsideIntegration, match="is not marked `integration`"):
        subprocess.run(argv, shell=isinstance(argv, str), check=False)


def test_the_guard_sees_run_cli_start_a_server(tmp_path):
    from conftest import TritonserverOutsideIntegration
    from specs import run_cli

    for args in (("serve", str(tmp_path)), ("up", "spec.yaml"), ("demo",), ("verify", str(tmp_path), "--load")):
        with pytest.raises(TritonserverOutsideIntegration):
            run_cli(*args)


@pytest.mark.parametrize("argv", [
    [sys.executable, "-m", "tritongen", "serve", "repo", "--triton-url", "h:1"],  # the frontend alone
    [sys.executable, "-m", "tritongen.cli", "verify", "repo"],  # no --load: protobuf and wiring checks only
    [sys.executable, "-m", "tritongen.cli", "plan", "spec.yaml"],
    [sys.executable, "-m", "tritongen.cli", "loadtest", "spec.yaml", "--url", "h:1"],
    "tritongen render spec.yaml -o out",
    [sys.executable, "-m", "pip", "--version"],
], ids=["serve --triton-url", "verify", "plan", "loadtest", "render (shell string)", "another module"])
def test_the_guard_lets_commands_that_start_no_server_run(argv):
    from conftest import starts_tritonserver

    assert not starts_tritonserver(argv)


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


_STARTS_A_SERVER = """
import sys, time
from tritongen.serve import TritonServer
server = TritonServer(sys.argv[1], log_path=sys.argv[2], supervise=False).start(timeout=300)
print(server.process.pid, *server.stubs, flush=True)
time.sleep(600)
"""


@pytest.mark.integration
def test_a_server_and_its_stubs_end_when_the_process_that_started_it_is_killed(tiny_model, tmp_path):
    """SIGKILL to the process that started tritonserver (a killed test run or CLI): the server gets SIGTERM, stops,
    and its stubs with it."""
    repo = render_repo(tiny_model, tmp_path / "repo")
    parent = subprocess.Popen([sys.executable, "-c", _STARTS_A_SERVER, str(repo), str(tmp_path / "tritonserver.log")],
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    pids: list[int] = []
    try:
        pids = [int(x) for x in parent.stdout.readline().split()]
        assert len(pids) >= 4, (tmp_path / "tritonserver.log").read_text()[-2000:]  # the server and its stubs
        assert psutil.Process(pids[0]).name() == "tritonserver"
        parent.kill()
        parent.wait(timeout=10)
        assert _gone(pids, timeout=40) == []
        assert "Signal (15) received" in (tmp_path / "tritonserver.log").read_text()
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if parent.poll() is None:
            parent.kill()


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
