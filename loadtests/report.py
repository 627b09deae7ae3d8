"""The load-test report: a JSON summary with a stable schema and a single-file HTML report with plots.

JSON summary, schema_version 1 (also in docs/loadtest-report.md; a test keeps both lists equal to the output).
Latencies are milliseconds, throughputs per second, server durations microseconds. A value that the run cannot
give (no successful request, zero duration) is null, never 0. `<stats>` is an object with the keys count, avg,
min, max, std, p50, p90, p95, p99, or null when there are no values.

- `schema_version` (int): 1; bumped when a key is removed or changes meaning.
- `generated_at` (str): UTC time the summary was built, ISO 8601.
- `deployment` (str|null): the spec's `name`.
- `protocols` (list[str]): protocols seen in the samples (grpc, http_stream, http).
- `files` (object): files of this run.
- `files.samples` (list[str]): the JSONL sample files the metrics were computed from.
- `files.locust_csv` (list[str]): Locust's CSV files (`--csv PREFIX`), for Locust's own view.
- `files.html` (str|null): the HTML report.
- `overall` (metrics): metrics over every sample; the same object as `sweep[].metrics`.
- `overall.request_count` (int): requests sent, failed ones included.
- `overall.error_count` (int): failed requests.
- `overall.error_rate` (float|null): error_count / request_count.
- `overall.good_count` (int): successful requests within every goodput limit.
- `overall.duration_s` (float): last response - first request.
- `overall.request_throughput` (float|null): successful requests per second.
- `overall.output_token_throughput` (float|null): output tokens of successful requests per second.
- `overall.goodput` (float|null): good requests per second.
- `overall.ttft_ms` (<stats>): time to first token (streaming protocols).
- `overall.itl_ms` (<stats>): inter-token latency, requests with more than one output token.
- `overall.e2e_ms` (<stats>): end-to-end request latency.
- `overall.input_tokens` (<stats>): prompt lengths of successful requests.
- `overall.output_tokens` (<stats>): output lengths (tokenizer count of the text) of successful requests.
- `overall.errors` (list): failed requests grouped by message, most frequent first.
- `overall.errors[].message` (str): the error message (first 200 characters).
- `overall.errors[].count` (int): how many requests failed with it.
- `overall.timeline` (list): throughput over time in 1 s bins, by completion time.
- `overall.timeline[].t_s` (float): bin start, seconds after the first request.
- `overall.timeline[].requests_per_s` (float): successful requests completed in the bin, per second.
- `overall.timeline[].output_tokens_per_s` (float): their output tokens, per second.
- `overall.timeline[].errors` (int): failed requests in the bin.
- `sweep` (list): one entry per concurrency level, ascending.
- `sweep[].concurrency` (int): concurrent users of the level.
- `sweep[].metrics` (metrics): the `overall` object, over that level's samples.
- `slo` (object): the SLO gate, evaluated on `overall`.
- `slo.passed` (bool): every objective holds.
- `slo.exit_code` (int): 0 when passed, 1 otherwise.
- `slo.goodput_limits` (object): per-request limits used for goodput.
- `slo.goodput_limits.ttft_ms` (float|null): from slo.ttft_p95_ms.
- `slo.goodput_limits.itl_ms` (float|null): from slo.itl_p95_ms.
- `slo.goodput_limits.e2e_ms` (float|null): from slo.e2e_p99_ms.
- `slo.results` (list): one entry per objective set in the spec.
- `slo.results[].name` (str): the spec field, e.g. ttft_p95_ms.
- `slo.results[].measured` (float|null): null when the run gives no value (then it fails).
- `slo.results[].limit` (float): the spec's value.
- `slo.results[].unit` (str): ms, tok/s, or empty for a fraction.
- `slo.results[].comparison` (str): `<=` or `>=`: what must hold between measured and limit.
- `slo.results[].passed` (bool): whether it holds.
- `slo.results[].note` (str): why nothing was measured, else empty.
- `slo.results[].line` (str): the human verdict line, e.g. `FAIL ttft_p95_ms: measured 812.4 ms > limit 500 ms`.
- `server` (object|null): Triton's /metrics difference over the run; null when not scraped.
- `server.window_s` (float): seconds between the before and after scrapes.
- `server.models` (list): one entry per model (versions summed), sorted by name.
- `server.models[].model` (str): model name.
- `server.models[].request_success` (float): successful requests.
- `server.models[].request_failure` (list): failed requests by reason.
- `server.models[].request_failure[].reason` (str): REJECTED, CANCELED, BACKEND, OTHER.
- `server.models[].request_failure[].count` (float): failed requests with that reason.
- `server.models[].inference_count` (float): inferences (batch elements).
- `server.models[].exec_count` (float): model executions (batches).
- `server.models[].request_duration_us` (float): summed request time.
- `server.models[].queue_duration_us` (float): summed queue time.
- `server.models[].compute_input_duration_us` (float): summed input-copy time.
- `server.models[].compute_infer_duration_us` (float): summed model execution time.
- `server.models[].compute_output_duration_us` (float): summed output-copy time.
- `server.models[].pending_request_count_max` (float|null): most requests pending at once in any scrape.
- `server.models[].avg_queue_us` (float|null): queue time per successful request.
- `server.models[].avg_compute_us` (float|null): input + infer + output time per successful request.
- `server.models[].avg_request_us` (float|null): request time per successful request.
- `server.other` (list): every other series (GPU, TensorRT-LLM, custom metrics), by name.
- `server.other[].name` (str): metric name.
- `server.other[].labels` (object): label name -> value.
- `server.other[].type` (str): counter, gauge, histogram, summary or untyped.
- `server.other[].before` (float|null): value before the run; null when the series appeared during it.
- `server.other[].after` (float): value after the run.
- `server.other[].delta` (float|null): after - before for counters (restart-aware), else null.
- `server.other[].min` (float): lowest value seen before, during or after the run.
- `server.other[].max` (float): highest value seen.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from tritongen.spec import SLOSection
from tritongen.loadtests.metrics import compute_metrics, compute_sweep
from tritongen.loadtests.html_report import render_html
from tritongen.loadtests.prom import ServerView
from tritongen.loadtests.samples import Sample
from tritongen.loadtests.slo import evaluate, exit_code, goodput_limits

SCHEMA_VERSION = 1


def build_summary(samples: Sequence[Sample], slo: SLOSection, *, deployment: str | None = None,
                  server: ServerView | None = None, sample_files: Sequence[str | Path] = (),
                  locust_csv: Sequence[str | Path] = (), html_path: str | Path | None = None) -> dict:
    """The JSON summary (schema above) of one load test."""
    limits = goodput_limits(slo)
    overall = compute_metrics(samples, limits)
    results = evaluate(slo, overall)
    code = exit_code(results)
    return _json_safe({
        "schema_version": SCHEMA_VERSION,
        "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "deployment": deployment,
        "protocols": sorted({s.protocol for s in samples}),
        "files": {"samples": [str(p) for p in sample_files], "locust_csv": [str(p) for p in locust_csv],
                  "html": None if html_path is None else str(html_path)},
        "overall": overall.to_dict(),
        "sweep": [{"concurrency": c, "metrics": m.to_dict()} for c, m in compute_sweep(samples, limits).items()],
        "slo": {"passed": code == 0, "exit_code": code,
                "goodput_limits": {"ttft_ms": limits.ttft_ms, "itl_ms": limits.itl_ms, "e2e_ms": limits.e2e_ms},
                "results": [r.to_dict() for r in results]},
        "server": None if server is None else server.to_dict(),
    })  # type: ignore[return-value]


def _json_safe(value: object) -> object:
    # Prometheus summaries report NaN quantiles before their first observation; JSON has no NaN.
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    return value


@dataclass(frozen=True)
class Report:
    summary: dict
    json_path: Path
    html_path: Path

    @property
    def exit_code(self) -> int:
        return self.summary["slo"]["exit_code"]


def write_report(out_dir: str | Path, samples: Sequence[Sample], slo: SLOSection, *,
                 deployment: str | None = None, server: ServerView | None = None,
                 sample_files: Sequence[str | Path] = (), locust_csv: Sequence[str | Path] = (),
                 stem: str = "loadtest") -> Report:
    """Write `<stem>.json` and `<stem>.html` into `out_dir`; the caller exits with `report.exit_code`."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    json_path, html_path = out / f"{stem}.json", out / f"{stem}.html"
    summary = build_summary(samples, slo, deployment=deployment, server=server, sample_files=sample_files,
                            locust_csv=locust_csv, html_path=html_path)
    # Write to a temporary name and rename, so a reader never sees half a report.
    for path, text in ((html_path, render_html(summary, samples)),
                       (json_path, json.dumps(summary, indent=2, allow_nan=False) + "\n")):
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    return Report(summary, json_path, html_path)
