"""The `validation.load` section: the load profile of `tritongen loadtest` / `up`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from tritongen.errors import problem
from tritongen.spec_base import Problems, Section


class TokenDistribution(Section):
    mean: int = Field(ge=1)
    """Mean token count."""

    stddev: float = Field(0, ge=0)
    """Standard deviation (0 = fixed)."""


class StructuredLoad(Section):
    """A share of the load sent with a JSON schema to constrain decoding (docs/structured-output.md); the report
    counts the outputs that parse and validate against it."""

    share: float = 0
    """Fraction of requests, 0 to 1, drawn at random to carry one of `schemas` (each picked at random): NVIDIA's
    guide tensors on grpc/http, `response_format: json_schema` (strict) on openai. 0: plain requests only."""

    schemas: str | None = None
    """JSON file holding a list of {"name": ..., "schema": {...}} entries (like tests/data/json_schemas.json);
    relative to the spec's folder."""

    max_tokens: int = Field(256, ge=1)
    """Completion limit of a structured request (no min_tokens: the grammar ends it); an output cut here is counted
    `truncated`, neither valid nor invalid."""

    @model_validator(mode="after")
    def _structured_rules(self) -> StructuredLoad:
        problems = []
        if not 0 <= self.share <= 1:
            problems.append(problem("validation.load.structured.share", f"({self.share:g}) is not a fraction",
                                    "give a share from 0 to 1, e.g. 0.5"))
        elif self.share > 0 and self.schemas is None:
            problems.append(problem("validation.load.structured.schemas", "is not set but share is above 0",
                                    'name a JSON file of [{"name": ..., "schema": {...}}, ...] entries'))
        if problems:
            raise Problems("\n".join(problems))
        return self


class LoadSection(Section):
    users: int = Field(4, ge=1)
    """Concurrent Locust users (one request in flight each)."""

    spawn_rate: float = Field(4, gt=0)
    """Users started per second."""

    duration_s: float = Field(20, gt=0)
    """Run time of the load test."""

    protocol: Literal["grpc", "http", "http_stream", "openai"] = "grpc"
    """grpc = ModelStreamInfer streaming, http_stream = generate_stream (SSE), http = generate, openai = streamed
    chat completions through the OpenAI frontend."""

    input_tokens: TokenDistribution = TokenDistribution(mean=32, stddev=4)
    """Synthetic prompt length in tokens of the deployment's tokenizer."""

    output_tokens: TokenDistribution = TokenDistribution(mean=32, stddev=0)
    """Completion length; forced with min_tokens = max_tokens so lengths are deterministic."""

    prompts_file: str | None = None
    """JSONL file with {"text_input": ..., "max_tokens": ...} lines, used instead of synthetic prompts."""

    processes: int = Field(1, ge=1)
    """Locust worker processes."""

    warmup_s: float = Field(0, ge=0)
    """Seconds at the start of each load level that are not measured (batches filling, caches warming); the
    measurement window is [warmup_s, duration_s] (docs/loadtest-report.md)."""

    sweep: list[float] = Field(default_factory=list)
    """Load levels for one run each, ascending: user counts in closed loop, requests/s with request_rate.
    Empty: one level. The report gives a verdict per level and the capacity line."""

    request_rate: float | None = Field(None, gt=0)
    """Open loop: requests/s sent on the arrival schedule whatever the server's speed (users then only cap
    how many are in flight: max_concurrency). None: closed loop, `users` requests in flight."""

    arrival: Literal["constant", "poisson", "gamma"] = "poisson"
    """Open-loop arrival process: constant gaps, Poisson (exponential gaps), or gamma gaps with `burstiness`."""

    burstiness: float = Field(1.0, gt=0)
    """Shape of the gamma gaps: < 1 burstier than Poisson, 1 Poisson, > 1 smoother (CV = 1/sqrt(burstiness))."""

    max_concurrency: int | None = Field(None, ge=1)
    """Open loop: most requests in flight at once; an arrival that finds every slot busy waits (its lag is
    reported). None: 64."""

    trace_file: str | None = None
    """JSONL trace to replay instead of an arrival process: {"timestamp" (ms), "input_length" (or
    "text_input"), "output_length"} per line."""

    cancel_rate: float = Field(0, ge=0, le=1)
    """Fraction of streamed requests the client cancels on purpose, after cancel_after_ms."""

    cancel_after_ms: float = Field(100, gt=0)
    """How long after sending a request to be cancelled the client cancels it."""

    adapters: dict[str, float] = Field(default_factory=dict)
    """Traffic share per LoRA adapter (model.adapters names; `base` for the base model), relative weights > 0:
    each request picks one by weight, and the report gives every adapter's figures. Empty: every request goes to
    the base model."""

    structured: StructuredLoad = StructuredLoad()
    """Structured-output requests mixed into the load: their share and schema set; the report gives their
    validity and latency beside the plain requests'."""

    @model_validator(mode="after")
    def _load_rules(self) -> LoadSection:
        problems = []
        if self.warmup_s >= self.duration_s:
            problems.append(problem("validation.load.warmup_s", f"({self.warmup_s:g}) must be below duration_s "
                                    f"({self.duration_s:g})", "shorten the warm-up or lengthen the run"))
        if any(x <= 0 for x in self.sweep):
            problems.append(problem("validation.load.sweep", "levels must be > 0", "list e.g. [1, 2, 4]"))
        if self.request_rate is None and self.trace_file is None and any(x != int(x) for x in self.sweep):
            problems.append(problem("validation.load.sweep", "closed-loop levels are user counts",
                                    "list whole numbers, or set request_rate for request-rate levels"))
        if self.trace_file is not None and (self.request_rate is not None or self.sweep):
            problems.append(problem("validation.load.trace_file", "a trace sets its own arrival times",
                                    "drop request_rate and sweep, or the trace"))
        if problems:
            raise Problems("\n".join(problems))
        return self
