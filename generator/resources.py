"""Where the package's data folders are, installed from a wheel or editable from a checkout."""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path


@functools.cache
def data_dir(package: str) -> Path:
    """The folder of a data-only package (`model_repository_templates`, `deploy_templates`, `loadtests`)."""
    spec = importlib.util.find_spec(f"tritongen.{package}")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"tritongen.{package} is missing from this installation; reinstall tritongen")
    return Path(next(iter(spec.submodule_search_locations)))
