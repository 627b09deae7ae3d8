"""Engine path fixes of the 1.2.1 re-pin: calibration data, GPU architecture, logits dtype, missing engines."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from specs import trtllm_build_settings, trtllm_section
from tritongen.cli import main
from tritongen.errors import EnvironmentMissing
from tritongen.runtimes.tensorrtllm import build as trtllm_build
from tritongen.runtimes.tensorrtllm.build import build_engine, cache_key, detect_gpu_arch
from tritongen.spec import parse_spec
from tritongen.verify import parse_config

ROOT = Path(__file__).resolve().parents[2]
ENGINES = Path(__file__).parents[1] / "fixtures" / "engines"


def make_spec(**engine):
    return parse_spec({"name": "llama3-8b", "runtime": "tensorrtllm", "model": {"checkpoint": "/models/llama3-8b"},
                       "placement": {"device": "gpu"}, "engine": engine})


@pytest.fixture
def checkpoint(tmp_path):
    ckpt = tmp_path / "hf"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "vocab_size": 128256}))
    (ckpt / "model.safetensors").write_bytes(b"\x08" * 1024)
    return ckpt


def test_calibrated_build_without_data_and_without_the_hub_exits_3(monkeypatch, tmp_path, checkpoint):
    monkeypatch.setattr(trtllm_build, "HUB", ("127.0.0.1", 9))  # nothing listens on the discard port
    with pytest.raises(EnvironmentMissing) as err:
        build_engine(trtllm_section(make_spec(quantization="fp8", cache_dir=str(tmp_path / "cache")), checkpoint),
                     checkpoint)
    assert err.value.exit_code == 3
    assert str(err.value).startswith("engine.calibration_dataset: quantization fp8 / kv_cache_dtype auto needs "
                                     "calibration data and none is given")
    assert str(err.value).endswith("; set engine.calibration_dataset to a local dataset folder "
                                   "(datasets save_to_disk / a folder of text)")
    assert not (tmp_path / "cache").exists()


def test_local_calibration_data_is_mounted_passed_and_keyed(tmp_path, checkpoint):
    data = tmp_path / "calib"
    data.mkdir()
    (data / "train.jsonl").write_text('{"text": "calibration text"}\n')
    cache = str(tmp_path / "cache")

    def dry_run(**engine):
        # Planned afresh each time: the plan's key follows the data as it is now.
        spec = make_spec(cache_dir=cache, **engine)
        return build_engine(trtllm_section(spec, checkpoint), checkpoint, dry_run=True)

    result = dry_run(quantization="fp8", calibration_dataset=str(data))
    assert result.commands[0][-2:] == ["--calib_dataset", "/tritongen/calibration"]
    hub_key = dry_run(quantization="fp8").key
    assert result.key != hub_key
    (data / "train.jsonl").write_text('{"text": "other calibration text"}\n')
    assert dry_run(quantization="fp8", calibration_dataset=str(data)).key != result.key
    # Unquantised builds need no data: the folder neither enters the key nor the commands.
    plain = dry_run(calibration_dataset=str(data))
    assert "--calib_dataset" not in plain.commands[0]
    assert plain.key == cache_key(trtllm_build_settings(make_spec()), trtllm_build.checkpoint_digest(checkpoint),
                                  "1.2.1", "sm90")


def test_gpu_architecture_without_nvml_is_environment_missing(monkeypatch):
    import pynvml

    def no_driver():
        raise pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    monkeypatch.setattr(pynvml, "nvmlInit", no_driver)
    with pytest.raises(EnvironmentMissing) as err:
        detect_gpu_arch()
    assert str(err.value).startswith("engine cache key: needs the GPU architecture and NVML cannot tell it here (")
    assert str(err.value).endswith("; run on the GPU machine, or pass --gpu-arch (e.g. sm90 for H100/H200), or set "
                                   "engine.engine_dir")


def test_gpu_architecture_comes_from_nvml_compute_capability(monkeypatch):
    import pynvml

    monkeypatch.setattr(pynvml, "nvmlInit", lambda: None)
    monkeypatch.setattr(pynvml, "nvmlShutdown", lambda: None)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetHandleByIndex", lambda i: f"gpu{i}")
    monkeypatch.setattr(pynvml, "nvmlDeviceGetCudaComputeCapability", lambda h: (9, 0) if h == "gpu0" else (8, 0))
    assert detect_gpu_arch() == "sm90" and detect_gpu_arch(1) == "sm80"


def _spec_file(tmp_path: Path, tiny_model: Path, engine_dir: Path) -> Path:
    ckpt = tmp_path / "ckpt"
    shutil.copytree(ROOT / "examples" / "checkpoints" / "llama-3.1-8b", ckpt)
    for f in tiny_model.glob("tokenizer*"):
        shutil.copy(f, ckpt / f.name)
    data = yaml.safe_load((ROOT / "examples" / "llama3-8b-trtllm.yaml").read_text())
    data["model"]["checkpoint"] = str(ckpt)
    data["engine"].update(engine_dir=str(engine_dir), max_input_len=2048, max_seq_len=4096)
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_logits_datatype_comes_from_the_engine(tmp_path, tiny_model):
    engine = tmp_path / "engine"
    engine.mkdir()
    config = json.loads((ENGINES / "llama3-8b-bf16-tp1" / "config.json").read_text())
    config["pretrained_config"]["logits_dtype"] = "float16"
    (engine / "config.json").write_text(json.dumps(config))
    out = tmp_path / "repo"
    assert main(["render", str(_spec_file(tmp_path, tiny_model, engine)), "-o", str(out)]) == 0
    outputs = {t.name: t.data_type for t in parse_config(out / "tensorrt_llm" / "config.pbtxt").output}
    from tritonclient.grpc import model_config_pb2

    assert outputs["generation_logits"] == outputs["context_logits"] == model_config_pb2.TYPE_FP16
    ensemble = {t.name: t.data_type for t in parse_config(out / "ensemble" / "config.pbtxt").output}
    assert ensemble["generation_logits"] == model_config_pb2.TYPE_FP16
    assert main(["verify", str(out)]) == 0


def test_missing_engine_at_render_time_is_said(tmp_path, tiny_model, capsys):
    missing = tmp_path / "not-built"
    out = tmp_path / "repo"
    assert main(["render", str(_spec_file(tmp_path, tiny_model, missing)), "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert f"engine.engine_dir: no built engine at {missing} yet, so the repository is not checked against one; " \
           "run `tritongen build` for this spec (or point engine.engine_dir at a built engine) before serving" in err
