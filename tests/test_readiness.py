"""Readiness (tritonclient underneath): down, stopped, timed out, ready."""

from __future__ import annotations

import time

import pytest

from tritongen.readiness import model_states, server_ready, wait_until_ready


def test_a_port_nobody_listens_on_is_not_ready():
    assert server_ready("127.0.0.1:9") is False
    assert server_ready("not a host:port") is False


def test_wait_ends_on_timeout_or_when_the_process_stopped():
    start = time.monotonic()
    assert wait_until_ready("127.0.0.1:9", 0.6, interval=0.1) == "timeout"
    assert 0.5 <= time.monotonic() - start < 10
    assert wait_until_ready("127.0.0.1:9", 60, stopped=lambda: True) == "stopped"
    calls = []
    assert wait_until_ready("h:1", 60, probe=lambda url: calls.append(url) or len(calls) == 3, interval=0) == "ready"
    assert calls == ["h:1"] * 3


@pytest.mark.integration
def test_the_session_server_is_ready_and_every_model_is_loaded(triton):
    assert server_ready(triton.http_url) and server_ready(f"http://{triton.http_url}")
    states = model_states(triton.http_url)
    assert {"ensemble", "preprocessing", "postprocessing", "tensorrt_llm"} <= set(states)
    assert {state for state, _ in states.values()} == {"READY"}
