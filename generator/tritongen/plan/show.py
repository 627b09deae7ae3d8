"""The Plan as tables a person reads (`tritongen plan`); `tritongen plan --json` is the machine form.

Each table has a header row and, where the Plan documents a field, what it means. Values are written out
(`1 x KIND_GPU on GPU 0`, `4,096 tokens`), never as Python reprs.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from tritongen.plan.model import Plan
from tritongen.runtimes import planning


def table(rows: list[tuple[str, ...]], indent: str = "  ") -> str:
    """Plain-text columns: the first row is the header, underlined; a column empty below its header is left out."""
    keep = [i for i in range(len(rows[0])) if any(r[i] for r in rows[1:])]
    rows = [tuple(r[i] for i in keep) for r in rows]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    rule = tuple("-" * w for w in widths)
    return "\n".join(indent + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()
                     for r in (rows[0], rule, *rows[1:]))


def value_text(value: Any) -> str:
    """A Plan value as a person writes it: no quotes, brackets or braces."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}" if abs(value) >= 10_000 else str(value)
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    if isinstance(value, dict):
        return ", ".join(f"{k} {value_text(v)}" for k, v in value.items()) or "-"
    if isinstance(value, (list, tuple)):
        return ", ".join(value_text(v) for v in value) or "-"
    return str(value)


def _doc(model: type[BaseModel], name: str) -> str:
    """The first sentence of a field's docstring (the Plan's and the runtimes' fields document themselves)."""
    field = model.model_fields.get(name)
    text = " ".join((field.description or "").split()) if field is not None else ""
    head = text.split(". ")[0]
    return head if head.endswith(".") or not head else head + "."


def fields_table(model: BaseModel, skip: tuple[str, ...] = ()) -> str:
    """setting / value / meaning for every field of a section; nested sections are flattened (`build.dtype`)."""
    rows = [("setting", "value", "meaning")]

    def add(obj: BaseModel, prefix: str) -> None:
        for name in type(obj).model_fields:
            if name in skip:
                continue
            value = getattr(obj, name)
            if isinstance(value, BaseModel):
                add(value, f"{prefix}{name}.")
            elif isinstance(value, dict) and value and len(value_text(value)) > 60:
                # A long mapping reads better as one row per key.
                rows.append((f"{prefix}{name}", "", _doc(type(obj), name)))
                rows.extend((f"{prefix}{name}.{k}", value_text(v), "") for k, v in value.items())
            else:
                rows.append((f"{prefix}{name}", value_text(value), _doc(type(obj), name)))

    add(model, "")
    return table(rows)


def _instances(plan: Plan) -> str:
    g = plan.llm_instance_group
    where = f" on GPU {value_text(g.gpus)}" if g.gpus else ""
    return f"{g.count} x {g.kind}{where}"


def _serving_rows(plan: Plan) -> list[tuple[str, str, str]]:
    settings = plan.runtime_settings
    runtime_batch = getattr(settings, "max_batch_size", None)
    build = getattr(settings, "build", None)
    runtime_batch = runtime_batch if runtime_batch is not None else getattr(build, "max_batch_size", None)
    batch_meaning = "Triton max_batch_size of the batched models: requests one LLM instance takes at once"
    if runtime_batch is not None and runtime_batch != plan.max_batch_size:
        batch_meaning += f"; the {plan.runtime} runtime itself schedules up to {runtime_batch:,} (runtime table)"
    kind_meaning = "Triton instance_group of tensorrt_llm in the default config.pbtxt"
    if plan.llm_instance_group.kind == "KIND_CPU" and plan.placement is not None:
        kind_meaning += ("; KIND_CPU is how Triton runs a backend that places itself on the GPUs named by "
                         "the server group (below)")
    kv = (f"{plan.kv_tokens:,} tokens per LLM instance" if plan.kv_tokens is not None
          else "sized by the runtime from free memory")
    bls = f"{plan.bls_instances} x {plan.bls_backend}"
    rows = [
        ("setting", "value", "meaning"),
        ("max_batch_size", str(plan.max_batch_size), batch_meaning),
        ("LLM instances", _instances(plan), kind_meaning),
        ("KV cache", kv, "the budget each LLM instance holds (serving.kv_cache)"),
        *([("kv_sizing", plan.kv_sizing, "how the planner sized the KV budget")] if plan.kv_sizing else []),
        *planning(plan).cache_rows(plan),
        ("streaming", "decoupled" if plan.decoupled else "one response per request",
         "decoupled models stream a response per step"),
        ("prompt in output", "no" if plan.exclude_input_in_output else "yes", "serving.exclude_input_in_output"),
        ("max tokens default", str(plan.max_tokens_default), "output tokens when a request names none"),
        ("dynamic batching", f"queue delay {plan.max_queue_delay_us} us, queue size {plan.max_queue_size}",
         "delay: the longest a request waits to join a batch; size: requests waiting before new ones are refused"),
        ("preprocessing", _count(plan.preprocessing_instances, "instance"), "tokenizes each request once"),
        ("postprocessing", _count(plan.postprocessing_instances, "instance"),
         "rendered for clients that call it; the BLS detokenizes"),
        ("tensorrt_llm_bls", bls, plan.bls_backend_reason or "calls the LLM, detokenizes each response "
                                                            "incrementally"),
        ("ensemble", f"the BLS ({plan.bls_backend})" if plan.ensemble_entry == "bls" else "Triton's ensemble",
         "NVIDIA's text entry; the BLS itself: a client that leaves stops generation (serving.ensemble)"
         if plan.ensemble_entry == "bls" else "scheduler with tensorrt_llm_bls as its step; a client that leaves "
         "does not stop generation (serving.ensemble: bls does)"),
        _structured_row(plan),
    ]
    return rows


def _structured_row(plan: Plan) -> tuple[str, str, str]:
    s = plan.structured_output
    value = (f"{value_text(s.guide_types)} ({s.backend}, guides <= {value_text(s.max_schema_bytes)} bytes)"
             if s.guide_types else "refused")
    return "guided decoding", value, f"{s.how}; tool calls: {s.tool_call_format}"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _load_line(plan: Plan) -> str:
    p = plan.load
    unit = "requests/s" if p.request_rate else "users"
    if p.sweep:
        level = f"sweep {value_text(p.sweep)} {unit}"
    else:
        level = f"{value_text(p.request_rate)} requests/s" if p.request_rate else _count(p.users, "user")
    if p.request_rate:
        level += f" ({p.arrival} arrivals)"
    if p.trace_file:
        level = f"trace {p.trace_file}"
    sweep = ""
    spread = lambda d: f"{d.mean}" + (f" +/- {d.stddev:g}" if d.stddev else "")  # noqa: E731
    return (f"  {p.protocol}, {level}{sweep}, {p.duration_s:g} s per level after {p.warmup_s:g} s warm-up; "
            f"prompts of {spread(p.input_tokens)} tokens, outputs of {spread(p.output_tokens)} tokens")


def _slo_lines(plan: Plan) -> list[str]:
    from tritongen.metric_registry import GATE_BY_NAME

    rows = [("objective", "holds when")]
    for name, limit in plan.slo.objectives.items():
        gate = GATE_BY_NAME[name]
        stat = f" {gate.stat}" if gate.stat else ""
        rows.append((name, f"{gate.metric}{stat} {gate.comparison} {value_text(limit)} {gate.unit}".rstrip()))
    if plan.slo.min_capacity is not None:
        rows.append(("min_capacity", f"capacity >= {value_text(plan.slo.min_capacity)} (the highest level at "
                                     "which every objective holds)"))
    return [table(rows)] if len(rows) > 1 else ["  (no objectives: every level passes)"]


def _adapters(plan: Plan) -> list[str]:
    if not plan.adapters:
        return []
    rows = [("lora_task_id", "adapter (OpenAI model)", "rank", "target modules", "folder")]
    rows += [(str(a.task_id), a.name, str(a.rank), ", ".join(a.target_modules), a.path) for a in plan.adapters]
    return ["", f"LoRA adapters (0: the base model; largest rank accepted: {plan.max_adapter_rank})", table(rows)]


def _server_groups(plan: Plan) -> list[str]:
    if not plan.server_groups:
        return []
    rows = [("server group", "KV tokens / instance", "LLM instances", "gpu_device_ids")]
    rows += [(g.name, f"{g.kv_tokens:,}", str(g.instances), g.gpu_device_ids or "-") for g in plan.server_groups]
    return ["", "server groups", table(rows)]


def _placement(plan: Plan) -> list[str]:
    if plan.placement is None:
        return []
    placed = plan.placement.result
    devices = [("device", "memory", "fits", "LLM instances", "weights / instance", "KV tokens / instance",
                f"max batch at {placed.max_seq_len:,} tokens", "server group", "why")]
    for d in placed.devices:
        fits = d.fits
        devices.append((d.label, f"{d.memory_bytes / 2**30:.2f} GiB", "yes" if fits else "no", str(d.instances),
                        f"{d.weight_bytes / 2**30:.2f} GiB" if fits else "-", f"{d.kv_tokens:,}" if fits else "-",
                        str(d.max_batch_size) if fits else "-", d.server_group or "-", d.reason))
    groups = [("server group", "devices", "CUDA_VISIBLE_DEVICES", "http / grpc / metrics", "world size",
               "GPU metrics")]
    for g in placed.server_groups:
        groups.append((g.name, ", ".join(g.devices), g.cuda_visible_devices or "(set by the deployment target)",
                       " / ".join(map(str, g.ports)), str(g.world_size), "on" if g.gpu_metrics else "off"))
    return ["", "placement: devices (max batch: sequences of the longest length the KV budget holds at once)",
            table(devices), "", "placement: server groups", table(groups)]


def plan_text(plan: Plan, verbose: bool = False, hint: bool = True) -> str:
    """What `tritongen plan` prints: the decisions as tables; `verbose` adds every remaining field; `hint` ends
    with where the rest is."""
    tok = plan.tokenizer
    lines = [
        f"plan {plan.name}: runtime {plan.runtime}",
        "",
        f"  checkpoint  {plan.paths.checkpoint}",
        *([f"  engine      {plan.paths.engine}"] if plan.paths.engine else []),
        f"  tokenizer   {tok.dir}  (end id {tok.end_id}, pad id {tok.pad_id}, vocabulary {tok.vocab_size:,}"
        f"{'' if tok.loaded else '; files missing here'})",
        "",
        "serving (Triton)",
        table(_serving_rows(plan)),
        "",
        f"runtime {plan.runtime}",
        fields_table(plan.runtime_settings, skip=("runtime",)),
        *_adapters(plan),
        *_server_groups(plan),
        *_placement(plan),
        "",
        "load test",
        _load_line(plan),
        "",
        "SLO gate",
        *_slo_lines(plan),
    ]
    if verbose:
        if plan.bls_parameters:
            rows = [("parameter", "value")] + [(k, v) for k, v in plan.bls_parameters.items()]
            lines += ["", "tensorrt_llm_bls parameters", table(rows)]
        lines += ["", "load profile (every field)", fields_table(plan.load)]
        if plan.frontend is not None:
            lines += ["", "OpenAI frontend", fields_table(plan.frontend)]
        lines += ["", "deploy", fields_table(plan.deploy)]
    elif hint:
        lines += ["", "(-v shows every field; --json writes the plan as a lock file)"]
    return "\n".join(lines) + "\n"
