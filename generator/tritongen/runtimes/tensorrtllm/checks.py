"""Consistency of a built TensorRT-LLM engine (its config.json) with the spec that will serve it.

Each mismatch here is one tritonserver would otherwise report at model load, or worse, one that loads and then
rejects or truncates requests under load. Every problem names the spec field and the engine field.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from tritongen.core import PlanView
from tritongen.errors import SpecError, problem
from tritongen.runtimes.tensorrtllm import xgrammar_info
from tritongen.runtimes.tensorrtllm.release import TRTLLM
from tritongen.runtimes.tensorrtllm.settings import TensorrtllmPlan


# pretrained_config.quantization.quant_algo written by conversion, per spec quantisation.
_QUANT_ALGO = {"none": None, "fp8": "FP8", "int8_weight_only": "W8A16", "int4_weight_only": "W4A16",
               "int4_awq": "W4A16_AWQ", "smoothquant": "W8A8_SQ"}
_KV_QUANT_ALGO = {"auto": None, "fp8": "FP8", "int8": "INT8"}


def load_engine_config(engine_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """Read an engine folder's config.json (written by trtllm-build)."""
    path = Path(engine_dir) / "config.json"
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise SpecError(problem("engine.engine_dir", f"({engine_dir}) has no config.json",
                                "point it at a folder written by trtllm-build")) from None
    except ValueError as err:
        raise SpecError(problem("engine.engine_dir", f"{path} is not valid JSON ({err})",
                                "rebuild the engine")) from None


# pretrained_config.logits_dtype (trtllm-build --logits_dtype) -> the Triton data type of the logits outputs.
LOGITS_DATATYPE = {"float32": "TYPE_FP32", "float16": "TYPE_FP16", "bfloat16": "TYPE_BF16"}


def logits_datatype(engine_config: dict[str, Any]) -> str:
    """The `logits_datatype` the tensorrt_llm model must declare for this engine (float32 when unrecorded)."""
    dtype = engine_config.get("pretrained_config", {}).get("logits_dtype") or "float32"
    if dtype not in LOGITS_DATATYPE:
        raise SpecError(problem("engine.engine_dir", f"config.json has logits_dtype {dtype!r}, which tritongen does "
                                f"not map (known: {', '.join(LOGITS_DATATYPE)})", "rebuild with --logits_dtype float32"))
    return LOGITS_DATATYPE[dtype]


def _json(value: Any) -> str:
    return json.dumps(value)


def _longest(mean: int, stddev: float) -> int:
    # mean + 3 sigma covers 99.9% of a normal load; a longer request is rare enough to accept as an error.
    return math.ceil(mean + 3 * stddev)


def _stderr(message: str) -> None:
    print(message, file=sys.stderr)


def check_plan_engine(plan: PlanView, log: Callable[[str], None] = _stderr) -> None:
    """Check the plan's engine against its config.json when the engine exists here (SpecError naming both
    fields); a missing engine is for the build, or the serving machine, to provide, and is said."""
    trt = plan.runtime_settings
    if not isinstance(trt, TensorrtllmPlan):
        return
    if not (Path(trt.engine_dir) / "config.json").is_file():
        log(f"engine.engine_dir: no built engine at {trt.engine_dir} yet, so the repository is not checked against "
            "one; run `tritongen build` for this spec (or point engine.engine_dir at a built engine) before serving")
        return
    info = Path(trt.engine_dir) / xgrammar_info.FILE
    if not info.is_file():
        # The C++ backend refuses to load with xgrammar_tokenizer_info_path naming a missing file; engines built
        # by tritongen have it (build_commands), an engine built elsewhere needs it written once.
        log(f"engine.engine_dir: {info} is missing, and the tensorrt_llm model does not load without it (guided "
            f"decoding); write it: `python -m tritongen.runtimes.tensorrtllm.xgrammar_info {plan.tokenizer.dir} "
            f"{trt.engine_dir}`")
    config = load_engine_config(trt.engine_dir)
    problems = check_engine(config, plan, tokenizer_vocab_size=plan.tokenizer.vocab_size, world_size=trt.world_size)
    if logits_datatype(config) != plan.logits_datatype:
        problems.append(problem(f"engine {trt.engine_dir} (logits {logits_datatype(config)})",
                                f"differs from the plan's logits_datatype ({plan.logits_datatype})",
                                "plan again with this engine (engine.engine_dir or --engine-dir)"))
    if problems:
        raise SpecError(problems)


def check_engine(engine_config: dict[str, Any], plan: PlanView, *, tokenizer_vocab_size: int | None = None,
                 world_size: int | None = None) -> list[str]:
    """Problems between an engine's config.json and the plan, one `field (value): what; fix` line each
    (fields named as in the spec the plan came from).

    `world_size` is the MPI world of the planned launch (default: engine.tp_size x engine.pp_size);
    `tokenizer_vocab_size` is len(tokenizer) of the tokenizer preprocessing will load. Callers raise SpecError.
    """
    build = engine_config.get("build_config", {})
    plugin = build.get("plugin_config", {})
    pretrained = engine_config.get("pretrained_config", {})
    mapping = pretrained.get("mapping", {})
    quant = pretrained.get("quantization", {})
    trt = cast(TensorrtllmPlan, plan.runtime_settings)
    wanted = trt.build.model_dump()
    problems = []

    version = engine_config.get("version")
    if version != TRTLLM.version:
        problems.append(problem(f"engine config.json version ({version})",
                                f"must equal the serving container's TensorRT-LLM "
                                f"({TRTLLM.version}, {TRTLLM.container})",
                                "rebuild the engine with the pinned release"))

    strategy = f"engine.batching_strategy ({trt.batching_strategy})"
    if "kv_cache_type" in build:
        if str(build["kv_cache_type"]).upper() != "PAGED":
            problems.append(problem(strategy, f"needs engine build_config.kv_cache_type PAGED "
                                    f"(got {build['kv_cache_type']})", "rebuild with --kv_cache_type paged"))
    elif plugin.get("paged_kv_cache") is not True:
        problems.append(problem(strategy, f"needs engine build_config.plugin_config.paged_kv_cache true "
                                f"(got {_json(plugin.get('paged_kv_cache'))})", "rebuild with --kv_cache_type paged"))
    if plugin.get("remove_input_padding") is not True:
        problems.append(problem(strategy, f"needs engine build_config.plugin_config.remove_input_padding true "
                                f"(got {_json(plugin.get('remove_input_padding'))})",
                                "rebuild with --remove_input_padding enable"))
    fmha = plugin.get("use_paged_context_fmha")
    for field, enabled in (("serving.kv_cache.enable_reuse", trt.enable_kv_cache_reuse),
                           ("engine.enable_chunked_context", trt.enable_chunked_context)):
        if enabled and fmha is not True:
            problems.append(problem(f"{field} (true)", f"needs engine build_config.plugin_config."
                                    f"use_paged_context_fmha true (got {_json(fmha)})",
                                    f"rebuild with engine.use_paged_context_fmha: true or set {field}: false"))

    # Triton's max_batch_size and the engine's are independent (NVIDIA's model_config.md): the executor schedules
    # up to the engine's batch whatever Triton batches, so the two are not compared.
    for field in ("max_input_len", "max_seq_len"):
        built = build.get(field)
        if built is not None and built != wanted[field]:
            problems.append(problem(f"engine.{field} ({wanted[field]})",
                                    f"must equal engine build_config.{field} ({built})",
                                    f"set engine.{field}: {built} or rebuild the engine"))
    engine_beam = build.get("max_beam_width")
    if engine_beam is not None and wanted["max_beam_width"] > engine_beam:
        problems.append(problem(f"engine.max_beam_width ({wanted['max_beam_width']})",
                                f"must be <= engine build_config.max_beam_width ({engine_beam})",
                                f"rebuild with --max_beam_width {wanted['max_beam_width']} or lower it"))

    load = plan.load
    # A prompts file brings its own lengths; only the synthetic profile is known here.
    if load.prompts_file is None:
        inp, out = load.input_tokens, load.output_tokens
        longest_in, longest_out = _longest(inp.mean, inp.stddev), _longest(out.mean, out.stddev)
        max_input = build.get("max_input_len")
        if max_input is not None and longest_in > max_input:
            problems.append(problem(f"validation.load.input_tokens (mean {inp.mean} + 3 x stddev {inp.stddev:g} "
                                    f"= {longest_in})", f"must be <= engine build_config.max_input_len ({max_input})",
                                    "rebuild with a larger engine.max_input_len or shorten the prompts"))
        max_seq = build.get("max_seq_len")
        if max_seq is not None and longest_in + longest_out > max_seq:
            problems.append(problem(f"validation.load (input {longest_in} + output {longest_out} = "
                                    f"{longest_in + longest_out} tokens)",
                                    f"must be <= engine build_config.max_seq_len ({max_seq})",
                                    "rebuild with a larger engine.max_seq_len or shorten the load"))

    tp, pp = mapping.get("tp_size", 1), mapping.get("pp_size", 1)
    engine_ranks = f"engine pretrained_config.mapping tp_size x pp_size ({tp} x {pp} = {tp * pp})"
    if (wanted["tp_size"], wanted["pp_size"]) != (tp, pp):
        problems.append(problem(f"engine.tp_size x engine.pp_size ({wanted['tp_size']} x {wanted['pp_size']} "
                                f"= {wanted['tp_size'] * wanted['pp_size']})", f"must equal {engine_ranks}",
                                "set engine.tp_size/pp_size to the engine's or rebuild"))
    if world_size is not None and world_size != tp * pp:
        problems.append(problem(f"launch world size ({world_size})", f"must equal {engine_ranks}",
                                "start one MPI rank per engine rank"))

    vocab = pretrained.get("vocab_size")
    if tokenizer_vocab_size is not None and vocab is not None and tokenizer_vocab_size > vocab:
        problems.append(problem(f"model.tokenizer (vocabulary {tokenizer_vocab_size})",
                                f"must be <= engine pretrained_config.vocab_size ({vocab})",
                                "use the tokenizer of the checkpoint the engine was built from"))

    dtype = pretrained.get("dtype")
    if dtype is not None and dtype != wanted["dtype"]:
        problems.append(problem(f"engine.dtype ({wanted['dtype']})",
                                f"must equal engine pretrained_config.dtype ({dtype})",
                                f"set engine.dtype: {dtype} or rebuild"))
    algo = quant.get("quant_algo")
    expected = _QUANT_ALGO[wanted["quantization"]]
    if not (algo == expected or (expected is not None and str(algo).startswith(expected))):
        problems.append(problem(f"engine.quantization ({wanted['quantization']})",
                                f"does not match engine pretrained_config.quantization.quant_algo ({_json(algo)})",
                                "set engine.quantization to the engine's or rebuild"))
    kv_algo = quant.get("kv_cache_quant_algo")
    if kv_algo != _KV_QUANT_ALGO[wanted["kv_cache_dtype"]]:
        problems.append(problem(f"engine.kv_cache_dtype ({wanted['kv_cache_dtype']})",
                                f"does not match engine pretrained_config.quantization.kv_cache_quant_algo "
                                f"({_json(kv_algo)})", "set engine.kv_cache_dtype to the engine's or rebuild"))
    return problems


def check_parallel(config: dict[str, Any], tp: int, pp: int) -> None:
    """tp must divide the attention heads (and the KV heads, or be a multiple of them); pp must divide the layers."""
    text = config.get("text_config", config)
    heads, layers = text.get("num_attention_heads"), text.get("num_hidden_layers")
    kv_heads = text.get("num_key_value_heads", heads)
    problems = []
    if heads and heads % tp:
        problems.append(problem("engine.tp_size", f"{tp} does not divide the model's {heads} attention heads",
                                f"use a tp_size that divides {heads} (e.g. {_divisors(heads)})"))
    elif kv_heads and tp > 1 and kv_heads % tp and tp % kv_heads:
        problems.append(problem("engine.tp_size", f"{tp} neither divides the model's {kv_heads} KV heads nor is a "
                                "multiple of them", f"use a tp_size that divides {kv_heads}"))
    if layers and layers % pp:
        problems.append(problem("engine.pp_size", f"{pp} does not divide the model's {layers} layers",
                                f"use a pp_size that divides {layers} (e.g. {_divisors(layers)})"))
    if problems:
        raise SpecError(problems)


def _divisors(n: int) -> str:
    return ", ".join(str(d) for d in (1, 2, 4, 8, 16) if n % d == 0)


# Compute capability by product name, for an engine cache key planned from an inventory file (not NVML).
_ARCH = ((re.compile(r"\b(GB|B)(100|200|300)\b"), "sm100"), (re.compile(r"\b(GH200|H200|H100|H800|H20)\b"), "sm90"),
         (re.compile(r"\b(L40S?|L4|L20|RTX 40\d\d|RTX \d+ Ada)\b"), "sm89"),
         (re.compile(r"\b(A100|A800|A30)\b"), "sm80"), (re.compile(r"\b(A10G?|A40|A16|A2|RTX A\d{4})\b"), "sm86"))


def gpu_arch_from_inventory(gpu_names: list[str]) -> str | None:
    """The one `sm<NN>` the named GPUs share (None when unknown); several architectures are refused."""
    archs = {next((arch for pattern, arch in _ARCH if pattern.search(name)), None) for name in gpu_names}
    if None in archs or not archs:
        return None
    if len(archs) > 1:
        raise SpecError(problem("placement.gpu_ids", f"the GPUs span architectures {', '.join(sorted(archs))}, "
                                "and an engine runs on the one it was built for", "list GPUs of one product"))
    return archs.pop()


# GPUs without FP8 tensor cores (FP8 needs compute capability 8.9: Ada, Hopper and newer).
_NO_FP8 = re.compile(r"\b(A100|A800|A30|A40|A10G?|A16|A2|V100|T4|RTX A\d{4})\b")


def check_fp8(quantization: str, kv_cache_dtype: str, gpu_names: list[tuple[str, str]]) -> None:
    """FP8 weights or KV cache on GPUs of the inventory that have no FP8 (`gpu_names`: (label, product name))."""
    field = "engine.quantization" if quantization == "fp8" else "engine.kv_cache_dtype" if kv_cache_dtype == "fp8" \
        else None
    if field is None:
        return
    without = [f"{label} ({name})" for label, name in gpu_names if _NO_FP8.search(name)]
    if without:
        raise SpecError(problem(field, f"fp8 needs FP8 tensor cores (Ada, Hopper or newer), which "
                                f"{', '.join(without)} lack", "use int8_weight_only, int4_awq or smoothquant "
                                "(and kv_cache_dtype int8), or GPUs with FP8"))
