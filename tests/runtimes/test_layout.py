"""Every runtime package is laid out the same way, so a reader predicts the file: runtime.py (the Runtime class and
RUNTIME), settings.py (its section of the Plan), spec.py (its section of the spec, where it has one), dialect.py
(how clients speak to its own model, where it has one); its __init__.py only re-exports."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from tritongen.runtimes import RUNTIMES


def _package(rt) -> str:
    module = type(rt).__module__
    assert module.endswith(".runtime"), f"{type(rt).__name__} is defined in {module}, not in its package's runtime.py"
    return module.rsplit(".", 1)[0]


@pytest.mark.parametrize("name", list(RUNTIMES))
def test_each_runtime_keeps_each_part_in_its_file(name):
    rt = RUNTIMES[name]
    package = _package(rt)
    assert importlib.import_module(f"{package}.runtime").RUNTIME is rt
    assert rt.settings.__module__ == f"{package}.settings"
    if rt.spec_section is not None:
        assert rt.spec_section.__module__ == f"{package}.spec"
    if (dialect := rt.dialect()) is not None:
        assert type(dialect).__module__ == f"{package}.dialect"


def init_problems(source: str) -> list[str]:
    """What an __init__.py holds besides its docstring, imports and __all__."""
    out = []
    for i, node in enumerate(ast.parse(source).body):
        if i == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["__all__"]:
            continue
        out.append(f"line {node.lineno}: {type(node).__name__}")
    return out


@pytest.mark.parametrize("name", list(RUNTIMES))
def test_a_runtime_package_init_only_re_exports(name):
    init = Path(importlib.import_module(_package(RUNTIMES[name])).__file__)
    assert init.name == "__init__.py"
    assert init_problems(init.read_text()) == []


def test_the_init_check_finds_code():
    assert init_problems('"""doc"""\nfrom a import b\n__all__ = ["b"]\n') == []
    assert init_problems('"""doc"""\nfrom a import b\nclass R:\n    pass\nRUNTIME = R()\n') == ["line 3: ClassDef",
                                                                                          "line 5: Assign"]
