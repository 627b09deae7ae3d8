"""The native BLS (tritongen_bls) in the real tritonserver: statistics, overload refusals, the API version check,
and a server stopped with streams in flight. The synthetic runtime's token source stands in for the engine."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import psutil
import pytest
import yaml

from specs import apply_overrides, render_spec
from stopclients import Streams, clean
from streaming_text import grpc_responses, grpc_tensor, start_server

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def _render(tiny_model: Path, out: Path, **overrides) -> Path:
    data = yaml.safe_load((ROOT / "examples" / "synthetic-cpu.yaml").read_text())
    data["model"]["checkpoint"] = str(tiny_model)
    apply_overrides(data, {"synthetic.ttft_ms": 5, "synthetic.itl_ms": 10, **overrides})
    spec = out.parent / f"{out.name}.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    render_spec(spec, out)
    return out


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.loads(r.read())


# ------------------------------------------------------------------ statistics
@pytest.fixture(scope="module")
def served(tiny_model, tmp_path_factory):
    base = tmp_path_factory.mktemp("bls-served")
    server = start_server(_render(tiny_model, base / "repo"), base / "tritonserver.log")
    yield server
    server.stop()


def test_statistics_span_each_streamed_request_in_order(served):
    t0 = time.monotonic()
    responses = grpc_responses(served.grpc_url, "tensorrt_llm_bls", {
        "text_input": np.array([[b"hello"]], np.object_), "max_tokens": np.array([[20]], np.int32),
        "stream": np.array([[True]])})
    client_ns = (time.monotonic() - t0) * 1e9
    assert len(responses) >= 2
    stats = _get(f"http://{served.http_url}/v2/models/tensorrt_llm_bls/stats")["model_stats"][0]
    infer = stats["inference_stats"]
    assert infer["success"]["count"] == 1 and infer["fail"]["count"] == 0
    parts = {k: infer[k]["ns"] for k in ("queue", "compute_input", "compute_infer", "compute_output")}
    # Ordered timestamps: no part wraps below zero (2^64 ns), and the parts add up to the request's span.
    assert all(0 <= v < client_ns for v in parts.values()), parts
    assert sum(parts.values()) <= infer["success"]["ns"] + 1_000_000
    # The span ends at the final response (20 tokens at 10 ms), not when execute returned.
    assert infer["success"]["ns"] >= 0.15e9 and infer["success"]["ns"] <= client_ns
    assert stats["execution_count"] >= 1 and stats["inference_count"] >= 1
    with urllib.request.urlopen(served.metrics_url, timeout=30) as r:
        metrics = r.read().decode()
    from prometheus_client.parser import text_string_to_metric_families

    values = {(s.name, s.labels.get("model")): s.value for f in text_string_to_metric_families(metrics)
              for s in f.samples}
    request_us = values[("nv_inference_request_duration_us_total", "tensorrt_llm_bls")]
    compute_us = values[("nv_inference_compute_infer_duration_us_total", "tensorrt_llm_bls")]
    assert 0.15e6 <= request_us <= client_ns / 1e3 and 0 <= compute_us <= request_us


# ------------------------------------------------------------------ overload
@pytest.fixture(scope="module", params=["native", "python"])
def full(request, tiny_model, tmp_path_factory):
    """max_batch_size 1, max_queue_size 1: two long streams fill the BLS."""
    base = tmp_path_factory.mktemp(f"bls-full-{request.param}")
    repo = _render(tiny_model, base / "repo", **{"serving.bls": request.param, "serving.max_batch_size": 1,
                                                  "serving.bls_instances": 1,
                                                  "serving.dynamic_batching": {"max_queue_size": 1}})
    server = start_server(repo, base / "tritonserver.log")
    # One after the other: preprocessing's own queue (also max_queue_size 1) would refuse two arriving at once.
    holders = []
    for _ in range(2):
        holders.append(Streams(server.grpc_url, 1).start())
        holders[-1].wait_streaming()
    assert all(o.ending == "none" for h in holders for o in h.outcomes), [h.outcomes for h in holders]
    yield server
    server.stop()


def test_a_full_bls_refuses_over_http_with_tritons_queue_error(full):
    # The code is UNAVAILABLE, as Triton's own queue rejection; /generate reports an error that arrives in a response
    # as 400 (tritonserver 2.51 through main deletes the error before mapping its code: GenerateRequestClass::
    # AddErrorJson), so the body is what is checked here.
    body = json.dumps({"text_input": "hi", "max_tokens": 2}).encode()
    req = urllib.request.Request(f"http://{full.http_url}/v2/models/tensorrt_llm_bls/generate", data=body,
                                 headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=60)
    assert err.value.code in (400, 503)
    message = json.loads(err.value.read())["error"]
    assert message.startswith("[overloaded] Exceeds maximum queue size: tensorrt_llm_bls holds 2 requests")


def test_a_full_bls_refuses_over_grpc_with_tritons_queue_error(full):
    with pytest.raises(RuntimeError, match=r"^\[overloaded\] Exceeds maximum queue size: tensorrt_llm_bls holds 2"):
        grpc_responses(full.grpc_url, "tensorrt_llm_bls", {"text_input": np.array([[b"hi"]], np.object_),
                                                            "max_tokens": np.array([[2]], np.int32)})


# ------------------------------------------------------------------ API version check
def test_a_backend_built_for_a_newer_api_refuses_to_load_naming_both_versions(tiny_model, tmp_path, monkeypatch):
    from tritongen import native
    from tritongen.errors import CheckFailed
    from tritongen.serve import TritonServer

    build, prefix = tmp_path / "build", tmp_path / "backends"
    # The token source alone (one translation unit) is enough: both backends share api_version.h.
    subprocess.run(["cmake", "-S", str(native.SOURCES), "-B", str(build), "-DTRITONGEN_REQUIRED_API_MINOR=99",
                    f"-DCMAKE_INSTALL_PREFIX={prefix}"], check=True, capture_output=True)
    subprocess.run(["cmake", "--build", str(build), "--target", "triton_tritongen_tokensource"], check=True,
                   capture_output=True)
    (prefix / "tritongen_tokensource").mkdir(parents=True)
    (build / "libtriton_tritongen_tokensource.so").rename(
        prefix / "tritongen_tokensource" / "libtriton_tritongen_tokensource.so")
    repo = tmp_path / "repo"
    (repo / "tensorrt_llm").mkdir(parents=True)
    rendered = _render(tiny_model, tmp_path / "rendered")
    (repo / "tensorrt_llm" / "config.pbtxt").write_text((rendered / "tensorrt_llm" / "config.pbtxt").read_text())
    (repo / "tensorrt_llm" / "1").mkdir()
    monkeypatch.setenv(native.ENV_DIR, str(prefix))
    server = TritonServer(repo, log_path=tmp_path / "tritonserver.log", grace_s=5)
    with pytest.raises(CheckFailed):
        server.start(timeout=120)
    # One error line (the model's load failure; the status table at the end repeats it, as for every model).
    lines = [line for line in (tmp_path / "tritonserver.log").read_text().splitlines()
             if "backend API" in line and line.startswith("E")]
    assert len(lines) == 1, lines
    assert ("tritongen_tokensource backend: needs Triton backend API 1.99 or a newer 1.x; this tritonserver offers "
            "1.19; use tritonserver 2.51 (NGC 24.10) or newer, or rebuild the backend for this server") in lines[0]


# ------------------------------------------------------------------ stopping with streams in flight
N_STREAMS = 16


def _leftovers(pids: list[int], regions: set[str]) -> tuple[list[int], list[str]]:
    alive = [pid for pid in pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
    return alive, sorted(r for r in regions if (Path("/dev/shm") / r).exists())


@pytest.mark.serial  # the server's exit within its grace period
def test_sigterm_to_tritonserver_ends_every_stream_cleanly(tiny_model, tmp_path):
    from tritongen.serve import TritonServer

    repo = _render(tiny_model, tmp_path / "repo")
    server = TritonServer(repo, log_path=tmp_path / "tritonserver.log", grace_s=12, supervise=False).start(300)
    try:
        stubs = list(server._stub_processes())
        streams = Streams(server.grpc_url, N_STREAMS).start()
        streams.wait_streaming()
        t0 = time.monotonic()
        os.kill(server.process.pid, signal.SIGTERM)  # as a container runtime stops the pod's main process
        code = server.process.wait(timeout=60)
        took = time.monotonic() - t0
        outcomes = streams.join(timeout=30)
        regions = set(server.shm_regions)
    finally:
        server.stop(grace=5)
    assert code == 0, server.log_tail()
    assert took < 12, took  # within the grace period: the server's own exit timeout did not expire
    assert [o for o in outcomes if not clean(o)] == []
    assert any("the server is stopping" in o.message for o in outcomes)
    assert _leftovers(stubs, regions) == ([], [])


def test_sigterm_to_serve_drains_and_ends_every_stream_cleanly(tiny_model, tmp_path):
    from tritongen.serve import SHM_PREFIX, free_ports

    repo = _render(tiny_model, tmp_path / "repo")
    http, grpc, metrics = free_ports(3)
    serve = subprocess.Popen([sys.executable, "-m", "tritongen.cli", "serve", str(repo), "--http-port", str(http),
                              "--grpc-port", str(grpc), "--metrics-port", str(metrics), "--grace-period", "14"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 300
        for line in serve.stdout:
            if line.startswith("ready"):
                break
            assert time.monotonic() < deadline and serve.poll() is None, line
        children = psutil.Process(serve.pid).children(recursive=True)
        regions = {a for c in children for a in c.cmdline() if a.startswith(SHM_PREFIX)}
        streams = Streams(f"127.0.0.1:{grpc}", N_STREAMS, max_tokens=150).start()
        streams.wait_streaming()
        t0 = time.monotonic()
        serve.send_signal(signal.SIGTERM)
        code = serve.wait(timeout=60)
        took = time.monotonic() - t0
        outcomes = streams.join(timeout=30)
    finally:
        if serve.poll() is None:
            serve.kill()
    assert code == 0 and took < 14 + 5, (code, took)
    # 150 tokens at 10 ms finish inside the 4 s drain: every stream completes, none is cut.
    assert [o for o in outcomes if o.ending != "final"] == []
    assert _leftovers([c.pid for c in children], regions) == ([], [])
