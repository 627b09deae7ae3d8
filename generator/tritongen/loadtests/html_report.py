"""The HTML load-test report: one self-contained file, plots (tritongen.loadtests.plots) embedded as PNGs."""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence

from tritongen import metric_registry as registry
from tritongen.loadtests import plots
from tritongen.loadtests.metrics import group_by_level, request_latency
from tritongen.metric_registry import STATS_KEYS, Column
from tritongen.loadtests.samples import Sample

_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 4px 8px; text-align: right; }
th:first-child, td:first-child { text-align: left; }
.pass { color: #17702a; } .fail { color: #b00020; font-weight: bold; }
.warn { color: #b00020; font-weight: bold; border: 2px solid #b00020; padding: 0.5em; }
figure { display: inline-block; margin: 0.5em; }
"""


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _stat(stats: dict | None, key: str) -> float | None:
    return None if stats is None else stats[key]


def _figure(title: str, fig) -> str:
    t = html.escape(title)
    data = base64.b64encode(plots.png(fig)).decode("ascii")
    return f'<figure><img alt="{t}" src="data:image/png;base64,{data}"><figcaption>{t}</figcaption></figure>'


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _cell(m: dict, column: Column) -> str:
    if column.text:
        return column.text.format(**m)
    if column.stat is not None:
        return _num(_stat(m[column.metric], column.stat), column.decimals)
    if registry.BY_NAME[column.metric].kind in ("count", "total"):
        return str(m[column.metric])
    return _num(m[column.metric], column.decimals)


def _counted_by(levels: list[dict]) -> str:
    return "client" if any(row["tokens"].get("counted_by") == "client" for row in levels) else "server"


def _levels_table(levels: list[dict], unit: str) -> str:
    rows = [[f"{row['level']:g}", "PASS" if row["slo"]["passed"] else "FAIL",
             *(_cell(row["metrics"], c) for c in registry.HTML_LEVEL_COLUMNS)] for row in levels]
    by = _counted_by(levels)
    return _table([unit, "verdict", *(registry.marked(c.header_of(), c.metric, by)
                                      for c in registry.HTML_LEVEL_COLUMNS)], rows)


def _latency_table(metrics: dict, counted_by: str = "server") -> str:
    """Every statistic but the count of each shown stats metric (latencies and token lengths)."""
    keys = [k for k in STATS_KEYS if k != "count"]
    rows = [[registry.marked(f"{m.label} {m.unit}", m.name, counted_by)]
            + [_num(_stat(metrics[m.name], k), 2) for k in keys] for m in registry.shown_stats()]
    return _table(["", *keys], rows)


def _structured_table(structured: dict) -> str:
    """The structured requests' outcome counts (every output must be valid), and their latencies beside the plain
    requests' (p50 / p95 ms)."""
    s = structured
    warn = "" if s["invalid"] == 0 else ' class="warn"'
    head = (f'<p{warn}>{s["n"]} structured requests: {s["valid"]} valid, '
            f'<b>{s["invalid"]} invalid</b>, {s["truncated"]} truncated (cut at max_tokens), {s["failed"]} failed.</p>')
    rows = [[name, str(group["n"]), *(f"{_num(_stat(group[k], 'p50'))} / {_num(_stat(group[k], 'p95'))}"
                                      for k in ("ttft_ms", "itl_ms", "e2e_ms"))]
            for name, group in (("structured", s), ("plain", s["plain"]))]
    return head + _table(["requests", "n", "TTFT p50 / p95 ms", "ITL p50 / p95 ms", "E2E p50 / p95 ms"], rows)


def _adapters_table(adapters: dict) -> str:
    """Each LoRA adapter's figures over the level's window (levels[].adapters)."""
    def p50_p95(stats: dict | None) -> str:
        return f"{_num(_stat(stats, 'p50'))} / {_num(_stat(stats, 'p95'))}"

    rows = [[html.escape(name), str(a["request_count"]), str(a["error_count"]), str(a["completed_count"]),
             _num(a["request_throughput"], 2), _num(a["output_token_throughput"]), p50_p95(a["ttft_ms"]),
             p50_p95(a["itl_ms"]), p50_p95(a["e2e_ms"])] for name, a in adapters.items()]
    return ("<p>Client-side figures: the runtimes count output tokens per model, not per adapter.</p>"
            + _table(["adapter", "sent", "errors", "completed", "req/s", "output tok/s", "TTFT p50 / p95 ms",
                      "ITL p50 / p95 ms", "E2E p50 / p95 ms"], rows))


def _confidence_table(confidence: dict) -> str:
    """Each figure's n and interval (levels[].confidence)."""
    rows = []
    for f in confidence["figures"]:
        name, _, stat = f["name"].partition(".")
        m = registry.BY_NAME[name]
        rows.append([f"{m.label or name}{' ' + stat if stat else ''} {m.unit}", _num(f["value"], m.digits + 1),
                     str(f["n"]), _num(f["low"], m.digits + 1), _num(f["high"], m.digits + 1)])
    return (f"<p>{html.escape(confidence['method'])}</p>"
            + _table(["figure", "value", "n", "low", "high"], rows))


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


def _stages_table(stages: dict) -> str:
    """The level's stages (ms per request of the called model), their sum against the client's e2e, and Triton's
    per-model statistics over the window."""
    rows = [[s["name"], _num(s["ms"], 2), s["source"], s["note"]] for s in stages["stages"]]
    ratio = stages["sum_over_client_e2e"]
    rows.append(["sum", _num(stages["sum_ms"], 2), "",
                 f"client e2e (mean) {_num(stages['client_e2e_ms'], 2)} ms"
                 + ("" if ratio is None else f": the stages account for {ratio:.0%}")])
    head = (f"<p>Called model {html.escape(str(stages['called_model']))}, {stages['requests']} requests in the "
            f"window; dominant stage: <b>{html.escape(str(stages['dominant']))}</b>"
            + (f"; per-token {stages['per_token_ms']:.3f} ms" if stages["per_token_ms"] is not None else "")
            + (f'.</p><p class="warn">{html.escape(stages["note"])}' if stages["note"] else "")
            + (f'</p><p class="warn">{html.escape(stages["coverage"])}' if stages.get("coverage") else "") + "</p>")
    models = [[m["model"], str(m["requests"]), *(_num(m[k], 3) for k in ("queue_ms", "compute_input_ms",
              "compute_infer_ms", "compute_output_ms", "request_ms")), m["note"] or ("" if m["plausible"] else "-")]
              for m in stages["models"]]
    return (head + _table(["stage", "ms/request", "source", "note"], rows)
            + _table(["model (Triton statistics)", "requests", "queue ms", "compute input ms", "compute infer ms",
                      "compute output ms", "request ms", "note"], models))


def _metadata(meta: dict | None) -> str:
    if not meta:
        return ""
    hw, v = meta["hardware"], meta["versions"]
    device = ", ".join(g["name"] for g in hw["gpus"]) or f"CPU {hw['cpu_model']} x{hw['cpu_count']}"
    rows = [["runtime", meta["runtime"]], ["model", str(meta["model"])], ["tokenizer", meta["tokenizer"]],
            ["server", f"{meta['server']['name']} {meta['server']['version']}"],
            ["load generator host", f"{hw['host']}: {device}"],
            ["versions", ", ".join(f"{k} {val}" for k, val in v.items())],
            ["spec digest", str(meta["spec_digest"])], ["plan digest", meta["plan_digest"]]]
    return "<h2>What was measured</h2>" + _table(["", ""], rows)


def render_html(summary: dict, samples: Sequence[Sample]) -> str:
    """The report page for a summary built by report.build_summary over the same samples."""
    levels, cap, unit = summary["levels"], summary["capacity"], summary["load"]["level_unit"]
    by_level = group_by_level(samples)
    plots_html = []
    if len(levels) > 1:
        plots_html.append(_figure(f"Latency and throughput vs {unit}", plots.sweep(levels, unit, cap["level"])))
    if any(row.get("stages") and row["stages"]["stages"] for row in levels):
        plots_html.append(_figure("Where the time goes", plots.stages(levels, unit)))
    for row in levels:
        latencies = [lat for lat in map(request_latency, by_level.get(row["level"], [])) if lat is not None]
        suffix = f" ({unit} {row['level']:g})" if len(levels) > 1 else ""
        ttft = [lat.ttft_ms for lat in latencies if lat.ttft_ms is not None]
        itl = [lat.itl_ms for lat in latencies if lat.itl_ms is not None]
        if ttft:
            plots_html.append(_figure("TTFT distribution" + suffix,
                                      plots.histogram(ttft, "TTFT distribution" + suffix, "ms")))
        if itl:
            plots_html.append(_figure("ITL distribution" + suffix,
                                      plots.histogram(itl, "ITL distribution" + suffix, "ms")))
        if row["metrics"]["timeline"]:
            plots_html.append(_figure("Throughput over time" + suffix,
                                      plots.timeline(row["metrics"], "Throughput over time" + suffix)))

    verdict = "PASS" if summary["slo"]["passed"] else "FAIL"
    parts = [
        "<!DOCTYPE html>", '<html><head><meta charset="utf-8">',
        f"<title>tritongen load test: {html.escape(summary['deployment'] or '')}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>Load test {html.escape(summary['deployment'] or '')}: "
        f'<span class="{verdict.lower()}">{verdict}</span></h1>',
        f'<p class="{"pass" if cap["passed"] else "fail"}"><b>{html.escape(cap["line"])}</b></p>',
    ]
    if summary.get("incomplete"):
        parts.append(f'<p class="warn"><b>Incomplete:</b> {html.escape(summary["incomplete"])}</p>')
    for row in levels:
        warning = (row["load_generator"] or {}).get("warning")
        if warning:
            parts.append(f'<p class="warn">{unit} {row["level"]:g}: {html.escape(warning)}</p>')
        if (row.get("host") or {}).get("warning"):
            parts.append(f'<p class="warn">{unit} {row["level"]:g}: {html.escape(row["host"]["warning"])}</p>')
        if (row.get("confidence") or {}).get("warning"):
            parts.append(f'<p class="warn">{unit} {row["level"]:g}: {html.escape(row["confidence"]["warning"])}</p>')
        if row["tokens"]["equal"] is False:
            parts.append(f'<p class="warn">{unit} {row["level"]:g}: client output tokens '
                         f'{row["tokens"]["client_output_tokens"]} != server {row["tokens"]["server_output_tokens"]:g}'
                         "</p>")
    parts += ["<h2>Levels</h2>", _levels_table(levels, unit)]
    for row in levels:
        m = row["metrics"]
        head = f"{unit} {row['level']:g}" if len(levels) > 1 else "the run"
        slo_lines = "".join(f'<li class="{"pass" if r["passed"] else "fail"}">{html.escape(r["line"])}</li>'
                            for r in row["slo"]["results"]) or "<li>no objectives set</li>"
        tokens = row["tokens"]
        parts += [
            f"<h2>SLOs at {html.escape(head)}</h2><ul>{slo_lines}</ul>",
            f"<p>{m['request_count']} requests sent in the window [{m['window_start_s']:.1f}, "
            f"{m['window_end_s']:.1f}] s ({m['cancelled_count']} cancelled, {m['in_flight_at_window_end']} in flight "
            f"at its end); output tokens"
            + (" (client-counted: the model returns no counts; the deployment's tokenizer counted the text)"
               if tokens.get("counted_by") == "client" else "")
            + f": client {tokens['client_output_tokens']}, server "
            f"{_num(tokens['server_output_tokens'], 0)}; server requests still active after the drain: "
            f"{_num(row['server_active_after'], 0)}.</p>",
            _latency_table(m, tokens.get("counted_by", "server")),
        ]
        if row.get("confidence"):
            parts += ["<h3>How sure (confidence intervals)</h3>", _confidence_table(row["confidence"])]
        errors = "".join(f"<li>{e['count']} x {html.escape(e['message'])}</li>" for e in m["errors"])
        if errors:
            parts.append(f"<h3>Errors</h3><ul>{errors}</ul>")
        if row.get("adapters"):
            parts += ["<h3>Per LoRA adapter (validation.load.adapters)</h3>", _adapters_table(row["adapters"])]
        if row.get("structured") is not None:
            parts += ["<h3>Structured outputs (JSON schema) beside plain requests</h3>",
                      _structured_table(row["structured"])]
        if row.get("stages") is not None:
            parts += ["<h3>Where the time goes (server, per request)</h3>", _stages_table(row["stages"])]
        if row["server"] is not None:
            parts += ["<h3>Server view over the window (Triton /metrics)</h3>", _server_table(row["server"])]
    parts += [_metadata(summary["metadata"]), "<h2>Plots</h2>", *plots_html]
    files = [*summary["files"]["samples"], *summary["files"]["locust_csv"]]
    if files:
        parts.append("<h2>Files</h2><ul>" + "".join(f"<li>{html.escape(f)}</li>" for f in files) + "</ul>")
    parts.append(f"<p><small>schema_version {summary['schema_version']}, generated {summary['generated_at']}"
                 "</small></p></body></html>")
    return "\n".join(parts) + "\n"
