"""The load profile has one shape after planning: `Plan.load` (tritongen.plan.load.LoadProfile), made once from the
spec's `validation.load` with its files absolute; no other class in the package restates its fields."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tritongen.plan.load import LoadProfile, TokenDistribution, load_profile
from tritongen.spec import LoadSection
from tritongen.spec import TokenDistribution as SpecTokenDistribution

PACKAGE = Path(__file__).resolve().parents[2] / "generator" / "tritongen"
# The spec's input section and the Plan's profile; every other class may share only a few names with them.
THE_TWO = {("spec/load.py", "LoadSection"), ("plan/load.py", "LoadProfile")}
MOST_SHARED = 3  # e.g. samples.Sample: protocol, input_tokens, output_tokens


def _annotated_fields(cls: ast.ClassDef) -> set[str]:
    return {s.target.id for s in cls.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}


def test_no_class_restates_the_load_profile():
    profile = set(LoadProfile.model_fields)
    restating = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = str(path.relative_to(PACKAGE))
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and (where, node.name) not in THE_TWO:
                shared = _annotated_fields(node) & profile
                if len(shared) > MOST_SHARED:
                    restating.append(f"{where}:{node.name} {sorted(shared)}")
    assert not restating, "hold a LoadProfile (Plan.load) instead of copying its fields: " + "; ".join(restating)


def test_the_profile_has_the_spec_sections_fields_and_takes_its_defaults():
    assert list(LoadProfile.model_fields) == list(LoadSection.model_fields)
    assert list(TokenDistribution.model_fields) == list(SpecTokenDistribution.model_fields)
    # No defaults of its own: the spec's are the only ones, and a profile is only ever planned.
    assert all(f.is_required() for f in LoadProfile.model_fields.values())
    planned = load_profile(LoadSection(), lambda p: Path(p))
    assert planned.model_dump(mode="json") == LoadSection().model_dump(mode="json")


def test_the_planner_makes_the_profiles_files_absolute(tmp_path, monkeypatch):
    from tritongen.plan.make import resolve_path

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    section = LoadSection(prompts_file="prompts/p.jsonl", trace_file="~/t.jsonl")
    profile = load_profile(section, lambda value: resolve_path(tmp_path / "specs", value))
    assert profile.prompts_file == str(tmp_path / "specs" / "prompts" / "p.jsonl")
    assert profile.trace_file == str(tmp_path / "home" / "t.jsonl")
    assert load_profile(LoadSection(), lambda value: pytest.fail(f"resolved {value}")).prompts_file is None


def test_the_profile_is_frozen_and_checks_its_limits():
    profile = load_profile(LoadSection(), Path)
    with pytest.raises(ValueError):
        profile.users = 8  # type: ignore[misc]
    with pytest.raises(ValueError, match="users"):
        LoadProfile.model_validate({**profile.model_dump(), "users": 0})


@pytest.mark.parametrize(("load", "mode", "unit", "levels"), [
    ({}, "closed", "users", (4,)),
    ({"sweep": [1, 2, 4]}, "closed", "users", (1.0, 2.0, 4.0)),
    ({"request_rate": 2.5}, "open", "requests/s", (2.5,)),
    ({"request_rate": 1, "sweep": [0.5, 1]}, "open", "requests/s", (0.5, 1.0)),
    ({"trace_file": "/t.jsonl"}, "trace", "requests/s", (0.0,)),
])
def test_mode_and_levels(load, mode, unit, levels):
    profile = load_profile(LoadSection(**load), Path)
    assert (profile.mode, profile.level_unit, profile.levels()) == (mode, unit, levels)
