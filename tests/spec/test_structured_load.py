"""validation.load.structured checked up front: each bad share, schema file or runtime is one error line naming the
field and the fix (exact text pinned); a good one plans its schema file absolute."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tritongen.errors import SpecError
from tritongen.plan import plan_from_file

ROOT = Path(__file__).resolve().parents[2]
FIX = 'write a JSON list of {"name": ..., "schema": {...}} entries (like tests/data/json_schemas.json)'


def _spec(tmp_path: Path, checkpoint: Path, structured: dict, example: str = "tiny-cpu.yaml") -> Path:
    data = yaml.safe_load((ROOT / "examples" / example).read_text())
    data["model"]["checkpoint"] = str(checkpoint)
    data["validation"]["load"]["structured"] = structured
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _problems(path: Path) -> list[str]:
    with pytest.raises(SpecError) as err:
        plan_from_file(path)
    return err.value.problems


def test_a_schema_set_plans_absolute_with_its_share(tiny_model, tmp_path):
    (tmp_path / "schemas.json").write_text((ROOT / "tests" / "data" / "json_schemas.json").read_text())
    _, plan = plan_from_file(_spec(tmp_path, tiny_model, {"share": 0.5, "schemas": "schemas.json"}))
    s = plan.load.structured
    assert (s.share, s.schemas, s.max_tokens) == (0.5, str(tmp_path / "schemas.json"), 256)
    # No share: nothing is read, plain requests only.
    _, plan = plan_from_file(_spec(tmp_path, tiny_model, {"schemas": "missing.json"}))
    assert plan.load.structured.share == 0


@pytest.mark.parametrize("structured, expected", [
    ({"share": 1.5, "schemas": "s.json"},
     "validation.load.structured.share: (1.5) is not a fraction; give a share from 0 to 1, e.g. 0.5"),
    ({"share": -0.1, "schemas": "s.json"},
     "validation.load.structured.share: (-0.1) is not a fraction; give a share from 0 to 1, e.g. 0.5"),
    ({"share": 0.5},
     'validation.load.structured.schemas: is not set but share is above 0; name a JSON file of '
     '[{"name": ..., "schema": {...}}, ...] entries'),
])
def test_share_problems(tiny_model, tmp_path, structured, expected):
    assert _problems(_spec(tmp_path, tiny_model, structured)) == [expected]


@pytest.mark.parametrize("content, expected", [
    (None, "validation.load.structured.schemas: {path} does not exist; write a JSON list of {{\"name\": ..., "
           "\"schema\": {{...}}}} entries (like tests/data/json_schemas.json) there, or fix the path"),
    ("{not json", "validation.load.structured.schemas: {path} is not readable JSON (Expecting property name "
                  "enclosed in double quotes: line 1 column 2 (char 1)); " + FIX.replace("{", "{{").replace("}", "}}")),
    ('{"name": "a", "schema": {}}',
     "validation.load.structured.schemas: {path} is not a list of schemas; " + FIX.replace("{", "{{").replace("}", "}}")),
    ('[{"name": "a", "schema": {"type": "object"}}, {"schema": {}}]',
     'validation.load.structured.schemas ({path}, entry 1): is not a {{"name": string, "schema": object}} entry; '
     + FIX.replace("{", "{{").replace("}", "}}")),
    ('[{"name": "a", "schema": {"type": "object"}}, {"name": "a", "schema": {}}]',
     "validation.load.structured.schemas ({path}, entry 1): repeats the name 'a'; give every schema its own name"),
    ('[{"name": "bad", "schema": {"type": "objekt"}}]',
     "validation.load.structured.schemas ({path}, entry 0): 'bad' is not a valid JSON schema ('objekt' is not "
     "valid under any of the given schemas); fix the schema"),
])
def test_schema_file_problems(tiny_model, tmp_path, content, expected):
    path = tmp_path / "s.json"
    if content is not None:
        path.write_text(content)
    assert _problems(_spec(tmp_path, tiny_model, {"share": 0.5, "schemas": "s.json"})) == \
        [expected.format(path=path)]


def test_a_runtime_without_json_schema_guides_is_refused_by_name(tiny_model, tmp_path):
    (tmp_path / "s.json").write_text('[{"name": "a", "schema": {"type": "object"}}]')
    problems = _problems(_spec(tmp_path, tiny_model, {"share": 0.5, "schemas": "s.json"}, "synthetic-cpu.yaml"))
    assert len(problems) == 1
    assert problems[0].startswith("validation.load.structured.share: the synthetic runtime cannot constrain "
                                  "decoding to a JSON schema (refused: ")
    assert problems[0].endswith("; use runtime hf, tensorrtllm and vllm, or set share 0")
