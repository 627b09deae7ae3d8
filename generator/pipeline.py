"""Glue between stages that the CLI and `up` share: engine resolution for tensorrtllm, render for a Plan."""

from __future__ import annotations

from pathlib import Path

from generator.errors import SpecError, problem
from generator.plan import Plan
from generator.render import render_repository
from generator.spec import Spec

DEFAULT_GPU_ARCH = "sm90"  # H100/H200; engines are specific to the GPU architecture they were built on


def resolve_engine_dir(spec: Spec, plan: Plan, *, engine_dir: str | None = None,
                       gpu_arch: str = DEFAULT_GPU_ARCH) -> Path:
    """The engine folder the tensorrt_llm model will load: given, or the cache entry a build would fill."""
    from generator.trtllm_build import build_engine

    given = engine_dir or spec.engine.engine_dir
    if given:
        path = Path(given).expanduser()
        return path if path.is_absolute() else (Path(plan.spec_dir) / path).resolve()
    checkpoint = Path(plan.spec_dir, spec.model.checkpoint).resolve()
    return Path(build_engine(spec, checkpoint, gpu_arch, dry_run=True, log=lambda _: None).engine_dir)


def check_engine_dir(spec: Spec, plan: Plan, engine: Path) -> None:
    """Consistency checks against the engine's config.json, when it exists (exit 2 naming both fields)."""
    from generator.trtllm_checks import check_engine, load_engine_config

    if not (engine / "config.json").is_file():
        return
    problems = check_engine(load_engine_config(engine), spec, tokenizer_vocab_size=plan.tokenizer.vocab_size,
                            world_size=spec.engine.tp_size * spec.engine.pp_size)
    if problems:
        raise SpecError(problems)


def gpu_device_ids(spec: Spec) -> list[list[int]] | None:
    """One model instance over the first tp*pp GPUs of placement.gpu_ids (None: all visible)."""
    if not spec.placement.gpu_ids:
        return None
    world = spec.engine.tp_size * spec.engine.pp_size
    if len(spec.placement.gpu_ids) < world:
        raise SpecError(problem("placement.gpu_ids", f"lists {len(spec.placement.gpu_ids)} GPUs but the engine "
                                f"needs tp_size*pp_size = {world}", f"list {world} GPU ids"))
    return [spec.placement.gpu_ids[:world]]


def render_for(spec: Spec, plan: Plan, *, engine_dir: str | None = None,
               gpu_arch: str = DEFAULT_GPU_ARCH) -> dict[str, bytes]:
    """Render the repository for any runtime; for tensorrtllm, check the engine first when it exists."""
    if plan.runtime == "hf":
        return render_repository(plan)
    from generator.trtllm import tensorrt_llm_parameters

    engine = resolve_engine_dir(spec, plan, engine_dir=engine_dir, gpu_arch=gpu_arch)
    check_engine_dir(spec, plan, engine)
    if plan.placement is not None:
        # Each server group sees its own GPUs from 0; the KV budget is the one every group can hold.
        world = spec.engine.tp_size * spec.engine.pp_size
        ids: list[list[int]] | None = [list(range(world))]
        kv = spec.serving.kv_cache.model_copy(update={"max_tokens": plan.kv_tokens_per_instance})
        spec = spec.model_copy(update={"serving": spec.serving.model_copy(update={"kv_cache": kv})})
    else:
        ids = gpu_device_ids(spec)
    return render_repository(plan, lambda _plan: tensorrt_llm_parameters(spec, engine, ids))
