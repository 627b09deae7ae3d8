"""The walking skeleton end to end: rendered repository -> real tritonserver -> real tritonclient."""

from __future__ import annotations

import re
import threading
import time
import urllib.request
import warnings

import pytest

from tritongen import client
from tritongen.cli import main

pytestmark = pytest.mark.integration


def _metric(server, name: str) -> float:
    text = urllib.request.urlopen(server.metrics_url, timeout=10).read().decode()
    match = re.search(rf'^{name}{{[^}}]*model="tensorrt_llm"[^}}]*}} (\S+)$', text, re.MULTILINE)
    assert match, f"{name} not exported"
    return float(match.group(1))


def test_grpc_streaming_yields_tokens_incrementally(triton):
    chunks = list(client.stream_grpc(triton.grpc_url, "Once upon a time", 12, min_tokens=12))
    assert len(chunks) > 1
    assert "".join(chunks)


def test_http_generate_returns_text(triton):
    text = client.generate_http(triton.http_url, "Triton serves models", 8, min_tokens=8)
    assert isinstance(text, str) and text
    # exclude_input_in_output is on: the prompt is not echoed back.
    assert not text.startswith("Triton serves models")


def test_http_generate_stream_yields_several_events(triton):
    events = list(client.stream_http(triton.http_url, "The quick brown fox", 6, min_tokens=6))
    whole = client.generate_http(triton.http_url, "The quick brown fox", 6, min_tokens=6)
    # At most one event per token (the hf model folds tokens queued behind a slow sender into one response), more
    # than one for a 6-token stream, and together exactly the unstreamed text.
    assert 2 <= len(events) <= 6 and "".join(events) == whole


def test_greedy_is_deterministic_and_min_tokens_fixes_length(triton):
    a = client.generate_http(triton.http_url, "Streaming returns tokens", 10, min_tokens=10,
                             return_num_output_tokens=True)
    b = client.generate_http(triton.http_url, "Streaming returns tokens", 10, min_tokens=10)
    assert a == b
    chunks = list(client.stream_grpc(triton.grpc_url, "Streaming returns tokens", 10, min_tokens=10))
    # Streamed: at most one response per token (the hf model folds a request's queued tokens into one response
    # when its sender falls behind the decode steps), and together exactly the unstreamed text.
    assert 1 <= len(chunks) <= 10 and "".join(chunks) == b


def test_stop_word_ends_generation(triton):
    full = "".join(client.stream_grpc(triton.grpc_url, "Dynamic batching groups", 12, min_tokens=12))
    # A visible character past the start of the completion (chunk boundaries vary: compare text, not chunks).
    at = next((i for i, c in enumerate(full) if i >= 3 and c.isalnum()), None)
    assert at is not None, f"no visible text to stop on in {full!r}"
    stop = full[at]
    stopped = "".join(client.stream_grpc(triton.grpc_url, "Dynamic batching groups", 12, min_tokens=12,
                                         stop_words=[stop]))
    # Generation ends right after the first occurrence of the stop sequence (it may occur before `at`).
    assert stopped == full[: full.index(stop) + len(stop)]


def _step_counters(triton) -> tuple[float, float]:
    """(decode steps, sum over steps of the requests that got a token in it) so far: counters, so a test reads
    what happened in its own window as a difference."""
    return _metric(triton, "tritongen_llm_steps_total"), _metric(triton, "tritongen_llm_step_requests_total")


def test_eight_concurrent_requests_share_decode_steps(triton):
    tokens = 64
    steps_before, served_before = _step_counters(triton)
    results: dict[int, list[str]] = {}
    errors: list[BaseException] = []
    # Sent together, and long enough to overlap on a starved host (beside two CPU hogs, 24-token requests once ran
    # one after another).
    together = threading.Barrier(8)

    def one(i: int) -> None:
        try:
            together.wait(timeout=60)
            results[i] = list(client.stream_grpc(triton.grpc_url, f"Request number {i} asks", tokens,
                                                 min_tokens=tokens))
        except BaseException as err:  # collected and asserted below
            errors.append(err)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=180)
    assert errors == []
    assert sorted(results) == list(range(8))
    # At most one response per request per decode step: a request whose responses queue up behind the others'
    # gets them folded into fewer, larger chunks, never more than one per token.
    assert all(1 <= len(chunks) <= tokens and "".join(chunks) for chunks in results.values())
    # In-flight batching in this test's own window: the 8 x tokens tokens took fewer decode steps than tokens, so
    # some step served several of these requests (the session-wide maximum gauge could come from another test).
    steps_after, served_after = _step_counters(triton)
    assert served_after - served_before >= 8 * tokens
    assert steps_after - steps_before < served_after - served_before


def test_client_going_away_cancels_generation(triton):
    """A cancelled stream stops generation and frees the request.

    Called on the tensorrt_llm model directly: tritonserver's ensemble scheduler propagates cancellation only
    between steps (server #6739), so a step already generating through the ensemble runs to its end.

    The stream asks for 1,500 tokens (~4 s on 2 cores) and leaves at its first response; then the model's gauge must
    return to 0 and its step counter must show fewer than 1,500 steps. Read after the request ended, neither depends
    on when a scrape lands (on a starved host a scrape can take seconds and Triton can hand the client its first
    response late). An attempt whose request had already run to its end when the client left proves nothing and is
    made again, up to three times; a cancellation that is not honoured fails every attempt.
    """
    for _ in range(3):
        steps = _cancel_a_stream(triton)
        if steps < 1500:
            break
        warnings.warn("an attempt's request ran to its end before the client left (made again)", stacklevel=1)
    assert steps < 1500, f"generation was not stopped: {steps} steps for a request the client left"


def _cancel_a_stream(triton) -> float:
    """Start a 1,500-token stream, leave it at its first response; the steps the model ran for it."""
    import queue

    import numpy as np
    import tritonclient.grpc as grpcclient

    def tensor(name, value, dtype):
        t = grpcclient.InferInput(name, list(value.shape), dtype)
        t.set_data_from_numpy(value)
        return t

    def active() -> float:
        return _metric(triton, "tritongen_llm_active_requests")

    settle = time.monotonic() + 20  # an earlier test's request may still be ending
    while active() != 0 and time.monotonic() < settle:
        time.sleep(0.2)
    assert active() == 0
    steps_before = _metric(triton, "tritongen_llm_steps_total")
    responses: queue.Queue = queue.Queue()
    c = grpcclient.InferenceServerClient(triton.grpc_url)
    c.start_stream(callback=lambda result, error: responses.put((result, error)))
    c.async_stream_infer("tensorrt_llm", [
        tensor("input_ids", np.array([[5, 6, 7]], np.int32), "INT32"),
        tensor("input_lengths", np.array([[3]], np.int32), "INT32"),
        tensor("request_output_len", np.array([[1500]], np.int32), "INT32"),
        tensor("min_tokens", np.array([[1500]], np.int32), "INT32"),
        tensor("streaming", np.array([[True]]), "BOOL"),
    ])
    result, error = responses.get(timeout=120)
    assert error is None and result.as_numpy("output_ids").size >= 1
    c.stop_stream(cancel_requests=True)
    c.close()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and active() > 0:
        time.sleep(0.2)
    assert active() == 0, _stream_state(responses, triton)
    return _metric(triton, "tritongen_llm_steps_total") - steps_before


def _stream_state(responses, triton) -> str:
    """What the stream got after its first response, and the model's gauges."""
    got = []
    while not responses.empty():
        result, error = responses.get()
        got.append(repr(error) if error is not None else
                   f"{result.as_numpy('output_ids').size} ids, final "
                   f"{result.get_response().parameters['triton_final_response'].bool_param}")
    text = urllib.request.urlopen(triton.metrics_url, timeout=10).read().decode()
    gauges = [line for line in text.splitlines() if line.startswith("tritongen_llm_") and "model=" in line]
    return f"{len(got)} more responses, the last: {got[-3:]}; metrics: {gauges}"


def test_unsupported_sampling_option_is_a_clear_error(triton):
    with pytest.raises(Exception, match="beam_width: not supported by the hf runtime"):
        list(client.stream_grpc(triton.grpc_url, "x", 4, beam_width=2))


def test_cli_generate_streams_over_grpc(triton, capsys):
    assert main(["generate", "Once upon a time", "--url", triton.grpc_url, "--stream", "--max-tokens", "5",
                 "--min-tokens", "5"]) == 0
    assert capsys.readouterr().out.strip()


def test_verify_load_reports_every_model_ready(tiny_repo, capsys):
    assert main(["verify", str(tiny_repo), "--load"]) == 0
    out = capsys.readouterr().out
    for model in ("ensemble", "preprocessing", "tensorrt_llm", "postprocessing"):
        assert f" READY  {model}" in out


def test_verify_load_fails_with_the_servers_reason(tiny_repo, tmp_path, capsys):
    import shutil

    broken = tmp_path / "repo"
    shutil.copytree(tiny_repo, broken)
    cfg = broken / "postprocessing" / "config.pbtxt"
    cfg.write_text(cfg.read_text().replace(cfg.read_text().split('string_value: "')[1].split('"')[0],
                                           "/nonexistent/tokenizer"))
    assert main(["verify", str(broken), "--load"]) == 1
    err = capsys.readouterr().err
    assert "postprocessing" in err


def test_bls_model_streams_the_same_tokens_as_the_ensemble(triton):
    via_ensemble = list(client.stream_grpc(triton.grpc_url, "Once upon a time", 6, min_tokens=6))
    via_bls = list(client.stream_grpc(triton.grpc_url, "Once upon a time", 6, min_tokens=6,
                                      model="tensorrt_llm_bls"))
    assert "".join(via_bls) == "".join(via_ensemble)  # chunk boundaries follow the decode steps, not the path
    assert client.generate_http(triton.http_url, "Once upon a time", 6, min_tokens=6,
                                model="tensorrt_llm_bls") == "".join(via_ensemble)


def test_stop_leaves_no_server_or_stub_behind(tiny_repo):
    import psutil

    from tritongen.serve import TritonServer

    server = TritonServer(tiny_repo).start(timeout=240)
    family = [psutil.Process(server.process.pid), *psutil.Process(server.process.pid).children(recursive=True)]
    assert len(family) >= 4  # tritonserver + one stub per python model instance
    server.stop()
    assert [p.pid for p in family if p.is_running() and p.status() != psutil.STATUS_ZOMBIE] == []
