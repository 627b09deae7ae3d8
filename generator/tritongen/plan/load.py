"""The load profile: what the load test sends, decided once by the planner from the spec's `validation.load`.

The spec's `LoadSection` is the input (validated there, documented by `tritongen validate --explain`); the planner
turns it into a `LoadProfile` with its paths absolute, and `Plan.load` holds it. The load test reads only this type:
its command-line flags are a validated copy of it (tritongen.loadtests.runner), and every Locust process gets it
unchanged inside its run configuration (tritongen.loadtests.workload.LocustConfig).

Only pydantic is imported here: Locust processes load this module before their first request.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from tritongen.spec import LoadSection

Protocol = Literal["grpc", "http", "http_stream", "openai"]
Arrival = Literal["constant", "poisson", "gamma"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TokenDistribution(_Frozen):
    """A token count drawn per request (validation.load.input_tokens / output_tokens)."""

    mean: int = Field(ge=1)
    """Mean token count."""
    stddev: float = Field(ge=0)
    """Standard deviation (0 = always `mean`)."""

    def draw(self, rng: random.Random) -> int:
        """gauss(mean, stddev), rounded, at least 1 (stddev 0: always mean)."""
        if self.stddev <= 0:
            return self.mean
        return max(1, round(rng.gauss(self.mean, self.stddev)))


class AdapterShare(_Frozen):
    """One adapter's share of the load (validation.load.adapters), with what selects it."""

    name: str
    """The adapter's name (`base`: the base model): the OpenAI `model` and vLLM's lora_name that select it."""
    task_id: int
    """Its lora_task_id (0: the base model)."""
    weight: float = Field(gt=0)


class StructuredShare(_Frozen):
    """validation.load.structured as planned: its schema file absolute and checked at plan."""

    share: float = Field(ge=0, le=1)
    """Fraction of requests that carry a JSON schema; 0: plain requests only."""
    schemas: str | None
    """The schema set (absolute; read when share > 0): a JSON list of {name, schema}
    (tritongen.schema_set)."""
    max_tokens: int = Field(ge=1)
    """Completion limit of a structured request."""


class LoadProfile(_Frozen):
    """validation.load as planned: each field means what the spec's field of that name documents, and has no
    default here (the spec's are the defaults; the planner writes every field)."""

    users: int = Field(ge=1)
    """Closed loop: concurrent users, one request in flight each."""
    spawn_rate: float = Field(gt=0)
    """Users started per second."""
    duration_s: float = Field(gt=0)
    """Run time of each load level."""
    protocol: Protocol
    """grpc, http, http_stream or openai (streamed chat completions through the OpenAI frontend)."""
    input_tokens: TokenDistribution
    """Synthetic prompt length in tokens of the deployment's tokenizer."""
    output_tokens: TokenDistribution
    """Completion length (min_tokens = max_tokens)."""
    prompts_file: str | None
    """JSONL prompts used instead of synthetic ones (absolute)."""
    processes: int = Field(ge=1)
    """Locust processes; they share an open-loop rate."""
    warmup_s: float = Field(ge=0)
    """Unmeasured seconds at the start of each level."""
    sweep: tuple[float, ...]
    """Load levels, one run each: user counts (closed loop) or requests/s (open loop). Empty: one level."""
    request_rate: float | None = Field(gt=0)
    """Open loop: requests/s; None: closed loop."""
    arrival: Arrival
    """Open-loop arrival process."""
    burstiness: float = Field(gt=0)
    """Shape of the gamma gaps."""
    max_concurrency: int | None = Field(ge=1)
    """Open loop: most requests in flight; None: the runner's default."""
    trace_file: str | None
    """JSONL trace replayed instead of an arrival process (absolute)."""
    cancel_rate: float = Field(ge=0, le=1)
    """Fraction of streamed requests the client cancels."""
    cancel_after_ms: float = Field(gt=0)
    """When, after sending, such a request is cancelled."""
    adapters: dict[str, AdapterShare]
    """The traffic's split over LoRA adapters, by name; empty: the base model only."""
    structured: StructuredShare
    """The share of requests sent with a JSON schema, and the schemas."""

    @property
    def mode(self) -> Literal["closed", "open", "trace"]:
        return "trace" if self.trace_file else ("open" if self.request_rate is not None else "closed")

    @property
    def level_unit(self) -> str:
        return "users" if self.mode == "closed" else "requests/s"

    def levels(self) -> tuple[float, ...]:
        """The load levels in run order; a trace has one, 0.0 until the trace is read (its mean rate)."""
        if self.mode == "trace":
            return (0.0,)
        if self.sweep:
            return self.sweep
        return (self.request_rate,) if self.mode == "open" else (self.users,)  # type: ignore[return-value]


def load_profile(section: LoadSection, resolve: Callable[[str], Path],
                 task_ids: dict[str, int] | None = None) -> LoadProfile:
    """The spec's validation.load as a LoadProfile, its files made absolute with `resolve` (the planner's
    tritongen.plan.make.resolve_path from the spec's folder); `task_ids` numbers the adapters (model.adapters)."""
    data = section.model_dump()
    ids = {"base": 0, **(task_ids or {})}
    data["adapters"] = {name: {"name": name, "task_id": ids[name], "weight": weight}
                        for name, weight in section.adapters.items()}
    for key in ("prompts_file", "trace_file"):
        if data[key]:
            data[key] = str(resolve(data[key]))
    if section.structured.schemas:
        data["structured"]["schemas"] = str(resolve(section.structured.schemas))
    return LoadProfile.model_validate(data)
