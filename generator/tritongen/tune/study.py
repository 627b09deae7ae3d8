"""The search: an Optuna study (TPE sampler, a median pruner fed each round's goodput, sqlite storage in the output
folder) over the runtime's knobs, one evaluator call per trial, a progress line per trial.

A trial's objective value is its goodput when it met the SLO, and -1/(1 + goodput) when it did not: every trial
that meets the SLO ranks above every trial that does not, and among those that do not, more goodput still ranks
higher, so the sampler learns which way the SLO lies. A round that already misses the SLO stops its trial (pruned),
as does a round the median pruner finds hopeless.

Informed first trials and the cliff. Trial 0 is the input spec; trial 1 the same with the batch and KV budget at
their highest (everything the load offers admitted at once: the optimum when the SLO does not bind). Goodput's
optimum usually sits on an SLO cliff (one more running request breaks ITL), too narrow for TPE to hit in a few
trials, so before each later trial the search bisects towards it, as Model Analyzer's quick search does: between
the nearest infeasible trial whose throughput beats the best feasible one and the feasible trial nearest to it, the
midpoint in the knobs' (log) coordinates; when that bracket is closed, TPE picks the trial.

A trial its server does not serve (a model that fails to load, a server that dies under the load) is a failed
trial, not the end of the tune: its reason goes in the table, its server's log in its folder, and the next trial
starts a fresh server; three such trials in a row stop the tune (something no knob fixes).

Sure before deciding. Every trial's goodput carries its n (requests completed in its windows) and a 95% interval
(tritongen.loadtests.confidence); trials rank by the interval's lower end, what the tune can be sure of, not by a
lucky point estimate. A trial whose knobs equal a measured trial's is answered from the store (its result copied,
marked `same_as`) and not run again; it does not count against the budget. With one free knob, once the bisection
has closed the cliff (no untried value between the best trial that met the SLO and the nearest that missed it
with more throughput) no untried value can win under the usual shape (more admitted work: more throughput and
later tokens), so the search stops (`early_stop`); with several free knobs it says so and goes on.

Resuming: finished trials (complete or pruned) stay in the store and are never run again; a trial that was running
when the tune was killed is marked failed and its values are queued to run first.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tritongen.errors import CheckFailed, SpecError, problem
from tritongen.runtimes.base import Knob
from tritongen.spec import Spec
from tritongen.tune.measure import TrialResult
from tritongen.tune.space import cast, current, in_range, suggest, trial_spec

# optuna is imported where a study runs: `tritongen tune` needs it, the rest of tritongen (and an environment
# without it) imports this module's types only.

STORE = "study.db"
BASELINE = "input_spec"  # the user attribute of trial 0 (the input spec): the knob paths the spec sets
FAILED = "failed"  # the user attribute of a trial its server did not serve: the reason
FAILURES_IN_A_ROW = 3
"""Trials in a row not served (the server would not load or stay up) after which the tune stops."""
SAME_AS = "same_as"  # the user attribute of a trial answered from the store: the trial whose result it copies
DUPLICATES_IN_A_ROW = 10
"""Proposals in a row that were all measured already, after which the search stops (nothing new to try)."""


def objective_value(r: TrialResult) -> float:
    return r.goodput if r.feasible else -1.0 / (1.0 + r.goodput)


def parse_duration(text: str) -> float:
    """`--time`: 90, 90s, 15m, 2h -> seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text or "")
    if not m or float(m.group(1)) <= 0:
        raise SpecError(problem("--time", f"{text!r} is not a duration", "pass e.g. 600, 600s, 15m or 2h"))
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[m.group(2)]


@dataclass
class Search:
    spec: Spec
    data: dict
    """The input spec's YAML mapping (trials replace knob fields in a copy)."""
    knobs: list[Knob]
    out: Path
    evaluator: Any
    budget: int | None = 16
    time_s: float | None = None
    seed: int = 0
    say: Any = print
    log: list = field(default_factory=list)
    failures: int = 0
    """Trials in a row that were not served (see _failed)."""
    stopped: str = ""
    """Why the search stopped before its budget, when it did (FAILURES_IN_A_ROW trials not served)."""
    early_stop: bool = True
    """Stop once no untried value can win (one free knob, its cliff closed); else only say it could."""
    finished: str = ""
    """Why the search ended before its budget with nothing wrong (the cliff closed, nothing new to try)."""
    duplicates: int = 0
    said_closed: bool = False

    def study(self):
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.out.mkdir(parents=True, exist_ok=True)
        startup = 2  # the two informed first trials
        study = optuna.create_study(
            study_name="tune", storage=f"sqlite:///{self.out / STORE}", load_if_exists=True, direction="maximize",
            sampler=optuna.samplers.TPESampler(seed=self.seed, n_startup_trials=startup, multivariate=True),
            pruner=optuna.pruners.MedianPruner(n_startup_trials=startup, n_warmup_steps=0))
        space = {k.path: [k.low, k.high, k.kind] for k in self.knobs}
        stored = study.user_attrs.get("knobs")
        if stored is not None and stored != space:
            raise SpecError(problem("--resume", "the stored tune searched other knobs or ranges "
                                    f"({', '.join(stored)})", "resume with the same spec and --knob flags, or start "
                                    "a new tune with another --out"))
        study.set_user_attr("knobs", space)
        study.set_user_attr("spec_name", self.spec.name)
        return study

    def run(self):
        from optuna.trial import TrialState

        study = self.study()
        for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING, TrialState.WAITING)):
            if t.state == TrialState.RUNNING:  # killed mid-trial: run those values again, first
                study._storage.set_trial_state_values(t._trial_id, TrialState.FAIL)
                study.enqueue_trial(t.params, user_attrs={k: v for k, v in t.user_attrs.items() if k == BASELINE},
                                    skip_if_exists=False)
        finished = [t for t in study.get_trials(deepcopy=False) if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
        if not study.get_trials(deepcopy=False):
            # The input spec is trial 0: the baseline the winner's gain is measured against. A knob the spec leaves
            # to the runtime stays unset there (not sampled), so trial 0 plans exactly as the input spec does.
            base = {k: v for k, v in current(self.spec, self.knobs).items()
                    if in_range(next(x for x in self.knobs if x.path == k), v)}
            study.enqueue_trial(base, user_attrs={BASELINE: sorted(base)})
            admitted = {**base, **{k.path: cast(k, k.high) for k in self.knobs if k.admits}}
            if admitted != base:
                study.enqueue_trial(admitted)
        elif finished:
            self.say(f"resuming {self.out / STORE}: {len(finished)} finished trial(s) kept")
        start = time.monotonic()
        while True:
            done = len([t for t in study.get_trials(deepcopy=False)
                        if t.state in (TrialState.COMPLETE, TrialState.PRUNED) and SAME_AS not in t.user_attrs])
            if self.budget is not None and done >= self.budget:
                break
            if self.time_s is not None and time.monotonic() - start >= self.time_s:
                self.say(f"--time: {self.time_s:g} s spent; stopping after {done} trial(s)")
                break
            if not study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
                point = bracket(study, self.knobs)
                if point is not None:
                    study.enqueue_trial(point)
            trial = study.ask()
            self._one(study, trial, done)
            if self.stopped:
                self.say(f"stopping: {self.stopped}")
                break
            if self.duplicates >= DUPLICATES_IN_A_ROW:
                self.finished = (f"the last {self.duplicates} proposals were all settings already measured: "
                                 "nothing new is left near the best")
                self.say(f"stopping early: {self.finished}")
                break
            if self._cliff_closed(study):
                break
        return study

    def _cliff_closed(self, study) -> bool:
        """Say (once) when the bisection's cliff is closed; True (stop) when that leaves nothing that can win."""
        closed = closed_cliff(study, self.knobs)
        if closed is None or self.said_closed:
            return False
        self.said_closed = True
        met, missed = closed
        free = [k for k in self.knobs if k.low < k.high]
        head = (f"no untried value lies between trial {met} (met the SLO, the best) and trial {missed} (missed it "
                "with more throughput)")
        if len(free) == 1 and self.early_stop:
            self.finished = (f"{head}: with {free[0].path} the only free knob, less admits less work and more "
                             "misses the SLO, so no untried value can win")
            self.say(f"stopping early: {self.finished} (--no-early-stop spends the whole budget)")
            return True
        self.say(f"note: {head}; " + ("no untried value can win (the search could stop; --no-early-stop keeps "
                                      "it going)" if len(free) == 1 else
                                      "the remaining trials search the other knobs"))
        return False

    def _one(self, study, trial, done: int) -> None:
        from optuna.trial import TrialState

        if BASELINE in trial.user_attrs:  # the input spec: only the knobs it sets (the rest stay the runtime's)
            values = {k.path: None for k in self.knobs}
            values.update(suggest(trial, [k for k in self.knobs if k.path in trial.user_attrs[BASELINE]]))
        else:
            values = suggest(trial, self.knobs)
        trial.set_user_attr("knobs", values)  # every knob's value, fixed ones too (the table shows them)
        began = time.monotonic()
        shown = " ".join(f"{k.path.rsplit('.', 1)[-1]}={'default' if values[k.path] is None else f'{values[k.path]:g}'}"
                         for k in self.knobs)
        same = measured(study, values)
        if same is not None:  # never run twice: the store answers
            self.duplicates += 1
            result = TrialResult(**same.user_attrs["result"])
            trial.set_user_attr(SAME_AS, same.number)
            self._record(trial, result)
            if same.state == TrialState.PRUNED:
                study.tell(trial, state=TrialState.PRUNED)
            else:
                study.tell(trial, objective_value(result))
            self.say(f"(trial {trial.number} not run) {shown}: the same settings as trial {same.number}: answered "
                     "from the store, not run")
            return
        self.duplicates = 0
        spec = trial_spec(self.data, values)
        if isinstance(spec, str):
            result = TrialResult(note=f"invalid: {spec}")
            self._record(trial, result)
            study.tell(trial, objective_value(result))
            self._progress(trial.number, done, shown, result, began, "invalid")
            return

        def report(step: int, partial: TrialResult) -> bool:
            trial.report(objective_value(partial), step)
            return not partial.feasible or trial.should_prune()

        where = self.out / "trials" / f"{trial.number:03d}"
        try:
            result = self.evaluator.evaluate(spec, values, report, where)
        except CheckFailed as err:
            self._failed(study, trial, done, shown, began, str(err), where)
            return
        self.failures = 0
        pruned = result.rounds < getattr(self.evaluator, "rounds", 1)
        if pruned:
            why = "missed the SLO" if not result.feasible else "below the median of earlier trials"
            result.note = "; ".join(x for x in (result.note, f"stopped after round {result.rounds}: {why}") if x)
        self._record(trial, result)
        if pruned:
            study.tell(trial, state=TrialState.PRUNED)
        else:
            study.tell(trial, objective_value(result))
        self._progress(trial.number, done, shown, result, began, "pruned" if pruned else "done")

    def _failed(self, study, trial, done: int, shown: str, began: float, why: str, where: Path) -> None:
        """A trial its server did not serve (a model that failed to load, a server that died under the load): a
        result of its own (nothing met the SLO, so it ranks with the trials that served nothing), its reason in the
        table, the server's log in its folder; after FAILURES_IN_A_ROW such trials the tune stops."""
        reason = next((line.strip() for line in why.splitlines() if line.strip()), "failed")
        log = where / "tritonserver.log"
        result = TrialResult(note=f"failed: {reason}" + (f" (log: {log})" if log.is_file() else ""))
        trial.set_user_attr(FAILED, reason)
        self._record(trial, result)
        study.tell(trial, objective_value(result))
        self._progress(trial.number, done, shown, result, began, "failed")
        self.failures += 1
        if self.failures >= FAILURES_IN_A_ROW:
            self.stopped = (f"{self.failures} trials in a row were not served; the last: {reason}"
                            + (f" (its server's log: {log})" if log.is_file() else ""))

    @staticmethod
    def _record(trial, result: TrialResult) -> None:
        trial.set_user_attr("result", result.to_attrs())  # one attribute: one commit to the store

    def _progress(self, number: int, done: int, shown: str, r: TrialResult, began: float, state: str) -> None:
        total = f"/{self.budget}" if self.budget is not None else ""
        lat = lambda v: "-" if v is None else f"{v:.0f}"  # noqa: E731
        verdict = "SLO met" if r.feasible else "SLO missed"
        sure = "" if r.goodput_low is None else f" [{r.goodput_low:.3g}, {r.goodput_high:.3g}]"
        self.say(f"[trial {number} {done + 1}{total}] {shown}: goodput {r.goodput:.3g}{sure} req/s (n {r.completed}) "
                 f"({r.good_tokens_per_s:.4g} tok/s), p95 TTFT {lat(r.ttft_p95_ms)} ms, ITL {lat(r.itl_p95_ms)} ms, "
                 f"errors {r.errors}, refused {r.refused}, {verdict}, {state} in {time.monotonic() - began:.0f} s"
                 + (f" ({r.note})" if r.note else ""))


def measured(study, values: dict[str, Any]):
    """A finished trial (served, not itself a copy) that measured exactly these knob values, or None."""
    from optuna.trial import TrialState

    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)):
        if t.user_attrs.get("knobs") == values and FAILED not in t.user_attrs and SAME_AS not in t.user_attrs \
                and t.user_attrs.get("result"):
            return t
    return None


def _coord(k: Knob, v: float) -> float:
    if k.log and k.low > 0:
        return (math.log(v) - math.log(k.low)) / (math.log(k.high) - math.log(k.low))
    return (v - k.low) / (k.high - k.low)


def _value(k: Knob, c: float) -> int | float:
    v = math.exp(math.log(k.low) + c * (math.log(k.high) - math.log(k.low))) if k.log and k.low > 0 \
        else k.low + c * (k.high - k.low)
    return cast(k, v) if k.kind == "int" else round(v, 3)


def _pair(study, knobs: list[Knob]):
    """(the best trial that met the SLO, the nearest that missed it with more throughput, the feasible trial nearest
    to that one, the measured points, the position function), or None when there is no such bracket."""
    from optuna.trial import TrialState

    free = [k for k in knobs if k.low < k.high]
    done = [t for t in study.get_trials(deepcopy=False) if t.state in (TrialState.COMPLETE, TrialState.PRUNED)
            and all(k.path in t.params for k in free) and t.user_attrs.get("result") and SAME_AS not in t.user_attrs]
    res = lambda t: t.user_attrs["result"]  # noqa: E731
    ok = [t for t in done if res(t)["feasible"]]
    best = [t for t in ok if t.state == TrialState.COMPLETE]
    if not best:
        return None
    w = max(best, key=lambda t: res(t)["goodput"])
    bad = [t for t in done if not res(t)["feasible"]
           and res(t)["output_tokens_per_s"] > res(w)["output_tokens_per_s"]]
    if not bad:
        return None
    pos = lambda t: [_coord(k, t.params[k.path]) for k in free]  # noqa: E731
    dist = lambda a, b: math.dist(pos(a), pos(b))  # noqa: E731
    u = min(bad, key=lambda t: dist(t, w))
    f = min(ok, key=lambda t: dist(t, u))
    return w, u, f, free, pos, dist


def _midpoint(free: list[Knob], pos, f, u) -> dict[str, Any]:
    return {k.path: _value(k, (a + b) / 2) for k, a, b in zip(free, pos(f), pos(u))}


def bracket(study, knobs: list[Knob], closed: float = 0.01) -> dict[str, Any] | None:
    """The next trial of the bisection towards the SLO cliff, or None (no bracket, or it is closed)."""
    pair = _pair(study, knobs)
    if pair is None:
        return None
    _, u, f, free, pos, dist = pair
    if dist(f, u) <= closed:
        return None
    point = _midpoint(free, pos, f, u)
    if measured_point(study, free, point):
        return None
    return point


def measured_point(study, free: list[Knob], point: dict[str, Any]) -> bool:
    from optuna.trial import TrialState

    key = tuple(point[k.path] for k in free)
    return any(all(k.path in t.params for k in free) and tuple(t.params[k.path] for k in free) == key
               for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)))


def closed_cliff(study, knobs: list[Knob], closed: float = 0.01) -> tuple[int, int] | None:
    """(best trial that met the SLO, nearest that missed it with more throughput) when nothing untried lies between
    them (their midpoint is one of them, or they are within `closed` in the knobs' coordinates); else None."""
    pair = _pair(study, knobs)
    if pair is None:
        return None
    w, u, f, free, pos, dist = pair
    if f.number != w.number:
        return None  # the nearest feasible trial is not the best: the bracket still has room
    mid = _midpoint(free, pos, f, u)
    ends = ({k.path: f.params[k.path] for k in free}, {k.path: u.params[k.path] for k in free})
    if dist(f, u) <= closed or mid in ends:
        return w.number, u.number
    return None


def rows(study, knobs: list[Knob]) -> list[dict[str, Any]]:
    """One row per finished trial: its knobs and what it measured (the trials table)."""
    from optuna.trial import TrialState

    out = []
    for t in study.get_trials(deepcopy=False):
        if t.state not in (TrialState.COMPLETE, TrialState.PRUNED) or SAME_AS in t.user_attrs:
            continue
        values, result = t.user_attrs.get("knobs", {}), t.user_attrs.get("result", {})
        state = "failed" if FAILED in t.user_attrs else "pruned" if t.state == TrialState.PRUNED else "complete"
        row = {"trial": t.number, "state": state}
        row.update({k.path: values.get(k.path, t.params.get(k.path)) for k in knobs})
        row.update({key: result.get(key, default) for key, default in TrialResult().to_attrs().items()})
        out.append(row)
    return out


def sure(row: dict[str, Any]) -> tuple[float, float, int]:
    """A trial's rank: the goodput it is sure of (its interval's lower end; its point value without one), then its
    point value, then the earlier trial."""
    low = row.get("goodput_low")
    return (row["goodput"] if low is None else low, row["goodput"], -row["trial"])


def winner(table: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The trial with the most goodput it is sure of among those that met the SLO in every round they ran."""
    ok = [r for r in table if r["feasible"] and r["state"] == "complete"]
    return max(ok, key=sure) if ok else None


def knob_values(row: dict[str, Any], knobs: list[Knob]) -> dict[str, Any]:
    return {k.path: cast(k, row[k.path]) for k in knobs if row.get(k.path) is not None}
