"""Metrics against numbers worked out by hand (see the comments), and the sample file round trip."""

from __future__ import annotations

import json

import pytest

from tritongen.loadtests.metrics import GoodputLimits, Stats, compute_metrics, compute_sweep, request_latency
from tritongen.loadtests.samples import Sample, SampleWriter, per_process_path, read_samples, sample_files


def make(send_s: float, responses: list[float], out: int, *, error: str | None = None, protocol: str = "grpc",
         concurrency: float = 2, input_tokens: int = 10, rid: str = "r", counts: list[int | None] | None = None,
         cancelled: bool = False) -> Sample:
    """A recorded request. `counts`: the server's num_output_tokens per response (the tokens it carried); by default
    only the last response carries one (= `out`), so all its tokens arrive with the last response."""
    if counts is None:
        counts = [None] * (len(responses) - 1) + [out] if responses else []
    return Sample(request_id=rid, protocol=protocol, send_time=send_s, send_wall_ns=round(send_s * 1e9),
                  level=concurrency, input_tokens=input_tokens, response_times=responses, response_tokens=counts,
                  output_tokens=out if responses else None, output_text="x" * out, error=error, cancelled=cancelled)


def set_a() -> list[Sample]:
    """Four successful streamed requests and one failure.

    request  send   responses (s after send)  out  TTFT ms  e2e ms  ITL ms             ends at
    s1       100.0  0.1 0.2 0.3 0.5           5    100      500     (500-100)/4 = 100  100.5
    s2       100.5  0.2 0.4 1.0               3    200      1000    (1000-200)/2 = 400 101.5
    s3       101.0  0.3 0.6                   1    300      600     excluded (1 token) 101.6
    s4       101.2  0.4 1.2                   9    400      1200    (1200-400)/8 = 100 102.4
    s5       101.5  (error "boom")            0    -        -       -                  101.5
    """
    return [make(100.0, [0.1, 0.2, 0.3, 0.5], 5, rid="s1"), make(100.5, [0.2, 0.4, 1.0], 3, rid="s2"),
            make(101.0, [0.3, 0.6], 1, rid="s3"), make(101.2, [0.4, 1.2], 9, rid="s4"),
            make(101.5, [], 0, error="boom", rid="s5")]


def test_counts_duration_and_throughput():
    m = compute_metrics(set_a())
    assert (m.request_count, m.error_count) == (5, 1)
    assert m.error_rate == pytest.approx(0.2)
    # No load duration given: the window is the whole run, last response 102.4 - first request 100.0.
    assert m.run_s == pytest.approx(2.4) and m.window_s == pytest.approx(2.4)
    assert m.request_throughput == pytest.approx(4 / 2.4)  # 1.6667 successful req/s
    assert m.output_token_throughput == pytest.approx(7.5)  # (5 + 3 + 1 + 9) / 2.4
    assert m.errors == (("boom", 1),)


def test_ttft_stats():
    # [100, 200, 300, 400]: mean 250; population variance (150²+50²+50²+150²)/4 = 12500;
    # linear percentiles at index q/100 * 3: p50 1.5 -> 250, p90 2.7 -> 370, p95 2.85 -> 385, p99 2.97 -> 397.
    assert compute_metrics(set_a()).ttft_ms == Stats(
        count=4, avg=pytest.approx(250), min=pytest.approx(100), max=pytest.approx(400),
        std=pytest.approx(12500 ** 0.5), p50=pytest.approx(250), p90=pytest.approx(370),
        p95=pytest.approx(385), p99=pytest.approx(397))


def test_itl_excludes_single_token_requests():
    # [100, 400, 100] -> sorted [100, 100, 400]: mean 200; variance (100²+100²+200²)/3 = 20000;
    # index q/100 * 2: p50 1 -> 100, p90 1.8 -> 340, p95 1.9 -> 370, p99 1.98 -> 394.
    itl = compute_metrics(set_a()).itl_ms
    assert itl.count == 3
    assert (itl.avg, itl.min, itl.max) == (pytest.approx(200), pytest.approx(100), pytest.approx(400))
    assert itl.std == pytest.approx(20000 ** 0.5)
    assert (itl.p50, itl.p90, itl.p95, itl.p99) == (
        pytest.approx(100), pytest.approx(340), pytest.approx(370), pytest.approx(394))


def test_e2e_stats():
    # sorted [500, 600, 1000, 1200]: mean 825; variance (325²+225²+175²+375²)/4 = 81875;
    # p50 index 1.5 -> 800, p90 2.7 -> 1140, p95 2.85 -> 1170, p99 2.97 -> 1194.
    e2e = compute_metrics(set_a()).e2e_ms
    assert (e2e.count, e2e.avg, e2e.min, e2e.max) == (4, pytest.approx(825), pytest.approx(500), pytest.approx(1200))
    assert e2e.std == pytest.approx(81875 ** 0.5)
    assert (e2e.p50, e2e.p90, e2e.p95, e2e.p99) == (
        pytest.approx(800), pytest.approx(1140), pytest.approx(1170), pytest.approx(1194))


def test_token_stats_cover_successful_requests_only():
    m = compute_metrics(set_a())
    assert m.output_tokens.avg == pytest.approx(18 / 4)
    assert m.input_tokens.count == 4


@pytest.mark.parametrize(("limits", "good"), [
    (GoodputLimits(), 4),                          # no limits: every successful request is good
    (GoodputLimits(ttft_ms=250), 2),               # s1 (100), s2 (200)
    (GoodputLimits(itl_ms=150), 3),                # s2 (400) fails; s3 has no ITL and cannot fail it
    (GoodputLimits(e2e_ms=1000), 3),               # s4 (1200) fails; 1000 is within the limit
    (GoodputLimits(ttft_ms=250, itl_ms=150), 1),   # only s1
])
def test_goodput(limits, good):
    m = compute_metrics(set_a(), limits)
    assert m.good_count == good
    assert m.goodput == pytest.approx(good / 2.4)


def test_timeline_bins_by_completion():
    # Ends at 0.5, 1.5, 1.6, 2.4 s (s5 failed at 1.5) after the first request -> 3 one-second bins.
    points = compute_metrics(set_a()).timeline
    assert [p.t_s for p in points] == [0.0, 1.0, 2.0]
    assert [p.requests_per_s for p in points] == [1, 2, 1]
    assert [p.output_tokens_per_s for p in points] == [5, 3 + 1, 9]
    assert [p.errors for p in points] == [0, 1, 0]


def test_plain_http_has_no_ttft_or_itl():
    sample = make(10.0, [0.8], 10, protocol="http")
    assert request_latency(sample).ttft_ms is None
    m = compute_metrics([sample])
    assert (m.ttft_ms, m.itl_ms) == (None, None)
    assert m.e2e_ms.avg == pytest.approx(800)


def test_stream_without_responses_is_a_failure():
    m = compute_metrics([make(1.0, [], 0), make(1.0, [0.5], 1)])
    assert (m.error_count, m.errors) == (1, (("no response received", 1),))


def test_no_samples_gives_no_values_rather_than_zeros():
    m = compute_metrics([])
    assert (m.error_rate, m.request_throughput, m.goodput, m.ttft_ms, m.timeline) == (None, None, None, None, ())


# --- measurement windows on recorded samples -------------------------------------------------------------

def windowed() -> list[Sample]:
    """A level of 10 s with a 2 s warm-up: window [2, 10] s after the first request (sent at 100.0).

    request  sent  responses (s after send) -> server count per response   what the window makes of it
    w1       0.5   1.0 2.0 3.0 -> 1 1 1     sent in the warm-up (no statistics); tokens at 2.5, 3.5 and the
                                            completion at 3.5 are inside the window
    w2       4.0   0.5 1.0 -> 1 1           TTFT 500, ITL 500, e2e 1000; 2 tokens; completes at 5.0
    w3       9.0   0.5 1.5 2.5 -> 1 1 1     in flight at the end: TTFT 500, ITL 1000, e2e 2500 (followed to
                                            11.5); 1 token inside (9.5); completes outside
    w4       6.0   error                    error rate 1/3
    w5       7.0   0.2 -> 1, cancelled      cancelled; its token at 7.2 was delivered and counts
    w6       10.5  0.5 -> 1                 sent after the load ended (drain): in nothing but the totals
    """
    return [make(100.0, [0.01], 1, rid="w0"),  # the level's first request, at t = 0, in the warm-up
            make(100.5, [1.0, 2.0, 3.0], 3, counts=[1, 1, 1], rid="w1"),
            make(104.0, [0.5, 1.0], 2, counts=[1, 1], rid="w2"),
            make(109.0, [0.5, 1.5, 2.5], 3, counts=[1, 1, 1], rid="w3"),
            make(106.0, [], 0, error="boom", rid="w4"),
            make(107.0, [0.2], 1, counts=[1], cancelled=True, rid="w5"),
            make(110.5, [0.5], 1, counts=[1], rid="w6")]


def test_window_excludes_warmup_and_drain_and_follows_in_flight_requests():
    m = compute_metrics(windowed(), warmup_s=2, duration_s=10)
    assert (m.window_start_s, m.window_end_s, m.window_s) == (2, 10, 8)
    assert (m.request_count, m.error_count, m.cancelled_count) == (3, 1, 1)   # w2, w3, w4; w5
    assert m.error_rate == pytest.approx(1 / 3)
    assert m.completed_count == 2                                           # w1 at 3.5, w2 at 5.0
    assert m.request_throughput == pytest.approx(2 / 8)
    assert m.in_flight_at_window_end == 1                                   # w3
    assert m.output_token_throughput == pytest.approx((2 + 2 + 1 + 1) / 8)  # w1, w2, w3, w5 inside
    assert (m.ttft_ms.count, m.ttft_ms.avg) == (2, pytest.approx(500))     # w2 and w3, not w0/w1/w6
    assert sorted([m.e2e_ms.min, m.e2e_ms.max]) == [pytest.approx(1000), pytest.approx(2500)]
    assert (m.itl_ms.min, m.itl_ms.max) == (pytest.approx(500), pytest.approx(1000))
    assert m.output_tokens_total == 1 + 3 + 2 + 3 + 1 + 1                   # every request that did not fail
    assert m.run_s == pytest.approx(11.5)


def test_goodput_counts_good_requests_completed_inside_the_window():
    # Completed inside: w1 (e2e 3000 ms) and w2 (1000 ms); only w2 meets a 2000 ms limit.
    m = compute_metrics(windowed(), GoodputLimits(e2e_ms=2000), warmup_s=2, duration_s=10)
    assert (m.good_count, m.goodput) == (1, pytest.approx(1 / 8))


def test_timeline_places_tokens_when_they_arrived_and_marks_the_window():
    points = compute_metrics(windowed(), warmup_s=2, duration_s=10).timeline
    by_t = {p.t_s: p for p in points}
    assert by_t[2.0].output_tokens_per_s == 1 and by_t[3.0].output_tokens_per_s == 1   # w1 at 2.5 and 3.5
    assert by_t[4.0].output_tokens_per_s == 1 and by_t[5.0].output_tokens_per_s == 1   # w2 at 4.5 and 5.0
    assert [p.in_window for p in points if p.t_s in (1.0, 2.0, 9.0, 10.0)] == [False, True, True, False]
    assert sum(p.output_tokens_per_s for p in points) == 11


def test_tokens_come_from_the_server_count_not_the_text():
    s = make(1.0, [0.1, 0.2], 7, counts=[3, 4])
    s.output_text = "two words"
    assert compute_metrics([s]).output_tokens.avg == 7
    assert request_latency(s).itl_ms == pytest.approx(100 / 6)


def test_sweep_groups_by_concurrency():
    samples = set_a() + [make(200.0, [0.05, 0.25], 3, concurrency=1), make(200.5, [0.1, 0.3], 3, concurrency=1)]
    sweep = compute_sweep(samples)
    assert list(sweep) == [1, 2]
    assert sweep[1].request_count == 2
    # Level 1: 200.0 -> 200.8, 6 tokens.
    assert sweep[1].window_s == pytest.approx(0.8)
    assert sweep[1].output_token_throughput == pytest.approx(7.5)
    assert sweep[2].request_count == 5


def test_sample_timing_api():
    s = Sample.begin("id-1", "grpc", input_tokens=7, level=3)
    s.mark_response(now=s.send_time + 0.25, tokens=1)
    s.mark_response(now=s.send_time + 0.75, tokens=1)
    assert s.finish("hello world") is s
    assert s.output_tokens == 2 and s.token_arrivals() == [(0.25, 1), (0.75, 1)]
    assert s.ok and s.streaming
    assert s.response_times == [0.25, 0.75]
    assert request_latency(s).itl_ms == pytest.approx(500)


def test_jsonl_files_from_several_processes_merge_in_send_order(tmp_path):
    a, b, c = make(3.0, [0.1], 1, rid="c"), make(1.0, [0.1], 1, rid="a"), make(2.0, [], 0, error="x", rid="b")
    with SampleWriter(tmp_path / "samples-host-1.jsonl") as w:
        w.write(a)
        w.write(b)
    with SampleWriter(tmp_path / "samples-host-2.jsonl") as w:
        w.write(c)
    files = sample_files(tmp_path)
    assert [f.name for f in files] == ["samples-host-1.jsonl", "samples-host-2.jsonl"]
    merged = read_samples(files)
    assert [s.request_id for s in merged] == ["a", "b", "c"]
    assert merged[1] == c
    assert per_process_path(tmp_path).parent == tmp_path


def test_torn_last_line_is_skipped_but_corruption_elsewhere_raises(tmp_path):
    good = make(1.0, [0.1], 1).to_json()
    torn = tmp_path / "torn.jsonl"
    torn.write_text(good + "\n" + good[:20])
    assert len(read_samples([torn])) == 1
    broken = tmp_path / "broken.jsonl"
    broken.write_text(good[:20] + "\n" + good + "\n")
    with pytest.raises(ValueError, match=r"broken.jsonl:1: not a sample record"):
        read_samples([broken])
    unknown = tmp_path / "unknown.jsonl"
    unknown.write_text(json.dumps({"request_id": "x"}) + "\n")
    with pytest.raises(ValueError, match=r"unknown.jsonl:1"):
        read_samples([unknown])


def test_refusals_for_overload_are_counted_apart_from_errors():
    samples = set_a() + [
        make(101.6, [], 0, rid="q1", error="[request id: <id_unknown>] Exceeds maximum queue size"),
        make(101.7, [], 0, rid="q2", protocol="openai", error='OpenAI chat: 429 {"error": {"type": "rate_limit_error"}}'),
        make(101.8, [], 0, rid="q3", error="StatusCode.RESOURCE_EXHAUSTED: too many"),
    ]
    m = compute_metrics(samples)
    assert (m.request_count, m.error_count, m.refused_count) == (8, 1, 3)
    assert m.error_rate == pytest.approx(4 / 8)  # refused requests were not served either
