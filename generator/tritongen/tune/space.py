"""The search space of a tune: the runtime's knobs (`Runtime.knobs`), narrowed by `--knob PATH=LOW:HIGH`, and how a
trial's values become a spec (the input YAML with those fields replaced, validated like any spec)."""

from __future__ import annotations

import copy
import dataclasses
import math
from typing import Any

from tritongen.errors import SpecError, problem
from tritongen.runtimes import planning
from tritongen.runtimes.base import Knob
from tritongen.spec import Spec, parse_spec


def _number(text: str, knob: Knob, flag: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise SpecError(problem(flag, f"{text!r} is not a number", "pass LOW:HIGH, e.g. 1:64")) from None
    if knob.kind == "int" and value != int(value):
        raise SpecError(problem(flag, f"{text} is not a whole number", "pass whole numbers"))
    return value


def search_space(spec: Spec, overrides: list[str] | tuple[str, ...] = ()) -> list[Knob]:
    """The knobs a tune searches: the runtime's, with each `PATH=LOW:HIGH` (or `PATH=VALUE`, fixed) override
    applied. A path the runtime has no knob for, or a range beyond the runtime's, is bad input."""
    rt = planning(spec.runtime)
    knobs = {k.path: k for k in rt.knobs(spec)}
    for text in overrides:
        path, sep, bounds = text.partition("=")
        flag = f"--knob {path}"
        if path not in knobs:
            have = ", ".join(knobs) or "none"
            raise SpecError(problem(flag, f"the {spec.runtime} runtime has no such knob (its knobs: {have})",
                                    "pick one of those"))
        if not sep or not bounds:
            raise SpecError(problem(flag, "no range given", f"pass {path}=LOW:HIGH or {path}=VALUE"))
        knob = knobs[path]
        low_text, _, high_text = bounds.partition(":")
        low = _number(low_text, knob, flag)
        high = _number(high_text, knob, flag) if high_text else low
        if low > high:
            raise SpecError(problem(flag, f"low {low:g} is above high {high:g}", "pass LOW:HIGH"))
        if low < knob.low or high > knob.high:
            raise SpecError(problem(flag, f"{low:g}:{high:g} is outside the {spec.runtime} runtime's range "
                                    f"{knob.low:g}:{knob.high:g}", "narrow it to that range"))
        knobs[path] = dataclasses.replace(knob, low=low, high=high)
    if not any(k.low < k.high for k in knobs.values()):
        raise SpecError(problem("--knob", f"nothing to search: the {spec.runtime} runtime's knobs are all fixed",
                                "give at least one knob a range (LOW:HIGH)"))
    return list(knobs.values())


def cast(knob: Knob, value: float) -> int | float:
    return int(round(value)) if knob.kind == "int" else float(value)


def suggest(trial, knobs: list[Knob]) -> dict[str, int | float]:
    """One trial's values (an optuna Trial); fixed knobs keep their value."""
    values: dict[str, int | float] = {}
    for k in knobs:
        if k.low == k.high:
            values[k.path] = cast(k, k.low)
        elif k.kind == "int":
            values[k.path] = trial.suggest_int(k.path, int(k.low), int(k.high), log=k.log and k.low > 0)
        else:
            values[k.path] = trial.suggest_float(k.path, k.low, k.high, log=k.log and k.low > 0)
    return values


def get_path(data: dict, path: str) -> Any:
    node: Any = data
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def current(spec: Spec, knobs: list[Knob]) -> dict[str, Any]:
    """The input spec's value of each knob (None where the spec leaves it to the runtime)."""
    data = spec.model_dump()
    return {k.path: get_path(data, k.path) for k in knobs}


def in_range(knob: Knob, value: Any) -> bool:
    return value is not None and knob.low <= value <= knob.high and not (knob.kind == "int" and value != int(value))


def apply(data: dict, values: dict[str, Any]) -> dict:
    """A copy of the spec's YAML mapping with each dotted path set (None: left as the spec has it)."""
    out = copy.deepcopy(data)
    for path, value in values.items():
        if value is None:
            continue
        node = out
        *parents, leaf = path.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out


def trial_spec(data: dict, values: dict[str, Any]) -> Spec | str:
    """The spec of one trial, or the first line of why that combination is not a valid spec."""
    try:
        return parse_spec(apply(data, values))
    except SpecError as err:
        return str(err).splitlines()[0]


def grid_size(knobs: list[Knob]) -> float:
    """How many distinct configurations the space holds (inf for a float range)."""
    return math.prod((k.high - k.low + 1) if k.kind == "int" else math.inf for k in knobs)
