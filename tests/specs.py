"""Spec helpers the tests share: dotted-key overrides and rendering a spec into a model repository."""

from __future__ import annotations

from pathlib import Path


def apply_overrides(data: dict, overrides: dict) -> dict:
    """Set each `a.b.c` key of `overrides` in the spec mapping `data` (sections made as needed); returns `data`."""
    for dotted, value in overrides.items():
        node = data
        *parents, leaf = dotted.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return data


def render_spec(spec_path: Path, out: Path):
    """Plan the spec at `spec_path` and write its model repository to `out`; returns the Plan."""
    from tritongen.render import render_for
    from tritongen.plan import plan_from_file
    from tritongen.render import write_repository

    _, plan = plan_from_file(spec_path)
    write_repository(render_for(plan), out)
    return plan
