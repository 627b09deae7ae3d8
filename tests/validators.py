"""The offline validators the deployment tests run: docker-compose (v1) `config` and `kubectl kustomize`."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml


def compose_config(out: Path) -> dict:
    """`docker-compose config` in `out` (must pass); the resolved compose file."""
    if not shutil.which("docker-compose"):
        pytest.skip("docker-compose (v1) not on PATH: apt-get install -y --no-install-recommends docker-compose")
    proc = subprocess.run(["docker-compose", "config"], cwd=out, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return yaml.safe_load(proc.stdout)


def kustomize(path: Path) -> list[dict]:
    """`kubectl kustomize path` (must pass); the built documents."""
    if not shutil.which("kubectl"):
        pytest.skip("kubectl not on PATH")
    proc = subprocess.run(["kubectl", "kustomize", str(path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]
