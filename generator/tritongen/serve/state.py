"""Where the local `tritongen serve` listens: one state file that `serve` writes once ready and removes when it
stops, and that `generate` and `loadtest` read when no --url is given (serve picks free ports, so fixed defaults
would miss it)."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path


def state_path() -> Path:
    """$TRITONGEN_STATE, else a per-user file in the runtime (or temporary) folder."""
    if os.environ.get("TRITONGEN_STATE"):
        return Path(os.environ["TRITONGEN_STATE"])
    base = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    return Path(base) / f"tritongen-{os.getuid()}" / "serve.json"


def write_state(**urls: str | None) -> Path:
    """Record this process's endpoints (grpc, http, metrics, openai: host:port or a URL)."""
    path = state_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps({"pid": os.getpid(), **{k: v for k, v in urls.items() if v}}, indent=2) + "\n")
    tmp.replace(path)
    return path


def clear_state() -> None:
    """Remove the state file if this process wrote it."""
    with contextlib.suppress(OSError, ValueError):
        if json.loads(state_path().read_text()).get("pid") == os.getpid():
            state_path().unlink()


def read_state() -> dict | None:
    """The running serve's endpoints, or None (no file, or its serve is gone)."""
    try:
        data = json.loads(state_path().read_text())
        os.kill(int(data["pid"]), 0)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return data
