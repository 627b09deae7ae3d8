"""A trial for real: plan, then render, serve and load test (token check included) once per round, through
tritongen.orchestrate, which `tritongen up` runs too.

One server serves every trial (`RunOptions.keep_server`): a trial whose repository has the same models as the last
one is applied by reloading the models it changed; a different set of models restarts the server (the rules:
tritongen.orchestrate).

A trial whose server does not serve it (a model that fails to load or reload, or stays unavailable; a server that
exits during the load test, e.g. an LLM model that stops it when its generation loop dies) raises CheckFailed after
keeping the server's log in the trial's folder and stopping what is left of the server: the search records the
trial as failed and the next trial starts a fresh server.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tritongen.errors import CheckFailed
from tritongen.loadtests.runner import INTERRUPTED_EXIT, LoadTest
from tritongen.orchestrate import LocalRun, RunOptions
from tritongen.plan import Plan
from tritongen.plan.make import make_plan
from tritongen.spec import Spec
from tritongen.tune.measure import Report, TrialResult, from_report, merge

NOT_EMBEDDED = "tune serves every trial on the embedded tritonserver; pick a runtime it serves"


def devices(plan: Plan) -> int:
    """What goodput is divided by: the GPUs (or MIG slices) the plan places on; 1 for a CPU host."""
    if plan.placement is not None and plan.server_groups:
        return sum(len([d for d in g.gpu_device_ids.split(",") if d.strip()]) or 1 for g in plan.server_groups)
    return 1 if plan.llm_instance_group.kind == "KIND_CPU" else max(1, len(plan.llm_instance_group.gpus or (0,)))


def one_level(plan: Plan) -> LoadTest:
    """The spec's load at one level: its own, or the highest of its sweep (where the goodput is decided)."""
    p = plan.load
    update: dict[str, Any] = {"sweep": ()}
    if p.sweep:
        update["users" if p.mode == "closed" else "request_rate"] = int(max(p.sweep)) if p.mode == "closed" \
            else max(p.sweep)
    return LoadTest(p.model_copy(update=update))


@dataclass
class ServedEvaluator:
    spec_dir: Path
    out: Path
    inventory: str | None = None
    rounds: int = 2
    server_timeout: float = 300.0
    calls: list = field(default_factory=list)
    run: LocalRun = field(init=False)
    """The trials' one server, kept between them."""

    def __post_init__(self) -> None:
        self.run = LocalRun(RunOptions(out=self.out, server_timeout=self.server_timeout, keep_server=True,
                                       verify=False, instead=NOT_EMBEDDED))

    def evaluate(self, spec: Spec, values: dict[str, Any], report: Report, where: Path) -> TrialResult:
        self.calls.append(dict(values))
        plan = make_plan(spec, self.spec_dir, self.inventory)
        load, n = one_level(plan), devices(plan)
        try:
            how = self.run.serve(plan)
            done = self._rounds(plan, load, n, report, where)
        except CheckFailed:
            self.run.keep_log(where)
            self.stop()
            raise
        result = merge(done)
        result.note = "; ".join(x for x in (how, result.note) if x)
        return result

    def _rounds(self, plan: Plan, load: LoadTest, n: int, report: Report, where: Path) -> list[TrialResult]:
        done: list[TrialResult] = []
        for i in range(self.rounds):
            run_dir = where / f"round-{i + 1}"
            if self.run.loadtest(plan, load, run_dir) == INTERRUPTED_EXIT:  # Ctrl-C: the tune stops too
                raise KeyboardInterrupt
            done.append(from_report(json.loads((run_dir / "loadtest.json").read_text()), n))
            if i < self.rounds - 1 and report(i, merge(done)):
                break
        return done

    def stop(self) -> None:
        self.run.stop()
