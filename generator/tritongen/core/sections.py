"""The Plan's parts the runtimes read and write: frozen, serialised as part of the plan JSON (`tritongen.plan.model.Plan`
holds them)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class PathsPlan(_Frozen):
    """Every host path the deployment uses, absolute (`~` expanded, relative paths taken from the spec's folder)."""

    checkpoint: str
    engine: str | None = None
    """tensorrtllm: the engine folder the tensorrt_llm model loads (given, or the engine cache entry)."""


class TokenizerPlan(_Frozen):
    dir: str
    """The tokenizer folder (absolute): preprocessing, postprocessing and the load generator load it."""
    end_id: int
    pad_id: int
    vocab_size: int
    add_special_tokens: bool
    skip_special_tokens: bool
    loaded: bool = True
    """False when the tokenizer files were not there at planning (engine path only): the ids then come from the
    checkpoint's config.json, and serving and the load test need the files in `dir` first."""


class InstanceGroup(_Frozen):
    """One Triton instance_group entry."""

    kind: Literal["KIND_CPU", "KIND_GPU"]
    count: int
    gpus: tuple[int, ...] = ()


class ServerGroupPlan(_Frozen):
    """What one server group (one tritonserver of the placement) serves with: its own KV budget and devices."""

    name: str
    kv_tokens: int
    """KV-cache budget of each LLM instance in this group (tokens)."""
    instances: int
    gpu_device_ids: str
    """tensorrt_llm gpu_device_ids as the group's process sees its devices (numbered from 0)."""


GUIDE_TYPES = ("json", "json_schema", "regex", "ebnf_grammar")
"""NVIDIA's guide types (TensorRT-LLM's GuidedDecodingParams.GuideType, the values of the `guided_decoding_guide_type`
input): json (any JSON value; no guide), json_schema (the guide is a JSON schema), regex, ebnf_grammar (XGrammar's
EBNF)."""
GUIDE_TYPE_INPUT = "guided_decoding_guide_type"
GUIDE_INPUT = "guided_decoding_guide"


class StructuredOutputPlan(_Frozen):
    """Constrained decoding as the deployment serves it: what the runtime's model accepts and what it does with it
    (spec `structured_output`, resolved against the runtime)."""

    guide_types: tuple[str, ...] = ()
    """The values of `guided_decoding_guide_type` the runtime's model accepts (a subset of json, json_schema, regex,
    ebnf_grammar, NVIDIA's names); empty: it cannot constrain decoding, and a request with a guide is refused."""
    backend: Literal["xgrammar"] = "xgrammar"
    """The grammar library (structured_output.backend)."""
    tool_call_format: Literal["auto", "llama3_json", "hermes", "mistral"] = "auto"
    """How the OpenAI frontend renders tools and parses calls (structured_output.tool_call_format; auto: from the
    chat template)."""
    max_schema_bytes: int = 65536
    """Largest guide accepted, UTF-8 bytes (structured_output.max_schema_bytes)."""
    how: str = ""
    """What the runtime does with a guide, in a line (`tritongen plan`), or why it refuses one."""


class AdapterPlan(_Frozen):
    """One LoRA adapter served with the base model (spec model.adapters), as checked against the checkpoint."""

    name: str
    """Its public name (the OpenAI `model` that selects it; its key in vLLM's multi_lora.json)."""
    task_id: int
    """Triton's `lora_task_id` that selects it: its 1-based position in model.adapters (0 is the base model), as
    Triton's OpenAI frontend numbers multi_lora.json entries."""
    path: str
    """The PEFT adapter folder (absolute)."""
    rank: int
    """The LoRA rank `r` of adapter_config.json (the largest over its modules where rank_pattern sets more)."""
    alpha: float
    """lora_alpha of adapter_config.json."""
    target_modules: tuple[str, ...]
    """The base modules it adapts (adapter_config.json target_modules; a regular expression stays one entry)."""
