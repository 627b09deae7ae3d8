"""The load-test report: a JSON summary with a stable schema and a single-file HTML report with plots.

JSON summary, schema_version 2 (also in docs/loadtest-report.md; a test keeps both lists equal to the output).
Latencies are milliseconds, throughputs per second, server durations microseconds, times in seconds after the
level's first request. A value the run cannot give is null, never 0. `<stats>` is an object with the keys
count, avg, min, max, std, p50, p90, p95, p99, or null when there are no values. `<server view>` is the object
documented under `levels[].server`.

- `schema_version` (int): 2; bumped when a key is removed or changes meaning.
- `generated_at` (str): UTC time the summary was built, ISO 8601.
- `deployment` (str|null): the spec's `name`.
- `incomplete` (str|null): why the run ended before its last level (Ctrl-C); the report then holds the levels that
  finished. null: every level ran.
- `protocols` (list[str]): protocols seen in the samples (grpc, http_stream, http).
- `metadata` (object|null): what was measured on what.
- `metadata.spec_digest` (str|null): sha256 of the file the run was given (a spec or a plan lock file).
- `metadata.plan_digest` (str): sha256 of the Plan's JSON (the resolved spec the run used).
- `metadata.runtime` (str): what served the tensorrt_llm model (a name in tritongen.runtimes.NAMES).
- `metadata.model` (str|null): the checkpoint folder.
- `metadata.tokenizer` (str): the tokenizer folder.
- `metadata.server` (object): the server's own metadata (Triton's /v2 or gRPC ServerMetadata).
- `metadata.server.name` (str|null): e.g. triton.
- `metadata.server.version` (str|null): tritonserver's version.
- `metadata.versions` (object): package versions on the load-generator host.
- `metadata.versions.tritongen` (str|null): tritongen.
- `metadata.versions.transformers` (str|null): transformers.
- `metadata.versions.torch` (str|null): torch.
- `metadata.versions.locust` (str|null): locust.
- `metadata.versions.tritonclient` (str|null): tritonclient.
- `metadata.versions.python` (str): the Python version.
- `metadata.hardware` (object): the load-generator host.
- `metadata.hardware.host` (str): host name.
- `metadata.hardware.gpus` (list): GPUs found through NVML (empty without NVML or GPUs).
- `metadata.hardware.gpus[].index` (int): NVML index.
- `metadata.hardware.gpus[].name` (str): e.g. NVIDIA H200.
- `metadata.hardware.gpus[].memory_total_bytes` (int): device memory.
- `metadata.hardware.gpu_driver` (str|null): NVIDIA driver version.
- `metadata.hardware.cpu_model` (str|null): CPU model name.
- `metadata.hardware.cpu_count` (int|null): logical CPUs.
- `metadata.workload` (object): the load definition the Locust processes ran (tritongen.loadtests.runner.workload).
- `load` (object): how the load was applied.
- `load.mode` (str): closed (users), open (request rate) or trace (replayed arrival times).
- `load.level_unit` (str): users or requests/s.
- `load.warmup_s` (float): unmeasured seconds at the start of each level.
- `load.duration_s` (float|null): seconds of load per level (requests are sent for this long, then drain).
- `files` (object): files of this run.
- `files.samples` (list[str]): the JSONL sample files the metrics were computed from.
- `files.locust_csv` (list[str]): Locust's CSV files (`--csv PREFIX`), for Locust's own view.
- `files.html` (str|null): the HTML report.
- `levels` (list): one entry per load level, ascending (one entry without a sweep).
- `levels[].level` (float): users (closed loop) or requests/s (open loop).
- `levels[].metrics` (object): the level's metrics over its measurement window.
- `levels[].metrics.<name>`: one key per metric of tritongen.metric_registry.METRICS, in its order, with
  the type and description given there.
- `levels[].client_counted` (list[str]): the keys of `levels[].metrics` whose values rest on token counts the
  client made (`tokens.counted_by` is client: the model returns no counts); empty when the server counted.
- `levels[].metrics.errors` (list): failed requests grouped by message, most frequent first.
- `levels[].metrics.errors[].message` (str): the error message (first 200 characters).
- `levels[].metrics.errors[].count` (int): how many requests failed with it.
- `levels[].metrics.timeline` (list): throughput over time in 1 s bins over the whole level.
- `levels[].metrics.timeline[].t_s` (float): bin start.
- `levels[].metrics.timeline[].requests_per_s` (float): successful requests completed in the bin, per second.
- `levels[].metrics.timeline[].output_tokens_per_s` (float): output tokens that arrived in the bin, per second.
- `levels[].metrics.timeline[].good_requests_per_s` (float): successful requests completed in the bin within every
  goodput limit, per second.
- `levels[].metrics.timeline[].errors` (int): failed requests in the bin.
- `levels[].metrics.timeline[].in_window` (bool): the bin starts inside the measurement window.
- `levels[].confidence` (object): how sure the level's figures are (tritongen.loadtests.confidence).
- `levels[].confidence.level` (float): the intervals' confidence level (0.95).
- `levels[].confidence.method` (str): how they were computed (scipy.stats.bootstrap, percentile method).
- `levels[].confidence.figures` (list): one entry per rate metric (resampled over the window's whole 1 s bins) and
  per reported latency percentile (resampled over the requests).
- `levels[].confidence.figures[].name` (str): the metric (request_throughput, output_token_throughput, goodput) or
  the metric and percentile (`ttft_ms.p95`, ...).
- `levels[].confidence.figures[].value` (float): the figure itself (as in `levels[].metrics`).
- `levels[].confidence.figures[].n` (int): the requests the figure rests on (a rate: those it counts).
- `levels[].confidence.figures[].low` (float|null): the interval's lower end; null with fewer than 2 values.
- `levels[].confidence.figures[].high` (float|null): its upper end.
- `levels[].confidence.warning` (str|null): set when fewer than 30 requests completed inside the window.
- `levels[].slo` (object): the SLO verdict of this level.
- `levels[].slo.passed` (bool): every objective holds at this level.
- `levels[].slo.results` (list): one entry per objective set in the spec, then `client_tokens_equal_server` when the token totals are comparable (a mismatch fails the level).
- `levels[].slo.results[].name` (str): the spec field, e.g. ttft_p95_ms, or client_tokens_equal_server.
- `levels[].slo.results[].measured` (float|null): null when the run gives no value (then it fails).
- `levels[].slo.results[].limit` (float): the spec's value (for the token check: the server's counter).
- `levels[].slo.results[].unit` (str): ms, tok/s, tokens, or empty for a fraction.
- `levels[].slo.results[].comparison` (str): `<=`, `>=` or `==`: what must hold between measured and limit.
- `levels[].slo.results[].passed` (bool): whether it holds.
- `levels[].slo.results[].note` (str): why nothing was measured (or why the token check failed), else empty.
- `levels[].slo.results[].client_counted` (bool): the measured value rests on token counts the client made; the
  line says `(client-counted)`.
- `levels[].slo.results[].line` (str): the verdict line, e.g. `FAIL ttft_p95_ms: measured 812.4 ms > limit 500 ms`.
- `levels[].tokens` (object): client token totals against the server's counter over the whole level.
- `levels[].tokens.client_output_tokens` (int): sum of the server-reported counts the client received.
- `levels[].tokens.server_output_tokens` (float|null): delta of the runtime's output-token counter; null without it.
- `levels[].tokens.counted_by` (str): `server` (counts the server returned) or `client` (the model returns none:
  the deployment's tokenizer's count of the text received, labelled client-counted; no server counter to compare).
- `levels[].tokens.equal` (bool|null): the two agree; null without the counter, when a request was cancelled
  or failed (the server may have sent tokens the client never read), or when a request came without a count.
- `levels[].server` (<server view>|null): Triton's /metrics difference over the window; null when not scraped.
- `levels[].server.window_s` (float): seconds between the two scrapes the difference is taken from.
- `levels[].server.models` (list): one entry per model (versions summed), sorted by name.
- `levels[].server.models[].model` (str): model name.
- `levels[].server.models[].request_success` (float): successful requests.
- `levels[].server.models[].request_failure` (list): failed requests by reason.
- `levels[].server.models[].request_failure[].reason` (str): REJECTED, CANCELED, BACKEND, OTHER.
- `levels[].server.models[].request_failure[].count` (float): failed requests with that reason.
- `levels[].server.models[].inference_count` (float): inferences (batch elements).
- `levels[].server.models[].exec_count` (float): model executions (batches).
- `levels[].server.models[].request_duration_us` (float): summed request time.
- `levels[].server.models[].queue_duration_us` (float): summed queue time.
- `levels[].server.models[].compute_input_duration_us` (float): summed input-copy time.
- `levels[].server.models[].compute_infer_duration_us` (float): summed model execution time.
- `levels[].server.models[].compute_output_duration_us` (float): summed output-copy time.
- `levels[].server.models[].pending_request_count_max` (float|null): most requests pending at once in any scrape.
- `levels[].server.models[].avg_queue_us` (float|null): queue time per successful request.
- `levels[].server.models[].avg_compute_us` (float|null): input + infer + output time per successful request.
- `levels[].server.models[].avg_request_us` (float|null): request time per successful request.
- `levels[].server.other` (list): every other series (GPU, TensorRT-LLM, tritongen_llm_*), by name.
- `levels[].server.other[].name` (str): metric name.
- `levels[].server.other[].labels` (object): label name -> value.
- `levels[].server.other[].type` (str): counter, gauge, histogram, summary or untyped.
- `levels[].server.other[].before` (float|null): value at the first scrape; null when the series appeared later.
- `levels[].server.other[].after` (float): value at the second scrape.
- `levels[].server.other[].delta` (float|null): after - before for counters (restart-aware), else null.
- `levels[].server.other[].min` (float): lowest value seen in between.
- `levels[].server.other[].max` (float): highest value seen.
- `levels[].server_run` (<server view>|null): the same difference over the whole level, drain included.
- `levels[].server_active_after` (float|null): requests the server still worked on after the drain (must be 0).
- `levels[].stages` (object|null): where the time goes: the level's server time per request of the called model,
  split into stages (docs/loadtest-report.md, "Where the time goes"); null when Triton's statistics were not read.
- `levels[].stages.called_model` (str|null): the model whose requests the stages are per (ensemble, tensorrt_llm_bls
  or the runtime's own model).
- `levels[].stages.requests` (int): its successful requests inside the window, as Triton counted them.
- `levels[].stages.stages` (list): frontend (protocol openai only), queue, preprocessing, first token, per-token,
  detokenizer, ensemble/BLS, in this order.
- `levels[].stages.stages[].name` (str): the stage.
- `levels[].stages.stages[].ms` (float|null): milliseconds per request; null when the server does not measure it (or
  measured nonsense).
- `levels[].stages.stages[].source` (str): triton (statistics extension), tritongen (the model's own counters),
  frontend (its /metrics) or derived (the ensemble's request time minus the stages inside it).
- `levels[].stages.stages[].note` (str): why it is missing, or how it was measured.
- `levels[].stages.per_token_ms` (float|null): the model's own time per output token after the first.
- `levels[].stages.sum_ms` (float|null): sum of the stages that have a value.
- `levels[].stages.client_e2e_ms` (float|null): the client's mean end-to-end latency of the requests that completed
  between the same two reads of the server (metrics.e2e_ms.avg when the reads' times are unknown)
  (metrics.e2e_ms.avg).
- `levels[].stages.sum_over_client_e2e` (float|null): sum_ms / client_e2e_ms: how much of the client's latency the
  server accounts for.
- `levels[].stages.unaccounted_ms` (float|null): client_e2e_ms - sum_ms (negative: the stages exceed it).
- `levels[].stages.coverage` (str): empty when the stages add up to client_e2e_ms within 10%; else what is not
  measured (or why they exceed it), named.
- `levels[].stages.dominant` (str|null): the stage with the most time.
- `levels[].stages.models` (list): Triton's statistics per model over the window (versions summed), sorted by name.
- `levels[].stages.models[].model` (str): model name.
- `levels[].stages.models[].requests` (int): successful requests.
- `levels[].stages.models[].queue_ms` (float|null): queue time per request.
- `levels[].stages.models[].compute_input_ms` (float|null): input-copy time per request.
- `levels[].stages.models[].compute_infer_ms` (float|null): execution time per request (a decoupled model's
  execute() call, not the whole request).
- `levels[].stages.models[].compute_output_ms` (float|null): output-copy time per request.
- `levels[].stages.models[].request_ms` (float|null): Triton's request time per request.
- `levels[].stages.models[].plausible` (bool): false when a value was negative or above a day per request (a wrapped
  counter): then every value is null.
- `levels[].stages.models[].note` (str): what was implausible, else empty.
- `levels[].stages.note` (str): models whose statistics were dropped as implausible, else empty.
- `levels[].load_generator` (object|null): CPU use of the Locust processes during the level.
- `levels[].load_generator.processes` (list): one entry per Locust process.
- `levels[].load_generator.processes[].pid` (int): process id.
- `levels[].load_generator.processes[].role` (str): worker (sends requests) or master.
- `levels[].load_generator.processes[].wall_s` (float): seconds from test start to stop.
- `levels[].load_generator.processes[].cpu_s` (float): CPU seconds (user + system) in that time.
- `levels[].load_generator.processes[].cpu_fraction` (float|null): cpu_s / wall_s (1.0 = one core).
- `levels[].load_generator.max_cpu_fraction` (float|null): the busiest process.
- `levels[].load_generator.warning` (str|null): set when a process passed 80% of a core.
- `levels[].host` (object|null): host-wide CPU over the level (tritongen.loadtests.host); null where /proc/stat
  is not readable.
- `levels[].host.wall_s` (float): seconds between the two reads.
- `levels[].host.cpus` (int): logical CPUs of the host.
- `levels[].host.busy_cores` (float): CPUs' worth of time the host spent busy (/proc/stat).
- `levels[].host.ours_cores` (float): of that, the load test's own processes and any tritonserver (with its stubs).
- `levels[].host.others_cores` (float): the rest: other processes.
- `levels[].host.steal_fraction` (float): steal time over all CPU time (a hypervisor's other guests).
- `levels[].host.load_average` (float|null): the 1-minute load average at the level's end.
- `levels[].host.warning` (str|null): set when the host, not the server, may be the limit (other processes above
  25% of the CPUs, steal above 5%, or a run queue longer than the CPUs with them above 90% busy).
- `levels[].adapters` (object|null): with validation.load.adapters, per adapter name (`base`: the base model) its
  request_count, error_count, completed_count, request_throughput, output_token_throughput, output_tokens_total,
  ttft_ms, itl_ms and e2e_ms, as `metrics` defines them, over the level's window (client-side: the runtimes count
  output tokens per model, not per adapter); the adapters' request_count, error_count and completed_count sum to
  the level's.
- `levels[].structured` (object|null): with validation.load.structured, the level's requests that carried a JSON
  schema; null when it sent none.
- `levels[].structured.n` (int): structured requests sent (warm-up included: every output must be valid).
- `levels[].structured.valid` (int): succeeded, and the whole text parses as JSON and validates (jsonschema).
- `levels[].structured.invalid` (int): succeeded, but the text does not parse or validate; any fails the level
  (result `structured_outputs_invalid`).
- `levels[].structured.truncated` (int): ended at validation.load.structured.max_tokens without a valid text.
- `levels[].structured.failed` (int): errors (no output to check); cancelled requests are in none of the counts.
- `levels[].structured.ttft_ms` (object|null): the structured requests' ttft_ms, as `metrics` defines it.
- `levels[].structured.itl_ms` (object|null): their itl_ms.
- `levels[].structured.e2e_ms` (object|null): their e2e_ms.
- `levels[].structured.plain` (object): the level's plain requests beside them.
- `levels[].structured.plain.n` (int): plain requests sent.
- `levels[].structured.plain.ttft_ms` (object|null): their ttft_ms.
- `levels[].structured.plain.itl_ms` (object|null): their itl_ms.
- `levels[].structured.plain.e2e_ms` (object|null): their e2e_ms.
- `capacity` (object): the capacity line.
- `capacity.level` (float|null): highest level at which every SLO holds, every lower level passing too.
- `capacity.unit` (str): users or requests/s.
- `capacity.passing_above` (list[float]): levels above the first failing one that passed (not trusted).
- `capacity.rule` (str): min_capacity (capacity >= slo.min_capacity) or all_levels (every level passes).
- `capacity.min_capacity` (float|null): slo.min_capacity.
- `capacity.passed` (bool): the gate under that rule.
- `capacity.line` (str): the printed capacity line.
- `slo` (object): the gate.
- `slo.passed` (bool): capacity.passed.
- `slo.exit_code` (int): 0 when passed, 1 otherwise.
- `slo.goodput_limits` (object): per-request limits used for goodput.
- `slo.goodput_limits.ttft_ms` (float|null): from slo.ttft_p95_ms.
- `slo.goodput_limits.itl_ms` (float|null): from slo.itl_p95_ms.
- `slo.goodput_limits.e2e_ms` (float|null): from slo.e2e_p99_ms.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from tritongen import metric_registry as registry
from tritongen.loadtests.html_report import render_html
from tritongen.loadtests.confidence import figures
from tritongen.loadtests.metrics import (GoodputLimits, compute_metrics, compute_sweep, measurement_window,
                                        window_latencies)
from tritongen.loadtests.prom import ServerView
from tritongen.loadtests.samples import Sample
from tritongen.loadtests.slo import LevelVerdict, capacity, evaluate, goodput_limits, structured_check, token_check
from tritongen.loadtests.stages import breakdown

if TYPE_CHECKING:
    from tritongen.plan.slo import SLOPlan

SCHEMA_VERSION = 2


@dataclass(frozen=True)
class LoadInfo:
    mode: str = "closed"
    level_unit: str = "users"
    warmup_s: float = 0.0
    duration_s: float | None = None


@dataclass
class LevelServer:
    """What the server side saw during one level."""

    window: ServerView | None = None
    run: ServerView | None = None
    active_after: float | None = None
    edges: tuple | None = None
    """The two scrapes (prom.Snapshot, carrying Triton's statistics) at the window's edges."""
    frontend_edges: tuple = ()
    """The OpenAI frontend's scrapes at the same edges (protocol openai)."""
    called_model: str | None = None
    """The Triton model the users called (the frontend's, for protocol openai)."""


@dataclass
class RunInputs:
    """Everything besides the samples that goes into a summary; all optional."""

    load: LoadInfo = field(default_factory=LoadInfo)
    deployment: str | None = None
    metadata: dict | None = None
    servers: Mapping[float, LevelServer] = field(default_factory=dict)
    load_generator: Mapping[float, dict] = field(default_factory=dict)
    host: Mapping[float, dict | None] = field(default_factory=dict)
    """Host-wide CPU per level (tritongen.loadtests.host)."""
    sample_files: Sequence[str | Path] = ()
    output_token_counter: str | None = None
    """The server's counter of generated tokens (the runtime's `output_token_counter`); None: no token check."""
    locust_csv: Sequence[str | Path] = ()
    incomplete: str | None = None
    """Why the run ended before its last level (the report then holds the levels that finished); None: it ran all."""


def server_output_tokens(view: ServerView | None, counter: str | None) -> float | None:
    if view is None or counter is None:
        return None
    series = [s for s in view.other if s.name == counter]
    return sum(s.delta or 0 for s in series) if series else None


def build_summary(samples: Sequence[Sample], slo: SLOPlan, run: RunInputs | None = None,
                  html_path: str | Path | None = None) -> dict:
    """The JSON summary (schema above) of one load test."""
    run = run or RunInputs()
    limits = goodput_limits(slo)
    levels, verdicts = [], []
    for level, metrics in compute_sweep(samples, limits, warmup_s=run.load.warmup_s,
                                        duration_s=run.load.duration_s).items():
        level_samples = [s for s in samples if s.level == level]
        counted_by = "client" if any(s.counted_by == "client" for s in level_samples) else "server"
        results = evaluate(slo, metrics, counted_by)
        server = run.servers.get(level, LevelServer())
        counted = server_output_tokens(server.run, run.output_token_counter)
        # Tokens the server sent after a client stopped reading (a cancelled or broken stream) never reach the
        # client: the totals are comparable only when every request of the level ended normally.
        # A request the server reported no count for has nothing to compare.
        comparable = counted is not None and all(s.ok and s.output_tokens is not None for s in level_samples)
        if comparable:
            results.append(token_check(metrics.output_tokens_total, counted))
        structured = _structured(level_samples, limits, run)
        if structured is not None:
            results.append(structured_check(structured["invalid"]))
        verdicts.append(LevelVerdict(level, results))
        as_dict = metrics.to_dict()
        levels.append({
            "level": level, "metrics": as_dict,
            "client_counted": [m.name for m in registry.counted()] if counted_by == "client" else [],
            "confidence": figures(as_dict, window_latencies(level_samples, run.load.warmup_s, run.load.duration_s)),
            "slo": {"passed": all(r.passed for r in results), "results": [r.to_dict() for r in results]},
            "tokens": {"client_output_tokens": metrics.output_tokens_total, "server_output_tokens": counted,
                       "counted_by": counted_by,
                       "equal": counted == metrics.output_tokens_total if comparable else None},
            "server": None if server.window is None else server.window.to_dict(),
            "server_run": None if server.run is None else server.run.to_dict(),
            "server_active_after": server.active_after,
            "stages": None if server.edges is None else breakdown(
                *server.edges, _client_e2e_between(level_samples, server.edges,
                                                   None if metrics.e2e_ms is None else metrics.e2e_ms.avg),
                called=server.called_model, frontend=server.frontend_edges),
            "load_generator": run.load_generator.get(level),
            "host": run.host.get(level),
            "adapters": _per_adapter(level_samples, limits, run),
            "structured": structured,
        })
    cap = capacity(verdicts, run.load.level_unit, slo.min_capacity)
    return _json_safe({
        "schema_version": SCHEMA_VERSION,
        "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "deployment": run.deployment,
        "incomplete": run.incomplete,
        "protocols": sorted({s.protocol for s in samples}),
        "metadata": run.metadata,
        "load": {"mode": run.load.mode, "level_unit": run.load.level_unit, "warmup_s": run.load.warmup_s,
                 "duration_s": run.load.duration_s},
        "files": {"samples": [str(p) for p in run.sample_files], "locust_csv": [str(p) for p in run.locust_csv],
                  "html": None if html_path is None else str(html_path)},
        "levels": levels,
        "capacity": cap.to_dict(),
        "slo": {"passed": cap.passed, "exit_code": 0 if cap.passed else 1,
                "goodput_limits": asdict(limits)},
    })  # type: ignore[return-value]


def _client_e2e_between(samples: Sequence[Sample], edges: tuple, fallback: float | None) -> float | None:
    """The mean e2e (ms) of the successful requests that completed between the two server reads: the requests the
    server's statistics describe (stages.py, "Adding up"); `fallback` when the reads carry no times."""
    t0, t1 = (getattr(e, "taken_at", None) for e in edges)
    if t0 is None or t1 is None:
        return fallback
    e2e = [s.response_times[-1] * 1e3 for s in samples
           if s.ok and t0 <= s.start_wall_s + s.end_s <= t1]
    return sum(e2e) / len(e2e) if e2e else None
ADAPTER_FIGURES = ("request_count", "error_count", "completed_count", "request_throughput",
                   "output_token_throughput", "output_tokens_total", "ttft_ms", "itl_ms", "e2e_ms")
"""The figures a level reports per LoRA adapter (validation.load.adapters), each as its `metrics` entry means."""


def level_start(samples: Sequence[Sample]) -> float:
    """Wall time of a level's first request: the origin of its window, shared by the figures of its subsets."""
    return measurement_window(samples)[0]


def _per_adapter(samples: Sequence[Sample], limits: GoodputLimits, run: RunInputs) -> dict | None:
    """{adapter name: figures} of a level whose requests went to LoRA adapters; None for one that named none.
    Client-side figures: the runtimes count their output tokens for the whole model, not per adapter."""
    names = sorted({s.adapter for s in samples if s.adapter is not None})
    if not names:
        return None
    figures = {}
    for name in names:
        metrics = compute_metrics([s for s in samples if s.adapter == name], limits, warmup_s=run.load.warmup_s,
                                  duration_s=run.load.duration_s, start_wall_s=level_start(samples)).to_dict()
        figures[name] = {key: metrics[key] for key in ADAPTER_FIGURES}
    return figures


LATENCY_FIGURES = ("ttft_ms", "itl_ms", "e2e_ms")


def _structured(samples: Sequence[Sample], limits: GoodputLimits, run: RunInputs) -> dict | None:
    """The structured requests' outcome counts and latencies beside the plain requests' (validation.load.structured);
    None for a level that sent none. Counts are over every structured request of the level (each output must be
    valid, the warm-up's too); latencies over the measurement window, as `metrics` defines them."""
    chosen = [s for s in samples if s.schema is not None]
    if not chosen:
        return None
    plain = [s for s in samples if s.schema is None]

    def latencies(group: Sequence[Sample]) -> dict:
        metrics = compute_metrics(group, limits, warmup_s=run.load.warmup_s, duration_s=run.load.duration_s,
                                  start_wall_s=level_start(samples)).to_dict()
        return {key: metrics[key] for key in LATENCY_FIGURES}

    outcomes = [s.schema_result for s in chosen]
    return {"n": len(chosen), **{k: outcomes.count(k) for k in ("valid", "invalid", "truncated")},
            "failed": sum(1 for s in chosen if s.failed), **latencies(chosen),
            "plain": {"n": len(plain), **(latencies(plain) if plain else dict.fromkeys(LATENCY_FIGURES))}}


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


def write_report(out_dir: str | Path, samples: Sequence[Sample], slo: SLOPlan, run: RunInputs | None = None,
                 *, stem: str = "loadtest") -> Report:
    """Write `<stem>.json` and `<stem>.html` into `out_dir`; the caller exits with `report.exit_code`."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    json_path, html_path = out / f"{stem}.json", out / f"{stem}.html"
    summary = build_summary(samples, slo, run, html_path=html_path)
    # Write to a temporary name and rename, so a reader never sees half a report.
    for path, text in ((html_path, render_html(summary, samples)),
                       (json_path, json.dumps(summary, indent=2, allow_nan=False) + "\n")):
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    return Report(summary, json_path, html_path)
