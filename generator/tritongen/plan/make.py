"""Spec -> Plan: every default, path, runtime parameter and the placement, decided once.

Paths are resolved here and nowhere else (`resolve_path`: `~` expanded, relative to the spec's folder). The
placement runs here, once, with one set of arguments; `render --inventory`, `deploy` and `plan` all show it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from tritongen.errors import SpecError, clip, problem
from tritongen.placement import place
from tritongen.placement.inventory import Inventory, load_inventory
from tritongen.placement.memory import load_memory_model
from tritongen.plan.adapters import plan_adapters
from tritongen.plan.checks import missing_tokenizer_files, read_config, require_round_trip
from tritongen.plan.deploy import DeployPlan
from tritongen.plan.frontend import StructuredRoute, make_frontend_plan
from tritongen.plan.kv import size_kv
from tritongen.plan.load import LoadProfile, load_profile
from tritongen.schema_set import read_schema_set
from tritongen.core.sections import (
    AdapterPlan, InstanceGroup, PathsPlan, ServerGroupPlan, StructuredOutputPlan, TokenizerPlan,
)
from tritongen.plan.model import PlacementPlan, Plan
from tritongen.plan.slo import resolve_slo
from tritongen.runtimes import clients, launch, names, planning
from tritongen.runtimes.base import PlanContext, Planning, RuntimeSettings
from tritongen.spec import Spec

DEFAULT_GPU_ARCH = None  # detected through NVML when an engine cache key is needed (--gpu-arch overrides)


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
    if missing and planning(spec.runtime).needs_tokenizer_files:
        raise SpecError(problem(field, missing, "point model.tokenizer at the model's tokenizer files"))
    if missing:
        # Other runtimes' plan, render and deploy do not load the tokenizer (preprocessing does, when served):
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
    require_round_trip(tok, tokenizer_dir, field)
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    return TokenizerPlan(**common, end_id=tok.eos_token_id, pad_id=pad, vocab_size=len(tok))


def max_sequence_length(spec: Spec, checkpoint_config: dict | None = None) -> int:
    """Longest prompt + completion the deployment must hold in the KV cache: what the runtime is configured for,
    else the checkpoint's context length where the runtime serves that, else the load profile's longest request."""
    rt = planning(spec.runtime)
    configured = rt.max_seq_len(spec) or rt.context_length(checkpoint_config or {})
    if configured:
        return configured
    load = spec.validation.load
    longest = (load.input_tokens.mean + 3 * load.input_tokens.stddev
               + load.output_tokens.mean + 3 * load.output_tokens.stddev)
    return max(256, int(longest))


def max_batch_size(spec: Spec) -> int:
    """The Triton batch (serving.max_batch_size), read here and nowhere else: the Plan's `max_batch_size`, which
    the runtimes size from (instances, the engine's default batch, vLLM's max_num_seqs, the BLS's in-flight cap)."""
    return spec.serving.max_batch_size


def kv_tokens(spec: Spec, placed: int | None = None, planned: int | None = None) -> int | None:
    """The KV-cache budget per LLM instance (tokens): `planned` (plan.kv.size_kv; default
    serving.kv_cache.max_tokens), capped by what placement found room for (`placed`); None: the runtime sizes its
    cache from free memory."""
    asked = spec.serving.kv_cache.max_tokens if planned is None else planned
    if placed is None:
        return asked
    return min(placed, asked or placed)


def _place(spec: Spec, plan: Plan, max_seq_len: int, inventory_source: str) -> PlacementPlan:
    """Place the model on a GPU inventory ('nvml', an inventory file or saved `nvidia-smi -L` text)."""
    from tritongen.runtimes.pins import datacenter_gpus

    if spec.placement.device != "gpu":
        raise SpecError(problem("placement.device", "is cpu, and `deploy` / `plan --inventory` place servers on GPUs",
                                "set placement.device: gpu for a GPU deployment, or run it on this machine with "
                                "`tritongen serve` or `tritongen up` (plan without --inventory)"))
    inventory = load_inventory(inventory_source)
    driver = launch(spec.runtime).driver_problem(inventory.driver, datacenter_gpus(g.name for g in inventory.gpus))
    if driver is not None and driver[0]:
        raise SpecError(problem("--inventory", f"{driver[1]} ({inventory.source})",
                                "upgrade the nodes' driver, or plan for nodes that have it"))
    config, settings = planning(spec.runtime).memory_model(spec, plan)
    memory = load_memory_model(config, **settings)
    if spec.deploy.nodes > 1:
        inventory = _multi_node(spec, inventory, memory.world_size)
    instances = planning(spec.runtime).instances_per_device(spec)
    placed = place(inventory, memory, max_seq_len=max_seq_len,
                   kv_fraction=spec.serving.kv_cache.free_gpu_mem_fraction, instances_per_device=instances,
                   gpu_ids=spec.placement.gpu_ids or None)
    return PlacementPlan(inventory=inventory, memory=memory, result=placed)


def _multi_node(spec: Spec, node: Inventory, world: int) -> Inventory:
    """`deploy.nodes` copies of the inventory's node, GPUs numbered on (node k: index + k x GPUs per node), so the
    placement checks a server group spanning nodes with the model's real per-rank memory."""
    nodes = spec.deploy.nodes
    full = [g for g in node.gpus if not g.mig_enabled]
    if not planning(spec.runtime).spans_nodes or world % nodes or world // nodes > len(full):
        raise SpecError(problem("deploy.nodes", f"{nodes} nodes cannot split tp_size x pp_size = {world} of runtime "
                                f"{spec.runtime} over nodes with {len(full)} full GPU(s)",
                                f"use runtime {names(lambda r: r.spans_nodes)} with tp x pp a multiple of nodes, at "
                                "most the node's GPUs per node, or set deploy.nodes: 1"))
    if spec.deploy.access_mode != "ReadWriteMany":
        raise SpecError(problem("deploy.access_mode", f"{spec.deploy.access_mode} mounts the models volume on one "
                                f"node; deploy.nodes {nodes} needs it on every node of a replica",
                                "set deploy.access_mode: ReadWriteMany and a storage_class that provides it"))
    per_node = world // nodes
    gpus = [dataclasses.replace(g, index=k * per_node + i) for k in range(nodes) for i, g in enumerate(full[:per_node])]
    return Inventory(tuple(gpus), f"{node.source} x {nodes} nodes", node.driver)


def _inventory_gpus(inventory: str | None) -> list[tuple[int, str]]:
    assert inventory is not None
    return [(g.index, g.name) for g in load_inventory(inventory).gpus]


def _llm_instance_group(spec: Spec, placed: bool) -> InstanceGroup:
    return InstanceGroup(**planning(spec.runtime).llm_instance_group(spec, placed))


def make_plan(spec: Spec, spec_dir: Path, inventory: str | None = None, *, engine_dir: str | None = None,
              gpu_arch: str | None = DEFAULT_GPU_ARCH) -> Plan:
    """Resolve a validated Spec into a Plan. Reads the tokenizer for its end/pad ids; lets the runtime resolve what
    it needs first (tensorrtllm: the engine, given or the cache entry a build fills); with an inventory, places the
    model once."""
    spec_dir = spec_dir.resolve()
    rt = planning(spec.runtime)
    checkpoint = _resolve_dir(spec_dir, spec.model.checkpoint, "model.checkpoint")
    tokenizer_dir = _resolve_dir(spec_dir, spec.model.tokenizer, "model.tokenizer") if spec.model.tokenizer \
        else checkpoint
    load = load_profile(spec.validation.load, lambda value: resolve_path(spec_dir, value),
                        {a.name: i for i, a in enumerate(spec.model.adapters, 1)})
    if load.structured.share > 0:
        read_schema_set(load.structured.schemas)  # a bad schema file fails the plan, not every Locust process
    config = read_config(checkpoint)
    seq_len = max_sequence_length(spec, config)
    sizing = size_kv(spec, checkpoint, max_batch_size(spec), seq_len, placed=inventory is not None)
    ctx = PlanContext(spec=spec, resolve=lambda value: resolve_path(spec_dir, value), checkpoint=checkpoint,
                      config=config, inventory_gpus=lambda: _inventory_gpus(inventory), tokenizer=None,
                      max_batch_size=max_batch_size(spec), kv_tokens=sizing.tokens,
                      max_seq_len=seq_len, inventory=inventory, engine_dir=engine_dir,
                      gpu_arch=gpu_arch)
    adapters, max_rank = plan_adapters(spec, ctx.resolve, checkpoint)
    ctx = dataclasses.replace(ctx, adapters=adapters, max_adapter_rank=max_rank)
    prepared = rt.prepare(ctx)
    ctx = dataclasses.replace(ctx, tokenizer=_tokenizer_plan(spec, tokenizer_dir, config))
    plan = _plan(rt, ctx, spec_dir, load, prepared, placed=inventory is not None, kv_sizing=sizing.how)
    rt.check_plan(plan)
    if inventory is None:
        return plan
    placement = _place(spec, plan, ctx.max_seq_len, inventory)
    used = {i for g in placement.result.server_groups for i in g.gpu_indices}
    rt.check_placement(spec, plan, [(g.label, g.name) for g in placement.inventory.gpus if g.index in used])
    groups = tuple(ServerGroupPlan(name=g.name, kv_tokens=kv_tokens(spec, g.kv_tokens, sizing.tokens),
                                   instances=g.instances, gpu_device_ids=g.gpu_device_ids)
                   for g in placement.result.server_groups)
    ctx = dataclasses.replace(ctx, kv_tokens=min(g.kv_tokens for g in groups))
    return _plan(rt, ctx, spec_dir, load, prepared, placed=True, kv_sizing=sizing.how, placement=placement,
                 server_groups=groups,
                 group_configs=rt.group_configs and len({(g.kv_tokens, g.instances, g.gpu_device_ids)
                                                         for g in groups}) > 1)


def _plan(rt: Planning, ctx: PlanContext, spec_dir: Path, load: LoadProfile, prepared: RuntimeSettings | None, *, placed: bool,
          **placement) -> Plan:
    from tritongen.contract import bls_parameters

    spec, tokenizer = ctx.spec, ctx.tokenizer
    assert tokenizer is not None
    settings = rt.plan_settings(ctx, prepared)
    s = spec.serving
    return Plan(
        name=spec.name, runtime=spec.runtime, spec_dir=str(spec_dir),
        paths=PathsPlan(checkpoint=str(ctx.checkpoint), engine=rt.engine_dir(settings)),
        tokenizer=tokenizer,
        max_batch_size=ctx.max_batch_size, decoupled=s.streaming,
        exclude_input_in_output=s.exclude_input_in_output, max_tokens_default=s.max_tokens_default,
        stream_interval=s.stream_interval,
        preprocessing_instances=s.preprocessing_instances, postprocessing_instances=s.postprocessing_instances,
        max_queue_delay_us=s.dynamic_batching.max_queue_delay_us, max_queue_size=s.dynamic_batching.max_queue_size,
        logits_datatype=rt.logits_datatype(settings), llm_instance_group=_llm_instance_group(spec, placed),
        runtime_settings=settings, bls_instances=s.bls_instances or _bls_instances(s.streaming, ctx.max_batch_size),
        bls_parameters=bls_parameters(s.bls_accumulate_tokens), ensemble_entry=s.ensemble, load=load, slo=resolve_slo(spec.validation.slo),
        deploy=_deploy_plan(spec), kv_tokens=ctx.kv_tokens, structured_output=_structured_output(rt, spec),
        adapters=ctx.adapters, max_adapter_rank=ctx.max_adapter_rank, **_bls_backend(spec, tokenizer), **placement,
        frontend=_frontend(rt, spec, spec_dir, Path(tokenizer.dir), ctx.max_batch_size,
                           len(placement.get("server_groups") or ()) or 1, ctx.adapters),
    )


def _structured_output(rt: Planning, spec: Spec) -> StructuredOutputPlan:
    """The spec's structured_output with what the runtime's model does with a guide."""
    guide_types, how = rt.guided_decoding(spec)
    s = spec.structured_output
    return StructuredOutputPlan(guide_types=guide_types, backend=s.backend, tool_call_format=s.tool_call_format,
                                max_schema_bytes=s.max_schema_bytes, how=how)


def _deploy_plan(spec: Spec) -> DeployPlan:
    """The Plan's deploy section: the spec's, every default applied by its validation (a field the Plan type lacks
    is refused, so the two cannot drift apart silently)."""
    return DeployPlan(**spec.deploy.model_dump())


def _frontend(rt: Planning, spec: Spec, spec_dir: Path, tokenizer_dir: Path, max_batch_size: int, servers: int,
              adapters: tuple[AdapterPlan, ...]):
    """The frontend's plan: for an ensemble runtime, or one whose own model speaks a request dialect the frontend
    knows (`Clients.dialect()`); None for a runtime with neither. Its workers are planned for the streams every
    server group carries at once (max_batch_size each)."""

    def resolve(value: str) -> Path:
        return resolve_path(spec_dir, value)

    structured = _structured_output(rt, spec)
    planned = {"streams": max_batch_size * servers, "adapters": adapters,
               "streams_why": f"max_batch_size {max_batch_size} x {servers} server group{'s' if servers > 1 else ''}",
               "structured": StructuredRoute(runtime=f"the {rt.name} runtime", guide_types=structured.guide_types,
                                             tool_call_format=structured.tool_call_format,
                                             max_schema_bytes=structured.max_schema_bytes)}
    if rt.ensemble:
        return make_frontend_plan(spec, resolve, tokenizer_dir, **planned)
    dialect = clients(spec.runtime).dialect()
    return None if dialect is None else make_frontend_plan(spec, resolve, tokenizer_dir, dialect, **planned)


def _bls_backend(spec: Spec, tokenizer: TokenizerPlan) -> dict[str, str]:
    """serving.bls resolved: native when the tokenizer's decoding is exactly a per-token table (checked here,
    on every token and on random sequences), else python; `native` asked for a tokenizer that fails is an error."""
    choice = spec.serving.bls
    if choice == "python":
        return {"bls_backend": "python"}
    if not tokenizer.loaded:
        # The engine path may plan without tokenizer files; preprocessing checks the table when it builds it.
        return {"bls_backend": "native"}
    from transformers import AutoTokenizer

    from tritongen.served import detok_table as table

    tok = AutoTokenizer.from_pretrained(tokenizer.dir)
    try:
        table.check_table(tok, table.build_table(tok, tokenizer.skip_special_tokens), tokenizer.skip_special_tokens)
    except table.NotTableDecodable as err:
        if choice == "native":
            raise SpecError(problem("serving.bls", f"native needs a table-decodable tokenizer: {clip(str(err))}",
                                    "use serving.bls: python (or auto)")) from None
        return {"bls_backend": "python", "bls_backend_reason": f"the tokenizer is not table-decodable ({clip(str(err))})"}
    return {"bls_backend": "native"}


def _bls_instances(streaming: bool, max_batch_size: int) -> int:
    """A decoupled tensorrt_llm_bls serves its requests on threads, so a few instances carry the stream (one
    instance used 0.8-1.1 ms of CPU per streamed token on a loaded 2-core machine: docs/benchmarks.md); a
    non-decoupled one serves one request per instance, so it needs one per request in flight."""
    return min(4, max_batch_size) if streaming else max_batch_size
