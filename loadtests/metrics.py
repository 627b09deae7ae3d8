"""LLM serving metrics from raw samples, with the GenAI-Perf definitions.

Per request (successful requests only; a failed request counts toward the error rate and nothing else):
- TTFT = first response - send; only for streaming protocols (plain `generate` has no first token to time).
- ITL (inter-token latency) = (e2e - TTFT) / (output_tokens - 1); streaming only, and only when
  output_tokens > 1 (one token has no gap between tokens).
- e2e latency = last response - send.
Over the run:
- duration = last response - first request (wall clock, so files from several processes line up);
- request throughput = successful requests / duration; output token throughput = their output tokens / duration;
- goodput = successful requests that meet every per-request limit / duration;
- error rate = failed requests / all requests.
Statistics are avg, min, max, std (population, as numpy.std), and p50/p90/p95/p99 with linear interpolation
(numpy.percentile's default). Latencies are in milliseconds.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from tritongen.loadtests.samples import Sample

PERCENTILES = (50, 90, 95, 99)
STATS_KEYS = ("count", "avg", "min", "max", "std", "p50", "p90", "p95", "p99")
# Error messages can embed whole server responses; the report groups by a bounded prefix.
_ERROR_KEY_CHARS = 200


@dataclass(frozen=True)
class Stats:
    count: int
    avg: float
    min: float
    max: float
    std: float
    p50: float
    p90: float
    p95: float
    p99: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Stats | None:
        """Statistics of `values`; None when there are none (no value is better than a made-up zero)."""
        if not values:
            return None
        a = np.asarray(values, dtype=float)
        p50, p90, p95, p99 = (float(x) for x in np.percentile(a, PERCENTILES))
        return cls(len(a), float(a.mean()), float(a.min()), float(a.max()), float(a.std()), p50, p90, p95, p99)


@dataclass(frozen=True)
class RequestLatency:
    """One successful request's latencies in ms; None where the definition excludes the request."""

    ttft_ms: float | None
    itl_ms: float | None
    e2e_ms: float


def request_latency(sample: Sample) -> RequestLatency | None:
    """The latencies of one sample; None for a failed request."""
    if not sample.ok:
        return None
    e2e = sample.response_times[-1]
    ttft = sample.response_times[0] if sample.streaming else None
    itl = None
    if ttft is not None and sample.output_tokens > 1:
        itl = (e2e - ttft) / (sample.output_tokens - 1)
    return RequestLatency(
        ttft_ms=None if ttft is None else ttft * 1e3, itl_ms=None if itl is None else itl * 1e3, e2e_ms=e2e * 1e3)


@dataclass(frozen=True)
class GoodputLimits:
    """Per-request limits a request must meet to count toward goodput (GenAI-Perf `--goodput`); None = no limit."""

    ttft_ms: float | None = None
    itl_ms: float | None = None
    e2e_ms: float | None = None

    def met_by(self, latency: RequestLatency) -> bool:
        # A request the definition excludes (no TTFT for `http`, no ITL for one token) cannot break that limit.
        checks = ((latency.ttft_ms, self.ttft_ms), (latency.itl_ms, self.itl_ms), (latency.e2e_ms, self.e2e_ms))
        return all(limit is None or value is None or value <= limit for value, limit in checks)


@dataclass(frozen=True)
class TimelinePoint:
    """One bin of the throughput-over-time series; requests are counted in the bin where they completed."""

    t_s: float
    """Bin start, seconds after the first request."""
    requests_per_s: float
    output_tokens_per_s: float
    errors: int


@dataclass(frozen=True)
class Metrics:
    request_count: int
    """All requests, failed ones included."""
    error_count: int
    error_rate: float | None
    """None when there were no requests."""
    good_count: int
    """Successful requests that met every goodput limit."""
    duration_s: float
    request_throughput: float | None
    """None when the duration is zero (no response arrived)."""
    output_token_throughput: float | None
    goodput: float | None
    ttft_ms: Stats | None
    itl_ms: Stats | None
    e2e_ms: Stats | None
    input_tokens: Stats | None
    output_tokens: Stats | None
    errors: tuple[tuple[str, int], ...]
    """(message, count), most frequent first."""
    timeline: tuple[TimelinePoint, ...]

    def to_dict(self) -> dict:
        data = asdict(self)
        data["errors"] = [{"message": m, "count": c} for m, c in self.errors]
        data["timeline"] = [asdict(p) for p in self.timeline]
        return data


def _timeline(samples: Sequence[Sample], start: float, duration: float, bin_s: float) -> tuple[TimelinePoint, ...]:
    if not samples:
        return ()
    # The last bin is usually partial; its rates are still per bin_s so bins compare, at the cost of a dip.
    n_bins = max(1, math.ceil(duration / bin_s))
    done, tokens, errors = [0] * n_bins, [0] * n_bins, [0] * n_bins
    for s in samples:
        i = min(n_bins - 1, max(0, int((s.end_wall_s - start) // bin_s)))
        if s.ok:
            done[i] += 1
            tokens[i] += s.output_tokens
        else:
            errors[i] += 1
    return tuple(TimelinePoint(t_s=i * bin_s, requests_per_s=done[i] / bin_s,
                               output_tokens_per_s=tokens[i] / bin_s, errors=errors[i]) for i in range(n_bins))


def compute_metrics(samples: Sequence[Sample], limits: GoodputLimits | None = None,
                    bin_s: float = 1.0) -> Metrics:
    """Metrics over `samples` (any order, any number of processes)."""
    limits = limits or GoodputLimits()
    ok = [s for s in samples if s.ok]
    latencies = [request_latency(s) for s in ok]
    failed = [s for s in samples if not s.ok]
    errors = Counter((s.error or "no response received")[:_ERROR_KEY_CHARS] for s in failed)

    start = min((s.start_wall_s for s in samples), default=0.0)
    end = max((s.end_wall_s for s in samples), default=0.0)
    duration = end - start
    good = sum(1 for lat in latencies if limits.met_by(lat))

    def per_s(x: float) -> float | None:
        return x / duration if duration > 0 else None

    return Metrics(
        request_count=len(samples),
        error_count=len(failed),
        error_rate=len(failed) / len(samples) if samples else None,
        good_count=good,
        duration_s=duration,
        request_throughput=per_s(len(ok)),
        output_token_throughput=per_s(sum(s.output_tokens for s in ok)),
        goodput=per_s(good),
        ttft_ms=Stats.of([lat.ttft_ms for lat in latencies if lat.ttft_ms is not None]),
        itl_ms=Stats.of([lat.itl_ms for lat in latencies if lat.itl_ms is not None]),
        e2e_ms=Stats.of([lat.e2e_ms for lat in latencies]),
        input_tokens=Stats.of([s.input_tokens for s in ok]),
        output_tokens=Stats.of([s.output_tokens for s in ok]),
        errors=tuple(sorted(errors.items(), key=lambda kv: (-kv[1], kv[0]))),
        timeline=_timeline(samples, start, duration, bin_s),
    )


def compute_sweep(samples: Sequence[Sample], limits: GoodputLimits | None = None,
                  bin_s: float = 1.0) -> dict[int, Metrics]:
    """Metrics per concurrency level, in increasing order of concurrency."""
    levels: dict[int, list[Sample]] = {}
    for s in samples:
        levels.setdefault(s.concurrency, []).append(s)
    return {c: compute_metrics(levels[c], limits, bin_s) for c in sorted(levels)}
