"""The hf runtime: a python-backend `tensorrt_llm` model with the C++ model's tensor contract, on transformers'
continuous batching (tritongen.served.hf_model). It runs anywhere, CPU included."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from tritongen import served
from tritongen.core import GUIDE_TYPES, Locations, PlanView, ServerGroupPlan, SpecView
from tritongen.runtimes.ensemble import EnsembleRepository
from tritongen.runtimes.base import (Knob, PlanContext, Renderer, Runtime, Signal, Upstream, quantity,
                                     serving_knobs)
from tritongen.runtimes.hf.settings import HFRuntimePlan
from tritongen.runtimes.hf.spec import HfSection
from tritongen.runtimes.tensorrtllm.backend import ensemble_server_command
from tritongen.runtimes.tensorrtllm.release import TRTLLM

# Left unset, transformers sizes its static batch tensors from free memory; on CPU that took ~20 GB of RAM
# for the tiny demo model, so CPU deployments get a modest per-step token budget instead.
CPU_MAX_BATCH_TOKENS = 512

# The hf runtime runs on Triton's plain python image of the same release as the TensorRT-LLM one, plus torch
# and transformers baked in by a generated Dockerfile (installing at start would download on every restart).
RELEASE = TRTLLM.release
HF_BASE_IMAGE = f"nvcr.io/nvidia/tritonserver:{RELEASE}-py3"
HF_IMAGE = f"tritongen-hf:{RELEASE}"
HF_UPSTREAM = Upstream(
    release=f"tritongen's own model on {HF_BASE_IMAGE}", pin=None,
    checked=("the server repo's compatibility matrix (r26.07 at 819ee377) lists only the trtllm and vllm images, "
             "so the -py3 base image's driver is not established and plan does not check it"))


def kv_cache_blocks(kv_tokens: int | None, block_size: int) -> int | None:
    """KV-cache blocks that hold a budget of `kv_tokens` (rounded up); None without a budget: transformers then
    sizes the cache from free memory."""
    return -(-kv_tokens // block_size) if kv_tokens else None


def hf_parameters(plan: PlanView, checkpoint_dir: str, group: ServerGroupPlan | None,
                  tokenizer_dir: str | None = None) -> dict[str, str]:
    """The `parameters` of the hf tensorrt_llm model; `checkpoint_dir` and `tokenizer_dir` are where the server sees
    the checkpoint and the tokenizer (default: the plan's), `group` the server group whose KV budget it holds (None:
    the plan's)."""
    hf = RUNTIME.own(plan)
    blocks = kv_cache_blocks(plan.kv_tokens if group is None else group.kv_tokens, hf.block_size)
    # Off (0) is the model's own default, so the parameter is rendered only when set.
    flush = {"stream_flush_ms": str(hf.stream_flush_ms)} if hf.stream_flush_ms else {}
    # Rendered only with adapters, so a deployment without them renders as before (served/hf_adapters.py reads it).
    adapters = {"lora_adapters": json.dumps([{"task_id": a.task_id, "name": a.name, "path": a.path}
                                             for a in plan.adapters])} if plan.adapters else {}
    return {
        "hf_model_path": checkpoint_dir,
        "dtype": hf.dtype,
        "kv_cache_block_size": str(hf.block_size),
        "kv_cache_num_blocks": "" if blocks is None else str(blocks),
        "kv_cache_free_gpu_mem_fraction": str(hf.max_memory_percent),
        "max_batch_tokens": "" if hf.max_batch_tokens is None else str(hf.max_batch_tokens),
        "exclude_input_in_output": str(plan.exclude_input_in_output).lower(),
        "end_id": str(plan.tokenizer.end_id),
        "pad_id": str(plan.tokenizer.pad_id),
        "cancellation_check_period_ms": str(hf.cancellation_check_period_ms),
        "sampling": hf.sampling,
        "cuda_graphs": "auto" if hf.cuda_graphs is None else str(hf.cuda_graphs).lower(),
        "attention": hf.attention or "",
        "log_probs": str(hf.log_probs).lower(),
        "stream_interval": str(plan.stream_interval),
        # Guided decoding: XGrammar builds its vocabulary from the tokenizer (docs/structured-output.md).
        "tokenizer_dir": tokenizer_dir or plan.tokenizer.dir,
        "max_schema_bytes": str(plan.structured_output.max_schema_bytes),
        **flush,
        **adapters,
    }


class HfRuntime(EnsembleRepository[HFRuntimePlan], Runtime[HFRuntimePlan]):
    name = "hf"
    output_token_counter = "tritongen_llm_output_tokens_total"
    settings = HFRuntimePlan
    spec_section = HfSection
    summary = "python-backend model on transformers' continuous batching, the C++ model's tensors (CPU or GPU)"
    executed_here = "yes: CPU in `make test` (embedded tritonserver), H200 (docs/benchmarks.md)"
    upstream = HF_UPSTREAM
    choice = "portable python model on transformers; pick it for CPUs, CI and GPUs without TensorRT-LLM"
    honours_stream_flush = True
    needs_tokenizer_files = True
    serves_adapters = True
    builds_image = True
    base_image = HF_BASE_IMAGE

    def guided_decoding(self, spec: SpecView) -> tuple[tuple[str, ...], str]:
        return GUIDE_TYPES, ("XGrammar token masks applied in the model's batched loop: each guide compiled once "
                             "(LRU cache), a matcher per request")

    def plan_settings(self, ctx: PlanContext, prepared: HFRuntimePlan | None) -> HFRuntimePlan:
        spec = ctx.spec
        hf, kv = spec.hf, spec.serving.kv_cache
        return HFRuntimePlan(
            checkpoint_dir=str(ctx.checkpoint), dtype=spec.model.dtype, block_size=kv.block_size,
            max_batch_tokens=hf.max_batch_tokens or (CPU_MAX_BATCH_TOKENS if spec.placement.device == "cpu" else None),
            max_memory_percent=kv.free_gpu_mem_fraction, cancellation_check_period_ms=hf.cancellation_check_period_ms,
            sampling=hf.sampling, cuda_graphs=hf.cuda_graphs, attention=hf.attention, log_probs=hf.log_probs,
            stream_flush_ms=hf.stream_flush_ms,
        )

    def llm_config(self, plan: PlanView, where: Locations, group: ServerGroupPlan | None) -> tuple[str, dict, Any]:
        instances = plan.llm_instance_group if group is None else \
            plan.llm_instance_group.model_copy(update={"count": group.instances})
        return "python", hf_parameters(plan, where.checkpoint, group, where.tokenizer), instances

    def model_files(self, plan: PlanView, where: Locations, render: Renderer) -> dict[str, bytes]:
        return served.model_files("hf_model", "tensorrt_llm/1")

    def knobs(self, spec: SpecView) -> list[Knob]:
        extra = [Knob("placement.instances_per_gpu", 1, 4, why="model copies per GPU: parallel batches vs memory")]
        return serving_knobs(self, spec) + (extra if spec.placement.device == "gpu" else [])

    def image(self) -> str:
        return HF_IMAGE

    def server_command(self, plan: PlanView, world_size: int, repository: str, ports: tuple[int, int, int],
                       extra_args: Sequence[str]) -> list[str]:
        return ensemble_server_command(world_size, repository, ports, extra_args)

    def weights_in_container(self, settings: HFRuntimePlan, checkpoint: str, engine: str,
                             models: str) -> HFRuntimePlan:
        return settings.model_copy(update={"checkpoint_dir": checkpoint})

    def hpa_signals(self, plan: PlanView) -> list[Signal]:
        # The model exports tritongen_llm_active_requests; requests beyond the planned batch wait for a slot.
        capacity = plan.max_batch_size * plan.llm_instance_group.count
        return [Signal("tritongen_waiting_requests", 'tritongen_llm_active_requests{pod!=""}',
                       f'clamp_min(sum by (<<.GroupBy>>) (tritongen_llm_active_requests{{<<.LabelMatchers>>}}) - '
                       f'{capacity}, 0)', quantity(plan.deploy.hpa_waiting_requests),
                       f"requests in flight beyond the planned batch of {capacity}")]


RUNTIME = HfRuntime()
