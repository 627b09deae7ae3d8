"""The trtllm runtime served by the real tritonserver: the rendered config.pbtxt and model.yaml with the test double
of NVIDIA's llmapi model (tests/doubles/llmapi), driven through the clients' dialect
(tritongen.runtimes.llmapi.dialect)."""

from __future__ import annotations

import json
import queue
import time
import urllib.request

import numpy as np
import pytest

from llmapi_double import render_with_double, start
from specs import run_cli
from streaming_text import grpc_responses
from tritongen.runtimes.llmapi import dialect

pytestmark = pytest.mark.integration
MODEL = "tensorrt_llm"


@pytest.fixture(scope="module")
def served(tmp_path_factory, tiny_model):
    tmp = tmp_path_factory.mktemp("llmapi")
    server = start(render_with_double(tmp, tiny_model), tmp / "tritonserver.log")
    server.spec = tmp / "llmapi.yaml"  # what the repository was rendered from
    yield server
    server.stop()


def _inputs(prompt: str, max_tokens: int, *, stream: bool, **kw) -> dict:
    return {name: value for name, _, value in dialect.request_inputs(prompt, max_tokens, stream=stream, **kw)}


def _texts(results) -> list[str]:
    return [r.as_numpy("text_output")[0].decode("utf-8") for r in results]


def test_config_comes_from_model_yaml(served):
    with urllib.request.urlopen(f"http://{served.http_url}/v2/models/{MODEL}/config") as r:
        config = json.loads(r.read())
    assert config["model_transaction_policy"] == {"decoupled": True}
    assert config["max_batch_size"] == 0


def test_streams_the_whole_text_so_far_with_the_prompt_by_default(served):
    prompt = "Hello there"
    raw = {"text_input": np.array([prompt.encode()], dtype=np.object_), "streaming": np.array([True]),
           "sampling_param_max_tokens": np.array([12], dtype=np.int32)}
    results = grpc_responses(served.grpc_url, MODEL, raw)
    texts = _texts(results)
    assert len(texts) == 12, "one response per step; the last one carries the final text"
    assert all(t.startswith(prompt) for t in texts), texts[:2]
    assert all(len(b) >= len(a) for a, b in zip(texts, texts[1:])), "whole text so far, not deltas"
    assert all(r.as_numpy("num_output_tokens") is None and r.as_numpy("num_input_tokens") is None for r in results)


def test_streamed_deltas_equal_the_unstreamed_text(served):
    prompt = "Привет"
    streamed = _texts(grpc_responses(served.grpc_url, MODEL, _inputs(prompt, 40, stream=True)))
    (whole,) = _texts(grpc_responses(served.grpc_url, MODEL, _inputs(prompt, 40, stream=False)))
    assert not whole.startswith(prompt), "exclude-input keeps the prompt out"
    assert any(t.endswith("\ufffd") for t in streamed[:-1]), "the recital must split a character across steps"
    joined = dialect.WholeText()
    assert "".join(joined.feed(t, i == len(streamed) - 1) for i, t in enumerate(streamed)) == whole
    # Only a length cut may leave an incomplete character, at the very end (the LLM API's text does the same).
    assert "\ufffd" not in whole.rstrip("\ufffd")


def test_finish_reason_and_a_stop_sequence_fails_the_request_as_upstream_does(served):
    results = grpc_responses(served.grpc_url, MODEL, _inputs("Café", 30, stream=False))
    whole = _texts(results)[0]
    assert results[-1].as_numpy("finish_reason")[0] == b"length"
    # NVIDIA's helpers.py hands sampling_param_stop to SamplingParams as bytes, whose _setup tokenizes each element:
    # a Hugging Face tokenizer refuses bytes (facts.json, double_behaviours.stop_as_bytes). tritongen's dialect
    # therefore never sends it (test_llmapi.py); a raw request shows what the container does.
    stop = {"sampling_param_stop": np.array([whole[5:8].encode()], dtype=np.object_)}
    # The wording is the tokenizer's (transformers 5 here: a ValueError; older releases raise a TypeError).
    with pytest.raises(RuntimeError, match=r"Error generating request: text input must be of type `str`"):
        grpc_responses(served.grpc_url, MODEL, {**_inputs("Café", 30, stream=False), **stop})
    assert _texts(grpc_responses(served.grpc_url, MODEL, _inputs("ok", 3, stream=False)))


@pytest.mark.parametrize("inputs, message", [
    # Triton checks shapes against config.pbtxt's dims before the model sees the request.
    ({"text_input": np.array([[b"a"]], dtype=np.object_)}, "unexpected shape for input 'text_input'"),
    ({"text_input": np.array([b"a"], dtype=np.object_), "sampling_param_max_tokens": np.array([1, 2], np.int32)},
     "unexpected shape for input 'sampling_param_max_tokens'"),
    ({"text_input": np.array([b"a"], dtype=np.object_), "sampling_param_max_tokens": np.array([0], np.int32)},
     "Error generating request: max_tokens (0) must be at least 1"),
    ({"text_input": np.array([b"a"], dtype=np.object_), "sampling_param_max_tokens": np.array([100000], np.int32)},
     "and max_tokens (100000) exceed max_seq_len"),
    ({"text_input": np.array([b"a"], dtype=np.object_), "streaming": np.array([True]),
      "sampling_param_top_p": np.array([2.0], np.float32)}, "Error generating request: top_p (2.0)"),
], ids=["2-D prompt", "two max_tokens", "max_tokens 0", "too long", "top_p 2"])
def test_a_bad_request_gets_one_error_and_others_go_on(served, inputs, message):
    with pytest.raises(RuntimeError, match=_escape(message)):
        grpc_responses(served.grpc_url, MODEL, inputs)
    assert _texts(grpc_responses(served.grpc_url, MODEL, _inputs("ok", 3, stream=False)))


def _escape(text: str) -> str:
    import re

    return re.escape(text)


def _in_model(server) -> float:
    """The double's gauge of requests it holds (Triton's own counters count a decoupled request as a success
    when execute returns, so they cannot show a cancellation)."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(server.metrics_url) as r:
        text = r.read().decode()
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == "tritongen_double_requests")


def test_a_client_cancel_ends_the_request_in_the_model(served):
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(served.grpc_url)
    got: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: got.put((result, error)))
    client.async_stream_infer(MODEL, dialect.DIALECT.grpc_inputs("long", 200, stream=True), request_id="c1")
    result, error = got.get(timeout=30)
    assert error is None and _in_model(served) == 1
    client.stop_stream(cancel_requests=True)
    client.close()
    # 200 steps of 5 ms would take about a second more; the model checks cancellation every 100 ms.
    deadline = time.monotonic() + 0.6
    while _in_model(served) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _in_model(served) == 0


def test_a_stop_request_cancels_the_request_with_its_id(served):
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(served.grpc_url)
    got: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: got.put((result, error)))
    try:
        client.async_stream_infer(MODEL, dialect.DIALECT.grpc_inputs("long", 200, stream=True), request_id="r-7")
        result, error = got.get(timeout=30)
        assert error is None
        stop = grpcclient.InferInput("stop", [1], "BOOL")
        stop.set_data_from_numpy(np.array([True]))
        text = grpcclient.InferInput("text_input", [1], "BYTES")  # required by the config, unused by a stop
        text.set_data_from_numpy(np.array([b""], dtype=np.object_))
        client.async_stream_infer(MODEL, [text, stop], request_id="r-7")
        errors = []
        deadline = time.monotonic() + 1.0
        while len(errors) < 2 and time.monotonic() < deadline:
            result, error = got.get(timeout=1.0)
            if error is not None:
                errors.append(str(error))
        assert len(errors) == 2 and all("Request cancelled by client" in e for e in errors), errors
    finally:
        client.stop_stream(cancel_requests=True)
        client.close()


# ---------------------------------------------------------------------------------------------- OpenAI frontend


@pytest.fixture(scope="module")
def client(served):
    openai = pytest.importorskip("openai")
    from tritongen.frontend.server import FrontendServer
    from tritongen.plan.frontend import FrontendPlan

    config = FrontendPlan.read(served.repository).model_copy(update={"port": 0})
    assert config.models[0].dialect == "llmapi"
    with FrontendServer(config, served.grpc_url) as server:
        api = openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=120)
        yield api


def test_openai_chat_streams_exactly_the_unstreamed_text(client):
    messages = [{"role": "user", "content": "Say something in Russian"}]
    whole = client.chat.completions.create(model=client.models.list().data[0].id, messages=messages,
                                           max_completion_tokens=40)
    name = whole.model
    chunks = list(client.chat.completions.create(model=name, messages=messages, max_completion_tokens=40,
                                                 stream=True, stream_options={"include_usage": True}))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    text = whole.choices[0].message.content
    assert streamed == text and text and "\ufffd" not in text.rstrip("\ufffd")
    assert whole.choices[0].finish_reason == "length"  # the model's own finish reason
    # The model returns no counts, so usage is the deployment tokenizer's count of the text received. The double
    # generated exactly 40 tokens (finish `length`); re-tokenising their decoded text need not give 40 back (42
    # here: why the counts are labelled client-counted), but a count of the prompt, of characters or of responses
    # would be far off.
    assert abs(whole.usage.completion_tokens - 40) <= 4 and chunks[-1].usage.completion_tokens == \
        whole.usage.completion_tokens


def test_openai_stop_sequences_are_matched_by_the_frontend_which_cancels_the_stream(client, served):
    """The model fails every request that carries a stop sequence (facts.json, double_behaviours.stop_as_bytes), so
    the frontend sends none and matches them in the text; a stream is cancelled at the first one."""
    import openai

    name = client.models.list().data[0].id
    text = client.completions.create(model=name, prompt="Hi", max_tokens=30).choices[0].text
    stop = text[6:9]
    cut = client.completions.create(model=name, prompt="Hi", max_tokens=30, stop=[stop]).choices[0]
    assert (cut.text, cut.finish_reason) == (text[:text.index(stop)], "stop")
    # 1,500 steps of 5 ms would take 7 s: the stream ends at the stop sequence and the model's request with it.
    stream = client.completions.create(model=name, prompt="Hi", max_tokens=1500, stop=[stop], stream=True)
    pieces = [(c.choices[0].text, c.choices[0].finish_reason) for c in stream if c.choices]
    assert "".join(p for p, _ in pieces) == text[:text.index(stop)] and pieces[-1][1] == "stop"
    deadline = time.monotonic() + 1.5
    while _in_model(served) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _in_model(served) == 0
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model=name, prompt="Hi", max_tokens=4, extra_body={"min_tokens": 2})
    assert info.value.body["param"] == "min_tokens"


@pytest.mark.parametrize("kwargs, param", [
    ({"response_format": {"type": "json_object"}}, "response_format"),
    ({"tool_choice": "none"}, "tool_choice"),
    ({"extra_body": {"top_k": 5}}, "top_k"),  # unknown to the OpenAI API: refused, not ignored
    ({"extra_body": {"ignore_eos": True}}, "ignore_eos"),  # the model has no min_tokens to keep it going
    ({"max_completion_tokens": 100000}, "messages"),  # prompt + completion beyond max_seq_len
])
def test_openai_refusals_name_the_field(client, kwargs, param):
    import openai

    request = {"model": client.models.list().data[0].id, "messages": [{"role": "user", "content": "Hi"}],
               "max_completion_tokens": 4, **kwargs}
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(**request)
    assert info.value.body["param"] == param, info.value.body


def test_an_openai_client_that_disconnects_cancels_the_request_in_the_model(client, served):
    stream = client.chat.completions.create(model=client.models.list().data[0].id, stream=True,
                                            messages=[{"role": "user", "content": "Talk"}], max_completion_tokens=1500)
    next(iter(stream))
    assert _in_model(served) == 1
    stream.close()
    # 1,500 steps of 5 ms would take 7 s more; the frontend cancels the gRPC call, the model checks every 100 ms.
    deadline = time.monotonic() + 1.5
    while _in_model(served) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _in_model(served) == 0


def test_openai_text_response_format_is_accepted(client):
    answer = client.chat.completions.create(model=client.models.list().data[0].id, max_completion_tokens=4,
                                            messages=[{"role": "user", "content": "Hi"}],
                                            response_format={"type": "text"})
    assert answer.choices[0].message.content


# ---------------------------------------------------------------------------------------------- load test, verify


def _triton_metrics(server) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(server.metrics_url) as r:
        text = r.read().decode()
    # The parser names counter samples <family>_total.
    return {s.name.removesuffix("_total"): s.value for f in text_string_to_metric_families(text) for s in f.samples
            if s.labels.get("model") == MODEL and s.name.removesuffix("_total") in (
                "nv_inference_pending_request_count", "nv_inference_request_success")}


@pytest.mark.parametrize("protocol", ["grpc", "http_stream"])
def test_sweep_load_test_counts_tokens_on_the_client_and_says_so(served, tmp_path, protocol):
    from tritongen.loadtests.samples import read_samples

    before = _triton_metrics(served)
    out = tmp_path / "lt"
    url = served.grpc_url if protocol == "grpc" else served.http_url
    proc = run_cli("loadtest", str(served.spec), "--protocol", protocol, "--url", url, "--metrics-url",
                      served.metrics_url, "--sweep", "1,2", "-t", "3", "--out", str(out))
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr  # 1: an SLO of the 8B example's profile failed
    assert "client-counted" in proc.stdout

    summary = json.loads((out / "loadtest.json").read_text())
    assert [lv["level"] for lv in summary["levels"]] == [1, 2]
    for level in summary["levels"]:
        assert level["metrics"]["error_count"] == 0 and level["metrics"]["requests_without_token_count"] == 0
        assert level["tokens"]["counted_by"] == "client" and level["tokens"]["server_output_tokens"] is None
    everything = read_samples(summary["files"]["samples"])
    samples = [s for s in everything if s.ok]
    assert len(samples) >= 4
    # The HPA signal of this runtime (generator/tritongen/deploy/signals.py): Triton's pending count stays flat under load,
    # its success counter counts every request that arrived.
    after = _triton_metrics(served)
    assert after["nv_inference_pending_request_count"] == 0
    assert after["nv_inference_request_success"] - before["nv_inference_request_success"] == len(everything)
    for s in samples:
        assert s.counted_by == "client" and len(s.response_times) > 1
        # The double generates exactly the profile's 16 tokens per request (finish `length`; it has no end token).
        # The client's count re-tokenises the text received, which need not give 16 back, but comes close; a count
        # of the prompt, of characters or of responses would not.
        assert abs(s.output_tokens - 16) <= 2, (s.output_tokens, s.output_text)
        assert "\ufffd" not in s.output_text.rstrip("\ufffd")


def test_verify_load_serves_the_llmapi_repository(served, tmp_path):
    import shutil

    from llmapi_double import add_double

    bare = tmp_path / "bare"
    shutil.copytree(served.repository, bare)
    (bare / "tensorrt_llm" / "1" / "model.py").unlink()
    proc = run_cli("verify", str(bare), "--load")
    assert proc.returncode == 3 and "tensorrt_llm/1/model.py" in proc.stderr, proc.stdout + proc.stderr
    add_double(bare)
    proc = run_cli("verify", str(bare), "--load")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "READY  tensorrt_llm" in proc.stdout
