"""TensorRT-LLM engine path: build argv, cache key, docker build, engine checks, backend parameters, launch argv."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import docker
import pytest
import yaml
from docker.types import DeviceRequest, Mount

from tritongen.cli import main
from tritongen.runtimes.tensorrtllm import build as trtllm_build
from tritongen.errors import CheckFailed, EnvironmentMissing, SpecError
from tritongen.runtimes.tensorrtllm.spec import EngineSection
from tritongen.spec import RUNTIME_SECTIONS, explain, parse_spec
from specs import trtllm_build_settings as settings, trtllm_section
from tritongen.contract import bls_parameters
from tritongen.runtimes.tensorrtllm import (TRTLLM, Ports, build_commands, launch_command,
                              orchestrator_env, tensorrt_llm_parameters)
from tritongen.runtimes.tensorrtllm.build import (CACHE_KEY_FIELDS, CACHE_KEY_IGNORED, MANIFEST, build_engine, cache_key,
                                    checkpoint_digest, container_run_kwargs)
from tritongen.plan import make_plan
from tritongen.runtimes.tensorrtllm.checks import check_engine, load_engine_config

FIXTURES = Path(__file__).parents[1] / "fixtures" / "engines"
DIGEST = "0" * 64


def make_spec(**sections):
    data = {"name": "llama3-8b", "runtime": "tensorrtllm", "model": {"checkpoint": "/models/llama3-8b"},
            "placement": {"device": "gpu"}, "serving": {"max_batch_size": 64}}
    for section, values in sections.items():
        data[section] = {**data.get(section, {}), **values}
    return parse_spec(data)


def fixture(name):
    return load_engine_config(FIXTURES / name)


@pytest.fixture
def make_plan_(tiny_model, tmp_path):
    """make_spec(...) planned: the tiny model's tokenizer, an engine folder that is not built (no engine check)."""
    def plan(**sections):
        spec = make_spec(**sections)
        spec = spec.model_copy(update={"model": spec.model.model_copy(update={"checkpoint": str(tiny_model)}),
                                       "engine": spec.engine.model_copy(update={"engine_dir": "/engines/abc"})})
        return make_plan(spec, tmp_path)
    return plan


@pytest.fixture
def checkpoint(tmp_path):
    ckpt = tmp_path / "hf"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "vocab_size": 128256}))
    (ckpt / "model.safetensors").write_bytes(b"\x08" * (3 << 20))
    (ckpt / "tokenizer.json").write_text("{}")
    return ckpt


# --- build commands -------------------------------------------------------------------------------------------

def test_build_commands_bf16_tp1():
    assert build_commands(settings(make_spec()), "/ckpt", "/work/engine") == [
        ["python3", "/tritongen/examples/models/core/llama/convert_checkpoint.py",
         "--model_dir", "/ckpt", "--output_dir", "/work/tllm_checkpoint", "--dtype", "bfloat16",
         "--tp_size", "1", "--pp_size", "1"],
        ["trtllm-build", "--checkpoint_dir", "/work/tllm_checkpoint", "--output_dir", "/work/engine",
         "--max_batch_size", "64", "--max_input_len", "2048", "--max_seq_len", "4096", "--max_num_tokens", "8192",
         "--max_beam_width", "1", "--gemm_plugin", "auto", "--kv_cache_type", "paged",
         "--remove_input_padding", "enable", "--use_paged_context_fmha", "enable"],
    ]


def test_build_commands_fp8_tp4_goes_through_quantize():
    spec = make_spec(engine={"tp_size": 4, "quantization": "fp8", "kv_cache_dtype": "fp8", "build_max_batch_size": 128,
                             "max_input_len": 8192, "max_seq_len": 16384, "max_num_tokens": 16384})
    assert build_commands(settings(spec), "/ckpt", "/w/engine", converted_dir="/w/conv",
                          examples_dir="/src/examples") == [
        ["python3", "/src/examples/quantization/quantize.py", "--model_dir", "/ckpt", "--output_dir", "/w/conv",
         "--dtype", "bfloat16", "--tp_size", "4", "--pp_size", "1", "--qformat", "fp8", "--kv_cache_dtype", "fp8"],
        ["trtllm-build", "--checkpoint_dir", "/w/conv", "--output_dir", "/w/engine",
         "--max_batch_size", "128", "--max_input_len", "8192", "--max_seq_len", "16384", "--max_num_tokens", "16384",
         "--max_beam_width", "1", "--gemm_plugin", "auto", "--kv_cache_type", "paged",
         "--remove_input_padding", "enable", "--use_paged_context_fmha", "enable", "--workers", "4"],
    ]
    with_data = build_commands(settings(spec), "/ckpt", "/w/engine", converted_dir="/w/conv",
                               calibration_dir="/data/calib")
    assert with_data[0][-2:] == ["--calib_dataset", "/data/calib"]


@pytest.mark.parametrize(("engine", "convert_tail"), [
    ({"quantization": "int4_weight_only"}, ["--use_weight_only", "--weight_only_precision", "int4"]),
    ({"quantization": "int8_weight_only", "pp_size": 2}, ["--use_weight_only", "--weight_only_precision", "int8"]),
])
def test_weight_only_uses_convert_checkpoint(engine, convert_tail):
    convert, _ = build_commands(settings(make_spec(engine=engine)), "/c", "/o/engine")
    assert convert[1].endswith("/models/core/llama/convert_checkpoint.py")
    assert convert[-3:] == convert_tail
    assert convert[convert.index("--pp_size") + 1] == str(engine.get("pp_size", 1))


@pytest.mark.parametrize(("engine", "qformat"), [
    ({"quantization": "int4_awq"}, ["--qformat", "int4_awq"]),
    ({"quantization": "smoothquant"}, ["--qformat", "int8_sq"]),
    ({"kv_cache_dtype": "int8"}, ["--qformat", "full_prec", "--kv_cache_dtype", "int8"]),
])
def test_calibrated_formats_use_quantize(engine, qformat):
    convert, _ = build_commands(settings(make_spec(engine=engine)), "/c", "/o/engine")
    assert convert[1].endswith("/quantization/quantize.py")
    assert convert[-len(qformat):] == qformat


def test_build_command_flags_follow_the_spec():
    spec = make_spec(engine={"gemm_plugin": "float16", "dtype": "float16", "use_paged_context_fmha": False,
                             "max_beam_width": 4})
    _, build = build_commands(settings(spec), "/c", "/o/engine")
    assert build[build.index("--gemm_plugin") + 1] == "float16"
    assert build[build.index("--use_paged_context_fmha") + 1] == "disable"
    assert build[build.index("--max_beam_width") + 1] == "4"


# --- cache key ------------------------------------------------------------------------------------------------

def key_of(spec, digest=DIGEST, version=TRTLLM.version, arch="sm90"):
    return cache_key(settings(spec), digest, version, arch)


@pytest.mark.parametrize("change", [
    {"serving": {"streaming": False, "kv_cache": {"free_gpu_mem_fraction": 0.5, "enable_reuse": True}}},
    {"engine": {"batch_scheduler_policy": "max_utilization", "enable_chunked_context": True}},
    {"placement": {"gpu_ids": [3]}},
    {"validation": {"load": {"users": 64}}},
    {"engine": {"cache_dir": "/elsewhere", "engine_dir": None}},
    {"model": {"checkpoint": "/copies/llama3-8b", "tokenizer": "/tok"}},
    {"name": "another-name"},
])
def test_cache_key_ignores_serving_only_fields(change):
    base = make_spec(engine={"build_max_batch_size": 64})
    data = base.model_dump()
    for section, values in change.items():
        if isinstance(values, dict):
            data[section] = {**data[section], **values}
        else:
            data[section] = values
    assert key_of(parse_spec(data)) == key_of(base)


@pytest.mark.parametrize("engine", [
    {"tp_size": 2}, {"pp_size": 2}, {"dtype": "float16"}, {"quantization": "fp8"}, {"kv_cache_dtype": "fp8"},
    {"build_max_batch_size": 32}, {"max_input_len": 1024}, {"max_seq_len": 8192}, {"max_num_tokens": 4096},
    {"max_beam_width": 2}, {"use_paged_context_fmha": False}, {"gemm_plugin": "bfloat16"},
])
def test_cache_key_changes_with_build_fields(engine):
    assert key_of(make_spec(engine=engine)) != key_of(make_spec())


def test_cache_key_changes_with_checkpoint_version_and_arch():
    spec = make_spec()
    assert len({key_of(spec), key_of(spec, digest="1" * 64), key_of(spec, version="1.2.0"),
                key_of(spec, arch="sm100")}) == 4


def test_cache_key_is_stable_for_the_same_settings():
    # Keys that engines already in a cache were stored under: the key changes only with what is built.
    assert key_of(make_spec()) == "e49490412f3ca85a4ddd12c2e1b1d767"
    fp8 = make_spec(engine={"quantization": "fp8", "kv_cache_dtype": "fp8", "tp_size": 2})
    assert cache_key(settings(fp8), DIGEST, "1.2.1", "sm90", "abc") == "7c78807169471322ab9b3a04a26bbdcb"


def test_serving_batch_reaches_the_key_only_while_the_engine_batch_is_unset():
    assert key_of(make_spec(serving={"max_batch_size": 8})) != key_of(make_spec(serving={"max_batch_size": 16}))
    pinned = {"build_max_batch_size": 32}
    assert key_of(make_spec(engine=pinned, serving={"max_batch_size": 8})) == \
        key_of(make_spec(engine=pinned, serving={"max_batch_size": 16}))
    assert settings(make_spec(serving={"max_batch_size": 8})).max_batch_size == 8


def test_every_spec_field_is_declared_build_relevant_or_ignored():
    leaves = [path for path, kind, _, _ in explain() if kind != "section"]
    # The other runtimes' sections never reach the engine.
    others = tuple(f"{s.key}." for s in RUNTIME_SECTIONS if s is not EngineSection)
    undeclared = [p for p in leaves if p not in CACHE_KEY_FIELDS and not p.startswith(CACHE_KEY_IGNORED + others)]
    assert undeclared == []


def test_checkpoint_digest_is_content_not_mtime(checkpoint, tmp_path):
    first = checkpoint_digest(checkpoint)
    os.utime(checkpoint / "model.safetensors", (1, 1))
    (checkpoint / "tokenizer.json").write_text('{"changed": true}')  # not read by conversion
    assert checkpoint_digest(checkpoint) == first
    with (checkpoint / "model.safetensors").open("r+b") as f:
        f.seek(-1, os.SEEK_END)
        f.write(b"\x09")
    assert checkpoint_digest(checkpoint) != first


def test_checkpoint_digest_needs_config_and_weights(tmp_path):
    with pytest.raises(SpecError) as err:
        checkpoint_digest(tmp_path)
    assert str(err.value) == (f"model.checkpoint: ({tmp_path}) has no config.json; "
                              "point it at a Hugging Face checkpoint folder")
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(SpecError) as err:
        checkpoint_digest(tmp_path)
    assert str(err.value) == (f"model.checkpoint: ({tmp_path}) has no weight files (*.safetensors, *.bin); "
                              "download the weights into the checkpoint folder")


# --- build_engine ---------------------------------------------------------------------------------------------

@pytest.fixture
def examples(tmp_path):
    folder = tmp_path / "TensorRT-LLM" / "examples"
    (folder / TRTLLM.convert_script).parent.mkdir(parents=True)
    (folder / TRTLLM.convert_script).write_text("")
    return folder


def section(checkpoint, cache, **sections):
    """The planned tensorrtllm section of make_spec(**sections) with its engine cache in `cache`."""
    engine = {"cache_dir": str(cache), **sections.pop("engine", {})}
    return trtllm_section(make_spec(engine=engine, **sections), checkpoint)


def test_container_run_kwargs_use_the_sdk_types(tmp_path, checkpoint, examples):
    kwargs = container_run_kwargs(section(checkpoint, tmp_path, placement={"gpu_ids": [0, 1]}), checkpoint, tmp_path,
                                  examples)
    [gpus] = kwargs["device_requests"]
    assert isinstance(gpus, DeviceRequest)
    assert (gpus.device_ids, gpus.capabilities, gpus.count) == (["0", "1"], [["gpu"]], 0)
    assert all(isinstance(m, Mount) for m in kwargs["mounts"])
    assert [(m["Target"], m["Source"], m["Type"], m["ReadOnly"]) for m in kwargs["mounts"]] == [
        ("/tritongen/checkpoint", str(checkpoint), "bind", True),
        ("/tritongen/examples", str(examples), "bind", True),
        ("/tritongen/work", str(tmp_path), "bind", False),
    ]
    assert (kwargs["detach"], kwargs["shm_size"]) == (True, "2g")
    assert [dict(u) for u in kwargs["ulimits"]] == [{"Name": "memlock", "Soft": -1, "Hard": -1}]
    [every_gpu] = container_run_kwargs(section(checkpoint, tmp_path), checkpoint, tmp_path, examples)["device_requests"]
    assert (every_gpu.count, every_gpu.device_ids, every_gpu.capabilities) == (-1, [], [["gpu"]])


def test_no_tensorrt_llm_and_no_docker_engine_is_environment_missing(monkeypatch, tmp_path, checkpoint, examples):
    monkeypatch.setattr(trtllm_build, "_local_trtllm_version", lambda: None)
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")  # the SDK's own failure path
    with pytest.raises(EnvironmentMissing) as err:
        build_engine(section(checkpoint, tmp_path / "cache"), checkpoint, examples_dir=examples)
    message = str(err.value)
    assert err.value.exit_code == 3
    assert message.startswith("engine build: needs TensorRT-LLM 1.2.1 in this Python (no importable tensorrt_llm) "
                              "or a running docker engine for nvcr.io/nvidia/tritonserver:26.07-trtllm-python-py3 "
                              "(docker: Error while fetching server API version")
    assert message.endswith("; start the docker engine with the NVIDIA container toolkit, "
                            "or `pip install tensorrt_llm==1.2.1`")
    assert not (tmp_path / "cache").exists()


def test_missing_examples_is_environment_missing(monkeypatch, tmp_path, checkpoint):
    monkeypatch.setattr(trtllm_build, "_local_trtllm_version", lambda: TRTLLM.version)
    with pytest.raises(EnvironmentMissing) as err:
        build_engine(section(checkpoint, tmp_path / "cache"), checkpoint)
    assert str(err.value) == ("engine build: needs the examples folder of TensorRT-LLM v1.2.1 (got None); "
                              "git clone --depth 1 --branch v1.2.1 https://github.com/NVIDIA/TensorRT-LLM "
                              "and pass its examples/ folder")


def test_dry_run_returns_key_and_container_commands(tmp_path, checkpoint):
    trt = section(checkpoint, tmp_path / "cache")
    result = build_engine(trt, checkpoint, dry_run=True)
    assert result.runner == "dry-run"
    assert result.key == cache_key(settings(make_spec()), checkpoint_digest(checkpoint), TRTLLM.version, "sm90")
    assert (result.key, str(result.engine_dir)) == (trt.engine_key, trt.engine_dir)  # what planning keyed
    assert result.engine_dir == tmp_path / "cache" / result.key
    assert result.commands == build_commands(settings(make_spec()), "/tritongen/checkpoint", "/tritongen/work/engine")
    assert not (tmp_path / "cache").exists()


def test_unsupported_architecture_is_a_spec_error(tmp_path, checkpoint):
    (checkpoint / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"]}))
    with pytest.raises(SpecError, match=r"^model.checkpoint: architecture GPT2LMHeadModel has no "):
        build_engine(section(checkpoint, tmp_path), checkpoint, dry_run=True)


class FakeContainer:
    def __init__(self, status):
        self.status, self.removed = status, False

    def logs(self, stream, follow):
        assert stream and follow
        return iter([b"[TensorRT-LLM] converting\n", b"built\n"])

    def wait(self):
        return {"StatusCode": self.status}

    def remove(self, force):
        self.removed = force


class FakeClient:
    """Stands in for DockerClient: the 'container' writes an engine into the work mount when it succeeds."""

    def __init__(self, status=0):
        self.status, self.runs = status, []
        self.containers = self

    def run(self, image, command, **kwargs):
        self.runs.append((image, command, kwargs))
        work = next(Path(m["Source"]) for m in kwargs["mounts"] if m["Target"] == "/tritongen/work")
        if self.status == 0:
            (work / "engine").mkdir()
            (work / "engine" / "config.json").write_text("{}")
            (work / "engine" / "rank0.engine").write_bytes(b"plan")
        self.container = FakeContainer(self.status)
        return self.container


def docker_build(monkeypatch, tmp_path, checkpoint, examples, client):
    monkeypatch.setattr(trtllm_build, "_local_trtllm_version", lambda: None)
    monkeypatch.setattr(trtllm_build, "_docker_client", lambda: client)
    logged = []
    result = build_engine(section(checkpoint, tmp_path / "cache"), checkpoint, examples_dir=examples, log=logged.append)
    return result, logged


def test_docker_build_fills_the_cache_then_hits_it(monkeypatch, tmp_path, checkpoint, examples):
    client = FakeClient()
    result, logged = docker_build(monkeypatch, tmp_path, checkpoint, examples, client)
    [(image, command, kwargs)] = client.runs
    assert image == TRTLLM.container
    assert command[:2] == ["bash", "-c"]
    assert "tensorrt_llm as t" in command[2]
    assert " && trtllm-build --checkpoint_dir /tritongen/work/tllm_checkpoint" in command[2]
    assert client.container.removed
    assert "built" in logged
    assert result.runner == "docker" and result.commands[1][0] == "trtllm-build"
    assert sorted(p.name for p in result.engine_dir.iterdir()) == ["config.json", "rank0.engine", MANIFEST]
    manifest = json.loads((result.engine_dir / MANIFEST).read_text())
    assert (manifest["key"], manifest["tensorrt_llm"], manifest["runner"]) == (result.key, "1.2.1", "docker")
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [result.key]  # the temp build folder is gone

    again, _ = docker_build(monkeypatch, tmp_path, checkpoint, examples, FakeClient())
    assert (again.runner, again.engine_dir, again.commands) == ("cache", result.engine_dir, [])


def test_failed_docker_build_leaves_nothing(monkeypatch, tmp_path, checkpoint, examples):
    client = FakeClient(status=1)
    with pytest.raises(CheckFailed) as err:
        docker_build(monkeypatch, tmp_path, checkpoint, examples, client)
    assert err.value.problems == ["engine build: the build container exited with 1; see the log above",
                                  "[TensorRT-LLM] converting", "built"]
    assert client.container.removed
    assert list((tmp_path / "cache").iterdir()) == []


def test_a_lock_file_builds_the_engine_it_plans(monkeypatch, tmp_path, tiny_model, examples, capsys):
    ckpt = tmp_path / "ckpt"
    shutil.copytree(tiny_model, ckpt)
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({
        "name": "tiny", "runtime": "tensorrtllm", "model": {"checkpoint": str(ckpt)},
        "placement": {"device": "gpu", "gpu_ids": [1]}, "serving": {"max_batch_size": 8},
        "engine": {"gpu_arch": "sm90", "cache_dir": str(tmp_path / "cache"), "max_input_len": 64, "max_seq_len": 128}}))
    assert main(["plan", str(spec), "--json"]) == 0
    lock = tmp_path / "plan.json"
    lock.write_text(capsys.readouterr().out)
    planned = json.loads(lock.read_text())["runtime_settings"]
    spec.unlink()  # the lock file is all that build reads
    monkeypatch.setattr(trtllm_build, "detect_gpu_arch", lambda index=0: "sm90")
    monkeypatch.setattr(trtllm_build, "_local_trtllm_version", lambda: None)
    client = FakeClient()
    monkeypatch.setattr(trtllm_build, "_docker_client", lambda: client)

    assert main(["build", str(lock), "--examples-dir", str(examples)]) == 0
    assert capsys.readouterr().out.splitlines()[-2:] == [f"cache key: {planned['engine_key']}",
                                                         f"engine:    {planned['engine_dir']} (docker)"]
    [(_, command, kwargs)] = client.runs
    assert "--max_batch_size 8 --max_input_len 64 --max_seq_len 128" in command[2]
    assert kwargs["device_requests"][0].device_ids == ["1"]  # placement.gpu_ids, as planned
    manifest = json.loads((Path(planned["engine_dir"]) / MANIFEST).read_text())
    assert (manifest["key"], manifest["build"], manifest["gpu_arch"]) == (
        planned["engine_key"], planned["build"], "sm90")
    assert main(["build", str(lock)]) == 0
    assert capsys.readouterr().out.endswith(f"engine:    {planned['engine_dir']} (cache)\n")

    # A lock file is built as planned: no planning flags, the planned architecture, the planned checkpoint.
    assert main(["build", str(lock), "--gpu-arch", "sm80"]) == 2
    assert capsys.readouterr().err.startswith("error: --gpu-arch: cannot change a finished plan")
    monkeypatch.setattr(trtllm_build, "detect_gpu_arch", lambda index=0: "sm80")
    assert main(["build", str(lock)]) == 2
    assert capsys.readouterr().err == (
        f"error: {lock}: runtime_settings.gpu_arch: sm90, but this machine's GPU 0 is sm80 and an engine runs only "
        "on the architecture it was built for; build on an sm90 machine, or re-plan with --gpu-arch sm80\n")
    monkeypatch.setattr(trtllm_build, "detect_gpu_arch", lambda index=0: "sm90")
    (ckpt / "config.json").write_text((ckpt / "config.json").read_text() + "\n")
    assert main(["build", str(lock), "--dry-run"]) == 2
    assert capsys.readouterr().err.startswith(f"error: engine_key: the plan names engine {planned['engine_key']}, but ")


def test_container_build_refuses_another_tensorrt_llm_version(tmp_path):
    # The 25.12 image tag does not prove which TensorRT-LLM it carries; the build script checks before building.
    fake = tmp_path / "tensorrt_llm.py"
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    script = trtllm_build._container_script([["echo", "built"]])
    fake.write_text('__version__ = "1.1.0"')
    wrong = subprocess.run(script, env=env, capture_output=True, text=True)
    assert (wrong.returncode, wrong.stdout) == (1, "")
    assert wrong.stderr == "TensorRT-LLM 1.1.0 in the container, expected 1.2.1\n"
    fake.write_text('__version__ = "1.2.1"')
    right = subprocess.run(script, env=env, capture_output=True, text=True)
    assert (right.returncode, right.stdout) == (0, "built\n")


def test_local_build_failure_names_the_command_and_keeps_the_log_tail():
    with pytest.raises(CheckFailed) as err:
        trtllm_build._run_local([[sys.executable, "-c", "print('boom'); raise SystemExit(3)"]], lambda line: None)
    step = Path(sys.executable).name
    assert err.value.problems == [f"engine build: {step} exited with 3; see the log above", "boom"]


# --- engine checks --------------------------------------------------------------------------------------------

def test_consistent_engines_pass(make_plan_):
    assert check_engine(fixture("llama3-8b-bf16-tp1"), make_plan_(), tokenizer_vocab_size=128256, world_size=1) == []
    spec70 = make_plan_(engine={"tp_size": 4, "quantization": "fp8", "kv_cache_dtype": "fp8",
                                "enable_chunked_context": True},
                       serving={"max_batch_size": 128, "kv_cache": {"enable_reuse": True}})
    assert check_engine(fixture("llama3-70b-fp8-tp4"), spec70, tokenizer_vocab_size=128256, world_size=4) == []


REUSE = {"serving": {"kv_cache": {"enable_reuse": True}}, "engine": {"enable_chunked_context": True}}


@pytest.mark.parametrize(("name", "spec_kwargs", "check_kwargs", "expected"), [
    ("bad-continuous-kv-cache", {}, {}, [
        "engine.batching_strategy (inflight_fused_batching): needs engine build_config.kv_cache_type PAGED "
        "(got CONTINUOUS); rebuild with --kv_cache_type paged"]),
    ("bad-legacy-no-paged-kv-cache", {}, {}, [
        "engine config.json version (0.17.0.post1): must equal the serving container's TensorRT-LLM "
        "(1.2.1, nvcr.io/nvidia/tritonserver:26.07-trtllm-python-py3); rebuild the engine with the pinned release",
        "engine.batching_strategy (inflight_fused_batching): needs engine build_config.plugin_config."
        "paged_kv_cache true (got false); rebuild with --kv_cache_type paged"]),
    ("bad-padded-input", {}, {}, [
        "engine.batching_strategy (inflight_fused_batching): needs engine build_config.plugin_config."
        "remove_input_padding true (got false); rebuild with --remove_input_padding enable"]),
    ("bad-no-paged-context-fmha", REUSE, {}, [
        "serving.kv_cache.enable_reuse (true): needs engine build_config.plugin_config.use_paged_context_fmha "
        "true (got false); rebuild with engine.use_paged_context_fmha: true "
        "or set serving.kv_cache.enable_reuse: false",
        "engine.enable_chunked_context (true): needs engine build_config.plugin_config.use_paged_context_fmha "
        "true (got false); rebuild with engine.use_paged_context_fmha: true "
        "or set engine.enable_chunked_context: false"]),
    ("bad-short-context", {}, {}, [
        "engine.max_input_len (2048): must equal engine build_config.max_input_len (32); "
        "set engine.max_input_len: 32 or rebuild the engine",
        "engine.max_seq_len (4096): must equal engine build_config.max_seq_len (64); "
        "set engine.max_seq_len: 64 or rebuild the engine",
        "validation.load.input_tokens (mean 32 + 3 x stddev 4 = 44): must be <= engine build_config.max_input_len "
        "(32); rebuild with a larger engine.max_input_len or shorten the prompts",
        "validation.load (input 44 + output 32 = 76 tokens): must be <= engine build_config.max_seq_len (64); "
        "rebuild with a larger engine.max_seq_len or shorten the load"]),
    ("bad-tp2", {}, {"world_size": 1}, [
        "engine.tp_size x engine.pp_size (1 x 1 = 1): must equal engine pretrained_config.mapping tp_size x pp_size "
        "(2 x 1 = 2); set engine.tp_size/pp_size to the engine's or rebuild",
        "launch world size (1): must equal engine pretrained_config.mapping tp_size x pp_size (2 x 1 = 2); "
        "start one MPI rank per engine rank"]),
    ("bad-vocab32000", {}, {"tokenizer_vocab_size": 128256}, [
        "model.tokenizer (vocabulary 128256): must be <= engine pretrained_config.vocab_size (32000); "
        "use the tokenizer of the checkpoint the engine was built from"]),
    ("bad-float16", {}, {}, [
        "engine.dtype (bfloat16): must equal engine pretrained_config.dtype (float16); "
        "set engine.dtype: float16 or rebuild"]),
    ("llama3-8b-bf16-tp1", {"engine": {"max_beam_width": 4}}, {}, [
        "engine.max_beam_width (4): must be <= engine build_config.max_beam_width (1); "
        "rebuild with --max_beam_width 4 or lower it"]),
    ("llama3-70b-fp8-tp4", {"engine": {"tp_size": 4}, "serving": {"max_batch_size": 128}}, {}, [
        "engine.quantization (none): does not match engine pretrained_config.quantization.quant_algo (\"FP8\"); "
        "set engine.quantization to the engine's or rebuild",
        "engine.kv_cache_dtype (auto): does not match engine pretrained_config.quantization.kv_cache_quant_algo "
        "(\"FP8\"); set engine.kv_cache_dtype to the engine's or rebuild"]),
])
def test_inconsistent_engine_names_both_fields(make_plan_, name, spec_kwargs, check_kwargs, expected):
    assert check_engine(fixture(name), make_plan_(**spec_kwargs), **check_kwargs) == expected


def test_triton_batch_above_the_engine_batch_is_allowed(make_plan_):
    # NVIDIA documents Triton's max_batch_size and the engine's as independent; only the engine's bounds the executor.
    assert check_engine(fixture("bad-batch32"), make_plan_(serving={"max_batch_size": 64})) == []


def test_prompts_file_skips_the_length_checks(make_plan_):
    spec = make_plan_(engine={"max_input_len": 32, "max_seq_len": 64},
                      validation={"load": {"prompts_file": "prompts.jsonl"}})
    assert check_engine(fixture("bad-short-context"), spec) == []


def test_missing_engine_config_is_a_spec_error(tmp_path):
    with pytest.raises(SpecError) as err:
        load_engine_config(tmp_path)
    assert str(err.value) == (f"engine.engine_dir: ({tmp_path}) has no config.json; "
                              "point it at a folder written by trtllm-build")


# --- tensorrt_llm / BLS parameters ----------------------------------------------------------------------------

# Every parameter key of the tensorrt_llm model in reference/tensorrtllm_contract.md (template names renamed
# where the contract says so), plus enable_trt_overlap, which the pinned template still carries.
CONTRACT_PARAMETER_KEYS = {
    "FORCE_CPU_ONLY_INPUT_TENSORS", "executor_worker_path", "gpt_model_type", "gpt_model_path", "encoder_model_path",
    "max_beam_width", "max_tokens_in_paged_kv_cache", "kv_cache_free_gpu_mem_fraction", "cross_kv_cache_fraction",
    "kv_cache_host_memory_bytes", "kv_cache_onboard_blocks", "max_attention_window_size", "sink_token_length",
    "enable_kv_cache_reuse", "batch_scheduler_policy", "enable_chunked_context", "exclude_input_in_output",
    "cancellation_check_period_ms", "stats_check_period_ms", "iter_stats_max_iterations",
    "request_stats_max_iterations", "normalize_log_probs", "gpu_device_ids", "participant_ids", "num_nodes",
    "gpu_weights_percent", "lora_cache_optimal_adapter_size", "lora_cache_max_adapter_size",
    "lora_cache_gpu_memory_fraction", "lora_cache_host_memory_bytes", "lora_prefetch_dir", "decoding_mode",
    "lookahead_window_size", "lookahead_ngram_size", "lookahead_verification_set_size", "medusa_choices",
    "eagle_choices", "enable_context_fmha_fp32_acc", "multi_block_mode", "cuda_graph_mode", "cuda_graph_cache_size",
    "speculative_decoding_fast_logits", "guided_decoding_backend", "xgrammar_tokenizer_info_path", "tokenizer_dir",
    "recv_poll_period_ms", "enable_trt_overlap",
}


def test_parameters_carry_every_contract_key_as_strings(make_plan_):
    params = tensorrt_llm_parameters(make_plan_(), "/engines/abc", "0", None)
    assert set(params) == CONTRACT_PARAMETER_KEYS
    assert all(isinstance(v, str) for v in params.values())
    assert {k: params[k] for k in ("gpt_model_type", "gpt_model_path", "batch_scheduler_policy",
                                   "max_tokens_in_paged_kv_cache", "kv_cache_free_gpu_mem_fraction",
                                   "enable_kv_cache_reuse", "kv_cache_host_memory_bytes", "enable_chunked_context",
                                   "max_beam_width", "exclude_input_in_output", "gpu_device_ids", "participant_ids",
                                   "FORCE_CPU_ONLY_INPUT_TENSORS", "executor_worker_path", "decoding_mode")} == {
        "gpt_model_type": "inflight_fused_batching", "gpt_model_path": "/engines/abc",
        "batch_scheduler_policy": "guaranteed_no_evict", "max_tokens_in_paged_kv_cache": "",
        "kv_cache_free_gpu_mem_fraction": "0.9", "enable_kv_cache_reuse": "false",
        "kv_cache_host_memory_bytes": "0", "enable_chunked_context": "false", "max_beam_width": "1",
        "exclude_input_in_output": "true", "gpu_device_ids": "0", "participant_ids": "",
        "FORCE_CPU_ONLY_INPUT_TENSORS": "no",
        "executor_worker_path": "/opt/tritonserver/backends/tensorrtllm/trtllmExecutorWorker",
        "decoding_mode": "top_k_top_p",
    }


def test_parameters_follow_the_spec_and_placement(make_plan_):
    plan = make_plan_(engine={"max_beam_width": 2, "batching_strategy": "inflight_batching",
                             "batch_scheduler_policy": "max_utilization", "enable_chunked_context": True},
                     serving={"exclude_input_in_output": False,
                              "kv_cache": {"max_tokens": 65536, "free_gpu_mem_fraction": 0.45, "enable_reuse": True,
                                           "host_memory_bytes": 2_000_000_000}})
    params = tensorrt_llm_parameters(plan, Path("/e"), "0,1;2,3", plan.kv_tokens,
                                     participant_ids="1,2;3,4")
    assert {k: params[k] for k in ("gpt_model_type", "batch_scheduler_policy", "exclude_input_in_output",
                                   "enable_chunked_context", "max_tokens_in_paged_kv_cache",
                                   "kv_cache_free_gpu_mem_fraction", "enable_kv_cache_reuse",
                                   "kv_cache_host_memory_bytes", "gpu_device_ids", "participant_ids",
                                   "max_beam_width", "decoding_mode")} == {
        "gpt_model_type": "inflight_batching", "batch_scheduler_policy": "max_utilization",
        "exclude_input_in_output": "false", "enable_chunked_context": "true",
        "max_tokens_in_paged_kv_cache": "65536", "kv_cache_free_gpu_mem_fraction": "0.45",
        "enable_kv_cache_reuse": "true", "kv_cache_host_memory_bytes": "2000000000",
        "gpu_device_ids": "0,1;2,3", "participant_ids": "1,2;3,4", "max_beam_width": "2",
        "decoding_mode": "beam_search",
    }


def test_bls_parameters():
    assert bls_parameters(False) == {"accumulate_tokens": "false", "tensorrt_llm_model_name": "tensorrt_llm",
                                           "tensorrt_llm_draft_model_name": "", "multimodal_encoders_name": ""}


# --- launch ---------------------------------------------------------------------------------------------------

PORTS = Ports(http=8000, grpc=8001, metrics=8002)


def test_leader_mode_runs_one_tritonserver_per_rank():
    ts = "/opt/tritonserver/bin/tritonserver"
    common = ["--model-repository=/repo", "--grpc-port=8001", "--http-port=8000", "--metrics-port=8002"]
    assert launch_command(2, "/repo", PORTS) == [
        "mpirun", "--allow-run-as-root",
        "-n", "1", ts, *common, "--disable-auto-complete-config",
        "--backend-config=python,shm-region-prefix-name=prefix0_",
        ":", "-n", "1", ts, *common, "--model-control-mode=explicit", "--load-model=tensorrt_llm",
        "--disable-auto-complete-config", "--backend-config=python,shm-region-prefix-name=prefix1_",
    ]


def test_single_rank_and_orchestrator_mode_need_no_mpirun():
    single = launch_command(1, "/repo", PORTS, tritonserver="tritonserver")
    assert single == ["tritonserver", "--model-repository=/repo", "--grpc-port=8001", "--http-port=8000",
                      "--metrics-port=8002", "--disable-auto-complete-config",
                      "--backend-config=python,shm-region-prefix-name=prefix0_"]
    assert launch_command(4, "/repo", PORTS, mode="orchestrator", tritonserver="tritonserver") == single
    assert orchestrator_env() == {"TRTLLM_ORCHESTRATOR": "1", "TRTLLM_ORCHESTRATOR_SPAWN_PROCESSES": "1"}
    assert orchestrator_env(spawn_processes=False)["TRTLLM_ORCHESTRATOR_SPAWN_PROCESSES"] == "0"


def test_docker_sdk_is_the_real_one():
    # The build goes through docker's own client; the tests above fake only the engine behind it.
    assert trtllm_build.docker is docker
