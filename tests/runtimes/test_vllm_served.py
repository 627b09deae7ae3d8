"""The vllm runtime served by the real tritonserver: the rendered config.pbtxt and model.json with the test double of
Triton's vLLM backend (tests/doubles/vllm; tests/vllm_double.py says what differs from the container), driven
through the clients' dialect (tritongen.runtimes.vllm.dialect): streamed and unstreamed text, the server's token
counts, tritongen's load test and the OpenAI frontend. vLLM itself never runs here."""

from __future__ import annotations

import json
import time
import urllib.request

import numpy as np
import pytest

from specs import run_cli
from streaming_text import PROMPTS, grpc_responses
from tritongen.runtimes.vllm.dialect import DIALECT
from vllm_double import backends_with_double, render_with_double, start

pytestmark = pytest.mark.integration
MODEL = "tensorrt_llm"


@pytest.fixture(scope="module")
def served(tmp_path_factory, tiny_model):
    tmp = tmp_path_factory.mktemp("vllm")
    server = start(render_with_double(tmp, tiny_model), tmp / "tritonserver.log",
                   backends_with_double(tmp / "backends"), itl_ms=5)
    server.spec = tmp / "vllm.yaml"  # what the repository was rendered from
    yield server
    server.stop()


def _inputs(prompt: str, max_tokens: int, *, stream: bool, **kw) -> dict:
    return {name: value for name, _, value in DIALECT.request_inputs(prompt, max_tokens, stream=stream, **kw)}


def _texts(results) -> list[str]:
    return [r.as_numpy("text_output")[0].decode("utf-8") for r in results]


def _counts(results, name: str) -> list[int]:
    return [int(r.as_numpy(name).reshape(-1)[0]) for r in results]


def test_the_rendered_config_is_served_by_the_backend_named_vllm(served):
    with urllib.request.urlopen(f"http://{served.http_url}/v2/models/{MODEL}/config") as r:
        config = json.loads(r.read())
    assert config["backend"] == "vllm" and config["model_transaction_policy"] == {"decoupled": True}
    assert config["parameters"]["REPORT_CUSTOM_METRICS"]["string_value"] == "true"


@pytest.mark.parametrize("prompt", PROMPTS)
def test_streamed_deltas_join_to_the_unstreamed_text_with_the_servers_counts(served, prompt):
    streamed = grpc_responses(served.grpc_url, MODEL, _inputs(prompt, 24, stream=True, temperature=0))
    (whole,) = grpc_responses(served.grpc_url, MODEL, _inputs(prompt, 24, stream=False, temperature=0))
    text = _texts([whole])[0]
    assert "".join(_texts(streamed)) == text and text
    assert not text.startswith(prompt), "exclude_input_in_output keeps the prompt out"
    # num_output_tokens: the tokens new in each response; their sum is the unstreamed response's count.
    assert len(streamed) > 1 and sum(_counts(streamed, "num_output_tokens")) == _counts([whole], "num_output_tokens")[0]
    assert set(_counts(streamed, "num_input_tokens")) == set(_counts([whole], "num_input_tokens"))
    reasons = [r.as_numpy("finish_reason")[0] for r in streamed]
    assert set(reasons[:-1]) <= {b"None"} and reasons[-1] == whole.as_numpy("finish_reason")[0] != b"None"


def test_min_tokens_and_stop_strings_go_to_vllm(served):
    (whole,) = grpc_responses(served.grpc_url, MODEL, _inputs("Café", 20, stream=False, temperature=0,
                                                             min_tokens=20))
    assert _counts([whole], "num_output_tokens") == [20] and whole.as_numpy("finish_reason")[0] == b"length"
    text = _texts([whole])[0]
    stop = text[6:9]
    for stream in (True, False):
        results = grpc_responses(served.grpc_url, MODEL, _inputs("Café", 20, stream=stream, temperature=0,
                                                                 min_tokens=20, stop=[stop]))
        assert "".join(_texts(results)) == text[:text.index(stop)], stream
        assert results[-1].as_numpy("finish_reason")[0] == b"stop"


@pytest.mark.parametrize("inputs, message", [
    ({"text_input": np.array([b"a"], dtype=np.object_), "stream": np.array([True]),
      "exclude_input_in_output": np.array([False])},
     "When streaming, `exclude_input_in_output` = False is not allowed."),
    # The backend's TritonSamplingParams.from_dict swallows vLLM's reason and returns None; what the client gets is
    # the failure to read lora_name of None (tests/fixtures/nvidia/vllm_backend-r26.01.json, double_behaviours).
    (_inputs("a", 0, stream=False), "Error generating stream: 'NoneType' object has no attribute 'lora_name'"),
    (_inputs("a", 4, stream=False, min_tokens=5),
     "Error generating stream: 'NoneType' object has no attribute 'lora_name'"),
    (_inputs("a", 4, stream=False, temperature=-0.5),
     "Error generating stream: 'NoneType' object has no attribute 'lora_name'"),
], ids=["prompt in a stream", "max_tokens 0", "min_tokens above max_tokens", "negative temperature"])
def test_a_bad_request_gets_one_error_and_others_go_on(served, inputs, message):
    with pytest.raises(RuntimeError, match=_escape(message)):
        grpc_responses(served.grpc_url, MODEL, inputs)
    assert _texts(grpc_responses(served.grpc_url, MODEL, _inputs("ok", 3, stream=False)))


def test_a_temperature_above_2_is_vllms_to_take(served):
    # vLLM 0.13.0 (vllm/sampling_params.py _verify_args) bounds temperature only below; OpenAI's [0, 2] is the
    # frontend's rule, not the backend's.
    assert _texts(grpc_responses(served.grpc_url, MODEL, _inputs("a", 3, stream=False, temperature=3.0, seed=1)))


def test_structured_outputs_constrain_the_backends_output(served):
    # The dialect's guide -> sampling_parameters["structured_outputs"] (a JSON string, `json` a dictionary), as the
    # backend reads it; the double constrains its output with XGrammar as vLLM does.
    import re

    import jsonschema

    schema = {"type": "object", "properties": {"city": {"enum": ["Paris", "Oslo"]}, "days": {"type": "integer",
              "minimum": 1, "maximum": 9}}, "required": ["city", "days"], "additionalProperties": False}
    for guide, check in ((("json_schema", json.dumps(schema)), lambda t: jsonschema.validate(json.loads(t), schema)),
                         (("regex", "[a-z]{4}"), lambda t: re.fullmatch("[a-z]{4}", t) or pytest.fail(t)),
                         (("ebnf_grammar", 'root ::= "yes" | "no"'), lambda t: t in ("yes", "no") or pytest.fail(t)),
                         (("json", ""), lambda t: t[:1] in "{[" or pytest.fail(t))):
        streamed = grpc_responses(served.grpc_url, MODEL, _inputs("a", 40, stream=True, temperature=0, guide=guide))
        (whole,) = grpc_responses(served.grpc_url, MODEL, _inputs("a", 40, stream=False, temperature=0, guide=guide))
        assert "".join(_texts(streamed)) == _texts([whole])[0], guide
        if guide[0] != "json":  # any JSON may not end within 40 tokens
            check(_texts([whole])[0])


def test_a_grammar_vllm_refuses_fails_the_request_as_the_backend_does(served):
    # vllm_backend r26.01 splats the constraint into StructuredOutputsParams unchecked; vLLM 0.13.0's
    # _validate_structured_output refuses it (XGrammar, then the "auto" backend's guidance fallback: "Grammar
    # error: ..."), which the backend answers as "Error generating stream: ..." (double_behaviours.structured_outputs).
    inputs = _inputs("a", 4, stream=False, guide=("ebnf_grammar", "root ::= foo"))
    with pytest.raises(RuntimeError, match=_escape("Error generating stream: Grammar error: ")):
        grpc_responses(served.grpc_url, MODEL, inputs)
    # Two constraints in one value fail inside from_dict: the client sees only the None it returns.
    params = {"max_tokens": 4, "structured_outputs": json.dumps({"regex": "a", "grammar": 'root ::= "a"'})}
    with pytest.raises(RuntimeError, match=_escape("'NoneType' object has no attribute 'lora_name'")):
        grpc_responses(served.grpc_url, MODEL, {"text_input": np.array([b"a"], dtype=np.object_),
                                                "stream": np.array([False]),
                                                "sampling_parameters": np.array([json.dumps(params).encode()],
                                                                                dtype=np.object_),
                                                "exclude_input_in_output": np.array([True])})
    assert _texts(grpc_responses(served.grpc_url, MODEL, _inputs("ok", 3, stream=False)))


def _escape(text: str) -> str:
    import re

    return re.escape(text)


# ---------------------------------------------------------------------------------------------- load test


def _generation_tokens(server) -> float:
    """The backend's own counter of generated tokens (vllm:generation_tokens_total)."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(server.metrics_url) as r:
        text = r.read().decode()
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == "vllm:generation_tokens_total" and s.labels.get("model") == MODEL)


@pytest.mark.parametrize("protocol", ["grpc", "http_stream"])
def test_the_load_test_passes_with_the_servers_counts(served, tmp_path, protocol):
    from tritongen.loadtests.samples import read_samples

    before = _generation_tokens(served)
    out = tmp_path / "lt"
    url = served.grpc_url if protocol == "grpc" else served.http_url
    proc = run_cli("loadtest", str(served.spec), "--protocol", protocol, "--url", url, "--metrics-url",
                      served.metrics_url, "-t", "3", "--out", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "client-counted" not in proc.stdout
    summary = json.loads((out / "loadtest.json").read_text())
    (level,) = summary["levels"]
    assert level["metrics"]["error_count"] == 0 and level["metrics"]["requests_without_token_count"] == 0
    assert level["tokens"]["counted_by"] == "server"
    # The report's own second source: the backend's counter (the runtime's output_token_counter) over the level.
    assert level["tokens"]["equal"] is True and level["tokens"]["server_output_tokens"] > 0
    samples = read_samples(summary["files"]["samples"])
    assert len(samples) >= 2 and all(s.ok and s.counted_by == "server" for s in samples)
    # The profile asks 16 tokens (min_tokens = max_tokens): the per-response counts add up to exactly that,
    # and the client's total is the backend's own counter over the run.
    assert all(s.output_tokens == 16 and len(s.response_times) > 1 and s.output_text for s in samples)
    assert sum(s.output_tokens for s in samples) == _generation_tokens(served) - before


# ---------------------------------------------------------------------------------------------- OpenAI frontend


@pytest.fixture(scope="module")
def client(served):
    openai = pytest.importorskip("openai")
    from tritongen.frontend.server import FrontendServer
    from tritongen.plan.frontend import FrontendPlan

    config = FrontendPlan.read(served.repository).model_copy(update={"port": 0})
    assert (config.models[0].triton_model, config.models[0].dialect) == (MODEL, "vllm")
    with FrontendServer(config, served.grpc_url) as server:
        yield openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=120)


def test_openai_completions_stream_exactly_the_unstreamed_text_with_the_servers_usage(client):
    name = client.models.list().data[0].id
    request = {"model": name, "prompt": "Once upon", "max_tokens": 12, "temperature": 0,
               "extra_body": {"min_tokens": 12}}
    whole = client.completions.create(**request)
    chunks = list(client.completions.create(**request, stream=True, stream_options={"include_usage": True}))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == whole.choices[0].text
    assert whole.choices[0].finish_reason == "length"
    assert whole.usage.completion_tokens == 12 and whole.usage.prompt_tokens > 0
    assert chunks[-1].usage == whole.usage


def test_openai_ignore_eos_runs_to_the_limit_with_the_servers_usage_on_every_chunk(client):
    """ignore_eos reaches vLLM as min_tokens = the limit; continuous_usage_stats puts vLLM's own counts so far on
    each chunk, as vLLM's server does."""
    name = client.models.list().data[0].id
    chunks = list(client.completions.create(
        model=name, prompt="Once upon", max_tokens=12, stream=True, extra_body={"ignore_eos": True},
        stream_options={"include_usage": True, "continuous_usage_stats": True}))
    counts = [c.usage.completion_tokens for c in chunks]
    assert counts == sorted(counts) and counts[-1] == 12 and chunks[-1].choices == []


def test_openai_errors_of_the_vllm_backend_are_client_errors_naming_the_field(client):
    """min_tokens above max_tokens never reaches the backend (which would answer only "'NoneType' object has no
    attribute 'lora_name'"); a prompt over max_model_len is vLLM's "longer than the maximum model length", a 400
    context_length_exceeded."""
    import openai

    name = client.models.list().data[0].id
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model=name, prompt="Hi", max_tokens=4, extra_body={"min_tokens": 5})
    assert info.value.body["param"] == "min_tokens" and "more than the request's maximum" in info.value.message
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model=name, prompt="word " * 5000, max_tokens=4)
    assert (info.value.body["param"], info.value.body["code"]) == ("prompt", "context_length_exceeded")
    assert "longer than the maximum model length" in info.value.message


def test_openai_chat_streams_exactly_the_unstreamed_text(client):
    name = client.models.list().data[0].id
    request = {"model": name, "messages": [{"role": "user", "content": "Tell a story"}],
               "max_completion_tokens": 16, "temperature": 0}
    whole = client.chat.completions.create(**request)
    chunks = list(client.chat.completions.create(**request, stream=True, stream_options={"include_usage": True}))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    text = whole.choices[0].message.content
    assert streamed == text and text
    assert chunks[-1].usage == whole.usage and whole.usage.completion_tokens <= 16
    stop = text[4:7]
    cut = client.chat.completions.create(**request, stop=[stop]).choices[0]
    assert (cut.message.content, cut.finish_reason) == (text[:text.index(stop)], "stop")


def _in_model(server) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(server.metrics_url) as r:
        text = r.read().decode()
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == "tritongen_double_requests")


def test_an_openai_client_that_disconnects_cancels_the_request_in_the_backend(client, served):
    stream = client.chat.completions.create(model=client.models.list().data[0].id, stream=True,
                                            messages=[{"role": "user", "content": "Talk"}], max_completion_tokens=200,
                                            extra_body={"min_tokens": 200})
    next(iter(stream))
    assert _in_model(served) == 1
    stream.close()
    deadline = time.monotonic() + 1.0  # 200 steps would take a second or more; the backend checks at each step
    while _in_model(served) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _in_model(served) == 0
