"""What one trial measured, and the two ways to measure it: from the real load test's report (`from_report`), or
on the synthetic engine model's own formula (`EngineModelEvaluator`: a virtual-clock replay of the same closed
loop, for tests and for the optimum a served tune is compared against).

Goodput follows DistServe (OSDI'24) as the load report computes it: requests per second that completed inside the
measurement window and met every per-request SLO (TTFT, ITL, end-to-end). A trial is `feasible` when its SLO
verdict passed (the p95/p99 gates, the error rate and the client-vs-server token check).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from tritongen.loadtests.confidence import MIN_COMPLETED, interval, mean, whole_bins
from tritongen.served.engine_model import EngineParams, SimRequest, simulate
from tritongen.spec import Spec


@dataclass
class TrialResult:
    goodput: float = 0.0
    """Requests/s meeting every per-request SLO, per GPU (or MIG slice; per host on CPU)."""
    good_tokens_per_s: float = 0.0
    """Output tokens/s of those requests, per GPU."""
    output_tokens_per_s: float = 0.0
    ttft_p95_ms: float | None = None
    itl_p95_ms: float | None = None
    errors: int = 0
    refused: int = 0
    tokens_equal: bool | None = None
    """The load report's client-vs-server token check (None: the server exports no counter)."""
    feasible: bool = False
    """The SLO verdict passed in every round."""
    rounds: int = 0
    host_limited: bool = False
    """A round's host was marked as the possible limit (tritongen.loadtests.host): other processes, steal."""
    completed: int = 0
    """Requests completed inside the measured windows: the n the goodput rests on."""
    good_bins: list = field(default_factory=list)
    """Goodput (per GPU) of each whole 1 s bin of the windows: the sample its interval is resampled from."""
    goodput_low: float | None = None
    """The goodput's 95% interval (tritongen.loadtests.confidence); None with fewer than 2 bins."""
    goodput_high: float | None = None
    note: str = ""

    def to_attrs(self) -> dict[str, Any]:
        return asdict(self)


TOO_FEW = "too few requests:"  # how the note of a trial with too few completed requests begins

# A round's verdict: `report(round_index, result_so_far)` returns True when the trial should stop (pruned).
Report = Callable[[int, TrialResult], bool]


def merge(rounds: list[TrialResult]) -> TrialResult:
    """The trial's result over its rounds: rates averaged, tail latencies the worst round's, counts summed."""
    def worst(values):
        values = [v for v in values if v is not None]
        return max(values) if values else None

    checks = [r.tokens_equal for r in rounds if r.tokens_equal is not None]
    n = len(rounds)
    return with_interval(TrialResult(
        goodput=sum(r.goodput for r in rounds) / n, good_tokens_per_s=sum(r.good_tokens_per_s for r in rounds) / n,
        output_tokens_per_s=sum(r.output_tokens_per_s for r in rounds) / n,
        ttft_p95_ms=worst(r.ttft_p95_ms for r in rounds), itl_p95_ms=worst(r.itl_p95_ms for r in rounds),
        errors=sum(r.errors for r in rounds), refused=sum(r.refused for r in rounds),
        tokens_equal=all(checks) if checks else None, feasible=all(r.feasible for r in rounds), rounds=n,
        completed=sum(r.completed for r in rounds), host_limited=any(r.host_limited for r in rounds), good_bins=[b for r in rounds for b in r.good_bins],
        note="; ".join(dict.fromkeys(x for r in rounds for x in r.note.split("; ") if x and not x.startswith(TOO_FEW)))))


def with_interval(r: TrialResult) -> TrialResult:
    """`r` with its goodput's interval from its bins, and the mark of too few completed requests in its note."""
    ci = interval(r.good_bins, mean, r.goodput, n=r.completed)
    r.goodput_low, r.goodput_high = ci["low"], ci["high"]
    if r.completed < MIN_COMPLETED and TOO_FEW not in r.note:
        r.note = "; ".join(x for x in (r.note, f"{TOO_FEW} {r.completed} completed inside the window(s) "
                                       f"(< {MIN_COMPLETED}), not enough to be sure") if x)
    return r


def from_report(report: dict, devices: int) -> TrialResult:
    """A round's result from a one-level loadtest.json (docs/loadtest-report.md)."""
    level = report["levels"][0]
    m = level["metrics"]
    window = m.get("window_s") or 0.0
    good = m.get("goodput") or 0.0
    mean_out = (m.get("output_tokens") or {}).get("avg") or 0.0
    failed = [r["name"] for r in level["slo"]["results"] if not r["passed"]]
    host = (level.get("host") or {}).get("warning")
    notes = [("missed " + ", ".join(failed)) if failed else "",
             host.removeprefix("WARNING: ").split(". ")[0] if host else ""]
    return with_interval(TrialResult(
        goodput=good / devices, good_tokens_per_s=good * mean_out / devices,
        output_tokens_per_s=(m.get("output_token_throughput") or 0.0) / devices,
        ttft_p95_ms=(m.get("ttft_ms") or {}).get("p95"), itl_p95_ms=(m.get("itl_ms") or {}).get("p95"),
        errors=m.get("error_count", 0), refused=m.get("refused_count", 0), tokens_equal=level["tokens"]["equal"],
        feasible=bool(level["slo"]["passed"]) and window > 0, rounds=1, completed=m.get("completed_count", 0),
        good_bins=[b / devices for b in whole_bins(m, "good_requests_per_s")],
        host_limited=bool(host), note="; ".join(x for x in notes if x)))


@dataclass
class Limits:
    """The spec's SLO as per-request limits and p95/p99 gates (validation.slo)."""

    ttft_ms: float | None
    itl_ms: float | None
    e2e_ms: float | None

    @classmethod
    def of(cls, spec: Spec) -> Limits:
        slo = spec.validation.slo
        return cls(slo.ttft_p95_ms, slo.itl_p95_ms, slo.e2e_p99_ms)


def window_metrics(requests: list, start_ms: float, end_ms: float, limits: Limits) -> TrialResult:
    """The load report's definitions over simulated requests (engine.SimRequest, times relative to the level's
    start): statistics over the requests sent inside the window, rates over what completed inside it."""
    length_s = (end_ms - start_ms) / 1e3
    sent = [r for r in requests if start_ms <= r.arrival_ms <= end_ms and len(r.times_ms) == r.n_out]
    ttft = np.array([r.times_ms[0] - r.arrival_ms for r in sent])
    itl = np.array([(r.times_ms[-1] - r.times_ms[0]) / (r.n_out - 1) if r.n_out > 1 else 0.0 for r in sent])
    e2e = np.array([r.times_ms[-1] - r.arrival_ms for r in sent])
    done = [r for r in requests if r.times_ms and len(r.times_ms) == r.n_out and start_ms <= r.times_ms[-1] <= end_ms]

    def met(r) -> bool:
        t = r.times_ms[0] - r.arrival_ms
        i = (r.times_ms[-1] - r.times_ms[0]) / (r.n_out - 1) if r.n_out > 1 else None
        e = r.times_ms[-1] - r.arrival_ms
        return all(lim is None or v is None or v <= lim for v, lim in
                   ((t, limits.ttft_ms), (i, limits.itl_ms), (e, limits.e2e_ms)))

    good = [r for r in done if met(r)]
    tokens = sum(1 for r in requests for t in r.times_ms if start_ms <= t <= end_ms)
    p95 = (lambda a: float(np.percentile(a, 95)) if a.size else None)
    bins = [0.0] * max(1, int(length_s))  # the window's whole seconds, as the load report's timeline has them
    for r in good:
        i = int((r.times_ms[-1] - start_ms) // 1e3)
        if i < len(bins):
            bins[i] += 1.0
    result = TrialResult(goodput=len(good) / length_s, good_tokens_per_s=sum(r.n_out for r in good) / length_s,
                         output_tokens_per_s=tokens / length_s, ttft_p95_ms=p95(ttft), itl_p95_ms=p95(itl), rounds=1,
                         completed=len(done), good_bins=bins)
    gates = ((result.ttft_p95_ms, limits.ttft_ms), (result.itl_p95_ms, limits.itl_ms),
             (float(np.percentile(e2e, 99)) if e2e.size else None, limits.e2e_ms))
    result.feasible = bool(sent) and all(lim is None or v is None or v <= lim for v, lim in gates)
    return with_interval(result)


@dataclass
class EngineModelEvaluator:
    """A trial on the synthetic engine model's formula: the spec's closed loop (users, token means, spawn rate,
    warm-up, duration) replayed on a virtual clock, the window split into `rounds`."""

    rounds: int = 2
    calls: list = field(default_factory=list)
    """The values of every trial evaluated (tests check a resumed tune evaluates no finished trial again)."""

    def evaluate(self, spec: Spec, values: dict[str, Any], report: Report, where=None) -> TrialResult:
        self.calls.append(dict(values))
        e, load = spec.synthetic.engine, spec.validation.load
        params = EngineParams(e.step_base_ms, e.per_sequence_ms, e.per_prefill_token_ms,
                              max_batch=spec.serving.max_batch_size, kv_tokens=spec.serving.kv_cache.max_tokens or 0)
        users = int(max(load.sweep)) if load.sweep else load.users
        duration_ms, warmup_ms = load.duration_s * 1e3, load.warmup_s * 1e3
        first = [SimRequest(i * 1e3 / load.spawn_rate, load.input_tokens.mean, load.output_tokens.mean, [])
                 for i in range(users)]
        requests = simulate(params, first, closed_loop=True, until_ms=duration_ms)
        limits = Limits.of(spec)
        step = (duration_ms - warmup_ms) / self.rounds
        done: list[TrialResult] = []
        for i in range(self.rounds):
            done.append(window_metrics(requests, warmup_ms + i * step, warmup_ms + (i + 1) * step, limits))
            if i < self.rounds - 1 and report(i, merge(done)):
                break
        return merge(done)
