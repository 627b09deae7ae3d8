"""Ctrl-C in a long command (loadtest, tune, up): a message at once, then the command's own partial report and
cleanup, and exit 130 (128 + SIGINT, what a shell expects of a command ended by Ctrl-C).

A terminal sends SIGINT to the whole process group, and an impatient user presses Ctrl-C twice: after the first,
SIGINT is ignored for the rest of the command, so the report of what finished and the server's stop are not cut
short.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator

EXIT = 130


@contextlib.contextmanager
def on_interrupt(what: str, say: Callable[[str], None]) -> Iterator[None]:
    """Within the block, Ctrl-C says `interrupted (Ctrl-C): <what>` at once and raises KeyboardInterrupt."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    if previous == signal.SIG_IGN:  # an outer command already took its Ctrl-C
        yield
        return
    fired = []

    def handler(_signum, _frame) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        fired.append(True)
        say(f"interrupted (Ctrl-C): {what}")
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        if not fired and signal.getsignal(signal.SIGINT) is handler:
            signal.signal(signal.SIGINT, previous)
