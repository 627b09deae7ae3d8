"""Spec -> frozen Plan: every default, path and derived value resolved once; the Plan as a lock file.

Later stages (build, render, deploy, load test) read only the Plan, never the raw YAML or the Spec, so
`tritongen plan` shows exactly what will be rendered and served, and `tritongen plan --json > plan.json` is a lock
file those commands accept in place of the spec (`load_plan`).
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError

from tritongen.errors import SpecError, problem
from tritongen.plan.deploy import DeployPlan
from tritongen.plan.load import LoadProfile, TokenDistribution
from tritongen.plan.make import DEFAULT_GPU_ARCH, make_plan, max_sequence_length, resolve_path
from tritongen.plan.model import (
    PLAN_FORMAT, InstanceGroup, PathsPlan, PlacementPlan, Plan, ServerGroupPlan, TokenizerPlan,
)
from tritongen.spec import Spec, load_spec

__all__ = [
    "DEFAULT_GPU_ARCH", "DeployPlan", "InstanceGroup", "LoadProfile", "PLAN_FORMAT", "PathsPlan", "PlacementPlan",
    "Plan", "ServerGroupPlan", "TokenDistribution", "TokenizerPlan",
    "is_plan_file", "load_plan", "make_plan", "max_sequence_length", "plan_for_deployment", "plan_from_file",
    "plan_from_json",
    "resolve_path",
]


def plan_from_file(path: str | Path, inventory: str | None = None, **planning) -> tuple[Spec, Plan]:
    """Load a spec file and plan it (the only stage that reads the spec)."""
    spec = load_spec(path)
    return spec, make_plan(spec, Path(path).resolve().parent, inventory, **planning)


def plan_for_deployment(path: str | Path, inventory: str | None, engine_dir: str | None) -> Plan:
    """Plan a spec for `deploy`: placed on `inventory` (default 'nvml'), or for the CPU profile
    (placement.device cpu: one tritonserver on a CPU node) without one."""
    spec = load_spec(path)
    if spec.placement.device == "cpu":
        if inventory is not None:
            raise SpecError(problem("--inventory", "places servers on GPUs, but placement.device is cpu",
                                    "drop --inventory (the CPU profile runs one tritonserver on a CPU node), or set "
                                    "placement.device: gpu"))
        return make_plan(spec, Path(path).resolve().parent, None, engine_dir=engine_dir)
    return make_plan(spec, Path(path).resolve().parent, inventory or "nvml", engine_dir=engine_dir)


def is_plan_file(path: str | Path) -> bool:
    """Whether `path` holds a Plan written by `tritongen plan --json` (rather than a YAML spec)."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    # A plan is a JSON object with a "format" key; a spec is YAML (flow-style specs have no "format" field).
    return head.lstrip().startswith(b"{") and b'"format"' in head


def plan_from_json(path: str | Path) -> Plan:
    """Read a lock file. Nothing is re-derived: the Plan is used exactly as written."""
    p = Path(path)
    try:
        data = json.loads(p.read_bytes())
    except (OSError, ValueError) as err:
        raise SpecError(problem(str(p), f"is not a readable plan JSON ({err})",
                                "write it with `tritongen plan SPEC --json > plan.json`")) from None
    if not isinstance(data, dict) or data.get("format") != PLAN_FORMAT:
        raise SpecError(problem(f"{p}: format", f"must be {PLAN_FORMAT!r} (got {data.get('format')!r})"
                                if isinstance(data, dict) else "a plan is a JSON object",
                                "re-plan with this tritongen: `tritongen plan SPEC --json > plan.json`"))
    try:
        return Plan.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        raise SpecError(problem(f"{p}: {where}", first["msg"].lower(),
                                "re-plan with this tritongen: `tritongen plan SPEC --json > plan.json`")) from None


def load_plan(path: str | Path, inventory: str | None = None, **planning) -> Plan:
    """A Plan from a spec (planned now) or from a lock file (as written; planning arguments are refused)."""
    if not is_plan_file(path):
        return plan_from_file(path, inventory, **planning)[1]
    given = {"--inventory": inventory, **{f"--{k.replace('_', '-')}": v for k, v in planning.items()}}
    for flag, value in given.items():
        if value is not None:
            raise SpecError(problem(flag, f"cannot change a finished plan ({path})",
                                    "pass it to `tritongen plan` when making the plan, or pass the spec here"))
    return plan_from_json(path)
