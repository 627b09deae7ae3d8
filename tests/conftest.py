"""Shared fixtures: the tiny demo model, its rendered repository, and one real tritonserver per session."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "tiny-cpu.yaml"


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    from tritongen.demo.model import make_demo_model

    return make_demo_model(tmp_path_factory.mktemp("models") / "tiny-llama")


@pytest.fixture(scope="session")
def tiny_spec_path(tmp_path_factory, tiny_model) -> Path:
    """examples/tiny-cpu.yaml with its checkpoint pointed at the session's tiny model."""
    data = yaml.safe_load(EXAMPLE.read_text())
    data["model"]["checkpoint"] = str(tiny_model)
    path = tmp_path_factory.mktemp("spec") / "tiny-cpu.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture(scope="session")
def tiny_repo(tmp_path_factory, tiny_spec_path) -> Path:
    from specs import render_spec

    out = tmp_path_factory.mktemp("repo") / "model_repository"
    render_spec(tiny_spec_path, out)
    return out


@pytest.fixture(scope="session")
def triton(tiny_repo, tmp_path_factory):
    """One real tritonserver serving the tiny repository for the whole session."""
    from streaming_text import start_server

    server = start_server(tiny_repo, tmp_path_factory.mktemp("logs") / "tritonserver.log")
    yield server
    server.stop()
