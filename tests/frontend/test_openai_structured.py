"""Structured output and tool calls end to end: the official `openai` client, tritongen's frontend, the embedded
tritonserver with the hf runtime constraining the tiny random-weight model's decoding (xgrammar).

A random model says anything it is allowed to, so every answer that parses and validates here does so because
decoding was constrained: the schema set (tests/data/json_schemas.json, shared with the Triton-level tests) bounds
every string and array, so answers end well within max_completion_tokens.
"""

from __future__ import annotations

import json
import re
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

openai = pytest.importorskip("openai")
jsonschema = pytest.importorskip("jsonschema")

SCHEMAS = json.loads((Path(__file__).parents[1] / "data" / "json_schemas.json").read_text())
MESSAGES = [{"role": "user", "content": "Answer in JSON."}]
LIMIT = 400
"""max_completion_tokens: above the longest answer a schema of the set allows (so none is cut)."""
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.", "parameters": {
        "type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                         "unit": {"enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"], "additionalProperties": False}}},
    {"type": "function", "function": {"name": "move_to", "parameters": {
        "type": "object", "properties": {"at": {"$ref": "#/$defs/point"},
                                         "via": {"type": "array", "items": {"$ref": "#/$defs/point"}, "maxItems": 2}},
        "required": ["at"], "additionalProperties": False,
        "$defs": {"point": {"type": "object", "properties": {"x": {"type": "integer", "minimum": 0, "maximum": 99},
                                                             "y": {"type": "integer", "minimum": 0, "maximum": 99}},
                            "required": ["x", "y"], "additionalProperties": False}}}}},
    {"type": "function", "function": {"name": "ping"}},
]
PARAMETERS = {t["function"]["name"]: t["function"].get("parameters", {"type": "object", "properties": {}})
              for t in TOOLS}


@pytest.fixture(scope="module")
def frontend(triton, tiny_repo):
    from tritongen.frontend.server import FrontendServer
    from tritongen.plan.frontend import FrontendPlan

    config = FrontendPlan.read(tiny_repo).model_copy(update={"port": 0})
    assert "json_schema" in config.models[0].structured_output.guide_types, "the hf runtime constrains decoding"
    with FrontendServer(config, triton.grpc_url) as server:
        yield server


@pytest.fixture(scope="module")
def client(frontend):
    return openai.OpenAI(base_url=frontend.base_url, api_key="unused", max_retries=0, timeout=300)


@pytest.fixture(scope="module")
def model(client):
    return client.models.list().data[0].id


def _json_schema(item: dict) -> dict:
    return {"type": "json_schema", "json_schema": {"name": item["name"], "schema": item["schema"], "strict": True}}


def test_every_json_schema_answer_parses_and_validates(client, model):
    assert len(SCHEMAS) >= 30

    def ask(item):
        out = client.chat.completions.create(model=model, messages=MESSAGES, response_format=_json_schema(item),
                                             max_completion_tokens=LIMIT, temperature=0)
        return item, out.choices[0]

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(ask, SCHEMAS))
    failures = []
    for item, choice in answers:
        try:
            assert choice.finish_reason == "stop", f"finish_reason {choice.finish_reason}"
            jsonschema.validate(json.loads(choice.message.content), item["schema"])
        except (AssertionError, ValueError, jsonschema.ValidationError) as err:
            failures.append(f"{item['name']}: {err}: {choice.message.content!r}"[:300])
    assert not failures, "\n".join(failures)


def test_json_object_answers_are_json(client, model, tiny_model):
    """Any JSON object has no bound on its length, so a random model may be cut by max_tokens: then its text must
    still be a prefix the JSON grammar accepts (constrained, only cut); a finished one parses."""
    import xgrammar
    from transformers import AutoTokenizer

    compiled = xgrammar.GrammarCompiler(xgrammar.TokenizerInfo.from_huggingface(
        AutoTokenizer.from_pretrained(tiny_model))).compile_builtin_json_grammar()
    for endpoint in ("chat", "completions"):
        if endpoint == "chat":
            choice = client.chat.completions.create(model=model, messages=MESSAGES, max_completion_tokens=64,
                                                    response_format={"type": "json_object"}).choices[0]
            text = choice.message.content
        else:  # vLLM's extension: response_format on completions
            choice = client.completions.create(model=model, prompt="JSON:", max_tokens=64,
                                               extra_body={"response_format": {"type": "json_object"}}).choices[0]
            text = choice.text
        if choice.finish_reason == "stop":
            assert isinstance(json.loads(text), dict), text
        else:
            assert choice.finish_reason == "length" and text.lstrip().startswith("{"), text
            assert xgrammar.GrammarMatcher(compiled).accept_string(text), text


def test_regex_and_grammar_extension_constrain_both_endpoints(client, model):
    """vLLM's structured_outputs extension: guide types regex and ebnf_grammar."""
    pattern = r"[A-Z]{3}-[0-9]{2}"
    text = client.completions.create(model=model, prompt="Code:", max_tokens=32,
                                     extra_body={"structured_outputs": {"regex": pattern}}).choices[0].text
    assert re.fullmatch(pattern, text), text
    answer = client.chat.completions.create(model=model, messages=MESSAGES, max_completion_tokens=32, extra_body={
        "structured_outputs": {"grammar": 'root ::= "yes" | "no"'}}).choices[0].message.content
    assert answer in ("yes", "no"), answer


def _validate_call(call) -> None:
    assert call.id.startswith("call_") and call.type == "function"
    jsonschema.validate(json.loads(call.function.arguments), PARAMETERS[call.function.name])


def test_named_tool_calls_always_validate(client, model):
    for name in PARAMETERS:
        choice = {"type": "function", "function": {"name": name}}
        out = client.chat.completions.create(model=model, messages=MESSAGES, tools=TOOLS, tool_choice=choice,
                                             max_completion_tokens=LIMIT)
        (call,) = out.choices[0].message.tool_calls
        assert call.function.name == name and out.choices[0].finish_reason == "tool_calls"
        assert out.choices[0].message.content is None
        _validate_call(call)


@pytest.mark.parametrize("parallel", [False, True])
def test_required_tool_calls_always_validate(client, model, parallel):
    names = set()
    for seed_message in ("Weather?", "Move.", "Ping.", "Anything."):
        out = client.chat.completions.create(model=model, messages=[{"role": "user", "content": seed_message}],
                                             tools=TOOLS, tool_choice="required", parallel_tool_calls=parallel,
                                             max_completion_tokens=LIMIT)
        calls, finish = out.choices[0].message.tool_calls, out.choices[0].finish_reason
        assert calls and finish in ("tool_calls", "length")
        # An array of calls has no bound: a random model may go on calling until max_tokens, which can cut the
        # last call. One call (parallel_tool_calls false) is bounded by the tools' schemas and always finishes.
        assert finish == "tool_calls" or parallel
        complete = calls if finish == "tool_calls" else calls[:-1]
        assert parallel or len(calls) == 1
        for call in complete:
            _validate_call(call)
            names.add(call.function.name)
    assert names <= set(PARAMETERS)


def _streamed(stream):
    content, calls, finish = "", {}, None
    for chunk in stream:
        for choice in chunk.choices:
            finish = choice.finish_reason or finish
            content += choice.delta.content or ""
            for d in choice.delta.tool_calls or []:
                if d.id is not None:
                    calls[d.index] = [d.function.name, d.function.arguments or ""]
                else:
                    calls[d.index][1] += d.function.arguments
    return content or None, [tuple(c) for _, c in sorted(calls.items())], finish


@pytest.mark.parametrize("kind", ["json_schema", "named", "required", "auto"])
def test_streamed_deltas_concatenate_to_the_whole_answer(client, model, kind):
    kwargs = {"model": model, "messages": MESSAGES, "max_completion_tokens": LIMIT, "temperature": 0}
    if kind == "json_schema":
        kwargs["response_format"] = _json_schema(next(s for s in SCHEMAS if "$defs" in json.dumps(s["schema"])))
    elif kind == "auto":  # what the model says, parsed (the demo template names no format: llama3_json)
        kwargs.update(tools=TOOLS, max_completion_tokens=48)
    else:  # required: an array of calls the random model may go on with until max_tokens; the cut one too
        kwargs.update(tools=TOOLS, tool_choice="required" if kind == "required" else
                      {"type": "function", "function": {"name": "move_to"}},
                      max_completion_tokens=96 if kind == "required" else LIMIT)
    whole = client.chat.completions.create(**kwargs).choices[0]
    calls = [(c.function.name, c.function.arguments) for c in whole.message.tool_calls or []]
    assert _streamed(client.chat.completions.create(**kwargs, stream=True)) == (
        whole.message.content, calls, whole.finish_reason)


def _healthy(frontend, client, model) -> None:
    assert urllib.request.urlopen(f"http://{frontend.url}/health", timeout=10).status == 200
    assert client.chat.completions.create(model=model, messages=MESSAGES, max_completion_tokens=4).choices


@pytest.mark.parametrize("kw, param", [
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "bad", "schema": {"type": "objekt"}}}},
     "response_format"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"properties": []}}}]}, "tools"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "fly"}}}, "tool_choice"),
    ({"extra_body": {"structured_outputs": {"regex": "(unclosed"}}}, "structured_outputs"),
    ({"extra_body": {"structured_outputs": {"grammar": "root ::= undefined_rule"}}}, "structured_outputs"),
], ids=["invalid schema", "parameters not a schema", "unknown function", "regex the backend rejects",
        "grammar the backend rejects"])
def test_bad_input_is_a_400_with_param_and_the_server_stays_healthy(frontend, client, model, kw, param):
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=model, messages=MESSAGES, max_completion_tokens=8, **kw)
    assert info.value.param == param, info.value.body
    _healthy(frontend, client, model)


def test_a_guide_type_the_runtime_lacks_is_refused_naming_it(triton, tiny_repo):
    """A deployment whose runtime constrains to `json` only (the Plan's guide types) refuses json_schema and
    required tool calls up front, and serves the rest."""
    from tritongen.frontend.server import FrontendServer
    from tritongen.plan.frontend import FrontendPlan

    config = FrontendPlan.read(tiny_repo)
    route = config.models[0]
    narrow = route.model_copy(update={"structured_output": route.structured_output.model_copy(update={
        "guide_types": ("json",)})})
    with FrontendServer(config.model_copy(update={"port": 0, "models": (narrow,)}), triton.grpc_url) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=120)
        for kw, param in (({"response_format": _json_schema(SCHEMAS[0])}, "response_format"),
                          ({"tools": TOOLS, "tool_choice": "required"}, "tool_choice")):
            with pytest.raises(openai.BadRequestError) as info:
                client.chat.completions.create(model=route.name, messages=MESSAGES, **kw)
            assert info.value.param == param and route.structured_output.runtime in info.value.message
        _healthy(server, client, route.name)


def test_the_ids_path_constrains_alike(triton, tiny_repo):
    """`--openai-path ids` sends the guide to tensorrt_llm itself, in the same tensors."""
    from tritongen.frontend.server import FrontendServer
    from tritongen.plan.frontend import FrontendPlan

    config = FrontendPlan.read(tiny_repo)
    with FrontendServer(config.model_copy(update={"port": 0}), triton.grpc_url, path="ids") as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=120)
        model = config.models[0].name
        item = next(s for s in SCHEMAS if "$defs" in json.dumps(s["schema"]))
        choice = client.chat.completions.create(model=model, messages=MESSAGES, response_format=_json_schema(item),
                                                max_completion_tokens=LIMIT).choices[0]
        assert choice.finish_reason == "stop"
        jsonschema.validate(json.loads(choice.message.content), item["schema"])
        named = {"type": "function", "function": {"name": "move_to"}}
        out = client.chat.completions.create(model=model, messages=MESSAGES, tools=TOOLS, tool_choice=named,
                                             max_completion_tokens=LIMIT)
        _validate_call(out.choices[0].message.tool_calls[0])
