"""OpenAI's structured output and tool choice, turned into one guide for the runtime's constrained decoding.

`response_format` json_object becomes guide type `json_schema` with the schema of any object (guide type `json`
allows any JSON value), json_schema becomes `json_schema` with its schema;
vLLM's `structured_outputs` extension (regex, grammar, json, json_object) becomes the guide type of its kind;
`tool_choice` naming a function becomes `json_schema` with that function's parameters, `required` a schema of one
call (or of an array of calls, with parallel_tool_calls) whose name picks the function and whose arguments follow
that function's parameters. The guide travels as NVIDIA's `guided_decoding_guide_type` / `guided_decoding_guide`
tensors (tritongen.frontend.engine). Every schema is checked here first (a JSON Schema by its own metaschema, within
the deployment's size limit), so a bad one is a 400 naming the field before anything reaches the server, and a
guide type the runtime cannot constrain to is refused naming the runtime.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from tritongen.frontend.engine import EngineError, Generation
from tritongen.frontend.errors import APIError
from tritongen.frontend.schemas import NamedToolChoice, ResponseFormat, StructuredOutputs, Tool
from tritongen.frontend.toolcalls import NamedCallParser, ToolCallParser, detect_format
from tritongen.plan.frontend import ModelRoute

JSON_OBJECT: dict[str, Any] = {"type": "object"}
NO_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}
"""A function declared without `parameters` takes none (OpenAI's)."""


@dataclass(frozen=True)
class Guide:
    type: str
    """json, json_schema, regex or ebnf_grammar (NVIDIA's guided_decoding_guide_type values)."""
    text: str
    """The schema, regex or grammar; empty for `json` (any JSON value)."""
    param: str
    """The request field it comes from, named when the server refuses it."""


def check_schema(schema: Any, where: str, param: str) -> None:
    """A JSON Schema by the metaschema of its draft (`$schema`, 2020-12 when it names none), else a 400."""
    from jsonschema import exceptions, validators

    if not isinstance(schema, dict):
        raise APIError(400, f"{where}: must be a JSON Schema object, not {type(schema).__name__}", param=param)
    try:
        validators.validator_for(schema, default=validators.Draft202012Validator).check_schema(schema)
    except exceptions.SchemaError as err:
        path = "".join(f"[{p!r}]" for p in err.absolute_path)
        raise APIError(400, f"{where}: not a valid JSON Schema: {err.message}" + (f" (at {path})" if path else ""),
                       param=param) from None


def _allowed(route: ModelRoute, guide_type: str, param: str, why: str) -> None:
    s = route.structured_output
    if s is None or guide_type not in s.guide_types:
        runtime = "this deployment's runtime" if s is None else s.runtime
        can = f"it constrains to {', '.join(s.guide_types)} only" if s is not None and s.guide_types else \
            "it cannot constrain decoding"
        raise APIError(400, f"{param}: {why} needs guided decoding of type {guide_type}, which {runtime} does not "
                            f"offer ({can}); remove {param}", param=param)


def _limited(route: ModelRoute, text: str, param: str, what: str = "schema") -> str:
    size, limit = len(text.encode()), route.structured_output.max_schema_bytes
    if size > limit:
        raise APIError(400, f"{param}: the {what} is {size} bytes, over this deployment's limit of {limit} "
                            f"(structured_output.max_schema_bytes); send a smaller {what}", param=param)
    return text


def _schema_text(route: ModelRoute, schema: dict, param: str) -> str:
    return _limited(route, json.dumps(schema, separators=(",", ":"), ensure_ascii=False), param)


def response_format_guide(route: ModelRoute, fmt: ResponseFormat | None) -> Guide | None:
    """The guide of a response_format (None: plain text)."""
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object" or fmt.json_schema.schema_ is None or fmt.json_schema.schema_ is True:
        # OpenAI's json_object is an object, while guide type json (NVIDIA's, XGrammar's builtin JSON grammar)
        # allows any JSON value, a bare array or number too: so the object schema where the runtime takes schemas.
        # A json_schema without a schema (OpenAI's is optional) is the same.
        s = route.structured_output
        if s is not None and "json_schema" not in s.guide_types and "json" in s.guide_types:
            return Guide("json", "", "response_format")
        _allowed(route, "json_schema", "response_format", fmt.type)
        return Guide("json_schema", _schema_text(route, JSON_OBJECT, "response_format"), "response_format")
    schema = fmt.json_schema.schema_
    check_schema(schema, "response_format.json_schema.schema", "response_format")
    _allowed(route, "json_schema", "response_format", "json_schema")
    return Guide("json_schema", _schema_text(route, schema, "response_format"), "response_format")


def extension_guide(route: ModelRoute, so: StructuredOutputs | None) -> Guide | None:
    """The guide of vLLM's `structured_outputs` extension (None: not given)."""
    if so is None:
        return None
    param = "structured_outputs"
    if so.json_object:
        _allowed(route, "json", param, "json_object")
        return Guide("json", "", param)
    if so.regex is not None:
        _allowed(route, "regex", param, "regex")
        return Guide("regex", _limited(route, so.regex, param, "regex"), param)
    if so.grammar is not None:
        _allowed(route, "ebnf_grammar", param, "grammar")
        return Guide("ebnf_grammar", _limited(route, so.grammar, param, "grammar"), param)
    schema = so.json_
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except ValueError:
            raise APIError(400, "structured_outputs.json: not JSON text of a schema", param=param) from None
    check_schema(schema, "structured_outputs.json", param)
    _allowed(route, "json_schema", param, "json")
    return Guide("json_schema", _schema_text(route, schema, param), param)


def output_guide(route: ModelRoute, req) -> Guide | None:
    """The guide of a request's response_format or structured_outputs (at most one of the two)."""
    formatted = response_format_guide(route, req.response_format)
    extension = extension_guide(route, req.structured_outputs)
    if formatted is not None and extension is not None:
        raise APIError(400, "structured_outputs: cannot go with a response_format other than text; leave one out",
                       param="structured_outputs")
    return formatted or extension


def guided(gen: Generation, guide: Guide | None, req) -> Generation:
    """`gen` constrained by `guide`. Not with ignore_eos or min_tokens: a constrained answer ends where its grammar
    is complete (the end token is then the only one allowed), so keeping the end token out leaves none to pick."""
    if guide is None:
        return gen
    for field in ("ignore_eos", "min_tokens"):
        if getattr(req, field, None):
            raise APIError(400, f"{field}: cannot go with {guide.param} (a constrained answer ends where its grammar "
                                "is complete, where only the end token is allowed); leave one out", param=field)
    # Type `json` takes no guide text: none is sent.
    request = dataclasses.replace(gen.request, guided_decoding_guide_type=guide.type,
                                  guided_decoding_guide=guide.text or None)
    return dataclasses.replace(gen, request=request)


async def named_by(guide: Guide | None, awaitable):
    """Await a run; a guide the server refused is named by the request field it came from."""
    try:
        return await awaitable
    except EngineError as err:
        if guide is None or err.param != "response_format":
            raise
        raise EngineError(err.status, err.message, err.kind, guide.param, err.code) from None


def tool_parameters(tools: list[Tool]) -> dict[str, dict]:
    """Each function's parameters schema (checked), by name."""
    out: dict[str, dict] = {}
    for i, tool in enumerate(tools):
        name, params = tool.function.name, tool.function.parameters
        if name in out:
            raise APIError(400, f"tools[{i}].function.name: {name!r} is declared twice", param="tools")
        if params is None:
            params = NO_PARAMETERS
        check_schema(params, f"tools[{i}].function.parameters", "tools")
        out[name] = params
    return out


def _rebased(node: Any, prefix: str) -> Any:
    """`node` with its local `$ref`s pointing under `#/$defs/<prefix>...` (the schema moves under a new root)."""
    if isinstance(node, list):
        return [_rebased(v, prefix) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: _rebased(v, prefix) for k, v in node.items()}
    ref = out.get("$ref")
    if isinstance(ref, str) and ref.startswith("#"):
        for defs in ("#/$defs/", "#/definitions/"):
            if ref.startswith(defs):
                out["$ref"] = f"#/$defs/{prefix}__{ref[len(defs):]}"
                break
        else:
            out["$ref"] = f"#/$defs/{prefix}{ref[1:]}"  # the root ("#") or a path in it
    return out


def required_schema(parameters: dict[str, dict], parallel: bool) -> dict:
    """The JSON schema of `tool_choice: required`: one call `{"name", "arguments"}` (an array of at least one with
    `parallel`), the name one of the functions' and the arguments that function's parameters. Each function's
    `$defs` move to the root under its name, since a `$ref` resolves against the document's root."""
    branches, defs = [], {}
    for name, params in parameters.items():
        params = copy.deepcopy(params)
        own = {**params.pop("definitions", {}), **params.pop("$defs", {})}
        params = _rebased(params, name)
        for key, value in own.items():
            defs[f"{name}__{key}"] = _rebased(value, name)
        text = json.dumps([params, defs])
        if f'"#/$defs/{name}"' in text or f'"#/$defs/{name}/' in text:
            defs[name] = params  # refs to the root of the parameters ("#", "#/properties/...")
        branches.append({"type": "object", "properties": {"name": {"type": "string", "enum": [name]},
                                                          "arguments": params},
                         "required": ["name", "arguments"], "additionalProperties": False})
    call = branches[0] if len(branches) == 1 else {"anyOf": branches}
    root = {"type": "array", "minItems": 1, "items": call} if parallel else dict(call)
    return {**root, "$defs": defs} if defs else root


@dataclass(frozen=True)
class ToolPlan:
    """How one chat request's answer is read and what constrains it."""

    guide: Guide | None
    family: str | None
    """The parser's family (None: the answer is the arguments of `named`)."""
    named: str | None = None
    parallel: bool = True

    def parser(self) -> ToolCallParser | NamedCallParser:
        return NamedCallParser(self.named) if self.named else ToolCallParser(self.family, self.parallel)


def tool_plan(route: ModelRoute, req, template: str | None) -> ToolPlan | None:
    """The tool calling of a chat request (None: no tools, or tool_choice none). `template`: the chat template's
    source, for the call format when the deployment leaves it to `auto`."""
    choice = req.choice()
    if not req.tools:
        return None
    parameters = tool_parameters(req.tools)
    if choice == "none":
        return None
    parallel = req.parallel_tool_calls is not False
    if isinstance(choice, NamedToolChoice):
        name = choice.function.name
        if name not in parameters:
            raise APIError(400, f"tool_choice: function {name!r} is not among the request's tools "
                                f"({', '.join(parameters)})", param="tool_choice")
        _allowed(route, "json_schema", "tool_choice", "a named function")
        return ToolPlan(Guide("json_schema", _schema_text(route, parameters[name], "tools"), "tools"), None,
                        named=name, parallel=False)
    if choice == "required":
        _allowed(route, "json_schema", "tool_choice", "required")
        schema = required_schema(parameters, parallel)
        return ToolPlan(Guide("json_schema", _schema_text(route, schema, "tools"), "tools"), "json",
                        parallel=parallel)
    fmt = route.structured_output.tool_call_format if route.structured_output is not None else "auto"
    return ToolPlan(None, detect_format(template) if fmt == "auto" else fmt, parallel=parallel)
