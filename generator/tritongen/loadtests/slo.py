"""The SLO gate: the Plan's objectives (the spec's `validation.slo`, the gates of tritongen.metric_registry)
against measured metrics, one verdict per load level, and the capacity line of a sweep.

An objective that cannot be measured (no successful request, a TTFT objective over plain `http`) fails: a gate
that passes on missing data would exit 0 on a broken deployment.

Capacity line: the highest load level at which every objective holds *and* every objective holds at every
lower level (a pass above a failing level is reported, not trusted: it is noise or a measurement problem).
Exit code rule: with `slo.min_capacity` set, 0 when the capacity is at least that level; without it, 0 when
every objective holds at every level. A single run is a sweep of one level.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Literal

from tritongen.loadtests.metrics import GoodputLimits, Metrics
from tritongen.metric_registry import BY_NAME, CLIENT_COUNTED, GATES, Gate

if TYPE_CHECKING:
    from tritongen.plan.slo import SLOPlan


@dataclass(frozen=True)
class SLOResult:
    name: str
    """The spec field, e.g. `ttft_p95_ms`."""
    measured: float | None
    """None when the run gives no value for it (then it fails)."""
    limit: float
    unit: str
    comparison: Literal["<=", ">=", "=="]
    """What must hold: measured <comparison> limit."""
    passed: bool
    note: str = ""
    """Why nothing was measured, when measured is None."""
    client_counted: bool = False
    """The measured value rests on token counts the client made (the model returns none); the line says so."""

    @property
    def line(self) -> str:
        """`PASS|FAIL name: measured X unit <op> limit Y unit`, with the operator that actually holds, and the
        client-counted mark where the value rests on the client's token counts."""
        verdict = "PASS" if self.passed else "FAIL"
        unit = f" {self.unit}" if self.unit else ""
        limit = f"{self.limit:g}{unit}"
        mark = f" ({CLIENT_COUNTED})" if self.client_counted else ""
        if self.measured is None:
            return f"{verdict} {self.name}: not measured ({self.note}); limit {limit}"
        shown = f"{self.measured:.4f}" if self.unit == "" else f"{self.measured:.1f}"
        if self.passed:
            op = self.comparison
        else:
            op = {"<=": ">", ">=": "<", "==": "!="}[self.comparison]
        return f"{verdict} {self.name}: measured {shown}{unit}{mark} {op} limit {limit}"

    def to_dict(self) -> dict:
        return {**asdict(self), "line": self.line}


def _measured(metrics: Metrics, gate: Gate) -> float | None:
    value = getattr(metrics, gate.metric)
    if value is not None and gate.stat is not None:
        value = getattr(value, gate.stat)
    return None if value is None else float(value)


def evaluate(slo: SLOPlan, metrics: Metrics, counted_by: str = "server") -> list[SLOResult]:
    """One result per objective of `slo`, in the registry's gate order; `counted_by` (`server` or `client`) says
    whose token counts the metrics rest on."""
    results = []
    for gate in GATES:
        limit = slo.objectives.get(gate.name)
        if limit is None:
            continue
        client = counted_by == "client" and BY_NAME[gate.metric].counted
        measured = _measured(metrics, gate)
        if measured is None:
            results.append(SLOResult(gate.name, None, limit, gate.unit, gate.comparison, False,
                                     BY_NAME[gate.metric].unmeasured, client))
            continue
        passed = measured <= limit if gate.comparison == "<=" else measured >= limit
        results.append(SLOResult(gate.name, measured, limit, gate.unit, gate.comparison, passed,
                                 client_counted=client))
    return results


TOKEN_CHECK = "client_tokens_equal_server"


def token_check(client_tokens: int, server_tokens: float) -> SLOResult:
    """The level's second source: the output tokens the clients counted must equal the server's counter. Every
    token figure of the level (throughput, ITL, goodput) rests on the client count, so a mismatch fails the
    level like a missed objective (e.g. a repository rendered by a tritongen with another count convention)."""
    passed = client_tokens == server_tokens
    return SLOResult(TOKEN_CHECK, float(client_tokens), float(server_tokens), "tokens", "==", passed,
                     "" if passed else "the client's output-token total differs from the server's counter")


STRUCTURED_CHECK = "structured_outputs_invalid"


def structured_check(invalid: int) -> SLOResult:
    """Every structured output must parse and validate against its schema (validation.load.structured): one
    invalid output fails the level like a missed objective. Truncated outputs (cut at max_tokens) are reported,
    not judged."""
    passed = invalid == 0
    return SLOResult(STRUCTURED_CHECK, float(invalid), 0.0, "outputs", "==", passed,
                     "" if passed else "structured outputs that do not parse or validate against their schema")


@dataclass(frozen=True)
class LevelVerdict:
    level: float
    results: list[SLOResult]

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results)


@dataclass(frozen=True)
class Capacity:
    """The capacity line of a sweep and the gate decision built on it."""

    level: float | None
    """Highest level that passes with every lower level passing; None when the lowest level fails."""
    unit: str
    """`users` (closed loop) or `requests/s` (open loop)."""
    passing_above: list[float]
    """Levels above the first failing one that passed anyway (not counted toward capacity)."""
    rule: str
    """`all_levels` or `min_capacity`."""
    min_capacity: float | None
    passed: bool

    @property
    def line(self) -> str:
        if self.level is None:
            found = "capacity: none (the lowest level already fails an objective)"
        else:
            found = f"capacity: {self.level:g} {self.unit} (highest level at which every SLO holds)"
        if self.passing_above:
            found += f"; also passed above a failing level: {', '.join(f'{x:g}' for x in self.passing_above)}"
        if self.rule == "min_capacity":
            gate = f"required >= {self.min_capacity:g} {self.unit}"
        else:
            gate = "required: every level passes"
        return f"{found}; {gate} -> {'PASS' if self.passed else 'FAIL'}"

    def to_dict(self) -> dict:
        return {**asdict(self), "line": self.line}


def capacity(verdicts: list[LevelVerdict], unit: str, min_capacity: float | None = None) -> Capacity:
    """The capacity line over levels in increasing order, and whether the gate passes (see module docstring)."""
    ordered = sorted(verdicts, key=lambda v: v.level)
    level, above, broken = None, [], False
    for v in ordered:
        if broken:
            if v.passed:
                above.append(v.level)
        elif v.passed:
            level = v.level
        else:
            broken = True
    if min_capacity is not None:
        passed = level is not None and level >= min_capacity
        rule = "min_capacity"
    else:
        passed = bool(ordered) and all(v.passed for v in ordered)
        rule = "all_levels"
    return Capacity(level, unit, above, rule, min_capacity, passed)


def verdict_lines(results: list[SLOResult]) -> list[str]:
    return [r.line for r in results]


def goodput_limits(slo: SLOPlan) -> GoodputLimits:
    """The per-request gates (latencies) as goodput limits: a request is good when its own TTFT, ITL and e2e
    are within the numbers the percentile objectives use."""
    return GoodputLimits(**{g.metric: slo.objectives.get(g.name) for g in GATES if g.per_request})
