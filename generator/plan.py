"""Spec -> frozen Plan: every default, path and derived value resolved once.

Later stages (render, serve, load test) read only the Plan, never the raw YAML, so `tritongen plan` shows
exactly what will be rendered and served.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from generator.errors import SpecError, problem
from generator.spec import LoadSection, SLOSection, Spec, load_spec


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TokenizerPlan(_Frozen):
    dir: str
    end_id: int
    pad_id: int
    vocab_size: int
    add_special_tokens: bool
    skip_special_tokens: bool


class InstanceGroup(_Frozen):
    """One Triton instance_group entry."""

    kind: Literal["KIND_CPU", "KIND_GPU"]
    count: int
    gpus: tuple[int, ...] = ()


class HFRuntimePlan(_Frozen):
    """Settings of the python-backend LLM model (runtime hf)."""

    checkpoint_dir: str
    dtype: str
    block_size: int
    num_blocks: int | None
    max_batch_tokens: int | None
    max_memory_percent: float


class Plan(_Frozen):
    name: str
    runtime: Literal["hf", "tensorrtllm"]
    spec_dir: str
    tokenizer: TokenizerPlan
    triton_max_batch_size: int
    decoupled: bool
    exclude_input_in_output: bool
    max_tokens_default: int
    preprocessing_instances: int
    postprocessing_instances: int
    max_queue_delay_us: int
    max_queue_size: int
    logits_datatype: str
    llm_instance_group: InstanceGroup
    hf: HFRuntimePlan | None
    bls: bool
    load: LoadSection
    slo: SLOSection

    def to_json(self) -> str:
        return json.dumps(self.model_dump(mode="json"), indent=2, sort_keys=True)


def _resolve_dir(base: Path, value: str, field: str) -> Path:
    p = Path(value).expanduser()
    p = p if p.is_absolute() else (base / p)
    p = p.resolve()
    if not p.is_dir():
        raise SpecError(problem(field, f"folder {p} does not exist",
                                "point it at a local checkpoint (make one with `tritongen demo-model DIR`)"))
    return p


def _tokenizer_plan(spec: Spec, tokenizer_dir: Path) -> TokenizerPlan:
    from transformers import AutoTokenizer

    field = "model.tokenizer" if spec.model.tokenizer else "model.checkpoint"
    try:
        tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    except (OSError, ValueError) as err:
        raise SpecError(problem(field, f"no tokenizer loads from {tokenizer_dir} ({err})",
                                "point it at a folder with tokenizer files")) from None
    if tok.eos_token_id is None:
        raise SpecError(problem(field, "the tokenizer has no eos token", "set eos_token in tokenizer_config.json"))
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    return TokenizerPlan(dir=str(tokenizer_dir), end_id=tok.eos_token_id, pad_id=pad, vocab_size=len(tok),
                         add_special_tokens=spec.model.add_special_tokens,
                         skip_special_tokens=spec.model.skip_special_tokens)


def _llm_instance_group(spec: Spec) -> InstanceGroup:
    if spec.runtime == "tensorrtllm":
        # The TensorRT-LLM backend places itself on GPUs through gpu_device_ids; instance_group stays CPU/1.
        return InstanceGroup(kind="KIND_CPU", count=1)
    if spec.placement.device == "cpu":
        return InstanceGroup(kind="KIND_CPU", count=1)
    gpus = tuple(spec.placement.gpu_ids or [0])
    return InstanceGroup(kind="KIND_GPU", count=spec.placement.instances_per_gpu, gpus=gpus)


def make_plan(spec: Spec, spec_dir: Path) -> Plan:
    """Resolve a validated Spec into a Plan. Reads the tokenizer to take end/pad ids from it."""
    checkpoint = _resolve_dir(spec_dir, spec.model.checkpoint, "model.checkpoint")
    tokenizer_dir = _resolve_dir(spec_dir, spec.model.tokenizer, "model.tokenizer") if spec.model.tokenizer \
        else checkpoint
    kv = spec.serving.kv_cache
    hf = None
    if spec.runtime == "hf":
        hf = HFRuntimePlan(
            checkpoint_dir=str(checkpoint), dtype=spec.model.dtype, block_size=kv.block_size,
            # An absolute token budget becomes a block count; otherwise transformers sizes the cache from memory.
            num_blocks=-(-kv.max_tokens // kv.block_size) if kv.max_tokens else None,
            max_batch_tokens=spec.serving.max_batch_tokens, max_memory_percent=kv.free_gpu_mem_fraction,
        )
    s = spec.serving
    return Plan(
        name=spec.name, runtime=spec.runtime, spec_dir=str(spec_dir.resolve()),
        tokenizer=_tokenizer_plan(spec, tokenizer_dir),
        triton_max_batch_size=s.max_batch_size, decoupled=s.streaming,
        exclude_input_in_output=s.exclude_input_in_output, max_tokens_default=s.max_tokens_default,
        preprocessing_instances=s.preprocessing_instances, postprocessing_instances=s.postprocessing_instances,
        max_queue_delay_us=s.dynamic_batching.max_queue_delay_us, max_queue_size=s.dynamic_batching.max_queue_size,
        logits_datatype="TYPE_FP32", llm_instance_group=_llm_instance_group(spec), hf=hf, bls=s.bls,
        load=spec.validation.load, slo=spec.validation.slo,
    )


def plan_from_file(path: str | Path) -> tuple[Spec, Plan]:
    spec = load_spec(path)
    return spec, make_plan(spec, Path(path).resolve().parent)
