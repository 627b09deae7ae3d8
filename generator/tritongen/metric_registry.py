"""Every metric of a load level, defined once: its key in the report, unit, documentation, how the console and the
HTML report show it, and the SLO gates on it.

`METRICS` lists the keys of `levels[].metrics` in report order (besides the structured `errors` and `timeline`);
each is a field of `tritongen.loadtests.metrics.Metrics`, which computes it. The report JSON, its documentation
(docs/loadtest-report.md, checked by tests), the console lines, sweep.csv, the HTML tables, the sweep plot and
the SLO gate all iterate this module instead of naming metrics. `GATES` are the objectives a spec may set under
`validation.slo`: the gate name is the spec field.

This module imports nothing from tritongen, so the planner can resolve the spec's objectives against it
without loading the load generator.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

STATS_KEYS = ("count", "avg", "min", "max", "std", "p50", "p90", "p95", "p99")
PERCENTILES = (50, 90, 95, 99)

Kind = Literal["count", "fraction", "seconds", "rate", "stats", "total"]

CLIENT_COUNTED = "client-counted"
"""The mark of a value that rests on token counts the client made (`levels[].tokens.counted_by` is `client`)."""


@dataclass(frozen=True)
class Metric:
    name: str
    """Key under `levels[].metrics` and field of `Metrics`."""
    kind: Kind
    """count/total (int), fraction, seconds (the window), rate (per second), stats (an object of STATS_KEYS)."""
    type: str
    """The JSON type as the documentation writes it: int, float, float|null, <stats>."""
    doc: str
    """What the value is (the documentation's description of the key)."""
    unit: str = ""
    """ms, tok/s, req/s, tokens, s, or empty (a count or a fraction)."""
    label: str = ""
    """Name in tables and plots (`TTFT`, `req/s`); empty: not shown in the tables of a level."""
    csv: str = ""
    """Column of sweep.csv (a stats metric: one column `<csv>_<percentile>_<unit>` per console percentile)."""
    phrase: str = ""
    """Counts and rates: how the console's level line says it, `{}` standing for the value."""
    percentiles: tuple[str, ...] = ()
    """Stats metrics: the percentiles the console line and sweep.csv report."""
    digits: int = 1
    """Decimals on the console and in the HTML tables."""
    better: Literal["lower", "higher"] | None = None
    """Which way is better, for an SLO gate: `lower` takes an upper bound (latencies, errors), `higher` a lower
    bound (throughput). None: no gate may use it."""
    unmeasured: str = ""
    """Why a gate finds no value for it (the verdict's note)."""
    counted: bool = False
    """The value rests on token counts. They are the server's, except for a model that returns none (NVIDIA's
    llmapi model): then the client counted the text it received, and every place the value is shown says
    CLIENT_COUNTED."""


M = Metric
METRICS: tuple[Metric, ...] = (
    M("request_count", "count", "int", "requests sent inside the window, failed ones included, cancelled not.",
      csv="requests", phrase="{} requests"),
    M("error_count", "count", "int", "failed requests among them, refusals for overload not included.",
      csv="errors", phrase="{} failed"),
    M("refused_count", "count", "int", "requests among them refused for overload (full queue: Triton's \"Exceeds "
      "maximum queue size\" over HTTP or gRPC, the OpenAI frontend's HTTP 429).", csv="refused", phrase="{} refused"),
    M("cancelled_count", "count", "int",
      "requests sent inside the window that the client cancelled on purpose.", csv="cancelled", phrase="{} cancelled"),
    M("error_rate", "fraction", "float|null", "(error_count + refused_count) / request_count.", better="lower",
      unmeasured="no request was sent"),
    M("good_count", "count", "int",
      "successful requests completed inside the window within every goodput limit."),
    M("completed_count", "count", "int", "successful requests completed inside the window."),
    M("in_flight_at_window_end", "count", "int", "requests sent before the window's end, finished after it.",
      label="in flight at end", csv="in_flight_at_end", phrase="{} in flight at its end"),
    M("warmup_s", "seconds", "float", "the unmeasured start.", unit="s"),
    M("window_start_s", "seconds", "float", "start of the measurement window.", unit="s"),
    M("window_end_s", "seconds", "float", "end of the measurement window (end of the load).", unit="s"),
    M("window_s", "seconds", "float", "window length, the denominator of every rate.", unit="s"),
    M("run_s", "seconds", "float", "first request to last response (warm-up, window and drain).", unit="s"),
    M("request_throughput", "rate", "float|null", "successful requests completed inside the window per second.",
      unit="req/s", label="req/s", csv="req_per_s", phrase="{} req/s", digits=2),
    M("output_token_throughput", "rate", "float|null", "output tokens that arrived inside the window per second.",
      unit="tok/s", label="output tok/s", csv="output_tok_per_s", phrase="{} output tok/s", better="higher",
      unmeasured="no response arrived", counted=True),
    M("goodput", "rate", "float|null", "good requests completed inside the window per second (a request's ITL, "
      "which one of its limits may bound, rests on its token count).", unit="req/s",
      label="goodput req/s", csv="goodput_req_per_s", phrase="goodput {} req/s", digits=2, counted=True),
    M("ttft_ms", "stats", "<stats>", "time to first token, requests sent inside the window (streaming).",
      unit="ms", label="TTFT", csv="ttft", percentiles=("p50", "p95"), better="lower",
      unmeasured="no successful streamed request (plain `http` has no first token; use grpc or http_stream)"),
    M("itl_ms", "stats", "<stats>", "inter-token latency, such requests with more than one output token.",
      unit="ms", label="ITL", csv="itl", percentiles=("p50", "p95"), better="lower",
      unmeasured="no successful streamed request with more than one output token", counted=True),
    M("e2e_ms", "stats", "<stats>", "end-to-end request latency, requests sent inside the window.", unit="ms",
      label="e2e", csv="e2e", percentiles=("p50", "p99"), better="lower", unmeasured="no successful request"),
    M("input_tokens", "stats", "<stats>", "prompt lengths of those requests (the server's num_input_tokens; "
      "client-counted where `levels[].tokens.counted_by` is client).", unit="tokens", label="input", counted=True),
    M("output_tokens", "stats", "<stats>", "output lengths of those requests (the server's num_output_tokens; "
      "client-counted where `levels[].tokens.counted_by` is client).", unit="tokens", label="output", counted=True),
    M("output_tokens_total", "total", "int", "output tokens of every request of the level: the sum of the "
      "server's counts, or of the client's counts where `levels[].tokens.counted_by` is client.", unit="tokens",
      counted=True),
    M("input_tokens_total", "total", "int", "prompt tokens of every request of the level (client-counted where "
      "`levels[].tokens.counted_by` is client).", unit="tokens", counted=True),
    M("requests_without_token_count", "count", "int",
      "successful requests the server reported no count for."),
    M("schedule_lag_ms", "stats", "<stats>", "open loop: send time - scheduled arrival.", unit="ms"),
)
del M
BY_NAME: dict[str, Metric] = {m.name: m for m in METRICS}


@dataclass(frozen=True)
class Gate:
    """An SLO objective: a bound on one metric (one statistic of a stats metric)."""

    name: str
    """The spec field under `validation.slo`, also the verdict's name."""
    metric: str
    stat: str | None = None
    """The statistic of a stats metric the bound is on (p95); None for a plain value."""
    per_request: bool = False
    """The same number bounds each request's own value for goodput (AIPerf `--goodput`)."""

    @property
    def comparison(self) -> Literal["<=", ">="]:
        """What must hold: measured <comparison> limit."""
        return "<=" if BY_NAME[self.metric].better == "lower" else ">="

    @property
    def unit(self) -> str:
        return BY_NAME[self.metric].unit


GATES: tuple[Gate, ...] = (
    Gate("ttft_p95_ms", "ttft_ms", "p95", per_request=True),
    Gate("itl_p95_ms", "itl_ms", "p95", per_request=True),
    Gate("e2e_p99_ms", "e2e_ms", "p99", per_request=True),
    Gate("min_output_tokens_per_s", "output_token_throughput"),
    Gate("max_error_rate", "error_rate"),
)
GATE_BY_NAME: dict[str, Gate] = {g.name: g for g in GATES}


@dataclass(frozen=True)
class Column:
    """One column of a table of levels: a metric's value or one statistic of it, or a text built from several
    (`text`, a format string over the level's metrics)."""

    metric: str
    stat: str | None = None
    header: str = ""
    """Empty: `<label> <stat> <unit>` for a statistic, the metric's label for a value."""
    digits: int | None = None
    """None: the metric's digits."""
    text: str = ""
    """A cell built from several metrics, e.g. `{error_count} / {request_count}`; empty: the value itself."""
    width: int = 9
    """Characters of the column in the stdout sweep table."""

    def header_of(self, with_unit: bool = True) -> str:
        if self.header:
            return self.header
        m = BY_NAME[self.metric]
        if self.stat is None:
            return m.label
        return f"{m.label} {self.stat} {m.unit}" if with_unit else f"{m.label} {self.stat}"

    @property
    def decimals(self) -> int:
        return BY_NAME[self.metric].digits if self.digits is None else self.digits


# The HTML table of levels, after the level and its verdict.
HTML_LEVEL_COLUMNS: tuple[Column, ...] = (
    Column("request_throughput"), Column("output_token_throughput"), Column("goodput"),
    Column("ttft_ms", "p50"), Column("ttft_ms", "p95"), Column("itl_ms", "p50", digits=2),
    Column("itl_ms", "p95", digits=2), Column("e2e_ms", "p99"),
    Column("error_count", header="errors", text="{error_count} / {request_count}"),
    Column("in_flight_at_window_end"),
    Column("window_s", header="window s", text="{window_start_s:.1f}-{window_end_s:.1f}"),
)

# The sweep table on stdout (headers without units): the throughputs and the percentiles the latency gates use.
SWEEP_TABLE_COLUMNS: tuple[Column, ...] = (
    Column("request_throughput", width=8), Column("output_token_throughput", header="tok/s"),
    Column("ttft_ms", "p95"), Column("itl_ms", "p95", width=8), Column("e2e_ms", "p99"),
)

# The percentile of every latency the sweep plot draws against the load level.
PLOT_PERCENTILE = "p95"


def shown_stats() -> tuple[Metric, ...]:
    """Stats metrics with a label: the rows of the HTML statistics table of a level."""
    return tuple(m for m in METRICS if m.kind == "stats" and m.label)


def counted() -> tuple[Metric, ...]:
    """Metrics whose value rests on token counts: client-counted when the model returns no counts."""
    return tuple(m for m in METRICS if m.counted)


def marked(label: str, metric: str, counted_by: str) -> str:
    """`label`, with the CLIENT_COUNTED mark when `metric` rests on counts the client made."""
    return f"{label} ({CLIENT_COUNTED})" if counted_by == "client" and BY_NAME[metric].counted else label


def latencies() -> tuple[Metric, ...]:
    """Latencies the console line, sweep.csv and the sweep plot report."""
    return tuple(m for m in METRICS if m.kind == "stats" and m.unit == "ms" and m.percentiles)


def csv_columns() -> tuple[tuple[str, Metric, str | None], ...]:
    """(column name, metric, statistic) of sweep.csv, in registry order."""
    columns: list[tuple[str, Metric, str | None]] = []
    for m in METRICS:
        if not m.csv:
            continue
        if m.kind == "stats":
            columns += [(f"{m.csv}_{p}_{m.unit}", m, p) for p in m.percentiles]
        else:
            columns.append((m.csv, m, None))
    return tuple(columns)
