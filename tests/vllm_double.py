"""Serving a `runtime: vllm` repository here: the rendered config.pbtxt and model.json, with the test double of
Triton's vLLM backend (tests/doubles/vllm) as the backend named `vllm`, which only the vllm-python-py3 container
has. Two things differ from the container: tritonserver finds the double as a python-based backend in a backend
folder of its own, and the model's instance group is KIND_CPU (rendered KIND_GPU; this machine has no GPU)."""

from __future__ import annotations

import shutil
from pathlib import Path

from specs import render_spec, short_example, start_with_double

ROOT = Path(__file__).resolve().parent.parent
DOUBLE = Path(__file__).resolve().parent / "doubles" / "vllm"
EXAMPLE = ROOT / "examples" / "llama3-8b-vllm.yaml"


def vllm_spec(tmp: Path, checkpoint: Path, **overrides) -> Path:
    """examples/llama3-8b-vllm.yaml on `checkpoint`, with a short load profile and SLOs a CPU meets."""
    slo = {"ttft_p95_ms": 10000, "itl_p95_ms": 5000, "e2e_p99_ms": 60000, "max_error_rate": 0.0}
    return short_example(EXAMPLE, tmp / "vllm.yaml", checkpoint, slo, **overrides)


def on_cpu(repo: Path) -> Path:
    """The model's instance group as KIND_CPU, everything else of config.pbtxt as rendered."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2 as pb

    path = repo / "tensorrt_llm" / "config.pbtxt"
    header, _, body = path.read_text().partition("\n")
    config = text_format.Parse(body, pb.ModelConfig())
    for group in config.instance_group:
        group.kind = pb.ModelInstanceGroup.Kind.KIND_CPU
        del group.gpus[:]
    path.write_text(f"{header}\n{text_format.MessageToString(config)}")
    return repo


def backends_with_double(folder: Path) -> Path:
    """A backend folder holding the embedded tritonserver's backends (links) and the double as `vllm`."""
    from tritongen.native import BACKENDS
    from tritongen.serve import backend_dir

    backend_dir(folder, BACKENDS)
    # Triton loads a python-based backend (the double, as `vllm`) through python/libtriton_python.so and refuses that
    # library when its real path lies outside the backend folder, as serve's links do: this folder gets a copy, which
    # finds the wheel's bundled libraries through LD_LIBRARY_PATH (start()).
    library = folder / "python" / "libtriton_python.so"
    real = library.resolve()
    library.unlink()
    shutil.copy2(real, library)
    (folder / "vllm").mkdir()
    shutil.copy(DOUBLE / "model.py", folder / "vllm" / "model.py")
    return folder


def render_with_double(tmp: Path, checkpoint: Path, **overrides) -> Path:
    repo = tmp / "model_repository"
    render_spec(vllm_spec(tmp, checkpoint, **overrides), repo)
    return on_cpu(repo)


def start(repo: Path, log: Path, backends: Path, itl_ms: float = 0.0):
    import pytriton

    libs = Path(pytriton.__file__).resolve().parent.parent / "nvidia_pytriton.libs"  # the copied library's RPATH
    return start_with_double(repo, log, itl_ms, f"--backend-directory={backends}", library_path=libs)
