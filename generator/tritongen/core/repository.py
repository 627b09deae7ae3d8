"""What a runtime needs to write its model files and launch a server: where the files are seen, the render stage's
tools, a server's ports."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from tritongen.core.views import PlanView


@dataclass(frozen=True)
class Locations:
    """Where the server that loads the repository sees the deployment's files (host paths by default; the
    deploy targets pass the paths inside their containers)."""

    tokenizer: str
    checkpoint: str
    engine: str | None
    adapters: str | None = None
    """The folder of adapter files the runtime reads (Launch.adapter_folder) as the server sees it; None: the
    plan's own."""

    @classmethod
    def of(cls, plan: PlanView) -> Locations:
        return cls(plan.tokenizer.dir, plan.paths.checkpoint, plan.paths.engine)


@dataclass(frozen=True)
class Renderer:
    """The render stage's tools, handed to a runtime so that runtimes need not import the render stage."""

    template: Callable[..., bytes]
    """template(name, plan, **context) -> bytes: a model_repository_templates/*.j2 rendered with the header."""
    header: str
    """The generated-file header line for this plan."""


class Ports(NamedTuple):
    """A tritonserver's ports."""

    http: int
    grpc: int
    metrics: int
