"""How much tritongen prints. The CLI's `-q` / `-v` set the level once; code that prints progress asks here.

Results (what a command was run for: a verdict, a path, a table) and errors are printed at every level.
`quiet` drops progress and status lines; `verbose` adds detail that is usually noise.
"""

from __future__ import annotations

import sys
from typing import TextIO

QUIET, NORMAL, VERBOSE = -1, 0, 1
_level = NORMAL


def set_level(level: int) -> None:
    global _level
    _level = max(QUIET, min(VERBOSE, level))


def level() -> int:
    return _level


def quiet() -> bool:
    return _level <= QUIET


def verbose() -> bool:
    return _level >= VERBOSE


def info(line: str, file: TextIO | None = None) -> None:
    """A progress or status line: printed unless quiet."""
    if _level > QUIET:
        print(line, file=file or sys.stdout, flush=True)


def detail(line: str, file: TextIO | None = None) -> None:
    """Detail printed only with -v."""
    if _level >= VERBOSE:
        print(line, file=file or sys.stdout, flush=True)
