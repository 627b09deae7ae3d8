"""The OpenAI protocol as pydantic models: the subset tritongen serves, and what it rejects by name.

Requests accept the fields the official `openai` client sends. Fields that tritongen cannot honour are accepted
only at their neutral value (`n: 1`, no `logit_bias`, no `logprobs`, `response_format` text); anything else is a
400 whose `error.param` names the field, never a silently ignored parameter. A field this frontend does not know
is refused the same way (as Triton's own OpenAI frontend does), so a newer API feature never passes unnoticed.
"""

from __future__ import annotations

import time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StreamOptions(BaseModel):
    include_usage: bool = False
    """Send one last chunk with `usage` (and no choices) before `[DONE]`."""


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

    @model_validator(mode="after")
    def _supported(self) -> SamplingFields:
        problems = []
        if self.n != 1:
            problems.append(f"n: {self.n} choices requested; this deployment returns one choice (n=1)")
        if self.logit_bias:
            problems.append("logit_bias: not supported; remove it")
        if self.stream_options is not None and not self.stream:
            problems.append("stream_options: only allowed with stream=true")
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


class ChatCompletionRequest(SamplingFields):
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(None, ge=1)
    """Deprecated by OpenAI in favour of max_completion_tokens; honoured when that is absent."""
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool | None = None
    top_logprobs: int | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    parallel_tool_calls: bool | None = None
    response_format: dict[str, Any] | None = None
    """Only `{"type": "text"}` (plain text, the default); structured output is not supported."""

    @model_validator(mode="after")
    def _chat_supported(self) -> ChatCompletionRequest:
        if self.logprobs or self.top_logprobs:
            raise ValueError("logprobs: not available from this deployment (the runtime returns no log probs)")
        if self.tools:
            raise ValueError("tools: tool calling is not supported by this deployment")
        if self.tool_choice is not None:
            raise ValueError("tool_choice: only allowed with tools, and tool calling is not supported")
        if self.parallel_tool_calls is not None:
            raise ValueError("parallel_tool_calls: only allowed with tools, and tool calling is not supported")
        if self.response_format is not None and self.response_format.get("type") != "text":
            raise ValueError(f"response_format: type {self.response_format.get('type')!r} is not supported "
                             "(only 'text': this deployment has no structured output)")
        return self

    def token_limit(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens


class CompletionRequest(SamplingFields):
    prompt: str | list[str]
    max_tokens: int | None = Field(None, ge=1)
    echo: bool = False
    logprobs: int | None = None
    best_of: int | None = None
    suffix: str | None = None

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


FinishReason = Literal["stop", "length"]


class ChatResponseMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


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


class ChatDelta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None


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


class ErrorBody(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    error: ErrorBody
