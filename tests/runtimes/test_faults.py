"""Fault and abuse suite for the hf runtime against the real tritonserver.

Every request must end with exactly one final response (tokens or an error naming the input) within a bound, a bad
request must not affect the next one, cancellation must stop generation, overload must be a clean rejection, and a
killed stub or parent must leave no hung stream and no orphaned process.
"""

from __future__ import annotations

import json
import queue
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import numpy as np
import psutil
import pytest

from tritongen import client

pytestmark = pytest.mark.integration

BOUND_S = 30.0  # every request must end within this, on a loaded 2-core machine


def _metric(server, name: str) -> float:
    text = urllib.request.urlopen(server.metrics_url, timeout=10).read().decode()
    match = re.search(rf'^{name}{{[^}}]*model="tensorrt_llm"[^}}]*}} (\S+)$', text, re.MULTILINE)
    assert match, f"{name} not exported"
    return float(match.group(1))


def _tensor(name, value, dtype):
    import tritonclient.grpc as grpcclient

    t = grpcclient.InferInput(name, list(value.shape), dtype)
    t.set_data_from_numpy(value)
    return t


def _llm_inputs(ids, n, length=None, **extra):
    types = {np.int32: "INT32", np.float32: "FP32", np.bool_: "BOOL", np.uint64: "UINT64"}
    inputs = [_tensor("input_ids", np.array([ids], np.int32), "INT32"),
              _tensor("input_lengths", np.array([[len(ids) if length is None else length]], np.int32), "INT32"),
              _tensor("request_output_len", np.array([[n]], np.int32), "INT32")]
    for name, value in extra.items():
        arr = np.asarray(value)
        if arr.ndim == 0:
            arr = arr.reshape(1, 1)
        inputs.append(_tensor(name, arr, types[arr.dtype.type]))
    return inputs


def _one_request(url, model, inputs, bound=BOUND_S):
    """Send one streamed request; return (responses, error, finals). Fails if it does not end within `bound`."""
    import tritonclient.grpc as grpcclient

    q: queue.Queue = queue.Queue()
    c = grpcclient.InferenceServerClient(url)
    c.start_stream(callback=lambda result, error: q.put((result, error)))
    responses, finals, error = [], 0, None
    try:
        c.async_stream_infer(model, inputs, enable_empty_final_response=True)
        deadline = time.monotonic() + bound
        while True:
            try:
                result, err = q.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                pytest.fail(f"{model}: no final response within {bound:.0f}s")
            if err is not None:
                error = str(err)
                break
            responses.append(result)
            final = result.get_response().parameters.get("triton_final_response")
            if final is not None and final.bool_param:
                finals += 1
                break
        # Nothing may follow the final response: the stream's end (stop_stream waits for the server to close it,
        # after every response the server sent) is the point where anything sent after the final one has arrived.
        c.stop_stream()
        assert q.empty(), f"{model}: a response arrived after the final one"
    finally:
        c.stop_stream()
        c.close()
    return responses, error, finals


@pytest.mark.parametrize("case, inputs, message", [
    ("empty prompt", lambda: _llm_inputs([5], 4, length=0), "input_ids: the prompt is empty"),
    ("out of vocabulary", lambda: _llm_inputs([5, 99999], 4), "input_ids: token id 99999 is outside the vocabulary"),
    ("negative id", lambda: _llm_inputs([-3, 5], 4), "input_ids: token id -3 is outside the vocabulary"),
    ("beyond the limit", lambda: _llm_inputs([5, 6], 100000), "request_output_len: 2 input tokens + 100000"),
    ("zero output", lambda: _llm_inputs([5, 6], 0), "request_output_len: 0 is less than 1"),
    ("NaN temperature", lambda: _llm_inputs([5, 6], 4, temperature=np.float32("nan"), runtime_top_k=np.int32(5)),
     "temperature: nan is not a finite number"),
    ("inf top_p", lambda: _llm_inputs([5, 6], 4, runtime_top_p=np.float32("inf")), "runtime_top_p: inf is not a finite"),
    ("two sequences in one request", lambda: [_tensor("input_ids", np.array([[5, 6], [7, 8]], np.int32), "INT32"),
                                              _tensor("input_lengths", np.array([[2], [2]], np.int32), "INT32"),
                                              _tensor("request_output_len", np.array([[4], [4]], np.int32), "INT32")],
     "batch size per request must be 1"),
    ("generation logits", lambda: _llm_inputs([5, 6], 4, return_generation_logits=np.bool_(True)),
     "return_generation_logits: not supported"),
    ("repetition penalty", lambda: _llm_inputs([5, 6], 4, repetition_penalty=np.float32(1.3)),
     "repetition_penalty: not supported"),
    ("greedy log probs", lambda: _llm_inputs([5, 6], 4, return_log_probs=np.bool_(True)), "return_log_probs:"),
])
def test_bad_llm_request_gets_one_error_and_harms_nothing(triton, case, inputs, message):
    t0 = time.monotonic()
    responses, error, _ = _one_request(triton.grpc_url, "tensorrt_llm", inputs())
    assert error is not None and message in error, (case, error)
    assert time.monotonic() - t0 < 5.0, f"{case}: the error took {time.monotonic() - t0:.1f}s"
    ok, error, finals = _one_request(triton.grpc_url, "tensorrt_llm", _llm_inputs([5, 6, 7], 3,
                                                                                  streaming=np.bool_(True)))
    assert error is None and finals == 1 and sum(r.as_numpy("output_ids").size for r in ok) == 3
    assert _metric(triton, "tritongen_llm_active_requests") == 0


@pytest.mark.parametrize("model", ["ensemble", "tensorrt_llm_bls"])
def test_bad_text_requests_end_with_an_error(triton, model):
    too_long = " ".join(["word"] * 3000)  # more tokens than the model's 2,048
    with pytest.raises(Exception, match="exceeds the model's limit|input_ids: .* exceed"):
        list(client.stream_grpc(triton.grpc_url, too_long, 4, model=model, timeout=BOUND_S))
    with pytest.raises(Exception, match="request_output_len: .* exceeds the model's limit"):
        list(client.stream_grpc(triton.grpc_url, "hello", 100000, model=model, timeout=BOUND_S))
    with pytest.raises(Exception, match="temperature: nan is not a finite number"):
        list(client.stream_grpc(triton.grpc_url, "hello", 4, model=model, temperature=float("nan"), top_k=5,
                                timeout=BOUND_S))
    # At most one response per token (tokens queued behind a slow sender are folded), at least one.
    assert 1 <= len(list(client.stream_grpc(triton.grpc_url, "hello", 4, model=model, min_tokens=4))) <= 4


def test_min_tokens_never_returns_the_end_id(triton):
    end_id = int(json.loads(urllib.request.urlopen(
        f"http://{triton.http_url}/v2/models/tensorrt_llm/config", timeout=10).read())["parameters"]["end_id"]
        ["string_value"])
    for prompt in ([5, 6, 7], [9, 10], [end_id]):
        responses, error, _ = _one_request(triton.grpc_url, "tensorrt_llm", _llm_inputs(
            prompt, 40, min_tokens=np.int32(40), streaming=np.bool_(True)))
        tokens = [t for r in responses for t in r.as_numpy("output_ids").reshape(-1).tolist()]
        assert error is None and len(tokens) == 40 and end_id not in tokens, (prompt, tokens)


def test_log_probs_are_real_for_sampled_requests(triton):
    responses, error, _ = _one_request(triton.grpc_url, "tensorrt_llm", _llm_inputs(
        [5, 6, 7], 6, runtime_top_k=np.int32(20), return_log_probs=np.bool_(True)))
    assert error is None
    final = responses[-1]
    lp = final.as_numpy("output_log_probs").reshape(-1)
    assert lp.size == 6 and np.all(lp <= 0) and np.any(lp < 0)
    assert abs(float(final.as_numpy("cum_log_probs").reshape(-1)[0]) - float(lp.sum())) < 1e-3
    plain, _, _ = _one_request(triton.grpc_url, "tensorrt_llm", _llm_inputs([5, 6, 7], 3))
    assert plain[-1].as_numpy("output_log_probs") is None  # not asked for, not invented


PROBE_TOKENS = 3


def _steps_stop(server):
    """(a, b): the step counter once the request has left the model, and that counter after a probe request of
    PROBE_TOKENS tokens has run to its end, less the probe's own steps; b > a if the cancelled request kept
    stepping.

    Cancellation takes one period plus one step, which a loaded machine stretches: wait for the model to drop the
    request (within BOUND_S) instead of a fixed sleep. The generation loop runs its steps one after another, so once
    the probe's final response has come, every step of the dropped request has landed in the counters; the sum over
    steps of the requests served then grows by exactly the probe's tokens unless another request stepped.
    """
    deadline = time.monotonic() + BOUND_S
    while _metric(server, "tritongen_llm_active_requests") > 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    a = _metric(server, "tritongen_llm_steps_total")
    served = _metric(server, "tritongen_llm_step_requests_total")
    probe, error, _ = _one_request(server.grpc_url, "tensorrt_llm",
                                   _llm_inputs([5, 6, 7], PROBE_TOKENS, min_tokens=np.int32(PROBE_TOKENS)))
    assert error is None, error
    others = _metric(server, "tritongen_llm_step_requests_total") - served - PROBE_TOKENS
    return a, a + others


def test_grpc_cancel_mid_stream_stops_the_step_counter(triton):
    import tritonclient.grpc as grpcclient

    responses: queue.Queue = queue.Queue()
    c = grpcclient.InferenceServerClient(triton.grpc_url)
    c.start_stream(callback=lambda result, error: responses.put((result, error)))
    c.async_stream_infer("tensorrt_llm", _llm_inputs([5, 6, 7], 1500, min_tokens=np.int32(1500),
                                                     streaming=np.bool_(True)))
    for _ in range(3):
        result, error = responses.get(timeout=BOUND_S)
        assert error is None
    before = _metric(triton, "tritongen_llm_steps_total")
    c.stop_stream(cancel_requests=True)
    c.close()
    a, b = _steps_stop(triton)
    assert a == b, "generation kept stepping after the cancellation"
    assert a - before < 1400, "the request ran to its end instead of being cancelled"
    assert _metric(triton, "tritongen_llm_active_requests") == 0


def test_http_client_going_away_stops_the_step_counter(triton):
    # tensorrt_llm_bls sees its request cancelled when the HTTP client goes away and ends the LLM request (`stop`).
    try:
        _http_going_away(triton)
    finally:  # leave no running request behind for the next test
        deadline = time.monotonic() + 120
        while _metric(triton, "tritongen_llm_active_requests") > 0 and time.monotonic() < deadline:
            time.sleep(0.5)


def _http_going_away(triton):
    body = json.dumps({"text_input": "Once upon a time", "max_tokens": 200, "min_tokens": 200,
                       "stream": True}).encode()
    sock = socket.create_connection(("127.0.0.1", triton.http_port), timeout=BOUND_S)
    sock.sendall(b"POST /v2/models/tensorrt_llm_bls/generate_stream HTTP/1.1\r\nHost: x\r\n"
                 b"Content-Type: application/json\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    got = b""
    while got.count(b"data:") < 3:
        chunk = sock.recv(4096)
        assert chunk, "the server closed the stream early"
        got += chunk
    before = _metric(triton, "tritongen_llm_steps_total")
    sock.close()
    a, b = _steps_stop(triton)
    assert a == b, "generation kept stepping after the HTTP client went away"
    assert a - before < 190
    assert _metric(triton, "tritongen_llm_active_requests") == 0


def test_overload_at_ten_times_max_batch_size_ends_every_request(triton):
    import tritonclient.grpc as grpcclient

    n = 80  # 10 x serving.max_batch_size of examples/tiny-cpu.yaml
    outcome: dict[int, str] = {}
    finals: dict[int, int] = {}

    def one(i: int) -> None:
        q: queue.Queue = queue.Queue()
        c = grpcclient.InferenceServerClient(triton.grpc_url)
        c.start_stream(callback=lambda result, error: q.put((result, error)))
        c.async_stream_infer("tensorrt_llm", _llm_inputs([5, 6, 7 + i % 50], 16, min_tokens=np.int32(16),
                                                         streaming=np.bool_(True)),
                             enable_empty_final_response=True)
        tokens = 0
        try:
            while True:
                result, error = q.get(timeout=120)
                if error is not None:
                    outcome[i] = f"error: {error}"
                    return
                tokens += result.as_numpy("output_ids").size if result.as_numpy("output_ids") is not None else 0
                final = result.get_response().parameters.get("triton_final_response")
                if final is not None and final.bool_param:
                    finals[i] = finals.get(i, 0) + 1
                    outcome[i] = f"ok {tokens}"
                    return
        except queue.Empty:
            outcome[i] = "hung"
        finally:
            c.stop_stream()
            c.close()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=180)
    assert len(outcome) == n and "hung" not in outcome.values()
    oks = [v for v in outcome.values() if v.startswith("ok")]
    errors = [v for v in outcome.values() if v.startswith("error")]
    assert all(v == "ok 16" for v in oks), oks
    # Served as well as refused: at least one full batch (serving.max_batch_size 8) ran to its end; a deployment
    # that refused everything under overload would fail here.
    assert len(oks) >= 8, (len(oks), errors[:3])
    assert all("maximum queue size" in v for v in errors), errors[:3]
    assert all(c == 1 for c in finals.values())
    assert _metric(triton, "tritongen_llm_active_requests") == 0
    assert _metric(triton, "tritongen_llm_step_requests_max") <= 8


def _family(pid: int) -> list[psutil.Process]:
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def _alive(procs) -> list[int]:
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p.pid)
        except psutil.NoSuchProcess:
            pass
    return out


def _serve(tiny_repo, tmp_path):
    """`tritongen serve` as a real subprocess; returns (process, tritonserver pid, grpc url)."""
    from tritongen.ports import free_port

    http, grpc, metrics = free_port(), free_port(), free_port()
    log = open(tmp_path / "serve.out", "w")
    proc = subprocess.Popen([sys.executable, "-m", "tritongen", "serve", str(tiny_repo), "--http-port", str(http),
                             "--grpc-port", str(grpc), "--metrics-port", str(metrics)],
                            stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        assert proc.poll() is None, (tmp_path / "serve.out").read_text()
        if "ready  http" in (tmp_path / "serve.out").read_text():
            server = [c for c in psutil.Process(proc.pid).children() if c.name() == "tritonserver"][0]
            return proc, server.pid, f"127.0.0.1:{grpc}"
        time.sleep(0.5)
    proc.kill()
    pytest.fail("tritongen serve was not ready")


def test_kill_9_of_the_llm_stub_ends_every_stream_and_serve_exits_nonzero(tiny_repo, tmp_path):
    import tritonclient.grpc as grpcclient

    proc, server_pid, url = _serve(tiny_repo, tmp_path)
    family = _family(server_pid)
    stub = [p for p in family[1:] if any("tensorrt_llm/1/model.py" in a for a in p.cmdline())][0]
    ended: dict[int, str] = {}
    clients = []
    for i in range(6):
        q: queue.Queue = queue.Queue()
        c = grpcclient.InferenceServerClient(url)
        c.start_stream(callback=lambda result, error, q=q: q.put((result, error)))
        c.async_stream_infer("tensorrt_llm", _llm_inputs([5, 6, 7 + i], 1500, min_tokens=np.int32(1500),
                                                         streaming=np.bool_(True)))
        clients.append((c, q))
    for c, q in clients:
        assert q.get(timeout=BOUND_S)[1] is None  # every stream is generating
    stub.kill()
    t0 = time.monotonic()
    for i, (c, q) in enumerate(clients):
        while i not in ended:
            try:
                result, error = q.get(timeout=max(0.1, BOUND_S - (time.monotonic() - t0)))
            except queue.Empty:
                ended[i] = "hung"
                break
            if error is not None:
                ended[i] = "error"
    assert set(ended.values()) == {"error"}, ended
    assert proc.wait(timeout=BOUND_S) == 1
    # serve names the stub and how it ended (tritongen.serve.causes): killed by SIGKILL, or died when tritonserver
    # had already collected its exit status.
    assert re.search(r"tensorrt_llm.* (was killed by SIGKILL|died)", (tmp_path / "serve.out").read_text())
    deadline = time.monotonic() + BOUND_S  # killed processes can take a moment to be reaped on a loaded machine
    while _alive(family) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _alive(family) == []
    for c, _ in clients:
        c.close()


def test_sigkill_of_serve_leaves_no_server_or_stub(tiny_repo, tmp_path):
    proc, server_pid, _ = _serve(tiny_repo, tmp_path)
    family = _family(server_pid)
    assert len(family) >= 4
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + BOUND_S
    while _alive(family) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _alive(family) == []


def test_taken_port_fails_fast_instead_of_reporting_another_server(tiny_repo):
    from tritongen.errors import EnvironmentMissing
    from tritongen.serve import TritonServer

    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        s.listen()
        port = s.getsockname()[1]
        t0 = time.monotonic()
        with pytest.raises(EnvironmentMissing, match=f"serve.http_port: port {port} is already in use"):
            TritonServer(tiny_repo, http_port=port).start(timeout=60)
        assert time.monotonic() - t0 < 5
