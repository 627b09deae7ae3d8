"""Build TensorRT-LLM engines into a content-addressed cache, locally or inside the pinned container.

Everything a build needs comes from the Plan's tensorrtllm section (TensorrtllmPlan: build settings, cache folder,
GPU architecture, calibration data, the GPUs a docker build may use) and the checkpoint folder; the spec is read
only while planning.

The cache is one folder per key (`<cache_dir>/<key>/`: the engine's config.json and rank*.engine files plus
`tritongen-manifest.json`). A build runs in a temporary folder inside the cache and is renamed into place only
when it succeeded, so a failed or interrupted build leaves no half-written engine behind.
"""

from __future__ import annotations

import collections
import datetime
import hashlib
import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import docker
from docker.types import DeviceRequest, Mount, Ulimit

from tritongen.core import AdapterPlan
from tritongen.errors import CheckFailed, EnvironmentMissing, SpecError, problem
from tritongen.runtimes.tensorrtllm import xgrammar_info
from tritongen.runtimes.tensorrtllm.backend import CONTAINER_EXAMPLES, LLAMA_FAMILY, TRTLLM, build_commands
from tritongen.runtimes.tensorrtllm.settings import BuildSettings, TensorrtllmPlan

MANIFEST = "tritongen-manifest.json"

# Spec fields that change the engine (planning turns them into BuildSettings); serving.max_batch_size only while
# engine.build_max_batch_size is unset. Adding a spec field means adding it here or to CACHE_KEY_IGNORED
# (tests/runtimes/test_trtllm.py fails otherwise).
CACHE_KEY_FIELDS = (
    "engine.tp_size", "engine.pp_size", "engine.dtype", "engine.quantization", "engine.kv_cache_dtype",
    "engine.build_max_batch_size", "serving.max_batch_size", "engine.max_input_len", "engine.max_seq_len",
    "engine.max_num_tokens", "engine.max_beam_width", "engine.use_paged_context_fmha", "engine.gemm_plugin",
    "engine.calibration_dataset",  # enters through its content digest (calibration_digest), never its path
    "engine.gpu_arch",  # enters as the resolved architecture (flag, this field, the inventory or NVML)
    # The LoRA plugin: the adapters' target modules and the largest rank, never their paths or weights (those are
    # converted beside the engine, content-addressed on their own: runtimes/tensorrtllm/lora.py).
    "model.adapters", "model.adapters[].path", "model.max_adapter_rank",
)
# Prefixes of fields that do not: runtime parameters, placement, load tests, where things live. The checkpoint
# enters through its content digest, never through its path.
CACHE_KEY_IGNORED = (
    "version", "name", "runtime", "model.checkpoint", "model.tokenizer", "model.dtype", "model.add_special_tokens",
    "model.skip_special_tokens", "model.adapters[].name", "engine.engine_dir", "engine.cache_dir", "engine.batching_strategy",
    "engine.batch_scheduler_policy", "engine.enable_chunked_context", "serving.", "placement.", "validation.",
    "deploy.", "frontend.", "structured_output.",
)

_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
_EDGE = 1 << 20  # bytes read from each end of a large weight file

# Container paths of the docker build's mounts.
_C_CHECKPOINT = "/tritongen/checkpoint"
_C_WORK = "/tritongen/work"
_C_CALIBRATION = "/tritongen/calibration"
HUB = ("huggingface.co", 443)


def checkpoint_digest(checkpoint_dir: str | os.PathLike[str], *, require_weights: bool = True) -> str:
    """A digest of what conversion reads from a HF checkpoint: config.json and the weight files.

    config.json, index files and weight files up to 2 MiB are hashed whole. Larger weight files are hashed by
    name, size and their first and last MiB (the safetensors header with every tensor's name, dtype and offsets
    sits at the start): reading hundreds of GB on every plan would make the cache slower than it saves. mtimes
    are left out on purpose, so a copied or re-downloaded checkpoint still hits the cache.
    """
    root = Path(checkpoint_dir)
    if not (root / "config.json").is_file():
        raise SpecError(problem("model.checkpoint", f"({root}) has no config.json",
                                "point it at a Hugging Face checkpoint folder"))
    files = sorted(p for p in root.iterdir() if p.is_file() and (
        p.name == "config.json" or p.name.endswith(_WEIGHT_SUFFIXES) or p.name.endswith(".index.json")))
    # A dry run may plan from config.json alone (the key then changes once the weights are there).
    if require_weights and not any(p.name.endswith(_WEIGHT_SUFFIXES) for p in files):
        raise SpecError(problem("model.checkpoint", f"({root}) has no weight files (*.safetensors, *.bin)",
                                "download the weights into the checkpoint folder"))
    h = hashlib.sha256(b"tritongen-checkpoint-digest-v1\0")
    for path in files:
        size = path.stat().st_size
        h.update(f"{path.name}\0{size}\0".encode())
        with path.open("rb") as f:
            if size <= 2 * _EDGE:
                h.update(f.read())
            else:
                h.update(f.read(_EDGE))
                f.seek(size - _EDGE)
                h.update(f.read(_EDGE))
    return h.hexdigest()


def detect_gpu_arch(index: int = 0) -> str:
    """`sm<major><minor>` of GPU `index` through NVML: engines run only on the architecture they were built for."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(pynvml.nvmlDeviceGetHandleByIndex(index))
        finally:
            pynvml.nvmlShutdown()
    except Exception as err:  # ImportError, NVMLError (no driver, no GPU): the same fix either way
        raise EnvironmentMissing(problem(
            "engine cache key", f"needs the GPU architecture and NVML cannot tell it here ({err})",
            "run on the GPU machine, or pass --gpu-arch (e.g. sm90 for H100/H200), or set engine.engine_dir")) from None
    return f"sm{major}{minor}"


def calibration_digest(folder: str | os.PathLike[str]) -> str:
    """A digest of every file of a local calibration dataset (calibration changes the quantised weights)."""
    root = Path(folder)
    h = hashlib.sha256(b"tritongen-calibration-digest-v1\0")
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(f"{path.relative_to(root).as_posix()}\0{path.stat().st_size}\0".encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def hub_reachable(address: tuple[str, int] = HUB, timeout: float = 3.0) -> bool:
    """Whether quantize.py's default calibration download (Hugging Face hub) can connect from here."""
    if os.environ.get("HF_HUB_OFFLINE") == "1":
        return False
    try:
        socket.create_connection(address, timeout=timeout).close()
    except OSError:
        return False
    return True


def cache_key(build: BuildSettings, checkpoint_digest: str, trtllm_version: str, gpu_arch: str,
              calibration: str | None = None) -> str:
    """Key of the engine cache: a hash of the build-relevant settings only (see CACHE_KEY_FIELDS).

    `calibration` is the local calibration dataset's digest, None when quantize.py uses its hub default.
    """
    # exclude_none: an engine without the LoRA plugin keeps the key it had before the plugin was a setting.
    factors: dict[str, Any] = {"schema": 1, "build": build.model_dump(mode="json", exclude_none=True),
                               "checkpoint": checkpoint_digest,
                               "tensorrt_llm": trtllm_version, "gpu_arch": gpu_arch}
    if build.needs_calibration:
        factors["calibration"] = calibration or "hub:default"
    return hashlib.sha256(json.dumps(factors, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:32]


def calibration_folder(trt: TensorrtllmPlan, *, must_exist: bool = True) -> Path | None:
    """The calibration dataset the build reads: the section's, when its format needs calibration (None: quantize.py's
    hub default). A folder that is not there is an error, or with `must_exist=False` (planning) the hub default."""
    if trt.calibration_dataset is None or not trt.build.needs_calibration:
        return None
    calib = Path(trt.calibration_dataset)
    if calib.is_dir():
        return calib
    if must_exist:
        raise SpecError(problem("engine.calibration_dataset", f"folder {calib} does not exist",
                                "point it at a local calibration dataset folder"))
    return None


def engine_key(trt: TensorrtllmPlan, checkpoint_dir: str | os.PathLike[str], *, planning: bool = False) -> str:
    """The cache key of the section's engine built from `checkpoint_dir` for the section's GPU architecture.

    While planning the checkpoint may hold config.json alone and the calibration folder may not exist yet (the
    key then changes once they are there); a build needs both.
    """
    digest = checkpoint_digest(checkpoint_dir, require_weights=not planning)
    calib = calibration_folder(trt, must_exist=not planning)
    return cache_key(trt.build, digest, TRTLLM.version, trt.gpu_arch, calibration_digest(calib) if calib else None)


def check_convertible(trt: TensorrtllmPlan, checkpoint_dir: str | os.PathLike[str]) -> None:
    """Refuse a checkpoint whose architecture tritongen has no conversion wired for (quantize.py converts any)."""
    arch = _architecture(Path(checkpoint_dir))
    if arch not in LLAMA_FAMILY and not trt.build.needs_calibration:
        raise SpecError(problem("model.checkpoint", f"architecture {arch} has no convert_checkpoint.py wired in "
                                f"tritongen (supported: {', '.join(LLAMA_FAMILY)})",
                                "build the engine yourself and set engine.engine_dir"))


@dataclass(frozen=True)
class EngineBuild:
    key: str
    engine_dir: Path
    """`<cache_dir>/<key>`; the tensorrt_llm model's gpt_model_path."""
    commands: list[list[str]]
    """What ran (or, for dry-run, would run in the container); empty on a cache hit."""
    runner: Literal["cache", "local", "docker", "dry-run"]


def container_run_kwargs(trt: TensorrtllmPlan, checkpoint_dir: Path, work_dir: Path, examples_dir: Path,
                         calibration_dir: Path | None = None) -> dict[str, Any]:
    """Keyword arguments of docker's containers.run for a build (GPUs, bind mounts, user), without the command."""
    gpus = trt.build_gpus
    device = (DeviceRequest(device_ids=[str(i) for i in gpus], capabilities=[["gpu"]]) if gpus
              else DeviceRequest(count=-1, capabilities=[["gpu"]]))
    return {
        "device_requests": [device],
        "mounts": [
            Mount(_C_CHECKPOINT, str(checkpoint_dir.resolve()), type="bind", read_only=True),
            Mount(CONTAINER_EXAMPLES, str(examples_dir.resolve()), type="bind", read_only=True),
            Mount(_C_WORK, str(work_dir.resolve()), type="bind"),
            *([Mount(_C_CALIBRATION, str(calibration_dir.resolve()), type="bind", read_only=True)]
              if calibration_dir is not None else []),
        ],
        # Run as the caller so the engine files can be renamed and deleted without root.
        "user": f"{os.getuid()}:{os.getgid()}",
        "environment": {"HOME": f"{_C_WORK}/home", "HF_HOME": f"{_C_WORK}/home/hf"},
        "working_dir": _C_WORK,
        # As NVIDIA's `docker run` for this image (--shm-size=2g --ulimit memlock=-1): NCCL and pinned memory.
        "shm_size": "2g",
        "ulimits": [Ulimit(name="memlock", soft=-1, hard=-1)],
        "detach": True,
    }


def _container_script(commands: list[list[str]]) -> list[str]:
    # The image tag does not prove which TensorRT-LLM it carries; building with another version would make an
    # engine the serving container cannot load, so refuse before spending an hour on it.
    guard = ["python3", "-c", "import sys, tensorrt_llm as t; v = t.__version__; "
             f"sys.exit(0 if v == {TRTLLM.version!r} else 'TensorRT-LLM ' + v + ' in the container, "
             f"expected {TRTLLM.version}')"]
    return ["bash", "-c", " && ".join(shlex.join(c) for c in [guard, *commands])]


def _local_trtllm_version() -> str | None:
    """TensorRT-LLM version importable by this interpreter, or None (in a subprocess: the import loads CUDA)."""
    try:
        done = subprocess.run([sys.executable, "-c", "import tensorrt_llm; print(tensorrt_llm.__version__)"],
                              capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = done.stdout.strip().splitlines()
    return lines[-1].strip() if done.returncode == 0 and lines else None


def _docker_client() -> docker.DockerClient:
    client = docker.from_env()
    client.ping()
    return client


def _run_local(commands: list[list[str]], log: Callable[[str], None]) -> None:
    for argv in commands:
        log("$ " + shlex.join(argv))
        tail: collections.deque[str] = collections.deque(maxlen=40)
        with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
            assert proc.stdout is not None
            for line in proc.stdout:
                tail.append(line.rstrip())
                log(line.rstrip())
        if proc.returncode != 0:
            step = Path(argv[1] if argv[1].endswith(".py") else argv[0]).name
            raise CheckFailed([f"engine build: {step} exited with {proc.returncode}; see the log above", *tail])


def _run_docker(client: docker.DockerClient, commands: list[list[str]], run_kwargs: dict[str, Any],
                log: Callable[[str], None]) -> None:
    log(f"building in {TRTLLM.container} (pulled first if missing, about 16 GB)")
    container = client.containers.run(TRTLLM.container, _container_script(commands), **run_kwargs)
    tail: collections.deque[str] = collections.deque(maxlen=40)
    try:
        for chunk in container.logs(stream=True, follow=True):
            for line in chunk.decode(errors="replace").splitlines():
                tail.append(line)
                log(line)
        status = container.wait().get("StatusCode", -1)
    finally:
        container.remove(force=True)
    if status != 0:
        raise CheckFailed([f"engine build: the build container exited with {status}; see the log above", *tail])


def _cache_hit(engine_dir: Path, key: str) -> bool:
    try:
        manifest = json.loads((engine_dir / MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    return manifest.get("key") == key and (engine_dir / "config.json").is_file()


def _architecture(checkpoint_dir: Path) -> str:
    archs = json.loads((checkpoint_dir / "config.json").read_text()).get("architectures") or ["(none)"]
    return archs[0]


def _convert_adapters(trt: TensorrtllmPlan, adapters: Sequence[AdapterPlan], log: Callable[[str], None]) -> None:
    """The plan's adapters as the tensorrt_llm model prefetches them (lora_prefetch_dir), converted here: it is
    numpy work, no TensorRT-LLM needed; a folder of the same content key is kept."""
    from tritongen.runtimes.tensorrtllm.lora import write_prefetch

    assert trt.lora is not None
    if write_prefetch(adapters, trt.lora.prefetch_dir):
        log(f"LoRA adapters converted: {trt.lora.prefetch_dir}")
    else:
        log(f"LoRA adapters cache hit: {trt.lora.prefetch_dir}")


def build_engine(trt: TensorrtllmPlan, checkpoint_dir: str | os.PathLike[str], *,
                 examples_dir: str | os.PathLike[str] | None = None, dry_run: bool = False,
                 log: Callable[[str], None] = print, adapters: Sequence[AdapterPlan] = ()) -> EngineBuild:
    """Return the cached engine of a Plan's tensorrtllm section for `checkpoint_dir` (the Plan's
    paths.checkpoint), building it first on a miss.

    `adapters` (the Plan's) are converted into the section's LoRA prefetch folder first, cache hit or not.
    `examples_dir` is the `examples/` folder of a NVIDIA/TensorRT-LLM checkout at the pinned tag (the conversion
    scripts are not part of the pip package). The build runs here when this interpreter imports the pinned
    TensorRT-LLM, else in the pinned container through the docker engine; with neither, EnvironmentMissing.
    A checkpoint or calibration data that changed since planning gives another key than the section's: the
    engine would land where the Plan does not look, so that is refused (re-plan).
    """
    ckpt = Path(checkpoint_dir)
    build = trt.build
    digest = checkpoint_digest(ckpt, require_weights=not dry_run)
    calib = calibration_folder(trt)
    key = cache_key(build, digest, TRTLLM.version, trt.gpu_arch, calibration_digest(calib) if calib else None)
    if trt.engine_key is not None and key != trt.engine_key:
        raise SpecError(problem("engine_key", f"the plan names engine {trt.engine_key}, but the checkpoint and "
                                f"calibration data now give {key} (changed since planning)",
                                "re-plan (`tritongen plan SPEC --json`) or build from the spec"))
    root = Path(trt.cache_dir)
    target = root / key
    if trt.lora is not None and not dry_run:
        _convert_adapters(trt, adapters, log)
    if _cache_hit(target, key):
        log(f"engine cache hit: {target}")
        return EngineBuild(key, target, [], "cache")
    check_convertible(trt, ckpt)
    if dry_run:
        commands = build_commands(build, _C_CHECKPOINT, f"{_C_WORK}/engine", converted_dir=f"{_C_WORK}/tllm_checkpoint",
                                  calibration_dir=_C_CALIBRATION if calib else None)
        return EngineBuild(key, target, commands, "dry-run")
    if build.needs_calibration and calib is None and not hub_reachable():
        raise EnvironmentMissing(problem(
            "engine.calibration_dataset", f"quantization {build.quantization} / kv_cache_dtype "
            f"{build.kv_cache_dtype} needs calibration data and none is given, and quantize.py's default "
            f"download (Hugging Face hub, {HUB[0]}) is unreachable from here",
            "set engine.calibration_dataset to a local dataset folder (datasets save_to_disk / a folder of text)"))

    local_version = _local_trtllm_version()
    client = None
    if local_version != TRTLLM.version:
        if local_version is not None:
            log(f"local TensorRT-LLM is {local_version}, the serving container has {TRTLLM.version}: "
                "building in the container")
        try:
            client = _docker_client()
        except docker.errors.DockerException as err:
            found = f"TensorRT-LLM {local_version}" if local_version else "no importable tensorrt_llm"
            raise EnvironmentMissing(problem(
                "engine build", f"needs TensorRT-LLM {TRTLLM.version} in this Python ({found}) or a running docker "
                f"engine for {TRTLLM.container} (docker: {err})",
                f"start the docker engine with the NVIDIA container toolkit, or `pip install "
                f"tensorrt_llm=={TRTLLM.version}`")) from None
    if examples_dir is None or not (Path(examples_dir) / TRTLLM.convert_script).is_file():
        raise EnvironmentMissing(problem(
            "engine build", f"needs the examples folder of TensorRT-LLM {TRTLLM.source_tag} (got {examples_dir})",
            f"git clone --depth 1 --branch {TRTLLM.source_tag} https://github.com/NVIDIA/TensorRT-LLM "
            "and pass its examples/ folder"))

    root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".build-{key[:12]}-", dir=root))
    try:
        if client is None:
            commands = build_commands(build, ckpt, work / "engine", converted_dir=work / "tllm_checkpoint",
                                      examples_dir=os.fspath(examples_dir), python=sys.executable,
                                      calibration_dir=calib)
            _run_local(commands, log)
        else:
            commands = build_commands(build, _C_CHECKPOINT, f"{_C_WORK}/engine",
                                      converted_dir=f"{_C_WORK}/tllm_checkpoint",
                                      calibration_dir=_C_CALIBRATION if calib else None)
            _run_docker(client, commands, container_run_kwargs(trt, ckpt, work, Path(examples_dir), calib), log)
        built = work / "engine"
        if not (built / "config.json").is_file():
            raise CheckFailed("engine build: finished without writing config.json; see the log above")
        try:
            # The tensorrt_llm model loads XGrammar's vocabulary from this file (guided decoding), and refuses to
            # load when xgrammar_tokenizer_info_path names a missing one.
            xgrammar_info.write(ckpt, built)
        except Exception as err:  # noqa: BLE001 - whatever the tokenizer raises, the built engine is kept
            log(f"engine build: {xgrammar_info.FILE} not written ({err}); write it before serving: `python -m "
                f"tritongen.runtimes.tensorrtllm.xgrammar_info TOKENIZER_DIR {target}`")
        manifest = {"key": key, "build": build.model_dump(mode="json"), "checkpoint": str(ckpt.resolve()),
                    "checkpoint_digest": digest, "tensorrt_llm": TRTLLM.version,
                    "container": TRTLLM.container, "gpu_arch": trt.gpu_arch, "commands": commands,
                    "runner": "local" if client is None else "docker",
                    "built_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
        (built / MANIFEST).write_text(json.dumps(manifest, indent=2, default=str) + "\n")
        try:
            built.rename(target)
        except OSError:
            # Another build of the same key finished first; its engine is equivalent, keep it.
            if not _cache_hit(target, key):
                raise
        log(f"engine built: {target}")
        return EngineBuild(key, target, commands, "local" if client is None else "docker")
    finally:
        shutil.rmtree(work, ignore_errors=True)
