"""Checks that run while planning, each naming the spec field: tokenizer files, tp/pp against the model's
shape, converter support, FP8 against the inventory's GPUs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tritongen.errors import EnvironmentMissing, SpecError, problem

# What AutoTokenizer can load a tokenizer from (any one set suffices).
TOKENIZER_FILE_SETS = (("tokenizer.json",), ("tokenizer.model",), ("vocab.json", "merges.txt"), ("vocab.txt",))


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


def plan_notes(plan) -> list[str]:
    """What a user must know about a plan that is valid but not complete here (printed by plan/render/deploy)."""
    notes = []
    if not plan.tokenizer.loaded:
        notes.append(f"note: model.tokenizer: {missing_tokenizer_files(Path(plan.tokenizer.dir)) or 'was missing'}"
                     "; plan, render and deploy do not need it, but preprocessing, postprocessing and the load test "
                     "load it from there")
    if plan.placement is not None:
        from tritongen.runtimes import runtime_of
        from tritongen.runtimes.pins import datacenter_gpus

        inventory = plan.placement.inventory
        driver = runtime_of(plan).driver_problem(inventory.get("driver"),
                                                 datacenter_gpus(g["name"] for g in inventory.get("gpus", ())))
        if driver is not None:
            notes.append(f"note: --inventory: {driver[1]}")
    return notes
