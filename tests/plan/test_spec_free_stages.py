"""Stages after planning read the Plan, not the spec: their modules import nothing from tritongen.spec (annotations
under TYPE_CHECKING included), and the Plan's own types use no spec type for what they own."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "generator" / "tritongen"

# The engine build, everything `deploy` writes, and the load test (it runs the Plan's load profile).
SPEC_FREE = [PACKAGE / "runtimes" / "tensorrtllm" / "__init__.py", PACKAGE / "runtimes" / "tensorrtllm" / "build.py",
             PACKAGE / "plan" / "deploy.py", *sorted((PACKAGE / "deploy").glob("*.py")),
             *sorted((PACKAGE / "loadtests").glob("*.py")), PACKAGE / "cli" / "load.py"]
# plan/model.py takes no type from the spec: the Plan owns its deploy, load and SLO sections.
MODEL_ALLOWED: set[str] = set()


def spec_imports(path: Path) -> set[str]:
    """Names a module imports from tritongen.spec (or its submodules), wherever the import statement is."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[:2] == ["tritongen", "spec"]:
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names if a.name.split(".")[:2] == ["tritongen", "spec"])
    return names


def test_build_and_deploy_modules_import_nothing_from_the_spec():
    assert {str(p.relative_to(PACKAGE)): spec_imports(p) for p in SPEC_FREE if spec_imports(p)} == {}


def test_the_plan_model_takes_no_type_from_the_spec():
    assert spec_imports(PACKAGE / "plan" / "model.py") <= MODEL_ALLOWED


def test_the_check_sees_imports_under_type_checking(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from tritongen.spec import Spec\n")
    assert spec_imports(module) == {"Spec"}
