"""Structured output and tool calls in the OpenAI frontend, without a server: the guides built from requests and
the chat route's shapes through the official `openai` client over a scripted engine that records what would be
sent to Triton (the parsers: test_toolcall_parsers.py)."""

from __future__ import annotations

import json

import pytest

from tritongen.frontend.engine import Delta, Generation, build_request
from tritongen.frontend.structured import Guide, guided, required_schema, response_format_guide, tool_plan
from tritongen.frontend.errors import APIError
from tritongen.frontend.schemas import ChatCompletionRequest, ResponseFormat
from tritongen.plan.frontend import FrontendPlan, ModelRoute, StructuredRoute
from tritongen.requests import Request

openai = pytest.importorskip("openai")
jsonschema = pytest.importorskip("jsonschema")

ALL_TYPES = ("json", "json_schema", "regex", "ebnf_grammar")
WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                            "unit": {"enum": ["c", "f"]}},
           "required": ["city"], "additionalProperties": False}
WITH_DEFS = {"type": "object", "properties": {"at": {"$ref": "#/$defs/point"}, "path": {"type": "array", "items": {
    "$ref": "#/$defs/point"}, "maxItems": 3}}, "required": ["at"],
             "$defs": {"point": {"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
                                 "required": ["x", "y"]}}}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather", "parameters": WEATHER}},
         {"type": "function", "function": {"name": "move", "parameters": WITH_DEFS}},
         {"type": "function", "function": {"name": "ping"}}]


def _route(guide_types=ALL_TYPES, fmt="auto", limit=65536, structured=True) -> ModelRoute:
    s = StructuredRoute(runtime="the hf runtime", guide_types=guide_types, tool_call_format=fmt,
                        max_schema_bytes=limit) if structured else None
    return ModelRoute(name="m", triton_model="ensemble", tokenizer_dir="/t", structured_output=s)


def _chat(**kw) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate({"model": "m", "messages": [{"role": "user", "content": "hi"}], **kw})


def _refused(call, param: str, *words: str) -> str:
    with pytest.raises(APIError) as info:
        call()
    assert (info.value.status, info.value.param) == (400, param), info.value.message
    assert all(w in info.value.message for w in words), info.value.message
    return info.value.message


# --- guides -----------------------------------------------------------------------------------------------------

def test_response_format_becomes_the_guide_nvidia_names():
    route = _route()
    assert response_format_guide(route, ResponseFormat(type="text")) is None
    # OpenAI's json_object is an object; NVIDIA's `json` allows any JSON value, so only where schemas are not taken.
    guide = response_format_guide(route, ResponseFormat(type="json_object"))
    assert (guide.type, guide.text) == ("json_schema", '{"type":"object"}')
    guide = response_format_guide(_route(guide_types=("json",)), ResponseFormat(type="json_object"))
    assert (guide.type, guide.text) == ("json", "")
    fmt = ResponseFormat.model_validate({"type": "json_schema", "json_schema": {"name": "w", "schema": WEATHER,
                                                                                "strict": True}})
    guide = response_format_guide(route, fmt)
    assert guide.type == "json_schema" and json.loads(guide.text) == WEATHER and " " not in guide.text.replace(
        "the ", "")


@pytest.mark.parametrize("schema, words", [
    ({"type": "objekt"}, ["not a valid JSON Schema", "objekt"]),
    ({"type": "object", "properties": {"a": {"minLength": "three"}}}, ["not a valid JSON Schema", "minLength"]),
    ({"required": "a"}, ["not a valid JSON Schema"]),
    ([1, 2], ["must be a JSON Schema object"]),
    (1, ["must be a JSON Schema object"]),
])
def test_an_invalid_schema_is_a_400_naming_response_format(schema, words):
    fmt = ResponseFormat.model_validate({"type": "json_schema", "json_schema": {"name": "x", "schema": schema}})
    _refused(lambda: response_format_guide(_route(), fmt), "response_format", *words)


def test_a_guide_type_the_runtime_lacks_is_refused_naming_the_runtime():
    fmt = ResponseFormat.model_validate({"type": "json_schema", "json_schema": {"name": "x", "schema": WEATHER}})
    _refused(lambda: response_format_guide(_route(guide_types=("json",)), fmt), "response_format",
             "the hf runtime", "json_schema", "constrains to json only")
    _refused(lambda: response_format_guide(_route(guide_types=()), ResponseFormat(type="json_object")),
             "response_format", "cannot constrain decoding")
    _refused(lambda: response_format_guide(_route(structured=False), ResponseFormat(type="json_object")),
             "response_format", "this deployment's runtime")


@pytest.mark.parametrize("given, guide_type, text", [
    ({"regex": "[a-z]{1,5}"}, "regex", "[a-z]{1,5}"),
    ({"grammar": 'root ::= "yes" | "no"'}, "ebnf_grammar", 'root ::= "yes" | "no"'),
    ({"json": WEATHER}, "json_schema", json.dumps(WEATHER, separators=(",", ":"))),
    ({"json": json.dumps(WEATHER)}, "json_schema", json.dumps(WEATHER, separators=(",", ":"))),
    ({"json_object": True}, "json", ""),
])
def test_vllms_structured_outputs_extension_becomes_the_guide_of_its_kind(given, guide_type, text):
    from tritongen.frontend.structured import output_guide

    guide = output_guide(_route(), _chat(structured_outputs=given))
    assert (guide.type, guide.text, guide.param) == (guide_type, text, "structured_outputs")
    _refused(lambda: output_guide(_route(guide_types=()), _chat(structured_outputs=given)), "structured_outputs",
             "the hf runtime")


def test_a_schema_over_the_limit_is_refused():
    fmt = ResponseFormat.model_validate({"type": "json_schema", "json_schema": {"name": "x", "schema": WEATHER}})
    _refused(lambda: response_format_guide(_route(limit=50), fmt), "response_format", "max_schema_bytes")
    from tritongen.frontend.structured import output_guide

    _refused(lambda: output_guide(_route(limit=50), _chat(structured_outputs={"regex": "a" * 51})),
             "structured_outputs", "the regex is 51 bytes")


def test_required_schema_accepts_exactly_the_calls_of_the_tools():
    params = {"get_weather": WEATHER, "move": WITH_DEFS, "ping": {"type": "object", "properties": {}}}
    for parallel in (False, True):
        schema = required_schema(params, parallel)
        jsonschema.Draft202012Validator.check_schema(schema)
        valid = [{"name": "get_weather", "arguments": {"city": "Paris"}},
                 {"name": "move", "arguments": {"at": {"x": 1, "y": 2}, "path": [{"x": 0, "y": 0}]}},
                 {"name": "ping", "arguments": {}}]
        invalid = [{"name": "get_weather", "arguments": {"town": "Paris"}},
                   {"name": "move", "arguments": {"at": {"x": "1", "y": 2}}},
                   {"name": "fly", "arguments": {}}, {"name": "ping"}]
        wrap = (lambda c: [c]) if parallel else (lambda c: c)
        for call in valid:
            jsonschema.validate(wrap(call), schema)
        for call in invalid:
            with pytest.raises(jsonschema.ValidationError):
                jsonschema.validate(wrap(call), schema)
        if parallel:
            jsonschema.validate(valid, schema)
            with pytest.raises(jsonschema.ValidationError):
                jsonschema.validate([], schema)
    # The name comes first: a streamed call is announced before its arguments.
    assert list(required_schema({"ping": {}}, False)["properties"]) == ["name", "arguments"]


@pytest.mark.parametrize("parallel", [False, True])
def test_xgrammar_compiles_the_required_schema_to_what_it_validates(parallel):
    """The grammar library the runtimes use accepts the calls jsonschema accepts, and refuses a wrong one."""
    xgrammar = pytest.importorskip("xgrammar")
    from xgrammar.testing import _is_grammar_accept_string as accepts

    tree = {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#"}, "maxItems": 2}}}
    grammar = xgrammar.Grammar.from_json_schema(json.dumps(required_schema(
        {"get_weather": WEATHER, "move": WITH_DEFS, "ping": {"type": "object", "properties": {}}, "tree": tree},
        parallel)))
    wrap = (lambda c: f"[{c}]") if parallel else (lambda c: c)
    for call in ('{"name": "move", "arguments": {"at": {"x": 1, "y": 2}, "path": [{"x": 3, "y": 4}]}}',
                 '{"name": "tree", "arguments": {"kids": [{"kids": []}]}}', '{"name": "ping", "arguments": {}}',
                 '{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "c"}}'):
        assert accepts(grammar, wrap(call)), call
    for call in ('{"name": "move", "arguments": {"at": {"x": "1", "y": 2}}}', '{"name": "fly", "arguments": {}}',
                 '{"arguments": {}, "name": "ping"}'):
        assert not accepts(grammar, wrap(call)), call


def test_the_shared_schema_set_passes_the_frontends_checks():
    from pathlib import Path

    schemas = json.loads((Path(__file__).parents[1] / "data" / "json_schemas.json").read_text())
    assert len(schemas) >= 30
    for item in schemas:
        fmt = ResponseFormat.model_validate({"type": "json_schema", "json_schema": {
            "name": item["name"], "schema": item["schema"], "strict": True}})
        assert response_format_guide(_route(), fmt).type == "json_schema"


def test_a_parameters_schema_with_a_root_ref_keeps_it_under_the_new_root():
    tree = {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#"}, "maxItems": 2}}}
    schema = required_schema({"tree": tree}, False)
    jsonschema.validate({"name": "tree", "arguments": {"kids": [{"kids": []}]}}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"name": "tree", "arguments": {"kids": [{"kids": 3}]}}, schema)


def test_tool_choice_decides_guide_and_parser():
    route = _route()
    assert tool_plan(route, _chat(tools=TOOLS, tool_choice="none"), None) is None
    named = tool_plan(route, _chat(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "move"}}), None)
    assert named.guide.type == "json_schema" and json.loads(named.guide.text) == WITH_DEFS and named.named == "move"
    required = tool_plan(route, _chat(tools=TOOLS, tool_choice="required", parallel_tool_calls=False), None)
    assert json.loads(required.guide.text) == required_schema(
        {"get_weather": WEATHER, "move": WITH_DEFS, "ping": {"type": "object", "properties": {}}}, False)
    auto = tool_plan(route, _chat(tools=TOOLS), "{{ '<tool_call>' }}")
    assert (auto.guide, auto.family, auto.parallel) == (None, "hermes", True)
    assert tool_plan(_route(fmt="mistral"), _chat(tools=TOOLS), "<tool_call>").family == "mistral"
    # auto needs no constrained decoding, so a runtime without it still parses calls.
    assert tool_plan(_route(guide_types=()), _chat(tools=TOOLS), None).family == "llama3_json"


def test_bad_tools_and_tool_choice_are_400s_naming_them():
    named = {"type": "function", "function": {"name": "fly"}}
    _refused(lambda: tool_plan(_route(), _chat(tools=TOOLS, tool_choice=named), None), "tool_choice", "'fly'")
    bad = [{"type": "function", "function": {"name": "f", "parameters": {"type": "objekt"}}}]
    _refused(lambda: tool_plan(_route(), _chat(tools=bad), None), "tools", "tools[0].function.parameters")
    twice = [TOOLS[0], TOOLS[0]]
    _refused(lambda: tool_plan(_route(), _chat(tools=twice), None), "tools", "declared twice")
    _refused(lambda: tool_plan(_route(guide_types=("json",)), _chat(tools=TOOLS, tool_choice="required"), None),
             "tool_choice", "the hf runtime", "json_schema")


def test_build_request_sends_nvidias_guide_tensors():
    plain = Generation(Request("p", 4, False))
    gen = guided(plain, Guide("json_schema", '{"type":"object"}', "response_format"), _chat())
    request = build_request("ensemble", gen, "id")
    names = [t.name for t in request.inputs]
    assert {"guided_decoding_guide_type", "guided_decoding_guide"} <= set(names)
    raw = request.raw_input_contents[names.index("guided_decoding_guide")]
    assert raw[4:] == b'{"type":"object"}'  # BYTES: a 4-byte length, then the text
    any_json = build_request("ensemble", guided(plain, Guide("json", "", "response_format"), _chat()), "id")
    assert [t.name for t in any_json.inputs if t.name.startswith("guided")] == ["guided_decoding_guide_type"]


# --- the chat route over a scripted engine ------------------------------------------------------------------------

TOOL_TEMPLATE = (
    "{% if tools %}TOOLS {{ tools | map(attribute='function') | map(attribute='name') | join(',') }} "
    "{{ tools[2].function.parameters | tojson }}\n{% endif %}"
    "{% for m in messages %}{{ m.role }}: {{ m.content }}"
    "{% if m.tool_calls %}{% for c in m.tool_calls %} CALL {{ c.function.name }} {{ c.function.arguments | tojson }}"
    "{% endfor %}{% endif %}{% if m.tool_call_id %} [{{ m.tool_call_id }}]{% endif %}\n{% endfor %}"
    "<tool_call>{% if add_generation_prompt %}assistant:{% endif %}")


class ScriptedEngine:
    """Answers every request with `script` (one response per piece) and keeps the requests it was asked."""

    def __init__(self):
        self.script: list[str] = []
        self.asked: list[Request] = []

    async def start(self):
        pass

    async def close(self):
        pass

    async def generate(self, model, gen, request_id, dialect=None, on_sent=None):
        self.asked.append(gen.request)
        if on_sent is not None:
            on_sent()
        if isinstance(self.script, Exception):
            raise self.script
        for i, piece in enumerate(self.script):
            yield Delta(text=piece, output_tokens=1, input_tokens=3, final=i == len(self.script) - 1)


@pytest.fixture(scope="module")
def scripted(tiny_model, tmp_path_factory):
    from fastapi.testclient import TestClient

    from tritongen.frontend.app import create_app

    template = tmp_path_factory.mktemp("template") / "tools.jinja"
    template.write_text(TOOL_TEMPLATE)
    route = _route().model_copy(update={"tokenizer_dir": str(tiny_model), "chat_template": str(template),
                                        "default_max_tokens": 64})
    app = create_app(FrontendPlan(models=(route,)), "localhost:1")
    engine = app.state.frontend.engine = ScriptedEngine()
    with TestClient(app) as http:
        yield openai.OpenAI(base_url="http://testserver/v1", api_key="unused", max_retries=0, http_client=http), \
            engine, app.state.frontend.templates["m"]


def _stream(client, **kw):
    chunks = list(client.chat.completions.create(model="m", stream=True, **kw))
    content, calls, finish = "", {}, None
    for chunk in chunks:
        for choice in chunk.choices:
            finish = choice.finish_reason or finish
            content += choice.delta.content or ""
            for d in choice.delta.tool_calls or []:
                if d.id is not None:
                    assert d.index not in calls and d.type == "function" and d.function.name
                    calls[d.index] = {"id": d.id, "name": d.function.name, "arguments": d.function.arguments or ""}
                else:
                    calls[d.index]["arguments"] += d.function.arguments
    return content or None, [(c["name"], c["arguments"]) for _, c in sorted(calls.items())], finish


MESSAGES = [{"role": "user", "content": "Weather in Paris?"}]


def test_auto_tool_calls_have_openais_shape_streamed_and_not(scripted):
    client, engine, _ = scripted
    engine.script = ['Checking. <tool', '_call>{"name": "get_weather", ', '"arguments": {"city": ', '"Paris"}}',
                     '</tool_call>']
    out = client.chat.completions.create(model="m", messages=MESSAGES, tools=TOOLS)
    choice = out.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content == "Checking. "
    (call,) = choice.message.tool_calls
    assert call.id.startswith("call_") and call.type == "function"
    assert (call.function.name, json.loads(call.function.arguments)) == ("get_weather", {"city": "Paris"})
    assert engine.asked[-1].guided_decoding_guide_type is None  # auto constrains nothing
    assert _stream(client, messages=MESSAGES, tools=TOOLS) == (
        "Checking. ", [("get_weather", call.function.arguments)], "tool_calls")


def test_only_calls_mean_content_null(scripted):
    client, engine, _ = scripted
    engine.script = ['<tool_call>{"name": "ping", "arguments": {}}</tool_call>']
    message = client.chat.completions.create(model="m", messages=MESSAGES, tools=TOOLS).choices[0].message
    assert message.content is None and message.tool_calls[0].function.arguments == "{}"


def test_named_and_required_send_the_schema_and_return_calls(scripted):
    client, engine, _ = scripted
    named = {"type": "function", "function": {"name": "get_weather"}}
    engine.script = ['{"city"', ': "Oslo"}']
    out = client.chat.completions.create(model="m", messages=MESSAGES, tools=TOOLS, tool_choice=named)
    gen = engine.asked[-1]
    assert (gen.guided_decoding_guide_type, json.loads(gen.guided_decoding_guide)) == ("json_schema", WEATHER)
    assert out.choices[0].finish_reason == "tool_calls"
    (call,) = out.choices[0].message.tool_calls
    assert (call.function.name, call.function.arguments) == ("get_weather", '{"city": "Oslo"}')
    assert _stream(client, messages=MESSAGES, tools=TOOLS, tool_choice=named) == (
        None, [("get_weather", '{"city": "Oslo"}')], "tool_calls")

    engine.script = ['[{"name": "ping", "arguments": {}}, ', '{"name": "get_weather", "arguments": {"city": "A"}}]']
    out = client.chat.completions.create(model="m", messages=MESSAGES, tools=TOOLS, tool_choice="required")
    assert json.loads(engine.asked[-1].guided_decoding_guide)["type"] == "array"
    calls = [(c.function.name, c.function.arguments) for c in out.choices[0].message.tool_calls]
    assert calls == [("ping", "{}"), ("get_weather", '{"city": "A"}')]
    assert _stream(client, messages=MESSAGES, tools=TOOLS, tool_choice="required") == (None, calls, "tool_calls")


def test_a_cut_call_finishes_with_length(scripted):
    client, engine, _ = scripted
    engine.script = ['<tool_call>{"name": "ping", "arguments": {"a'] * 1
    out = client.chat.completions.create(model="m", messages=MESSAGES, tools=TOOLS, max_completion_tokens=1)
    assert out.choices[0].finish_reason == "length"


def test_response_format_reaches_the_engine(scripted):
    client, engine, _ = scripted
    engine.script = ['{"city": "Rome"}']
    schema = {"type": "json_schema", "json_schema": {"name": "w", "schema": WEATHER, "strict": True}}
    out = client.chat.completions.create(model="m", messages=MESSAGES, response_format=schema)
    assert out.choices[0].message.content == '{"city": "Rome"}' and out.choices[0].message.tool_calls is None
    sent = engine.asked[-1]
    assert (sent.guided_decoding_guide_type, json.loads(sent.guided_decoding_guide)) == ("json_schema", WEATHER)
    client.completions.create(model="m", prompt="p", extra_body={"response_format": {"type": "json_object"}})
    sent = engine.asked[-1]
    assert (sent.guided_decoding_guide_type, sent.guided_decoding_guide) == ("json_schema", '{"type":"object"}')


def test_tools_and_history_go_through_the_template(scripted):
    _, _, template = scripted
    from tritongen.frontend.routers.chat import _prompt
    from types import SimpleNamespace

    req = _chat(tools=TOOLS, messages=[
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
            "name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}])
    state = SimpleNamespace(templates={"m": template})
    prompt = _prompt(state, _route(), req)
    assert prompt.startswith('TOOLS get_weather,move,ping {"type": "object", "properties": {}}\n')
    assert 'CALL get_weather {"city": "Paris"}' in prompt and "tool: sunny [call_1]" in prompt


@pytest.mark.parametrize("kw, param", [
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "fly"}}}, "tool_choice"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": 3}}}]}, "tools"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "objekt"}}}},
     "response_format"),
    ({"response_format": {"type": "json_object"}, "tools": TOOLS, "tool_choice": "required"}, "response_format"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"parallel_tool_calls": False}, "parallel_tool_calls"),
    ({"response_format": {"type": "json_schema"}}, "response_format"),
    ({"response_format": {"type": "xml"}}, "response_format"),
    ({"structured_outputs": {"choice": ["a", "b"]}}, "structured_outputs"),
    ({"structured_outputs": {"regex": "a", "grammar": "b"}}, "structured_outputs"),
    ({"structured_outputs": {"json": {"type": "objekt"}}}, "structured_outputs"),
    ({"structured_outputs": {"regex": "a+"}, "response_format": {"type": "json_object"}}, "structured_outputs"),
    ({"tools": [{"type": "function", "function": {"name": "bad name"}}]}, "tools"),
    ({"response_format": {"type": "json_object"}, "extra_body": {"ignore_eos": True}}, "ignore_eos"),
    ({"tools": TOOLS, "tool_choice": "required", "extra_body": {"min_tokens": 3}}, "min_tokens"),
])
def test_bad_requests_are_400s_with_param(scripted, kw, param):
    client, engine, _ = scripted
    asked = len(engine.asked)
    kw = dict(kw)
    extra = kw.pop("extra_body", {})
    if "structured_outputs" in kw:
        extra["structured_outputs"] = kw.pop("structured_outputs")
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="m", messages=MESSAGES, extra_body=extra, **kw)
    assert info.value.param == param, info.value.body
    assert len(engine.asked) == asked  # refused before anything is sent


def test_a_guide_the_server_refuses_is_named_by_the_field_it_came_from(scripted):
    from tritongen.frontend.engine import classify

    client, engine, _ = scripted
    # How a tritongen model reports a guide it cannot compile (tritongen.served.error_kinds).
    error = "[bad_request:guided_decoding_guide] tensorrt_llm: guided_decoding_guide: the grammar does not compile"
    named = {"type": "function", "function": {"name": "get_weather"}}
    try:
        for kw, extra, param in (({"tools": TOOLS, "tool_choice": named}, None, "tools"),
                                 ({"response_format": {"type": "json_object"}}, None, "response_format"),
                                 ({}, {"structured_outputs": {"regex": "("}}, "structured_outputs")):
            for stream in (False, True):
                engine.script = classify(error)
                with pytest.raises(openai.BadRequestError) as info:
                    client.chat.completions.create(model="m", messages=MESSAGES, extra_body=extra, stream=stream, **kw)
                assert info.value.param == param, info.value.body
    finally:
        engine.script = []


def test_streamed_tool_call_chunks_have_openais_chunk_shape(scripted):
    """Raw chunks: finish_reason and logprobs null until set, usage null but on the last (include_usage), a call's
    first delta with index, id, type and name and empty arguments, the next ones index and argument text only."""
    client, engine, _ = scripted
    engine.script = ['<tool_call>{"name": "ping", ', '"arguments": {"a": 1}}</tool_call>']
    with client.chat.completions.with_streaming_response.create(
            model="m", messages=MESSAGES, tools=TOOLS, stream=True, stream_options={"include_usage": True}) as raw:
        data = [json.loads(line[6:]) for line in raw.iter_lines() if line.startswith("data: {")]
    *chunks, last = data
    assert last["choices"] == [] and last["usage"]["completion_tokens"] == 2
    assert all(c["usage"] is None and c["choices"][0]["logprobs"] is None for c in chunks)
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None] * (len(chunks) - 1) + ["tool_calls"]
    calls = [d for c in chunks for d in c["choices"][0]["delta"].get("tool_calls", [])]
    assert calls[0] == {"index": 0, "id": calls[0]["id"], "type": "function",
                        "function": {"name": "ping", "arguments": ""}}
    assert all(set(d) == {"index", "function"} and set(d["function"]) == {"arguments"} for d in calls[1:])
    assert "".join(d["function"]["arguments"] for d in calls) == '{"a": 1}'
