"""The tensorrtllm runtime through the CLI: build dry-run and cache key, rendered config, engine checks,
runtime switch, and placement-driven planning."""

from __future__ import annotations

import re

import shutil
from pathlib import Path

import pytest
import yaml

from specs import apply_overrides
from tritongen.cli import main
from tritongen.runtimes.tensorrtllm import tensorrt_llm_parameters
from tritongen.verify import parse_config

ROOT = Path(__file__).resolve().parents[2]
ENGINES = Path(__file__).parents[1] / "fixtures" / "engines"
INVENTORIES = Path(__file__).parents[1] / "fixtures" / "inventories"


def _spec(tmp_path: Path, tiny_model: Path, **overrides) -> Path:
    """examples/llama3-8b-trtllm.yaml, with the 8B config.json beside the tiny tokenizer, edited by overrides."""
    ckpt = tmp_path / "ckpt"
    if not ckpt.exists():
        shutil.copytree(ROOT / "examples" / "checkpoints" / "llama-3.1-8b", ckpt)
        for f in tiny_model.glob("tokenizer*"):
            shutil.copy(f, ckpt / f.name)
    data = yaml.safe_load((ROOT / "examples" / "llama3-8b-trtllm.yaml").read_text())
    data["model"]["checkpoint"] = str(ckpt)
    apply_overrides(data, overrides)
    path = tmp_path / f"spec-{len(list(tmp_path.glob('spec-*')))}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _key(capsys, spec: Path) -> str:
    assert main(["build", str(spec), "--dry-run", "--gpu-arch", "sm90"]) == 0
    out = capsys.readouterr().out
    assert "trtllm-build --checkpoint_dir" in out
    return next(line.split()[-1] for line in out.splitlines() if line.startswith("cache key:"))


def test_example_build_dry_run_prints_commands_and_key(capsys):
    assert main(["build", str(ROOT / "examples" / "llama3-8b-trtllm.yaml"), "--dry-run", "--gpu-arch", "sm90"]) == 0
    out = capsys.readouterr().out
    assert "convert_checkpoint.py" in out and "--max_batch_size 64" in out and "cache key: " in out


def test_spec_gpu_arch_keys_the_cache_without_a_gpu(tmp_path, tiny_model, capsys):
    # The shipped example names its architecture: plan works off the GPU machine (no NVML here).
    assert main(["plan", str(ROOT / "examples" / "llama3-8b-trtllm.yaml"), "--json"]) == 0
    import json

    planned = json.loads(capsys.readouterr().out)
    assert planned["runtime_settings"]["gpu_arch"] == "sm90"
    # The flag wins over the spec, and the architecture is part of the key.
    spec = _spec(tmp_path, tiny_model)
    assert main(["build", str(spec), "--dry-run"]) == 0
    spec_key = next(line.split()[-1] for line in capsys.readouterr().out.splitlines() if line.startswith("cache key:"))
    assert spec_key == _key(capsys, spec)  # --gpu-arch sm90 == the spec's sm90
    assert main(["build", str(spec), "--dry-run", "--gpu-arch", "sm80"]) == 0
    assert next(line.split()[-1] for line in capsys.readouterr().out.splitlines()
                if line.startswith("cache key:")) != spec_key
    # Not an architecture: one line naming the field.
    bad = _spec(tmp_path, tiny_model, **{"engine.gpu_arch": "hopper"})
    assert main(["plan", str(bad)]) == 2
    assert "engine.gpu_arch" in capsys.readouterr().err


def test_cache_key_ignores_serving_fields_and_follows_build_fields(tmp_path, tiny_model, capsys):
    base = _key(capsys, _spec(tmp_path, tiny_model))
    assert _key(capsys, _spec(tmp_path, tiny_model, **{"serving.preprocessing_instances": 8})) == base
    assert _key(capsys, _spec(tmp_path, tiny_model, **{"validation.load.users": 3})) == base
    assert _key(capsys, _spec(tmp_path, tiny_model, **{"engine.max_seq_len": 16384})) != base
    assert _key(capsys, _spec(tmp_path, tiny_model, **{"engine.quantization": "fp8"})) != base


def test_build_refuses_a_plan_that_serves_a_given_engine(tmp_path, tiny_model, capsys):
    spec = _spec(tmp_path, tiny_model, **{"engine.engine_dir": str(ENGINES / "llama3-8b-bf16-tp1"),
                                          "engine.max_input_len": 2048, "engine.max_seq_len": 4096})
    assert main(["build", str(spec), "--dry-run", "--gpu-arch", "sm90"]) == 2
    assert capsys.readouterr().err == (f"error: engine.engine_dir: the plan serves the given engine "
                                       f"{ENGINES / 'llama3-8b-bf16-tp1'}, so there is nothing to build; unset "
                                       "engine.engine_dir (and --engine-dir) to build into the engine cache\n")


def test_rendered_tensorrt_llm_config_carries_every_parameter(tmp_path, tiny_model):
    engine = ENGINES / "llama3-8b-bf16-tp1"
    spec = _spec(tmp_path, tiny_model, **{"engine.engine_dir": str(engine), "engine.max_input_len": 2048,
                                          "engine.max_seq_len": 4096})
    out = tmp_path / "repo"
    assert main(["render", str(spec), "-o", str(out)]) == 0
    config = parse_config(out / "tensorrt_llm" / "config.pbtxt")
    assert config.backend == "tensorrtllm"
    from tritonclient.grpc import model_config_pb2

    kind = model_config_pb2.ModelInstanceGroup.Kind.Name
    assert [(g.count, kind(g.kind)) for g in config.instance_group] == [(1, "KIND_CPU")]
    from tritongen.plan import plan_from_file

    expected = tensorrt_llm_parameters(plan_from_file(spec)[1], engine, "0", None)
    assert set(config.parameters) == set(expected)
    assert config.parameters["gpt_model_path"].string_value == str(engine)
    assert config.parameters["gpt_model_type"].string_value == "inflight_fused_batching"
    assert config.parameters["gpu_device_ids"].string_value == "0"
    assert main(["verify", str(out)]) == 0


@pytest.mark.parametrize("fixture, fields", [
    ("llama3-8b-bf16-tp1", ("engine.max_input_len (4096)", "build_config.max_input_len (2048)")),
    ("bad-no-paged-context-fmha", ("enable_chunked_context", "use_paged_context_fmha")),
    ("bad-tp2", ("engine.tp_size", "mapping tp_size")),
    ("bad-padded-input", ("engine.batching_strategy", "remove_input_padding")),
    ("bad-short-context", ("max_seq_len", "max_seq_len")),
])
def test_inconsistent_engines_fail_render_with_both_fields(tmp_path, tiny_model, capsys, fixture, fields):
    spec = _spec(tmp_path, tiny_model, **{"engine.engine_dir": str(ENGINES / fixture)})
    out = tmp_path / "repo"
    assert main(["render", str(spec), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    for field in fields:
        assert field in err, (fixture, field, err)
    assert not out.exists()


def test_runtime_switch_changes_only_the_llm_model(tmp_path, tiny_spec_path):
    data = yaml.safe_load(tiny_spec_path.read_text())
    (tmp_path / "hf.yaml").write_text(yaml.safe_dump(data))
    data.update(runtime="tensorrtllm", placement={"device": "gpu", "gpu_ids": [0]})
    data["engine"] = {"engine_dir": str(tmp_path / "engine-not-built-yet"), "max_input_len": 64, "max_seq_len": 128}
    (tmp_path / "trt.yaml").write_text(yaml.safe_dump(data))
    assert main(["render", str(tmp_path / "hf.yaml"), "-o", str(tmp_path / "a")]) == 0
    assert main(["render", str(tmp_path / "trt.yaml"), "-o", str(tmp_path / "b")]) == 0

    def files(root: Path) -> dict[str, bytes]:
        # The text models' input byte cap follows the LLM's input limit (the engine's max_input_len vs the hf
        # runtime's KV budget), so that one parameter value may differ outside tensorrt_llm/.
        cap = re.compile(rb'(key: "max_input_tokens"\s*value: \{ string_value: )"[0-9]*"')
        return {str(p.relative_to(root)): cap.sub(rb'\1"N"', p.read_bytes()) for p in root.rglob("*") if p.is_file()}

    a, b = files(tmp_path / "a"), files(tmp_path / "b")
    differing = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    # The render manifest names the runtime and the LLM's backend, and the frontend's route what the runtime does
    # with a guide (plan.structured_output), so those differ too.
    assert differing and all(k.startswith("tensorrt_llm/") or k in ("tritongen-repository.json", "frontend.json")
                             for k in differing)


def test_plan_with_inventory_places_8b_on_fitting_mig_slices(tmp_path, tiny_model, capsys):
    spec = _spec(tmp_path, tiny_model, **{"engine.engine_dir": str(ENGINES / "llama3-8b-bf16-tp1"),
                                          "placement.gpu_ids": [], "engine.max_seq_len": 4096,
                                          "engine.max_input_len": 2048, "validation.load.input_tokens.mean": 512})
    assert main(["plan", str(spec), "--inventory", str(INVENTORIES / "h200-all-balanced.yaml")]) == 0
    out = capsys.readouterr().out
    assert "3g.71gb" in out and "2g.35gb" in out and "1g.18gb" in out
    out_dir = tmp_path / "repo"
    assert main(["render", str(spec), "-o", str(out_dir), "--inventory",
                 str(INVENTORIES / "h200-all-balanced.yaml")]) == 0
    params = parse_config(out_dir / "tensorrt_llm" / "config.pbtxt").parameters
    assert int(params["max_tokens_in_paged_kv_cache"].string_value) > 0


def test_plan_json_for_hf_on_gpu_uses_kind_gpu(tmp_path, tiny_spec_path, capsys):
    import json

    data = yaml.safe_load(tiny_spec_path.read_text())
    data["placement"] = {"device": "gpu"}
    data["serving"]["kv_cache"].pop("max_tokens")
    spec = tmp_path / "gpu.yaml"
    spec.write_text(yaml.safe_dump(data))
    assert main(["plan", str(spec), "--json", "--inventory", str(INVENTORIES / "h200-7x1g.yaml")]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["llm_instance_group"] == {"kind": "KIND_GPU", "count": 1, "gpus": [0]}
    assert len(plan["server_groups"]) == len(plan["placement"]["result"]["server_groups"]) == 7
    from tritongen.plan import Plan
    from tritongen.runtimes.hf import hf_parameters

    blocks = hf_parameters(Plan.model_validate(plan), "/ckpt", None)["kv_cache_num_blocks"]
    assert int(blocks) == -(-plan["kv_tokens"] // 32) and plan["kv_tokens"] > 0
