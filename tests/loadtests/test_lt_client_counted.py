"""Counts the client made (a model that returns none: NVIDIA's llmapi model) are marked client-counted wherever a
reader sees a value that rests on them: the JSON, the SLO verdict lines, the console and the HTML report; values
that do not rest on token counts (TTFT, e2e, request counts) and server-counted runs carry no mark."""

from __future__ import annotations

import dataclasses

import pytest
from test_lt_metrics import set_a
from test_lt_report import SLO

from tritongen.loadtests import console
from tritongen.loadtests.report import write_report

MARK = "(client-counted)"
OBJECTIVES = dict(ttft_p95_ms=300, itl_p95_ms=500, min_output_tokens_per_s=1)


def report(tmp_path, counted_by: str):
    samples = [dataclasses.replace(s, counted_by=counted_by) for s in set_a()]
    return write_report(tmp_path, samples, SLO(**OBJECTIVES))


def test_verdict_lines_and_json_mark_client_counts(tmp_path):
    level = report(tmp_path, "client").summary["levels"][0]
    results = {r["name"]: r for r in level["slo"]["results"]}
    assert level["tokens"]["counted_by"] == "client"
    assert {"itl_ms", "output_token_throughput", "output_tokens_total"} <= set(level["client_counted"])
    assert "ttft_ms" not in level["client_counted"] and "e2e_ms" not in level["client_counted"]
    for name in ("itl_p95_ms", "min_output_tokens_per_s"):
        assert results[name]["client_counted"] is True and MARK in results[name]["line"], results[name]
    assert results["ttft_p95_ms"]["client_counted"] is False and MARK not in results["ttft_p95_ms"]["line"]


def test_server_counted_runs_carry_no_mark(tmp_path, capsys):
    r = report(tmp_path, "server")
    level = r.summary["levels"][0]
    assert level["client_counted"] == [] and not any(x["client_counted"] for x in level["slo"]["results"])
    console.print_report(r.summary, tmp_path, r.html_path, r.json_path)
    assert "client-counted" not in capsys.readouterr().out
    assert "client-counted" not in r.html_path.read_text()


@pytest.mark.parametrize("where", ["console", "html"])
def test_console_and_html_mark_every_token_based_value(tmp_path, capsys, where):
    r = report(tmp_path, "client")
    console.print_report(r.summary, tmp_path, r.html_path, r.json_path)
    text = capsys.readouterr().out if where == "console" else r.html_path.read_text()
    if where == "console":
        assert f"output tok/s {MARK}" in text and f"ITL {MARK} p50" in text
        assert f"TTFT {MARK}" not in text
    else:
        assert f"output tok/s {MARK}" in text and f"ITL p50 ms {MARK}" in text and f"ITL ms {MARK}" in text
        assert f"TTFT p50 ms {MARK}" not in text
