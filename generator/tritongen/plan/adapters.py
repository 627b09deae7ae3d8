"""LoRA adapters checked against the base checkpoint while planning (spec model.adapters -> Plan.adapters).

Each adapter is a PEFT folder. Its adapter_config.json must be readable LoRA, its target modules must exist in the
base checkpoint, its rank within model.max_adapter_rank, and every lora_A / lora_B matrix must fit the base weight
it adapts (lora_A [r, in], lora_B [out, r]). Shapes come from the safetensors headers (a few KB per file), so no
weights are loaded. Every problem names `model.adapters.N.<field>` and the fix.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tritongen.core.sections import AdapterPlan
from tritongen.errors import SpecError, clip, problem

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
PEFT_PREFIX = "base_model.model."
"""PEFT saves a LoRA matrix as base_model.model.<module>.lora_A.weight (the adapter name is not in the key)."""


def safetensors_shapes(path: Path) -> dict[str, list[int]]:
    """Tensor name -> shape from a safetensors file's header (8-byte little-endian length, then JSON)."""
    with open(path, "rb") as f:
        size = struct.unpack("<Q", f.read(8))[0]
        if size > 100 << 20:
            raise ValueError(f"header of {size} bytes")
        header = json.loads(f.read(size))
    return {k: v["shape"] for k, v in header.items() if k != "__metadata__"}


def base_shapes(checkpoint: Path) -> dict[str, list[int]] | None:
    """Weight name -> shape of the base checkpoint's safetensors files; None when it has none (shapes unchecked)."""
    files = sorted(checkpoint.glob("*.safetensors"))
    if not files:
        return None
    shapes: dict[str, list[int]] = {}
    for file in files:
        shapes.update(safetensors_shapes(file))
    return shapes


def _module_matches(target: str, module: str, regex: bool) -> bool:
    # PEFT's rule: a string target_modules is a full-match regular expression; a list entry names the module or
    # its last dotted parts.
    return bool(re.fullmatch(target, module)) if regex else module == target or module.endswith("." + target)


def _read_config(folder: Path, where: str) -> dict[str, Any]:
    path = folder / ADAPTER_CONFIG
    try:
        config = json.loads(path.read_text())
    except FileNotFoundError:
        raise SpecError(problem(f"{where}.path", f"{folder} has no {ADAPTER_CONFIG}",
                                "point it at a PEFT adapter folder (save_pretrained of a PeftModel)")) from None
    except (OSError, ValueError, UnicodeDecodeError) as err:
        raise SpecError(problem(f"{where}.path", f"{path} is not readable JSON ({clip(str(err))})",
                                "fix or re-save the adapter")) from None
    if not isinstance(config, dict) or config.get("peft_type", "LORA") != "LORA":
        kind = config.get("peft_type") if isinstance(config, dict) else type(config).__name__
        raise SpecError(problem(f"{where}.path", f"{path} is not a LoRA adapter (peft_type {kind!r})",
                                "serve LoRA adapters only"))
    if config.get("use_dora"):
        raise SpecError(problem(f"{where}.path", f"{path} is a DoRA adapter (use_dora: true), which no runtime serves "
                                "per request (PEFT refuses DoRA in a mixed-adapter batch; TensorRT-LLM's LoRA "
                                "converter and vLLM take plain LoRA)",
                                "merge it into a checkpoint of its own, or train the adapter without use_dora"))
    return config


def _rank(config: dict[str, Any], path: Path, where: str) -> int:
    ranks = [config.get("r"), *(config.get("rank_pattern") or {}).values()]
    if not all(isinstance(r, int) and r > 0 for r in ranks):
        raise SpecError(problem(f"{where}.path", f"{path / ADAPTER_CONFIG}: r / rank_pattern must be positive "
                                f"integers (got {clip(repr(ranks))})", "fix or re-save the adapter"))
    return max(ranks)


def _targets(config: dict[str, Any], path: Path, where: str) -> tuple[tuple[str, ...], bool]:
    targets = config.get("target_modules")
    if isinstance(targets, str):
        return (targets,), True
    if not isinstance(targets, list) or not targets or not all(isinstance(t, str) for t in targets):
        raise SpecError(problem(f"{where}.path", f"{path / ADAPTER_CONFIG}: target_modules must be a list of module "
                                "names or a regular expression", "fix or re-save the adapter"))
    return tuple(sorted(targets)), False


def _check_modules(targets: tuple[str, ...], regex: bool, modules: set[str], where: str) -> None:
    for target in targets:
        if not any(_module_matches(target, m, regex) for m in modules):
            names = sorted({m.rsplit(".", 1)[-1] for m in modules if ".layers." in m})
            raise SpecError(problem(f"{where}.path", f"target module {target!r} is not in the base checkpoint "
                                    f"(its layers' linear modules: {clip(', '.join(names), 300)})",
                                    "use an adapter trained for this base model"))


def _check_shapes(folder: Path, base: dict[str, list[int]], where: str) -> None:
    weights = folder / ADAPTER_WEIGHTS
    if not weights.is_file():
        raise SpecError(problem(f"{where}.path", f"{folder} has no {ADAPTER_WEIGHTS}",
                                "save the adapter with safe_serialization (PEFT's default)"))
    try:
        shapes = safetensors_shapes(weights)
    except (OSError, ValueError, struct.error) as err:
        raise SpecError(problem(f"{where}.path", f"{weights} is not a readable safetensors file ({clip(str(err))})",
                                "re-save the adapter")) from None
    for key, shape in shapes.items():
        m = re.fullmatch(r"(?:base_model\.model\.)?(.+)\.lora_([AB])(?:\.[^.]+)?\.weight", key)
        if m is None:
            continue
        module, side = m.groups()
        target = base.get(f"{module}.weight")
        if target is None or len(target) != 2 or len(shape) != 2:
            raise SpecError(problem(f"{where}.path", f"{ADAPTER_WEIGHTS}: {key} adapts {module}, which the base "
                                    "checkpoint has no 2-D weight for", "use an adapter trained for this base model"))
        out_features, in_features = target
        fits = shape[1] == in_features if side == "A" else shape[0] == out_features
        if not fits:
            want = f"[r, {in_features}]" if side == "A" else f"[{out_features}, r]"
            raise SpecError(problem(f"{where}.path", f"{ADAPTER_WEIGHTS}: {key} has shape {shape}, but {module} "
                                    f"of the base is {target} (lora_{side} must be {want})",
                                    "use an adapter trained for this base model"))


def plan_adapters(spec, resolve: Callable[[str], Path], checkpoint: Path) -> tuple[tuple[AdapterPlan, ...], int | None]:
    """The Plan's adapters (task ids 1, 2, ... in spec order) and the largest rank the deployment accepts."""
    adapters = spec.model.adapters
    if not adapters:
        return (), None
    base = base_shapes(checkpoint)
    modules = None if base is None else {k.removesuffix(".weight") for k, v in base.items()
                                         if k.endswith(".weight") and len(v) == 2}
    planned = []
    for i, adapter in enumerate(adapters):
        where = f"model.adapters.{i}"
        folder = resolve(adapter.path)
        if not folder.is_dir():
            raise SpecError(problem(f"{where}.path", f"folder {folder} does not exist",
                                    "point it at a PEFT adapter folder (make some with `tritongen demo-model DIR "
                                    "--adapters 3`)"))
        config = _read_config(folder, where)
        rank = _rank(config, folder, where)
        targets, regex = _targets(config, folder, where)
        if modules is not None:
            _check_modules(targets, regex, modules, where)
            _check_shapes(folder, base, where)
        if spec.model.max_adapter_rank is not None and rank > spec.model.max_adapter_rank:
            raise SpecError(problem(f"{where}.path", f"rank {rank} is above model.max_adapter_rank "
                                    f"{spec.model.max_adapter_rank}", "raise model.max_adapter_rank (or leave it "
                                    "unset: the largest adapter's rank)"))
        alpha = config.get("lora_alpha", rank)
        planned.append(AdapterPlan(name=adapter.name, task_id=i + 1, path=str(folder), rank=rank,
                                   alpha=float(alpha) if isinstance(alpha, (int, float)) else float(rank),
                                   target_modules=targets))
    return tuple(planned), spec.model.max_adapter_rank or max(a.rank for a in planned)
