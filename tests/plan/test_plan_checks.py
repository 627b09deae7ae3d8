"""Checks at plan time, with the field named; every shipped example through plan/render/deploy on every recorded
inventory ends as pinned in EXPECTED (0, or exit 2 naming the field), never a traceback."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from specs import apply_overrides
from tritongen.cli import main

ROOT = Path(__file__).resolve().parents[2]
INVENTORIES = sorted((Path(__file__).parents[1] / "fixtures" / "inventories").iterdir())
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
EIGHT_B = ROOT / "examples" / "checkpoints" / "llama-3.1-8b"
# `error: <dotted spec field or --flag>: ...`
FIELD_NAMED = re.compile(r"^error: (--[a-z-]+|[a-z_]+(\.[a-z_0-9]+)*|\S+\.(yaml|json)(: line \d+)?): \S")
CPU_EXAMPLES = {"synthetic-cpu.yaml", "tiny-cpu.yaml"}


def expected(example: str, inventory: str | None, deploy: bool = False) -> str | None:
    """The field a case's exit 2 names, or None for exit 0. The CPU examples are refused any GPU inventory (plan
    names placement.device, deploy its --inventory flag); an 8B model fits no 1g.18gb slice (h200-7x1g);
    everything else plans, renders and deploys."""
    if inventory is None:
        return None
    if example in CPU_EXAMPLES:
        return "--inventory" if deploy else "placement.device"
    return "placement" if inventory == "h200-7x1g.yaml" else None


def _as_expected(code: int, err: str, field: str | None) -> None:
    assert "Traceback" not in err
    if field is None:
        assert code == 0, err
        return
    assert code == 2, err
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert errors and all(FIELD_NAMED.match(line) for line in errors), err
    assert errors[0].startswith(f"error: {field}: "), err


def _with_checkpoint(example: Path, tiny_model: Path, tmp_path: Path) -> Path:
    """The example as shipped, except that the tiny examples' ../build/tiny-llama is the session's tiny model, so
    every case plans on a fresh checkout too (the 8B examples carry their config.json in the checkout)."""
    data = yaml.safe_load(example.read_text())
    if data["model"]["checkpoint"] != "../build/tiny-llama":
        return example
    data["model"]["checkpoint"] = str(tiny_model)
    path = tmp_path / "examples" / example.name
    path.parent.mkdir(exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
@pytest.mark.parametrize("inventory", [None, *INVENTORIES], ids=lambda p: p.name if p else "no-inventory")
def test_every_example_plans_renders_and_deploys_or_names_the_field(example, inventory, tmp_path, capsys,
                                                                   tiny_model, gpu_here):
    field = expected(example.name, inventory.name if inventory else None)
    deployed = expected(example.name, inventory.name if inventory else None, deploy=True)
    inv = ["--inventory", str(inventory)] if inventory else []
    example = _with_checkpoint(example, tiny_model, tmp_path)
    for argv in (["plan", str(example), *inv], ["plan", str(example), "--json", *inv],
                 ["render", str(example), "-o", str(tmp_path / "repo"), *inv]):
        _as_expected(main(argv), capsys.readouterr().err, field)
    if inventory:
        for target in ("compose", "k8s"):
            code = main(["deploy", str(example), "--target", target, "-o", str(tmp_path / target), *inv])
            _as_expected(code, capsys.readouterr().err, deployed)


def test_the_shipped_gpu_example_plans_renders_and_deploys_as_shipped(tmp_path, capsys):
    example = str(ROOT / "examples" / "llama3-8b-trtllm.yaml")
    balanced = str(Path(__file__).parents[1] / "fixtures" / "inventories" / "h200-all-balanced.yaml")
    assert main(["plan", example, "--inventory", balanced]) == 0
    assert "note: model.tokenizer: no tokenizer files in " in capsys.readouterr().err
    assert main(["render", example, "-o", str(tmp_path / "repo"), "--inventory", balanced]) == 0
    assert main(["deploy", example, "--target", "k8s", "-o", str(tmp_path / "k8s"), "--inventory", balanced]) == 0
    assert main(["verify", str(tmp_path / "repo")]) == 0


def _eight_b(tmp_path: Path, **overrides) -> Path:
    """examples/llama3-8b-trtllm.yaml with the 8B config.json (no tokenizer) and `overrides` (dotted keys)."""
    ckpt = tmp_path / "ckpt"
    if not ckpt.exists():
        shutil.copytree(EIGHT_B, ckpt)
    data = yaml.safe_load((ROOT / "examples" / "llama3-8b-trtllm.yaml").read_text())
    data["model"]["checkpoint"] = str(ckpt)
    apply_overrides(data, overrides)
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(data))
    return spec


def _plan_error(capsys, spec: Path, *flags: str) -> str:
    assert main(["plan", str(spec), *flags]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


def test_tp_size_that_does_not_divide_the_heads(tmp_path, capsys):
    err = _plan_error(capsys, _eight_b(tmp_path, **{"engine.tp_size": 3, "placement.gpu_ids": [0, 1, 2]}))
    assert err == ("error: engine.tp_size: 3 does not divide the model's 32 attention heads; use a tp_size that "
                   "divides 32 (e.g. 1, 2, 4, 8, 16)\n")


def test_pp_size_that_does_not_divide_the_layers(tmp_path, capsys):
    err = _plan_error(capsys, _eight_b(tmp_path, **{"engine.pp_size": 5, "placement.gpu_ids": [0, 1, 2, 3, 4]}))
    assert err.startswith("error: engine.pp_size: 5 does not divide the model's 32 layers;")


def test_an_architecture_without_a_converter_is_refused_at_plan(tmp_path, capsys):
    spec = _eight_b(tmp_path)
    config = json.loads((tmp_path / "ckpt" / "config.json").read_text())
    config["architectures"] = ["Qwen2ForCausalLM"]
    (tmp_path / "ckpt" / "config.json").write_text(json.dumps(config))
    err = _plan_error(capsys, spec, "--gpu-arch", "sm90")
    assert err.startswith("error: model.checkpoint: architecture Qwen2ForCausalLM has no convert_checkpoint.py")


@pytest.mark.parametrize("field", ["engine.quantization", "engine.kv_cache_dtype"])
def test_fp8_on_a100_is_refused_when_the_inventory_is_known(tmp_path, capsys, field):
    spec = _eight_b(tmp_path, **{field: "fp8"})
    a100 = str(Path(__file__).parents[1] / "fixtures" / "inventories" / "a100-80gb-x8.yaml")
    err = _plan_error(capsys, spec, "--inventory", a100)
    assert err.startswith(f"error: {field}: fp8 needs FP8 tensor cores (Ada, Hopper or newer), which GPU 0 (")
    h200 = str(Path(__file__).parents[1] / "fixtures" / "inventories" / "h200-all-balanced.yaml")
    assert main(["plan", str(spec), "--inventory", h200]) == 0


def test_hf_runtime_without_tokenizer_lists_the_missing_files(tmp_path, capsys, tiny_model, tiny_spec_path):
    ckpt = tmp_path / "ckpt"
    shutil.copytree(tiny_model, ckpt)
    for f in ckpt.glob("tokenizer*"):
        f.unlink()
    data = yaml.safe_load(tiny_spec_path.read_text())
    data["model"]["checkpoint"] = str(ckpt)
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(data))
    err = _plan_error(capsys, spec)
    assert err == (f"error: model.checkpoint: no tokenizer files in {ckpt} (none of tokenizer.json, tokenizer.model, "
                   "vocab.json + merges.txt, vocab.txt; tokenizer_config.json is missing too); point "
                   "model.tokenizer at the model's tokenizer files\n")


def test_loadtest_without_tokenizer_files_exits_3(tmp_path, capsys):
    spec = _eight_b(tmp_path)
    assert main(["plan", str(spec), "--json", "--gpu-arch", "sm90"]) == 0
    lock = tmp_path / "plan.json"
    lock.write_text(capsys.readouterr().out)
    assert main(["loadtest", str(lock), "--url", "127.0.0.1:9", "-t", "1"]) == 3
    err = capsys.readouterr().err
    assert err.startswith(f"error: model.tokenizer: no tokenizer files in {tmp_path / 'ckpt'} (")


def test_validate_runs_the_plan_checks_without_a_gpu(tmp_path, capsys):
    # What `plan` refuses, `validate` refuses too (tp 3, a Qwen2 engine, fp8 on an A100); the engine's GPU
    # architecture is not needed to validate.
    def validate_error(spec: Path, *flags: str) -> str:
        assert main(["validate", str(spec), *flags]) == 2
        return capsys.readouterr().err

    assert validate_error(_eight_b(tmp_path / "a", **{"engine.tp_size": 3, "placement.gpu_ids": [0, 1, 2]})) \
        .startswith("error: engine.tp_size: 3 does not divide the model's 32 attention heads;")
    a100 = str(Path(__file__).parents[1] / "fixtures" / "inventories" / "a100-80gb-x8.yaml")
    assert validate_error(_eight_b(tmp_path / "b", **{"engine.quantization": "fp8"}), "--inventory", a100) \
        .startswith("error: engine.quantization: fp8 needs FP8 tensor cores")
    spec = _eight_b(tmp_path / "c", **{"engine.gpu_arch": None})
    config = json.loads((tmp_path / "c" / "ckpt" / "config.json").read_text())
    config["architectures"] = ["Qwen2ForCausalLM"]
    (tmp_path / "c" / "ckpt" / "config.json").write_text(json.dumps(config))
    assert validate_error(spec).startswith("error: model.checkpoint: architecture Qwen2ForCausalLM has no")
    missing = _eight_b(tmp_path / "d", **{"model.checkpoint": str(tmp_path / "nowhere")})
    assert validate_error(missing).startswith("error: model.checkpoint: folder ")
    assert main(["validate", str(_eight_b(tmp_path / "e"))]) == 0
    assert capsys.readouterr().out.startswith("ok: ")


def _inventory_with_driver(tmp_path: Path, driver: str | None) -> str:
    path = tmp_path / f"h200-{driver}.yaml"
    data = {"gpus": [{"name": "NVIDIA H200"}], **({"driver": driver} if driver else {})}
    path.write_text(yaml.safe_dump(data))
    return str(path)


# Each release's notes state no minimum driver, so the rule is the driver bundled with the container's CUDA, or on
# data-center GPUs (the inventory's H200) NVIDIA's R580 branch through compatibility (tests/runtimes/test_pins.py).
@pytest.mark.parametrize("example, old, enough, image, need", [
    ("llama3-8b-vllm.yaml", "575.57.08", "590.48.01", "tritonserver:26.01-vllm-python-py3", "590.48.01"),
    ("llama3-8b-llmapi.yaml", "575.57.08", "590.44.01", "tritonserver:26.07-trtllm-python-py3", "590.44.01"),
    ("llama3-8b-trtllm.yaml", "575.57.08", "595.58.03", "tritonserver:26.07-trtllm-python-py3", "590.44.01"),
], ids=["vllm", "trtllm", "tensorrtllm"])
def test_a_driver_below_nvidias_rule_is_refused_at_plan(tmp_path, capsys, example, old, enough, image, need):
    spec = str(ROOT / "examples" / example)
    err = _plan_error(capsys, spec, "--inventory", _inventory_with_driver(tmp_path, old))
    assert err.startswith(f"error: --inventory: NVIDIA driver {old} cannot run ")
    assert f"{image} (" in err and f": below the {need} bundled with CUDA " in err
    assert f"R{old.split('.')[0]} is not such a branch" in err
    assert main(["plan", spec, "--inventory", _inventory_with_driver(tmp_path, enough)]) == 0
    assert "driver" not in capsys.readouterr().err
    # R580 on the data-center H200: planned, with a note naming the compatibility rule.
    assert main(["plan", spec, "--inventory", _inventory_with_driver(tmp_path, "580.95.05")]) == 0
    note = [line for line in capsys.readouterr().err.splitlines() if "driver" in line]
    assert len(note) == 1 and note[0].startswith("note: --inventory: NVIDIA driver 580.95.05 runs ")
    assert "under data-center compatibility (data-center GPUs): NVIDIA lists R580" in note[0]
    # No driver in the inventory: planned, with a note that names the image and the driver it needs.
    assert main(["plan", spec, "--inventory", _inventory_with_driver(tmp_path, None)]) == 0
    note = [line for line in capsys.readouterr().err.splitlines() if "driver" in line]
    assert len(note) == 1 and note[0].startswith("note: --inventory: the inventory does not say the NVIDIA driver")
    assert image in note[0] and f"the bundled driver is {need}" in note[0]


def test_driver_versions_compare_as_numbers_and_the_hf_image_has_no_recorded_need():
    from tritongen.runtimes import RUNTIMES

    assert RUNTIMES["hf"].upstream.pin is None and RUNTIMES["hf"].driver_problem("450.80.02") is None
    # 590.9.99 sorts above 590.48.01 as text and below it as numbers (26.01's bundled driver).
    assert RUNTIMES["vllm"].driver_problem("590.9.99", False)[0] and RUNTIMES["vllm"].driver_problem("9.0")[0]
    assert RUNTIMES["vllm"].driver_problem("590.48.01") is None
    assert RUNTIMES["vllm"].driver_problem("1000.1") is None  # compared as numbers, not as text
