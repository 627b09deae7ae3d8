"""Spec validation: one line per problem, dotted paths, did-you-mean, exit code 2, nothing written."""

from __future__ import annotations

import pytest
import yaml

from tritongen.cli import main
from tritongen.errors import SpecError
from tritongen.spec import explain, parse_spec

BASE = {"name": "t", "model": {"checkpoint": "x"}}


def _errors(data) -> list[str]:
    with pytest.raises(SpecError) as exc:
        parse_spec(data)
    return exc.value.problems


def test_minimal_spec_resolves_defaults():
    spec = parse_spec(BASE)
    assert spec.runtime == "hf"
    assert spec.serving.max_batch_size == 8
    assert spec.serving.streaming is True
    assert spec.placement.device == "cpu"


def test_unknown_field_names_path_and_suggests():
    assert _errors({**BASE, "serving": {"max_batch_sise": 4}}) == [
        "serving.max_batch_sise: unknown field; did you mean `max_batch_size`?"]


def test_unknown_field_without_close_match():
    assert _errors({**BASE, "zzz": 1}) == ["zzz: unknown field; remove it (see `tritongen validate --explain`)"]


def test_limits_and_missing_fields_one_line_each():
    problems = _errors({"name": "t", "model": {}, "serving": {"kv_cache": {"free_gpu_mem_fraction": 2}}})
    assert problems == [
        "model.checkpoint: is required; add it to the spec",
        "serving.kv_cache.free_gpu_mem_fraction: input should be less than or equal to 1 (got 2); fix the value",
    ]


def test_cross_field_rules():
    problems = _errors({**BASE, "runtime": "tensorrtllm", "placement": {"gpu_ids": [0]}})
    assert problems == [
        "placement.gpu_ids: is set but placement.device is cpu; set placement.device: gpu or remove gpu_ids",
        "placement.device: cpu cannot run the tensorrtllm runtime; set placement.device: gpu, or runtime: hf",
    ]


def test_explain_documents_every_leaf_field():
    rows = explain()
    paths = {row[0] for row in rows}
    assert {"serving.max_batch_size", "validation.slo.ttft_p95_ms", "model.checkpoint"} <= paths
    undocumented = [row[0] for row in rows if not row[3]]
    assert undocumented == []


def test_cli_invalid_field_exits_2_and_writes_nothing(tmp_path, capsys):
    spec = tmp_path / "bad.yaml"
    spec.write_text(yaml.safe_dump({**BASE, "serving": {"max_batch_size": 0}}))
    out = tmp_path / "repo"
    assert main(["render", str(spec), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "serving.max_batch_size: input should be greater than or equal to 1 (got 0); fix the value" in err
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml"]


def test_cli_missing_checkpoint_folder_exits_2(tmp_path, capsys):
    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump({"name": "t", "model": {"checkpoint": "nowhere"}}))
    assert main(["plan", str(spec)]) == 2
    err = capsys.readouterr().err
    assert f"model.checkpoint: folder {tmp_path / 'nowhere'} does not exist" in err


def test_cli_bad_yaml_exits_2(tmp_path, capsys):
    spec = tmp_path / "s.yaml"
    spec.write_text("name: [unclosed")
    assert main(["validate", str(spec)]) == 2
    assert "is not valid YAML" in capsys.readouterr().err


def test_pattern_errors_quote_the_pattern_exactly():
    with pytest.raises(SpecError) as err:
        parse_spec({"name": "x", "model": {"checkpoint": "."}, "frontend": {"api_key_env": "sk-abc"}})
    (line,) = err.value.problems
    assert line.startswith("frontend.api_key_env: string should match pattern '^[A-Za-z_][A-Za-z0-9_]*$'"), line
