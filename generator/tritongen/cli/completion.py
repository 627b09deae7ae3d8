"""`tritongen completion bash|zsh|tcsh`: a static shell completion script, generated from the argument parser by
shtab (nothing runs at Tab time, so completion stays instant although the commands import torch)."""

from __future__ import annotations

import argparse

SHELLS = ("bash", "zsh", "tcsh")


def add_command(sub: argparse._SubParsersAction, parser: argparse.ArgumentParser) -> None:
    s = sub.add_parser("completion", help="print a shell completion script (bash, zsh, tcsh)",
                       description="Print a completion script for SHELL. bash: `tritongen completion bash > "
                       "~/.local/share/bash-completion/completions/tritongen`; zsh: `tritongen completion zsh > "
                       "~/.zfunc/_tritongen` with ~/.zfunc on $fpath before compinit.")
    s.add_argument("shell", choices=SHELLS, help="the shell to complete in")
    s.set_defaults(func=lambda args: _print_script(parser, args.shell))


# Arguments that name a file or a folder: the shell completes paths for them.
_FILES = {"spec", "inventory", "trace", "engine_config"}
_FOLDERS = {"repo", "dir", "output", "out", "engine_dir", "tokenizer", "examples_dir"}


def _print_script(parser: argparse.ArgumentParser, shell: str) -> int:
    import shtab

    for action in _actions(parser):
        if action.dest in _FILES:
            action.complete = shtab.FILE  # type: ignore[attr-defined]
        elif action.dest in _FOLDERS:
            action.complete = shtab.DIRECTORY  # type: ignore[attr-defined]
    print(shtab.complete(parser, shell=shell), end="")
    return 0


def _actions(parser: argparse.ArgumentParser):
    for action in parser._actions:
        yield action
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _actions(sub)
