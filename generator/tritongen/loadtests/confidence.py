"""How sure a figure is: the sample it rests on (n) and a 95% confidence interval by the bootstrap
(scipy.stats.bootstrap, percentile method, a fixed seed so a report is reproducible from its samples).

- A rate (requests/s, output tokens/s, goodput) is resampled over the window's whole 1 s bins (batch means: the
  rate of each second, so the interval sees the seconds' spread, bursts included); n is the requests it counts.
- A latency percentile (TTFT p95, ...) is resampled over the requests it is a percentile of; n is their number.

A level with fewer than MIN_COMPLETED requests completed inside its window is marked: its intervals are wide, and a
decision taken on it (a tune's winner) may be noise. A tune's comparison of two settings is `difference`: the
interval of (mean of a) - (mean of b) over two independent samples.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence

import numpy as np

from tritongen import metric_registry as registry

LEVEL = 0.95
RESAMPLES = 999
SEED = 0
MIN_COMPLETED = 30
"""Requests completed inside a window below which its figures are marked as resting on too few."""
METHOD = f"bootstrap (scipy.stats.bootstrap, percentile, {RESAMPLES} resamples), {LEVEL:.0%}"


def _bootstrap(data: tuple, statistic: Callable) -> tuple[float, float]:
    from scipy.stats import bootstrap  # about 0.3 s to import: only where an interval is computed

    seed = {"rng" if "rng" in inspect.signature(bootstrap).parameters else "random_state":
            np.random.default_rng(SEED)}
    res = bootstrap(data, statistic, n_resamples=RESAMPLES, confidence_level=LEVEL, method="percentile",
                    vectorized=True, paired=False, **seed)
    low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
    return low, high


def interval(values: Sequence[float], statistic: Callable[..., np.ndarray], point: float | None = None,
             n: int | None = None) -> dict:
    """{n, low, high}: `statistic(x, axis)` over `values` resampled; low/high null with fewer than 2 values.
    `n` is what the figure rests on when it is not the number of values (a rate's requests)."""
    a = np.asarray(values, dtype=float)
    out = {"n": len(a) if n is None else n, "low": None, "high": None}
    if a.size < 2:
        return out
    if np.ptp(a) == 0:  # every value the same: resampling cannot move it
        out["low"] = out["high"] = float(statistic(a, axis=-1))
        return out
    low, high = _bootstrap((a,), statistic)
    if point is not None and math.isfinite(low):  # the percentile method's bounds hold the estimate itself
        low, high = min(low, point), max(high, point)
    out["low"], out["high"] = low, high
    return out


def mean(x: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(x, axis=axis)


def percentile(q: float) -> Callable[..., np.ndarray]:
    def stat(x: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.percentile(x, q, axis=axis)
    return stat


def difference(a: Sequence[float], b: Sequence[float]) -> tuple[float, float] | None:
    """The interval of mean(a) - mean(b) (independent samples); None when either has fewer than 2 values."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.size < 2 or y.size < 2:
        return None
    if np.ptp(x) == 0 and np.ptp(y) == 0:
        d = float(x[0] - y[0])
        return d, d
    return _bootstrap((x, y), lambda p, q, axis=-1: np.mean(p, axis=axis) - np.mean(q, axis=axis))


def fmt(figure: dict | None, digits: int = 1) -> str:
    """`[low, high] (n N)`, or `(n N, no interval)`."""
    if figure is None:
        return "(n 0)"
    if figure["low"] is None:
        return f"(n {figure['n']}, no interval)"
    return f"[{figure['low']:.{digits}f}, {figure['high']:.{digits}f}] (n {figure['n']})"


def too_few(completed: int) -> str | None:
    """The mark of a window with too few completed requests, or None."""
    if completed >= MIN_COMPLETED:
        return None
    return (f"only {completed} request(s) completed inside the window (< {MIN_COMPLETED}): its figures rest on too "
            "few to act on; lengthen the run (-t) or raise the load")


RATES = (("request_throughput", "requests_per_s", "completed_count"),
         ("output_token_throughput", "output_tokens_per_s", "completed_count"),
         ("goodput", "good_requests_per_s", "good_count"))
"""(metric, its timeline column, the count its n is)."""


def whole_bins(metrics: dict, column: str) -> list[float]:
    """A timeline column over the bins that lie wholly inside the window (every in-window bin when none does)."""
    inside = [p for p in metrics["timeline"] if p["in_window"]]
    whole = [p for p in inside if p["t_s"] + 1.0 <= metrics["window_end_s"] + 1e-9]
    return [p[column] for p in (whole or inside)]


def figures(metrics: dict, latencies: Sequence) -> dict:
    """The report's `levels[].confidence` (docs/loadtest-report.md): each rate and each reported latency
    percentile with its n and interval, and the mark of a window with too few completed requests."""
    out = []
    for name, column, count in RATES:
        if metrics[name] is not None:
            out.append({"name": name, "value": metrics[name],
                        **interval(whole_bins(metrics, column), mean, metrics[name], n=metrics[count])})
    for m in registry.latencies():
        values = [getattr(lat, m.name) for lat in latencies if getattr(lat, m.name) is not None]
        for p in m.percentiles:
            if values:
                out.append({"name": f"{m.name}.{p}", "value": metrics[m.name][p],
                            **interval(values, percentile(float(p[1:])), metrics[m.name][p])})
    return {"level": LEVEL, "method": METHOD, "figures": out, "warning": too_few(metrics["completed_count"])}


def line(confidence: dict) -> str:
    """One console line: each figure's interval and n."""
    parts = []
    for figure in confidence["figures"]:
        name, _, stat = figure["name"].partition(".")
        m = registry.BY_NAME[name]
        parts.append(f"{(m.label or name) + (' ' + stat if stat else '')} {fmt(figure, m.digits)}")
    return f"how sure ({confidence['level']:.0%} interval, n): " + " | ".join(parts)
