"""How a client speaks to NVIDIA's llmapi model (runtime `trtllm`): its inputs, its whole-text outputs, its counts.

One module that every client of this runtime calls (the OpenAI frontend, the load test's users, the CLI's
clients), so the facts below live in one place (contract.py holds the tensor tables; tests/doubles/llmapi/
facts.json the upstream files they were read from):
- inputs are 1-D (max_batch_size 0: no batch dimension) and named `streaming`, `sampling_param_*`, `stop`;
- the model puts the prompt in front of its output unless `sampling_param_exclude_input_from_output` is true, so
  every request here sets it;
- text_output is the whole text so far in every streamed response, not a delta (`WholeText` turns it into
  exact deltas; the text may end inside a multi-byte character that the next response completes);
- the model returns no token counts: clients count with the deployment's tokenizer (`TokenCounter`) and label
  those counts as client-counted (COUNT_SOURCE).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

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
    stop = [s for s in stop if s]
    if stop:
        inputs.append(("sampling_param_stop", "BYTES", np.array([s.encode("utf-8") for s in stop], dtype=np.object_)))
    for key, value in sampling.items():
        if key not in SAMPLING_INPUTS:
            raise ValueError(f"the llmapi model has no input for {key!r}; it takes {', '.join(SAMPLING_INPUTS)}")
        if value is None:
            continue
        name, dtype = SAMPLING_INPUTS[key]
        inputs.append((name, dtype, np.array([value], dtype=_NUMPY[dtype])))
    return inputs


def grpc_inputs(prompt: str, max_tokens: int, *, stream: bool, stop: Iterable[str] = (), **sampling: Any) -> list:
    """tritonclient gRPC InferInputs of one request."""
    import tritonclient.grpc as grpcclient

    out = []
    for name, dtype, value in request_inputs(prompt, max_tokens, stream=stream, stop=stop, **sampling):
        tensor = grpcclient.InferInput(name, list(value.shape), dtype)
        tensor.set_data_from_numpy(value)
        out.append(tensor)
    return out


def http_body(prompt: str, max_tokens: int, *, stream: bool, stop: Iterable[str] = (), **sampling: Any) -> dict:
    """The JSON body of a generate / generate_stream request (Triton maps each field to the input of its name)."""
    body: dict[str, Any] = {}
    for name, _, value in request_inputs(prompt, max_tokens, stream=stream, stop=stop, **sampling):
        items = [v.decode("utf-8") if isinstance(v, bytes) else v.item() for v in value]
        body[name] = items[0] if name != "sampling_param_stop" else items
    return body


class RevisedText(Exception):
    """The model changed text it had already streamed (so no exact delta exists)."""


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


class TokenCounter:
    """Token counts for a model that returns none: the deployment's tokenizer's count of the text (no special
    tokens added), so `count(a + b)` is the count of the text received so far, not a sum of pieces."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def count(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False)) if text else 0

    def prompt(self, text: str) -> int:
        """The prompt as the model sees it: with the special tokens the tokenizer adds (BOS)."""
        return len(self.tokenizer.encode(text))
