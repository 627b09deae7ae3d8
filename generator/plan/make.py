"""Spec -> Plan: every default, path, runtime parameter and the placement, decided once.

Paths are resolved here and nowhere else (`resolve_path`: `~` expanded, relative to the spec's folder). The
placement runs here, once, with one set of arguments; `render --inventory`, `deploy` and `plan` all show it.
"""

from __future__ import annotations

from pathlib import Path

from tritongen.errors import SpecError, clip, problem
from tritongen.plan.checks import (
    check_fp8, check_parallel, gpu_arch_from_inventory, missing_tokenizer_files, read_config,
)
from tritongen.plan.model import (
    HFRuntimePlan, InstanceGroup, PathsPlan, PlacementPlan, Plan, ServerGroupPlan, SyntheticPlan, TensorrtllmPlan,
    TokenizerPlan,
)
from tritongen.plan.frontend import make_frontend_plan
from tritongen.plan.llmapi import make_llmapi_plan
from tritongen.runtimes.tensorrtllm.release import TRTLLM
from tritongen.spec import Spec

DEFAULT_GPU_ARCH = None  # detected through NVML when an engine cache key is needed (--gpu-arch overrides)

# Left unset, transformers sizes its static batch tensors from free memory; on CPU that took ~20 GB of RAM
# for the tiny demo model, so CPU deployments get a modest per-step token budget instead.
CPU_MAX_BATCH_TOKENS = 512

# spec quantisation names -> TensorRT-LLM's quant_algo names, for the memory model
QUANT_ALGO = {"none": None, "fp8": "FP8", "int8_weight_only": "W8A16", "int4_weight_only": "W4A16",
              "int4_awq": "W4A16_AWQ", "smoothquant": "W8A8_SQ_PER_CHANNEL"}
KV_QUANT_ALGO = {"auto": None, "fp8": "FP8", "int8": "INT8"}


def resolve_path(base: Path, value: str) -> Path:
    """The one place a path from the spec or a flag becomes absolute: `~` expanded, relative to `base`."""
    p = Path(value).expanduser()
    return (p if p.is_absolute() else base / p).resolve()


def _resolve_dir(base: Path, value: str, field: str) -> Path:
    p = resolve_path(base, value)
    if not p.is_dir():
        raise SpecError(problem(field, f"folder {p} does not exist",
                                "point it at a local checkpoint (make one with `tritongen demo-model DIR`)"))
    return p


def _tokenizer_plan(spec: Spec, tokenizer_dir: Path, config: dict) -> TokenizerPlan:
    from transformers import AutoTokenizer

    field = "model.tokenizer" if spec.model.tokenizer else "model.checkpoint"
    common = {"dir": str(tokenizer_dir), "add_special_tokens": spec.model.add_special_tokens,
              "skip_special_tokens": spec.model.skip_special_tokens}
    missing = missing_tokenizer_files(tokenizer_dir)
    if missing and spec.runtime == "hf":
        raise SpecError(problem(field, missing, "point model.tokenizer at the model's tokenizer files"))
    if missing:
        # The engine path's plan, render and deploy do not load the tokenizer (preprocessing does, when served):
        # plan from the checkpoint's config.json and say what serving will need.
        eos = config.get("eos_token_id")
        eos = eos[0] if isinstance(eos, list) and eos else eos
        if not isinstance(eos, int) or not isinstance(config.get("vocab_size"), int):
            raise SpecError(problem(field, f"{missing}, and config.json names no eos_token_id/vocab_size",
                                    "point model.tokenizer at the model's tokenizer files"))
        pad = config.get("pad_token_id")
        return TokenizerPlan(**common, end_id=eos, pad_id=pad if isinstance(pad, int) else eos,
                             vocab_size=config["vocab_size"], loaded=False)
    try:
        tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    except (OSError, ValueError) as err:
        raise SpecError(problem(field, f"no tokenizer loads from {tokenizer_dir} ({clip(str(err))})",
                                "point it at a folder with tokenizer files")) from None
    if tok.eos_token_id is None:
        raise SpecError(problem(field, "the tokenizer has no eos token", "set eos_token in tokenizer_config.json"))
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    return TokenizerPlan(**common, end_id=tok.eos_token_id, pad_id=pad, vocab_size=len(tok))


def llmapi_instances(spec: Spec) -> int:
    """Model instances per server group of the trtllm runtime: one. Several instances in one server need the
    llmapi model's gpu_device_ids parameter, which TensorRT-LLM 1.2.1 is not known to have (it came to main as a
    feature in February 2026: tests/doubles/llmapi/facts.json); each GPU or MIG slice gets a server instead."""
    if spec.placement.instances_per_gpu > 1:
        raise SpecError(problem(
            "placement.instances_per_gpu", f"is {spec.placement.instances_per_gpu}, and NVIDIA's llmapi model in "
            f"TensorRT-LLM {TRTLLM.version} runs one instance per tritonserver (several need its gpu_device_ids "
            "parameter, which this release is not known to have)",
            "set it to 1: placement runs one tritonserver per GPU (or MIG slice); raise llmapi.max_batch_size for "
            "more requests per GPU"))
    return 1


def max_sequence_length(spec: Spec, checkpoint_config: dict | None = None) -> int:
    """Longest prompt + completion the deployment must hold in the KV cache. The LLM-API model takes what the
    checkpoint supports (its max_position_embeddings), so a real request is never refused for a length the
    load profile happened not to use; llmapi.max_seq_len lowers it."""
    if spec.runtime == "tensorrtllm":
        return spec.engine.max_seq_len
    if spec.runtime == "trtllm" and spec.llmapi.max_seq_len:
        return spec.llmapi.max_seq_len
    if spec.runtime == "trtllm" and (checkpoint_config or {}).get("max_position_embeddings"):
        return int(checkpoint_config["max_position_embeddings"])
    load = spec.validation.load
    longest = (load.input_tokens.mean + 3 * load.input_tokens.stddev
               + load.output_tokens.mean + 3 * load.output_tokens.stddev)
    return max(256, int(longest))


def _memory_model(spec: Spec, checkpoint: Path, engine_dir: Path | None):
    """The memory model of what will be served: a built engine's config.json when there is one, else the
    checkpoint's config.json with the spec's build settings."""
    from tritongen.placement.memory import load_memory_model

    e = spec.engine
    if spec.runtime == "tensorrtllm" and engine_dir is not None and (engine_dir / "config.json").is_file():
        return load_memory_model(engine_dir / "config.json", tp=e.tp_size, pp=e.pp_size)
    if spec.runtime == "tensorrtllm":
        return load_memory_model(checkpoint, dtype=e.dtype, quant_algo=QUANT_ALGO[e.quantization],
                                 kv_cache_quant_algo=KV_QUANT_ALGO[e.kv_cache_dtype], tp=e.tp_size, pp=e.pp_size,
                                 max_batch_size=e.max_batch_size, max_num_tokens=e.max_num_tokens)
    dtype = None if spec.model.dtype == "auto" else spec.model.dtype
    if spec.runtime == "trtllm":
        s = spec.llmapi
        return load_memory_model(checkpoint, dtype=dtype, kv_cache_quant_algo=KV_QUANT_ALGO[s.kv_cache_dtype],
                                 tp=s.tp_size, pp=s.pp_size, max_batch_size=s.max_batch_size)
    return load_memory_model(checkpoint, dtype=dtype, tp=1, pp=1, max_batch_size=spec.serving.max_batch_size)


def _place(spec: Spec, checkpoint: Path, engine_dir: Path | None, inventory_source: str) -> PlacementPlan:
    """Place the model on a GPU inventory ('nvml', an inventory file or saved `nvidia-smi -L` text)."""
    from dataclasses import asdict

    from tritongen.placement import place
    from tritongen.placement.inventory import load_inventory

    if spec.placement.device != "gpu":
        raise SpecError(problem("placement.device", "is cpu, and `deploy` / `plan --inventory` place servers on GPUs",
                                "set placement.device: gpu for a GPU deployment, or run it on this machine with "
                                "`tritongen serve` or `tritongen up` (plan without --inventory)"))
    inventory = load_inventory(inventory_source)
    memory = _memory_model(spec, checkpoint, engine_dir)
    if spec.deploy.nodes > 1:
        inventory = _multi_node(spec, inventory, memory.world_size)
    instances = (1 if spec.runtime == "tensorrtllm" else llmapi_instances(spec) if spec.runtime == "trtllm"
                 else spec.placement.instances_per_gpu)
    placed = place(inventory, memory, max_seq_len=max_sequence_length(spec, read_config(checkpoint)),
                   kv_fraction=spec.serving.kv_cache.free_gpu_mem_fraction, instances_per_device=instances,
                   gpu_ids=spec.placement.gpu_ids or None)
    return PlacementPlan(inventory=asdict(inventory), memory=asdict(memory), result=placed.to_dict())


def _multi_node(spec: Spec, node, world: int):
    """`deploy.nodes` copies of the inventory's node, GPUs numbered on (node k: index + k x GPUs per node), so the
    placement checks a server group spanning nodes with the model's real per-rank memory."""
    import dataclasses

    from tritongen.placement.inventory import Inventory

    nodes = spec.deploy.nodes
    full = [g for g in node.gpus if not g.mig_enabled]
    if spec.runtime != "tensorrtllm" or world % nodes or world // nodes > len(full):
        raise SpecError(problem("deploy.nodes", f"{nodes} nodes cannot split tp_size x pp_size = {world} of runtime "
                                f"{spec.runtime} over nodes with {len(full)} full GPU(s)",
                                "use runtime tensorrtllm with tp x pp a multiple of nodes, at most the node's GPUs "
                                "per node, or set deploy.nodes: 1"))
    if spec.deploy.access_mode != "ReadWriteMany":
        raise SpecError(problem("deploy.access_mode", f"{spec.deploy.access_mode} mounts the models volume on one "
                                f"node; deploy.nodes {nodes} needs it on every node of a replica",
                                "set deploy.access_mode: ReadWriteMany and a storage_class that provides it"))
    per_node = world // nodes
    gpus = [dataclasses.replace(g, index=k * per_node + i) for k in range(nodes) for i, g in enumerate(full[:per_node])]
    return Inventory(tuple(gpus), f"{node.source} x {nodes} nodes")


def _engine(spec: Spec, spec_dir: Path, checkpoint: Path, engine_dir: str | None, gpu_arch: str | None,
            gpu_ids: list[int] | None) -> TensorrtllmPlan:
    from tritongen.runtimes.tensorrtllm import build_settings
    from tritongen.runtimes.tensorrtllm.build import build_engine, detect_gpu_arch

    e, s = spec.engine, spec.serving
    cache_dir = resolve_path(spec_dir, e.cache_dir)
    given = engine_dir or e.engine_dir
    if given:
        engine, key = resolve_path(spec_dir, given), None
        gpu_arch = gpu_arch or "given engine"  # only a cache key needs it; a given engine is what it is
    else:
        # The cache entry a build fills; also checks the checkpoint can be converted at all.
        gpu_arch = gpu_arch or detect_gpu_arch()
        calib = resolve_path(spec_dir, e.calibration_dataset) if e.calibration_dataset else None
        build = build_engine(spec, checkpoint, gpu_arch, cache_dir=cache_dir, dry_run=True, log=lambda _: None,
                             calibration_dir=calib if calib and calib.is_dir() else None)
        engine, key = Path(build.engine_dir), build.key
    return TensorrtllmPlan(
        engine_dir=str(engine), engine_key=key, cache_dir=str(cache_dir), gpu_arch=gpu_arch,
        build=build_settings(spec), batching_strategy=s.batching_strategy,
        batch_scheduler_policy=s.batch_scheduler_policy,
        kv_cache_free_gpu_mem_fraction=s.kv_cache.free_gpu_mem_fraction,
        kv_cache_host_memory_bytes=s.kv_cache.host_memory_bytes, enable_kv_cache_reuse=s.kv_cache.enable_reuse,
        enable_chunked_context=s.enable_chunked_context,
        gpu_device_ids=(tuple(gpu_ids),) if gpu_ids else None)


def _gpu_device_ids(spec: Spec) -> list[int] | None:
    """One tensorrtllm model instance over the first tp*pp GPUs of placement.gpu_ids (None: all visible)."""
    if not spec.placement.gpu_ids:
        return None
    world = spec.engine.tp_size * spec.engine.pp_size
    if len(spec.placement.gpu_ids) < world:
        raise SpecError(problem("placement.gpu_ids", f"lists {len(spec.placement.gpu_ids)} GPUs but the engine "
                                f"needs tp_size*pp_size = {world}", f"list {world} GPU ids"))
    return spec.placement.gpu_ids[:world]


def _llm_instance_group(spec: Spec, placed: bool) -> InstanceGroup:
    if spec.runtime == "trtllm":
        # The llmapi model places itself (gpu_device_ids per instance); Triton sees CPU instances.
        return InstanceGroup(kind="KIND_CPU", count=llmapi_instances(spec))
    if spec.runtime == "tensorrtllm" or spec.placement.device == "cpu":
        # The TensorRT-LLM backend places itself on GPUs through gpu_device_ids; instance_group stays CPU/1.
        return InstanceGroup(kind="KIND_CPU", count=1)
    # With a placement each server group sees only its own devices (CUDA_VISIBLE_DEVICES), numbered from 0.
    gpus = (0,) if placed else tuple(spec.placement.gpu_ids or [0])
    return InstanceGroup(kind="KIND_GPU", count=spec.placement.instances_per_gpu, gpus=gpus)


def make_plan(spec: Spec, spec_dir: Path, inventory: str | None = None, *, engine_dir: str | None = None,
              gpu_arch: str | None = DEFAULT_GPU_ARCH) -> Plan:
    """Resolve a validated Spec into a Plan. Reads the tokenizer for its end/pad ids; for tensorrtllm resolves
    the engine (given, or the cache entry a build fills); with an inventory, places the model once."""
    spec_dir = spec_dir.resolve()
    checkpoint = _resolve_dir(spec_dir, spec.model.checkpoint, "model.checkpoint")
    tokenizer_dir = _resolve_dir(spec_dir, spec.model.tokenizer, "model.tokenizer") if spec.model.tokenizer \
        else checkpoint
    load = spec.validation.load
    prompts = str(resolve_path(spec_dir, load.prompts_file)) if load.prompts_file else None
    if prompts:
        load = load.model_copy(update={"prompts_file": prompts})
    config = read_config(checkpoint)
    if load.trace_file:
        load = load.model_copy(update={"trace_file": str(resolve_path(spec_dir, load.trace_file))})
    trt = None
    if spec.runtime == "tensorrtllm":
        check_parallel(config, spec.engine.tp_size, spec.engine.pp_size)
        gpu_arch = gpu_arch or spec.engine.gpu_arch
        if gpu_arch is None and inventory not in (None, "nvml") and not (engine_dir or spec.engine.engine_dir):
            from tritongen.placement.inventory import load_inventory

            # Planning for a node described by a file: its GPUs say what the engine is built for.
            wanted = set(spec.placement.gpu_ids)
            gpu_arch = gpu_arch_from_inventory([g.name for g in load_inventory(inventory).gpus
                                                if not wanted or g.index in wanted])
        trt = _engine(spec, spec_dir, checkpoint, engine_dir, gpu_arch, None if inventory else _gpu_device_ids(spec))
    plan = _plan(spec, spec_dir, checkpoint, load, trt, placed=inventory is not None,
                 tokenizer=_tokenizer_plan(spec, tokenizer_dir, config))
    if trt is not None:
        from tritongen.runtimes.tensorrtllm.checks import check_plan_engine

        # Before placing: a mismatched engine would otherwise show up as a placement problem.
        check_plan_engine(plan, log=lambda _: None)  # render says a missing engine
    if inventory is None:
        return plan
    kv = spec.serving.kv_cache
    placement = _place(spec, checkpoint, Path(trt.engine_dir) if trt else None, inventory)
    if trt is not None:
        used = {i for g in placement.result["server_groups"] for i in g["gpu_indices"]}
        check_fp8(spec.engine.quantization, spec.engine.kv_cache_dtype,
                  [(f"GPU {g['index']}", g["name"]) for g in placement.inventory["gpus"] if g["index"] in used])
    groups = tuple(ServerGroupPlan(name=g["name"], kv_tokens=min(g["kv_tokens"], kv.max_tokens or g["kv_tokens"]),
                                   instances=g["instances"], gpu_device_ids=g["gpu_device_ids"])
                   for g in placement.result["server_groups"])
    return _plan(spec, spec_dir, checkpoint, load, trt, placed=True,
                 kv_tokens=min(g.kv_tokens for g in groups), tokenizer=plan.tokenizer, placement=placement,
                 server_groups=groups,
                 # trtllm: one model.yaml for every group (the smallest budget), no per-group configs.
                 group_configs=spec.runtime != "trtllm" and len({(g.kv_tokens, g.instances, g.gpu_device_ids)
                                                                 for g in groups}) > 1)


def _plan(spec: Spec, spec_dir: Path, checkpoint: Path, load, trt: TensorrtllmPlan | None, *, placed: bool,
          tokenizer: TokenizerPlan, kv_tokens: int | None = None, **placement) -> Plan:
    from tritongen.runtimes.tensorrtllm import bls_parameters

    kv = spec.serving.kv_cache
    kv_tokens = kv_tokens or kv.max_tokens
    hf = None
    if spec.runtime == "hf":
        hf = HFRuntimePlan(
            checkpoint_dir=str(checkpoint), dtype=spec.model.dtype, block_size=kv.block_size,
            # An absolute token budget becomes a block count; otherwise transformers sizes the cache from memory.
            num_blocks=-(-kv_tokens // kv.block_size) if kv_tokens else None,
            max_batch_tokens=spec.serving.max_batch_tokens or (CPU_MAX_BATCH_TOKENS if spec.placement.device == "cpu"
                                                               else None),
            max_memory_percent=kv.free_gpu_mem_fraction,
            cancellation_check_period_ms=spec.serving.cancellation_check_period_ms, sampling=spec.serving.sampling,
            cuda_graphs=spec.serving.cuda_graphs, attention=spec.serving.attention, log_probs=spec.serving.log_probs,
        )
    llmapi = None
    if spec.runtime == "trtllm":
        # One model.yaml serves every server group, so it holds the budget every group can hold.
        llmapi = make_llmapi_plan(spec, str(checkpoint), tokenizer.dir if spec.model.tokenizer else None,
                                  max_seq_len=max_sequence_length(spec, read_config(checkpoint)), kv_tokens=kv_tokens)
    logits = "TYPE_FP32"  # trtllm-build's default for the Llama family
    if trt is not None and (Path(trt.engine_dir) / "config.json").is_file():
        from tritongen.runtimes.tensorrtllm.checks import load_engine_config, logits_datatype

        logits = logits_datatype(load_engine_config(trt.engine_dir))
    s = spec.serving
    return Plan(
        name=spec.name, runtime=spec.runtime, spec_dir=str(spec_dir),
        paths=PathsPlan(checkpoint=str(checkpoint),
                        engine=trt.engine_dir if trt else None, prompts_file=load.prompts_file),
        tokenizer=tokenizer,
        triton_max_batch_size=s.max_batch_size, decoupled=s.streaming,
        exclude_input_in_output=s.exclude_input_in_output, max_tokens_default=s.max_tokens_default,
        stream_interval=s.stream_interval,
        preprocessing_instances=s.preprocessing_instances, postprocessing_instances=s.postprocessing_instances,
        max_queue_delay_us=s.dynamic_batching.max_queue_delay_us, max_queue_size=s.dynamic_batching.max_queue_size,
        logits_datatype=logits, llm_instance_group=_llm_instance_group(spec, placed), hf=hf, llmapi=llmapi,
        tensorrtllm=trt,
        synthetic=SyntheticPlan(ttft_ms=spec.synthetic.ttft_ms, itl_ms=spec.synthetic.itl_ms)
        if spec.runtime == "synthetic" else None, bls_instances=s.bls_instances or _bls_instances(s),
        bls_parameters=bls_parameters(s.bls_accumulate_tokens), load=load, slo=spec.validation.slo, deploy=spec.deploy,
        kv_tokens_per_instance=kv_tokens, **placement,
        frontend=make_frontend_plan(spec, spec_dir, Path(tokenizer.dir)),
    )


def _bls_instances(serving) -> int:
    """A decoupled tensorrt_llm_bls serves its requests on threads, so a few instances carry the stream (one
    instance used 0.8-1.1 ms of CPU per streamed token on a loaded 2-core machine: docs/benchmarks.md); a
    non-decoupled one serves one request per instance, so it needs one per request in flight."""
    return min(4, serving.max_batch_size) if serving.streaming else serving.max_batch_size
