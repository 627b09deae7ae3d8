"""Serving a `runtime: trtllm` repository here: the rendered config.pbtxt and model.yaml, with the test double of
NVIDIA's llmapi model (tests/doubles/llmapi) in place of NVIDIA's model code, which only the TensorRT-LLM
container has."""

from __future__ import annotations

import shutil
from pathlib import Path

from specs import render_spec, short_example, start_with_double

ROOT = Path(__file__).resolve().parent.parent
DOUBLE = Path(__file__).resolve().parent / "doubles" / "llmapi"
EXAMPLE = ROOT / "examples" / "llama3-8b-llmapi.yaml"


def llmapi_spec(tmp: Path, checkpoint: Path, **overrides) -> Path:
    """examples/llama3-8b-llmapi.yaml on `checkpoint`, with a short load profile."""
    return short_example(EXAMPLE, tmp / "llmapi.yaml", checkpoint, **overrides)


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
    return start_with_double(repo, log, itl_ms)
