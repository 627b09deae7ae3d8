"""Shared fixtures: the tiny demo model, its rendered repository, and one real tritonserver per session.

A test that starts a tritonserver (itself or through a fixture) must carry the `integration` marker, so that
`-m "not integration"` starts none: the guard below fails any other test the moment it starts one.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "tiny-cpu.yaml"


class TritonserverOutsideIntegration(AssertionError):
    """A test without the `integration` marker started a tritonserver."""


def starts_tritonserver(args) -> bool:
    """Whether a command starts a tritonserver: the binary itself, or a tritongen command that runs one (`serve`
    of a repository without --triton-url, `up`, `demo`)."""
    argv = [str(a) for a in ([args] if isinstance(args, (str, os.PathLike)) else args)]
    if any(os.path.basename(a) == "tritonserver" for a in argv):
        return True
    names = [os.path.basename(a) for a in argv]
    if "tritongen" not in names:
        return False
    rest = argv[names.index("tritongen") + 1:]
    return bool(rest) and (rest[0] in ("up", "demo") or (rest[0] == "serve" and "--triton-url" not in rest))


_current = {"item": None}


class _GuardedPopen(subprocess.Popen):
    def __init__(self, args, *rest, **kwargs):
        item = _current["item"]
        if item is not None and item.get_closest_marker("integration") is None and starts_tritonserver(args):
            raise TritonserverOutsideIntegration(
                f"{item.nodeid} starts a tritonserver ({' '.join(map(str, args))[:200]}) but is not marked "
                "`integration`: mark it (or the module: pytestmark = pytest.mark.integration)")
        super().__init__(args, *rest, **kwargs)


def pytest_configure(config):
    subprocess.Popen = _GuardedPopen


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    # Set for setup, call and teardown alike: a session fixture starts its server in the setup of its first user.
    _current["item"] = item
    try:
        yield
    finally:
        _current["item"] = None


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
