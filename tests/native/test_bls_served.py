"""The native BLS (tritongen_bls) in the real tritonserver: statistics, overload refusals, the API version check,
and a server stopped with streams in flight. The synthetic runtime's token source stands in for the engine."""

from __future__ import annotations

import json
import os
import re
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
# Triton's own queue rejection (core src/scheduler_utils.cc, PolicyQueue::Enqueue, r24.10 through main) is
# TRITONSERVER_ERROR_UNAVAILABLE "Exceeds maximum queue size": HTTP 503 and gRPC UNAVAILABLE. The BLS refuses with the
# same code and wording; the C API has no code that tritonserver maps to 429 or RESOURCE_EXHAUSTED, so only the
# OpenAI frontend (tritongen's own) answers 429. docs/streaming.md "Overload" lists each entry point with its source.
OVERLOADED = "[overloaded] Exceeds maximum queue size: tensorrt_llm_bls holds 2 requests"


@pytest.fixture(scope="module", params=["native", "python"])
def full(request, tiny_model, tmp_path_factory):
    """max_batch_size 1, max_queue_size 1: two long streams fill the BLS. Yields the server and its repository.
    The streams are slow (a token every 250 ms), so that holding the BLS full costs the machine next to nothing."""
    base = tmp_path_factory.mktemp(f"bls-full-{request.param}")
    repo = _render(tiny_model, base / "repo", **{"serving.bls": request.param, "serving.max_batch_size": 1,
                                                  "serving.bls_instances": 1, "synthetic.itl_ms": 250,
                                                  "serving.dynamic_batching": {"max_queue_size": 1}})
    server = start_server(repo, base / "tritonserver.log")
    # One after the other: preprocessing's own queue (also max_queue_size 1) would refuse two arriving at once.
    holders = []
    for _ in range(2):
        holders.append(Streams(server.grpc_url, 1).start())
        holders[-1].wait_streaming()
    assert all(o.ending == "none" for h in holders for o in h.outcomes), [h.outcomes for h in holders]
    yield server, repo
    server.stop()


@pytest.fixture(scope="module", params=["native", "python"])
def unbounded(request, tiny_model, tmp_path_factory):
    """max_batch_size 2 and the default max_queue_size 0, which in Triton is an unbounded queue."""
    base = tmp_path_factory.mktemp(f"bls-unbounded-{request.param}")
    repo = _render(tiny_model, base / "repo", **{"serving.bls": request.param, "serving.max_batch_size": 2,
                                                  "serving.bls_instances": 1})
    server = start_server(repo, base / "tritonserver.log")
    yield server
    server.stop()


def test_max_queue_size_0_queues_what_the_batch_cannot_run_as_triton_does(unbounded):
    # Three times the batch at once: the BLS refuses none (it did, above max_batch_size, when 0 counted as no room).
    outcomes = Streams(unbounded.grpc_url, 6, max_tokens=8).start().join(120)
    assert [o.ending for o in outcomes] == ["final"] * 6, outcomes
    assert all(o.responses >= 8 for o in outcomes), outcomes


def _post(url: str, body: dict) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


@pytest.mark.parametrize("endpoint", ["generate", "generate_stream"])
def test_a_full_bls_refuses_over_kserve_http_with_tritons_queue_error(full, endpoint):
    server, _ = full
    status, body = _post(f"http://{server.http_url}/v2/models/tensorrt_llm_bls/{endpoint}",
                         {"text_input": "hi", "max_tokens": 2, "stream": endpoint == "generate_stream"})
    # An error that arrives in a response: tritonserver's GenerateRequestClass::InferResponseComplete deletes it
    # (AddErrorJson) and then maps the deleted error's code (http_server.cc r24.10 lines 4186-4193, r26.07
    # 4405-4413), so the status is not the error's 503 but whatever the freed memory reads as (400 here).
    assert status not in (200, 429), (status, body)
    text = body.decode()
    if endpoint == "generate_stream":  # one server-sent event carries the error
        assert text.startswith("data: ") and text.endswith("\n\n"), text
        text = text[len("data: "):].strip()
    assert json.loads(text)["error"].startswith(OVERLOADED), text


def _stream_error(url: str, headers: dict | None = None):
    """The error that ends one ModelStreamInfer request to the full BLS."""
    import queue

    import tritonclient.grpc as grpcclient

    results: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(url)
    client.start_stream(callback=lambda result, error: results.put((result, error)), headers=headers)
    try:
        client.async_stream_infer("tensorrt_llm_bls", [grpc_tensor("text_input", np.array([[b"hi"]], np.object_)),
                                                       grpc_tensor("max_tokens", np.array([[2]], np.int32))])
        result, error = results.get(timeout=60)
        assert error is not None, result.get_response()
        return error
    finally:
        client.stop_stream(cancel_requests=True)
        client.close()


def test_a_full_bls_refuses_over_grpc_with_tritons_queue_error(full):
    server, _ = full
    # ModelStreamInferResponse carries only error_message (stream_infer_handler.cc r24.10 line 710): no code.
    error = _stream_error(server.grpc_url)
    assert error.message().startswith(OVERLOADED), error
    # A client that asks for gRPC errors (header triton_grpc_error) gets the stream ended with the error's code.
    # tritonserver 2.51 may then crash, after the client has the error (a use-after-free when a decoupled model's
    # final flag follows its error, fixed in 2.68 by server PR #8708): this must stay the last use of `full` in a
    # pytest process (the 429 tests below are serial and run in one of their own).
    error = _stream_error(server.grpc_url, headers={"triton_grpc_error": "true"})
    assert error.status() == "StatusCode.UNAVAILABLE", error
    assert OVERLOADED in error.message(), error


@pytest.mark.serial  # beside neighbours its frontend (native BLS) was never healthy within 120 s in 2 of 4 runs
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_a_full_bls_is_429_through_the_openai_frontend(full, openai_frontend, path, stream):
    body = {"model": openai_frontend.model, "max_tokens": 2, "stream": stream}
    body.update({"prompt": "hi"} if path == "/v1/completions" else {"messages": [{"role": "user", "content": "hi"}]})
    status, raw = _post(f"http://{openai_frontend.url}{path}", body)
    assert status == 429, (status, raw)
    error = json.loads(raw)["error"]
    assert error["type"] == "rate_limit_error" and "Exceeds maximum queue size" in error["message"], error


@pytest.fixture(scope="module")
def openai_frontend(full):
    from tritongen.frontend.server import FrontendWorkers
    from tritongen.plan.frontend import FrontendPlan

    server, repo = full
    config = FrontendPlan.read(repo)
    # The frontend as deployments run it (its own process, from the repository's frontend.json).
    frontend = FrontendWorkers(repo, server.grpc_url, workers=1, port=0).start()
    try:
        frontend.model = config.models[0].name
        yield frontend
    finally:
        frontend.stop()


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


# ------------------------------------------------------------------ malformed config values
def _set_parameter(config: Path, key: str, value: str) -> None:
    text = config.read_text()
    pattern = re.compile(r'(key:\s*"%s"\s*value:\s*\{\s*string_value:\s*)"[^"]*"' % re.escape(key))
    assert pattern.search(text), f"{config} has no parameter {key}"
    config.write_text(pattern.sub(lambda m: f'{m.group(1)}"{value}"', text, count=1))


@pytest.mark.parametrize("model, key, value, message", [
    ("tensorrt_llm", "ttft_ms", "fast", "tensorrt_llm: parameters.ttft_ms: expected a number >= 0, got 'fast'"),
    ("tensorrt_llm_bls", "max_in_flight", "many",
     "tensorrt_llm_bls: parameters.max_in_flight: expected an integer >= 0, got 'many'"),
], ids=["tokensource", "bls"])
def test_a_malformed_parameter_fails_the_load_naming_model_parameter_and_value(tiny_model, tmp_path, model, key,
                                                                                value, message):
    from tritongen.errors import CheckFailed
    from tritongen.serve import TritonServer

    repo = _render(tiny_model, tmp_path / "repo")
    _set_parameter(repo / model / "config.pbtxt", key, value)
    server = TritonServer(repo, log_path=tmp_path / "tritonserver.log", grace_s=5)
    with pytest.raises(CheckFailed):
        server.start(timeout=120)
    errors = [line for line in (tmp_path / "tritonserver.log").read_text().splitlines() if line.startswith("E")]
    assert any(f"failed to load '{model}'" in line and message in line for line in errors), errors


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
    from tritongen.ports import free_ports
    from tritongen.serve import SHM_PREFIX

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
