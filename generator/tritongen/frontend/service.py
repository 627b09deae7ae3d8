"""One generation from the routers' point of view: run it, stream it, count it, stop it, cancel it.

The routers turn protocol objects into a `Generation` and the results back into protocol objects; everything
that is the same for chat and text completions (stop sequences, finish_reason, usage, metrics, client
disconnects, Triton's errors) happens here.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from fastapi import Request

from tritongen.frontend.engine import Counts, EngineError, Generation, TritonEngine
from tritongen.frontend.errors import APIError, ClientGone, error_body
from tritongen.frontend.metrics import FrontendMetrics
from tritongen.frontend.schemas import Usage
from tritongen.frontend.text import ChatTemplate, StopMatcher
from tritongen.plan.frontend import FrontendPlan, ModelRoute
from tritongen.requests import COUNTS, Request as EnsembleRequest
from tritongen.runtimes import dialect as dialect_named
from tritongen.runtimes.base import RevisedText, TokenCounter




@dataclass
class FrontendState:
    config: FrontendPlan
    engine: TritonEngine
    metrics: FrontendMetrics
    templates: dict[str, ChatTemplate]
    api_key: str | None
    created: int


@dataclass
class Outcome:
    text: str
    finish_reason: str
    usage: Usage | None


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def _finish_reason(gen: Generation, stopped: bool, counts: Counts, model_reason: str | None = None) -> str:
    if stopped:
        return "stop"
    if model_reason in ("stop", "length"):
        return model_reason
    return "length" if counts.completion_tokens >= gen.request.max_tokens else "stop"


def _usage(counts: Counts) -> Usage | None:
    if not counts.complete:
        return None
    return Usage(prompt_tokens=counts.prompt_tokens, completion_tokens=counts.completion_tokens,
                 total_tokens=counts.prompt_tokens + counts.completion_tokens)


async def _until_disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _race_disconnect(awaitable, request: Request):
    """Await `awaitable` unless the client disconnects first (then cancel it and raise ClientGone)."""
    work = asyncio.ensure_future(awaitable)
    watch = asyncio.ensure_future(_until_disconnected(request))
    try:
        done, _ = await asyncio.wait({work, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
    if work in done:
        return work.result()
    work.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await work
    raise ClientGone()


class Run:
    """One request to Triton with its bookkeeping; iterate `texts()` for the text to send to the client."""

    def __init__(self, state: FrontendState, route: ModelRoute, gen: Generation, started: float):
        self.state, self.route, self.gen, self.started = state, route, gen, started
        self.counts = Counts()
        self.matcher = StopMatcher(list(gen.request.stop_words))
        self.request_id = uuid.uuid4().hex
        self.dialect = dialect_named(route.dialect)
        self._responses = state.engine.generate(route.triton_model, gen, self.request_id, dialect=self.dialect,
                                                on_sent=self._mark_sent)
        # A runtime's own model: its text_output values become exact deltas the dialect's way (a model that sends
        # the whole text so far, say), and a model that returns no counts is counted with the tokenizer.
        self.text = self.dialect.text() if self.dialect is not None else None
        self.model_reason: str | None = None
        self._first: list[str] | None = None
        self._last_chunk: float | None = None
        self._sent_at = self._first_response_at = 0.0
        self.gone = False

    @property
    def stopped(self) -> bool:
        return self.matcher.stopped

    async def prime(self) -> None:
        """Wait for Triton's first response, so a rejection still becomes the HTTP status of the reply."""
        self.state.metrics.active.labels(self.route.name).inc()
        try:
            self._first = await self._next()
            self._first_response_at = time.perf_counter()
        except BaseException:
            await self.close()
            raise

    def _mark_sent(self) -> None:
        # After the request is built and written to the channel: building and sending are the frontend's cost.
        self._sent_at = time.perf_counter()

    async def _next(self) -> list[str] | None:
        """Text pieces safe to send from the next Triton response; None at the end."""
        try:
            delta = await self._responses.__anext__()
        except StopAsyncIteration:
            return None
        self.counts.add(delta)
        text = delta.text
        if self.text is not None:
            try:
                text = self.text.feed(delta.text, delta.final)
            except RevisedText as err:
                raise EngineError(502, str(err)) from None
            if delta.final and self.dialect.count_source == "client":
                self._count_on_client()
        self.model_reason = delta.finish_reason or self.model_reason
        piece = self.matcher.feed(text)
        if self.matcher.stopped or delta.final:
            return [piece, self.matcher.flush(), None]  # None marks the end after these pieces
        return [piece]

    def _count_on_client(self) -> None:
        """Usage for a model that returns no counts: the deployment's tokenizer's count (docs/guide.md, OpenAI-compatible API)."""
        counter = TokenCounter(self.state.templates[self.route.name].tokenizer)
        self.counts.prompt_tokens = counter.prompt(self.gen.request.text_input)
        self.counts.completion_tokens = counter.count(self.text.sent)
        self.counts.seen = True

    async def texts(self) -> AsyncIterator[str]:
        try:
            batch = self._first if self._first is not None else await self._next()
            while batch is not None:
                for piece in batch:
                    if piece is None:
                        return
                    if piece:
                        self._mark_chunk()
                        yield piece
                batch = await self._next()
        except (asyncio.CancelledError, GeneratorExit):
            self.gone = True
            raise
        finally:
            await self.close()

    def _mark_chunk(self) -> None:
        now = time.perf_counter()
        m = self.state.metrics
        if self._last_chunk is None:
            m.ttft.labels(self.route.name).observe(now - self.started)
            if self._first_response_at and self._sent_at:
                m.added.labels(self.route.name).observe((self._sent_at - self.started)
                                                        + (now - self._first_response_at))
        else:
            m.itl.labels(self.route.name).observe(now - self._last_chunk)
        self._last_chunk = now

    async def close(self) -> None:
        """Finish the Triton request (cancelling it if still running) and record the outcome once."""
        if self._responses is None:
            return
        responses, self._responses = self._responses, None
        await responses.aclose()  # cancels the Triton request when it has not finished
        m, name = self.state.metrics, self.route.name
        m.active.labels(name).dec()
        if self.gone:
            m.cancelled.labels(name, "client_disconnected").inc()
        elif self.matcher.stopped:
            m.cancelled.labels(name, "stop_sequence").inc()
        if self.counts.complete:
            m.prompt_tokens.labels(name).inc(self.counts.prompt_tokens)
            m.completion_tokens.labels(name).inc(self.counts.completion_tokens)
        m.duration.labels(name).observe(time.perf_counter() - self.started)

    def usage(self) -> Usage | None:
        """The server's counts so far (None until it has reported both)."""
        return _usage(self.counts)

    def outcome(self, text: str) -> Outcome:
        return Outcome(text, _finish_reason(self.gen, self.matcher.stopped, self.counts, self.model_reason),
                       _usage(self.counts))


async def complete(state: FrontendState, route: ModelRoute, gen: Generation, request: Request,
                   started: float) -> Outcome:
    """The whole completion (stream=false), cancelled at Triton if the client disconnects meanwhile."""
    run = Run(state, route, gen, started)

    async def collect() -> Outcome:
        await run.prime()
        return run.outcome("".join([piece async for piece in run.texts()]))

    try:
        return await _race_disconnect(collect(), request)
    except ClientGone:
        run.gone = True
        await run.close()
        raise


async def start_stream(state: FrontendState, route: ModelRoute, gen: Generation, request: Request,
                       started: float) -> Run:
    """A run whose first Triton response has arrived (errors before it raise and become the HTTP status)."""
    run = Run(state, route, gen, started)
    try:
        await _race_disconnect(run.prime(), request)
    except ClientGone:
        run.gone = True
        await run.close()
        raise
    return run


async def sse_events(run: Run, chunk: Callable[[str | None, str | None, Usage | None], str | list[str]],
                     usage_chunk: Callable[[Usage], str], include_usage: bool, first: str | None = None,
                     continuous_usage: bool = False) -> AsyncIterator[str]:
    """The `data:` payloads of one streamed answer: content chunks, the finish chunk, usage, [DONE]. `chunk` may
    make several payloads of one text (or none: a tool-call parser holding text back).

    With `continuous_usage` each chunk carries the server's counts so far (vLLM's continuous_usage_stats).
    When the client disconnects, the server cancels this generator; `Run.texts` then closes the Triton call,
    which cancels the request there.
    """
    def so_far() -> Usage | None:
        return run.usage() if continuous_usage else None

    try:
        if first is not None:
            yield first
        async with contextlib.aclosing(run.texts()) as texts:
            async for text in texts:
                for payload in _payloads(chunk(text, None, so_far())):
                    yield payload
        for payload in _payloads(chunk(None, run.outcome("").finish_reason, so_far())):
            yield payload
        usage = run.outcome("").usage
        if include_usage and usage is not None:
            yield usage_chunk(usage)
        yield "[DONE]"
    except EngineError as err:
        # The 200 status has gone out: errors after the first token travel inside the stream.
        yield error_body(err.status, err.message, err.kind, err.param, err.code).model_dump_json()


def _payloads(made: str | list[str]) -> list[str]:
    return [made] if isinstance(made, str) else made


def generation(route: ModelRoute, req, prompt: str) -> Generation:
    """The Triton-side request for a chat or text completion request."""
    dialect = dialect_named(route.dialect)
    for param in dialect.unsupported if dialect is not None else ():
        if getattr(req, param, None) is not None:
            raise APIError(400, f"{param} is not supported by this deployment ({dialect.title} has no input for "
                                "it); leave it unset", param=param)
    if req.continuous_usage() and dialect is not None and dialect.count_source == "client":
        raise APIError(400, f"stream_options.continuous_usage_stats: {dialect.title} returns no token counts, so "
                            "there is no usage until the end; leave it unset (include_usage still works)",
                       param="stream_options")
    limit = req.token_limit()
    max_tokens = limit if limit is not None else route.default_max_tokens
    min_tokens = req.min_tokens
    if req.ignore_eos:
        # Every runtime with a min_tokens input masks the end token until that many tokens exist (TensorRT-LLM's
        # end id, the hf runtime's processor, vLLM's SamplingParams): at the token limit it never stops early.
        if dialect is not None and "min_tokens" in dialect.unsupported:
            raise APIError(400, f"ignore_eos: not supported by this deployment ({dialect.title} has no input that "
                                "keeps generating past the end token); leave it unset", param="ignore_eos")
        min_tokens = max_tokens
    if min_tokens is not None and min_tokens > max_tokens:
        # Checked here because a runtime may not say why it fails (Triton's vLLM backend answers only "'NoneType'
        # object has no attribute 'lora_name'").
        raise APIError(400, f"min_tokens: {req.min_tokens} is more than the request's maximum of {max_tokens} tokens; "
                            "lower min_tokens or raise max_tokens", param="min_tokens")
    # OpenAI samples whenever temperature > 0 (top_p defaults to 1); TensorRT-LLM decodes greedily unless top_k or
    # top_p is set. So a temperature alone brings top_p 1.0 with it.
    top_p = 1.0 if req.top_p is None and req.temperature is not None and req.temperature > 0 else req.top_p
    request = EnsembleRequest.of(prompt, max_tokens, stream=req.stream, stop_words=req.stop_list(),
                                 temperature=req.temperature, top_p=top_p, seed=req.seed,
                                 presence_penalty=req.presence_penalty, frequency_penalty=req.frequency_penalty,
                                 min_tokens=min_tokens, lora_task_id=route.lora_task_id, **COUNTS)
    return Generation(request, lora_name=route.lora_name)


def route_for(state: FrontendState, name: str) -> ModelRoute:
    route = state.config.route(name)
    if route is None:
        raise APIError(404, f"The model `{name}` does not exist; GET /v1/models lists the served models",
                       param="model", code="model_not_found")
    return route
