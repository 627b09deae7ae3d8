"""How a client speaks to Triton's vLLM backend (runtime `vllm`): its inputs, its delta outputs, its counts.

`DIALECT` is the runtime's `Dialect` (what `Runtime.dialect()` returns); the OpenAI frontend and the load test's
users call it through the seam. The facts, read at the pinned release (vllm/release.py: 26.01; the fixture
tests/fixtures/nvidia/vllm_backend-r26.01.json, `request` and `sampling_params`, names each file):
- triton-inference-server/vllm_backend@r26.01 (c70d6547):src/utils/request.py and src/model.py: inputs are 1-D
  (max_batch_size 0): `text_input`, `stream`, and `sampling_parameters`, one JSON string that
  TritonSamplingParams.from_dict (src/utils/vllm_backend_utils.py) splats into vLLM's SamplingParams plus the
  backend's own `lora_name`;
- vllm-project/vllm@v0.13.0:vllm/sampling_params.py (read in PyPI's vllm 0.13.0 wheel, the package the server's
  v2.65.0 build.py installs): the SamplingParams fields sent here are max_tokens, stop, temperature, top_p, top_k,
  seed, min_tokens, presence_penalty, frequency_penalty and structured_outputs; without them vLLM's defaults apply
  (16 tokens, temperature 1); an empty stop string is refused ("stop cannot contain an empty string.");
- LoRA: `lora_name` inside sampling_parameters; the backend's _verify_loras (src/model.py) refuses it when
  model.json does not enable LoRA ("LoRA feature is not enabled.") or multi_lora.json does not name it, and
  GenerateRequest (src/utils/request.py) sends LoRARequest(str(i + 1), i + 1, path), i its place in multi_lora.json
  (vllm@v0.13.0:vllm/lora/request.py: lora_name, lora_int_id >= 1, lora_path);
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


# NVIDIA's guide type -> the StructuredOutputsParams field that carries it (vllm-project/vllm@v0.13.0:
# vllm/sampling_params.py: json (str or dict), regex, choice, grammar, json_object, structural_tag; the class is
# StructuredOutputsParams and the SamplingParams field `structured_outputs`: 0.13.0 has no GuidedDecodingParams).
STRUCTURED_OUTPUTS_FIELDS = {"json": "json_object", "json_schema": "json", "regex": "regex", "ebnf_grammar": "grammar"}


def structured_outputs(guide_type: str, guide: str) -> str:
    """The value of sampling_parameters["structured_outputs"]: a JSON-encoded StructuredOutputsParams, because the
    backend json.loads that key's value and splats it into the class (vllm_backend@r26.01:
    src/utils/vllm_backend_utils.py, TritonSamplingParams.from_dict; its CI sends `json.dumps({"choice": [...]})`).
    The schema goes as a dictionary, which vLLM 0.13.0 takes as it takes a string (`json: str | dict`), so a schema
    that is not JSON raises ValueError here rather than in the server. One constraint per request: the class refuses
    two."""
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
