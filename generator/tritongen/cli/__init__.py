"""`tritongen`: a thin CLI over the stages. Errors map to exit codes here and nowhere else.

Exit codes: 0 success; 1 a check failed (verification, SLO); 2 bad input (spec, flags); 3 something the
command needs is missing from this machine; 70 an internal error (a tritongen bug; `--debug` shows the traceback).
"""

from __future__ import annotations

import importlib
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

from tritongen import console
from tritongen.cli.parser import build_parser
from tritongen.errors import INTERNAL_ERROR_EXIT, TritongenError, clip, scrub

COMMANDS = {
    "validate": "tritongen.cli.commands:cmd_validate",
    "plan": "tritongen.cli.commands:cmd_plan",
    "render": "tritongen.cli.commands:cmd_render",
    "verify": "tritongen.cli.commands:cmd_verify",
    "serve": "tritongen.cli.commands:cmd_serve",
    "generate": "tritongen.cli.commands:cmd_generate",
    "build": "tritongen.cli.commands:cmd_build",
    "demo": "tritongen.cli.demo:cmd_demo",
    "demo-model": "tritongen.cli.demo:cmd_demo_model",
    "loadtest": "tritongen.cli.load:cmd_loadtest",
    "up": "tritongen.cli.load:cmd_up",
    "deploy": "tritongen.cli.deploy:cmd_deploy",
    "tune": "tritongen.cli.tune:cmd_tune",
    "completion": "tritongen.cli.completion:cmd_completion",
    "pins": "tritongen.cli.pins:cmd_pins",
}
"""Command -> "module:function" that runs it (the parser, tritongen.cli.parser, names the same commands)."""


def _handler(command: str) -> Callable[..., int]:
    # The one deferred import of the CLI, for its start-up time: the command modules import the planner, the
    # runtimes, pydantic, numpy and more (1-3 s on the shared 2-core machine), which `tritongen --help`, `-h` of a
    # command and a flag error need none of; a command's module is imported only when that command runs.
    module, function = COMMANDS[command].split(":")
    return getattr(importlib.import_module(module), function)


def main(argv: list[str] | None = None) -> int:
    """Run one command; every outcome is an exit code (see the module docstring), never a stray traceback."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    if debug:
        argv.remove("--debug")
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on bad flags, which is our bad-input code too
        return int(exc.code or 0)
    console.set_level(args.verbosity)
    try:
        return _run(args, debug)
    finally:
        _forget_handled_interrupt()


def _forget_handled_interrupt() -> None:
    """Every Ctrl-C (and serve's SIGTERM) that reaches this point was handled: its exit code is chosen. CPython still
    marks a KeyboardInterrupt as unhandled when it left an exec()/eval() of source text on its way (Python/
    pythonrun.c, run_eval_code_obj; a dataclass's methods are built that way, so a Ctrl-C during a lazy import hits
    one), and under `python -m` Py_RunMain then ends the process by SIGINT after the cleanup (exit -2 where the
    command chose 130, or serve 0). That same function clears the mark before it evaluates, so evaluating a constant
    here forgets it."""
    eval("None")


def _run(args, debug: bool) -> int:
    try:
        return _handler(args.command)(args)
    except TritongenError as err:
        if debug:
            traceback.print_exc()
        for line in err.problems:
            # A problem may carry context lines (a YAML error's source line and caret): indented under it.
            first, *context = scrub(clip(line, 2000)).split("\n")
            print(f"error: {first}", file=sys.stderr)
            for extra in context:
                print(f"       {extra}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        return 130
    except Exception as err:  # noqa: BLE001 - the one place an unexpected error becomes an exit code
        if debug:
            traceback.print_exc()
        where = traceback.extract_tb(err.__traceback__)[-1]
        print(f"error: internal error {type(err).__name__}: {scrub(clip(str(err), 300))} (at {Path(where.filename).name}:"
              f"{where.lineno}); this is a tritongen bug: rerun with --debug for the traceback and report it",
              file=sys.stderr)
        return INTERNAL_ERROR_EXIT


if __name__ == "__main__":
    sys.exit(main())
