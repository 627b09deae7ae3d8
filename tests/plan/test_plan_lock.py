"""The Plan is the only input after planning: `plan --json` is a lock file that render, deploy and loadtest take
with the spec and the checkpoint gone; placement runs once, and each server group gets its own KV budget."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tritongen.cli import main
from tritongen.placement import DeviceFit, Placement, ServerGroup
from tritongen.placement.inventory import Inventory
from tritongen.placement.memory import MemoryModel, ModelShape
from tritongen.plan import plan_from_json
from tritongen.verify import parse_config

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).parents[1] / "fixtures"
INVENTORIES = FIXTURES / "inventories"
BALANCED = str(INVENTORIES / "h200-all-balanced.yaml")


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _lock(capsys, spec: Path, *flags: str) -> Path:
    assert main(["plan", str(spec), "--json", *flags]) == 0
    lock = spec.with_suffix(".plan.json")
    lock.write_text(capsys.readouterr().out)
    return lock


@pytest.fixture
def hf_workdir(tmp_path, tiny_model, tiny_spec_path) -> Path:
    """The tiny spec with its own checkpoint copy and a separate tokenizer folder (the load generator keeps it)."""
    shutil.copytree(tiny_model, tmp_path / "ckpt")
    tok = tmp_path / "tokenizer"
    tok.mkdir()
    for f in tiny_model.iterdir():
        if f.name.startswith(("tokenizer", "special_tokens")):
            shutil.copy(f, tok / f.name)
    data = yaml.safe_load(tiny_spec_path.read_text())
    data["model"].update(checkpoint="ckpt", tokenizer="tokenizer")
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(data))
    return tmp_path


def test_render_from_the_lock_file_without_spec_or_checkpoint(hf_workdir, capsys):
    spec = hf_workdir / "spec.yaml"
    lock = _lock(capsys, spec)
    assert main(["render", str(spec), "-o", str(hf_workdir / "from-spec")]) == 0
    spec.unlink()
    shutil.rmtree(hf_workdir / "ckpt")
    assert main(["render", str(lock), "-o", str(hf_workdir / "from-lock")]) == 0
    assert _files(hf_workdir / "from-lock") == _files(hf_workdir / "from-spec")


def test_a_lock_file_refuses_planning_flags(hf_workdir, capsys):
    lock = _lock(capsys, hf_workdir / "spec.yaml")
    assert main(["render", str(lock), "-o", str(hf_workdir / "x"), "--inventory", BALANCED]) == 2
    assert capsys.readouterr().err.startswith("error: --inventory: cannot change a finished plan")
    assert not (hf_workdir / "x").exists()


def test_a_broken_lock_file_names_the_field(hf_workdir, capsys):
    lock = _lock(capsys, hf_workdir / "spec.yaml")
    data = json.loads(lock.read_text())
    data["max_batch_size"] = "many"
    lock.write_text(json.dumps(data))
    assert main(["render", str(lock), "-o", str(hf_workdir / "x")]) == 2
    assert f"error: {lock}: max_batch_size: " in capsys.readouterr().err


def test_tilde_paths_resolve_the_same_for_every_command(hf_workdir, capsys, monkeypatch):
    monkeypatch.setenv("HOME", str(hf_workdir))
    data = yaml.safe_load((hf_workdir / "spec.yaml").read_text())
    data["model"].update(checkpoint="~/ckpt", tokenizer="~/tokenizer")
    spec = hf_workdir / "sub" / "spec.yaml"
    spec.parent.mkdir()
    spec.write_text(yaml.safe_dump(data))
    plan = json.loads(_lock(capsys, spec).read_text())
    assert plan["paths"]["checkpoint"] == str(hf_workdir / "ckpt")
    assert plan["tokenizer"]["dir"] == str(hf_workdir / "tokenizer")
    assert main(["render", str(spec), "-o", str(hf_workdir / "repo")]) == 0
    params = parse_config(hf_workdir / "repo" / "tensorrt_llm" / "config.pbtxt").parameters
    assert params["hf_model_path"].string_value == str(hf_workdir / "ckpt")


@pytest.fixture
def trt_mig_spec(tmp_path, tiny_model) -> Path:
    """The MIG deploy fixture spec: an 8B engine (fixture config.json) on the all-balanced H200 layout."""
    shutil.copytree(tiny_model, tmp_path / "checkpoint")
    data = yaml.safe_load((FIXTURES / "specs" / "llama3-8b-mig.yaml").read_text())
    data["engine"]["engine_dir"] = str(FIXTURES / "engines" / "llama3-8b-bf16-tp1")
    spec = tmp_path / "llama3-8b-mig.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    return spec


def test_deploy_from_the_lock_file_matches_deploy_from_the_spec(trt_mig_spec, capsys):
    work = trt_mig_spec.parent
    lock = _lock(capsys, trt_mig_spec, "--inventory", BALANCED)
    assert main(["deploy", str(trt_mig_spec), "--target", "compose", "-o", str(work / "a"),
                 "--inventory", BALANCED]) == 0
    trt_mig_spec.unlink()
    shutil.rmtree(work / "checkpoint")
    assert main(["deploy", str(lock), "--target", "k8s", "-o", str(work / "b")]) == 0
    assert main(["deploy", str(lock), "--target", "compose", "-o", str(work / "c")]) == 0
    assert _files(work / "c") == _files(work / "a")


def test_the_placement_reads_back_typed_and_writes_back_byte_for_byte(trt_mig_spec, capsys):
    lock = _lock(capsys, trt_mig_spec, "--inventory", BALANCED)
    plan = plan_from_json(lock)
    placement = plan.placement
    assert isinstance(placement.inventory, Inventory) and isinstance(placement.memory, MemoryModel)
    assert isinstance(placement.result, Placement)
    assert all(isinstance(g, ServerGroup) and isinstance(g.gpu_indices, tuple) for g in placement.result.server_groups)
    assert all(isinstance(d, DeviceFit) for d in placement.result.devices)
    assert isinstance(placement.memory.shape, ModelShape) and placement.inventory.gpus[0].mig_devices
    assert [g.name for g in placement.result.server_groups] == [g.name for g in plan.server_groups]
    # Each server group's environment is written for readers, and derived again (not stored) when read.
    written = json.loads(lock.read_text())["placement"]["result"]["server_groups"]
    assert [g["env"] for g in written] == [g.env for g in placement.result.server_groups]
    assert all(g["env"]["CUDA_VISIBLE_DEVICES"].startswith("MIG-") for g in written)
    assert plan.to_json() == lock.read_text()


def test_a_lock_file_with_a_broken_placement_names_the_field(trt_mig_spec, capsys):
    lock = _lock(capsys, trt_mig_spec, "--inventory", BALANCED)
    data = json.loads(lock.read_text())
    data["placement"]["inventory"]["gpus"][0]["memory_gib"] = 140
    lock.write_text(json.dumps(data))
    assert main(["deploy", str(lock), "--target", "compose", "-o", str(trt_mig_spec.parent / "x")]) == 2
    assert f"error: {lock}: placement.inventory.gpus.0.memory_gib: " in capsys.readouterr().err


def _kv(path: Path) -> int:
    return int(parse_config(path).parameters["max_tokens_in_paged_kv_cache"].string_value)


def test_each_server_group_gets_its_own_kv_budget_in_render_and_deploy(trt_mig_spec, capsys):
    work = trt_mig_spec.parent
    lock = json.loads(_lock(capsys, trt_mig_spec, "--inventory", BALANCED).read_text())
    budgets = {g["name"]: g["kv_tokens"] for g in lock["server_groups"]}
    assert len(budgets) == 2 and len(set(budgets.values())) == 2  # a 3g.71gb and a 2g.35gb slice
    assert lock["group_configs"] and lock["kv_tokens"] == min(budgets.values())
    assert main(["render", str(trt_mig_spec), "-o", str(work / "repo"), "--inventory", BALANCED]) == 0
    assert main(["deploy", str(trt_mig_spec), "--target", "compose", "-o", str(work / "dep"),
                 "--inventory", BALANCED]) == 0
    compose = yaml.safe_load((work / "dep" / "docker-compose.yaml").read_text())
    for name, tokens in budgets.items():
        assert _kv(work / "repo" / "tensorrt_llm" / "configs" / f"{name}.pbtxt") == tokens
        assert _kv(work / "dep" / "model_repository" / "tensorrt_llm" / "configs" / f"{name}.pbtxt") == tokens
        assert f"--model-config-name={name}" in compose["services"][f"triton-{name}"]["command"]
    assert _kv(work / "repo" / "tensorrt_llm" / "config.pbtxt") == min(budgets.values())
    assert main(["verify", str(work / "repo")]) == 0


def test_hf_on_mig_gets_the_kv_budget_the_plan_says_fits(hf_workdir, capsys):
    data = yaml.safe_load((hf_workdir / "spec.yaml").read_text())
    data["placement"] = {"device": "gpu"}
    data["serving"]["kv_cache"].pop("max_tokens")
    spec = hf_workdir / "gpu.yaml"
    spec.write_text(yaml.safe_dump(data))
    lock = json.loads(_lock(capsys, spec, "--inventory", str(INVENTORIES / "mixed-h200-node.yaml")).read_text())
    assert main(["deploy", str(spec), "--target", "k8s", "-o", str(hf_workdir / "dep"),
                 "--inventory", str(INVENTORIES / "mixed-h200-node.yaml")]) == 0
    repo = hf_workdir / "dep" / "model_repository" / "tensorrt_llm"
    block = data["serving"]["kv_cache"]["block_size"]
    for group in lock["server_groups"]:
        config = repo / "configs" / f"{group['name']}.pbtxt" if lock["group_configs"] else repo / "config.pbtxt"
        blocks = int(parse_config(config).parameters["kv_cache_num_blocks"].string_value)
        assert blocks == -(-group["kv_tokens"] // block)


@pytest.mark.integration
def test_loadtest_from_the_lock_file_without_spec_or_checkpoint(hf_workdir, triton, capsys):
    # A prompts file named relative to the spec's folder: the lock holds it absolute, and nothing resolves it again
    # (the lock's spec_dir points nowhere, and the load test runs from another folder).
    (hf_workdir / "prompts.jsonl").write_text('{"text_input": "Once upon a time", "max_tokens": 8}\n')
    spec = hf_workdir / "spec.yaml"
    data = yaml.safe_load(spec.read_text())
    data["validation"]["load"]["prompts_file"] = "prompts.jsonl"
    spec.write_text(yaml.safe_dump(data))
    lock = _lock(capsys, spec)
    lock.write_text(json.dumps({**json.loads(lock.read_text()), "spec_dir": str(hf_workdir / "gone")}))
    spec.unlink()
    shutil.rmtree(hf_workdir / "ckpt")
    out = hf_workdir / "report"
    proc = subprocess.run([sys.executable, "-m", "tritongen", "loadtest", str(lock), "--url", triton.grpc_url,
                           "--metrics-url", triton.metrics_url, "-u", "1", "-t", "3", "--warmup", "0", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=400)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    summary = json.loads((out / "loadtest.json").read_text())
    metrics = summary["levels"][0]["metrics"]
    assert metrics["error_count"] == 0 and metrics["request_count"] > 0
    assert summary["metadata"]["workload"]["prompts_file"] == str(hf_workdir / "prompts.jsonl")
