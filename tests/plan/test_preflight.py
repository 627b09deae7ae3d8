"""What `validate` and `plan` check about the machine and the files before anything is served: a GPU placement
needs a GPU here (or an inventory saying where it runs), and the tokenizer must give text back."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from tritongen.cli import main

INVENTORY = str(Path(__file__).parents[1] / "fixtures" / "inventories" / "h200-1x.yaml")


def _spec(tmp_path: Path, tiny_spec_path: Path, **changes) -> Path:
    data = yaml.safe_load(tiny_spec_path.read_text())
    data.update(changes)
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_gpu_placement_on_a_machine_without_one_is_refused_unless_an_inventory_says_where(
        tmp_path, tiny_spec_path, capsys, monkeypatch):
    monkeypatch.setattr("tritongen.placement.inventory.no_local_gpu", lambda: "NVML reports no GPU")
    spec = _spec(tmp_path, tiny_spec_path, placement={"device": "gpu"})
    for command in ("validate", "plan"):
        assert main([command, str(spec)]) == 2
        assert capsys.readouterr().err == (
            "error: placement.device: gpu, but this machine has no GPU to run it on (NVML reports no GPU); pass "
            "--inventory with the GPUs it will run on (an inventory file or saved `nvidia-smi -L` from that node), "
            "or set placement.device: cpu to run it here\n")
        assert main([command, str(spec), "--inventory", INVENTORY]) == 0
        capsys.readouterr()
    assert main(["validate", str(tiny_spec_path)]) == 0  # the CPU spec runs here
    capsys.readouterr()
    monkeypatch.setattr("tritongen.placement.inventory.no_local_gpu", lambda: None)  # a machine with a GPU
    assert main(["plan", str(spec), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["llm_instance_group"]["kind"] == "KIND_GPU"


def test_this_machines_gpu_check_reads_nvml():
    from tritongen.placement.inventory import no_local_gpu

    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
        pynvml.nvmlShutdown()
    except pynvml.NVMLError:
        count = 0
    assert (no_local_gpu() is None) == (count > 0)


def test_a_tokenizer_that_does_not_give_text_back_is_refused_naming_its_folder(tmp_path, tiny_spec_path,
                                                                             tiny_model, capsys):
    # A tokenizer.json without its decoder (saved from half of another model): encoding works, decoding gives
    # byte-level pieces, which the deployment would stream as its answer.
    checkpoint = tmp_path / "ckpt"
    shutil.copytree(tiny_model, checkpoint)
    data = json.loads((checkpoint / "tokenizer.json").read_text())
    data["decoder"] = None
    (checkpoint / "tokenizer.json").write_text(json.dumps(data))
    base = yaml.safe_load(tiny_spec_path.read_text())
    spec = _spec(tmp_path, tiny_spec_path, model={**base["model"], "checkpoint": str(checkpoint)})
    for command in ("validate", "plan"):
        assert main([command, str(spec)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: model.checkpoint: the tokenizer loaded from {checkpoint} does not give text "
                              "back: 'Hello, world! 42 apples - naïve café, Grüße.' decodes to 'H el lo , Ġw or"), err
        assert err.endswith("; point it at the model's own tokenizer files (tokenizer.json with its "
                            "tokenizer_config.json, saved from the same model)\n"), err
