"""`tritongen tune` without a server: the search space, bad input, the store and resuming, the outputs, and the
search itself on the synthetic engine model's formula (tritongen.tune.measure.EngineModelEvaluator)."""

from __future__ import annotations

import copy
import csv
import json

import pytest
import yaml

from tritongen.cli import main
from tritongen.errors import CheckFailed
from tritongen.spec import parse_spec
from tritongen.tune import TuneOptions, tune
from tritongen.tune.measure import EngineModelEvaluator
from tritongen.tune.space import search_space

from engine_specs import ENGINE_SPEC, engine_spec


def _quiet(_line: str) -> None:
    pass


def test_each_runtime_declares_its_knobs_and_the_engine_model_adds_batch_and_kv():
    spec = parse_spec(ENGINE_SPEC)
    assert [k.path for k in search_space(spec)] == ["serving.max_batch_size", "serving.kv_cache.max_tokens",
                                                    "serving.stream_interval"]
    # The informed first trial raises the knobs that admit more work at once, as each runtime marks them.
    assert [k.path for k in search_space(spec) if k.admits] == ["serving.max_batch_size", "serving.kv_cache.max_tokens"]
    fixed = copy.deepcopy(ENGINE_SPEC)
    fixed["synthetic"]["engine"]["enabled"] = False
    # Fixed timing: batch and KV budget change nothing, so they are not knobs.
    assert [k.path for k in search_space(parse_spec(fixed))] == ["serving.stream_interval"]
    hf = {**copy.deepcopy(ENGINE_SPEC), "runtime": "hf", "synthetic": {}}
    assert "placement.instances_per_gpu" not in [k.path for k in search_space(parse_spec(hf))]
    hf["placement"] = {"device": "gpu"}
    assert "placement.instances_per_gpu" in [k.path for k in search_space(parse_spec(hf))]


def test_a_knob_override_narrows_the_range_and_a_value_fixes_it():
    knobs = {k.path: k for k in search_space(parse_spec(ENGINE_SPEC), ["serving.max_batch_size=4:32",
                                                                       "serving.stream_interval=2"])}
    assert (knobs["serving.max_batch_size"].low, knobs["serving.max_batch_size"].high) == (4, 32)
    assert (knobs["serving.stream_interval"].low, knobs["serving.stream_interval"].high) == (2, 2)


@pytest.mark.parametrize("flag, message", [
    ("serving.max_num_seqs=1:8", "error: --knob serving.max_num_seqs: the synthetic runtime has no such knob (its "
     "knobs: serving.max_batch_size, serving.kv_cache.max_tokens, serving.stream_interval); pick one of those"),
    ("serving.max_batch_size=1:100000", "error: --knob serving.max_batch_size: 1:100000 is outside the synthetic "
     "runtime's range 1:256; narrow it to that range"),
    ("serving.max_batch_size=8:2", "error: --knob serving.max_batch_size: low 8 is above high 2; pass LOW:HIGH"),
])
def test_a_knob_the_runtime_does_not_have_is_bad_input_naming_it(tmp_path, capsys, flag, message):
    spec = engine_spec(tmp_path)
    assert main(["tune", str(spec), "--knob", flag, "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.strip() == message
    assert not (tmp_path / "out").exists()


def test_a_spec_without_a_latency_slo_is_bad_input(tmp_path, capsys):
    spec = engine_spec(tmp_path, slo={"max_error_rate": 0.0})
    assert main(["tune", str(spec)]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: validation.slo: sets no per-request latency objective, so every configuration has the same goodput "
        "as throughput; set ttft_p95_ms, itl_p95_ms or e2e_p99_ms")


def test_resume_of_a_folder_without_a_store_and_a_second_tune_into_one_are_bad_input(tmp_path, capsys):
    spec = engine_spec(tmp_path)
    assert main(["tune", str(spec), "--resume", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == (f"error: --resume: {tmp_path} holds no study.db; pass the --out "
                                               "folder of an earlier tune")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "study.db").write_bytes(b"")
    assert main(["tune", str(spec), "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.strip() == (f"error: --out: {tmp_path / 'out'} already holds a tune (study.db); "
                                               f"continue it with --resume {tmp_path / 'out'}, or choose another "
                                               "folder")


def test_an_slo_no_trial_meets_exits_1_naming_the_slo(tmp_path):
    spec = engine_spec(tmp_path, slo={"ttft_p95_ms": 1.0})  # below one step (24 ms): nothing can meet it
    with pytest.raises(CheckFailed) as err:
        tune(TuneOptions(spec=str(spec), budget=3, out=str(tmp_path / "out"), rounds=1),
             evaluator=EngineModelEvaluator(rounds=1), say=_quiet)
    assert err.value.exit_code == 1
    assert str(err.value) == ("validation.slo: no trial met it (ttft_p95_ms 1) in 3 trial(s); loosen it, lower the "
                              "load, or widen the knob ranges (--knob)")
    assert not list(tmp_path.glob("*.tuned*.yaml"))


def test_a_trial_that_misses_the_slo_in_its_first_round_stops_there_pruned(tmp_path):
    import optuna

    spec = engine_spec(tmp_path, slo={"ttft_p95_ms": 300})
    evaluator = EngineModelEvaluator(rounds=3)
    lines: list[str] = []
    # Trial 0 is the spec's own batch of 4 for 32 users: requests queue, TTFT p95 is seconds.
    with pytest.raises(CheckFailed):
        tune(TuneOptions(spec=str(spec), budget=1, out=str(tmp_path / "out"), rounds=3), evaluator=evaluator,
             say=lines.append)
    study = optuna.load_study(study_name="tune", storage=f"sqlite:///{tmp_path / 'out' / 'study.db'}")
    (trial,) = [t for t in study.trials if t.state != optuna.trial.TrialState.WAITING]
    assert trial.state == optuna.trial.TrialState.PRUNED
    assert trial.user_attrs["result"]["rounds"] == 1 and list(trial.intermediate_values) == [0]
    assert "stopped after round 1" in trial.user_attrs["result"]["note"]
    assert any(line.startswith("[trial 0 1/1]") and "pruned" in line for line in lines)


class FailsAt(EngineModelEvaluator):
    """Raises CheckFailed (as the served evaluator does when its server dies or a model will not load) for the
    trials whose call numbers (1-based) are in `at`."""

    def __init__(self, at: set[int]):
        super().__init__(rounds=1)
        self.at = at

    def evaluate(self, spec, values, report, where=None):
        if len(self.calls) + 1 in self.at:
            self.calls.append(dict(values))
            raise CheckFailed("tritonserver exited with code 0 during the load test:\nE1205 the generation loop died")
        return super().evaluate(spec, values, report, where)


def test_a_trial_its_server_did_not_serve_is_a_failed_row_and_the_tune_goes_on(tmp_path):
    spec, out = engine_spec(tmp_path, slo={"ttft_p95_ms": 20000}), tmp_path / "out"
    evaluator, lines = FailsAt({2}), []
    assert tune(TuneOptions(spec=str(spec), budget=4, out=str(out), confirm=0), evaluator=evaluator,
                say=lines.append) == 0
    assert len(evaluator.calls) == 4
    failed = [line for line in lines if line.startswith("[trial 1 ")]
    assert len(failed) == 1 and "failed: tritonserver exited with code 0 during the load test" in failed[0]
    with open(out / "trials.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["state"] for r in rows] == ["complete", "failed", "complete", "complete"]
    assert rows[1]["feasible"] == "False" and float(rows[1]["goodput"]) == 0
    assert json.loads((out / "top.json").read_text())[0]["trial"] != 1


def test_three_trials_in_a_row_not_served_stop_the_tune_naming_the_last_reason(tmp_path):
    spec, out = engine_spec(tmp_path, slo={"ttft_p95_ms": 20000}), tmp_path / "out"
    evaluator = FailsAt({1, 2, 3})
    with pytest.raises(CheckFailed) as err:
        tune(TuneOptions(spec=str(spec), budget=8, out=str(out)), evaluator=evaluator, say=_quiet)
    assert len(evaluator.calls) == 3
    assert str(err.value).startswith("tune: 3 trials in a row were not served; the last: tritonserver exited with "
                                     "code 0 during the load test")
    with open(out / "trials.csv") as f:  # the table is still written
        assert [r["state"] for r in csv.DictReader(f)] == ["failed"] * 3


def test_trial_0_is_the_input_spec_leaving_what_it_leaves_unset_to_the_runtime(tmp_path):
    import optuna

    data = yaml.safe_load(engine_spec(tmp_path).read_text())
    del data["serving"]["kv_cache"]  # the KV budget is left to the runtime
    spec = tmp_path / "unset.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    evaluator, lines = EngineModelEvaluator(rounds=1), []
    tune(TuneOptions(spec=str(spec), budget=2, out=str(tmp_path / "out")), evaluator=evaluator, say=lines.append)
    # Trial 0 evaluated the spec as written: the batch it sets, no KV budget (not a sampled one).
    assert evaluator.calls[0] == {"serving.max_batch_size": 4, "serving.kv_cache.max_tokens": None,
                                  "serving.stream_interval": 1}
    assert any(line.startswith("[trial 0 1/2]") and "max_tokens=default" in line for line in lines)
    study = optuna.load_study(study_name="tune", storage=f"sqlite:///{tmp_path / 'out' / 'study.db'}")
    assert "serving.kv_cache.max_tokens" not in study.trials[0].params
    assert study.trials[1].params["serving.kv_cache.max_tokens"] is not None  # trial 1 sets it, at its highest
    with open(tmp_path / "out" / "trials.csv") as f:
        assert next(csv.DictReader(f))["serving.kv_cache.max_tokens"] == ""


class KilledAt(EngineModelEvaluator):
    """Raises KeyboardInterrupt (a killed tune) when asked for its `at`-th trial."""

    def __init__(self, at: int):
        super().__init__(rounds=2)
        self.at = at

    def evaluate(self, spec, values, report, where=None):
        if len(self.calls) + 1 == self.at:
            self.calls.append(dict(values))
            raise KeyboardInterrupt
        return super().evaluate(spec, values, report, where)


def test_a_killed_tune_resumes_from_its_store_without_rerunning_finished_trials(tmp_path):
    import optuna

    spec, out = engine_spec(tmp_path, slo={"ttft_p95_ms": 20000}), tmp_path / "out"
    first, lines = KilledAt(4), []
    assert tune(TuneOptions(spec=str(spec), budget=6, out=str(out)), evaluator=first, say=lines.append) == 130
    assert lines[-1] == (f"interrupted: 3 trial(s) finished (above); nothing was written next to the input; "
                         f"continue with --resume {out} (the trial in flight runs again first)")
    with open(out / "trials.csv") as f:  # the table of what finished
        assert len(list(csv.DictReader(f))) == 3
    killed = first.calls[-1]
    study = optuna.load_study(study_name="tune", storage=f"sqlite:///{out / 'study.db'}")
    finished = [t for t in study.trials if t.state.is_finished()]
    assert len(finished) == 3

    second = EngineModelEvaluator(rounds=2)
    lines: list[str] = []
    assert tune(TuneOptions(spec=str(spec), budget=6, resume=str(out), confirm=0), evaluator=second,
                say=lines.append) == 0
    assert lines[1] == f"resuming {out / 'study.db'}: 3 finished trial(s) kept"
    # 6 trials in all: the 3 finished ones were not run again; the killed one ran first, then 2 new ones.
    assert len(second.calls) == 3 and second.calls[0] == killed
    with open(out / "trials.csv") as f:
        assert [int(r["trial"]) for r in csv.DictReader(f)] == [0, 1, 2, 4, 5, 6]


def test_outputs_winner_next_to_the_input_never_over_a_file_with_table_plot_and_diff(tmp_path):
    spec = engine_spec(tmp_path, slo={"itl_p95_ms": 29})
    (tmp_path / "engine.tuned.yaml").write_text("# someone's file\n")
    lines: list[str] = []
    assert tune(TuneOptions(spec=str(spec), budget=4, out=str(tmp_path / "out"), top=2),
                evaluator=EngineModelEvaluator(rounds=1), say=lines.append) == 0
    assert (tmp_path / "engine.tuned.yaml").read_text() == "# someone's file\n"
    winner = tmp_path / "engine.tuned-2.yaml"
    tuned = parse_spec(yaml.safe_load(winner.read_text()))
    top = json.loads((tmp_path / "out" / "top.json").read_text())
    assert len(top) <= 2 and tuned.serving.max_batch_size == top[0]["serving.max_batch_size"]
    changes = (tmp_path / "out" / "changes.md").read_text()
    assert "- `serving.max_batch_size`: 4 -> " in changes and "Why: trial" in changes and "```diff" in changes
    with open(tmp_path / "out" / "trials.csv") as f:
        table = list(csv.DictReader(f))
    assert len(table) == 4 and {"serving.max_batch_size", "goodput", "ttft_p95_ms", "itl_p95_ms", "errors",
                                "refused", "tokens_equal"} <= set(table[0])
    assert (tmp_path / "out" / "pareto.png").read_bytes()[:4] == b"\x89PNG"
    progress = [x for x in lines if x.startswith("[trial ")]
    assert len(progress) == 4 and "goodput" in progress[0] and "p95 TTFT" in progress[0]


SLOS = {"tight_ttft": {"ttft_p95_ms": 300}, "tight_itl": {"itl_p95_ms": 29},
        "loose": {"ttft_p95_ms": 5000, "itl_p95_ms": 200}}


def optimum(slo: dict) -> float:
    """The most goodput any setting can have, from the engine model's own formula: with every request of one
    length, batch and KV budget act through one number, the requests running at once (1..users)."""
    best = 0.0
    for running in range(1, ENGINE_SPEC["validation"]["load"]["users"] + 1):
        data = copy.deepcopy(ENGINE_SPEC)
        data["serving"]["max_batch_size"] = running
        data["serving"]["kv_cache"]["max_tokens"] = 10**6
        data["validation"]["slo"] = slo
        r = EngineModelEvaluator(rounds=1).evaluate(parse_spec(data), {}, lambda i, r: False)
        best = max(best, r.goodput if r.feasible else 0.0)
    return best


@pytest.mark.slow
@pytest.mark.parametrize("name,seed", [(name, 0) for name in SLOS] + [("tight_itl", 1), ("tight_itl", 2)])
def test_tune_finds_95_percent_of_the_engine_models_optimum_goodput_in_16_trials(tmp_path, name, seed):
    slo = SLOS[name]
    spec = engine_spec(tmp_path, slo=slo)
    best = optimum(slo)
    assert best > 0
    # The stream interval does not change the engine model's timing: fixed, as a user would (--knob).
    tune(TuneOptions(spec=str(spec), budget=16, out=str(tmp_path / "out"), knobs=["serving.stream_interval=1"],
                     seed=seed),
         evaluator=EngineModelEvaluator(rounds=2), say=_quiet)
    found = json.loads((tmp_path / "out" / "top.json").read_text())[0]["goodput"]
    assert found >= 0.95 * best, f"{name}: tune found {found:.3f} req/s, the optimum is {best:.3f}"


def optimum_batch(slo: dict) -> int:
    """The batch (requests running at once) with the most goodput on the engine model's own formula."""
    best, batch = 0.0, 0
    for running in range(1, ENGINE_SPEC["validation"]["load"]["users"] + 1):
        data = copy.deepcopy(ENGINE_SPEC)
        data["serving"]["max_batch_size"] = running
        data["serving"]["kv_cache"]["max_tokens"] = 98304
        data["validation"]["slo"] = slo
        r = EngineModelEvaluator(rounds=2).evaluate(parse_spec(data), {}, lambda i, r: False)
        if r.feasible and r.goodput > best:
            best, batch = r.goodput, running
    return batch


@pytest.mark.slow
def test_on_the_engine_model_tune_reaches_the_optimums_batch_in_12_trials_without_a_repeat_and_stops(tmp_path):
    slo = {"itl_p95_ms": 29}
    spec, out = engine_spec(tmp_path, slo=slo), tmp_path / "out"
    evaluator, lines = EngineModelEvaluator(rounds=2), []
    # The batch is the one free knob (the KV budget holds every user, the stream interval does not change timing).
    assert tune(TuneOptions(spec=str(spec), budget=12, out=str(out), confirm=1,
                            knobs=["serving.stream_interval=1", "serving.kv_cache.max_tokens=98304"]),
                evaluator=evaluator, say=lines.append) == 0
    with open(out / "trials.csv") as f:
        rows = list(csv.DictReader(f))
    tried = [r["serving.max_batch_size"] for r in rows]
    assert len(rows) < 12 and len(set(tried)) == len(tried), tried  # stopped early, nothing measured twice
    assert len(evaluator.calls) == len(rows) + 2  # the trials, then the input and the winner measured again
    assert int(json.loads((out / "top.json").read_text())[0]["serving.max_batch_size"]) == optimum_batch(slo)
    assert any(line.startswith("stopping early: no untried value lies between trial") for line in lines)
    assert any("beats the input with 95% confidence" in line for line in lines)


class Scripted(EngineModelEvaluator):
    """Goodput by script: the input spec's batch (4) measures `base` every time; any other setting `first` the first
    time it is measured and `later` ever after (a lucky window); per-second bins spread by `spread`."""

    def __init__(self, base: float, first: float, later: float, spread: float = 0.5):
        super().__init__(rounds=1)
        self.base, self.first, self.later, self.spread = base, first, later, spread

    def evaluate(self, spec, values, report, where=None):
        from tritongen.tune.measure import TrialResult, with_interval

        seen = sum(1 for c in self.calls if c == values)
        self.calls.append(dict(values))
        g = self.base if values["serving.max_batch_size"] == 4 else self.first if not seen else self.later
        bins = [g - self.spread, g + self.spread, g - self.spread / 2, g + self.spread / 2, g, g]
        return with_interval(TrialResult(goodput=g, good_bins=bins, completed=int(g * 6), feasible=True, rounds=1,
                                         ttft_p95_ms=100.0, itl_p95_ms=10.0))


def test_a_winner_measured_lucky_once_loses_when_measured_again_and_the_input_stays(tmp_path):
    spec = engine_spec(tmp_path)
    evaluator, lines = Scripted(base=3.0, first=6.0, later=1.5), []
    assert tune(TuneOptions(spec=str(spec), budget=3, out=str(tmp_path / "out"), confirm=2), evaluator=evaluator,
                say=lines.append) == 0
    assert not list(tmp_path.glob("*.tuned*.yaml"))
    verdict = next(line for line in lines if line.startswith("the input stays"))
    assert "does not beat it with 95% confidence" in verdict and "measured again alternately, 2x each" in verdict
    # Alternately: input, best, input, best after the 3 trials.
    assert [c["serving.max_batch_size"] == 4 for c in evaluator.calls[3:]] == [True, False, True, False]
    assert (tmp_path / "out" / "changes.md").read_text().startswith("# `tritongen tune` left engine.yaml as it is")


def test_a_gain_within_the_noise_writes_nothing(tmp_path):
    spec = engine_spec(tmp_path)
    evaluator, lines = Scripted(base=3.0, first=3.3, later=3.3, spread=2.5), []
    assert tune(TuneOptions(spec=str(spec), budget=3, out=str(tmp_path / "out"), confirm=0), evaluator=evaluator,
                say=lines.append) == 0
    assert not list(tmp_path.glob("*.tuned*.yaml"))
    assert any(line.startswith("the input stays") and "difference -" in line for line in lines)


def test_settings_already_measured_are_answered_from_the_store_not_run(tmp_path):
    spec, out = engine_spec(tmp_path, slo={"itl_p95_ms": 29}), tmp_path / "out"
    evaluator, lines = EngineModelEvaluator(rounds=1), []
    # Three batches to try in all: the sampler's later proposals repeat them.
    tune(TuneOptions(spec=str(spec), budget=8, out=str(out), confirm=0, early_stop=False,
                     knobs=["serving.max_batch_size=2:4", "serving.kv_cache.max_tokens=4096",
                            "serving.stream_interval=1"]), evaluator=evaluator, say=lines.append)
    assert sorted(c["serving.max_batch_size"] for c in evaluator.calls) == [2, 3, 4]
    assert any("answered from the store, not run" in line for line in lines)
    assert any(line.startswith("stopping early: the last 10 proposals were all settings already measured")
               for line in lines)


def test_the_tuned_spec_keeps_the_inputs_comments_order_and_flow_style_maps(tmp_path):
    text = engine_spec(tmp_path).read_text().replace("  kv_cache:\n    max_tokens: 4096\n",
                                                     "  kv_cache: {max_tokens: 4096}   # the KV budget\n")
    spec = tmp_path / "flow.yaml"
    spec.write_text("# our team's spec\n" + text)
    assert tune(TuneOptions(spec=str(spec), budget=4, out=str(tmp_path / "out"), confirm=1,
                            knobs=["serving.stream_interval=1"]),
                evaluator=EngineModelEvaluator(rounds=1), say=_quiet) == 0
    tuned = (tmp_path / "flow.tuned.yaml").read_text().splitlines()
    assert tuned[0].startswith("# Written by `tritongen tune` from flow.yaml")
    old = spec.read_text().splitlines()
    assert len(tuned) == len(old) + 1
    changed = [(a, b) for a, b in zip(old, tuned[1:]) if a != b]
    # Only the knobs' lines differ, each in its own style.
    assert {a.split(":")[0] for a, _ in changed} <= {"  max_batch_size", "  kv_cache"}, changed
    assert any(b.startswith("  kv_cache: {max_tokens: ") and b.endswith("# the KV budget") for _, b in changed)
    assert tuned[1] == "# our team's spec"
