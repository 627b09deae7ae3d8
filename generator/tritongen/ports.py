"""Free TCP ports for the servers tritongen starts, held for the process that chose them.

A port from `bind(port 0)` comes from the kernel's ephemeral range, the range every outgoing connection also draws
its source port from, and it is free again as soon as the probing socket closes. tritonserver binds its ports only
after loading its models (20 s on a loaded host), so in that window another process's `bind(0)` or a client's
source port can take it ("Address already in use", tritonserver exit 1). So a port here is drawn below the
ephemeral range, where no source port falls, and reserved by a file named for it that holds this process's id:
other processes using this module skip it while this process lives. Reservations go when the process exits.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import fcntl
import os
import random
import socket
import tempfile
import time
from pathlib import Path

import psutil

_RESERVATIONS = Path(tempfile.gettempdir()) / f"tritongen-ports-{os.getuid()}"
_LOWEST = 20000  # below the usual services' ports is crowded; 20000 up to the ephemeral range is quiet
_ATTEMPTS = 2000
_held: set[Path] = set()


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def _candidates() -> range:
    low, high = _ephemeral_range()
    if low - _LOWEST >= 1000:
        return range(_LOWEST, low)
    if 65535 - high >= 1000:
        return range(high + 1, 65536)
    return range(0)  # no room outside the ephemeral range: the kernel's choice below


def _reserve(port: int) -> bool:
    path = _RESERVATIONS / str(port)
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            # A stale reservation (its process is gone) is removed under a lock, so that two processes cannot both
            # judge it stale and one remove the reservation the other has just made in its place.
            with open(_RESERVATIONS / ".lock", "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                owner = _owner(path)
                if owner is None or (owner and psutil.pid_exists(owner)):
                    return False
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
            continue
        with os.fdopen(fd, "w") as f:
            f.write(str(os.getpid()))
        _held.add(path)
        return True
    return False


def _owner(path: Path) -> int | None:
    """The pid a reservation names; None while it may still be being written (empty and young) or is unreadable."""
    try:
        text = path.read_text()
        if not text.strip():
            return None if time.time() - path.stat().st_mtime < 10 else 0
        return int(text)
    except FileNotFoundError:
        return 0  # released meanwhile: free to take
    except (OSError, ValueError):
        return None


def _release(port: int) -> None:
    path = _RESERVATIONS / str(port)
    _held.discard(path)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


@atexit.register
def _release_all() -> None:
    # Only the files that still name this process: a child forked from it inherits `_held`, and its exit must not
    # free the parent's ports.
    for path in list(_held):
        with contextlib.suppress(OSError, ValueError):
            if int(path.read_text()) == os.getpid():
                path.unlink()
    _held.clear()


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(n: int) -> list[int]:
    """`n` distinct ports that nothing is bound to now and that no other process using this module will hand
    out while this process lives."""
    candidates = _candidates()
    try:
        _RESERVATIONS.mkdir(parents=True, exist_ok=True)
        if not os.access(_RESERVATIONS, os.W_OK):
            candidates = range(0)
    except OSError:
        candidates = range(0)
    ports: list[int] = []
    with contextlib.ExitStack() as stack:
        for _ in range(_ATTEMPTS if candidates else 0):
            if len(ports) == n:
                return ports
            port = random.choice(candidates)
            if port in ports or not _reserve(port):
                continue
            s = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            try:
                s.bind(("0.0.0.0", port))  # tritonserver binds every address: so must the check
            except OSError as e:
                if e.errno != errno.EADDRINUSE:
                    raise
                _release(port)
                continue
            ports.append(port)
        if len(ports) == n:
            return ports
        # No room outside the ephemeral range (or no place for reservations): the kernel picks, with the sockets
        # held until all are chosen so it cannot hand out one port twice.
        while len(ports) < n:
            s = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
        return ports
