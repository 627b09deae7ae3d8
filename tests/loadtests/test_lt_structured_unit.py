"""A structured share without a server: which requests carry a schema, how an output is judged, and a level with an
invalid output failing its verdict with its line (console and HTML say it too)."""

from __future__ import annotations

import json
import random

import pytest
from test_lt_metrics import make, set_a
from test_lt_report import SLO

from tritongen.loadtests.console import structured_line
from tritongen.loadtests.html_report import render_html
from tritongen.loadtests.report import build_summary
from tritongen.schema_set import check_output
from tritongen.loadtests.workload import LocustConfig, Prompt, PromptSource
from tritongen.plan.load import load_profile
from tritongen.spec import LoadSection

OBJECT = {"type": "object", "properties": {"a": {"type": "integer", "maximum": 5}}, "required": ["a"]}


@pytest.mark.parametrize("text, hit_limit, outcome", [
    ('{"a": 3}', False, "valid"),
    ('{"a": 3}', True, "valid"),          # complete at the last allowed token: valid
    ('{"a": 9}', False, "invalid"),       # parses, breaks the schema
    ('{"a": ', False, "invalid"),         # ended early without a whole value
    ('{"a": ', True, "truncated"),        # cut by max_tokens: counted apart, not a pass
    ('{"a": 9}', True, "truncated"),
])
def test_an_output_is_judged_on_its_whole_text(text, hit_limit, outcome):
    assert check_output(text, OBJECT, hit_limit=hit_limit) == outcome


class _Words:
    def encode(self, text, add_special_tokens=True):
        return list(range(len(text.split())))

    def decode(self, ids, skip_special_tokens=True):
        return " ".join("w" for _ in ids)


def test_the_share_carries_schemas_without_min_tokens(tmp_path):
    (tmp_path / "s.json").write_text(json.dumps([{"name": "one", "schema": OBJECT}, {"name": "two", "schema": {}}]))
    section = LoadSection(structured={"share": 0.5, "schemas": "s.json", "max_tokens": 64})
    config = LocustConfig(profile=load_profile(section, lambda p: tmp_path / p), url="x:1", level=1,
                          samples_dir=str(tmp_path), tokenizer_dir=str(tmp_path))
    source = PromptSource(config, _Words(), rng=random.Random())
    prompts = [source.with_structure(Prompt("w w", 2, 16, 16)) for _ in range(400)]
    chosen = [p for p in prompts if p.schema is not None]
    assert 0.4 < len(chosen) / len(prompts) < 0.6
    assert {p.schema.name for p in chosen} == {"one", "two"}
    assert {(p.max_tokens, p.min_tokens) for p in chosen} == {(64, None)}
    assert {(p.max_tokens, p.min_tokens) for p in prompts if p.schema is None} == {(16, 16)}
    assert chosen[0].schema.text == json.dumps(chosen[0].schema.schema, separators=(",", ":"))


def test_an_invalid_output_fails_the_level_with_its_line():
    samples = set_a()
    extra = [make(101.0 + i * 0.1, [0.2, 0.5], 4, rid=f"j{i}") for i in range(4)]
    for sample, outcome in zip(extra, ("valid", "valid", "invalid", "truncated")):
        sample.schema, sample.schema_result = "obj", outcome
    summary = build_summary(samples + extra, SLO(max_error_rate=1.0))
    [level] = summary["levels"]
    got = level["structured"]
    assert {k: got[k] for k in ("n", "valid", "invalid", "truncated", "failed")} == \
        {"n": 4, "valid": 2, "invalid": 1, "truncated": 1, "failed": 0}
    assert got["plain"]["n"] == 5 and got["e2e_ms"]["count"] == 4
    [check] = [r for r in level["slo"]["results"] if r["name"] == "structured_outputs_invalid"]
    assert check["line"] == "FAIL structured_outputs_invalid: measured 1.0 outputs != limit 0 outputs"
    assert not level["slo"]["passed"] and not summary["slo"]["passed"]
    assert structured_line(got).startswith("structured: 4 sent, 2 valid, 1 invalid, 1 truncated, 0 failed; p50 ms")
    assert "<b>1 invalid</b>" in render_html(summary, samples + extra)


def test_a_level_without_structured_requests_has_none():
    [level] = build_summary(set_a(), SLO(max_error_rate=1.0))["levels"]
    assert level["structured"] is None
    assert all(r["name"] != "structured_outputs_invalid" for r in level["slo"]["results"])
