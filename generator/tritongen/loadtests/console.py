"""What a load test prints: one block per level, the verdicts, the capacity line; and sweep.csv / sweep.png."""

from __future__ import annotations

import csv
from pathlib import Path

from tritongen import metric_registry as registry
from tritongen.loadtests.confidence import line as confidence_line
from tritongen.loadtests.host import line as host_line
from tritongen.loadtests.stages import line as stages_line


def say(line: str) -> None:
    print(line, flush=True)


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _stat(stats: dict | None, key: str) -> float | None:
    return None if stats is None else stats[key]


def _value(m: dict, name: str, stat: str | None) -> object:
    """A metric's value in a level's `metrics` object, or one statistic of it."""
    return m[name] if stat is None else _stat(m[name], stat)


def _sweep_columns() -> tuple[str, ...]:
    return ("level", "verdict", *(name for name, _, _ in registry.csv_columns()), "client_output_tokens",
            "server_output_tokens")


def _row(level: dict) -> list:
    m, t = level["metrics"], level["tokens"]
    return [level["level"], "PASS" if level["slo"]["passed"] else "FAIL",
            *(_value(m, metric.name, stat) for _, metric, stat in registry.csv_columns()),
            t["client_output_tokens"], t["server_output_tokens"]]


def _level_lines(m: dict, counted_by: str = "server") -> tuple[str, str]:
    """The level's requests and rates, and its latency percentiles, as the registry's metrics say them; values
    that rest on the client's token counts say so."""
    counts = [metric.phrase.format(m[metric.name]) for metric in registry.METRICS
              if metric.phrase and metric.kind == "count"]
    rates = [registry.marked(metric.phrase.format(_fmt(m[metric.name], metric.digits)), metric.name, counted_by)
             for metric in registry.METRICS if metric.phrase and metric.kind == "rate"]
    requests = f"{counts[0]} ({', '.join(counts[1:])}); {', '.join(rates)}"
    latency = " | ".join(registry.marked(metric.label, metric.name, counted_by) + " "
                         + " ".join(f"{p} {_fmt(_stat(m[metric.name], p), metric.digits)}" for p in metric.percentiles)
                         for metric in registry.latencies())
    return requests, latency


def structured_line(s: dict) -> str:
    """The structured requests' outcomes and their p50 latencies beside the plain requests'."""
    def p50(group: dict) -> str:
        return " ".join(f"{key.removesuffix('_ms')} {_fmt(_stat(group[key], 'p50'))}"
                        for key in ("ttft_ms", "itl_ms", "e2e_ms"))

    return (f"structured: {s['n']} sent, {s['valid']} valid, {s['invalid']} invalid, {s['truncated']} truncated, "
            f"{s['failed']} failed; p50 ms {p50(s)} (plain {s['plain']['n']}: {p50(s['plain'])})")


def adapters_line(adapters: dict) -> str:
    """Each LoRA adapter's requests, rates and p50 latencies (client-side: runtimes count tokens per model)."""
    def one(name: str, a: dict) -> str:
        return (f"{name} {a['request_count']} sent ({a['error_count']} errors), {_fmt(a['request_throughput'], 2)} req/s, "
                f"{_fmt(a['output_token_throughput'])} tok/s, p50 ms TTFT {_fmt(_stat(a['ttft_ms'], 'p50'))} "
                f"ITL {_fmt(_stat(a['itl_ms'], 'p50'))} e2e {_fmt(_stat(a['e2e_ms'], 'p50'))}")

    return "per adapter (client-side): " + " | ".join(one(name, a) for name, a in adapters.items())


def print_report(summary: dict, out: Path, html_path: Path, json_path: Path) -> None:
    unit = summary["load"]["level_unit"]
    levels = summary["levels"]
    for level in levels:
        m, tokens = level["metrics"], level["tokens"]
        head = f"[{unit} {level['level']:g}] " if len(levels) > 1 else ""
        requests, latency = _level_lines(m, tokens.get("counted_by", "server"))
        say(f"{head}window [{m['window_start_s']:.1f}, {m['window_end_s']:.1f}] s: {requests}")
        say(f"{head}latency ms: {latency}")
        if level.get("confidence"):
            say(f"{head}{confidence_line(level['confidence'])}")
            if level["confidence"]["warning"]:
                say(f"{head}WARNING: {level['confidence']['warning']}")
        out_tokens = m["output_tokens"]
        counted = tokens["server_output_tokens"]
        source = ("client-counted: the model returns no counts; the deployment's tokenizer counted the text"
                  if tokens.get("counted_by") == "client" else "server count")
        say(f"{head}output tokens per request ({source}): "
            + ("-" if out_tokens is None else f"min {out_tokens['min']:g} max {out_tokens['max']:g}")
            + f"; client total {tokens['client_output_tokens']}, server counter "
            + ("not available" if counted is None else f"{counted:g}")
            + ("" if tokens["equal"] is not False else "  <-- MISMATCH"))
        if level.get("structured") is not None:
            say(f"{head}{structured_line(level['structured'])}")
        if level.get("adapters"):
            say(f"{head}{adapters_line(level['adapters'])}")
        if level.get("stages") is not None:
            say(f"{head}{stages_line(level['stages'])}")
        if level["server_active_after"] is not None:
            say(f"{head}server: {level['server_active_after']:g} requests still active after the drain")
        for error in m["errors"][:3]:
            say(f"{head}error x{error['count']}: {error['message']}")
        warning = (level["load_generator"] or {}).get("warning")
        if warning:
            say(f"{head}{warning}")
        if level.get("host"):
            say(f"{head}{host_line(level['host'])}")
            if level["host"]["warning"]:
                say(f"{head}{level['host']['warning']}")
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
    # plots imports matplotlib (about 1.4 s of CPU), which only a sweep's plot needs; the runner imports this module.
    from tritongen.loadtests import plots

    unit = summary["load"]["level_unit"]
    rows = [_row(level) for level in summary["levels"]]
    with open(out / "sweep.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(_sweep_columns())
        writer.writerows([["" if v is None else (f"{v:.3f}" if isinstance(v, float) else v) for v in row]
                          for row in rows])
    columns = registry.SWEEP_TABLE_COLUMNS
    say(f"{unit:>10} {'verdict':>7} " + " ".join(f"{c.header_of(with_unit=False):>{c.width}}" for c in columns))
    for level in summary["levels"]:
        m = level["metrics"]
        say(f"{level['level']:>10g} {'PASS' if level['slo']['passed'] else 'FAIL':>7} "
            + " ".join(f"{_fmt(_value(m, c.metric, c.stat), c.decimals):>{c.width}}"
                       for c in columns))
    fig = plots.sweep(summary["levels"], unit, summary["capacity"]["level"])
    (out / "sweep.png").write_bytes(plots.png(fig))
    say(f"sweep: {out / 'sweep.csv'}, {out / 'sweep.png'}")
