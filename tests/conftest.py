"""Shared fixtures: the tiny demo model, its rendered repository, and one real tritonserver per session.

A test that starts a tritonserver (itself or through a fixture) must carry the `integration` marker, so that
`-m "not integration"` starts none: the guard below fails any other test the moment it starts one.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import tempfile
import weakref
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "tiny-cpu.yaml"

# Each pytest process keeps its `tritongen serve` state files apart: a test that asks for "the local serve" must find
# its own server, never one another worker (or the user) runs. An xdist worker inherits the controller's
# environment, so it always makes its own folder.
if "PYTEST_XDIST_WORKER" in os.environ or "TRITONGEN_STATE" not in os.environ:
    os.environ["TRITONGEN_STATE"] = tempfile.mkdtemp(prefix="tritongen-test-state-")


# A suite started in the background of a non-interactive shell (`make test &`, nohup, some CI runners) inherits
# SIGINT ignored, and an ignored signal stays ignored across exec: every process a test starts would then ignore the
# Ctrl-C the Ctrl-C tests send (they failed so beside a CPU hog started that way). A handler is reset to the default
# on exec, so with one here the processes tests start get SIGINT's default again.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


class TritonserverOutsideIntegration(AssertionError):
    """A test without the `integration` marker started a tritonserver."""


# tritongen commands that run a tritonserver of their own (`serve` unless --triton-url names a running one;
# `verify` with --load).
_SERVER_COMMANDS = ("up", "demo")
_PROGRAM_MODULES = ("tritongen", "tritongen.cli", "tritongen.__main__")


def _tritongen_args(argv: list[str]) -> list[str] | None:
    """The arguments after the tritongen program: `tritongen ...` (the console script), `python -m tritongen ...`,
    `python -m tritongen.cli ...` (tests/specs.py run_cli); None when argv runs another program."""
    for i, arg in enumerate(argv):
        if os.path.basename(arg) == "tritongen":
            return argv[i + 1:]
        if arg == "-m" and i + 1 < len(argv) and argv[i + 1] in _PROGRAM_MODULES:
            return argv[i + 2:]
    return None


def starts_tritonserver(args) -> bool:
    """Whether a command starts a tritonserver: the binary itself, or a tritongen command that runs one (`up`,
    `demo`, `serve` without --triton-url, `verify --load`), however tritongen is invoked (a shell string too)."""
    if isinstance(args, (str, bytes)):
        args = shlex.split(os.fsdecode(args))
    argv = [os.fsdecode(a) for a in ([args] if isinstance(args, os.PathLike) else args)]
    if any(os.path.basename(a) == "tritonserver" for a in argv):
        return True
    rest = _tritongen_args(argv)
    command = next((a for a in rest or () if not a.startswith("-")), None)
    if command in _SERVER_COMMANDS:
        return True
    return (command == "serve" and "--triton-url" not in rest) or (command == "verify" and "--load" in rest)


_current = {"item": None}


class _GuardedPopen(subprocess.Popen):
    def __init__(self, args, *rest, **kwargs):
        item = _current["item"]
        if item is not None and item.get_closest_marker("integration") is None and starts_tritonserver(args):
            raise TritonserverOutsideIntegration(
                f"{item.nodeid} starts a tritonserver ({' '.join(map(str, args))[:200]}) but is not marked "
                "`integration`: mark it (or the module: pytestmark = pytest.mark.integration)")
        super().__init__(args, *rest, **kwargs)


def pytest_configure(config):
    subprocess.Popen = _GuardedPopen
    _remember_started_servers()


# Exit codes of a process killed by SIGSEGV, SIGABRT, SIGBUS, SIGFPE or SIGILL.
_CRASH_CODES = tuple(-sig for sig in (signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS, signal.SIGFPE, signal.SIGILL))

# Every TritonServer a test started, so that a failing test's report says when one died under it (a test sees only
# "Socket closed"; the cause is in the server's log, which a CI run does not keep).
_started: "weakref.WeakValueDictionary" = weakref.WeakValueDictionary()  # id -> server (dataclasses: unhashable)


def _remember_started_servers() -> None:
    from tritongen.serve import TritonServer

    start, stop = TritonServer.start, TritonServer.stop

    def remembering(self, *args, **kwargs):
        _started[id(self)] = self
        return start(self, *args, **kwargs)

    def stopping(self, *args, **kwargs):
        # A server that crashed before its test stopped it, even where no test failed (a crash after the last
        # check). Only a crash's signals: tests kill servers on purpose (SIGKILL, SIGTERM) to test what follows.
        process = self.process
        if process is not None and process.poll() in _CRASH_CODES and not self._stopping.is_set() \
                and _started.pop(id(self), None) is not None:
            item = _current["item"]
            # Found at its stop: a module's server is stopped in its last test's teardown, so the crash may be
            # any earlier test's of that module.
            where = item.nodeid if item is not None else "(no test)"
            _record_crash(f"{where} (found dead at its stop; {self.log_path.parent.name})", process.poll(), self)
        return stop(self, *args, **kwargs)

    TritonServer.start, TritonServer.stop = remembering, stopping


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if not report.failed:
        return
    for key, server in list(_started.items()):
        process = server.process
        died = process is not None and process.poll() is not None and not server._stopping.is_set()
        if not (died or server.failure):  # a server its test stopped, or one still serving
            continue
        _started.pop(key, None)  # said once, in the first failure it caused
        code = None if process is None else process.poll()
        report.sections.append((f"tritonserver stopped under the test (exit code {code})",
                                f"{server.failure or ''}\n{server.log_tail(60)}\n(log: {server.log_path})"))
        _record_crash(item.nodeid, code, server)


def _record_crash(nodeid: str, code, server) -> None:
    """Append a server's death to $TRITONGEN_TEST_CRASHES (`make test` sets it and prints the file last): a CI
    log keeps its head and tail, and the report section above sits in the middle, where it is cut."""
    path = os.environ.get("TRITONGEN_TEST_CRASHES")
    if not path:
        return
    with open(path, "a", encoding="utf-8") as f:
        tail = "\n".join(line[:200] for line in server.log_tail(30).splitlines())
        known = next((why for mark, why in _KNOWN_CRASHES if mark in tail), "")
        f.write(f"== {nodeid}: tritonserver exit code {code} (log: {server.log_path})\n{known}"
                f"{server.failure or ''}\n{tail}\n")


# Crashes of the suite's tritonserver (2.51) that upstream fixed later, told by a line of the log: the record says so,
# so that a reader of a green run's list knows which entries are known.
_KNOWN_CRASHES = (
    ("HandleCancellation called even when the context was not cancelled",
     "known: tritonserver before 2.68 can crash after ending a stream with a triton_grpc_error error (server PR "
     "#8708; docs/serving-behaviour.md); the client had its error first\n"),
)


# `make test` runs the suite on two pytest-xdist workers, one test file at a time each (--dist loadfile
# --no-loadscope-reorder), in the order collected here: the longest files go first, so that no long file starts
# last and runs alone while the other worker idles. Longest first, as measured on the 2-core CI machine
# (docs/maintainers.md, "The suite's time"); the other files keep their order after these.
LONGEST_FIRST = (
    "tests/native/test_sanitizers.py",
    "tests/cli/test_walkthrough.py",
    "tests/serve/test_first_hour.py",
    "tests/native/test_bls_served.py",
    "tests/test_wheel.py",  # compiles the native backends once, then serves from a fresh venv
    "tests/tune/test_tune_served.py",
    "tests/runtimes/test_llmapi_served.py",
    "tests/runtimes/test_vllm_served.py",
    "tests/deploy/test_deploy_ship.py",
    "tests/runtimes/test_faults.py",
    "tests/frontend/test_openai_frontend.py",
    "tests/cli/test_integration.py",
    "tests/loadtests/test_loadtest.py",
)


def pytest_collection_modifyitems(config, items):
    if os.environ.get("PYTEST_XDIST_WORKER"):
        rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
        items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    # Set for setup, call and teardown alike: a session fixture starts its server in the setup of its first user.
    _current["item"] = item
    try:
        yield
    finally:
        _current["item"] = None


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    from tritongen.demo.model import make_demo_model

    return make_demo_model(tmp_path_factory.mktemp("models") / "tiny-llama")


@pytest.fixture(scope="session")
def tiny_spec_path(tmp_path_factory, tiny_model) -> Path:
    """examples/tiny-cpu.yaml with its checkpoint pointed at the session's tiny model."""
    data = yaml.safe_load(EXAMPLE.read_text())
    data["model"]["checkpoint"] = str(tiny_model)
    path = tmp_path_factory.mktemp("spec") / "tiny-cpu.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture(scope="session")
def tiny_repo(tmp_path_factory, tiny_spec_path) -> Path:
    from specs import render_spec

    out = tmp_path_factory.mktemp("repo") / "model_repository"
    render_spec(tiny_spec_path, out)
    return out


@pytest.fixture(scope="session")
def triton(tiny_repo, tmp_path_factory):
    """One real tritonserver serving the tiny repository for the whole session."""
    from streaming_text import start_server

    server = start_server(tiny_repo, tmp_path_factory.mktemp("logs") / "tritonserver.log")
    yield server
    server.stop()


@pytest.fixture
def gpu_here(monkeypatch):
    """Plan as on a machine with a GPU: `validate` and `plan` refuse a GPU placement without --inventory where NVML
    finds none (this machine), and these tests are about the plan, not the machine."""
    monkeypatch.setattr("tritongen.placement.inventory.no_local_gpu", lambda: None)
