"""Before anything is written: the best trial and the input spec measured again, alternately (input, best, input,
best, ...: drift on a shared host then falls on both alike), and the best written as the winner only when its
goodput beats the input's with 95% confidence (the interval of the difference of their per-second goodputs, by the
bootstrap, lies above zero). Otherwise the input stays, and the figures say why."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tritongen.errors import CheckFailed
from tritongen.loadtests.confidence import difference
from tritongen.tune.measure import TrialResult, merge
from tritongen.tune.space import trial_spec


@dataclass
class Decision:
    beats: bool
    """The best trial beats the input with confidence: its settings are written."""
    line: str
    """The verdict with its figures (printed, and the head of changes.md)."""


def _figure(r: TrialResult | dict) -> str:
    get = (lambda k: r[k]) if isinstance(r, dict) else (lambda k: getattr(r, k))  # noqa: E731
    sure = "" if get("goodput_low") is None else f" [{get('goodput_low'):.3g}, {get('goodput_high'):.3g}]"
    return (f"goodput {get('goodput'):.3g}{sure} req/s per GPU (n {get('completed')}, "
            f"{'met' if get('feasible') else 'missed'} the SLO)")


def _never(_i: int, _r: TrialResult) -> bool:
    return False


def remeasure(evaluator: Any, data: dict, sides: dict[str, dict[str, Any]], times: int, out: Path,
              say=print) -> dict[str, TrialResult]:
    """Each side's settings measured `times` times, the sides alternating; {side: merged result}."""
    runs: dict[str, list[TrialResult]] = {side: [] for side in sides}
    for i in range(times):
        for side, values in sides.items():
            spec = trial_spec(data, values)
            where = out / "confirm" / f"{i + 1}-{side}"
            try:
                r = evaluator.evaluate(spec, values, _never, where)
            except CheckFailed as err:
                r = TrialResult(note=f"failed: {str(err).splitlines()[0]}")
            runs[side].append(r)
            say(f"[confirm {i + 1}/{times} {side}] {_figure(r)}" + (f" ({r.note})" if r.note else ""))
    return {side: merge(rs) for side, rs in runs.items()}


def decide(best: dict, base: dict | None, evaluator: Any, data: dict, values: dict, base_values: dict | None,
           times: int, out: Path, say=print) -> Decision:
    """Whether trial `best` (a row of the trials table) beats the input spec's trial `base` with confidence."""
    name = f"trial {best['trial']}"
    if base is None or base["state"] == "failed" or base_values is None:
        why = "was not among the trials" if base is None else "was not served (its trial failed)"
        return Decision(True, f"{name} met the SLO with {_figure(best)}; the input spec's own settings {why}")
    if best["trial"] == base["trial"]:
        return Decision(False, f"the input stays: its own settings (trial {base['trial']}) had the most goodput the "
                        f"tune can be sure of: {_figure(best)}")
    if times > 0:
        say(f"measuring {name} and the input spec (trial {base['trial']}) again, alternately, {times}x each")
        again = remeasure(evaluator, data, {"input": base_values, "best": values}, times, out, say)
        b, a, how = again["best"], again["input"], f"measured again alternately, {times}x each"
        if not b.feasible:
            return Decision(False, f"the input stays: {name} missed the SLO when {how} ({_figure(b)}; the input: "
                            f"{_figure(a)})")
        best_bins, base_bins, shown_b, shown_a = b.good_bins, a.good_bins, _figure(b), _figure(a)
    else:
        best_bins, base_bins, shown_b, shown_a = best["good_bins"], base["good_bins"], _figure(best), _figure(base)
        how = "as measured in the trials"
    diff = difference(best_bins, base_bins)
    figures = f"{name}: {shown_b}; the input (trial {base['trial']}): {shown_a}, {how}"
    if diff is None:
        return Decision(False, f"the input stays: too few 1 s bins to compare ({figures})")
    low, high = diff
    delta = f"difference {low:+.3g}..{high:+.3g} req/s per GPU (95% interval)"
    if low > 0:
        return Decision(True, f"{figures}; {delta}: {name} beats the input with 95% confidence")
    return Decision(False, f"the input stays: {name} does not beat it with 95% confidence ({figures}; {delta})")
