"""The OpenAI frontend's pieces that need no server: protocol validation, stop sequences, error mapping,
the request's tensors against the rendered ensemble/BLS and Triton's own frontend's converter."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from specs import CharTokenizer
from tritongen.frontend.engine import Counts, Delta, Generation, build_request, classify
from tritongen.requests import Request
from tritongen.frontend.metrics import quantiles
from tritongen.frontend.schemas import ChatCompletionRequest, CompletionRequest
from tritongen.frontend.text import StopMatcher

# The inputs Triton's OpenAI frontend (server repo python/openai, r26.07, engine/utils/triton.py,
# _create_trtllm_generate_request) sends to an ensemble/BLS, with their data types.
TRITON_FRONTEND_INPUTS = {
    "text_input": "TYPE_STRING", "stream": "TYPE_BOOL", "max_tokens": "TYPE_INT32", "stop_words": "TYPE_STRING",
    "top_p": "TYPE_FP32", "frequency_penalty": "TYPE_FP32", "presence_penalty": "TYPE_FP32", "seed": "TYPE_UINT64",
    "temperature": "TYPE_FP32", "exclude_input_in_output": "TYPE_BOOL", "return_num_input_tokens": "TYPE_BOOL",
    "return_num_output_tokens": "TYPE_BOOL", "guided_decoding_guide_type": "TYPE_STRING",
    "guided_decoding_guide": "TYPE_STRING", "lora_task_id": "TYPE_UINT64",
}
TRITON_FRONTEND_OUTPUTS = {"text_output": "TYPE_STRING", "num_input_tokens": "TYPE_INT32",
                           "num_output_tokens": "TYPE_INT32"}
_DTYPE = {"BYTES": "TYPE_STRING", "BOOL": "TYPE_BOOL", "INT32": "TYPE_INT32", "FP32": "TYPE_FP32",
          "UINT64": "TYPE_UINT64"}


def _chat(**kw):
    return ChatCompletionRequest.model_validate({"model": "m", "messages": [{"role": "user", "content": "hi"}], **kw})


@pytest.mark.parametrize("kw, message", [
    ({"n": 2}, "n: 2 choices requested; this deployment returns one choice (n=1)"),
    ({"logit_bias": {"5": 1.0}}, "logit_bias: not supported; remove it"),
    ({"stream_options": {"include_usage": True}}, "stream_options: only allowed with stream=true"),
    ({"stop": ["a", "b", "c", "d", "e"]}, "stop: at most 4 sequences (got 5)"),
    ({"logprobs": True}, "logprobs: not available from this deployment (the runtime returns no log probs)"),
    ({"tool_choice": "required"}, "tool_choice: only allowed with tools"),
    ({"parallel_tool_calls": True}, "parallel_tool_calls: only allowed with tools"),
])
def test_unsupported_fields_are_rejected_by_name(kw, message):
    with pytest.raises(ValidationError) as info:
        _chat(**kw)
    assert message in str(info.value)


def test_token_limit_prefers_max_completion_tokens():
    assert _chat(max_tokens=5, max_completion_tokens=7).token_limit() == 7
    assert _chat(max_tokens=5).token_limit() == 5
    assert _chat().token_limit() is None


def test_completion_prompt_forms():
    assert CompletionRequest(model="m", prompt=["one"]).prompt == "one"
    for bad in (["a", "b"], "", [[1, 2]]):
        with pytest.raises(ValidationError):
            CompletionRequest(model="m", prompt=bad)


def test_stop_matcher_holds_back_a_possible_start_and_cuts_at_the_stop():
    m = StopMatcher(["END"])
    assert m.feed("abc E") == "abc "  # "E" may start "END"
    assert m.feed("N") == ""
    assert m.feed("Dtail") == ""
    assert m.stopped and m.flush() == ""
    m = StopMatcher(["END"])
    assert m.feed("abc E") == "abc "
    assert m.feed("xyz") == "Exyz"  # it did not
    assert m.flush() == "" and not m.stopped
    assert StopMatcher(["lo", "hello"]).feed("say hello") == "say "  # the earliest occurrence wins
    assert StopMatcher(["lo", "el"]).feed("hello") == "h"
    assert StopMatcher([]).feed("E") == "E"
    held = StopMatcher(["zz"])
    assert held.feed("az") == "a" and held.flush() == "z"


@pytest.mark.parametrize("message, status", [
    ("in ensemble 'ensemble', Exceeds maximum queue size", 429),
    ("Request for unknown model: 'ensemble' is not found", 503),
    ("[bad_request:presence_penalty] tensorrt_llm (hf): presence_penalty: not supported by the hf runtime (only 0.0); "
     "leave it unset", 400),
    ("in ensemble 'ensemble', [overloaded] Exceeds maximum queue size: tensorrt_llm_bls holds 8 requests", 429),
    ("[unavailable] tensorrt_llm (hf): the model is shutting down", 503),
    ("unexpected shape for input 'max_tokens' for model 'ensemble'", 400),
    ("CUDA error: an illegal memory access was encountered", 500),
])
def test_triton_errors_map_to_http_statuses(message, status):
    assert classify(message).status == status


def test_usage_sums_the_per_response_output_counts():
    counts = Counts()
    for n in (1, 2, 0, 4):  # tokens per response, as the C++ backend counts them (0: a response with none)
        counts.add(Delta("x", output_tokens=n, input_tokens=7, final=False))
    counts.add(Delta("", output_tokens=None, input_tokens=None, final=True))
    assert (counts.prompt_tokens, counts.completion_tokens, counts.complete) == (7, 7, True)
    assert not Counts().complete


def test_histogram_quantiles():
    q = quantiles({0.001: 5, 0.002: 10, float("inf"): 10})
    assert q["count"] == 10 and q["p50"] == pytest.approx(0.001) and q["p95"] == pytest.approx(0.0019)
    assert quantiles({float("inf"): 0})["p50"] is None


def test_request_tensors_are_inputs_of_the_rendered_ensemble_and_bls(rendered_configs):
    gen = Generation(Request("p", 4, True, ("x",), temperature=0.5, top_p=0.9, seed=3, presence_penalty=0.0,
                             frequency_penalty=0.0, min_tokens=1))
    request = build_request("ensemble", gen, "id")
    sent = {t.name: _DTYPE[t.datatype] for t in request.inputs}
    assert all(len(t.shape) == 2 and t.shape[0] == 1 for t in request.inputs)  # batch dimension first
    assert request.parameters["triton_enable_empty_final_response"].bool_param
    for model in ("ensemble", "tensorrt_llm_bls"):
        inputs, outputs = rendered_configs[model]
        assert {n: inputs.get(n) for n in sent} == sent, model
        # Triton's own OpenAI frontend (deploy option `implementation: triton`) can call the same models.
        assert {n: inputs.get(n) for n in TRITON_FRONTEND_INPUTS} == TRITON_FRONTEND_INPUTS, model
        assert {n: outputs.get(n) for n in TRITON_FRONTEND_OUTPUTS} == TRITON_FRONTEND_OUTPUTS, model


def test_guide_tensors_are_inputs_of_every_entry_model(rendered_configs):
    """The guide reaches the ensemble and the BLS (text path) and tensorrt_llm (ids path) in NVIDIA's tensors."""
    gen = Generation(Request("p", 4, True, guided_decoding_guide_type="json_schema",
                             guided_decoding_guide='{"type":"object"}'))
    for request, models in ((build_request("ensemble", gen, "id"), ("ensemble", "tensorrt_llm_bls")),
                            (_ids_request(gen), ("tensorrt_llm",))):
        sent = {t.name: _DTYPE[t.datatype] for t in request.inputs if t.name.startswith("guided")}
        assert sent == {"guided_decoding_guide_type": "TYPE_STRING", "guided_decoding_guide": "TYPE_STRING"}
        for model in models:
            assert {n: rendered_configs[model][0].get(n) for n in sent} == sent, model



def _ids_request(gen):
    from tritongen.frontend.ids import build_ids_request
    from tritongen.token_ids import Codec

    return build_ids_request(Codec(CharTokenizer()), gen, "id")


def test_temperature_alone_brings_top_p_one():
    from tritongen.frontend.service import generation

    def top_p(**kwargs):
        request = build_request("ensemble", generation(_route("ensemble"), _chat(**kwargs), "p"), "id")
        names = [t.name for t in request.inputs]
        if "top_p" not in names:
            return None
        return float(np.frombuffer(request.raw_input_contents[names.index("top_p")], np.float32)[0])

    assert top_p(temperature=0.8) == 1.0
    assert top_p(temperature=0.8, top_p=0.5) == 0.5
    assert top_p(temperature=0.0) is None and top_p() is None


@pytest.mark.parametrize("kw, param", [
    ({"n": 2}, "n"), ({"logprobs": True}, "logprobs"), ({"top_logprobs": 2}, "logprobs"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}, "strict": 1}]}, "tools"),
    ({"tool_choice": "auto"}, "tool_choice"), ({"tool_choice": "none"}, "tool_choice"),
    ({"tool_choice": "sometimes"}, "tool_choice"),
    ({"response_format": {"type": "json_object", "json_schema": {"name": "x"}}}, "response_format"),
    ({"response_format": {"type": "json_schema", "json_schema": {"schema": {}}}}, "response_format"),
    ({"frequency_penalty": 3}, "frequency_penalty"), ({"seed": -1}, "seed"),
    ({"guided_json": {}}, "guided_json"), ({"max_complettion_tokens": 4}, "max_complettion_tokens"),
])
def test_refused_chat_fields_are_named_in_error_param(kw, param):
    from fastapi.testclient import TestClient

    response = TestClient(_validation_app()).post("/v1/chat/completions", json={
        "model": "m", "messages": [{"role": "user", "content": "hi"}], **kw})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error", error


@pytest.mark.parametrize("body", [b'{"model": "m", "messages": [{"role": "user",', b"[1, 2]", b""],
                         ids=["invalid JSON", "not an object", "empty"])
def test_a_body_level_error_names_no_param_for_the_official_client(body):
    """OpenAI sends error.param null when the body as a whole is wrong; a character offset is no parameter."""
    import openai
    from fastapi.testclient import TestClient

    client = openai.OpenAI(base_url="http://testserver/v1", api_key="unused", max_retries=0,
                           http_client=TestClient(_validation_app()))
    with pytest.raises(openai.BadRequestError) as info:
        client.post("/chat/completions", cast_to=object, content=body,
                    options={"headers": {"Content-Type": "application/json"}})
    assert info.value.status_code == 400 and info.value.param is None, info.value.body
    assert info.value.type == "invalid_request_error" and info.value.body["message"]


def test_text_response_format_is_accepted():
    assert _chat(response_format={"type": "text"}).response_format.type == "text"


def _validation_app():
    """The frontend's error handling over a route that only validates (no Triton behind it)."""
    from fastapi import FastAPI

    from tritongen.frontend import errors

    app = FastAPI()
    errors.install(app)

    @app.post("/v1/chat/completions")
    async def chat(body: ChatCompletionRequest):
        return {}

    return app


@pytest.mark.parametrize("message, param, code", [
    ("[bad_request:seed] tensorrt_llm: seed: transformers' continuous batching has no per-request seed; leave it "
     "unset", "seed", None),
    ("[bad_request:frequency_penalty] tensorrt_llm: frequency_penalty: not supported by the hf runtime; leave it unset",
     "frequency_penalty", None),
    ("[context_length_exceeded:input_ids] tensorrt_llm: input_ids: 5000 tokens exceed the model's limit of 2048 "
     "tokens", "prompt", "context_length_exceeded"),
    ("Error generating request: the prompt (9 tokens) and max_tokens (4096) exceed max_seq_len (2048)", "prompt",
     "context_length_exceeded"),
    ("Error generating request: top_p (2.0) must be within [0, 1]", "top_p", None),
    # vLLM's processor, through Triton's vLLM backend (tests/fixtures/nvidia/vllm_backend-r26.01.json).
    ("Error generating stream: The decoder prompt (length 4097) is longer than the maximum model length of 4096. "
     "Make sure that `max_model_len` is no smaller than the number of text tokens.", "prompt",
     "context_length_exceeded"),
    ("[bad_request:request_output_len] tensorrt_llm: request_output_len: 0 is less than 1", "max_tokens", None),
    ("[bad_request:text_input] text_input: 900 bytes exceed the limit of 800 bytes", "prompt", None),
])
def test_model_errors_name_the_request_field(message, param, code):
    err = classify(message)
    assert (err.status, err.param, err.code) == (400, param, code)


def test_the_vllm_backends_swallowed_sampling_error_is_a_client_error():
    """Triton's vLLM backend answers every SamplingParams vLLM refuses with this one message (from_dict logs the
    reason and returns None): a 400 that says which values to check, not a 500."""
    err = classify("Error generating stream: 'NoneType' object has no attribute 'lora_name'")
    assert (err.status, err.kind, err.param) == (400, "invalid_request_error", None)
    assert "sampling parameters" in err.message and "min_tokens" in err.message
    # The same words from anything else stay a server error.
    assert classify("Error generating stream: 'NoneType' object has no attribute 'outputs'").status == 500


def test_a_guide_vllm_refuses_is_a_client_error():
    # vLLM 0.13.0 validates the structured_outputs constraint itself (the guidance fallback's "Grammar error: ...",
    # vllm/v1/structured_output/backend_guidance.py; the backend's "Error generating stream: ..." around it).
    for message in ("Error generating stream: Grammar error: undefined rule foo",
                    "Error generating stream: structured_outputs.grammar cannot be an empty string"):
        err = classify(message)
        assert (err.status, err.kind) == (400, "invalid_request_error") and message in err.message
    assert classify("Error generating stream: KeyError('grammar')").status == 500


def test_runtime_request_errors_are_client_errors():
    for message in ("[bad_request:seed] tensorrt_llm: seed: transformers' continuous batching has no per-request "
                    "seed; leave it unset", "[bad_request:temperature] tensorrt_llm: temperature: -1.0 is negative",
                    "[bad_request:runtime_top_p] runtime_top_p: 2.0 is outside [0, 1]"):
        assert classify(message).status == 400, message
    assert classify("[internal] tensorrt_llm: internal error while admitting the request: KeyError()").status == 500
    # The kind decides, not the words: an internal error that happens to read like a bad input is still a 500.
    assert classify("[internal] tensorrt_llm: internal error: ValueError('must be positive')").status == 500


@pytest.fixture(scope="module")
def rendered_configs(tiny_repo):
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    out = {}
    for model in ("ensemble", "tensorrt_llm_bls", "tensorrt_llm"):
        config = text_format.Parse((tiny_repo / model / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())
        dtype = model_config_pb2.DataType.Name
        out[model] = ({i.name: dtype(i.data_type) for i in config.input},
                      {o.name: dtype(o.data_type) for o in config.output})
    return out


def test_preprocessing_applies_no_chat_template():
    """The chat template has one owner, the frontend: the tokenizer step must only tokenize."""
    from tritongen import served

    source = served.source("preprocessing").decode()
    assert "chat_template" not in source and "apply_chat_template" not in source


def test_spec_frontend_section_errors():
    from tritongen.errors import SpecError
    from tritongen.spec import parse_spec

    base = {"name": "t", "model": {"checkpoint": "x"}}
    # The BLS is always rendered, so the frontend may call it directly.
    assert parse_spec({**base, "frontend": {"openai": {"triton_model": "tensorrt_llm_bls"}}}).frontend.openai \
        .triton_model == "tensorrt_llm_bls"
    with pytest.raises(SpecError) as info:
        parse_spec({**base, "frontend": {"api_key_env": "not a name"}})
    assert info.value.problems[0].startswith("frontend.api_key_env: string should match pattern")
    with pytest.raises(SpecError) as info:
        parse_spec({**base, "frontend": {"openai": {"prot": 1}}})
    assert info.value.problems == ["frontend.openai.prot: unknown field; did you mean `port`?"]


def test_plan_resolves_the_public_name_and_template(tiny_spec_path, tmp_path):
    import yaml

    from tritongen.errors import SpecError
    from tritongen.plan import plan_from_file

    data = yaml.safe_load(tiny_spec_path.read_text())
    template = tmp_path / "chat.jinja"
    template.write_text("{% for m in messages %}{{ m['content'] }}{% endfor %}")
    data["frontend"] = {"openai": {"served_model_name": "acme/tiny"}, "chat_template": "chat.jinja",
                        "api_key_env": "ACME_KEY"}
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(data))
    _, plan = plan_from_file(spec_path)
    route = plan.frontend.models[0]
    assert (route.name, route.triton_model, route.chat_template) == ("acme/tiny", "tensorrt_llm_bls", str(template))
    assert route.default_max_tokens == data["serving"]["max_tokens_default"]
    assert plan.frontend.api_key_env == "ACME_KEY"
    data["frontend"]["chat_template"] = "missing.jinja"
    spec_path.write_text(yaml.safe_dump(data))
    with pytest.raises(SpecError) as info:
        plan_from_file(spec_path)
    assert info.value.problems[0].startswith("frontend.chat_template: file ")


@pytest.mark.parametrize("dialect", ["ensemble", "vllm", "llmapi"])
def test_min_tokens_above_the_requests_maximum_is_refused_before_sending(dialect):
    """Triton's vLLM backend would fail such a request without saying why, so no request with it is sent."""
    from tritongen.frontend.errors import APIError
    from tritongen.frontend.schemas import CompletionRequest
    from tritongen.frontend.service import generation
    from tritongen.plan.frontend import ModelRoute

    route = ModelRoute(name="m", triton_model="tensorrt_llm", dialect=dialect, tokenizer_dir="/t", default_max_tokens=8)
    if dialect != "llmapi":  # llmapi has no min_tokens input at all: refused with the same param for that reason
        equal = CompletionRequest(model="m", prompt="p", max_tokens=5, min_tokens=5)
        assert generation(route, equal, "p").request.min_tokens == 5
    for request, limit in ((CompletionRequest(model="m", prompt="p", max_tokens=4, min_tokens=5), 4),
                           (CompletionRequest(model="m", prompt="p", min_tokens=9), 8)):
        with pytest.raises(APIError) as info:
            generation(route, request, "p")
        assert (info.value.status, info.value.param) == (400, "min_tokens")
        if dialect != "llmapi":
            assert info.value.message == (f"min_tokens: {request.min_tokens} is more than the request's maximum of "
                                          f"{limit} tokens; lower min_tokens or raise max_tokens")


@pytest.mark.parametrize("options, message", [
    ({"continuous_usage_stats": True}, "stream_options.continuous_usage_stats: only with include_usage true; set both"),
    ({"include_usage": True, "usage_every": 2}, "usage_every"),  # an unknown option is refused, not ignored
])
def test_stream_options_are_checked(options, message):
    with pytest.raises(ValidationError) as info:
        _chat(stream=True, stream_options=options)
    assert message in str(info.value)


def test_chunks_carry_the_null_keys_openai_sends():
    import json

    from tritongen.frontend.schemas import ChatChunkChoice, ChatCompletionChunk, ChatDelta, Usage, chunk_json

    def chunk(finish=None, usage=None, choices=True):
        return ChatCompletionChunk(id="c", created=1, model="m", usage=usage, choices=[
            ChatChunkChoice(delta=ChatDelta(content="hé"), finish_reason=finish)] if choices else [])

    plain = json.loads(chunk_json(chunk(), include_usage=False))
    assert plain["choices"] == [{"index": 0, "delta": {"content": "hé"}, "logprobs": None, "finish_reason": None}]
    assert "usage" not in plain and "system_fingerprint" not in plain
    assert json.loads(chunk_json(chunk(), include_usage=True))["usage"] is None
    assert json.loads(chunk_json(chunk("length"), include_usage=True))["choices"][0]["finish_reason"] == "length"
    last = json.loads(chunk_json(chunk(usage=Usage(prompt_tokens=3, completion_tokens=2, total_tokens=5),
                                       choices=False), include_usage=True))
    assert last["choices"] == [] and last["usage"] == {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}


def _route(dialect: str):
    from tritongen.plan.frontend import ModelRoute

    return ModelRoute(name="m", triton_model="tensorrt_llm", dialect=dialect, tokenizer_dir="/t", default_max_tokens=9)


def test_ignore_eos_keeps_generating_to_the_token_limit_where_a_runtime_can():
    from tritongen.frontend.errors import APIError
    from tritongen.frontend.service import generation

    # The ensemble (hf, synthetic, TensorRT-LLM) and vLLM take min_tokens, which masks the end token.
    for dialect in ("ensemble", "vllm"):
        assert generation(_route(dialect), _chat(ignore_eos=True, max_tokens=5), "p").request.min_tokens == 5
        assert generation(_route(dialect), _chat(ignore_eos=True), "p").request.min_tokens == 9  # the route's default
        assert generation(_route(dialect), _chat(), "p").request.min_tokens is None
    # NVIDIA's llmapi model has no such input: refused by name, as is continuous usage (it returns no counts).
    with pytest.raises(APIError) as info:
        generation(_route("llmapi"), _chat(ignore_eos=True), "p")
    assert (info.value.status, info.value.param) == (400, "ignore_eos")
    assert str(info.value.message).startswith("ignore_eos: not supported by this deployment (NVIDIA's llmapi model")
    with pytest.raises(APIError) as info:
        generation(_route("llmapi"), _chat(stream=True, stream_options={"include_usage": True,
                                                                        "continuous_usage_stats": True}), "p")
    assert (info.value.status, info.value.param) == (400, "stream_options")
    assert generation(_route("llmapi"), _chat(stream=True, stream_options={"include_usage": True}), "p")


def test_a_refused_stream_option_names_stream_options_as_the_param():
    from fastapi.exceptions import RequestValidationError

    from tritongen.frontend.errors import _validation_message

    with pytest.raises(ValidationError) as info:
        _chat(stream=True, stream_options={"continuous_usage_stats": True})
    message, param = _validation_message(RequestValidationError(info.value.errors()))
    assert (message, param) == ("stream_options.continuous_usage_stats: only with include_usage true; set both",
                                "stream_options")
    with pytest.raises(ValidationError) as info:
        _chat(stream=True, stream_options={"usage_every": 2})
    message, param = _validation_message(RequestValidationError(
        [{**e, "loc": ("body", *e["loc"])} for e in info.value.errors()]))
    assert param == "stream_options" and message.startswith("stream_options.usage_every: unknown field"), message
