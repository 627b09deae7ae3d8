"""Checks that run while planning, each naming the spec field: tokenizer files, tp/pp against the model's
shape, converter support, FP8 against the inventory's GPUs."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tritongen.errors import EnvironmentMissing, SpecError, problem

# What AutoTokenizer can load a tokenizer from (any one set suffices).
TOKENIZER_FILE_SETS = (("tokenizer.json",), ("tokenizer.model",), ("vocab.json", "merges.txt"), ("vocab.txt",))
# GPUs without FP8 tensor cores (FP8 needs compute capability 8.9: Ada, Hopper and newer).
_NO_FP8 = re.compile(r"\b(A100|A800|A30|A40|A10G?|A16|A2|V100|T4|RTX A\d{4})\b")


def missing_tokenizer_files(folder: Path) -> str | None:
    """None when `folder` holds a loadable tokenizer; else which files are missing, for a message."""
    if any(all((folder / name).is_file() for name in names) for names in TOKENIZER_FILE_SETS):
        return None
    sets = ", ".join(" + ".join(names) for names in TOKENIZER_FILE_SETS)
    config = "" if (folder / "tokenizer_config.json").is_file() else "; tokenizer_config.json is missing too"
    return f"no tokenizer files in {folder} (none of {sets}{config})"


def require_tokenizer(folder: str | Path, field: str = "model.tokenizer") -> None:
    """The command about to run loads the tokenizer here (load generator, serving): EnvironmentMissing if absent."""
    missing = missing_tokenizer_files(Path(folder))
    if missing:
        raise EnvironmentMissing(problem(field, missing, "copy the model's tokenizer files there (or point "
                                         "model.tokenizer at them and plan again)"))


def read_config(checkpoint: Path) -> dict[str, Any]:
    path = checkpoint / "config.json"
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise SpecError(problem("model.checkpoint", f"({checkpoint}) has no config.json",
                                "point it at a Hugging Face checkpoint folder")) from None
    except (ValueError, UnicodeDecodeError) as err:
        raise SpecError(problem("model.checkpoint", f"{path} is not valid JSON ({err})",
                                "fix or re-download the checkpoint's config.json")) from None


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


def plan_notes(plan) -> list[str]:
    """What a user must know about a plan that is valid but not complete here (printed by plan/render/deploy)."""
    notes = []
    if not plan.tokenizer.loaded:
        notes.append(f"note: model.tokenizer: {missing_tokenizer_files(Path(plan.tokenizer.dir)) or 'was missing'}"
                     "; plan, render and deploy do not need it, but preprocessing, postprocessing and the load test "
                     "load it from there")
    return notes
