"""The package's layout as pyproject declares it: every package folder listed, templates as package data."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _declared() -> tuple[list[str], dict[str, str]]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    return data["packages"], data["package-dir"]


def _folder(package: str, package_dir: dict[str, str]) -> Path:
    """The source folder of a dotted package name under pyproject's package-dir mapping."""
    parts = package.split(".")
    for n in range(len(parts), 0, -1):
        prefix = ".".join(parts[:n])
        if prefix in package_dir:
            return ROOT / package_dir[prefix] / Path(*parts[n:])
    raise AssertionError(f"{package}: no package-dir entry maps it")


def test_every_python_package_folder_is_declared():
    packages, package_dir = _declared()
    declared = {_folder(p, package_dir).resolve() for p in packages}
    for top in ("generator", "loadtests"):
        for init in (ROOT / top).rglob("__init__.py"):
            assert init.parent.resolve() in declared, f"{init.parent} is a package missing from pyproject's packages"


def test_template_folders_are_package_data():
    packages, package_dir = _declared()
    assert _folder("tritongen.model_repository_templates", package_dir) == ROOT / "model_repository_templates"
    assert _folder("tritongen.deploy_templates", package_dir) == ROOT / "deploy" / "templates"
    assert {"tritongen.model_repository_templates", "tritongen.deploy_templates"} <= set(packages)


def test_installed_package_finds_its_templates():
    from tritongen.resources import data_dir

    assert (data_dir("model_repository_templates") / "ensemble" / "config.pbtxt.j2").is_file()
    assert any(data_dir("deploy_templates").glob("*.j2"))
    assert (data_dir("loadtests") / "locustfile.py").is_file()
