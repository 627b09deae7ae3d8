"""The adapter between OpenAI requests and a Triton deployment: tritonclient's asyncio gRPC protocol.

One OpenAI request is one Triton request on its own ModelStreamInfer call (calls share one HTTP/2 channel), so
cancelling the call cancels exactly that request. The request carries the tensor names of Triton's own OpenAI
frontend's TensorRT-LLM converter (server repo python/openai, r26.07: engine/utils/triton.py), which the
rendered ensemble and tensorrt_llm_bls accept: text_input, max_tokens, stream, stop_words, temperature, top_p,
seed, presence/frequency_penalty, return_num_input_tokens, return_num_output_tokens, and
exclude_input_in_output true as that converter sends it (Completions `echo` is done here by prepending the
prompt). The request is a tritongen.requests.Request, the one every tritongen client builds; service.generation
makes it from the OpenAI request.

Token counts come from the server only: `num_input_tokens` once, `num_output_tokens` with each response, counting
the tokens of that response (TensorRT-LLM's C++ backend: the ids in its output_ids; tritongen's runtimes count
alike; see generator/tritongen/loadtests/samples.py): the completion's count is their sum, as Triton's own frontend computes it.
exclude_input_in_output true keeps the prompt out of a non-streamed response's count.

A route of a runtime's own model (its `Dialect`, tritongen.runtimes.base) gets that model's inputs from the
dialect instead (`build_dialect_request`); service.Run reads its text and counts the dialect's way.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import re
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import grpc
import tritonclient.grpc.aio as aioclient
from tritonclient.grpc import InferResult, service_pb2 as pb2, service_pb2_grpc
from tritonclient.utils import serialize_byte_tensor

from tritongen.requests import Input, Request
from tritongen.served import error_kinds

if TYPE_CHECKING:
    from tritongen.runtimes.base import Dialect

# The sampling values a runtime's own model takes (tritongen.runtimes.base.Dialect): OpenAI's names, which are the
# ensemble's too.
DIALECT_SAMPLING = ("temperature", "top_p", "presence_penalty", "frequency_penalty", "min_tokens", "seed")
# Output tensors a response may carry; any other outputs of the model are not requested.
OUTPUTS = ("text_output", "num_input_tokens", "num_output_tokens")
# How long Triton may take to close a call after its final response before we cancel it (TritonEngine._close).
CLOSE_S = 5.0
# The channel options tritonclient uses (messages up to 2 GiB), plus keepalive for long streams.
_CHANNEL_OPTIONS = [("grpc.max_send_message_length", 2**31 - 1), ("grpc.max_receive_message_length", 2**31 - 1),
                    ("grpc.keepalive_time_ms", 60_000), ("grpc.http2.max_pings_without_data", 0)]


class EngineError(Exception):
    """A request Triton refused or failed, with the HTTP status, OpenAI error type and request field it maps to."""

    def __init__(self, status: int, message: str, kind: str = "server_error", param: str | None = None,
                 code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.kind, self.param, self.code = status, message, kind, param, code


# Model inputs (C++ contract, hf runtime, llmapi model) -> the OpenAI request field that set them.
_PARAMS = {"seed": "seed", "random_seed": "seed", "temperature": "temperature", "top_p": "top_p",
           "runtime_top_p": "top_p", "presence_penalty": "presence_penalty", "frequency_penalty": "frequency_penalty",
           "min_tokens": "min_tokens", "max_tokens": "max_tokens", "request_output_len": "max_tokens",
           "stop_words": "stop", "stop": "stop", "input_ids": "prompt", "text_input": "prompt",
           "guided_decoding_guide_type": "response_format", "guided_decoding_guide": "response_format"}


def _of_kind(kind: str, input_name: str | None, message: str) -> EngineError:
    """The error of a tritongen model, by its tag (tritongen.served.error_kinds); `message` is the text without it."""
    if kind == error_kinds.OVERLOADED:
        return EngineError(429, f"the deployment is at capacity: {message}", "rate_limit_error")
    if kind == error_kinds.UNAVAILABLE:
        return EngineError(503, f"the deployment is unavailable: {message}", "server_error")
    if kind == error_kinds.CONTEXT_LENGTH_EXCEEDED:
        return EngineError(400, message, "invalid_request_error", "prompt", "context_length_exceeded")
    if kind == error_kinds.BAD_REQUEST:
        return EngineError(400, message, "invalid_request_error", _PARAMS.get(input_name or ""))
    return EngineError(500, message, "server_error")


# Errors without a tag come from code tritongen does not own, so only their wording tells them apart: Triton core
# (its queue, unknown or unready models, its input shape and type checks), NVIDIA's TensorRT-LLM backend and its
# llmapi model (tests/doubles/llmapi imitates that model's wording), vLLM's backend, and transformers' own errors
# that the hf runtime passes on.
_OVERLOAD = ("exceeds maximum queue size", "queue is full", "resource exhausted", "too many requests")
_UNAVAILABLE = ("not ready", "unavailable", "is not found", "unknown model", "failed to connect", "shutting down")
_BAD_INPUT = ("not supported", "must be", "unexpected shape", "invalid argument", "expected", "exceeds the",
              "exceed the", "too long", "out of range", ": required")
# A prompt that does not fit: the LLM API's "the prompt (N tokens) and max_tokens (M) exceed max_seq_len"; vLLM's
# "The decoder prompt (length N) is longer than the maximum model length of M".
_TOO_LONG = re.compile(r"prompt \(\d+ tokens\).*exceed|exceeds? the (?:model's )?(?:maximum )?(?:context|sequence) "
                       r"length|longer than the maximum model length", re.IGNORECASE)
# Triton's vLLM backend turns every SamplingParams vLLM refuses into this (TritonSamplingParams.from_dict logs the
# reason and returns None; the request then reads lora_name of None): the request's sampling values are wrong.
_VLLM_SAMPLING = "'NoneType' object has no attribute 'lora_name'"
# vLLM 0.13.0's refusals of a structured-outputs constraint (vllm/v1/engine/input_processor.py
# _validate_structured_output; with the default backend "auto" a constraint XGrammar refuses is retried with guidance,
# whose refusal is "Grammar error: ..." in vllm/v1/structured_output/backend_guidance.py): the request's guide is wrong.
_VLLM_GUIDE = ("Grammar error: ", "structured_outputs.grammar cannot be an empty string", "cannot be an empty list",
               "No valid structured output parameter found")
_NAMED = re.compile(r"\b(?:sampling_param_)?([a-z_]+)(?::| \()")


def _param(message: str) -> tuple[str | None, str | None]:
    """(OpenAI field, error code) a foreign error names: `top_p (2.0) must ...`, `seed: ...`."""
    if _TOO_LONG.search(message):
        return "prompt", "context_length_exceeded"
    for name in _NAMED.findall(message):
        if name in _PARAMS:
            return _PARAMS[name], None
    return None, None


def classify(message: str) -> EngineError:
    """Map a Triton error message to an HTTP status: 429 overload, 503 unavailable, 400 bad input (naming the
    request field that set the input the error concerns), else 500. A tritongen model's error says its kind in
    its tag, which the message shown drops; any other error is read by its wording."""
    tagged = error_kinds.parse(message)
    if tagged is not None:
        return _of_kind(*tagged)
    text = message.lower()
    if any(m in text for m in _OVERLOAD):
        return EngineError(429, f"the deployment is at capacity: {message}", "rate_limit_error")
    if any(m in text for m in _UNAVAILABLE):
        return EngineError(503, f"the deployment is unavailable: {message}", "server_error")
    if _VLLM_SAMPLING in message:
        return EngineError(400, "the vLLM backend refused the request's sampling parameters (it logs vLLM's reason "
                           "and answers only: " + message + "); check temperature, top_p, seed, penalties and "
                           "min_tokens against vLLM's limits", "invalid_request_error")
    if any(m in message for m in _VLLM_GUIDE):
        return EngineError(400, f"vLLM refused the request's guide (response_format, structured_outputs or a named "
                           f"tool's parameters): {message}", "invalid_request_error")
    param, code = _param(message)
    if any(m in text for m in _BAD_INPUT) or code is not None:
        return EngineError(400, message, "invalid_request_error", param, code)
    return EngineError(500, message, "server_error")


def _rpc_error(err: grpc.aio.AioRpcError, url: str) -> EngineError:
    code = err.code()
    details = err.details() or ""
    shown = (error_kinds.parse(details) or (None, None, details))[2]
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        return EngineError(429, f"the deployment is at capacity: {shown}", "rate_limit_error")
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        return EngineError(503, f"Triton at {url} is unavailable: {shown}", "server_error")
    return classify(details or str(code))


@dataclass(frozen=True)
class Generation:
    """What one OpenAI request asks of the Triton model."""

    request: Request
    """The request to the ensemble (tritongen.requests), made by service.generation; a runtime's own model gets its
    values under its own names (its `Dialect`)."""
    lora_name: str | None = None
    """The adapter of request.lora_task_id by name, for a runtime's own model that selects adapters by name (vLLM's
    `lora_name`)."""


@dataclass
class Delta:
    """One Triton response: its text and the server's token counts (None where the response has none)."""

    text: str
    output_tokens: int | None
    input_tokens: int | None
    final: bool
    finish_reason: str | None = None
    """The model's own finish reason (a dialect's model: `length` or `stop`), where it reports one."""


@dataclass
class Counts:
    """Server-side token counts of one request, accumulated over its responses."""

    prompt_tokens: int | None = None
    completion_tokens: int = 0
    seen: bool = field(default=False, repr=False)

    def add(self, delta: Delta) -> None:
        if delta.input_tokens is not None and self.prompt_tokens is None:
            self.prompt_tokens = delta.input_tokens
        if delta.output_tokens is not None:
            self.completion_tokens += delta.output_tokens  # per-response counts
            self.seen = True

    @property
    def complete(self) -> bool:
        return self.prompt_tokens is not None and self.seen


def build_dialect_request(model: str, gen: Generation, request_id: str, dialect: Dialect):
    """The ModelInferRequest for a runtime's own model: its inputs and outputs from the runtime's dialect."""
    r = gen.request
    # service.generation refused the parameters the dialect cannot take; what is left goes under OpenAI's names.
    params = {k: getattr(r, k) for k in DIALECT_SAMPLING
              if getattr(r, k) is not None and k not in dialect.unsupported}
    if r.guided_decoding_guide_type is not None:
        params["guide"] = (r.guided_decoding_guide_type, r.guided_decoding_guide or "")
    if gen.lora_name is not None:
        params["lora_name"] = gen.lora_name
    # A model that cannot take stop sequences gets none: the frontend's StopMatcher finds them and cancels.
    stop = () if dialect.stop_on_client else r.stop_words
    try:
        inputs = dialect.request_inputs(r.text_input, r.max_tokens, stream=r.stream, stop=stop, **params)
    except ValueError as err:  # a guide its model cannot take (the plan's guide types keep such requests out)
        raise EngineError(400, f"response_format: {err}", "invalid_request_error", "response_format") from None
    return infer_request(model, request_id, inputs, dialect.outputs)


def build_request(model: str, gen: Generation, request_id: str):
    """The ModelInferRequest for one generation: its request's inputs (tritongen.requests)."""
    return infer_request(model, request_id, gen.request.inputs(), OUTPUTS)


def infer_request(model: str, request_id: str, inputs: Iterable[Input], outputs: Iterable[str]) -> object:
    """A ModelInferRequest of `inputs` asking for `outputs`."""
    request = pb2.ModelInferRequest(model_name=model, id=request_id)
    for name, datatype, array in inputs:
        request.inputs.append(pb2.ModelInferRequest().InferInputTensor(name=name, datatype=datatype,
                                                                       shape=list(array.shape)))
        request.raw_input_contents.append(serialize_byte_tensor(array).item() if datatype == "BYTES"
                                          else array.tobytes())
    for name in outputs:
        request.outputs.append(pb2.ModelInferRequest().InferRequestedOutputTensor(name=name))
    # Without this a decoupled model's flags-only final response never reaches the client.
    request.parameters["triton_enable_empty_final_response"].bool_param = True
    return request


def _parse(response) -> Delta:
    result = InferResult(response)
    final = response.parameters.get("triton_final_response")
    text = ""
    out = result.as_numpy("text_output")
    if out is not None and out.size:
        value = out.reshape(-1)[0]
        text = value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)

    reason = None
    array = result.as_numpy("finish_reason")
    if array is not None and array.size:
        value = array.reshape(-1)[0]
        reason = value.decode("utf-8") if isinstance(value, bytes) else str(value)
    return Delta(text=text, output_tokens=count(result, "num_output_tokens"),
                 input_tokens=count(result, "num_input_tokens"), final=final is not None and final.bool_param,
                 finish_reason=reason)


def count(result, name: str) -> int | None:
    """A token count output of one response (InferResult); None when it carries none."""
    array = result.as_numpy(name)
    return None if array is None or not array.size else int(array.reshape(-1)[0])


class TritonEngine:
    """Talks to one tritonserver's gRPC endpoint (local or remote)."""

    def __init__(self, grpc_url: str):
        self.grpc_url = grpc_url
        self._channel: grpc.aio.Channel | None = None
        self._stub = None
        self._client = None
        # How each call ended: "ok" (Triton closed it after the final response), "error", "cancelled" (by us).
        self.calls_ended: collections.Counter = collections.Counter()
        self._closing: set[asyncio.Task] = set()  # referenced here: a task nobody holds may be collected

    async def start(self) -> None:
        self._client = aioclient.InferenceServerClient(self.grpc_url)
        self._channel = grpc.aio.insecure_channel(self.grpc_url, options=_CHANNEL_OPTIONS)
        self._stub = service_pb2_grpc.GRPCInferenceServiceStub(self._channel)

    async def close(self) -> None:
        await self.closed()
        if self._client is not None:
            await self._client.close()
        if self._channel is not None:
            await self._channel.close()

    async def ready(self, models: list[str]) -> bool:
        """Triton is ready and so is every model named."""
        try:
            if not await self._client.is_server_ready():
                return False
            return all([await self._client.is_model_ready(m) for m in models])
        except Exception:  # noqa: BLE001 - an unreachable server is simply not ready
            return False

    async def generate(self, model: str, gen: Generation, request_id: str,
                       dialect: Dialect | None = None,
                       on_sent: Callable[[], None] | None = None) -> AsyncIterator[Delta]:
        """Yield each response of one request until the final one; closing the iterator early cancels it.
        `dialect`: the tensors of a runtime's own model (None: the ensemble's). `on_sent` is called once the
        request has been written to the channel."""
        request = build_request(model, gen, request_id) if dialect is None else \
            build_dialect_request(model, gen, request_id, dialect)
        # aclosing: closing this iterator closes the call's at once (cancelling the request), not at loop cleanup.
        async with contextlib.aclosing(self._stream(request, request_id, on_sent)) as messages:
            async for message in messages:
                yield _parse(message)

    async def _stream(self, request, request_id: str, on_sent: Callable[[], None] | None):
        """The infer responses of one ModelStreamInfer call, up to and including the final one."""
        done = asyncio.Event()

        async def requests():
            yield request
            # grpc asks for the next message once this one is written: the request has left.
            if on_sent is not None:
                on_sent()
            # Keep our side of the stream open until the final response: a half-closed stream is fine for
            # Triton, but holding it makes the call's lifetime the request's lifetime.
            await done.wait()

        call = self._stub.ModelStreamInfer(requests())
        finished = False
        completed = False
        try:
            async for message in call:
                if message.error_message:
                    finished = completed = True
                    raise classify(message.error_message)
                final = message.infer_response.parameters.get("triton_final_response")
                if final is not None and final.bool_param:
                    finished = completed = True
                    yield message.infer_response
                    return
                yield message.infer_response
            finished = True
            raise EngineError(502, f"Triton closed the stream of request {request_id} before its final response")
        except grpc.aio.AioRpcError as err:
            finished = True
            raise _rpc_error(err, self.grpc_url) from None
        finally:
            done.set()
            if not finished:
                # The caller stopped early (client gone, stop sequence found): cancel the Triton request.
                call.cancel()
                self.calls_ended["cancelled"] += 1
            elif completed:
                # In the background: the caller has its final response and needs nothing more from this call.
                task = asyncio.get_running_loop().create_task(self._close(call))
                self._closing.add(task)
                task.add_done_callback(self._closing.discard)

    async def closed(self) -> None:
        """Wait until every call whose final response has come is closed (or cancelled)."""
        while self._closing:
            await asyncio.gather(*list(self._closing), return_exceptions=True)

    async def _close(self, call) -> None:
        """Wait for Triton to end a call whose final response has come (our side is half-closed, so it ends the
        stream at once). Dropped unfinished, grpc.aio cancels a call when it is collected, and that cancellation
        races the server's own end of the stream: tritonserver's gRPC handlers had use-after-free crashes in such
        races until 2.54 and 2.57 (triton-inference-server/server PRs #7840, #8078; the suite runs 2.51). A call
        Triton leaves open past CLOSE_S is cancelled, and counted so."""
        try:
            code = await asyncio.wait_for(call.code(), CLOSE_S)
        except (asyncio.TimeoutError, asyncio.CancelledError):  # CancelledError: the event loop is closing
            call.cancel()
            self.calls_ended["cancelled"] += 1
            return
        self.calls_ended["ok" if code == grpc.StatusCode.OK else "error"] += 1
