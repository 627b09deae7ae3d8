"""The ids-path engine adapter: OpenAI requests go to `tensorrt_llm` as token ids, and its ids become text here.

The same interface as `TritonEngine` (the routers and `service.Run` do not know which one they talk to): the
prompt is tokenized in this worker with the deployment's tokenizer, `tensorrt_llm` streams token ids, and each
response's ids are detokenized incrementally in this worker (tritongen.token_ids, the detokenizer tensorrt_llm_bls
ships), so the text is byte for byte the text path's while no Python model of tritonserver runs per response.
Stop sequences go to the LLM as stop_words_list (it stops at them); the text is cut by `service.Run`'s matcher as
on the text path. Every other input of the request (sampling, the adapter's lora_task_id, a guide) goes to
`tensorrt_llm` as tensorrt_llm_bls would pass it on (tritongen.token_ids.Codec.inputs). Token counts are
tensorrt_llm's own num_input_tokens / num_output_tokens.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from typing import TYPE_CHECKING

from tritonclient.grpc import InferResult

from tritongen.frontend.engine import Delta, EngineError, Generation, TritonEngine, count, infer_request
from tritongen.requests import llm_inputs
from tritongen.token_ids import LLM_MODEL, OUTPUTS, Codec, response_ids

if TYPE_CHECKING:
    from tritongen.runtimes.base import Dialect


def build_ids_request(codec: Codec, gen: Generation, request_id: str):
    """The tensorrt_llm ModelInferRequest of one generation (batch 1, the server's counts asked for)."""
    return infer_request(LLM_MODEL, request_id, llm_inputs(codec.inputs(gen.request)), OUTPUTS)


class TritonIdsEngine(TritonEngine):
    """`TritonEngine` for the ids path; `codecs` maps each route's text model name to its tokenizer's codec."""

    def __init__(self, grpc_url: str, codecs: Mapping[str, Codec]):
        super().__init__(grpc_url)
        self.codecs = dict(codecs)

    async def ready(self, models: list[str]) -> bool:
        return await super().ready([LLM_MODEL])  # the text models are not on this path

    async def generate(self, model: str, gen: Generation, request_id: str, dialect: Dialect | None = None,
                       on_sent: Callable[[], None] | None = None) -> AsyncIterator[Delta]:
        if dialect is not None:
            raise EngineError(400, f"the ids path speaks the C++ TensorRT-LLM contract, not {dialect.title}'s; "
                              "serve with --openai-path text", "invalid_request_error")

        codec = self.codecs[model]
        text = codec.text(gen.request.max_tokens)
        request = build_ids_request(codec, gen, request_id)
        async with contextlib.aclosing(self._stream(request, request_id, on_sent)) as messages:
            async for message in messages:
                result = InferResult(message)
                final = message.parameters.get("triton_final_response")
                final = final is not None and final.bool_param
                ids = response_ids(result.as_numpy("output_ids"), result.as_numpy("sequence_length"))
                yield Delta(text=text.push(ids, final=final) if ids or final else "",
                            output_tokens=count(result, "num_output_tokens"),
                            input_tokens=count(result, "num_input_tokens"), final=final)
