"""What a load test prints: one block per level, the verdicts, the capacity line; and sweep.csv / sweep.png."""

from __future__ import annotations

import csv
from pathlib import Path


def say(line: str) -> None:
    print(line, flush=True)


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _stat(stats: dict | None, key: str) -> float | None:
    return None if stats is None else stats[key]


SWEEP_COLUMNS = ("level", "verdict", "requests", "errors", "refused", "cancelled", "in_flight_at_end", "req_per_s",
                 "output_tok_per_s", "goodput_req_per_s", "ttft_p50_ms", "ttft_p95_ms", "itl_p50_ms", "itl_p95_ms",
                 "e2e_p50_ms", "e2e_p99_ms", "client_output_tokens", "server_output_tokens")


def _row(level: dict) -> list:
    m, t = level["metrics"], level["tokens"]
    return [level["level"], "PASS" if level["slo"]["passed"] else "FAIL", m["request_count"], m["error_count"],
            m.get("refused_count", 0), m["cancelled_count"], m["in_flight_at_window_end"], m["request_throughput"], m["output_token_throughput"],
            m["goodput"], _stat(m["ttft_ms"], "p50"), _stat(m["ttft_ms"], "p95"), _stat(m["itl_ms"], "p50"),
            _stat(m["itl_ms"], "p95"), _stat(m["e2e_ms"], "p50"), _stat(m["e2e_ms"], "p99"),
            t["client_output_tokens"], t["server_output_tokens"]]


def print_report(summary: dict, out: Path, html_path: Path, json_path: Path) -> None:
    unit = summary["load"]["level_unit"]
    levels = summary["levels"]
    for level in levels:
        m, tokens = level["metrics"], level["tokens"]
        head = f"[{unit} {level['level']:g}] " if len(levels) > 1 else ""
        say(f"{head}window [{m['window_start_s']:.1f}, {m['window_end_s']:.1f}] s: {m['request_count']} requests "
            f"({m['error_count']} failed, {m.get('refused_count', 0)} refused, {m['cancelled_count']} cancelled, "
            f"{m['in_flight_at_window_end']} in flight "
            f"at its end); {_fmt(m['request_throughput'], 2)} req/s, {_fmt(m['output_token_throughput'])} output "
            f"tok/s, goodput {_fmt(m['goodput'], 2)} req/s")
        say(f"{head}latency ms: TTFT p50 {_fmt(_stat(m['ttft_ms'], 'p50'))} p95 {_fmt(_stat(m['ttft_ms'], 'p95'))} | "
            f"ITL p50 {_fmt(_stat(m['itl_ms'], 'p50'))} p95 {_fmt(_stat(m['itl_ms'], 'p95'))} | "
            f"e2e p50 {_fmt(_stat(m['e2e_ms'], 'p50'))} p99 {_fmt(_stat(m['e2e_ms'], 'p99'))}")
        out_tokens = m["output_tokens"]
        counted = tokens["server_output_tokens"]
        source = ("client-counted: the model returns no counts; the deployment's tokenizer counted the text"
                  if tokens.get("counted_by") == "client" else "server count")
        say(f"{head}output tokens per request ({source}): "
            + ("-" if out_tokens is None else f"min {out_tokens['min']:g} max {out_tokens['max']:g}")
            + f"; client total {tokens['client_output_tokens']}, server counter "
            + ("not available" if counted is None else f"{counted:g}")
            + ("" if tokens["equal"] is not False else "  <-- MISMATCH"))
        if level["server_active_after"] is not None:
            say(f"{head}server: {level['server_active_after']:g} requests still active after the drain")
        for error in m["errors"][:3]:
            say(f"{head}error x{error['count']}: {error['message']}")
        warning = (level["load_generator"] or {}).get("warning")
        if warning:
            say(f"{head}{warning}")
        for result in level["slo"]["results"]:
            say(f"{head}{result['line']}")
    if len(levels) > 1:
        write_sweep(summary, out)
    say(summary["capacity"]["line"])
    say(f"verdict: {'PASS' if summary['slo']['passed'] else 'FAIL'}")
    say(f"report: {html_path}")
    say(f"summary: {json_path}")


def write_sweep(summary: dict, out: Path) -> None:
    """sweep.csv (one row per level) and sweep.png (the report's sweep plot), and a table on stdout."""
    from tritongen.loadtests import plots

    unit = summary["load"]["level_unit"]
    rows = [_row(level) for level in summary["levels"]]
    with open(out / "sweep.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(SWEEP_COLUMNS)
        writer.writerows([["" if v is None else (f"{v:.3f}" if isinstance(v, float) else v) for v in row]
                          for row in rows])
    say(f"{unit:>10} {'verdict':>7} {'req/s':>8} {'tok/s':>9} {'TTFT p95':>9} {'ITL p95':>8} {'e2e p99':>9}")
    for row in rows:
        say(f"{row[0]:>10g} {row[1]:>7} {_fmt(row[7], 2):>8} {_fmt(row[8]):>9} {_fmt(row[11]):>9} "
            f"{_fmt(row[13]):>8} {_fmt(row[15]):>9}")
    fig = plots.sweep(summary["levels"], unit, summary["capacity"]["level"])
    (out / "sweep.png").write_bytes(plots.png(fig))
    say(f"sweep: {out / 'sweep.csv'}, {out / 'sweep.png'}")
