"""`tritongen completion bash|zsh|tcsh`: a static shell completion script, generated from the argument parser by
shtab (nothing runs at Tab time, so completion stays instant although the commands import torch)."""

from __future__ import annotations

import argparse

import shtab

from tritongen.cli.parser import build_parser

# Arguments that name a file or a folder: the shell completes paths for them.
_FILES = {"spec", "inventory", "trace", "engine_config"}
_FOLDERS = {"repo", "dir", "output", "out", "engine_dir", "tokenizer", "examples_dir"}


def cmd_completion(args: argparse.Namespace) -> int:
    parser = build_parser()
    for action in _actions(parser):
        if action.dest in _FILES:
            action.complete = shtab.FILE  # type: ignore[attr-defined]
        elif action.dest in _FOLDERS:
            action.complete = shtab.DIRECTORY  # type: ignore[attr-defined]
    print(shtab.complete(parser, shell=args.shell), end="")
    return 0


def _actions(parser: argparse.ArgumentParser):
    for action in parser._actions:
        yield action
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _actions(sub)
