"""The `validation.slo` section: service-level objectives."""

from __future__ import annotations

from pydantic import Field

from tritongen.spec_base import Section


class SLOSection(Section):
    ttft_p95_ms: float | None = Field(None, gt=0)
    """95th percentile time to first token, milliseconds."""

    itl_p95_ms: float | None = Field(None, gt=0)
    """95th percentile inter-token latency, milliseconds."""

    e2e_p99_ms: float | None = Field(None, gt=0)
    """99th percentile end-to-end request latency, milliseconds."""

    min_output_tokens_per_s: float | None = Field(None, gt=0)
    """Lowest acceptable output token throughput over the run."""

    max_error_rate: float | None = Field(0.0, ge=0, le=1)
    """Highest acceptable fraction of failed requests."""

    min_capacity: float | None = Field(None, gt=0)
    """The gate of a sweep: pass when the capacity line (highest level at which every objective holds, with
    every lower level passing) is at least this level. None: every level must pass."""
