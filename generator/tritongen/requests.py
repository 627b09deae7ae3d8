"""One request to the ensemble or tensorrt_llm_bls, built in one place for every client.

tritongen's clients (`tritongen generate` through tritongen.client, the load test's users, the OpenAI frontend)
describe a request as a `Request` and send what it builds: its inputs with the data types and shapes the ensemble
declares (tritongen.contract.ENSEMBLE_INPUTS), as tensors or as an HTTP generate body, and on the ids path the
`tensorrt_llm` inputs that tensorrt_llm_bls would pass on for it (tritongen.contract.bls_wiring). Each field is the
ensemble input of its name, so no client lists input names or data types: a new request input is a row in the
contract's tables and a field here.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from tritongen import contract

Input = tuple[str, str, np.ndarray]
"""(name, Triton data type, array) of one request input; a runtime's Dialect gives its own inputs in this form."""

# The data types of the inputs a Request sets (a field of another type fails here, naming it).
_NUMPY = {"TYPE_STRING": np.object_, "TYPE_BOOL": np.bool_, "TYPE_INT32": np.int32, "TYPE_UINT64": np.uint64,
          "TYPE_FP32": np.float32}
_ENSEMBLE = {t.name: t for t in contract.ENSEMBLE_INPUTS}
_LLM = {t.name: t for t in contract.TENSORRT_LLM_INPUTS}
# ensemble input -> the tensorrt_llm input tensorrt_llm_bls passes it on as, unchanged (NVIDIA's ensemble wiring).
_TO_LLM = dict(contract.bls_wiring()["to_llm"])

COUNTS = {"return_num_input_tokens": True, "return_num_output_tokens": True, "exclude_input_in_output": True}
"""What a client that reports token counts asks for: the server's counts, and the prompt kept out of a non-streamed
response (which would otherwise count it too; tests/fixtures/nvidia/trtllm-1.2.1.json, `num_output_tokens`)."""


def triton_type(data_type: str) -> str:
    """The wire data type of a config data type: TYPE_STRING -> BYTES, TYPE_INT32 -> INT32."""
    return "BYTES" if data_type == "TYPE_STRING" else data_type.removeprefix("TYPE_")


def tensor_array(tensor: contract.Tensor, value: Any) -> np.ndarray:
    """`value` as an input of `tensor`, with a batch dimension of 1: [1, 1] for one value, [1, n] for n values."""
    values = list(value) if isinstance(value, (tuple, list)) else [value]
    if tensor.data_type == "TYPE_STRING":
        return np.array([[v.encode("utf-8") for v in values]], dtype=np.object_)
    return np.array([values], dtype=_NUMPY[tensor.data_type])


@dataclass(frozen=True)
class Request:
    """One generation request to the ensemble or tensorrt_llm_bls. Each field is the ensemble input of its name;
    None (or no stop words) is not sent, so the model's default applies."""

    text_input: str
    """The prompt."""
    max_tokens: int
    """The most tokens to generate."""
    stream: bool
    """Decoupled responses as tokens arrive (gRPC ModelStreamInfer, HTTP generate_stream); False: one response."""
    stop_words: tuple[str, ...] = ()
    """Text that ends the output (after it)."""
    end_id: int | None = None
    pad_id: int | None = None
    min_tokens: int | None = None
    """The fewest output tokens: the end token is not chosen before."""
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    seed: int | None = None
    beam_width: int | None = None
    lora_task_id: int | None = None
    """The LoRA adapter (tritongen.core.AdapterPlan.task_id); 0: the base model."""
    guided_decoding_guide_type: str | None = None
    """Constrained decoding: one of tritongen.core.GUIDE_TYPES."""
    guided_decoding_guide: str | None = None
    """The schema, regex or grammar of the guide (type `json` takes none)."""
    exclude_input_in_output: bool | None = None
    return_num_input_tokens: bool | None = None
    return_num_output_tokens: bool | None = None

    @classmethod
    def of(cls, prompt: str, max_tokens: int, *, stream: bool, stop_words: Iterable[str] | None = None,
           guide: tuple[str, str] | None = None, **inputs: Any) -> Request:
        """A request from a caller's keywords: `guide` is (guide type, guide); any other keyword is the ensemble
        input of its name (None: not sent). ValueError names a keyword that is no input here."""
        unknown = sorted(set(inputs) - OPTIONAL_FIELDS)
        if unknown:
            raise ValueError(f"unknown ensemble input {unknown[0]!r}; known: {', '.join(sorted(OPTIONAL_FIELDS))}")
        type_, text = guide if guide is not None else (None, None)
        return cls(prompt, max_tokens, stream, tuple(stop_words or ()), guided_decoding_guide_type=type_,
                   guided_decoding_guide=text, **inputs)

    def values(self) -> dict[str, Any]:
        """The inputs this request sends, by name, as Python values (a tuple for a list input)."""
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None and value != ():
                out[f.name] = value
        return out

    def inputs(self) -> list[Input]:
        """The ensemble inputs of this request, typed and shaped as the ensemble declares them."""
        return [(name, triton_type(_ENSEMBLE[name].data_type), tensor_array(_ENSEMBLE[name], value))
                for name, value in self.values().items()]

    def arrays(self) -> dict[str, np.ndarray]:
        """The same inputs' arrays by name."""
        return {name: array for name, _, array in self.inputs()}

    def http_body(self) -> dict[str, Any]:
        """The JSON body of an HTTP generate / generate_stream request (Triton maps each field to the input of its
        name: a list input as a list, any other as one value)."""
        return {name: list(value) if isinstance(value, tuple) else value for name, value in self.values().items()}

    def llm_arrays(self, encoded: Collection[str]) -> dict[str, np.ndarray]:
        """The `tensorrt_llm` inputs that tensorrt_llm_bls passes on unchanged for this request, under tensorrt_llm's
        names and data types (top_k -> runtime_top_k, stream -> streaming, ...): the ids path sends them itself.
        The inputs preprocessing turns into token ids (the prompt, stop words, end and pad ids) are the caller's to
        encode; one that is set and not in `encoded` raises ValueError naming it."""
        out = {}
        for name, value in self.values().items():
            if name in _TO_LLM:
                target = _LLM[_TO_LLM[name]]
                out[target.name] = tensor_array(target, value)
            elif name not in encoded:
                raise ValueError(f"{name}: not on the ids path (only preprocessing encodes it); leave it unset")
        return out


OPTIONAL_FIELDS = frozenset(f.name for f in fields(Request)) - {"text_input", "max_tokens", "stream"}
"""The fields a caller may set beside the prompt, max_tokens and stream."""


def grpc_tensors(inputs: Iterable[Input]) -> list:
    """tritonclient gRPC InferInputs of a request's inputs."""
    import tritonclient.grpc as grpcclient  # about 0.5 s to import; the HTTP and OpenAI paths never need it

    out = []
    for name, datatype, array in inputs:
        tensor = grpcclient.InferInput(name, list(array.shape), datatype)
        tensor.set_data_from_numpy(array)
        out.append(tensor)
    return out


def llm_inputs(arrays: Mapping[str, np.ndarray]) -> list[Input]:
    """`tensorrt_llm` inputs by name (the ids path's) with the data types that model declares."""
    return [(name, triton_type(_LLM[name].data_type), array) for name, array in arrays.items()]
