"""The HTML load-test report: one self-contained file, plots embedded as base64 PNGs.

Plots are drawn on `matplotlib.figure.Figure` directly rather than through pyplot, so rendering a report never
selects a global backend or keeps figures alive in the process that runs Locust.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Sequence

from matplotlib.figure import Figure

from tritongen.loadtests.metrics import request_latency
from tritongen.loadtests.samples import Sample

_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 4px 8px; text-align: right; }
th:first-child, td:first-child { text-align: left; }
.pass { color: #17702a; } .fail { color: #b00020; font-weight: bold; }
figure { display: inline-block; margin: 0.5em; }
"""


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _stat(stats: dict | None, key: str) -> float | None:
    return None if stats is None else stats[key]


def _png(fig: Figure) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _figure(title: str, png: str) -> str:
    t = html.escape(title)
    return f'<figure><img alt="{t}" src="data:image/png;base64,{png}"><figcaption>{t}</figcaption></figure>'


def _histogram(values: Sequence[float], title: str, xlabel: str) -> str:
    fig = Figure(figsize=(6, 3.5))
    ax = fig.subplots()
    ax.hist(values, bins=min(50, max(5, len(values) // 4)), color="#4c72b0")
    ax.set(title=title, xlabel=xlabel, ylabel="requests")
    return _figure(title, _png(fig))


def _legend_of_both(ax, ax2) -> None:
    # One legend for the two y axes, inside the plot so it cannot cover the title.
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, loc="best", fontsize="small")


def _timeline(timeline: list[dict]) -> str:
    fig = Figure(figsize=(6, 3.5))
    ax = fig.subplots()
    t = [p["t_s"] for p in timeline]
    ax.plot(t, [p["output_tokens_per_s"] for p in timeline], color="#4c72b0", label="output tok/s")
    ax.set(title="Throughput over time", xlabel="seconds since first request", ylabel="output tokens/s")
    ax2 = ax.twinx()
    ax2.plot(t, [p["requests_per_s"] for p in timeline], color="#dd8452", label="requests/s")
    ax2.set_ylabel("requests/s")
    _legend_of_both(ax, ax2)
    return _figure("Throughput over time", _png(fig))


def _versus_concurrency(sweep: list[dict]) -> list[str]:
    levels = [row["concurrency"] for row in sweep]
    lat = Figure(figsize=(6, 3.5))
    ax = lat.subplots()
    for key, stat, label in (("ttft_ms", "p95", "TTFT p95"), ("itl_ms", "p95", "ITL p95"),
                             ("e2e_ms", "p95", "e2e p95")):
        ys = [_stat(row["metrics"][key], stat) for row in sweep]
        if any(y is not None for y in ys):
            ax.plot(levels, [float("nan") if y is None else y for y in ys], marker="o", label=label)
    ax.set(title="Latency vs concurrency", xlabel="concurrent users", ylabel="ms", yscale="log")
    if ax.lines:  # no successful request at any level leaves nothing to label
        ax.legend()
    thr = Figure(figsize=(6, 3.5))
    ax = thr.subplots()
    ax.plot(levels, [row["metrics"]["output_token_throughput"] or 0 for row in sweep], marker="o",
            label="output tok/s")
    ax.set(title="Throughput vs concurrency", xlabel="concurrent users", ylabel="output tokens/s")
    ax2 = ax.twinx()
    ax2.plot(levels, [row["metrics"]["request_throughput"] or 0 for row in sweep], marker="s", color="#dd8452",
             label="requests/s")
    ax2.set_ylabel("requests/s")
    _legend_of_both(ax, ax2)
    return [_figure("Latency vs concurrency", _png(lat)), _figure("Throughput vs concurrency", _png(thr))]


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _sweep_table(sweep: list[dict]) -> str:
    rows = []
    for row in sweep:
        m = row["metrics"]
        rows.append([str(row["concurrency"]), _num(m["request_throughput"], 2), _num(m["output_token_throughput"]),
                     _num(_stat(m["ttft_ms"], "p50")), _num(_stat(m["ttft_ms"], "p95")),
                     _num(_stat(m["itl_ms"], "p50"), 2), _num(_stat(m["itl_ms"], "p95"), 2),
                     _num(_stat(m["e2e_ms"], "p95")), f"{m['error_count']} / {m['request_count']}"])
    return _table(["concurrency", "req/s", "output tok/s", "TTFT p50 ms", "TTFT p95 ms", "ITL p50 ms",
                   "ITL p95 ms", "e2e p95 ms", "errors"], rows)


def _latency_table(overall: dict) -> str:
    rows = []
    for key, label in (("ttft_ms", "TTFT ms"), ("itl_ms", "ITL ms"), ("e2e_ms", "e2e ms"),
                       ("input_tokens", "input tokens"), ("output_tokens", "output tokens")):
        s = overall[key]
        rows.append([label] + [_num(_stat(s, k), 2) for k in ("avg", "min", "max", "std", "p50", "p90", "p95",
                                                                 "p99")])
    return _table(["", "avg", "min", "max", "std", "p50", "p90", "p95", "p99"], rows)


def _server_table(server: dict) -> str:
    rows = []
    for m in server["models"]:
        failures = ", ".join(f"{f['reason']} {f['count']:g}" for f in m["request_failure"] if f["count"]) or "0"
        rows.append([m["model"], f"{m['request_success']:g}", failures, f"{m['exec_count']:g}",
                     _num(None if m["avg_queue_us"] is None else m["avg_queue_us"] / 1e3, 2),
                     _num(None if m["avg_compute_us"] is None else m["avg_compute_us"] / 1e3, 2),
                     _num(None if m["avg_request_us"] is None else m["avg_request_us"] / 1e3, 2),
                     _num(m["pending_request_count_max"], 0)])
    return _table(["model", "success", "failures", "executions", "queue ms/req", "compute ms/req",
                   "request ms/req", "max pending"], rows)


def render_html(summary: dict, samples: Sequence[Sample]) -> str:
    """The report page for a summary built by report.build_summary over the same samples."""
    overall, slo = summary["overall"], summary["slo"]
    latencies = [lat for lat in map(request_latency, samples) if lat is not None]
    ttft = [lat.ttft_ms for lat in latencies if lat.ttft_ms is not None]
    itl = [lat.itl_ms for lat in latencies if lat.itl_ms is not None]

    plots = []
    if ttft:
        plots.append(_histogram(ttft, "TTFT distribution", "time to first token (ms)"))
    if itl:
        plots.append(_histogram(itl, "ITL distribution", "inter-token latency (ms)"))
    if overall["timeline"]:
        plots.append(_timeline(overall["timeline"]))
    if len(summary["sweep"]) > 1:
        plots.extend(_versus_concurrency(summary["sweep"]))

    verdict = "PASS" if slo["passed"] else "FAIL"
    slo_lines = "".join(f'<li class="{"pass" if r["passed"] else "fail"}">{html.escape(r["line"])}</li>'
                        for r in slo["results"]) or "<li>no objectives set</li>"
    errors = "".join(f"<li>{e['count']} x {html.escape(e['message'])}</li>" for e in overall["errors"])
    files = [*summary["files"]["samples"], *summary["files"]["locust_csv"]]
    parts = [
        "<!DOCTYPE html>", '<html><head><meta charset="utf-8">',
        f"<title>tritongen load test: {html.escape(summary['deployment'] or '')}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>Load test {html.escape(summary['deployment'] or '')}: "
        f'<span class="{verdict.lower()}">{verdict}</span></h1>',
        f"<p>{overall['request_count']} requests ({', '.join(summary['protocols'])}) over "
        f"{overall['duration_s']:.1f} s; {_num(overall['request_throughput'], 2)} req/s, "
        f"{_num(overall['output_token_throughput'])} output tok/s, goodput {_num(overall['goodput'], 2)} req/s, "
        f"error rate {_num(None if overall['error_rate'] is None else overall['error_rate'] * 100, 2)}%.</p>",
        f"<h2>SLOs</h2><ul>{slo_lines}</ul>",
        "<h2>Latency</h2>", _latency_table(overall),
        "<h2>Concurrency sweep</h2>", _sweep_table(summary["sweep"]),
        "<h2>Plots</h2>", *plots,
    ]
    if errors:
        parts.append(f"<h2>Errors</h2><ul>{errors}</ul>")
    if summary["server"] is not None:
        parts += ["<h2>Server view (Triton /metrics)</h2>", _server_table(summary["server"])]
    if files:
        parts.append("<h2>Files</h2><ul>" + "".join(f"<li>{html.escape(f)}</li>" for f in files) + "</ul>")
    parts.append(f"<p><small>schema_version {summary['schema_version']}, generated {summary['generated_at']}"
                 "</small></p></body></html>")
    return "\n".join(parts) + "\n"
