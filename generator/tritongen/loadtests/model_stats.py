"""Triton's statistics extension (`GET /v2/models/stats`, gRPC ModelStatistics): per model, cumulative counts and
nanoseconds of successful requests, queue, compute input, compute infer and compute output.

The load test reads them at the same moments as /metrics (tritongen.loadtests.prom.scrape) and differences the
reads taken at the edges of a level's measurement window, as it does Prometheus counters. Over HTTP the
extension is plain JSON; over gRPC it is the ModelStatistics RPC of tritonclient.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass

# tritonclient (about 0.5 s of CPU to import) is imported where Triton's statistics are read.

# inference_stats fields -> ModelStats fields (each a count and a duration in ns).
FIELDS = ("success", "queue", "compute_input", "compute_infer", "compute_output")


class StatsUnavailable(RuntimeError):
    """The server did not answer the statistics request."""


@dataclass(frozen=True)
class ModelStats:
    """One model's cumulative statistics (every version summed): `<field>_count` and `<field>_ns`."""

    model: str
    success_count: int = 0
    success_ns: int = 0
    queue_count: int = 0
    queue_ns: int = 0
    compute_input_count: int = 0
    compute_input_ns: int = 0
    compute_infer_count: int = 0
    compute_infer_ns: int = 0
    compute_output_count: int = 0
    compute_output_ns: int = 0


def _merge(into: dict[str, dict[str, int]], name: str, stats: dict[str, dict[str, int]]) -> None:
    row = into.setdefault(name, {})
    for key in FIELDS:
        entry = stats.get(key) or {}
        row[f"{key}_count"] = row.get(f"{key}_count", 0) + int(entry.get("count", 0))
        row[f"{key}_ns"] = row.get(f"{key}_ns", 0) + int(entry.get("ns", 0))


def parse_http(document: dict) -> dict[str, ModelStats]:
    """The JSON of `GET /v2/models/stats` -> ModelStats by model name."""
    rows: dict[str, dict[str, int]] = {}
    for entry in document.get("model_stats", []):
        _merge(rows, entry["name"], entry.get("inference_stats") or {})
    return {name: ModelStats(name, **row) for name, row in rows.items()}


def fetch_http(url: str, timeout_s: float = 5.0) -> dict[str, ModelStats]:
    """`url` is Triton's HTTP host:port."""
    try:
        with urllib.request.urlopen(f"http://{url}/v2/models/stats", timeout=timeout_s) as response:
            return parse_http(json.loads(response.read().decode("utf-8")))
    except (urllib.error.URLError, OSError, ValueError, KeyError) as err:
        raise StatsUnavailable(f"http://{url}/v2/models/stats: {err}") from None


def fetch_grpc(url: str, timeout_s: float = 5.0) -> dict[str, ModelStats]:
    """`url` is Triton's gRPC host:port."""
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    try:
        with grpcclient.InferenceServerClient(url) as client:
            reply = client.get_inference_statistics(client_timeout=timeout_s)
    except (InferenceServerException, OSError) as err:
        raise StatsUnavailable(f"{url} ModelStatistics: {err}") from None
    rows: dict[str, dict[str, int]] = {}
    for entry in reply.model_stats:
        s = entry.inference_stats
        _merge(rows, entry.name, {key: {"count": getattr(s, key).count, "ns": getattr(s, key).ns} for key in FIELDS})
    return {name: ModelStats(name, **row) for name, row in rows.items()}


@dataclass(frozen=True)
class StatsSource:
    """Where the statistics are read: Triton's HTTP or gRPC endpoint."""

    url: str
    protocol: str
    """`http` or `grpc`."""

    def fetch(self, timeout_s: float = 5.0) -> dict[str, ModelStats]:
        return (fetch_http if self.protocol == "http" else fetch_grpc)(self.url, timeout_s)


@dataclass(frozen=True)
class ModelWindow:
    """One model over a window: differences of the cumulative statistics, per successful request in ms."""

    model: str
    requests: int
    """Successful requests Triton counted in the window."""
    queue_ms: float | None
    compute_input_ms: float | None
    compute_infer_ms: float | None
    compute_output_ms: float | None
    request_ms: float | None
    """Triton's request time (success duration) per request: receipt to the final response."""
    plausible: bool = True
    note: str = ""


# A per-request time above a day is not a measurement: an unsigned counter that went below zero and wrapped.
IMPLAUSIBLE_MS = 86_400_000.0


def window(before: dict[str, ModelStats], after: dict[str, ModelStats]) -> dict[str, ModelWindow]:
    """Per model: what the server counted between two reads, per successful request. A model whose differences
    are negative or absurd (a wrapped counter) is marked implausible with its values removed."""
    out = {}
    for name, a in sorted(after.items()):
        b = before.get(name, ModelStats(name))
        if a.success_count < b.success_count:  # the server restarted: what it counted since
            b = ModelStats(name)
        n = a.success_count - b.success_count
        per = {}
        bad = []
        for key, field_name in (("queue", "queue_ms"), ("compute_input", "compute_input_ms"),
                                ("compute_infer", "compute_infer_ms"), ("compute_output", "compute_output_ms"),
                                ("success", "request_ms")):
            ns = getattr(a, f"{key}_ns") - getattr(b, f"{key}_ns")
            value = ns / n / 1e6 if n else None
            if value is not None and not 0 <= value <= IMPLAUSIBLE_MS:
                bad.append(f"{key} {value:,.2f} ms/request")
            per[field_name] = value
        if bad:
            out[name] = ModelWindow(name, n, None, None, None, None, None, plausible=False,
                                    note="implausible statistics (" + ", ".join(bad) + "): a wrapped or broken "
                                    "counter in the server; shown as unavailable")
        else:
            out[name] = ModelWindow(name, n, **per)
    return out
