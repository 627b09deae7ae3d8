"""The package's layout: the import path is the file path (generator/tritongen/...), templates as package data."""

from __future__ import annotations

import importlib
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "generator" / "tritongen"


def test_pyproject_maps_no_import_name_onto_another_folder():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert pyproject["build-system"]["build-backend"] == "scikit_build_core.build"
    build = pyproject["tool"]["scikit-build"]
    # The wheel's package is the folder of the same name (no renames), and CMake builds the native backends with it.
    assert build["wheel"]["packages"] == ["generator/tritongen"]
    assert build["cmake"]["source-dir"] == "generator/tritongen/native"


def test_every_module_imports_from_the_file_its_name_names():
    for init in PACKAGE.rglob("__init__.py"):
        rel = init.parent.relative_to(ROOT / "generator")
        if "data" in rel.parts:
            continue
        name = ".".join(rel.parts)
        module = importlib.import_module(name)
        assert Path(module.__file__).resolve() == init.resolve(), name


def test_templates_are_the_top_level_folders():
    from tritongen.resources import data_dir

    assert data_dir("model_repository_templates").resolve() == ROOT / "model_repository_templates"
    assert data_dir("deploy_templates").resolve() == ROOT / "deploy" / "templates"
    assert (data_dir("model_repository_templates") / "ensemble" / "config.pbtxt.j2").is_file()
    assert any(data_dir("deploy_templates").glob("*.j2"))


def test_the_load_test_runs_the_packaged_locustfile():
    from tritongen.loadtests.distributed import LOCUSTFILE

    assert LOCUSTFILE == PACKAGE / "loadtests" / "locustfile.py"
    assert LOCUSTFILE.is_file() and (ROOT / "loadtests" / "locustfile.py").is_file()


def test_tests_mirror_the_packages():
    """tests/<package>/ holds the tests of tritongen.<package>; tests/ itself those of the top-level modules and of
    the package as a whole. A folder of tests with no package of that name fails here."""
    tests = ROOT / "tests"
    packages = {p.parent.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("__init__.py")}
    folders = {p.parent.relative_to(tests).as_posix() for p in tests.rglob("test_*.py")} - {"."}
    assert folders, "tests are expected in per-package folders"
    assert folders <= packages, f"test folders without a package of that name: {sorted(folders - packages)}"
    names = [p.name for p in tests.rglob("test_*.py")]
    assert len(names) == len(set(names)), "test file basenames must be unique across tests/ (pytest rootdir imports)"
