"""LLM serving metrics from raw samples, with GenAI-Perf/AIPerf definitions over a steady-state window.

A load level runs from its first request (t = 0) for `duration_s`, then drains (no new requests; in-flight ones
finish). Its measurement window is [warmup_s, duration_s]: the warm-up (batches filling, caches warming) and
the drain (batches emptying) are not measured.

Per request (successful requests only; a failed request counts toward the error rate and nothing else; a
request the client cancelled on purpose counts toward nothing but `cancelled_count` and the tokens it received):
- TTFT = first response - send; only for streaming protocols (plain `generate` has no first token to time).
- ITL (inter-token latency) = (e2e - TTFT) / (output_tokens - 1); streaming only, and only when
  output_tokens > 1 (one token has no gap between tokens).
- e2e latency = last response - send.
- output_tokens = the sum of the server's per-response num_output_tokens (never a re-tokenisation of the text,
  except for a model that returns no counts: then the sample is client-counted, see Sample.counted_by).
Which requests a statistic covers: those *sent* inside the window, including the ones still in flight at its
end, which are followed until they finish (AIPerf's grace period); requests sent during the warm-up or the
drain are not in the statistics.
Rates over the window, each divided by the window length:
- request throughput = successful requests that completed inside the window;
- output token throughput = output tokens that arrived inside the window, whichever request they belong to (a
  request in flight at either edge contributes the tokens it received inside);
- goodput = successful requests that completed inside the window and met every per-request limit (AIPerf);
- error rate = failed / all requests sent inside the window (cancelled ones excluded).
Statistics are avg, min, max, std (population, as numpy.std), and p50/p90/p95/p99 with linear interpolation
(numpy.percentile's default). Latencies are in milliseconds.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from tritongen import metric_registry as registry
from tritongen.metric_registry import PERCENTILES
from tritongen.loadtests.samples import Sample

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
    """The latencies of one sample; None for a failed or cancelled request."""
    if not sample.ok:
        return None
    e2e = sample.response_times[-1]
    ttft = sample.response_times[0] if sample.streaming else None
    itl = None
    if ttft is not None and (sample.output_tokens or 0) > 1:
        itl = (e2e - ttft) / (sample.output_tokens - 1)
    return RequestLatency(
        ttft_ms=None if ttft is None else ttft * 1e3, itl_ms=None if itl is None else itl * 1e3, e2e_ms=e2e * 1e3)


@dataclass(frozen=True)
class GoodputLimits:
    """Per-request limits a request must meet to count toward goodput (AIPerf `--goodput`); None = no limit."""

    ttft_ms: float | None = None
    itl_ms: float | None = None
    e2e_ms: float | None = None

    def met_by(self, latency: RequestLatency) -> bool:
        # A request the definition excludes (no TTFT for `http`, no ITL for one token) cannot break that limit.
        checks = ((latency.ttft_ms, self.ttft_ms), (latency.itl_ms, self.itl_ms), (latency.e2e_ms, self.e2e_ms))
        return all(limit is None or value is None or value <= limit for value, limit in checks)


@dataclass(frozen=True)
class Window:
    """The measured part of one load level, in seconds after its first request."""

    start_s: float
    end_s: float

    @property
    def length_s(self) -> float:
        return self.end_s - self.start_s

    def holds(self, t: float) -> bool:
        return self.start_s <= t <= self.end_s


@dataclass(frozen=True)
class TimelinePoint:
    """One bin of the throughput-over-time series."""

    t_s: float
    """Bin start, seconds after the level's first request."""
    requests_per_s: float
    """Successful requests that completed in the bin, per second."""
    output_tokens_per_s: float
    """Output tokens that arrived in the bin (from the server's per-response counts), per second."""
    good_requests_per_s: float
    """Successful requests that completed in the bin within every goodput limit, per second."""
    errors: int
    in_window: bool
    """The bin lies inside the measurement window."""


@dataclass(frozen=True)
class Metrics:
    """One level's metrics; every field but `errors` and `timeline` is a metric of tritongen.metric_registry,
    in the registry's order (the report's key order)."""

    request_count: int
    """Requests sent inside the window, failed ones included, cancelled ones not."""
    error_count: int
    """Failed requests other than refusals."""
    refused_count: int
    """Requests the deployment refused for overload (full queue, 429): counted apart from errors, since they
    are the deployment protecting itself; error_rate includes them (they were not served)."""
    cancelled_count: int
    """Requests sent inside the window that the client cancelled on purpose."""
    error_rate: float | None
    """None when no request was sent inside the window."""
    good_count: int
    """Successful requests completed inside the window that met every goodput limit."""
    completed_count: int
    """Successful requests completed inside the window."""
    in_flight_at_window_end: int
    """Requests sent before the window's end that had not finished by then (followed until they finished)."""
    warmup_s: float
    window_start_s: float
    window_end_s: float
    window_s: float
    run_s: float
    """First request to last response of the level: warm-up, window and drain."""
    request_throughput: float | None
    """None when the window is empty."""
    output_token_throughput: float | None
    goodput: float | None
    ttft_ms: Stats | None
    itl_ms: Stats | None
    e2e_ms: Stats | None
    input_tokens: Stats | None
    output_tokens: Stats | None
    output_tokens_total: int
    """Server-counted output tokens of every request of the level (warm-up and drain too): what the server's
    own counters must show."""
    input_tokens_total: int
    requests_without_token_count: int
    """Successful requests whose responses carried no num_output_tokens (the server did not count them)."""
    schedule_lag_ms: Stats | None
    """Open loop: how late requests were sent after their scheduled arrival."""
    errors: tuple[tuple[str, int], ...]
    """(message, count), most frequent first."""
    timeline: tuple[TimelinePoint, ...]

    def to_dict(self) -> dict:
        """The report's `levels[].metrics` object: the registry's metrics in its order, then errors, timeline."""
        data = {m.name: _plain(getattr(self, m.name)) for m in registry.METRICS}
        data["errors"] = [{"message": m, "count": c} for m, c in self.errors]
        data["timeline"] = [asdict(p) for p in self.timeline]
        return data


def _plain(value: object) -> object:
    return asdict(value) if isinstance(value, Stats) else value


def _timeline(samples: Sequence[Sample], start: float, run_s: float, window: Window, bin_s: float,
              limits: GoodputLimits) -> tuple[TimelinePoint, ...]:
    if not samples:
        return ()
    # The last bin is usually partial; its rates are still per bin_s so bins compare, at the cost of a dip.
    n_bins = max(1, math.ceil(run_s / bin_s))
    done, good, tokens, errors = [0] * n_bins, [0] * n_bins, [0] * n_bins, [0] * n_bins

    def bin_of(t: float) -> int:
        return min(n_bins - 1, max(0, int(t // bin_s)))

    for s in samples:
        sent = s.start_wall_s - start
        if s.ok:
            done[bin_of(sent + s.end_s)] += 1
            good[bin_of(sent + s.end_s)] += limits.met_by(request_latency(s))  # type: ignore[arg-type]
        elif s.failed:
            errors[bin_of(sent + s.end_s)] += 1
        if not s.failed:
            for at, n in s.token_arrivals():
                tokens[bin_of(sent + at)] += n
    return tuple(TimelinePoint(t_s=i * bin_s, requests_per_s=done[i] / bin_s, output_tokens_per_s=tokens[i] / bin_s,
                               good_requests_per_s=good[i] / bin_s, errors=errors[i], in_window=window.start_s <= i * bin_s < window.end_s)
                 for i in range(n_bins))


def measurement_window(samples: Sequence[Sample], warmup_s: float = 0.0, duration_s: float | None = None,
                       start_wall_s: float | None = None) -> tuple[float, Window]:
    """(wall time of the level's first request, its window). Without `duration_s` the window runs to the last
    response (recorded samples whose load duration is unknown). `start_wall_s` overrides the first request's time
    (samples that are a subset of a level)."""
    start = min((s.start_wall_s for s in samples), default=0.0) if start_wall_s is None else start_wall_s
    if duration_s is None:
        end = max((s.start_wall_s + s.end_s for s in samples), default=start) - start
    else:
        end = duration_s
    return start, Window(min(warmup_s, end), end)


def compute_metrics(samples: Sequence[Sample], limits: GoodputLimits | None = None, *, warmup_s: float = 0.0,
                    duration_s: float | None = None, bin_s: float = 1.0, start_wall_s: float | None = None) -> Metrics:
    """Metrics of one load level (any order, any number of processes); see the module docstring. `start_wall_s`:
    the level's first request, for a subset of its samples (one adapter's) measured over the level's own window."""
    limits = limits or GoodputLimits()
    start, window = measurement_window(samples, warmup_s, duration_s, start_wall_s)
    sent_in = [s for s in samples if window.start_s <= s.start_wall_s - start < window.end_s
               or (window.length_s == 0 and s.start_wall_s - start == window.end_s)]
    measured = [s for s in sent_in if not s.cancelled]
    ok = [s for s in measured if s.ok]
    failed = [s for s in measured if s.failed]
    latencies = [request_latency(s) for s in ok]

    completed = [s for s in samples if s.ok and window.holds(s.start_wall_s - start + s.end_s)]
    good = [s for s in completed if limits.met_by(request_latency(s))]  # type: ignore[arg-type]
    tokens_in = sum(n for s in samples if not s.failed for at, n in s.token_arrivals()
                    if window.holds(s.start_wall_s - start + at))
    in_flight = sum(1 for s in samples if s.start_wall_s - start < window.end_s
                    and s.start_wall_s - start + s.end_s > window.end_s)
    errors = Counter((s.error or "no response received")[:_ERROR_KEY_CHARS] for s in failed)
    run_s = max((s.start_wall_s - start + s.end_s for s in samples), default=0.0)

    def per_s(x: float) -> float | None:
        return x / window.length_s if window.length_s > 0 else None

    lags = [s.scheduled_lag_s * 1e3 for s in measured if s.scheduled_lag_s is not None]
    return Metrics(
        request_count=len(measured),
        error_count=len(failed) - sum(1 for s in failed if s.refused),
        refused_count=sum(1 for s in failed if s.refused),
        cancelled_count=sum(1 for s in sent_in if s.cancelled),
        error_rate=len(failed) / len(measured) if measured else None,
        good_count=len(good),
        completed_count=len(completed),
        in_flight_at_window_end=in_flight,
        warmup_s=warmup_s,
        window_start_s=window.start_s,
        window_end_s=window.end_s,
        window_s=window.length_s,
        run_s=run_s,
        request_throughput=per_s(len(completed)),
        output_token_throughput=per_s(tokens_in),
        goodput=per_s(len(good)),
        ttft_ms=Stats.of([lat.ttft_ms for lat in latencies if lat.ttft_ms is not None]),
        itl_ms=Stats.of([lat.itl_ms for lat in latencies if lat.itl_ms is not None]),
        e2e_ms=Stats.of([lat.e2e_ms for lat in latencies]),
        input_tokens=Stats.of([s.input_tokens for s in ok]),
        output_tokens=Stats.of([s.output_tokens for s in ok if s.output_tokens is not None]),
        output_tokens_total=sum(s.output_tokens or 0 for s in samples if not s.failed),
        input_tokens_total=sum(s.input_tokens for s in samples if not s.failed),
        requests_without_token_count=sum(1 for s in samples if s.ok and s.output_tokens is None),
        schedule_lag_ms=Stats.of(lags),
        errors=tuple(sorted(errors.items(), key=lambda kv: (-kv[1], kv[0]))),
        timeline=_timeline(samples, start, run_s, window, bin_s, limits),
    )


def window_latencies(samples: Sequence[Sample], warmup_s: float = 0.0,
                     duration_s: float | None = None) -> list[RequestLatency]:
    """The latencies the level's statistics are computed from: successful requests sent inside the window."""
    start, window = measurement_window(samples, warmup_s, duration_s)
    return [request_latency(s) for s in samples  # type: ignore[misc]
            if s.ok and (window.start_s <= s.start_wall_s - start < window.end_s
                         or (window.length_s == 0 and s.start_wall_s - start == window.end_s))]


def group_by_level(samples: Sequence[Sample]) -> dict[float, list[Sample]]:
    """Samples per load level, in increasing order of level."""
    levels: dict[float, list[Sample]] = {}
    for s in samples:
        levels.setdefault(s.level, []).append(s)
    return {level: levels[level] for level in sorted(levels)}


def compute_sweep(samples: Sequence[Sample], limits: GoodputLimits | None = None, *, warmup_s: float = 0.0,
                  duration_s: float | None = None, bin_s: float = 1.0) -> dict[float, Metrics]:
    """Metrics per load level (each level with its own window), in increasing order of level."""
    return {level: compute_metrics(group, limits, warmup_s=warmup_s, duration_s=duration_s, bin_s=bin_s)
            for level, group in group_by_level(samples).items()}
