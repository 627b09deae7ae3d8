"""docs/architecture.md against the code: every module and file it names in backticks exists, every package
directly under generator/tritongen/ is on the page, and every figure the page states is the tree's.

A figure on the page is a number (or a short value) followed by `<!--fig:KEY-->` (invisible when rendered);
`figures()` counts each KEY on the current tree. The rooms' layer table sits between `<!--layers-->` and
`<!--/layers-->` and is `layer_table()`. After a change to the tree:

    .venv/bin/python tests/test_architecture_doc.py           # prints what differs (and every figure as JSON)
    .venv/bin/python tests/test_architecture_doc.py --write   # rewrites the page's figures and layer table
"""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path

from test_import_graph import ROOT, _imported, folder_graph, package_graph, package_modules

DOC = ROOT / "docs" / "architecture.md"
PACKAGE = ROOT / "generator" / "tritongen"
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
    return sorted({n for n in named(text) if not exists(n, root)})


def test_every_name_on_the_page_exists():
    assert missing(DOC.read_text()) == []


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


def _of_tritongen(stmt: ast.stmt) -> bool:
    if isinstance(stmt, ast.ImportFrom):
        return bool(stmt.level) or (stmt.module or "").startswith("tritongen")
    return any(a.name.startswith("tritongen") for a in stmt.names)


def _narrowing(node: ast.AST) -> bool:
    """`assert isinstance(...)`."""
    return isinstance(node, ast.Assert) and isinstance(node.test, ast.Call) and \
        getattr(node.test.func, "id", "") == "isinstance"


def _type_checking_block(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", "")) == "TYPE_CHECKING"


def _lines(paths) -> int:
    return sum(len(p.read_text().splitlines()) for p in paths)


def _constant(path: Path, pattern: str) -> str:
    """The first group of `pattern` in a source file: a constant the page quotes (a period, a default)."""
    found = re.search(pattern, path.read_text())
    assert found, f"{path}: no match for {pattern!r}; the code changed: update figures() and the page"
    return found.group(1)


def _members(cls: ast.ClassDef) -> int:
    """Methods and class attributes a role class declares."""
    return sum(isinstance(n, (ast.FunctionDef, ast.AnnAssign, ast.Assign)) for n in cls.body)


def _module_assign(path: Path, name: str):
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"{path}: no module-level {name}")


ROLES = ("Planning", "Repository", "Launch", "EngineBuilder", "Clients")
STAGE_ROOMS = ("runtimes", "plan", "spec", "render", "native")
"""Rooms where an import inside a function is a debt (elsewhere each has its reason: a heavy or optional
dependency, the CLI's start, gevent's monkey-patching)."""


def figures() -> dict[str, int | str]:
    """Every figure docs/architecture.md states, counted on the current tree."""
    modules = package_modules()
    trees = {name: ast.parse(path.read_text()) for name, path in modules.items()}
    function_imports = {name: _function_imports(tree) for name, tree in trees.items()}
    every = _internal_edges(modules, only_module_level=False)
    module_level = _internal_edges(modules, only_module_level=True)
    in_stages = [stmt for name, stmts in function_imports.items() for stmt in stmts
                 if name.split(".")[1:2] and name.split(".")[1] in STAGE_ROOMS]
    classes = {n.name: n for n in trees["tritongen.runtimes.base"].body if isinstance(n, ast.ClassDef)}
    upward = [stmt for name, tree in trees.items() if name.startswith("tritongen.runtimes")
              for block in filter(_type_checking_block, ast.walk(tree)) for stmt in block.body
              if isinstance(stmt, ast.ImportFrom) and re.match(r"tritongen\.(plan|render|spec)\b", stmt.module or "")]
    served = sorted((PACKAGE / "served").glob("*.py"))
    native = PACKAGE / "native"
    cpp = sorted(p for p in native.rglob("*") if p.suffix in (".cc", ".h"))
    largest = max(cpp, key=lambda p: len(p.read_text().splitlines()))
    errors = PACKAGE / "errors.py"
    exit_codes = {n.name: next(ast.literal_eval(a.value) for a in n.body if isinstance(a, ast.Assign)
                               and any(getattr(t, "id", "") == "exit_code" for t in a.targets))
                  for n in ast.parse(errors.read_text()).body if isinstance(n, ast.ClassDef)}
    edges, only_inside = len(every), len(every - module_level)
    return {
        "modules": len(modules),
        "rooms": len({name.split(".")[1] for name in modules if "." in name}),
        "internal_edges": edges,
        "function_imports": sum(map(len, function_imports.values())),
        "function_imports_of_tritongen": sum(map(_of_tritongen, sum(function_imports.values(), []))),
        "modules_with_function_imports": sum(1 for stmts in function_imports.values() if stmts),
        "edges_only_inside_functions": only_inside,
        "edges_only_inside_functions_percent": f"{round(100 * only_inside / edges)}%",
        "function_imports_in_stage_rooms": len(in_stages),
        "function_imports_in_stage_rooms_of_tritongen": sum(map(_of_tritongen, in_stages)),
        **{f"role_members.{role}": _members(classes[role]) for role in ROLES},
        "assert_isinstance_narrowings": sum(_narrowing(n) for tree in trees.values() for n in ast.walk(tree)),
        "runtimes_type_only_upward_imports": len(upward),
        "served_lines": _lines(served),
        "served_modules": len(served),
        "cpp_lines": _lines(cpp),
        "cpp_files": len(cpp),
        "cpp_bls_lines": _lines(p for p in cpp if p.parent.name == "bls"),
        "cpp_tokensource_lines": _lines(p for p in cpp if p.parent.name == "tokensource"),
        "cpp_shared_lines": _lines(p for p in cpp if p.parent == native),
        "cpp_largest_file": str(largest.relative_to(PACKAGE)),
        "cpp_largest_file_lines": len(largest.read_text().splitlines()),
        "plan_format": _module_assign(PACKAGE / "plan" / "model.py", "PLAN_FORMAT"),
        "exit_check_failed": exit_codes["CheckFailed"],
        "exit_bad_input": exit_codes["SpecError"],
        "exit_missing": exit_codes["EnvironmentMissing"],
        "exit_internal": _module_assign(errors, "INTERNAL_ERROR_EXIT"),
        "bls_watch_ms": int(_constant(native / "bls" / "backend.cc", r"watcher_cv_\.wait_for\(lk, std::chrono::milliseconds\((\d+)\)\)")),
        "bls_table_wait_s": int(_constant(native / "bls" / "backend.cc", r"tables_->Ensure\(std::chrono::seconds\((\d+)\)\)")),
        "drain_default_s": int(_constant(native / "backend_util.h", r"double seconds = (\d+);")),
        "drain_poll_ms": int(_constant(native / "backend_util.h", r"now - last < (\d+)000000\b")),
        "timer_threads_max": int(_constant(native / "tokensource" / "model.cc", r"std::min\((\d+)u, hw\)")),
    }


# ------------------------------------------------------------------------------------------ the page's figures

_FIGURE = re.compile(r"(`?)([^\s`<>()]+)\1<!--fig:([\w.]+)-->")


def shown(value: int | str) -> str:
    """A figure as the page writes it: integers with thousands separators."""
    return f"{value:,}" if isinstance(value, int) else value


def stated(text: str) -> dict[str, list[str]]:
    """KEY -> the values the page states for it (a key may appear more than once)."""
    out: dict[str, list[str]] = {}
    for _, value, key in _FIGURE.findall(text):
        out.setdefault(key, []).append(value)
    return out


def disagreements(text: str, counted: dict[str, int | str]) -> list[str]:
    problems = []
    on_page = stated(text)
    for key, values in sorted(on_page.items()):
        if key not in counted:
            problems.append(f"{key}: on the page but not counted by figures() (a typo, or add it there)")
        for value in values:
            if key in counted and value != shown(counted[key]):
                problems.append(f"{key}: the page says {value}, the tree has {shown(counted[key])}")
    problems += [f"{key}: counted ({shown(counted[key])}) but not on the page" for key in counted if key not in on_page]
    return problems


def with_figures(text: str, counted: dict[str, int | str]) -> str:
    return _FIGURE.sub(lambda m: f"{m.group(1)}{shown(counted.get(m.group(3), m.group(2)))}{m.group(1)}"
                                 f"<!--fig:{m.group(3)}-->", text)


# ------------------------------------------------------------------------------------------ the layer table

_LAYERS = re.compile(r"(<!--layers-->\n)(.*?)(<!--/layers-->)", re.DOTALL)


def layers(graph: dict[str, set[str]]) -> dict[str, int]:
    """A room's layer: 0 when it imports no other room, else one above the highest room it imports."""
    rooms = set(graph) | {b for deps in graph.values() for b in deps}
    memo: dict[str, int] = {}

    def layer(room: str) -> int:
        if room not in memo:
            memo[room] = 1 + max((layer(d) for d in graph.get(room, ())), default=-1)
        return memo[room]

    return {room: layer(room) for room in sorted(rooms)}


def layer_table(graph: dict[str, set[str]] | None = None) -> str:
    graph = folder_graph(package_graph()) if graph is None else graph
    level = layers(graph)
    rows = ["| layer | room | imports |", "|---|---|---|"]
    for room in sorted((r for r in level if graph.get(r)), key=lambda r: (-level[r], r)):
        rows.append(f"| {level[room]} | {room} | {', '.join(sorted(graph[room]))} |")
    leaves = sorted(r for r in level if not graph.get(r))
    rows.append(f"| 0 | {', '.join(leaves)} | nothing of tritongen |")
    return "\n".join(rows) + "\n"


def page_layer_table(text: str) -> str | None:
    found = _LAYERS.search(text)
    return found.group(2) if found else None


def rewrite(text: str) -> str:
    text = with_figures(text, figures())
    return _LAYERS.sub(lambda m: m.group(1) + layer_table() + m.group(3), text)


# ------------------------------------------------------------------------------------------ tests

def test_every_figure_on_the_page_is_the_trees():
    problems = disagreements(DOC.read_text(), figures())
    assert problems == [], ("docs/architecture.md disagrees with the tree; run "
                            "`.venv/bin/python tests/test_architecture_doc.py --write` and read the diff:\n  "
                            + "\n  ".join(problems))


def test_the_layer_table_is_the_trees():
    assert page_layer_table(DOC.read_text()) == layer_table(), \
        "the layer table of docs/architecture.md is stale; run `.venv/bin/python tests/test_architecture_doc.py --write`"


def test_the_figure_check_finds_a_wrong_a_missing_and_an_unknown_figure():
    page = "85<!--fig:a--> imports, `x/y.cc`<!--fig:b--> (2,230<!--fig:c--> lines), 3<!--fig:zz-->, and 85<!--fig:a-->"
    counted = {"a": 85, "b": "x/y.cc", "c": 3065, "d": 1}
    assert disagreements(page, counted) == ["c: the page says 2,230, the tree has 3,065",
                                            "zz: on the page but not counted by figures() (a typo, or add it there)",
                                            "d: counted (1) but not on the page"]
    assert with_figures(page, counted) == page.replace("2,230", "3,065")


def test_layers_are_one_above_the_highest_import():
    graph = {"cli": {"plan", "errors"}, "plan": {"errors"}, "errors": set(), "console": set()}
    assert layers(graph) == {"cli": 2, "console": 0, "errors": 0, "plan": 1}
    assert layer_table(graph).splitlines()[2:] == ["| 2 | cli | errors, plan |", "| 1 | plan | errors |",
                                                   "| 0 | console, errors | nothing of tritongen |"]


def test_in_function_imports_are_counted():
    tree = ast.parse("import os\ndef f():\n    import json\n    class A:\n        def g(self):\n"
                     "            from . import x\n    return json\nclass B:\n    import re\n")
    assert [type(n).__name__ for n in _function_imports(tree)] == ["Import", "ImportFrom"]


if __name__ == "__main__":
    text = DOC.read_text()
    if sys.argv[1:] == ["--write"]:
        DOC.write_text(rewrite(text))
        print(f"rewrote {DOC.relative_to(ROOT)}")
    else:
        print(json.dumps(figures(), indent=1))
        for line in disagreements(text, figures()):
            print("differs:", line, file=sys.stderr)
        if page_layer_table(text) != layer_table():
            print("differs: the layer table; the tree's:\n" + layer_table(), file=sys.stderr)
