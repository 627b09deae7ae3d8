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


def require_gpu_here(device: str, inventory: str | None, gpu_arch: str | None = None) -> None:
    """`validate` and `plan` without --inventory plan for this machine: a GPU placement needs a GPU here, else the
    model fails only when Triton loads it ("invalid or unsupported gpu id 0"). An engine's stated GPU architecture
    (`engine.gpu_arch`, --gpu-arch) says, like an inventory, that it is planned for another machine."""
    if device != "gpu" or inventory is not None or gpu_arch is not None:
        return
    from tritongen.placement.inventory import no_local_gpu

    why = no_local_gpu()
    if why is not None:
        raise SpecError(problem("placement.device", f"gpu, but this machine has no GPU to run it on ({why})",
                                "pass --inventory with the GPUs it will run on (an inventory file or saved "
                                "`nvidia-smi -L` from that node), or set placement.device: cpu to run it here"))


# A fixed text every LLM tokenizer must give back unchanged: ASCII, and Latin letters beyond it.
ROUND_TRIP_TEXT = "Hello, world! 42 apples - naïve café, Grüße."


def require_round_trip(tok, folder: Path, field: str) -> None:
    """The tokenizer gives ROUND_TRIP_TEXT back from its own ids: one saved from another model (or half of one)
    decodes to byte pieces such as `<0xC3>` or `▁and`, which the deployment would stream as the answer."""
    ids = tok.encode(ROUND_TRIP_TEXT, add_special_tokens=False)
    back = tok.decode(ids, skip_special_tokens=True)
    if back.strip() != ROUND_TRIP_TEXT:
        raise SpecError(problem(field, f"the tokenizer loaded from {folder} does not give text back: "
                                f"{ROUND_TRIP_TEXT!r} decodes to {back[:80]!r}",
                                "point it at the model's own tokenizer files (tokenizer.json with its "
                                "tokenizer_config.json, saved from the same model)"))


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
        from tritongen.runtimes import launch
        from tritongen.runtimes.pins import datacenter_gpus

        inventory = plan.placement.inventory
        driver = launch(plan).driver_problem(inventory.driver, datacenter_gpus(g.name for g in inventory.gpus))
        if driver is not None:
            notes.append(f"note: --inventory: {driver[1]}")
    return notes
