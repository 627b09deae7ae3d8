"""Serving a `runtime: trtllm` repository here: the rendered config.pbtxt and model.yaml, with the test double of
NVIDIA's llmapi model (tests/doubles/llmapi) in place of NVIDIA's model code, which only the TensorRT-LLM
container has."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import yaml

from specs import apply_overrides, render_spec

ROOT = Path(__file__).resolve().parent.parent
DOUBLE = Path(__file__).resolve().parent / "doubles" / "llmapi"
EXAMPLE = ROOT / "examples" / "llama3-8b-llmapi.yaml"


def llmapi_spec(tmp: Path, checkpoint: Path, **overrides) -> Path:
    """examples/llama3-8b-llmapi.yaml on `checkpoint`, with a short load profile."""
    data = yaml.safe_load(EXAMPLE.read_text())
    data["model"].update(checkpoint=str(checkpoint), dtype="float32")
    data["validation"]["load"].update(users=2, spawn_rate=2, duration_s=4, input_tokens={"mean": 16, "stddev": 0},
                                      output_tokens={"mean": 16, "stddev": 0})
    apply_overrides(data, overrides)
    path = tmp / "llmapi.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def add_double(repo: Path) -> Path:
    """Put the double's model.py (and the facts it reads) where the container would put NVIDIA's."""
    for name in ("model.py", "facts.json"):
        shutil.copy(DOUBLE / name, repo / "tensorrt_llm" / "1" / name)
    return repo


def render_with_double(tmp: Path, checkpoint: Path, **overrides) -> Path:
    repo = tmp / "model_repository"
    render_spec(llmapi_spec(tmp, checkpoint, **overrides), repo)
    return add_double(repo)


def start(repo: Path, log: Path, itl_ms: float = 5.0):
    from tritongen.serve import TritonServer

    server = TritonServer(repo, log_path=log, env={**os.environ, "TRITONGEN_DOUBLE_ITL_MS": str(itl_ms)})
    try:
        server.start(timeout=300)
    except Exception:
        print(server.log_tail(80))
        raise
    return server
