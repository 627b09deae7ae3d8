"""tritongen.orchestrate without a server: what a load test's outcome becomes when the server died under it."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from tritongen.errors import CheckFailed, TritongenError
from tritongen.loadtests.runner import INTERRUPTED_EXIT
from tritongen.orchestrate import LocalRun, RunOptions


@dataclass
class _Process:
    returncode: int | None = None

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float) -> int | None:
        return self.returncode


@dataclass
class _Server:
    """The parts of TritonServer that the check reads; nothing answers on its port."""

    process: _Process = field(default_factory=_Process)
    http_url: str = "127.0.0.1:9"
    grace_s: float = 0.0
    log_path: None = None

    def failure_reasons(self) -> str:
        return "E1206 the model's reasons"


def _run(tmp_path, exited: int | None) -> LocalRun:
    run = LocalRun(RunOptions(out=tmp_path))
    run.server = _Server(_Process(exited))  # type: ignore[assignment]
    return run


def test_a_server_that_died_during_the_load_test_fails_the_run_with_its_reasons(tmp_path):
    with pytest.raises(CheckFailed, match="^tritonserver exited with code 1 during the load test:\nE1206"):
        _run(tmp_path, 1).checked(lambda: 0)


def test_the_load_tests_own_error_becomes_the_servers_death_when_the_server_died(tmp_path):
    def fails() -> int:
        raise TritongenError("no answer from 127.0.0.1:9")

    with pytest.raises(CheckFailed, match="exited with code 1"):
        _run(tmp_path, 1).checked(fails)


def test_ctrl_c_is_no_failure_of_the_plan_even_when_it_stopped_the_server(tmp_path):
    assert _run(tmp_path, 130).checked(lambda: INTERRUPTED_EXIT) == INTERRUPTED_EXIT


def test_a_live_server_leaves_the_load_tests_verdict_alone(tmp_path, monkeypatch):
    monkeypatch.setattr("tritongen.orchestrate.server_ready", lambda url: True)
    assert _run(tmp_path, None).checked(lambda: 1) == 1
