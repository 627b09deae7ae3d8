"""The package's import graph: no circles, and no stage imports `pipeline` or `cli` (imports run one way).

An edge is every import that executes (module level or inside a function); imports under `if TYPE_CHECKING:`
never run and are left out. Importing `a.b.c` also runs the `__init__` of `a.b` and `a`, so those packages are
edges too, unless the importer lives inside them (a package is always initialised before its own modules).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ONE_WAY = ("tritongen.pipeline", "tritongen.cli")


def package_modules() -> dict[str, Path]:
    """Every module of the package: import name -> file (the import path is the file path under generator/)."""
    base = ROOT / "generator"
    modules: dict[str, Path] = {}
    for path in (base / "tritongen").rglob("*.py"):  # rglob does not enter the links to the data folders
        parts = [p for p in path.relative_to(base).with_suffix("").parts if p != "__init__"]
        modules[".".join(parts)] = path
    return modules


def _type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or \
        (isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _imported(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    """Dotted names this module's executed imports load (for `from x import y`: x.y when it is a module)."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                anchor = anchor[:len(anchor) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def import_graph(modules: dict[str, str], packages: set[str] | None = None) -> dict[str, set[str]]:
    """module -> the package modules importing it runs. `modules` maps a dotted name to its source text (a name
    ending in `.__init__`-free form); `packages` names the modules that are packages (an `__init__.py`: relative
    imports start from the package itself). Without it, packages are the names other modules sit under."""
    if packages is None:
        packages = {m.rsplit(".", 1)[0] for m in modules if "." in m}
    graph: dict[str, set[str]] = {}
    for name, source in modules.items():
        edges: set[str] = set()
        for target in _imported(ast.parse(source), name, name in packages):
            parts = target.split(".")
            for i in range(len(parts), 0, -1):
                candidate = ".".join(parts[:i])
                if candidate in modules and not (name == candidate or name.startswith(candidate + ".")):
                    edges.add(candidate)
        graph[name] = edges - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def strongconnect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            strongconnect(v)
    return found


def one_way_violations(graph: dict[str, set[str]]) -> list[str]:
    """Imports of pipeline/cli from anywhere but cli itself and `python -m` entry points (cli -> pipeline ->
    stages)."""
    return sorted(f"{src} imports {dst}" for src, dsts in graph.items() for dst in dsts
                  if any(dst == top or dst.startswith(top + ".") for top in ONE_WAY)
                  and not (src == "tritongen.cli" or src.startswith("tritongen.cli.") or src.endswith(".__main__")))


def package_graph() -> dict[str, set[str]]:
    modules = package_modules()
    return import_graph({name: path.read_text() for name, path in modules.items()},
                        {name for name, path in modules.items() if path.name == "__init__.py"})


def test_the_package_has_no_import_cycles():
    assert cycles(package_graph()) == []


def test_no_stage_imports_pipeline_or_cli():
    assert one_way_violations(package_graph()) == []


def test_the_checker_finds_a_planted_cycle_and_a_backward_import():
    planted = {
        "tritongen": "",
        "tritongen.plan": "from tritongen.plan.make import make_plan\n",
        "tritongen.plan.make": "def f():\n    from tritongen.runtimes.x import y\n",
        "tritongen.runtimes": "",
        "tritongen.runtimes.x": "from tritongen.plan.model import Plan\n",
        "tritongen.plan.model": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import tritongen.render\n",
        "tritongen.render": "import tritongen.pipeline\n",
        "tritongen.pipeline": "",
    }
    graph = import_graph(planted)
    # runtimes.x -> plan.model runs plan/__init__, which imports plan.make, which imports runtimes.x.
    assert cycles(graph) == [["tritongen.plan", "tritongen.plan.make", "tritongen.runtimes.x"]]
    assert one_way_violations(graph) == ["tritongen.render imports tritongen.pipeline"]
    # A TYPE_CHECKING import is no edge; a module's own package is no edge.
    assert graph["tritongen.plan.model"] == set()
    assert graph["tritongen.plan.make"] == {"tritongen.runtimes", "tritongen.runtimes.x"}


def test_the_graph_covers_the_whole_package():
    graph = package_graph()
    for name in ("tritongen.plan.make", "tritongen.loadtests.runner", "tritongen.runtimes", "tritongen.cli"):
        assert name in graph


def folder_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The module graph collapsed onto the package's first level: `tritongen.plan.make` -> `plan`, a top-level
    module is its own node (the package's __init__ is left out: every module runs it)."""
    def folder(name: str) -> str | None:
        parts = name.split(".")
        return parts[1] if len(parts) > 1 else None

    out: dict[str, set[str]] = {}
    for src, dsts in graph.items():
        if (a := folder(src)) is not None:
            out.setdefault(a, set()).update(b for b in map(folder, dsts) if b is not None and b != a)
    return out


def test_the_stage_folders_import_one_way():
    """No two stages (first-level folders and modules) import each other, even through other modules."""
    assert cycles(folder_graph(package_graph())) == []
    planted = {"tritongen": "", "tritongen.plan": "", "tritongen.plan.load": "", "tritongen.loadtests": "",
               "tritongen.plan.slo": "import tritongen.loadtests.registry\n", "tritongen.loadtests.registry": "",
               "tritongen.loadtests.runner": "from tritongen.plan.load import LoadProfile\n"}
    assert cycles(folder_graph(import_graph(planted))) == [["loadtests", "plan"]]


def test_a_package_of_one_init_file_resolves_its_relative_imports_from_itself():
    planted = {"p": "", "p.errors": "", "p.native": "from ..errors import E\n", "p.flat": "from .errors import E\n"}
    assert import_graph(planted, {"p", "p.native"})["p.native"] == {"p.errors"}
    assert import_graph(planted, {"p"})["p.flat"] == {"p.errors"}
    assert "tritongen.errors" in package_graph()["tritongen.native"]


# ------------------------------------------------------------------------------------------ downward only, types too

DOWNWARD_ONLY = {"tritongen.runtimes": ("tritongen.plan", "tritongen.render", "tritongen.spec")}
"""Rooms whose modules may not name the rooms above them at all, not even in annotations: the runtimes take the
data they consume from `tritongen.core`, the bottom room."""


def _every_import(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    """Dotted names a module's imports name, those under `if TYPE_CHECKING:` included."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                anchor = anchor[:len(anchor) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
    return found


def upward_imports(modules: dict[str, str], packages: set[str] | None = None) -> list[str]:
    """`importer imports target` for each import (executed or type-only) from a DOWNWARD_ONLY room into a room
    above it."""
    if packages is None:
        packages = {m.rsplit(".", 1)[0] for m in modules if "." in m}
    out = []
    for name, source in modules.items():
        for room, above in DOWNWARD_ONLY.items():
            if name == room or name.startswith(room + "."):
                for target in sorted(_every_import(ast.parse(source), name, name in packages)):
                    if any(target == top or target.startswith(top + ".") for top in above):
                        out.append(f"{name} imports {target}")
    return sorted(out)


def test_runtimes_import_downward_only_even_for_types():
    modules = package_modules()
    assert upward_imports({name: path.read_text() for name, path in modules.items()},
                          {name for name, path in modules.items() if path.name == "__init__.py"}) == []


def test_the_checker_finds_a_type_only_upward_import():
    planted = {
        "tritongen": "", "tritongen.core": "", "tritongen.plan": "", "tritongen.runtimes": "",
        "tritongen.runtimes.x": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                "    from tritongen.plan.model import Plan\n",
        "tritongen.runtimes.y": "from tritongen.core import PlanView\n",
        "tritongen.runtimes.z": "def f():\n    from ..render import Locations\n",
    }
    assert upward_imports(planted) == ["tritongen.runtimes.x imports tritongen.plan.model",
                                       "tritongen.runtimes.z imports tritongen.render"]


RUNTIME_SEAM = ("tritongen.runtimes", "tritongen.runtimes.base", "tritongen.runtimes.pins")
"""What a stage may import of the runtimes: the registry, the roles' types and the pin records every runtime fills. A runtime's own package is reached
through the role the stage holds (`builder(plan).build_engine(...)`), never imported."""
READS_A_RUNTIME_PACKAGE: dict[str, str] = {}
"""Stages allowed to import one runtime's package, with the reason (none: tune reads the synthetic engine's schedule
from tritongen.served.engine_model)."""


def runtime_package_imports(graph: dict[str, set[str]]) -> list[str]:
    """`stage imports runtime package` for each edge from outside tritongen.runtimes into one runtime's package."""
    return sorted(f"{src} imports {dst}" for src, dsts in graph.items() for dst in dsts
                  if dst.startswith("tritongen.runtimes.") and dst not in RUNTIME_SEAM
                  and not src.startswith("tritongen.runtimes") and src not in READS_A_RUNTIME_PACKAGE)


def test_no_stage_imports_a_runtime_package():
    assert runtime_package_imports(package_graph()) == []
    planted = {"tritongen": "", "tritongen.runtimes": "", "tritongen.runtimes.base": "", "tritongen.runtimes.x": "",
               "tritongen.cli": "def build():\n    from tritongen.runtimes.x import build_engine\n",
               "tritongen.render": "from tritongen.runtimes import repository\nfrom tritongen.runtimes.base import R\n"}
    assert runtime_package_imports(import_graph(planted)) == ["tritongen.cli imports tritongen.runtimes.x"]


# ------------------------------------------------------------------------------------------ roles, not the runtime

WHOLE_RUNTIME = frozenset({"Runtime", "runtime", "runtime_of", "RUNTIMES"})
"""What hands a stage the whole runtime object: the class, the registry's dict and its accessors of old. A stage asks
`tritongen.runtimes` for the one role it uses (planning, repository, launch, builder, clients; plannings(),
repositories(), launches() for every runtime's)."""


def whole_runtime_uses(modules: dict[str, str]) -> list[str]:
    """`module: line: what` for each place outside tritongen.runtimes that imports `Runtime`, `RUNTIMES`, `runtime`
    or `runtime_of` from the runtimes, or names `Runtime` at all (an annotation, an isinstance, an attribute)."""
    out = []
    for name, source in modules.items():
        if name == "tritongen.runtimes" or name.startswith("tritongen.runtimes."):
            continue
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tritongen.runtimes"):
                out.extend(f"{name}:{node.lineno}: imports {a.name}" for a in node.names if a.name in WHOLE_RUNTIME)
            elif isinstance(node, ast.Name) and node.id == "Runtime":
                out.append(f"{name}:{node.lineno}: names Runtime")
            elif isinstance(node, ast.Attribute) and node.attr in ("Runtime", "runtime_of", "RUNTIMES"):
                out.append(f"{name}:{node.lineno}: names {node.attr}")
    return sorted(out)


def test_no_stage_holds_the_whole_runtime():
    assert whole_runtime_uses({name: path.read_text() for name, path in package_modules().items()}) == []


def test_the_checker_finds_the_whole_runtime_named():
    planted = {
        "tritongen.runtimes": "def runtime_of(plan): ...\n",
        "tritongen.runtimes.hf": "from tritongen.runtimes.base import Runtime\n",
        "tritongen.render": "from tritongen.runtimes import repository, runtime_of\n",
        "tritongen.plan.make": "import tritongen.runtimes as rts\ndef f(rt: 'x') -> None:\n    rts.runtime_of(rt)\n",
        "tritongen.deploy": "from tritongen.runtimes import base\ndef f(r: base.Runtime): ...\n",
        "tritongen.tune": "from tritongen.runtimes import planning\nx: Runtime\n",
        "tritongen.verify": "from tritongen.runtimes import RUNTIMES, repositories\n",
    }
    assert whole_runtime_uses(planted) == ["tritongen.deploy:2: names Runtime", "tritongen.plan.make:3: names runtime_of",
                                           "tritongen.render:1: imports runtime_of", "tritongen.tune:2: names Runtime",
                                           "tritongen.verify:1: imports RUNTIMES"]


# ------------------------------------------------------------------------------------------ placement stands alone

STANDS_ALONE = {"tritongen.placement": ("tritongen.spec", "tritongen.runtimes")}
"""Rooms that must not run the named rooms when imported, directly or through any module they import: placement
reads an inventory and sizes a memory model; loading the spec would load every runtime's section with it."""


def reaches(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every module importing `start` runs, through any chain of executed imports."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        for dst in graph.get(todo.pop(), ()):
            if dst not in seen:
                seen.add(dst)
                todo.append(dst)
    return seen


def standalone_violations(graph: dict[str, set[str]]) -> list[str]:
    """`module reaches room` for each module of a STANDS_ALONE room whose imports run a forbidden room."""
    out = []
    for name in graph:
        for room, forbidden in STANDS_ALONE.items():
            if name == room or name.startswith(room + "."):
                run = reaches(graph, name)
                out += [f"{name} reaches {top}" for top in forbidden
                        if any(dst == top or dst.startswith(top + ".") for dst in run)]
    return sorted(out)


def test_placement_imports_no_spec_and_no_runtime():
    assert standalone_violations(package_graph()) == []


def test_the_checker_finds_placement_reaching_the_spec_through_another_module():
    planted = {"tritongen": "", "tritongen.core": "", "tritongen.core.source": "import yaml\n",
               "tritongen.spec": "from tritongen.runtimes import REGISTRY\n", "tritongen.runtimes": "",
               "tritongen.placement": "from tritongen.placement.inventory import load_inventory\n",
               "tritongen.placement.inventory": "from tritongen.errors import E\nfrom tritongen.spec.source import r\n",
               "tritongen.spec.source": "", "tritongen.errors": "",
               "tritongen.placement.memory": "from tritongen.core.source import read_yaml\n"}
    assert standalone_violations(import_graph(planted)) == [
        "tritongen.placement reaches tritongen.runtimes", "tritongen.placement reaches tritongen.spec",
        "tritongen.placement.inventory reaches tritongen.runtimes",
        "tritongen.placement.inventory reaches tritongen.spec"]
