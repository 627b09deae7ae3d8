"""Cancellation through each entry (issue 37 item 4): a client that leaves a `tensorrt_llm_bls`, `tensorrt_llm` or
`ensemble` stream stops generation within a few steps when `ensemble` is the BLS itself (serving.ensemble: bls, the
default). With serving.ensemble: triton (Triton's ensemble scheduler, NVIDIA's shape) an `ensemble` stream is not
stopped, because the scheduler does not pass a cancellation on to a running step (server #6739,
docs/serving-behaviour.md); this test pins that too, so an upstream fix shows up as a change here. Synthetic runtime,
read through the token source's own counter of active requests."""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from specs import apply_overrides, render_spec
from stopclients import Streams
from streaming_text import start_server

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
MAX_TOKENS = 400  # 4 s at a 10 ms ITL: far longer than the few steps a cancellation may take


@pytest.fixture(scope="module", params=["bls", "triton"])
def server(request, tiny_model, tmp_path_factory):
    base = tmp_path_factory.mktemp("cancel")
    data = yaml.safe_load((ROOT / "examples" / "synthetic-cpu.yaml").read_text())
    data["model"]["checkpoint"] = str(tiny_model)
    apply_overrides(data, {"synthetic.ttft_ms": 5, "synthetic.itl_ms": 10, "serving.ensemble": request.param})
    (base / "spec.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    render_spec(base / "spec.yaml", base / "repo")
    s = start_server(base / "repo", base / "tritonserver.log")
    s.ensemble_entry = request.param
    yield s
    s.stop()


def _active(server) -> float:
    with urllib.request.urlopen(server.metrics_url, timeout=10) as r:
        text = r.read().decode()
    return sum(s.value for f in text_string_to_metric_families(text) if f.name == "tritongen_llm_active_requests"
               for s in f.samples if s.labels.get("model") == "tensorrt_llm")


@pytest.mark.parametrize("entry", ["tensorrt_llm_bls", "tensorrt_llm", "ensemble"])
def test_a_client_that_leaves_stops_generation(server, entry):
    stops = entry != "ensemble" or server.ensemble_entry == "bls"
    deadline = time.monotonic() + 30
    while _active(server) and time.monotonic() < deadline:  # the previous case's request, if any, is gone
        time.sleep(0.1)
    (outcome,) = Streams(server.grpc_url, 1, model=entry, max_tokens=MAX_TOKENS, cancel_after=5).start().join(60)
    assert outcome.ending == "cancelled", outcome
    if stops:  # read until it ends: 2 s is 200 steps, half of what the request would run if not stopped
        deadline = time.monotonic() + 2.0
        while _active(server) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _active(server) == 0, (entry, "still generating 2 s after the client left")
    else:  # 50 steps on: the ensemble scheduler did not pass the cancellation on
        time.sleep(0.5)
        assert _active(server) > 0, (entry, "stopped: did an upstream fix reach the ensemble scheduler?")
