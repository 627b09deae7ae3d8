"""The SLO gate names each failed objective with its measured value and limit, and decides the exit code."""

from __future__ import annotations

from tritongen.loadtests.metrics import GoodputLimits, compute_metrics
from tritongen.loadtests.slo import evaluate, goodput_limits, verdict_lines
from tritongen.plan.slo import resolve_slo
from tritongen.spec import SLOSection
from test_lt_metrics import make, set_a


def SLO(**fields):
    """The Plan's SLO of a spec's `validation.slo` with these fields."""
    return resolve_slo(SLOSection(**fields))

# set_a measures: TTFT p95 385 ms, ITL p95 370 ms, e2e p99 1194 ms, 7.5 output tok/s, error rate 0.2.


def test_every_objective_reported_with_measured_value_and_limit():
    slo = SLO(ttft_p95_ms=300, itl_p95_ms=500, e2e_p99_ms=1000, min_output_tokens_per_s=10,
                     max_error_rate=0.1)
    results = evaluate(slo, compute_metrics(set_a()))
    assert verdict_lines(results) == [
        "FAIL ttft_p95_ms: measured 385.0 ms > limit 300 ms",
        "PASS itl_p95_ms: measured 370.0 ms <= limit 500 ms",
        "FAIL e2e_p99_ms: measured 1194.0 ms > limit 1000 ms",
        "FAIL min_output_tokens_per_s: measured 7.5 tok/s < limit 10 tok/s",
        "FAIL max_error_rate: measured 0.2000 > limit 0.1",
    ]
    failed = {r.name: (r.measured, r.limit) for r in results if not r.passed}
    assert set(failed) == {"ttft_p95_ms", "e2e_p99_ms", "min_output_tokens_per_s", "max_error_rate"}
    assert round(failed["ttft_p95_ms"][0], 6) == 385.0
    assert not all(r.passed for r in results)


def test_all_hold_exit_0():
    slo = SLO(ttft_p95_ms=400, itl_p95_ms=400, e2e_p99_ms=1200, min_output_tokens_per_s=7,
                     max_error_rate=0.25)
    results = evaluate(slo, compute_metrics(set_a()))
    assert all(r.passed for r in results)
    assert results[3].line == "PASS min_output_tokens_per_s: measured 7.5 tok/s >= limit 7 tok/s"


def test_a_measured_value_equal_to_the_limit_holds():
    # 1 failure in 5 requests is exactly 0.2.
    (result,) = evaluate(SLO(max_error_rate=0.2), compute_metrics(set_a()))
    assert result.passed
    assert result.line == "PASS max_error_rate: measured 0.2000 <= limit 0.2"


def test_default_slo_gates_on_errors_only():
    results = evaluate(SLO(), compute_metrics(set_a()))
    assert verdict_lines(results) == ["FAIL max_error_rate: measured 0.2000 > limit 0"]
    assert not all(r.passed for r in results)


def test_no_objectives_pass():
    results = evaluate(SLO(max_error_rate=None), compute_metrics(set_a()))
    assert results == []


def test_unmeasurable_objective_fails_and_says_why():
    plain_http = [make(1.0, [0.5], 4, protocol="http")]
    results = evaluate(SLO(ttft_p95_ms=500, max_error_rate=None), compute_metrics(plain_http))
    assert verdict_lines(results) == [
        "FAIL ttft_p95_ms: not measured (no successful streamed request (plain `http` has no first token; "
        "use grpc or http_stream)); limit 500 ms"]
    assert not all(r.passed for r in results)


def test_no_requests_fail_the_error_gate():
    results = evaluate(SLO(), compute_metrics([]))
    assert verdict_lines(results) == ["FAIL max_error_rate: not measured (no request was sent); limit 0"]


def test_goodput_limits_come_from_latency_objectives():
    slo = SLO(ttft_p95_ms=250, itl_p95_ms=150, min_output_tokens_per_s=1)
    assert goodput_limits(slo) == GoodputLimits(ttft_ms=250, itl_ms=150, e2e_ms=None)
