"""LoRA adapters on the TensorRT engine path, without TensorRT-LLM: the plan's LoRA plugin (part of the engine
cache key), the trtllm-build flags, the adapters converted to NVIDIA's lora_weights / lora_config layout (checked
against PEFT's own delta weights), the prefetch folder and the tensorrt_llm model's LoRA cache parameters."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from tritongen.cli import main
from tritongen.errors import SpecError
from tritongen.plan import plan_from_file
from tritongen.runtimes.tensorrtllm import tensorrt_llm_parameters
from tritongen.runtimes.tensorrtllm.lora import CONFIG, WEIGHTS, convert_adapter, write_prefetch

ROOT = Path(__file__).resolve().parents[2]
ALL = ["attn_q", "attn_k", "attn_v", "attn_dense", "mlp_h_to_4h", "mlp_4h_to_h", "mlp_gate"]


@pytest.fixture(scope="module")
def lora_model(tmp_path_factory):
    from tritongen.demo.adapters import make_demo_adapters
    from tritongen.demo.model import make_demo_model

    model = make_demo_model(tmp_path_factory.mktemp("engine-lora") / "tiny-llama")
    return model, make_demo_adapters(model, 3)


def _spec(tmp_path: Path, model: Path, adapters: list[Path]) -> Path:
    data = yaml.safe_load((ROOT / "examples" / "llama3-8b-trtllm.yaml").read_text())
    data["model"].update(checkpoint=str(model), adapters=[{"name": f"a{i}", "path": str(p)}
                                                          for i, p in enumerate(adapters, 1)])
    data["engine"]["cache_dir"] = str(tmp_path / "cache")
    path = tmp_path / f"spec-{len(adapters)}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_the_plan_builds_the_lora_plugin_and_keys_the_engine_by_it(lora_model, tmp_path, capsys):
    model, paths = lora_model
    _, plain = plan_from_file(_spec(tmp_path, model, []))
    _, plan = plan_from_file(_spec(tmp_path, model, paths))
    trt = plan.runtime_settings
    assert plain.runtime_settings.build.lora is None and plain.runtime_settings.lora is None
    assert list(trt.build.lora.target_modules) == ALL and trt.build.lora.max_rank == 8
    assert trt.engine_key != plain.runtime_settings.engine_key
    assert Path(trt.lora.prefetch_dir).parent == tmp_path / "cache" / "lora"
    assert main(["build", str(_spec(tmp_path, model, paths)), "--dry-run"]) == 0
    out = capsys.readouterr().out
    dtype = trt.build.dtype
    assert f"--lora_plugin {dtype} --lora_target_modules {' '.join(ALL)} --max_lora_rank 8" in out
    params = tensorrt_llm_parameters(plan, plan.paths.engine, "0", None)
    # Pages sized for the smallest rank (4), the engine's max rank (8); no placement: the backend's GPU share.
    assert {k: params[k] for k in ("lora_cache_optimal_adapter_size", "lora_cache_max_adapter_size",
                                   "lora_cache_gpu_memory_fraction", "lora_prefetch_dir")} == {
        "lora_cache_optimal_adapter_size": "4", "lora_cache_max_adapter_size": "8",
        "lora_cache_gpu_memory_fraction": "0.05", "lora_prefetch_dir": trt.lora.prefetch_dir}
    assert int(params["lora_cache_host_memory_bytes"]) == trt.lora.cache.host_memory_bytes
    plain_params = tensorrt_llm_parameters(plain, plain.paths.engine, "0", None)
    assert (plain_params["lora_prefetch_dir"], plain_params["lora_cache_max_adapter_size"]) == ("", "64")


def test_converted_rows_hold_pefts_delta_weights(lora_model):
    """Each row: lora_A [r, in] then lora_B [out, r] x alpha / r, flattened and zero-padded; its config row names
    the module and layer. B @ A rebuilt from the row equals PEFT's delta weight of that module."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model, paths = lora_model
    weights, config = convert_adapter(paths[1])  # every linear module, rank 8
    assert weights.dtype == np.float16 and config.dtype == np.int32
    assert weights.shape[:2] == config.shape[:2] and weights.shape[0] == config.shape[0] == 1
    layers = 2
    assert config.shape[1] == layers * len(ALL)
    assert [tuple(r) for r in config[0][:7]] == [(i, 0, 8) for i in (1, 2, 3, 4, 5, 6, 7)]
    peft = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(str(model)), str(paths[1]))
    names = {5: "mlp.gate_proj", 6: "mlp.down_proj", 7: "mlp.up_proj", 1: "self_attn.q_proj",
             2: "self_attn.k_proj", 3: "self_attn.v_proj", 4: "self_attn.o_proj"}
    for row, (module_id, layer, rank) in zip(weights[0].astype(np.float32), config[0]):
        module = peft.base_model.model.model.layers[layer].get_submodule(names[module_id])
        out_features, in_features = module.base_layer.weight.shape
        a = row[:rank * in_features].reshape(rank, in_features)
        b = row[rank * in_features:rank * (in_features + out_features)].reshape(out_features, rank)
        assert not row[rank * (in_features + out_features):].any()  # padding
        expected = module.get_delta_weight("default").detach().numpy()
        np.testing.assert_allclose(b @ a, expected, rtol=2e-2, atol=2e-2)


def test_the_prefetch_folder_has_a_folder_per_task_id(lora_model, tmp_path):
    from tritongen.core import AdapterPlan

    _, paths = lora_model
    adapters = [AdapterPlan(name=f"a{k}", task_id=k, path=str(p), rank=4, alpha=8.0, target_modules=("q_proj",))
                for k, p in enumerate(paths, 1)]
    target = tmp_path / "lora" / "key"
    assert write_prefetch(adapters, target) is True
    assert sorted(p.name for p in target.iterdir()) == ["1", "2", "3"]
    assert all((target / str(k) / name).is_file() for k in (1, 2, 3) for name in (WEIGHTS, CONFIG))
    assert np.load(target / "3" / CONFIG)[0, 0].tolist() == [5, 0, 4]  # adapter 3: MLP only, gate_proj first
    assert write_prefetch(adapters, target) is False  # content-addressed: kept


def test_a_module_without_a_tensorrt_llm_lora_slot_is_refused(lora_model, tmp_path):
    model, paths = lora_model
    odd = tmp_path / "regex"
    shutil.copytree(paths[0], odd)
    config = json.loads((odd / "adapter_config.json").read_text())
    (odd / "adapter_config.json").write_text(json.dumps({**config, "target_modules": ".*q_proj"}))
    with pytest.raises(SpecError) as err:
        plan_from_file(_spec(tmp_path, model, [odd]))
    assert err.value.problems == [
        "model.adapters.0.path: target module '.*q_proj' has no TensorRT-LLM LoRA module (the engine path maps "
        "q_proj, k_proj, v_proj, o_proj, gate_proj, down_proj, up_proj); serve it with runtime hf or vllm, or use an "
        "adapter of those modules"]
