"""The OpenAI protocol as pydantic models: the subset tritongen serves, and what it rejects by name.

Requests accept the fields the official `openai` client sends. Fields that tritongen cannot honour are accepted
only at their neutral value (`n: 1`, no `logit_bias`, no `logprobs`); anything else is a 400 whose `error.param`
names the field, never a silently ignored parameter. `response_format` and `tools` are checked against what the
deployment's runtime can constrain in tritongen.frontend.structured. A field this frontend does not know
is refused the same way (as Triton's own OpenAI frontend does), so a newer API feature never passes unnoticed.
"""

from __future__ import annotations

import json
import time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StreamOptions(_Request):
    include_usage: bool = False
    """Send one last chunk with `usage` (and no choices) before `[DONE]`, and `usage: null` on every other chunk."""
    continuous_usage_stats: bool = False
    """Extension (as in vLLM's server): with include_usage, every chunk carries the usage so far instead of null."""


class SamplingFields(_Request):
    """Fields shared by chat and text completions."""

    model: str
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    seed: int | None = Field(None, ge=0)
    n: int = Field(1, ge=1)
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    logit_bias: dict[str, float] | None = None
    user: str | None = None
    min_tokens: int | None = Field(None, ge=0)
    """Extension (as in vLLM's server): generate at least this many tokens before the end token may stop."""
    ignore_eos: bool = False
    """Extension (as in vLLM's and TensorRT-LLM's servers): keep generating past the end token, to the token
    limit or a stop sequence (benchmark clients such as AIPerf send it to fix the output length)."""

    @model_validator(mode="after")
    def _supported(self) -> SamplingFields:
        problems = []
        if self.n != 1:
            problems.append(f"n: {self.n} choices requested; this deployment returns one choice (n=1)")
        if self.logit_bias:
            problems.append("logit_bias: not supported; remove it")
        if self.stream_options is not None and not self.stream:
            problems.append("stream_options: only allowed with stream=true")
        if self.stream_options is not None and self.stream_options.continuous_usage_stats \
                and not self.stream_options.include_usage:
            problems.append("stream_options.continuous_usage_stats: only with include_usage true; set both")
        stops = self.stop_list()
        if len(stops) > 4:
            problems.append(f"stop: at most 4 sequences (got {len(stops)})")
        if any(not s for s in stops):
            problems.append("stop: sequences must be non-empty")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def stop_list(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)

    def include_usage(self) -> bool:
        return bool(self.stream and self.stream_options and self.stream_options.include_usage)

    def continuous_usage(self) -> bool:
        return self.include_usage() and self.stream_options.continuous_usage_stats


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None

    def text(self) -> str:
        """Plain text of the message; content parts other than text are rejected."""
        if self.content is None or isinstance(self.content, str):
            return self.content or ""
        parts = []
        for part in self.content:
            if part.get("type") != "text":
                raise ValueError(f"messages: content part of type {part.get('type')!r} is not supported (text only)")
            parts.append(str(part.get("text", "")))
        return "".join(parts)


class JSONSchemaFormat(_Request):
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str | None = None
    schema_: Any = Field(None, alias="schema")
    """The JSON Schema (checked in frontend.structured, so its errors read as such)."""
    strict: bool | None = None
    """Accepted either way: decoding is constrained to the schema whenever the runtime can (OpenAI's strict)."""


class ResponseFormat(_Request):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JSONSchemaFormat | None = None

    @model_validator(mode="after")
    def _schema_given(self) -> ResponseFormat:
        if (self.type == "json_schema") != (self.json_schema is not None):
            raise ValueError("response_format: json_schema (name, schema) goes with type json_schema, and only there")
        return self


class StructuredOutputs(_Request):
    """Extension (vLLM's `structured_outputs`, its StructuredOutputsParams): exactly one of these constraints."""

    json_: Any = Field(None, alias="json")
    """A JSON schema (object or JSON text): guide type json_schema."""
    regex: str | None = None
    """guide type regex."""
    grammar: str | None = None
    """An EBNF grammar (GBNF, as XGrammar reads it): guide type ebnf_grammar."""
    json_object: bool | None = None
    """Any JSON object: guide type json."""

    @model_validator(mode="after")
    def _one(self) -> StructuredOutputs:
        given = [k for k in ("json_", "regex", "grammar", "json_object") if getattr(self, k) not in (None, False)]
        if len(given) != 1:
            raise ValueError("structured_outputs: set exactly one of json, regex, grammar, json_object")
        return self


class FunctionDefinition(_Request):
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str | None = None
    parameters: Any = None
    """A JSON schema of the arguments object (None: the function takes none); checked in frontend.structured."""
    strict: bool | None = None


class Tool(_Request):
    type: Literal["function"]
    function: FunctionDefinition


class NamedFunction(_Request):
    name: str


class NamedToolChoice(_Request):
    type: Literal["function"]
    function: NamedFunction


class ChatCompletionRequest(SamplingFields):
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(None, ge=1)
    """Deprecated by OpenAI in favour of max_completion_tokens; honoured when that is absent."""
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool | None = None
    top_logprobs: int | None = None
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    """Default: `auto` with tools, `none` without (OpenAI's)."""
    parallel_tool_calls: bool | None = None
    """False: at most one call per answer. Default true (OpenAI's)."""
    response_format: ResponseFormat | None = None
    structured_outputs: StructuredOutputs | None = None
    """Extension (as in vLLM's server): regex, EBNF grammar or JSON schema constraints."""

    @model_validator(mode="after")
    def _chat_supported(self) -> ChatCompletionRequest:
        if self.logprobs or self.top_logprobs:
            raise ValueError("logprobs: not available from this deployment (the runtime returns no log probs)")
        if not self.tools and self.tool_choice is not None:  # OpenAI's rule, `none` included
            raise ValueError("tool_choice: only allowed with tools")
        if not self.tools and self.parallel_tool_calls is not None:
            raise ValueError("parallel_tool_calls: only allowed with tools")
        return self

    def choice(self) -> str | NamedToolChoice:
        """tool_choice with OpenAI's default filled in."""
        return self.tool_choice or ("auto" if self.tools else "none")

    def token_limit(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens


class CompletionRequest(SamplingFields):
    prompt: str | list[str]
    max_tokens: int | None = Field(None, ge=1)
    echo: bool = False
    logprobs: int | None = None
    best_of: int | None = None
    suffix: str | None = None
    response_format: ResponseFormat | None = None
    """Extension (as in vLLM's server): the completion's format, as for chat."""
    structured_outputs: StructuredOutputs | None = None
    """Extension (as in vLLM's server): regex, EBNF grammar or JSON schema constraints."""

    @model_validator(mode="after")
    def _completion_supported(self) -> CompletionRequest:
        if isinstance(self.prompt, list):
            if len(self.prompt) != 1 or not isinstance(self.prompt[0], str):
                raise ValueError("prompt: one prompt string per request (batched or token prompts are not supported)")
            self.prompt = self.prompt[0]
        if not self.prompt:
            raise ValueError("prompt: must be a non-empty string")
        if self.logprobs:
            raise ValueError("logprobs: not available from this deployment (the runtime returns no log probs)")
        if self.best_of not in (None, 1):
            raise ValueError("best_of: only 1 is supported")
        if self.suffix:
            raise ValueError("suffix: not supported")
        return self

    def token_limit(self) -> int | None:
        return self.max_tokens


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


FinishReason = Literal["stop", "length", "tool_calls"]


class FunctionCall(BaseModel):
    name: str
    arguments: str
    """The arguments object as JSON text (the model's own text of it)."""


class ToolCall(BaseModel):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatResponseMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None
    """None when the answer is only tool calls (OpenAI's)."""
    tool_calls: list[ToolCall] | None = None


class ChatChoice(BaseModel):
    index: int = 0
    message: ChatResponseMessage
    finish_reason: FinishReason
    logprobs: None = None


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage | None = None
    system_fingerprint: str | None = None


class FunctionCallDelta(BaseModel):
    name: str | None = None
    arguments: str | None = None


class ToolCallDelta(BaseModel):
    index: int
    """Which call of the answer (0, 1, ...): a call's first delta has its id, type and name, the next ones
    argument text."""
    id: str | None = None
    type: Literal["function"] | None = None
    function: FunctionCallDelta


class ChatDelta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None
    tool_calls: list[ToolCallDelta] | None = None


class ChatChunkChoice(BaseModel):
    index: int = 0
    delta: ChatDelta
    finish_reason: FinishReason | None = None
    logprobs: None = None


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChatChunkChoice]
    usage: Usage | None = None
    system_fingerprint: str | None = None


class CompletionChoice(BaseModel):
    index: int = 0
    text: str
    finish_reason: FinishReason | None = None
    logprobs: None = None


class Completion(BaseModel):
    """Both the whole text completion and each of its streamed chunks (OpenAI uses one object for both)."""

    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None
    system_fingerprint: str | None = None


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int = Field(default_factory=lambda: int(time.time()))
    owned_by: str = "tritongen"
    root: str | None = None
    """A LoRA adapter's folder (vLLM's /v1/models shape); the base model's own name otherwise."""
    parent: str | None = None
    """A LoRA adapter's base model id; None for the base model (as vLLM lists them)."""


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


def chunk_json(chunk: ChatCompletionChunk | Completion, include_usage: bool) -> str:
    """One streamed chunk as OpenAI sends it: `finish_reason` and `logprobs` null on each choice until they have a
    value, `usage` null on every chunk but the last when the request asked for usage (clients such as AIPerf read
    these keys), other unset fields left out."""
    data = chunk.model_dump(mode="json", exclude_none=True)
    for choice, model in zip(data["choices"], chunk.choices):
        choice["logprobs"], choice["finish_reason"] = None, model.finish_reason
    if include_usage:
        data["usage"] = None if chunk.usage is None else chunk.usage.model_dump()
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


class ErrorBody(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    error: ErrorBody
