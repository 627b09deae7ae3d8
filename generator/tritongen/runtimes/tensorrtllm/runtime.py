"""The tensorrtllm runtime: the C++ `tensorrtllm` backend serving an engine built with trtllm-build, behind
tritongen's ensemble (the runtime object; the pure build, parameter and launch functions are in backend.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from tritongen.core import GUIDE_TYPES, Locations, PlanView, ServerGroupPlan, SpecView
from tritongen.errors import SpecError, problem
from tritongen.runtimes.ensemble import EnsembleRepository
from tritongen.runtimes.base import Knob, PlanContext, Renderer, Runtime, Signal, quantity, serving_knobs
from tritongen.runtimes.tensorrtllm import xgrammar_info
from tritongen.runtimes.tensorrtllm.backend import (DEFAULT_MAX_NUM_TOKENS, TRTLLM, build_commands,
                                                    ensemble_server_command, id_groups, tensorrt_llm_parameters)
from tritongen.runtimes.tensorrtllm.lora import LoraBuild, convert_commands, lora_build
from tritongen.runtimes.tensorrtllm.lora_cache import cache_parameters, lora_plan
from tritongen.runtimes.tensorrtllm.release import upstream
from tritongen.runtimes.tensorrtllm.settings import BuildSettings, TensorrtllmPlan
from tritongen.runtimes.tensorrtllm.spec import EngineSection

if TYPE_CHECKING:
    from tritongen.runtimes.tensorrtllm.build import EngineBuild


# spec quantisation names -> TensorRT-LLM's quant_algo names, for the memory model
QUANT_ALGO = {"none": None, "fp8": "FP8", "int8_weight_only": "W8A16", "int4_weight_only": "W4A16",
              "int4_awq": "W4A16_AWQ", "smoothquant": "W8A8_SQ_PER_CHANNEL"}
KV_QUANT_ALGO = {"auto": None, "fp8": "FP8", "int8": "INT8"}


def build_settings(engine: Any, max_batch_size: int, lora: LoraBuild | None = None) -> BuildSettings:
    """The engine's build settings from the spec's engine section, defaults resolved; `max_batch_size` is the
    Plan's (the engine's batch unless engine.build_max_batch_size pins it); `lora` the plugin for the adapters."""
    e = engine
    return BuildSettings(
        tp_size=e.tp_size, pp_size=e.pp_size, dtype=e.dtype, quantization=e.quantization,
        kv_cache_dtype=e.kv_cache_dtype, max_batch_size=e.build_max_batch_size or max_batch_size,
        max_input_len=e.max_input_len, max_seq_len=e.max_seq_len,
        max_num_tokens=e.max_num_tokens or DEFAULT_MAX_NUM_TOKENS,
        max_beam_width=e.max_beam_width, use_paged_context_fmha=e.use_paged_context_fmha, gemm_plugin=e.gemm_plugin,
        lora=lora)


def _gpu_device_ids(spec: SpecView) -> list[int] | None:
    """One tensorrtllm model instance over the first tp*pp GPUs of placement.gpu_ids (None: all visible)."""
    if not spec.placement.gpu_ids:
        return None
    world = spec.engine.tp_size * spec.engine.pp_size
    if len(spec.placement.gpu_ids) < world:
        raise SpecError(problem("placement.gpu_ids", f"lists {len(spec.placement.gpu_ids)} GPUs but the engine "
                                f"needs tp_size*pp_size = {world}", f"list {world} GPU ids"))
    return spec.placement.gpu_ids[:world]


ADAPTERS_FOLDER = "lora"
"""Where a container sees the converted adapters: <models>/lora (deploy mounts the prefetch folder there)."""


def _kib(n: int) -> str:
    return f"{n / 2**20:.2f} MiB" if n >= 2**20 else f"{n / 2**10:.1f} KiB"


def lora_free_gpu_bytes(plan: PlanView, group: ServerGroupPlan | None) -> int | None:
    """GPU memory free when the LoRA cache is made (after the engine and its buffers) on the smallest device of the
    server group, or of every group for the default config; None without adapters or a placement."""
    trt = cast(TensorrtllmPlan, plan.runtime_settings)
    if trt.lora is None or plan.placement is None:
        return None
    devices = [d for d in plan.placement.result.devices
               if d.fits and (group is None or d.server_group == group.name)]
    if not devices:
        return None
    # The placement's headroom holds the LoRA cache itself (MemoryModel.lora_cache_bytes); the fraction is of the
    # memory before it.
    return min(d.memory_bytes - d.instances * (d.weight_bytes + d.headroom_bytes - trt.lora.cache.gpu_cache_bytes)
               for d in devices)


class TensorrtllmRuntime(EnsembleRepository[TensorrtllmPlan], Runtime[TensorrtllmPlan]):
    name = "tensorrtllm"

    serves_adapters = True
    settings = TensorrtllmPlan
    spec_section = EngineSection
    summary = f"C++ tensorrtllm backend, engine from trtllm-build (TensorRT-LLM {TRTLLM.version}, {TRTLLM.container})"
    executed_here = "no: build commands, engine cache and engine checks tested; no engine built or served"
    upstream = upstream("the C++ tensorrtllm backend (inflight_batcher_llm)",
                        "tensorrtllm_backend parameters and engine config keys (tests/fixtures/nvidia/trtllm-1.2.1.json); "
                        "image and driver: server docs/introduction/compatibility.md, branch r26.07 at 819ee377")
    choice = ("the TensorRT engine path: C++ backend and built engines, in pinned containers up to 26.07; pick it "
              "for an existing engine workflow")
    runs_on_cpu = False
    honours_stream_interval = False
    builds_engine = True
    python_model = False
    spans_nodes = True

    # -------------------------------------------------------------------------------------------- planning

    def max_seq_len(self, spec: SpecView) -> int | None:
        return spec.engine.max_seq_len

    def instances_per_device(self, spec: SpecView) -> int:
        return 1

    def guided_decoding(self, spec: SpecView) -> tuple[tuple[str, ...], str]:
        return GUIDE_TYPES, ("the tensorrt_llm model's guided_decoding_backend xgrammar with "
                             "xgrammar_tokenizer_info_path (written by render from the tokenizer); the C++ backend "
                             "compiles each guide")

    def kv_sequences(self, spec: SpecView, max_batch_size: int) -> int | None:
        return spec.engine.build_max_batch_size or max_batch_size

    def memory_model(self, spec: SpecView, plan: PlanView) -> tuple[Path, dict[str, Any]]:
        e = spec.engine
        trt = self.own(plan)
        # The LoRA cache is made before the KV cache, out of the same free memory (lora_cache.py).
        lora = {"lora_cache_bytes": trt.lora.cache.gpu_cache_bytes} if trt.lora is not None else {}
        engine_dir = Path(plan.paths.engine) if plan.paths.engine else None
        if engine_dir is not None and (engine_dir / "config.json").is_file():
            return engine_dir / "config.json", {"tp": e.tp_size, "pp": e.pp_size, **lora}
        return Path(plan.paths.checkpoint), {
            "dtype": e.dtype, "quant_algo": QUANT_ALGO[e.quantization],
            "kv_cache_quant_algo": KV_QUANT_ALGO[e.kv_cache_dtype], "tp": e.tp_size, "pp": e.pp_size,
            "max_batch_size": e.build_max_batch_size, "max_num_tokens": e.max_num_tokens, **lora}

    def bls_parameters(self, plan: PlanView, where: Locations) -> dict[str, str]:
        trt = self.own(plan)
        return {"lora_dir": where.adapters or trt.lora.prefetch_dir} if trt.lora is not None else {}

    def adapter_folder(self, plan: PlanView) -> str | None:
        trt = self.own(plan)
        return trt.lora.prefetch_dir if trt.lora is not None else None

    def cache_rows(self, plan: PlanView) -> list[tuple[str, str, str]]:
        trt = self.own(plan)
        if trt.lora is None:
            return []
        c = trt.lora.cache
        pages = f"pages of {_kib(c.page_bytes)}"
        host = (f"host {_kib(c.host_memory_bytes)}: all {len(c.adapter_pages)} adapters "
                f"({sum(c.adapter_pages)} {pages}, ranks {c.optimal_adapter_size}-{c.max_adapter_size})")
        gpu = f"GPU {_kib(c.gpu_cache_bytes)}: {c.gpu_adapters} adapters at once"
        groups = plan.server_groups or (None,)
        shares = sorted({cache_parameters(trt.lora, lora_free_gpu_bytes(plan, g))["lora_cache_gpu_memory_fraction"]
                         for g in groups})
        gpu += (f", lora_cache_gpu_memory_fraction {' / '.join(shares)} of the memory free after the engine loads"
                if plan.placement is not None else
                ", the backend's 0.05 of the memory free after the engine loads (plan with --inventory to size it)")
        return [("LoRA cache", f"{host}; {gpu}", "tensorrt_llm lora_cache_* per rank; the GPU cache comes out of "
                 "the memory the KV budget is sized from")]

    def llm_instance_group(self, spec: SpecView, placed: bool) -> dict[str, Any]:
        # The TensorRT-LLM backend places itself on GPUs through gpu_device_ids; instance_group stays CPU/1.
        return {"kind": "KIND_CPU", "count": 1}

    def prepare(self, ctx: PlanContext) -> TensorrtllmPlan:
        """The section: build settings resolved, and the engine, given or the cache entry a build fills (which also
        checks the checkpoint converts)."""
        from tritongen.runtimes.tensorrtllm.build import check_convertible, detect_gpu_arch, engine_key
        from tritongen.runtimes.tensorrtllm.checks import check_parallel, gpu_arch_from_inventory

        spec = ctx.spec
        check_parallel(ctx.config, spec.engine.tp_size, spec.engine.pp_size)
        gpu_arch = ctx.gpu_arch or spec.engine.gpu_arch
        if gpu_arch is None and ctx.inventory not in (None, "nvml") and not (ctx.engine_dir or spec.engine.engine_dir):
            # Planning for a node described by a file: its GPUs say what the engine is built for.
            wanted = set(spec.placement.gpu_ids)
            gpu_arch = gpu_arch_from_inventory([name for index, name in ctx.inventory_gpus()
                                                if not wanted or index in wanted])
        e, s = spec.engine, spec.serving
        given = ctx.engine_dir or e.engine_dir
        if given:
            gpu_arch = gpu_arch or "given engine"  # only a cache key needs it; a given engine is what it is
        else:
            gpu_arch = gpu_arch or detect_gpu_arch()
        gpu_ids = None if ctx.inventory else _gpu_device_ids(spec)
        build = build_settings(e, ctx.max_batch_size, lora_build(ctx.adapters, ctx.max_adapter_rank))
        lora = None
        if build.lora is not None:
            lora = lora_plan(build.lora, ctx.adapters, str(ctx.resolve(e.cache_dir)), ctx.config, tp=build.tp_size,
                             pp=build.pp_size, dtype=build.dtype, max_batch_size=build.max_batch_size)
        section = TensorrtllmPlan(
            engine_dir=str(ctx.resolve(given)) if given else "", engine_key=None,
            cache_dir=str(ctx.resolve(e.cache_dir)),
            gpu_arch=gpu_arch,
            build=build,
            calibration_dataset=str(ctx.resolve(e.calibration_dataset)) if e.calibration_dataset else None,
            build_gpus=tuple(spec.placement.gpu_ids), batching_strategy=e.batching_strategy,
            batch_scheduler_policy=e.batch_scheduler_policy,
            kv_cache_free_gpu_mem_fraction=s.kv_cache.free_gpu_mem_fraction,
            kv_cache_host_memory_bytes=s.kv_cache.host_memory_bytes, enable_kv_cache_reuse=s.kv_cache.enable_reuse,
            enable_chunked_context=e.enable_chunked_context,
            gpu_device_ids=(tuple(gpu_ids),) if gpu_ids else None,
            lora=lora)
        if given:
            return section
        key = engine_key(section, ctx.checkpoint, planning=True)
        check_convertible(section, ctx.checkpoint)
        return section.model_copy(update={"engine_dir": str(Path(section.cache_dir) / key), "engine_key": key})

    def plan_settings(self, ctx: PlanContext, prepared: TensorrtllmPlan | None) -> TensorrtllmPlan:
        if prepared is None:
            raise TypeError("the tensorrtllm section is made by prepare(); plan_settings needs its result")
        return prepared

    def engine_dir(self, settings: TensorrtllmPlan) -> str | None:
        return settings.engine_dir

    def logits_datatype(self, settings: TensorrtllmPlan) -> str:
        if (Path(settings.engine_dir) / "config.json").is_file():
            from tritongen.runtimes.tensorrtllm.checks import load_engine_config, logits_datatype

            return logits_datatype(load_engine_config(settings.engine_dir))
        return super().logits_datatype(settings)

    def check_plan(self, plan: PlanView) -> None:
        from tritongen.runtimes.tensorrtllm.checks import check_plan_engine

        # Before placing: a mismatched engine would otherwise show up as a placement problem.
        check_plan_engine(plan, log=lambda _: None)  # render says a missing engine

    def check_placement(self, spec: SpecView, plan: PlanView, gpus: Sequence[tuple[str, str]]) -> None:
        from tritongen.runtimes.tensorrtllm.checks import check_fp8

        trt = self.own(plan)
        check_fp8(trt.build.quantization, trt.build.kv_cache_dtype, list(gpus))

    # -------------------------------------------------------------------------------------------- repository

    def check_before_render(self, plan: PlanView) -> None:
        from tritongen.runtimes.tensorrtllm.checks import check_plan_engine

        check_plan_engine(plan)

    def llm_config(self, plan: PlanView, where: Locations, group: ServerGroupPlan | None) -> tuple[str, dict, Any]:
        assert where.engine is not None
        trt = self.own(plan)
        if group is not None:
            ids, kv = group.gpu_device_ids, group.kv_tokens
        else:
            # With a placement each server group sees its own GPUs numbered from 0.
            ids = ",".join(str(i) for i in range(trt.world_size)) if plan.placement is not None \
                else id_groups(trt.gpu_device_ids)
            kv = plan.kv_tokens
        return "tensorrtllm", tensorrt_llm_parameters(plan, where.engine, ids, kv,
                                                      free_gpu_bytes=lora_free_gpu_bytes(plan, group),
                                                      lora_dir=where.adapters), \
            plan.llm_instance_group

    def model_files(self, plan: PlanView, where: Locations, render: Renderer) -> dict[str, bytes]:
        return {"tensorrt_llm/1/.keep": b""}  # the backend loads the engine named in config.pbtxt

    def max_input_tokens(self, plan: PlanView) -> str:
        return str(self.own(plan).build.max_input_len)  # the engine's build bounds its input length

    # -------------------------------------------------------------------------------------------- serving

    def knobs(self, spec: SpecView) -> list[Knob]:
        # Engine fields need a rebuild per trial; the served batch stays within the built engine's.
        cap = spec.engine.build_max_batch_size or 256
        return [dataclasses.replace(k, high=cap) if k.path == "serving.max_batch_size" else k
                for k in serving_knobs(self, spec)]

    def image(self) -> str:
        return TRTLLM.container

    def server_command(self, plan: PlanView, world_size: int, repository: str, ports: tuple[int, int, int],
                       extra_args: Sequence[str]) -> list[str]:
        return ensemble_server_command(world_size, repository, ports, extra_args)

    def weights_in_container(self, settings: TensorrtllmPlan, checkpoint: str, engine: str,
                             models: str) -> TensorrtllmPlan:
        # The models Job reads calibration data from the volume (deploy.artifacts), never from a host folder.
        calibration = f"{models}/calibration" if settings.calibration_dataset else None
        lora = settings.lora.model_copy(update={"prefetch_dir": f"{models}/{ADAPTERS_FOLDER}"}) \
            if settings.lora is not None else None
        return settings.model_copy(update={"engine_dir": engine, "cache_dir": models,
                                           "calibration_dataset": calibration, "lora": lora})

    # -------------------------------------------------------------------------------------------- engine build

    def build_engine(self, plan: PlanView, *, examples_dir: str | None, dry_run: bool,
                     arch_source: Callable[[str], tuple[str, str]]) -> EngineBuild:
        from tritongen.runtimes.tensorrtllm.build import build_engine, detect_gpu_arch

        trt = self.own(plan)
        if trt.engine_key is None:
            raise SpecError(problem("engine.engine_dir", f"the plan serves the given engine {trt.engine_dir}, so "
                                    "there is nothing to build", "unset engine.engine_dir (and --engine-dir) to "
                                    "build into the engine cache"))
        if not dry_run:
            here = detect_gpu_arch()
            if trt.gpu_arch != here:
                field, fix = arch_source(here)
                raise SpecError(problem(field, f"{trt.gpu_arch}, but this machine's GPU 0 is {here} and an engine "
                                        "runs only on the architecture it was built for",
                                        f"build on an {trt.gpu_arch} machine, or {fix}"))
        return build_engine(trt, plan.paths.checkpoint, examples_dir=examples_dir, dry_run=dry_run,
                            adapters=plan.adapters)

    def engine_build_commands(self, plan: PlanView, checkpoint: str, engine: str, *, converted_dir: str,
                              examples_dir: str, calibration_dir: str | None) -> list[list[str]]:
        # Then the tokenizer-info file the tensorrt_llm model loads for guided decoding, beside the engine.
        return build_commands(self.own(plan).build, checkpoint, engine, converted_dir=converted_dir,
                              examples_dir=examples_dir, calibration_dir=calibration_dir) + \
            [xgrammar_info.command("python3", checkpoint, engine)]

    def adapter_convert_commands(self, plan: PlanView, sources: dict[int, str], out: str, *,
                                 examples_dir: str) -> list[list[str]]:
        return convert_commands(sources, out, examples_dir=examples_dir)

    def hpa_signals(self, plan: PlanView) -> list[Signal]:
        # Requests the batch manager has not scheduled (batch slots or KV blocks exhausted) and the paged KV
        # cache's used fraction; the HPA takes the larger proposal of the two.
        d = plan.deploy
        return [
            Signal("tritongen_waiting_requests", 'nv_trt_llm_request_metrics{request_type="waiting",pod!=""}',
                   'sum by (<<.GroupBy>>) (nv_trt_llm_request_metrics{<<.LabelMatchers>>,request_type="waiting"})',
                   quantity(d.hpa_waiting_requests), "requests waiting for a batch slot or KV blocks"),
            Signal("tritongen_kv_cache_utilization",
                   'nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="used",pod!=""}',
                   'sum by (<<.GroupBy>>) (nv_trt_llm_kv_cache_block_metrics{<<.LabelMatchers>>,'
                   'kv_cache_block_type="used"}) / clamp_min(sum by (<<.GroupBy>>) (nv_trt_llm_kv_cache_block_metrics'
                   '{<<.LabelMatchers>>,kv_cache_block_type="max"}), 1)',
                   quantity(d.hpa_kv_cache_utilization), "used fraction of the paged KV cache"),
        ]


RUNTIME = TensorrtllmRuntime()
