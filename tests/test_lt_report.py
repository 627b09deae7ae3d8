"""The JSON summary has exactly the documented keys; the HTML report is one file with the plots in it."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import pytest
from test_lt_metrics import make, set_a
from test_lt_prom import AFTER, BEFORE

import tritongen.loadtests.report
from tritongen.spec import SLOSection
from tritongen.loadtests.metrics import STATS_KEYS
from tritongen.loadtests.prom import parse_metrics, server_view
from tritongen.loadtests.report import SCHEMA_VERSION, build_summary, write_report

DOC = Path(__file__).parents[1] / "docs" / "loadtest-report.md"


def documented_in_docstring() -> set[str]:
    return set(re.findall(r"^- `([^`]+)` \(", tritongen.loadtests.report.__doc__, re.M))


def documented_in_docs() -> set[str]:
    return set(re.findall(r"^\| `([^`]+)` \|", DOC.read_text(), re.M))


def key_paths(value: object, path: str = "") -> set[str]:
    """Dotted paths of every key; `x[]` for list elements. Stats objects, label maps and the per-level metrics
    (documented once, as `overall`) are leaves."""
    paths = {path} if path and not path.endswith("[]") else set()
    if isinstance(value, dict) and set(value) != set(STATS_KEYS) and not path.endswith(("labels", "[].metrics")):
        for key, child in value.items():
            paths |= key_paths(child, f"{path}.{key}" if path else key)
    elif isinstance(value, list):
        for child in value:
            paths |= key_paths(child, path + "[]")
    return paths


def sweep_samples():
    """set_a at concurrency 2 plus a level at concurrency 8 with one cancelled stream."""
    level8 = [make(300.0 + i * 0.1, [0.2, 0.5, 0.9], 4, concurrency=8) for i in range(8)]
    level8.append(make(301.0, [0.3], 0, error="StatusCode.CANCELLED: stream closed", concurrency=8))
    return set_a() + level8


def full_report(tmp_path):
    view = server_view(parse_metrics(BEFORE, taken_at=0), parse_metrics(AFTER, taken_at=10))
    slo = SLOSection(ttft_p95_ms=300, itl_p95_ms=500, e2e_p99_ms=1000, min_output_tokens_per_s=1,
                     max_error_rate=0.1)
    return write_report(tmp_path, sweep_samples(), slo, deployment="tiny-cpu", server=view,
                        sample_files=[tmp_path / "samples-h-1.jsonl"], locust_csv=[tmp_path / "locust_stats.csv"])


def test_docs_and_docstring_list_the_same_keys():
    assert documented_in_docstring() == documented_in_docs()


def test_json_has_exactly_the_documented_keys(tmp_path):
    report = full_report(tmp_path)
    summary = json.loads(report.json_path.read_text())
    assert summary == report.summary
    assert summary["schema_version"] == SCHEMA_VERSION == 1
    assert key_paths(summary) == documented_in_docs()
    # Every sweep level is the documented `overall` object.
    overall_keys = key_paths(summary["overall"])
    for level in summary["sweep"]:
        assert key_paths(level["metrics"]) == overall_keys


def test_json_values(tmp_path):
    summary = full_report(tmp_path).summary
    assert [row["concurrency"] for row in summary["sweep"]] == [2, 8]
    level2 = summary["sweep"][0]["metrics"]
    assert level2["ttft_ms"]["p95"] == pytest.approx(385)
    assert level2["error_rate"] == pytest.approx(0.2)
    assert summary["overall"]["request_count"] == 14
    assert summary["overall"]["errors"][0] == {"message": "StatusCode.CANCELLED: stream closed", "count": 1}
    assert summary["slo"]["exit_code"] == 1 and summary["slo"]["passed"] is False
    assert "FAIL max_error_rate: measured 0.1429 > limit 0.1" in [r["line"] for r in summary["slo"]["results"]]
    assert summary["slo"]["goodput_limits"] == {"ttft_ms": 300, "itl_ms": 500, "e2e_ms": 1000}
    assert summary["files"]["locust_csv"] == [str(tmp_path / "locust_stats.csv")]
    assert summary["files"]["html"] == str(tmp_path / "loadtest.html")
    ens = next(m for m in summary["server"]["models"] if m["model"] == "ensemble")
    assert ens["avg_queue_us"] == pytest.approx(2_000)
    assert {"reason": "REJECTED", "count": 3} in ens["request_failure"]
    # The summary quantile is NaN in the scrape; JSON carries null instead.
    step = next(s for s in summary["server"]["other"] if s["name"] == "tritongen_step_seconds")
    assert step["after"] is None


def test_minimal_summary_uses_only_documented_keys():
    summary = build_summary([make(1.0, [0.1, 0.2], 2)], SLOSection())
    assert key_paths(summary) <= documented_in_docs()
    assert summary["server"] is None and summary["slo"]["exit_code"] == 0


def embedded_pngs(page: str) -> dict[str, bytes]:
    found = re.findall(r'<img alt="([^"]+)" src="data:image/png;base64,([A-Za-z0-9+/=]+)">', page)
    return {alt: base64.b64decode(data) for alt, data in found}


def test_html_embeds_all_plots_for_a_sweep(tmp_path):
    report = full_report(tmp_path)
    page = report.html_path.read_text()
    pngs = embedded_pngs(page)
    assert set(pngs) == {"TTFT distribution", "ITL distribution", "Throughput over time",
                         "Latency vs concurrency", "Throughput vs concurrency"}
    assert all(png.startswith(b"\x89PNG\r\n\x1a\n") for png in pngs.values())
    # Overall TTFTs: 100, 200 x 9, 300, 400 -> p95 at index 10.45 = 300 + 0.45 * 100.
    assert "FAIL ttft_p95_ms: measured 345.0 ms &gt; limit 300 ms" in page
    assert "FAIL max_error_rate: measured 0.1429 &gt; limit 0.1" in page
    assert "<th>concurrency</th>" in page and "<td>8</td>" in page
    assert "locust_stats.csv" in page and "tensorrt_llm" in page
    assert not list(tmp_path.glob("*.tmp"))


def test_html_single_level_has_no_concurrency_plots(tmp_path):
    report = write_report(tmp_path, set_a(), SLOSection(max_error_rate=None))
    assert set(embedded_pngs(report.html_path.read_text())) == {
        "TTFT distribution", "ITL distribution", "Throughput over time"}
    assert report.exit_code == 0


def test_html_escapes_error_text(tmp_path):
    samples = [make(1.0, [0.1, 0.2], 2), make(1.1, [], 0, error="<script>alert(1)</script>")]
    page = write_report(tmp_path, samples, SLOSection()).html_path.read_text()
    assert "<script>" not in page and "&lt;script&gt;" in page
