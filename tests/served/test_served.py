"""The served package (tritongen.served): what render ships into a repository is a package of the generator,
checked by pyflakes, importable here, and laid out in a version folder so that its relative imports resolve there
as they do here."""

from __future__ import annotations

import ast
import importlib
import json
import sys
from pathlib import Path

import pytest

from tritongen import contract, served
from tritongen.served import wiring

PACKAGE = Path(served.__file__).parent


def _relative_imports(module: str) -> set[str]:
    """The package modules `module` imports relatively (`from .x import y`, `from . import x`)."""
    names = set()
    for node in ast.walk(ast.parse(served.source(module))):
        if isinstance(node, ast.ImportFrom) and node.level:
            assert node.level == 1, f"{module}: relative imports reach only beside the model ({ast.unparse(node)})"
            names.update([node.module] if node.module else [a.name for a in node.names])
    return names


def _tritongen_imports(module: str) -> list[str]:
    return [ast.unparse(n) for n in ast.walk(ast.parse(served.source(module)))
            if isinstance(n, (ast.Import, ast.ImportFrom)) and not getattr(n, "level", 0)
            and any((getattr(n, "module", None) or a.name).split(".")[0] == "tritongen" for a in n.names)]


def _closure(model: str) -> set[str]:
    todo, seen = [model], set()
    while todo:
        module = todo.pop()
        for name in _relative_imports(module) - seen:
            seen.add(name)
            todo.append(name)
    return seen


@pytest.mark.parametrize("model", sorted(served.SHIPPED))
def test_each_model_ships_exactly_the_modules_it_imports(model):
    assert set(served.SHIPPED[model]) == _closure(model)


def test_every_module_of_the_package_is_shipped_and_imports_nothing_else_of_tritongen():
    modules = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__"}
    shipped = set(served.SHIPPED) | {m for helpers in served.SHIPPED.values() for m in helpers}
    assert modules == shipped
    assert {m: _tritongen_imports(m) for m in modules} == {m: [] for m in modules}


def test_the_package_is_pyflakes_clean():
    api = pytest.importorskip("pyflakes.api", reason="pyflakes is a dev dependency (pip install -e .[dev])")
    from pyflakes.reporter import Reporter

    class Collect:
        def __init__(self):
            self.lines = []

        def write(self, text):
            self.lines.append(text)

    out = Collect()
    assert api.checkRecursive([str(PACKAGE)], Reporter(out, out)) == 0, "".join(out.lines)


def test_a_version_folder_holds_the_model_as_model_py_and_its_modules_beside_it():
    files = served.model_files("bls", "tensorrt_llm_bls/1")
    assert sorted(files) == ["tensorrt_llm_bls/1/detokenizer.py", "tensorrt_llm_bls/1/error_kinds.py",
                             "tensorrt_llm_bls/1/lora_resend.py", "tensorrt_llm_bls/1/model.py",
                             "tensorrt_llm_bls/1/stub.py", "tensorrt_llm_bls/1/wiring.py"]
    assert files["tensorrt_llm_bls/1/model.py"] == (PACKAGE / "bls.py").read_bytes()
    with pytest.raises(ValueError, match="no served model 'tokenizer'"):
        served.model_files("tokenizer", "x/1")


@pytest.fixture(scope="module")
def backend_utils():
    """triton_python_backend_utils from the wheel's python backend, as the stub's interpreter sees it."""
    from tritongen.serve import _pytriton_root

    folder = str(_pytriton_root() / "backends" / "python")
    sys.path.insert(0, folder)
    yield
    sys.path.remove(folder)


@pytest.mark.parametrize("model", sorted(served.SHIPPED))
def test_each_model_imports_as_a_module_of_the_package(backend_utils, model):
    assert callable(importlib.import_module(f"tritongen.served.{model}").TritonPythonModel)


def test_the_wiring_reader_reads_the_tables_render_writes(tmp_path):
    (tmp_path / wiring.FILE).write_text(json.dumps(contract.bls_wiring()))
    read = wiring.load(str(tmp_path))
    assert read == wiring.Wiring.of(contract.bls_wiring())
    assert read.to_preprocessing["text_input"] == "QUERY" and "output_log_probs" in read.passed_outputs


def test_a_rendered_version_folder_imports_as_the_stub_imports_it(tmp_path, backend_utils, monkeypatch):
    """The python backend's stub imports <model>/1/model.py as the module `1.model` with the model folder on
    sys.path (observed with the wheel's tritonserver 2.51), so the relative imports resolve inside `1/`."""
    for rel, data in served.model_files("synthetic", "tensorrt_llm/1").items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(data)
    monkeypatch.syspath_prepend(str(tmp_path / "tensorrt_llm"))
    for name in [n for n in sys.modules if n == "1" or n.startswith("1.")]:
        monkeypatch.delitem(sys.modules, name)
    model = importlib.import_module("1.model")
    assert Path(model.__file__).parent == tmp_path / "tensorrt_llm" / "1"
    assert Path(model.engine_model.__file__).parent == tmp_path / "tensorrt_llm" / "1"
