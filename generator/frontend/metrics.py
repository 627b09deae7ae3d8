"""The frontend's Prometheus metrics (prometheus_client), one registry per app so tests can run several."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# Seconds; fine steps below 100 ms, where the frontend's own cost is visible.
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0,
                    30.0, 60.0)


class FrontendMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("tritongen_openai_requests", "OpenAI API requests by endpoint and HTTP status",
                                ["endpoint", "status"], registry=r)
        self.active = Gauge("tritongen_openai_active_requests", "Requests in flight to Triton", ["model"],
                            registry=r)
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
        self.cancelled = Counter("tritongen_openai_cancelled_requests",
                                 "Requests cancelled at Triton because the client went away or a stop matched",
                                 ["model", "reason"], registry=r)
