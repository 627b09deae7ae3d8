"""Spec -> frozen Plan: every default, path and derived value resolved once.

Later stages (render, serve, load test) read only the Plan, never the raw YAML, so `tritongen plan` shows
exactly what will be rendered and served.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from tritongen.errors import SpecError, problem
from tritongen.plan.frontend import FrontendPlan, ModelRoute
from tritongen.spec import LoadSection, SLOSection, Spec, load_spec


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
    bls_instances: int
    bls_parameters: dict[str, str]
    load: LoadSection
    slo: SLOSection
    placement: dict | None = None
    """The placement over a GPU inventory (server groups, KV budgets), when planned with one."""
    kv_tokens_per_instance: int | None = None
    """KV-cache budget per LLM instance that every server group can hold (the smallest over the groups)."""
    frontend: FrontendPlan | None = None
    """The OpenAI-compatible frontend: public model name, the Triton model behind it, tokenizer and template."""

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


# Left unset, transformers sizes its static batch tensors from free memory; on CPU that took ~20 GB of RAM
# for the tiny demo model, so CPU deployments get a modest per-step token budget instead.
CPU_MAX_BATCH_TOKENS = 512

# spec quantisation names -> TensorRT-LLM's quant_algo names, for the memory model
QUANT_ALGO = {"none": None, "fp8": "FP8", "int8_weight_only": "W8A16", "int4_weight_only": "W4A16",
              "int4_awq": "W4A16_AWQ", "smoothquant": "W8A8_SQ_PER_CHANNEL"}
KV_QUANT_ALGO = {"auto": None, "fp8": "FP8", "int8": "INT8"}


def max_sequence_length(spec: Spec) -> int:
    """Longest prompt + completion the deployment must hold in the KV cache."""
    if spec.runtime == "tensorrtllm":
        return spec.engine.max_seq_len
    load = spec.validation.load
    longest = (load.input_tokens.mean + 3 * load.input_tokens.stddev
               + load.output_tokens.mean + 3 * load.output_tokens.stddev)
    return max(256, int(longest))


def memory_model_for(spec: Spec, spec_dir: Path, engine_config: Path | None = None):
    """The memory model of what will be served: a built engine's config.json when there is one, else the
    checkpoint's config.json with the spec's build settings."""
    from tritongen.placement.memory import load_memory_model

    e = spec.engine
    if engine_config is None and e.engine_dir:
        engine_config = Path(spec_dir, e.engine_dir, "config.json")
    if spec.runtime == "tensorrtllm" and engine_config is not None and engine_config.is_file():
        return load_memory_model(engine_config, tp=e.tp_size, pp=e.pp_size)
    checkpoint = _resolve_dir(spec_dir, spec.model.checkpoint, "model.checkpoint")
    if spec.runtime == "tensorrtllm":
        return load_memory_model(checkpoint, dtype=e.dtype, quant_algo=QUANT_ALGO[e.quantization],
                                 kv_cache_quant_algo=KV_QUANT_ALGO[e.kv_cache_dtype], tp=e.tp_size, pp=e.pp_size,
                                 max_batch_size=e.max_batch_size, max_num_tokens=e.max_num_tokens)
    dtype = None if spec.model.dtype == "auto" else spec.model.dtype
    return load_memory_model(checkpoint, dtype=dtype, tp=1, pp=1, max_batch_size=spec.serving.max_batch_size)


def place_spec(spec: Spec, spec_dir: Path, inventory_source: str):
    """Place the spec's model on a GPU inventory ('nvml', an inventory file or saved `nvidia-smi -L` text)."""
    from tritongen.placement.inventory import load_inventory
    from tritongen.placement import place

    if spec.placement.device != "gpu":
        raise SpecError(problem("placement.device", "is cpu, so there is nothing to place on GPUs",
                                "set placement.device: gpu, or drop --inventory"))
    instances = 1 if spec.runtime == "tensorrtllm" else spec.placement.instances_per_gpu
    return place(load_inventory(inventory_source), memory_model_for(spec, spec_dir),
                 max_seq_len=max_sequence_length(spec), kv_fraction=spec.serving.kv_cache.free_gpu_mem_fraction,
                 instances_per_device=instances, gpu_ids=spec.placement.gpu_ids or None)


def make_plan(spec: Spec, spec_dir: Path, inventory: str | None = None) -> Plan:
    """Resolve a validated Spec into a Plan. Reads the tokenizer to take end/pad ids from it; with an
    inventory, places the model and takes instance groups and KV budgets from the placement."""
    checkpoint = _resolve_dir(spec_dir, spec.model.checkpoint, "model.checkpoint")
    tokenizer_dir = _resolve_dir(spec_dir, spec.model.tokenizer, "model.tokenizer") if spec.model.tokenizer \
        else checkpoint
    kv = spec.serving.kv_cache
    placement, kv_tokens = None, kv.max_tokens
    group = _llm_instance_group(spec)
    if inventory is not None:
        placed = place_spec(spec, spec_dir, inventory)
        placement = placed.to_dict()
        budget = min(g.kv_tokens for g in placed.server_groups)
        kv_tokens = min(budget, kv_tokens) if kv_tokens else budget
        if spec.runtime == "hf":
            # Each server group sees only its own devices (CUDA_VISIBLE_DEVICES), numbered from 0.
            group = InstanceGroup(kind="KIND_GPU", count=spec.placement.instances_per_gpu, gpus=(0,))
    hf = None
    if spec.runtime == "hf":
        hf = HFRuntimePlan(
            checkpoint_dir=str(checkpoint), dtype=spec.model.dtype, block_size=kv.block_size,
            # An absolute token budget becomes a block count; otherwise transformers sizes the cache from memory.
            num_blocks=-(-kv_tokens // kv.block_size) if kv_tokens else None,
            max_batch_tokens=spec.serving.max_batch_tokens or (CPU_MAX_BATCH_TOKENS if spec.placement.device == "cpu"
                                                               else None),
            max_memory_percent=kv.free_gpu_mem_fraction,
        )
    s = spec.serving
    return Plan(
        name=spec.name, runtime=spec.runtime, spec_dir=str(spec_dir.resolve()),
        tokenizer=_tokenizer_plan(spec, tokenizer_dir),
        triton_max_batch_size=s.max_batch_size, decoupled=s.streaming,
        exclude_input_in_output=s.exclude_input_in_output, max_tokens_default=s.max_tokens_default,
        preprocessing_instances=s.preprocessing_instances, postprocessing_instances=s.postprocessing_instances,
        max_queue_delay_us=s.dynamic_batching.max_queue_delay_us, max_queue_size=s.dynamic_batching.max_queue_size,
        logits_datatype="TYPE_FP32", llm_instance_group=group, hf=hf, bls=s.bls,
        bls_instances=s.bls_instances or s.max_batch_size, bls_parameters=_bls_parameters(spec),
        load=spec.validation.load, slo=spec.validation.slo, placement=placement,
        kv_tokens_per_instance=kv_tokens if inventory is not None else None,
        frontend=_frontend_plan(spec, spec_dir, tokenizer_dir),
    )


def _frontend_plan(spec: Spec, spec_dir: Path, tokenizer_dir: Path) -> FrontendPlan:
    f, o = spec.frontend, spec.frontend.openai
    template = None
    if f.chat_template:
        path = Path(f.chat_template).expanduser()
        path = (path if path.is_absolute() else spec_dir / path).resolve()
        if not path.is_file():
            raise SpecError(problem("frontend.chat_template", f"file {path} does not exist",
                                    "point it at a Jinja chat template file, or remove it to use the tokenizer's"))
        template = str(path)
    route = ModelRoute(name=o.served_model_name or spec.name, triton_model=o.triton_model,
                       tokenizer_dir=str(tokenizer_dir), chat_template=template,
                       default_max_tokens=o.default_max_tokens or spec.serving.max_tokens_default)
    return FrontendPlan(enabled=o.enabled, implementation=o.implementation, port=o.port, api_key_env=f.api_key_env,
                        models=(route,))


def _bls_parameters(spec: Spec) -> dict[str, str]:
    from tritongen.runtimes.tensorrtllm import bls_parameters

    return bls_parameters(spec)


def plan_from_file(path: str | Path, inventory: str | None = None) -> tuple[Spec, Plan]:
    spec = load_spec(path)
    return spec, make_plan(spec, Path(path).resolve().parent, inventory)
