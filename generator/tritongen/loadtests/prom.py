"""Triton's server-side view: scrape the Prometheus /metrics text, diff snapshots, split queue from compute time.

Triton's nv_inference_* duration and count metrics are cumulative counters per (model, version), so the view of
a load test is the difference between a snapshot taken before it and one taken after. Snapshots taken during
the run (`PromPoller`) add the range a gauge went through (pending requests, KV-cache blocks, GPU utilisation).
Every series that is not one of the per-model counters below is passed through by name, custom metrics included.
The text format is parsed by prometheus_client's `text_string_to_metric_families`. Given a statistics source, each
scrape also reads Triton's statistics extension (tritongen.loadtests.model_stats) at the same moment, so both
views of a window come from the same two reads.
"""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace

from prometheus_client.parser import text_string_to_metric_families

from tritongen.errors import CheckFailed, problem
from tritongen.loadtests.model_stats import StatsUnavailable

Labels = tuple[tuple[str, str], ...]
SeriesKey = tuple[str, Labels]

# Per-model cumulative counters -> the ModelDelta field that holds their difference.
MODEL_COUNTERS = {
    "nv_inference_request_success": "request_success",
    "nv_inference_count": "inference_count",
    "nv_inference_exec_count": "exec_count",
    "nv_inference_request_duration_us": "request_duration_us",
    "nv_inference_queue_duration_us": "queue_duration_us",
    "nv_inference_compute_input_duration_us": "compute_input_duration_us",
    "nv_inference_compute_infer_duration_us": "compute_infer_duration_us",
    "nv_inference_compute_output_duration_us": "compute_output_duration_us",
}
REQUEST_FAILURE = "nv_inference_request_failure"
PENDING_REQUESTS = "nv_inference_pending_request_count"



class MetricsParseError(ValueError):
    """The scraped text is not Prometheus exposition format."""


@dataclass(frozen=True)
class Snapshot:
    """One scrape: every series' value, the declared metric types, and when it was taken (wall seconds)."""

    values: dict[SeriesKey, float]
    types: dict[str, str]
    taken_at: float
    models: dict | None = None
    """Triton's statistics extension read with this scrape (model name -> model_stats.ModelStats); None when
    not read or unavailable."""

    def get(self, name: str, **labels: str) -> float | None:
        return self.values.get((name, tuple(sorted(labels.items()))))

    def type_of(self, name: str) -> str:
        """Declared type; histogram/summary series (`x_bucket`, `x_sum`, `x_count`) take the type of `x`."""
        if name in self.types:
            return self.types[name]
        for suffix in ("_bucket", "_sum", "_count"):
            if name.endswith(suffix) and name[: -len(suffix)] in self.types:
                return self.types[name[: -len(suffix)]]
        return "untyped"


def parse_metrics(text: str, taken_at: float | None = None) -> Snapshot:
    """Parse Prometheus text exposition format (as Triton's :8002/metrics serves it) with prometheus_client."""
    values: dict[SeriesKey, float] = {}
    types: dict[str, str] = {}
    # prometheus_client names counter samples `<family>_total` even where the server wrote `<family>` (as
    # Triton's nv_inference_* counters are); series keep the names the server wrote.
    served = {line.split("{", 1)[0].strip().split(" ", 1)[0] for line in text.splitlines()
              if line.strip() and not line.lstrip().startswith("#")}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                name = sample.name
                if name not in served and name.endswith("_total") and name[:-6] in served:
                    name = name[:-6]
                values[(name, tuple(sorted(sample.labels.items())))] = sample.value
                if family.type != "unknown":
                    types.setdefault(family.name, family.type)
                    if family.type == "counter":
                        types.setdefault(name, "counter")
    except (ValueError, IndexError) as err:  # prometheus_client's parser raises both on malformed text
        raise MetricsParseError(f"not Prometheus text format: {str(err) or 'a sample line without a metric name'}") from None
    return Snapshot(values, types, time.time() if taken_at is None else taken_at)


def scrape(url: str, timeout_s: float = 5.0, stats=None) -> Snapshot:
    """Fetch and parse `url` (e.g. http://localhost:8002/metrics); with `stats` (model_stats.StatsSource), read
    Triton's statistics right after it (a failed read leaves `models` None: the breakdown then says so)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            text = response.read().decode("utf-8")
    except (urllib.error.URLError, OSError) as err:
        fix = "check that tritonserver runs with --allow-metrics=true and the metrics port"
        raise CheckFailed(problem(url, f"cannot scrape metrics ({err})", fix)) from None
    snapshot = parse_metrics(text)
    if stats is not None:
        try:
            snapshot = replace(snapshot, models=stats.fetch(timeout_s))
        except StatsUnavailable:
            pass
    return snapshot


class PromPoller:
    """Scrapes `url` every `interval_s` on a background thread (a greenlet under gevent) until stopped.

    Scrape failures are collected in `errors` rather than raised: a missed scrape should not abort a load test.
    """

    def __init__(self, url: str, interval_s: float = 1.0, timeout_s: float = 5.0, stats=None):
        self.url, self.interval_s, self.timeout_s, self.stats = url, interval_s, timeout_s, stats
        self.snapshots: list[Snapshot] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="prom-poller", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.snapshots.append(scrape(self.url, self.timeout_s, self.stats))
            except (CheckFailed, MetricsParseError) as err:
                self.errors.append(str(err))

    def start(self) -> PromPoller:
        self._thread.start()
        return self

    def stop(self) -> list[Snapshot]:
        self._stop.set()
        self._thread.join(self.timeout_s + self.interval_s)
        return list(self.snapshots)


def _counter_delta(before: float | None, after: float) -> float:
    # A counter lower than before means the server restarted; what it counted since then is `after`.
    if before is None or after < before:
        return after
    return after - before


@dataclass
class ModelDelta:
    """One model's counters over the window (all versions summed); durations in microseconds."""

    model: str
    request_success: float = 0
    request_failure: dict[str, float] = field(default_factory=dict)
    """Failed requests by `reason` label (REJECTED, CANCELED, BACKEND, OTHER)."""
    inference_count: float = 0
    exec_count: float = 0
    request_duration_us: float = 0
    queue_duration_us: float = 0
    compute_input_duration_us: float = 0
    compute_infer_duration_us: float = 0
    compute_output_duration_us: float = 0
    pending_request_count_max: float | None = None
    """Highest nv_inference_pending_request_count seen in the during/after snapshots."""

    def _per_request(self, total: float) -> float | None:
        return total / self.request_success if self.request_success else None

    @property
    def avg_queue_us(self) -> float | None:
        return self._per_request(self.queue_duration_us)

    @property
    def avg_compute_us(self) -> float | None:
        """Input + infer + output compute time per successful request."""
        return self._per_request(self.compute_input_duration_us + self.compute_infer_duration_us
                                 + self.compute_output_duration_us)

    @property
    def avg_request_us(self) -> float | None:
        return self._per_request(self.request_duration_us)

    def to_dict(self) -> dict:
        data = asdict(self)
        data["request_failure"] = [{"reason": r, "count": c} for r, c in sorted(self.request_failure.items())]
        data.update(avg_queue_us=self.avg_queue_us, avg_compute_us=self.avg_compute_us,
                    avg_request_us=self.avg_request_us)
        return data


@dataclass(frozen=True)
class PassthroughSeries:
    """A series that is not a per-model counter (GPU, TensorRT-LLM, custom metrics), as observed."""

    name: str
    labels: dict[str, str]
    type: str
    before: float | None
    after: float
    delta: float | None
    """after - before for counters (restart-aware); None for other types."""
    min: float
    max: float
    """Range over before, during and after snapshots."""


@dataclass(frozen=True)
class ServerView:
    window_s: float
    models: list[ModelDelta]
    other: list[PassthroughSeries]

    def model(self, name: str) -> ModelDelta | None:
        return next((m for m in self.models if m.model == name), None)

    def to_dict(self) -> dict:
        return {"window_s": self.window_s, "models": [m.to_dict() for m in self.models],
                "other": [asdict(s) for s in self.other]}


def server_view(before: Snapshot, after: Snapshot, during: Sequence[Snapshot] = ()) -> ServerView:
    """What the server did between two snapshots."""
    models: dict[str, ModelDelta] = {}
    other = []
    for key, value in sorted(after.values.items()):
        name, labels = key
        label_map = dict(labels)
        model_name = label_map.get("model")
        delta = _counter_delta(before.values.get(key), value)
        if model_name is not None and (name in MODEL_COUNTERS or name in (REQUEST_FAILURE, PENDING_REQUESTS)):
            model = models.setdefault(model_name, ModelDelta(model_name))
            if name == REQUEST_FAILURE:
                reason = label_map.get("reason", "unspecified")
                model.request_failure[reason] = model.request_failure.get(reason, 0) + delta
            elif name == PENDING_REQUESTS:
                seen = [s.values[key] for s in during if key in s.values] + [value]
                model.pending_request_count_max = max(seen + [model.pending_request_count_max or 0])
            else:
                attr = MODEL_COUNTERS[name]
                setattr(model, attr, getattr(model, attr) + delta)
            continue
        kind = after.type_of(name)
        seen = [s.values[key] for s in (before, *during) if key in s.values] + [value]
        other.append(PassthroughSeries(name=name, labels=label_map, type=kind, before=before.values.get(key),
                                       after=value, delta=delta if kind == "counter" else None,
                                       min=min(seen), max=max(seen)))
    return ServerView(window_s=after.taken_at - before.taken_at,
                      models=[models[m] for m in sorted(models)], other=other)
