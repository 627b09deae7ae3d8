"""Where the package's data folders are, installed from a wheel or editable from a checkout."""

from __future__ import annotations

from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"
# In a checkout these are links to the fixed top-level folders model_repository_templates/ and deploy/templates/;
# in a wheel or an sdist, copies of them (scikit-build-core stores the links' content).
_FOLDERS = ("model_repository_templates", "deploy_templates")


def data_dir(name: str) -> Path:
    """The folder of one of the package's data folders (`model_repository_templates`, `deploy_templates`)."""
    if name not in _FOLDERS:
        raise ValueError(f"no data folder {name!r}; one of {_FOLDERS}")
    path = DATA / name
    if not path.is_dir():
        raise FileNotFoundError(f"{path} is missing from this installation; reinstall tritongen")
    return path
