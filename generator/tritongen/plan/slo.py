"""The Plan's SLO: the objectives of the spec's `validation.slo`, resolved once against the metric registry
(tritongen.metric_registry.GATES); the load test's gate reads only this."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, field_validator

from tritongen.metric_registry import GATE_BY_NAME, GATES
from tritongen.spec import SLOSection


class SLOPlan(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    objectives: dict[str, float] = {}
    """Gate name (the spec field, e.g. `ttft_p95_ms`) -> limit, for the objectives the spec sets, in the
    registry's gate order."""
    min_capacity: float | None = None
    """The gate of a sweep (spec `validation.slo.min_capacity`); None: every level must pass."""

    @field_validator("objectives")
    @classmethod
    def _registry_gates(cls, objectives: dict[str, float]) -> dict[str, float]:
        unknown = sorted(set(objectives) - set(GATE_BY_NAME))
        if unknown:
            raise ValueError(f"unknown SLO gates {unknown}; known: {[g.name for g in GATES]}")
        return {g.name: objectives[g.name] for g in GATES if g.name in objectives}


def resolve_slo(section: SLOSection) -> SLOPlan:
    """The spec's objectives (fields left unset are none) against the registry's gates."""
    objectives = {g.name: getattr(section, g.name) for g in GATES}
    return SLOPlan(objectives={name: limit for name, limit in objectives.items() if limit is not None},
                   min_capacity=section.min_capacity)
