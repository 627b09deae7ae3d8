"""`tritongen --help` and `tritongen COMMAND --help` build the parser without loading what the commands run on (the
planner, the runtimes, pydantic, numpy, torch): checked on the modules a fresh interpreter holds afterwards, not on
time. bench/cli_startup.py measures the time."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from typing import get_args

import pytest

from tritongen.cli import COMMANDS
from tritongen.cli.parser import PROTOCOLS, TOKENIZERS, build_parser
from tritongen.demo.model import TOKENIZERS as DEMO_TOKENIZERS
from tritongen.plan.load import Protocol

HEAVY = ("pydantic", "numpy", "torch", "transformers", "yaml", "jinja2", "tritonclient", "locust",
         "tritongen.plan", "tritongen.runtimes", "tritongen.spec", "tritongen.render", "tritongen.loadtests")

# Runs the installed entry point's main() and prints, as JSON, the heavy modules the interpreter then holds.
_PROBE = """
import json, sys
from tritongen.cli import main
code = main(sys.argv[1:])
heavy = sorted(m for m in sys.modules if any(m == h or m.startswith(h + ".") for h in {heavy!r}))
print(json.dumps({{"code": code, "heavy": heavy}}), file=sys.stderr)
"""


def heavy_modules_after(*argv: str, heavy: tuple[str, ...] = HEAVY) -> tuple[int, list[str]]:
    proc = subprocess.run([sys.executable, "-c", _PROBE.format(heavy=heavy), *argv], capture_output=True, text=True,
                          timeout=120)
    result = json.loads(proc.stderr.strip().splitlines()[-1])
    return result["code"], result["heavy"]


def _commands() -> list[str]:
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    return sorted(sub.choices)


@pytest.mark.parametrize("argv", [("--help",), ("-h",), *[(c, "--help") for c in _commands()], ("nosuch",)],
                         ids=" ".join)
def test_help_and_flag_errors_load_nothing_heavy(argv):
    code, heavy = heavy_modules_after(*argv)
    assert code == (2 if argv == ("nosuch",) else 0)
    assert heavy == []


def test_the_probe_sees_a_heavy_import():
    # A command that runs (validate --explain reads the spec's pydantic models) loads what --help must not.
    code, heavy = heavy_modules_after("validate", "--explain", heavy=("pydantic", "tritongen.spec"))
    assert code == 0 and "pydantic" in heavy and "tritongen.spec" in heavy


def test_every_command_has_a_handler_and_every_handler_a_command():
    assert sorted(COMMANDS) == _commands()
    for command in COMMANDS:
        module, function = COMMANDS[command].split(":")
        assert callable(getattr(importlib.import_module(module), function)), COMMANDS[command]


def test_the_parsers_choices_are_the_spec_types():
    assert PROTOCOLS == get_args(Protocol)
    assert TOKENIZERS == DEMO_TOKENIZERS
