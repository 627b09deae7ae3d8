"""Open-loop arrival processes, trace parsing, pacing, per-level verdicts and the capacity line (no server)."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from tritongen.loadtests.arrivals import arrival_offsets, cancel_decisions, parse_trace
from tritongen.loadtests.slo import LevelVerdict, SLOResult, capacity
from tritongen.loadtests.workload import LocustConfig, Pacer
from tritongen.plan.load import load_profile
from tritongen.spec import LoadSection


def level_config(level: float, **load) -> LocustConfig:
    """One level's Locust configuration, its profile planned from a `validation.load` with `load` set."""
    return LocustConfig(profile=load_profile(LoadSection(**load), lambda p: Path(p).resolve()), url="x:1",
                        level=level, samples_dir="/tmp", tokenizer_dir="/tmp")


def gaps(offsets: list[float]) -> list[float]:
    return [b - a for a, b in zip(offsets, offsets[1:])]


def cv(values: list[float]) -> float:
    return statistics.pstdev(values) / statistics.fmean(values)


@pytest.mark.parametrize("pattern", ["constant", "poisson", "gamma"])
def test_rate_within_5_percent_over_a_long_run(pattern):
    offsets = list(arrival_offsets(pattern, 20.0, burstiness=0.5, seed=1, duration_s=1000))
    assert len(offsets) / 1000 == pytest.approx(20.0, rel=0.05)
    assert offsets == sorted(offsets) and offsets[0] == 0 and offsets[-1] < 1000


def test_poisson_gaps_have_cv_one():
    g = gaps(list(arrival_offsets("poisson", 10.0, seed=7, count=20_000)))
    assert cv(g) == pytest.approx(1.0, abs=0.05)
    assert statistics.fmean(g) == pytest.approx(0.1, rel=0.05)


@pytest.mark.parametrize(("burstiness", "expected_cv"), [(0.25, 2.0), (1.0, 1.0), (4.0, 0.5)])
def test_gamma_burstiness_sets_the_cv_at_the_same_rate(burstiness, expected_cv):
    g = gaps(list(arrival_offsets("gamma", 10.0, burstiness=burstiness, seed=3, count=20_000)))
    assert cv(g) == pytest.approx(expected_cv, rel=0.08)
    assert 1 / statistics.fmean(g) == pytest.approx(10.0, rel=0.05)


def test_constant_gaps_do_not_drift_and_seeds_repeat():
    offsets = list(arrival_offsets("constant", 3.0, count=3001))
    assert offsets[-1] == pytest.approx(1000.0, abs=1e-9)
    assert cv(gaps(offsets)) == pytest.approx(0, abs=1e-9)
    assert list(arrival_offsets("poisson", 5, seed=9, count=50)) == list(arrival_offsets("poisson", 5, seed=9, count=50))


def test_bad_arrival_arguments():
    with pytest.raises(ValueError, match="rate must be > 0"):
        next(arrival_offsets("poisson", 0))
    with pytest.raises(ValueError, match="unknown arrival pattern 'bursty'"):
        next(arrival_offsets("bursty", 1))  # type: ignore[arg-type]


def test_cancel_decisions_hit_the_rate():
    picks = [d for d, _ in zip(cancel_decisions(0.3, seed=1), range(10_000))]
    assert sum(picks) / len(picks) == pytest.approx(0.3, abs=0.02)


def test_trace_rows_sorted_and_shifted():
    rows = parse_trace(['{"timestamp": 5000, "input_length": 10, "output_length": 4}', "",
                        '{"timestamp": 2000, "text_input": "hi", "output_length": 2}'])
    assert [(r.offset_s, r.input_tokens, r.output_tokens, r.text_input) for r in rows] == [
        (0.0, None, 2, "hi"), (3.0, 10, 4, None)]


@pytest.mark.parametrize(("line", "message"), [
    ("nope", r"^t:1: not JSON"),
    ('{"timestamp": 1}', r"^t:1: missing output_length, input_length"),
    ('{"timestamp": 1, "input_length": 0, "output_length": 3}', r"^t:1: lengths must be >= 1"),
])
def test_bad_trace_lines_name_the_line(line, message):
    with pytest.raises(ValueError, match=message):
        parse_trace([line], "t")


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


def test_pacer_sends_on_schedule_and_reports_lag():
    clock = FakeClock()
    pacer = Pacer(level_config(2, request_rate=2.0, arrival="constant"), sleep=clock.sleep, clock=clock)
    assert pacer.wait() == (0.0, None) and clock.now == 100.0
    assert pacer.wait() == (0.0, None) and clock.now == pytest.approx(100.5)
    clock.now += 2.0  # every slot was busy: the next arrival (due at 101.0) goes out 1.5 s late
    lag, _ = pacer.wait()
    assert lag == pytest.approx(1.5)
    closed = Pacer(level_config(4, users=4), sleep=clock.sleep, clock=clock)
    assert closed.wait() == (None, None)


def test_pacer_sends_nothing_after_the_run():
    # 2 requests/s for 3 s: arrivals at 0, 0.5, ..., 2.5, then the schedule is over (no request after -t).
    clock = FakeClock()
    pacer = Pacer(level_config(2, request_rate=2.0, arrival="constant", duration_s=3.0), sleep=clock.sleep,
                  clock=clock)
    sent = 0
    while pacer.wait() is not None:
        sent += 1
    assert sent == 6 and clock.now == pytest.approx(102.5)


def test_pacer_replays_a_trace_then_stops(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 8, "output_length": 4}\n'
                     '{"timestamp": 250, "input_length": 16, "output_length": 2}\n')
    clock = FakeClock()
    pacer = Pacer(level_config(1, trace_file=str(trace)), sleep=clock.sleep, clock=clock)
    assert pacer.wait()[1].input_tokens == 8
    lag, row = pacer.wait()
    assert (lag, row.output_tokens, clock.now) == (0.0, 2, pytest.approx(100.25))
    assert pacer.wait() is None


# --- per-level verdicts and the capacity line ----------------------------------------------------------

def verdict(level: float, passed: bool) -> LevelVerdict:
    return LevelVerdict(level, [SLOResult("ttft_p95_ms", 1.0 if passed else 9.0, 5.0, "ms", "<=", passed)])


@pytest.mark.parametrize(("pattern", "level", "above"), [
    ([True, True, True], 4, []),
    ([True, True, False], 2, []),
    ([False, True, True], None, [2, 4]),
    ([True, False, True], 1, [4]),       # a pass above a failure is reported, not trusted
])
def test_capacity_is_the_highest_level_below_the_first_failure(pattern, level, above):
    cap = capacity([verdict(x, p) for x, p in zip((1, 2, 4), pattern)], "users")
    assert (cap.level, cap.passing_above) == (level, above)
    assert cap.passed is all(pattern)  # without min_capacity every level must pass
    assert cap.rule == "all_levels"


def test_capacity_gate_with_a_target():
    verdicts = [verdict(1, True), verdict(2, True), verdict(4, False)]
    assert capacity(verdicts, "users", min_capacity=2).passed is True
    ok = capacity(verdicts, "users", min_capacity=4)
    assert ok.passed is False
    assert ok.line == ("capacity: 2 users (highest level at which every SLO holds); required >= 4 users -> FAIL")
    none = capacity([verdict(0.5, False)], "requests/s", min_capacity=0.5)
    assert none.line.startswith("capacity: none") and none.passed is False


@pytest.mark.parametrize(("load", "message"), [
    ({"warmup_s": 20, "duration_s": 8},
     "validation.load.warmup_s: (20) must be below duration_s (8); shorten the warm-up or lengthen the run"),
    ({"sweep": [1, 2.5]}, "validation.load.sweep: closed-loop levels are user counts; list whole numbers, or set "
                          "request_rate for request-rate levels"),
    ({"trace_file": "t.jsonl", "request_rate": 2},
     "validation.load.trace_file: a trace sets its own arrival times; drop request_rate and sweep, or the trace"),
])
def test_load_section_errors_are_one_line_each(tmp_path, load, message):
    import yaml

    from tritongen.errors import SpecError
    from tritongen.spec import load_spec

    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump({"name": "x", "model": {"checkpoint": "."}, "validation": {"load": load}}))
    with pytest.raises(SpecError) as err:
        load_spec(path)
    assert err.value.problems == [message]
