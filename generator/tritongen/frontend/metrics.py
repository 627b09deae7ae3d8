"""The frontend's Prometheus metrics (prometheus_client), one registry per app so tests can run several."""

from __future__ import annotations

import os

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, multiprocess
from prometheus_client.parser import text_string_to_metric_families

# Seconds; fine steps below 100 ms, where the frontend's own cost is visible.
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0,
                    30.0, 60.0)


# Seconds; the frontend's own cost is a fraction of a millisecond to a few.
_ADDED_BUCKETS = (0.0001, 0.00025, 0.0005, 0.00075, 0.001, 0.0015, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.025,
                  0.05, 0.1)


class FrontendMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("tritongen_openai_requests", "OpenAI API requests by endpoint and HTTP status",
                                ["endpoint", "status"], registry=r)
        # livesum: with several worker processes (multiprocess mode) the gauge is the sum over the live ones.
        self.active = Gauge("tritongen_openai_active_requests", "Requests in flight to Triton", ["model"],
                            registry=r, multiprocess_mode="livesum")
        self.ttft = Histogram("tritongen_openai_time_to_first_token_seconds",
                              "Request received to first content chunk sent", ["model"], buckets=_LATENCY_BUCKETS,
                              registry=r)
        self.itl = Histogram("tritongen_openai_inter_token_latency_seconds", "Time between content chunks",
                             ["model"], buckets=_LATENCY_BUCKETS, registry=r)
        self.duration = Histogram("tritongen_openai_request_duration_seconds", "Request received to last byte",
                                  ["model"], buckets=_LATENCY_BUCKETS, registry=r)
        self.prompt_tokens = Counter("tritongen_openai_prompt_tokens", "Prompt tokens (server counts)", ["model"],
                                     registry=r)
        self.completion_tokens = Counter("tritongen_openai_completion_tokens", "Completion tokens (server counts)",
                                         ["model"], registry=r)
        self.added = Histogram(
            "tritongen_openai_added_latency_seconds",
            "What the frontend adds to the time to first token: request received -> request sent to Triton, plus "
            "Triton's first response -> first chunk handed to the HTTP server", ["model"], buckets=_ADDED_BUCKETS,
            registry=r)
        self.cancelled = Counter("tritongen_openai_cancelled_requests",
                                 "Requests cancelled at Triton because the client went away or a stop matched",
                                 ["model", "reason"], registry=r)


def exposition(registry: CollectorRegistry) -> bytes:
    """/metrics of this frontend: its registry, or, when its workers share a PROMETHEUS_MULTIPROC_DIR
    (tritongen.frontend.server.FrontendWorkers), every worker's metrics merged, whichever worker answers."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
    return generate_latest(registry)


def histogram_buckets(metrics_text: str, name: str) -> dict[float, float]:
    """Cumulative bucket counts {le: count} of one histogram, summed over its labels, from exposition text."""
    buckets: dict[float, float] = {}
    for family in text_string_to_metric_families(metrics_text):
        if family.name != name:
            continue
        for sample in family.samples:
            if sample.name == f"{name}_bucket":
                le = float(sample.labels["le"])
                buckets[le] = buckets.get(le, 0.0) + sample.value
    return buckets


def quantiles(buckets: dict[float, float], qs=(0.5, 0.95)) -> dict[str, float | None]:
    """Count and quantiles of a histogram's cumulative buckets, linear within a bucket (as Prometheus'
    histogram_quantile); a quantile in the +Inf bucket is reported as the last finite bound."""
    bounds = sorted(buckets)
    total = buckets.get(float("inf"), 0.0)
    out: dict[str, float | None] = {"count": total}
    for q in qs:
        key, value = f"p{round(q * 100)}", None
        rank, lower, below = q * total, 0.0, 0.0
        for upper in bounds if total else ():
            if buckets[upper] >= rank:
                span = buckets[upper] - below
                value = lower if upper == float("inf") else lower + (upper - lower) * (rank - below) / max(span, 1e-12)
                break
            lower, below = upper, buckets[upper]
        out[key] = value
    return out
