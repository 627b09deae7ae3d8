"""The metric registry is the one list: the spec's SLO fields, the Metrics computed, the report JSON, its
documentation, the console, sweep.csv and the HTML report all agree with it; a metric added there shows up in
every view, one missing from a view is caught."""

from __future__ import annotations

import csv
import dataclasses
import re
from pathlib import Path

import pytest
from test_import_graph import package_graph
from test_lt_report import DOC, SLO, sweep_samples

from tritongen import metric_registry as registry
from tritongen.loadtests import console
from tritongen.loadtests.html_report import render_html
from tritongen.loadtests.metrics import GoodputLimits, Metrics, RequestLatency, Stats
from tritongen.metric_registry import GATES, METRICS, STATS_KEYS, Metric
from tritongen.loadtests.report import build_summary
from tritongen.plan.slo import SLOPlan, resolve_slo
from tritongen.spec import SLOSection

STRUCTURED = ("errors", "timeline")  # lists with their own documented keys, not metrics


def undocumented(metrics: tuple[Metric, ...], doc: str) -> list[str]:
    """Registry metrics whose row in the docs' key list is missing or says another type or description."""
    rows = dict(re.findall(r"^\| `levels\[\]\.metrics\.(\w+)` \| (.+) \|$", doc, re.M))
    return [m.name for m in metrics if rows.get(m.name) != f"{m.type.replace('|', ' or ')} | {m.doc}"]


def uncomputed(metrics: tuple[Metric, ...]) -> list[str]:
    """Differences between the registry and the fields Metrics computes (names and order)."""
    fields = [f.name for f in dataclasses.fields(Metrics) if f.name not in STRUCTURED]
    names = [m.name for m in metrics]
    return [] if names == fields else [f"registry {names}", f"Metrics {fields}"]


def test_every_slo_field_of_the_spec_is_a_registry_gate():
    spec_fields = [name for name in SLOSection.model_fields if name != "min_capacity"]
    assert spec_fields == [g.name for g in GATES]


def test_gates_and_columns_name_registry_metrics():
    for g in GATES:
        m = registry.BY_NAME[g.metric]
        assert m.better is not None and m.unmeasured, g.name  # a metric a bound makes sense on, with a note
        assert (g.stat is not None) == (m.kind == "stats") and g.stat in (None, *STATS_KEYS), g.name
    for c in (*registry.HTML_LEVEL_COLUMNS, *registry.SWEEP_TABLE_COLUMNS):
        assert c.metric in registry.BY_NAME and c.stat in (None, *STATS_KEYS), c
    assert len(registry.BY_NAME) == len(METRICS) and len(registry.GATE_BY_NAME) == len(GATES)
    # A per-request gate is also a goodput limit on the request's own value.
    per_request = [g.metric for g in GATES if g.per_request]
    assert per_request == [f.name for f in dataclasses.fields(GoodputLimits)] == [
        f.name for f in dataclasses.fields(RequestLatency)]


def test_the_registry_imports_nothing_of_tritongen():
    # The planner and the load test both import it, a top-level leaf: the plan imports nothing of the load test
    # (whose modules load numpy and Locust), so the two stage folders never import each other both ways. The load
    # test reads of the plan package only the Plan's load profile (tritongen.plan.load, pydantic alone) and what the
    # package exports.
    graph = package_graph()
    assert graph["tritongen.metric_registry"] == set()
    plan_edges = {dst for src, dsts in graph.items() if src.startswith("tritongen.plan") for dst in dsts
                  if dst.startswith("tritongen.loadtests")}
    assert plan_edges == set()
    assert {dst for src, dsts in graph.items() if src.startswith("tritongen.loadtests") for dst in dsts
            if dst.startswith("tritongen.plan")} <= {"tritongen.plan", "tritongen.plan.load"}
    assert graph["tritongen.plan.load"] == set()


def test_latency_gates_are_upper_bounds_and_throughput_a_lower_bound():
    assert {g.name: (g.metric, g.stat, g.comparison, g.unit) for g in GATES} == {
        "ttft_p95_ms": ("ttft_ms", "p95", "<=", "ms"),
        "itl_p95_ms": ("itl_ms", "p95", "<=", "ms"),
        "e2e_p99_ms": ("e2e_ms", "p99", "<=", "ms"),
        "min_output_tokens_per_s": ("output_token_throughput", None, ">=", "tok/s"),
        "max_error_rate": ("error_rate", None, "<=", ""),
    }


def test_the_planner_resolves_the_spec_objectives_once():
    slo = resolve_slo(SLOSection(e2e_p99_ms=900, ttft_p95_ms=200, min_capacity=4))
    # Fields left unset are no objectives; max_error_rate defaults to 0; the registry's order.
    assert slo == SLOPlan(objectives={"ttft_p95_ms": 200, "e2e_p99_ms": 900, "max_error_rate": 0.0},
                          min_capacity=4)
    assert list(SLOPlan(objectives={"max_error_rate": 0.1, "itl_p95_ms": 5}).objectives) == [
        "itl_p95_ms", "max_error_rate"]
    with pytest.raises(ValueError, match=r"unknown SLO gates \['ttft_p50_ms'\]"):
        SLOPlan(objectives={"ttft_p50_ms": 1.0})


def test_registry_and_metrics_list_the_same_fields():
    assert uncomputed(METRICS) == []
    assert tuple(f.name for f in dataclasses.fields(Stats)) == STATS_KEYS
    # A metric only in the registry, or one left out of it, is caught.
    assert uncomputed((*METRICS, Metric("kv_hit_rate", "fraction", "float|null", "cache hits."))) != []
    assert uncomputed(METRICS[1:]) != []


def test_every_registry_metric_is_in_the_docs_key_list():
    doc = DOC.read_text()
    assert undocumented(METRICS, doc) == []
    planted = Metric("kv_hit_rate", "fraction", "float|null", "cache hits.")
    assert undocumented((*METRICS, planted), doc) == ["kv_hit_rate"]
    changed = dataclasses.replace(METRICS[0], doc="something else.")
    assert undocumented((changed,), doc) == [changed.name]


def test_every_registry_metric_is_in_the_report_json_in_registry_order():
    level = build_summary(sweep_samples(), SLO())["levels"][0]["metrics"]
    assert list(level) == [m.name for m in METRICS] + list(STRUCTURED)
    for m in METRICS:
        value = level[m.name]
        if m.kind == "stats":
            assert value is None or list(value) == list(STATS_KEYS)
        else:
            assert value is None or isinstance(value, int if m.type == "int" else (int, float))


def views(tmp_path: Path, summary: dict) -> tuple[str, list[str], str]:
    """(console text, sweep.csv header, HTML page) of a summary."""
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        console.print_report(summary, tmp_path, tmp_path / "r.html", tmp_path / "r.json")
    with open(tmp_path / "sweep.csv", newline="") as f:
        header = next(csv.reader(f))
    return buf.getvalue(), header, render_html(summary, sweep_samples())


def test_every_shown_metric_appears_in_the_console_csv_and_html(tmp_path):
    summary = build_summary(sweep_samples(), SLO())
    text, header, page = views(tmp_path, summary)
    for m in METRICS:
        if m.phrase:
            assert re.search(re.escape(m.phrase).replace(r"\{\}", r"[-\d.]+"), text), m.name
        for p in m.percentiles:
            assert f"{m.label} " in text and f"{m.csv}_{p}_{m.unit}" in header, (m.name, p)
        if m.csv and m.kind != "stats":
            assert m.csv in header, m.name
        if m.kind == "stats" and m.label:
            assert f"<td>{m.label} {m.unit}</td>" in page, m.name
    for c in registry.HTML_LEVEL_COLUMNS:
        assert f"<th>{c.header_of()}</th>" in page
    for c in registry.SWEEP_TABLE_COLUMNS:
        assert c.header_of(with_unit=False) in text


def test_a_metric_added_to_the_registry_shows_up_in_every_view(tmp_path, monkeypatch):
    queue = Metric("queue_ms", "stats", "<stats>", "time in the server's queue.", unit="ms", label="queue",
                   csv="queue", percentiles=("p50", "p99"), better="lower", unmeasured="no queue time")
    summary = build_summary(sweep_samples(), SLO())
    monkeypatch.setattr(registry, "METRICS", (*METRICS, queue))
    monkeypatch.setattr(registry, "BY_NAME", {**registry.BY_NAME, "queue_ms": queue})
    for level in summary["levels"]:
        level["metrics"]["queue_ms"] = dict.fromkeys(STATS_KEYS, 12.0)
    text, header, page = views(tmp_path, summary)
    assert "| queue p50 12.0 p99 12.0" in text
    assert header[-4:] == ["queue_p50_ms", "queue_p99_ms", "client_output_tokens", "server_output_tokens"]
    assert "<td>queue ms</td>" in page
    # Not yet computed by Metrics nor documented: the consistency checks fail until it is.
    assert uncomputed(registry.METRICS) != [] and undocumented(registry.METRICS, DOC.read_text()) == ["queue_ms"]
