"""How a client speaks to NVIDIA's llmapi model (runtime `trtllm`): its inputs, its whole-text outputs, its counts.

`DIALECT` is the runtime's `Dialect` (what `Runtime.dialect()` returns): every client of this runtime (the OpenAI
frontend, the load test's users) calls it through the seam, so the facts below live in one place (contract.py
holds the tensor tables; tests/doubles/llmapi/facts.json the upstream files they were read from):
- inputs are 1-D (max_batch_size 0: no batch dimension) and named `streaming`, `sampling_param_*`, `stop`;
- the model puts the prompt in front of its output unless `sampling_param_exclude_input_from_output` is true, so
  every request here sets it;
- text_output is the whole text so far in every streamed response, not a delta (`WholeText` turns it into
  exact deltas; the text may end inside a multi-byte character that the next response completes);
- the model returns no token counts: clients count with the deployment's tokenizer (`TokenCounter`) and label
  those counts as client-counted (COUNT_SOURCE);
- stop sequences are not sent (`stop_on_client`): helpers.py passes the `sampling_param_stop` tensor to
  SamplingParams as it is, an array of bytes, and SamplingParams._setup tokenizes each element, which a Hugging
  Face tokenizer refuses, so every request with a stop sequence fails in the container
  (tests/doubles/llmapi/facts.json, `double_behaviours.stop_as_bytes`). The OpenAI frontend matches stop
  sequences in the text: a streamed request is cancelled at the first one; an unstreamed one runs to its end (the
  model may not be decoupled, so the frontend cannot stream it) and its text is cut there.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from tritongen.runtimes.base import Dialect, RevisedText, TokenCounter

__all__ = ["DIALECT", "LlmApiDialect", "RevisedText", "TokenCounter", "WholeText", "request_inputs"]

MODEL = "tensorrt_llm"
# The model returns no token counts; every count a client reports for it is its own re-tokenisation of the text.
COUNT_SOURCE = "client"
COUNT_NOTE = ("client-counted: NVIDIA's llmapi model returns no token counts, so they are the deployment's "
              "tokenizer's count of the text received")
# The outputs a client asks for: the text and why it ended.
OUTPUTS = ("text_output", "finish_reason")
# OpenAI / ensemble parameter -> the model's input, with its Triton data type.
SAMPLING_INPUTS = {"temperature": ("sampling_param_temperature", "FP32"),
                   "top_p": ("sampling_param_top_p", "FP32"), "top_k": ("sampling_param_top_k", "INT32"),
                   "presence_penalty": ("sampling_param_presence_penalty", "FP32"),
                   "frequency_penalty": ("sampling_param_frequency_penalty", "FP32"),
                   "seed": ("sampling_param_seed", "UINT64")}
# Request parameters other runtimes take that this model has no input for.
UNSUPPORTED = ("min_tokens",)
_NUMPY = {"INT32": np.int32, "FP32": np.float32, "UINT64": np.uint64, "BOOL": np.bool_}


def request_inputs(prompt: str, max_tokens: int, *, stream: bool, stop: Iterable[str] = (),
                   **sampling: Any) -> list[tuple[str, str, np.ndarray]]:
    """(name, Triton data type, 1-D array) of each input of one request; `sampling` keys are SAMPLING_INPUTS'
    (None values are left out: the model's defaults apply)."""
    inputs = [("text_input", "BYTES", np.array([prompt.encode("utf-8")], dtype=np.object_)),
              ("streaming", "BOOL", np.array([stream], dtype=np.bool_)),
              ("sampling_param_max_tokens", "INT32", np.array([max_tokens], dtype=np.int32)),
              ("sampling_param_exclude_input_from_output", "BOOL", np.array([True], dtype=np.bool_)),
              ("return_finish_reason", "BOOL", np.array([True], dtype=np.bool_))]
    if any(stop):
        raise ValueError("NVIDIA's llmapi model fails every request that carries sampling_param_stop (its helpers.py "
                         "hands the tokenizer bytes); match stop sequences in the text instead (stop_on_client)")
    for key, value in sampling.items():
        if key not in SAMPLING_INPUTS:
            raise ValueError(f"the llmapi model has no input for {key!r}; it takes {', '.join(SAMPLING_INPUTS)}")
        if value is None:
            continue
        name, dtype = SAMPLING_INPUTS[key]
        inputs.append((name, dtype, np.array([value], dtype=_NUMPY[dtype])))
    return inputs


@dataclass
class WholeText:
    """Turns the model's whole-text-so-far responses into exact deltas.

    A response may end inside a multi-byte character (decoded as U+FFFD) that the next response completes, so
    trailing U+FFFD is held back until a later response or the final one. The concatenation of the deltas is the
    final response's text.
    """

    sent: str = ""

    def feed(self, text: str, final: bool) -> str:
        safe = text if final else text.rstrip("\ufffd")
        if not safe.startswith(self.sent):
            raise RevisedText(f"the model revised streamed text: {self.sent[-20:]!r} became "
                              f"{safe[max(0, len(self.sent) - 20):len(self.sent)]!r}")
        delta, self.sent = safe[len(self.sent):], safe
        return delta

    def end(self, last: str) -> str:
        """What is left when a stream ends without a response marked final: the held-back U+FFFD of `last`."""
        return self.feed(last, True)


class LlmApiDialect(Dialect):
    key = "llmapi"
    model = MODEL
    title = "NVIDIA's llmapi model"
    takes = "streaming, sampling_param_* and 1-D tensors"
    outputs = OUTPUTS
    count_source = COUNT_SOURCE
    unsupported = UNSUPPORTED
    stop_on_client = True

    def request_inputs(self, prompt: str, max_tokens: int, *, stream: bool, stop: Iterable[str] = (),
                       guide: tuple[str, str] | None = None, **sampling: Any) -> list[tuple[str, str, np.ndarray]]:
        if guide is not None:
            raise ValueError("NVIDIA's llmapi model has no guided-decoding input (its SamplingParams come from "
                             "sampling_param_* inputs only)")
        return request_inputs(prompt, max_tokens, stream=stream, stop=stop, **sampling)

    def text(self) -> WholeText:
        return WholeText()


DIALECT = LlmApiDialect()
