"""Every plot of a load-test report, drawn once: the HTML report embeds them, the runner saves sweep.png.

Plots are drawn on `matplotlib.figure.Figure` directly rather than through pyplot, so rendering a report never
selects a global backend or keeps figures alive in the process that runs Locust.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

from matplotlib.figure import Figure

from tritongen import metric_registry as registry
from tritongen.loadtests.stages import ORDER


def png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    return buf.getvalue()


def _stat(stats: dict | None, key: str) -> float | None:
    return None if stats is None else stats[key]


def histogram(values: Sequence[float], title: str, xlabel: str) -> Figure:
    fig = Figure(figsize=(6, 3.5))
    ax = fig.subplots()
    ax.hist(values, bins=min(50, max(5, len(values) // 4)), color="#4c72b0")
    ax.set(title=title, xlabel=xlabel, ylabel="requests")
    return fig


def _legend_of_both(ax, ax2) -> None:
    # One legend for the two y axes, inside the plot so it cannot cover the title.
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, loc="best", fontsize="small")


def timeline(metrics: dict, title: str) -> Figure:
    """Output tokens/s and requests/s per 1 s bin, with the measurement window shaded."""
    points = metrics["timeline"]
    fig = Figure(figsize=(6, 3.5))
    ax = fig.subplots()
    t = [p["t_s"] for p in points]
    ax.axvspan(metrics["window_start_s"], metrics["window_end_s"], color="#dddddd", label="measured window")
    ax.plot(t, [p["output_tokens_per_s"] for p in points], color="#4c72b0", label="output tok/s")
    ax.set(title=title, xlabel="seconds since the level's first request", ylabel="output tokens/s")
    ax2 = ax.twinx()
    ax2.plot(t, [p["requests_per_s"] for p in points], color="#dd8452", label="requests/s")
    ax2.set_ylabel("requests/s")
    _legend_of_both(ax, ax2)
    return fig


def sweep(levels: list[dict], unit: str, capacity: float | None) -> Figure:
    """Latency (registry.PLOT_PERCENTILE of each latency: TTFT, ITL, e2e) and output token throughput against the
    load level, with the capacity line and each level's verdict."""
    xs = [row["level"] for row in levels]
    fig = Figure(figsize=(11, 4))
    lat, thr = fig.subplots(1, 2)
    p = registry.PLOT_PERCENTILE
    for metric in registry.latencies():
        ys = [_stat(row["metrics"][metric.name], p) for row in levels]
        if any(y is not None for y in ys):
            lat.plot(xs, [float("nan") if y is None else y for y in ys], marker="o", label=f"{metric.label} {p}")
    lat.set(title="Latency vs load", xlabel=unit, ylabel="ms", yscale="log")
    client = "client" if any(row.get("tokens", {}).get("counted_by") == "client" for row in levels) else "server"
    thr.plot(xs, [row["metrics"]["output_token_throughput"] or 0 for row in levels], marker="o", color="#4c72b0",
             label=registry.marked("output tok/s (window)", "output_token_throughput", client))
    thr.set(title="Throughput vs load", xlabel=unit, ylabel="output tokens/s")
    for row in levels:
        ok = row["slo"]["passed"]
        thr.annotate("PASS" if ok else "FAIL", (row["level"], row["metrics"]["output_token_throughput"] or 0),
                     textcoords="offset points", xytext=(0, 6), ha="center", fontsize="small",
                     color="#17702a" if ok else "#b00020")
    for ax in (lat, thr):
        if capacity is not None:
            ax.axvline(capacity, color="#17702a", linestyle="--", label=f"capacity {capacity:g}")
        if ax.lines:
            ax.legend(fontsize="small")
    return fig


STAGE_COLORS = ("#8172b3", "#dd8452", "#55a868", "#c44e52", "#4c72b0", "#937860", "#da8bc3")


def stages(levels: list[dict], unit: str) -> Figure:
    """Where the time goes: one stacked horizontal bar per level (server ms per request, stages in
    tritongen.loadtests.stages.ORDER), the client's mean e2e latency marked on each."""
    rows = [row for row in levels if row.get("stages") and row["stages"]["stages"]]
    fig = Figure(figsize=(9, 1.2 + 0.6 * len(rows)))
    ax = fig.subplots()
    ys = list(range(len(rows)))
    left = [0.0] * len(rows)
    for name, color in zip(ORDER, STAGE_COLORS):
        widths = [next((s["ms"] or 0.0 for s in row["stages"]["stages"] if s["name"] == name), 0.0) for row in rows]
        if any(widths):
            ax.barh(ys, widths, left=left, color=color, label=name)
            left = [a + b for a, b in zip(left, widths)]
    e2e = [row["stages"]["client_e2e_ms"] for row in rows]
    ax.scatter([e if e is not None else float("nan") for e in e2e], ys, marker="|", s=400, color="black",
               label="client e2e (mean)", zorder=3)
    ax.set_yticks(ys, [f"{row['level']:g}" for row in rows])
    ax.set(title="Where the time goes (server ms per request)", xlabel="ms", ylabel=unit)
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1))
    return fig
