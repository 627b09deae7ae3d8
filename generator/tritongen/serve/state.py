"""Where the local `tritongen serve`s listen: one state file per serve process (named by its model repository and
its pid, so two serves of one repository are both found), written once it is ready and removed when it stops. `generate` and `loadtest` read them when no --url is given (serve picks
free ports, so fixed defaults would miss it) and pick the server of their deployment or repository."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tritongen import repository_manifest

# The generated-file header every rendered config.pbtxt starts with names its deployment.
_DEPLOYMENT = re.compile(r"from deployment '([^']+)'")


def state_dir() -> Path:
    """$TRITONGEN_STATE (a folder), else a per-user folder in the runtime (or temporary) folder."""
    if os.environ.get("TRITONGEN_STATE"):
        return Path(os.environ["TRITONGEN_STATE"])
    base = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    return Path(base) / f"tritongen-{os.getuid()}" / "servers"


def state_path(repository: Path, pid: int | None = None) -> Path:
    """The state file of the serve process `pid` (default: this one) of `repository`."""
    key = hashlib.sha1(str(Path(repository).resolve()).encode()).hexdigest()[:12]
    return state_dir() / f"{key}-{os.getpid() if pid is None else pid}.json"


def repository_deployment(repository: Path) -> str | None:
    """The deployment a rendered repository was made from (its render manifest, else its config.pbtxt header), None
    when it names none."""
    rendered = repository_manifest.read(repository)
    if rendered is not None:
        return rendered.deployment
    for config in sorted(Path(repository).glob("*/config.pbtxt")):
        with contextlib.suppress(OSError):
            with open(config, encoding="utf-8", errors="replace") as f:
                match = _DEPLOYMENT.search(f.readline())
            if match:
                return match.group(1)
    return None


@dataclass(frozen=True)
class Served:
    """One running `tritongen serve`: its deployment, repository and endpoints (host:port or URL)."""

    pid: int
    repository: str
    name: str | None
    urls: dict[str, str]
    started: float

    def url(self, protocol: str) -> str | None:
        return self.urls.get(protocol)

    @property
    def label(self) -> str:
        return f"'{self.name or '?'}' (repository {self.repository}, pid {self.pid})"


def write_state(repository: Path, **urls: str | None) -> Path:
    """Record this process's endpoints (grpc, http, metrics, openai) for the server of `repository`."""
    path = state_path(repository)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"pid": os.getpid(), "repository": str(Path(repository).resolve()),
            "name": repository_deployment(repository), "started": time.time(),
            **{k: v for k, v in urls.items() if v}}
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(path)
    return path


def clear_state(repository: Path) -> None:
    """Remove this process's state file of `repository` (another serve's stays)."""
    with contextlib.suppress(OSError):
        state_path(repository).unlink()


def running() -> list[Served]:
    """Every serve whose process is alive, oldest first (files of dead ones are removed)."""
    out = []
    for path in sorted(state_dir().glob("*.json")) if state_dir().is_dir() else ():
        try:
            data = json.loads(path.read_text())
            pid = int(data.pop("pid"))
            try:
                os.kill(pid, 0)
            except ProcessLookupError:  # a serve that was killed before it could remove its file
                path.unlink(missing_ok=True)
                continue
            out.append(Served(pid=pid, repository=str(data.pop("repository")), name=data.pop("name", None),
                              started=float(data.pop("started", 0)), urls={k: str(v) for k, v in data.items()}))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
    return sorted(out, key=lambda s: s.started)


def pick(*, name: str | None = None, server: str | None = None) -> tuple[Served | None, list[str]]:
    """The running serve to talk to, and the warnings to print.

    `server` (a flag: a deployment name or a repository path) must match; else `name` (the deployment of the spec
    or plan) picks among the running ones; else the only one. Several candidates: the newest, with a warning."""
    servers = running()
    if server is not None:
        path = str(Path(server).expanduser().resolve())
        candidates = [s for s in servers if s.name == server or s.repository == path]
        scope = f"--server {server}"
    elif name is not None:
        candidates = [s for s in servers if s.name == name]
        scope = f"deployment '{name}'"
    else:
        candidates, scope = servers, "this user"
    warnings = []
    if not candidates:
        if servers and (server is not None or name is not None):
            others = "; ".join(s.label for s in servers)
            warnings.append(f"no running `tritongen serve` matches {scope} (running: {others}); pass --url or "
                            "--server NAME|REPO")
        return None, warnings
    chosen = candidates[-1]
    if len(candidates) > 1:
        others = "; ".join(s.label for s in candidates[:-1])
        warnings.append(f"{len(candidates)} running servers match {scope}: using the newest, {chosen.label}; "
                        f"the others: {others} (pass --server REPO or --url to choose)")
    return chosen, warnings
