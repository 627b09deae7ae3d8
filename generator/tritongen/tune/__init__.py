"""`tritongen tune SPEC`: the settings with the most goodput under the spec's SLO, found by measuring.

The knobs are the runtime's (`Runtime.knobs`: serving.max_batch_size, the KV budget, the stream interval,
instances, ... each with the range that runtime accepts); the SLO is `validation.slo`; each trial is a real plan,
render, serve (one embedded tritonserver, models reloaded through explicit model control) and load test
(tritongen.tune.served); the search is an Optuna study kept in OUT/study.db (tritongen.tune.study). Outputs:
tritongen.tune.report. docs/tune.md is the user's guide.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tritongen.errors import CheckFailed, SpecError, problem
from tritongen.spec import Spec, current_names, parse_spec
from tritongen.core.source import read_yaml
from tritongen.tune import report
from tritongen.loadtests.interrupt import EXIT, on_interrupt
from tritongen.tune.confirm import decide
from tritongen.tune.served import ServedEvaluator
from tritongen.tune.space import search_space
from tritongen.tune.study import STORE, Search, knob_values, parse_duration, rows, winner


@dataclass
class TuneOptions:
    spec: str
    inventory: str | None = None
    budget: int | None = None
    time: str | None = None
    resume: str | None = None
    out: str | None = None
    knobs: list[str] = field(default_factory=list)
    rounds: int = 2
    top: int = 5
    seed: int = 0
    confirm: int = 2
    """Times the winner and the input are measured again, alternately, before anything is written (0: none)."""
    early_stop: bool = True


def check_slo(spec: Spec) -> None:
    slo = spec.validation.slo
    if slo.ttft_p95_ms is None and slo.itl_p95_ms is None and slo.e2e_p99_ms is None:
        raise SpecError(problem("validation.slo", "sets no per-request latency objective, so every configuration "
                                "has the same goodput as throughput", "set ttft_p95_ms, itl_p95_ms or e2e_p99_ms"))


def output_dir(opts: TuneOptions, spec_path: Path, spec: Spec) -> Path:
    if opts.resume:
        out = Path(opts.resume)
        if not (out / STORE).is_file():
            raise SpecError(problem("--resume", f"{out} holds no {STORE}", "pass the --out folder of an earlier tune"))
        return out
    out = Path(opts.out) if opts.out else spec_path.parent / f"tune-{spec.name}"
    if (out / STORE).exists():
        raise SpecError(problem("--out", f"{out} already holds a tune ({STORE})",
                                f"continue it with --resume {out}, or choose another folder"))
    return out


def tune(opts: TuneOptions, evaluator: Any = None, say=print) -> int:
    """Run (or resume) a tune; the exit code: 0 with a result (a winner, or the input stays), 1 when no trial met
    the SLO, 130 on Ctrl-C (the table of the finished trials written)."""
    spec_path = Path(opts.spec)
    if not spec_path.is_file():
        raise SpecError(problem(str(spec_path), "spec file not found", "pass the path of a YAML spec"))
    data = current_names(read_yaml(spec_path), str(spec_path))  # trials set knobs by their current path
    spec = parse_spec(data)
    check_slo(spec)
    if spec.validation.load.protocol == "openai":
        raise SpecError(problem("validation.load.protocol", "openai: tune serves trials without the OpenAI frontend",
                                "tune over grpc (or http / http_stream)"))
    if opts.budget is not None and opts.budget < 1:
        raise SpecError(problem("--budget", f"must be >= 1 trial (got {opts.budget})", "pass e.g. --budget 16"))
    if opts.confirm < 0:
        raise SpecError(problem("--confirm", f"must be >= 0 (got {opts.confirm})", "pass e.g. --confirm 2"))
    if opts.rounds < 1:
        raise SpecError(problem("--rounds", f"must be >= 1 (got {opts.rounds})", "pass e.g. --rounds 2"))
    time_s = parse_duration(opts.time) if opts.time else None
    budget = opts.budget if opts.budget is not None or time_s is not None else 16
    knobs = search_space(spec, opts.knobs)
    out = output_dir(opts, spec_path, spec)
    if evaluator is None:
        evaluator = ServedEvaluator(spec_dir=spec_path.resolve().parent, out=out.resolve(), inventory=opts.inventory,
                                    rounds=opts.rounds)
    search = Search(spec=spec, data=data, knobs=knobs, out=out, evaluator=evaluator, budget=budget, time_s=time_s,
                    seed=opts.seed, say=say, early_stop=opts.early_stop)
    try:
        with on_interrupt("stopping the trial in flight; the table holds the trials that finished", say):
            say(f"tune {spec_path} ({spec.name}, runtime {spec.runtime}): knobs "
                + ", ".join(f"{k.path} {k.low:g}..{k.high:g}" for k in knobs)
                + (f"; {budget} trials" if budget else "") + (f"; at most {opts.time}" if time_s else "")
                + f"; store {out / STORE}")
            study = search.run()
            return finish(study, spec_path, data, spec, knobs, out, opts.top, say, stopped=search.stopped,
                          evaluator=evaluator, confirm=opts.confirm)
    except KeyboardInterrupt:
        return interrupted(search, spec, knobs, out, say)
    finally:
        stop = getattr(evaluator, "stop", None)
        if stop is not None:
            stop()


def interrupted(search: Search, spec: Spec, knobs, out: Path, say=print) -> int:
    """Ctrl-C: the table of the trials that finished (or a line saying none did); nothing next to the input."""
    table = rows(search.study(), knobs) if (out / STORE).is_file() else []
    if not table:
        say("interrupted before the first trial finished: no trial to report"
            + (f"; resume with --resume {out}" if (out / STORE).is_file() else ""))
        return EXIT
    say("")
    say(report.console_table(table, knobs, None))
    say(f"trials: {report.write_table(table, knobs, out)}; store: {out / STORE}")
    say(f"interrupted: {len(table)} trial(s) finished (above); nothing was written next to the input; continue "
        f"with --resume {out} (the trial in flight runs again first)")
    return EXIT


def finish(study, spec_path: Path, data: dict, spec: Spec, knobs, out: Path, n_top: int, say=print, *,
           stopped: str = "", evaluator: Any = None, confirm: int = 0) -> int:
    table = rows(study, knobs)
    best = winner(table)
    say("")
    say(report.console_table(table, knobs, None if best is None else best["trial"]))
    csv_path = report.write_table(table, knobs, out)
    plot = report.pareto_plot(table, spec, out) if table else None
    tops = report.top(table, n_top)
    report.write_top(tops, out)
    say(f"trials: {csv_path}; Pareto plot: {plot}; top {len(tops)}: {out / 'top.json'}; store: {out / STORE}")
    if best is None and stopped:
        raise CheckFailed(problem("tune", stopped, "fix what the server's log names, or narrow the knob ranges "
                                  "(--knob) away from the failing trials' values"))
    if best is None:
        slo = spec.validation.slo
        limits = ", ".join(f"{name} {v:g}" for name, v in (("ttft_p95_ms", slo.ttft_p95_ms),
                                                            ("itl_p95_ms", slo.itl_p95_ms),
                                                            ("e2e_p99_ms", slo.e2e_p99_ms)) if v is not None)
        raise CheckFailed(problem("validation.slo", f"no trial met it ({limits}) in {len(table)} trial(s)",
                                  "loosen it, lower the load, or widen the knob ranges (--knob)"))
    for i, r in enumerate(tops, 1):
        sure = "" if r["goodput_low"] is None else f" [{r['goodput_low']:.3g}, {r['goodput_high']:.3g}]"
        say(f"top {i}: trial {r['trial']} goodput {r['goodput']:.4g}{sure} req/s per GPU (n {r['completed']}): "
            + ", ".join(f"{k.path}={r[k.path]}" for k in knobs))
    baseline = next((r for r in table if r["trial"] == 0), None)
    base_values = None if baseline is None else {k.path: baseline.get(k.path) for k in knobs}
    decision = decide(best, baseline, evaluator, data, {k.path: best.get(k.path) for k in knobs}, base_values,
                      confirm if evaluator is not None else 0, out, say)
    say(decision.line)
    if not decision.beats:
        changes = report.write_stays(spec_path, decision.line, out)
        say(f"no tuned spec written: {spec_path} stays (why: {changes})")
        return 0
    spec_file, changes = report.write_winner(spec_path, data, spec, knobs, best, decision.line,
                                             knob_values(best, knobs), out)
    say(f"winner: trial {best['trial']} -> {spec_file} (what changed and why: {changes})")
    return 0
