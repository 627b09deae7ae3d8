"""The render manifest: `tritongen-repository.json` at the root of every rendered model repository says what render
put there (the deployment, its runtime, each model's backend, which served model and which files), so that serve
and verify read it instead of rediscovering the repository from its config.pbtxt files.

A repository without one (written by hand, or by an older tritongen) still serves and verifies: the readers fall
back to reading the config files and say so once (`NOTE`). tritonserver ignores files at the repository root.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tritongen.errors import SpecError, problem

FILE = "tritongen-repository.json"
VERSION = 1
NOTE = ("note: {repo} has no " + FILE + " (rendered by hand or by an older tritongen); its models are found from "
        "their config.pbtxt files; render it again to get one")


@dataclass(frozen=True)
class ModelEntry:
    """One model folder of the repository, as render wrote it."""

    backend: str
    """The Triton backend of its config.pbtxt (`platform` for an ensemble)."""
    served: str | None = None
    """The tritongen.served model shipped as its 1/model.py; None when it has none of tritongen's python code."""
    files: tuple[str, ...] = ()
    """Every file render wrote under the model's folder, relative to the repository."""


@dataclass(frozen=True)
class RepositoryManifest:
    deployment: str
    """The spec's deployment name."""
    runtime: str
    """The runtime that serves the model named tensorrt_llm."""
    bls: str | None
    """The backend of tensorrt_llm_bls ("tritongen_bls" native, "python"); None without an ensemble."""
    models: dict[str, ModelEntry] = field(default_factory=dict)
    version: int = VERSION

    @property
    def backends(self) -> tuple[str, ...]:
        """The backends the models name, each once, sorted."""
        return tuple(sorted({m.backend for m in self.models.values()}))

    def to_bytes(self) -> bytes:
        data = asdict(self)
        data["models"] = {name: {**asdict(m), "files": list(m.files)} for name, m in self.models.items()}
        return (json.dumps(data, indent=1) + "\n").encode()

    @classmethod
    def from_bytes(cls, data: bytes, where: str = FILE) -> RepositoryManifest:
        try:
            raw = json.loads(data)
            if raw.get("version") != VERSION:
                raise ValueError(f"version {raw.get('version')!r}, this tritongen reads {VERSION}")
            models = {name: ModelEntry(backend=m["backend"], served=m.get("served"), files=tuple(m.get("files", ())))
                      for name, m in raw["models"].items()}
            return cls(deployment=raw["deployment"], runtime=raw["runtime"], bls=raw.get("bls"), models=models)
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            raise SpecError(problem(where, f"is not a tritongen render manifest ({err})",
                                    "render the repository again (`tritongen render SPEC -o DIR --force`)")) from None


def read(repo: Path) -> RepositoryManifest | None:
    """The manifest of a repository, None when it has none (SpecError when it has one that does not parse)."""
    path = Path(repo) / FILE
    if not path.is_file():
        return None
    return RepositoryManifest.from_bytes(path.read_bytes(), str(path))
