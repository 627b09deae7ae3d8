"""How a client speaks to Triton's vLLM backend (runtime `vllm`): its inputs, its delta outputs, its counts.

`DIALECT` is the runtime's `Dialect` (what `Runtime.dialect()` returns); the OpenAI frontend and the load test's
users call it through the seam. The facts, read from the backend's src/utils/request.py and src/model.py at
vllm_backend r26.01 (tests/fixtures/nvidia/vllm_backend-r26.01.json, `request`):
- inputs are 1-D (max_batch_size 0): `text_input`, `stream`, and `sampling_parameters`, one JSON string whose
  keys are vLLM SamplingParams fields (max_tokens, stop, temperature, top_p, top_k, seed, min_tokens,
  presence/frequency_penalty); without it vLLM's defaults apply (16 tokens, temperature 1);
- the backend puts the prompt in front of an unstreamed answer unless `exclude_input_in_output` is true (and
  refuses it false on a stream), so every request here sets it;
- a streamed text_output is the text new since the previous response (vLLM holds back an incomplete character
  and a possible stop string until it is decided), so the deltas join to the unstreamed text; the last streamed
  response carries text and the FINAL flag;
- counts come from the server: with `return_num_input_tokens` each response carries the prompt's token count,
  with `return_num_output_tokens` the tokens new in that response (unstreamed: all of them); with
  `return_finish_reason` each response carries vLLM's finish reason ("None" until the last: `length` or `stop`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import numpy as np

from tritongen.runtimes.base import Dialect

MODEL = "tensorrt_llm"
# The outputs a client asks for: the text, why it ended, and the server's token counts.
OUTPUTS = ("text_output", "finish_reason", "num_input_tokens", "num_output_tokens")
# OpenAI / load-test parameter -> its vLLM SamplingParams field (the same names).
SAMPLING_FIELDS = ("temperature", "top_p", "top_k", "seed", "presence_penalty", "frequency_penalty", "min_tokens")


# NVIDIA's guide type -> the StructuredOutputsParams field that carries it (vllm/sampling_params.py).
STRUCTURED_OUTPUTS_FIELDS = {"json": "json_object", "json_schema": "json", "regex": "regex", "ebnf_grammar": "grammar"}


def structured_outputs(guide_type: str, guide: str) -> str:
    """The value of sampling_parameters["structured_outputs"]: a JSON-encoded StructuredOutputsParams, because the
    backend json.loads that key's value and splats it into the class, and its check refuses a `json` that is not a
    dictionary (vllm_backend src/utils/vllm_backend_utils.py, TritonSamplingParams.from_dict and
    _validate_guided_params, read at 0881a8a5; its CI sends `json.dumps({"choice": [...]})`). A schema that is not
    JSON raises ValueError."""
    field = STRUCTURED_OUTPUTS_FIELDS.get(guide_type)
    if field is None:
        raise ValueError(f"unknown guide type {guide_type!r}; known: {', '.join(STRUCTURED_OUTPUTS_FIELDS)}")
    value = True if field == "json_object" else json.loads(guide) if field == "json" else guide
    return json.dumps({field: value})


class VllmDialect(Dialect):
    key = "vllm"
    model = MODEL
    title = "Triton's vLLM backend"
    takes = "stream, sampling_parameters as one JSON string and 1-D tensors"
    outputs = OUTPUTS
    count_source = "server"

    def request_inputs(self, prompt: str, max_tokens: int, *, stream: bool, stop: Iterable[str] = (),
                       guide: tuple[str, str] | None = None, **sampling: Any) -> list[tuple[str, str, np.ndarray]]:
        """`sampling` keys are SAMPLING_FIELDS' (None values are left out: vLLM's defaults apply), and `lora_name`:
        an adapter of multi_lora.json, which the backend reads from sampling_parameters; `guide` goes in as
        `structured_outputs` (structured_outputs())."""
        params: dict[str, Any] = {"max_tokens": max_tokens}
        if guide is not None:
            params["structured_outputs"] = structured_outputs(*guide)
        lora_name = sampling.pop("lora_name", None)
        if lora_name is not None:
            params["lora_name"] = lora_name
        stop = [s for s in stop if s]  # vLLM refuses an empty stop string
        if stop:
            params["stop"] = stop
        for key, value in sampling.items():
            if key not in SAMPLING_FIELDS:
                raise ValueError(f"the vLLM backend takes no {key!r} here; it takes {', '.join(SAMPLING_FIELDS)}")
            if value is not None:
                params[key] = value

        def flag(name: str, value: bool) -> tuple[str, str, np.ndarray]:
            return name, "BOOL", np.array([value], dtype=np.bool_)

        return [("text_input", "BYTES", np.array([prompt.encode("utf-8")], dtype=np.object_)),
                flag("stream", stream),
                ("sampling_parameters", "BYTES", np.array([json.dumps(params).encode("utf-8")], dtype=np.object_)),
                flag("exclude_input_in_output", True), flag("return_finish_reason", True),
                flag("return_num_input_tokens", True), flag("return_num_output_tokens", True)]


DIALECT = VllmDialect()
