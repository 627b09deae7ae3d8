"""The synthetic runtime: a token source at a configured TTFT/ITL with the C++ model's tensors and no model
(tritongen.served.synthetic). It measures the serving path and the load generator alone."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tritongen import served
from tritongen.core import Locations, PlanView, ServerGroupPlan, SpecView
from tritongen.runtimes.ensemble import EnsembleRepository
from tritongen.runtimes.base import Knob, PlanContext, Renderer, Runtime, serving_knobs
from tritongen.runtimes.synthetic.settings import SyntheticEnginePlan, SyntheticPlan
from tritongen.runtimes.synthetic.spec import SyntheticSection
from tritongen.runtimes.hf.runtime import HF_BASE_IMAGE, HF_IMAGE, HF_UPSTREAM
from tritongen.runtimes.tensorrtllm.backend import ensemble_server_command


NATIVE_BACKEND = "tritongen_tokensource"
"""The C++ token source (generator/tritongen/native/tokensource/), behaviour equal to the python model."""


def synthetic_backend(plan: PlanView) -> str:
    """The Triton backend of the synthetic tensorrt_llm model (synthetic.source)."""
    return NATIVE_BACKEND if RUNTIME.own(plan).source == "native" else "python"


def synthetic_parameters(plan: PlanView) -> dict[str, str]:
    """The `parameters` of the synthetic tensorrt_llm model (tritongen.served.synthetic)."""
    syn = RUNTIME.own(plan)
    params = {"ttft_ms": f"{syn.ttft_ms:g}", "itl_ms": f"{syn.itl_ms:g}",
              "vocab_size": str(plan.tokenizer.vocab_size), "end_id": str(plan.tokenizer.end_id),
              "pad_id": str(plan.tokenizer.pad_id), "stream_interval": str(plan.stream_interval)}
    if plan.adapters:  # rendered only with adapters, so other deployments render as before
        params["lora_adapters"] = str(len(plan.adapters))
    if syn.engine is not None:
        params.update({"engine_model": "true", **{f"engine_{k}": f"{v:g}" for k, v in syn.engine.model_dump().items()}})
    return params


class SyntheticRuntime(EnsembleRepository[SyntheticPlan], Runtime[SyntheticPlan]):
    name = "synthetic"
    output_token_counter = "tritongen_llm_output_tokens_total"
    settings = SyntheticPlan
    spec_section = SyntheticSection
    summary = "a token source at a configured TTFT/ITL, no model (measures the serving path alone)"
    executed_here = "yes: CPU in `make test` (embedded tritonserver), H200 (docs/benchmarks.md)"
    upstream = HF_UPSTREAM
    choice = ("a token source with a configured TTFT/ITL and no model, to measure the serving path and the load "
              "generator alone")

    serves_adapters = True

    def kv_sequences(self, spec: SpecView, max_batch_size: int) -> int | None:
        return None  # a token source keeps no KV cache

    def guided_decoding(self, spec: SpecView) -> tuple[tuple[str, ...], str]:
        return (), ("refused: the synthetic token source emits fixed token ids without a model, so its output "
                    "cannot follow a guide; load-test guided decoding with runtime hf")

    def plan_settings(self, ctx: PlanContext, prepared: SyntheticPlan | None) -> SyntheticPlan:
        e = ctx.spec.synthetic.engine
        engine = None if not e.enabled else SyntheticEnginePlan(
            step_base_ms=e.step_base_ms, per_sequence_ms=e.per_sequence_ms,
            per_prefill_token_ms=e.per_prefill_token_ms, max_batch=ctx.max_batch_size, kv_tokens=ctx.kv_tokens or 0)
        return SyntheticPlan(ttft_ms=ctx.spec.synthetic.ttft_ms, itl_ms=ctx.spec.synthetic.itl_ms,
                             source=ctx.spec.synthetic.source, engine=engine)

    def llm_config(self, plan: PlanView, where: Locations, group: ServerGroupPlan | None) -> tuple[str, dict, Any]:
        return synthetic_backend(plan), synthetic_parameters(plan), plan.llm_instance_group

    def model_files(self, plan: PlanView, where: Locations, render: Renderer) -> dict[str, bytes]:
        if synthetic_backend(plan) != "python":
            return {"tensorrt_llm/1/.keep": b""}
        return served.model_files("synthetic", "tensorrt_llm/1")

    def knobs(self, spec: SpecView) -> list[Knob]:
        # Without the engine model every request gets the fixed timing: batch and KV budget change nothing.
        knobs = serving_knobs(self, spec)
        return knobs if spec.synthetic.engine.enabled else [k for k in knobs if k.path == "serving.stream_interval"]

    def image(self) -> str:
        return HF_IMAGE

    builds_image = True
    base_image = HF_BASE_IMAGE

    def server_command(self, plan: PlanView, world_size: int, repository: str, ports: tuple[int, int, int],
                       extra_args: Sequence[str]) -> list[str]:
        return ensemble_server_command(world_size, repository, ports, extra_args)


RUNTIME = SyntheticRuntime()
