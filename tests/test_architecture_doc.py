"""docs/architecture.md against the code: every module and file it names in backticks exists, and every package
directly under generator/tritongen/ is on the page.

Run as a script, it prints the figures of the page's "Known debts" section, counted on the current tree:
`.venv/bin/python tests/test_architecture_doc.py`.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from test_import_graph import ROOT, _imported, package_modules

DOC = ROOT / "docs" / "architecture.md"
PACKAGE = ROOT / "generator" / "tritongen"
BEING_ADDED = {
    "tritongen.tune": "the `tritongen tune` goodput search",
    "native/CMakeLists.txt": "the native backends' CMake build",
    "native/build.sh": "the native backends' CMake build",
}
"""Names the page lists under "being added this round": skipped while they do not exist, checked once they do."""

_TICKED = re.compile(r"`([^`\n]+)`")
_PATH = re.compile(r"[\w.-]+(?:/[\w.-]+)+/?|[\w-]+/")
_DOTTED = re.compile(r"tritongen(?:\.\w+)+")


def named(text: str) -> list[str]:
    """The paths (with a `/`) and `tritongen.` dotted names written alone in backticks; spans with spaces or
    placeholders (`runtimes/<name>/`) are prose, not names."""
    return [s for s in _TICKED.findall(text) if _PATH.fullmatch(s) or _DOTTED.fullmatch(s)]


def _defines(module: Path, name: str) -> bool:
    """Whether a module binds `name` at its top level (a def, a class, an assignment or an import)."""
    for node in ast.parse(module.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return True
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return True
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            return True
        if isinstance(node, (ast.Import, ast.ImportFrom)) and \
                any((a.asname or a.name.split(".")[0]) == name for a in node.names):
            return True
    return False


def exists(name: str, root: Path = ROOT) -> bool:
    """A path exists relative to the checkout or to generator/tritongen/ (a room-relative `plan/make.py`); a
    dotted name is a module or package of generator/, or a module's module-level name (`tritongen.plan.Plan`)."""
    package = root / "generator" / "tritongen"
    if "/" in name:
        return (root / name).exists() or (package / name).exists()
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        base = root / "generator" / Path(*parts[:i])
        module = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
        if module.is_file():
            rest = parts[i:]
            return not rest or (len(rest) == 1 and _defines(module, rest[0]))
    return False


def packages(root: Path = ROOT) -> list[str]:
    """The packages directly under generator/tritongen/ (folders with an __init__.py)."""
    return sorted(p.parent.name for p in (root / "generator" / "tritongen").glob("*/__init__.py"))


def unmentioned(text: str, names: list[str]) -> list[str]:
    """The packages the page never names, as `generator/tritongen/<pkg>/...`, `<pkg>/...` or `tritongen.<pkg>...`."""
    said = named(text)
    return [p for p in names if not any(
        re.match(rf"(generator/tritongen/)?{p}/|tritongen\.{p}(\.|$)", s) for s in said)]


def missing(text: str, root: Path = ROOT) -> list[str]:
    return sorted({n for n in named(text) if n not in BEING_ADDED and not exists(n, root)})


def test_every_name_on_the_page_exists():
    assert missing(DOC.read_text()) == []


@pytest.mark.parametrize("name", sorted(BEING_ADDED))
def test_the_rooms_being_added_exist_once_they_land(name):
    assert name in named(DOC.read_text()), f"the page no longer names {name}; drop it from BEING_ADDED"
    if not exists(name):
        pytest.skip(f"{name} ({BEING_ADDED[name]}) is not in this tree yet")


def test_every_package_is_on_the_page():
    assert unmentioned(DOC.read_text(), packages()) == []


def test_the_checks_find_a_dead_name_and_a_missing_package():
    page = ("`generator/tritongen/plan/make.py`, `tritongen.plan.make.make_plan`, `plan/model.py`, "
            "`tritongen.runtimes.base.Runtime`, `bench/`, `runtimes/<name>/`, `tritongen tune`\n"
            "`generator/tritongen/plan/gone.py`, `tritongen.plan.make.nothing_here`, `tritongen.nowhere`, `nope/`")
    assert missing(page) == ["generator/tritongen/plan/gone.py", "nope/", "tritongen.nowhere",
                             "tritongen.plan.make.nothing_here"]
    assert unmentioned(page, ["plan", "runtimes", "spec"]) == ["spec"]


# ------------------------------------------------------------------------------------------ the debts' figures

def _function_imports(tree: ast.AST) -> list[ast.stmt]:
    """Import statements that run when a function runs (at any depth inside a def)."""
    found: list[ast.stmt] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        if in_function and isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        inside = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        for child in ast.iter_child_nodes(node):
            visit(child, inside)

    visit(tree, False)
    return found


class _DropFunctionImports(ast.NodeTransformer):
    """Replaces the import statements inside functions with `pass`, leaving the module-level ones."""

    def visit_FunctionDef(self, node):
        dropped = {id(n) for n in _function_imports(ast.Module(body=[node], type_ignores=[]))}

        class Drop(ast.NodeTransformer):
            def generic_visit(self, n):
                return ast.Pass() if id(n) in dropped else super().generic_visit(n)

        return Drop().visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef


def _internal_edges(modules: dict[str, Path], only_module_level: bool) -> set[tuple[str, str]]:
    """(importer, imported) pairs of package modules, drawn as tests/test_import_graph.py draws them."""
    names = set(modules)
    packages_ = {m for m, path in modules.items() if path.name == "__init__.py"}
    edges = set()
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        if only_module_level:
            tree = _DropFunctionImports().visit(tree)
        for target in _imported(tree, name, name in packages_):
            parts = target.split(".")
            for i in range(len(parts), 0, -1):
                candidate = ".".join(parts[:i])
                if candidate in names and not (name == candidate or name.startswith(candidate + ".")):
                    edges.add((name, candidate))
    return edges


def _is_pydantic(cls: ast.ClassDef, models: set[str]) -> bool:
    return any(isinstance(b, ast.Name) and b.id in models for b in cls.bases)


def _type_checking_block(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", "")) == "TYPE_CHECKING"


def _of_tritongen(stmt: ast.stmt) -> bool:
    if isinstance(stmt, ast.ImportFrom):
        return bool(stmt.level) or (stmt.module or "").startswith("tritongen")
    return any(a.name.startswith("tritongen") for a in stmt.names)


def _narrowing(node: ast.AST) -> bool:
    """`assert isinstance(...)`."""
    return isinstance(node, ast.Assert) and isinstance(node.test, ast.Call) and \
        getattr(node.test.func, "id", "") == "isinstance"


def _lines(paths) -> int:
    return sum(len(p.read_text().splitlines()) for p in paths)


def debts() -> dict:
    """The figures of docs/architecture.md's "Known debts", counted on the current tree."""
    modules = package_modules()
    trees = {name: ast.parse(path.read_text()) for name, path in modules.items()}

    def members(cls: ast.ClassDef) -> dict:
        methods = [n for n in cls.body if isinstance(n, ast.FunctionDef)]
        abstract = [m.name for m in methods
                    if any(getattr(d, "id", None) == "abstractmethod" for d in m.decorator_list)]
        attributes = [n for n in cls.body if isinstance(n, (ast.AnnAssign, ast.Assign))]
        return {"total": len(methods) + len(attributes), "methods": len(methods), "class_attributes": len(attributes),
                "abstract": abstract, "optional_methods": len(methods) - len(abstract)}

    roles = ("_Owns", "Planning", "Repository", "Launch", "EngineBuilder", "Clients", "Runtime")
    runtime_classes = {n.name: n for n in trees["tritongen.runtimes.base"].body if isinstance(n, ast.ClassDef)}

    upward: dict[str, list[str]] = {}
    for name, tree in trees.items():
        if name.startswith("tritongen.runtimes"):
            for block in filter(_type_checking_block, ast.walk(tree)):
                upward_here = [stmt.module for stmt in block.body if isinstance(stmt, ast.ImportFrom)
                               and re.match(r"tritongen\.(plan|render|spec)\b", stmt.module or "")]
                if upward_here:
                    upward.setdefault(name, []).extend(upward_here)

    # The spec's sections: spec/ and the runtimes' own (runtimes/<name>/spec.py), on tritongen.spec_base.
    spec_modules = sorted(n for n in trees if re.fullmatch(r"tritongen\.spec(\..+)?|tritongen\.runtimes\.\w+\.spec", n))
    models, classes, runtime_sections = {"BaseModel", "Section", "RuntimeSection"}, [], []
    for name in spec_modules:
        for node in trees[name].body:
            if isinstance(node, ast.ClassDef) and _is_pydantic(node, models):
                models.add(node.name)
                classes.append(node)
                if name.startswith("tritongen.runtimes."):
                    runtime_sections.append(node.name)

    def fields(cls: ast.ClassDef) -> list[str]:
        return [n.target.id for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)]

    served = PACKAGE / "served"
    native = PACKAGE / "native"
    shipping = ("tritongen.render", "tritongen.runtimes.hf", "tritongen.runtimes.synthetic")
    by_file = sorted({n.value.id for name in shipping for n in ast.walk(trees[name]) if isinstance(n, ast.Attribute)
                      and n.attr == "__file__" and isinstance(n.value, ast.Name)})
    function_imports = {name: _function_imports(tree) for name, tree in trees.items()}
    every = _internal_edges(modules, only_module_level=False)
    module_level = _internal_edges(modules, only_module_level=True)

    return {
        "runtime_members": {name: members(runtime_classes[name]) for name in roles if name in runtime_classes},
        "assert_isinstance_narrowings": sum(_narrowing(n) for tree in trees.values() for n in ast.walk(tree)),
        "runtimes_type_only_upward": {"modules": len(upward), "imports": sum(map(len, upward.values())),
                                      "by_module": upward},
        "spec": {"files": {str(modules[n].relative_to(PACKAGE)): len(modules[n].read_text().splitlines())
                           for n in spec_modules},
                 "pydantic_classes": len(classes), "in_runtime_packages": runtime_sections,
                 "serving_fields": next((len(fields(c)) for c in classes if c.name == "ServingSection"), None),
                 "max_batch_size_in": [c.name for c in classes if "max_batch_size" in fields(c)]},
        "served_code": {"python_lines": _lines(served.glob("*.py")),
                        "python_files": len(list(served.glob("*.py"))),
                        "python_files_under_templates": len(list((ROOT / "model_repository_templates").rglob("*.py"))),
                        "modules_shipped_by___file__": by_file,
                        "table_loaded_by_path": any("spec_from_file_location" in p.read_text()
                                                    for p in PACKAGE.rglob("*.py")),
                        "cpp_lines": _lines([*native.glob("*.cc"), *native.glob("*.h")])},
        "in_function_imports": {"statements": sum(map(len, function_imports.values())),
                                "of_tritongen": sum(map(_of_tritongen, sum(function_imports.values(), []))),
                                "modules_with_any": sum(1 for stmts in function_imports.values() if stmts),
                                "internal_edges": len(every),
                                "edges_only_inside_functions": len(every - module_level)},
    }


def test_in_function_imports_are_counted():
    tree = ast.parse("import os\ndef f():\n    import json\n    class A:\n        def g(self):\n"
                     "            from . import x\n    return json\nclass B:\n    import re\n")
    assert [type(n).__name__ for n in _function_imports(tree)] == ["Import", "ImportFrom"]


if __name__ == "__main__":
    print(json.dumps(debts(), indent=1))
