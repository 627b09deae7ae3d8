"""What a load test prints for a sweep: each column of the stdout table under its own header."""

from __future__ import annotations

from test_lt_report import SLO, sweep_samples

from tritongen.loadtests.console import write_sweep
from tritongen.loadtests.report import build_summary


def test_sweep_table_shows_each_value_under_its_header(tmp_path, capsys):
    summary = build_summary(sweep_samples(), SLO(max_error_rate=None))
    write_sweep(summary, tmp_path)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "     users verdict    req/s     tok/s  TTFT p95  ITL p95   e2e p99"
    # set_a at level 2: 4/2.4 req/s, 7.5 tok/s, TTFT p95 385, ITL p95 370, e2e p99 1194 (test_lt_slo).
    assert lines[1].split() == ["2", "PASS", "1.67", "7.5", "385.0", "370.0", "1194.0"]
    assert (tmp_path / "sweep.csv").read_text().splitlines()[0].startswith("level,verdict,requests,errors,refused,")
