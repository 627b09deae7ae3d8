"""The schema set of a structured load (validation.load.structured.schemas), and the check of each output.

The planner reads the file once to refuse a bad one up front (SpecError naming the field and the fix); each
Locust process reads it again to send its schemas (tritongen.loadtests.workload) and checks each structured output
with `check_output`. A top-level leaf, as the plan and the load test both use it and neither imports the other.
jsonschema is imported inside the functions: Locust processes import this module before their first request, with
or without a structured share.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from tritongen.errors import SpecError, clip, problem

FIELD = "validation.load.structured.schemas"
Outcome = Literal["valid", "invalid", "truncated"]
SHAPE = 'a JSON list of {"name": ..., "schema": {...}} entries (like tests/data/json_schemas.json)'


@dataclass(frozen=True)
class NamedSchema:
    name: str
    schema: dict
    text: str
    """The schema as sent (`guided_decoding_guide`): compact JSON."""


def read_schema_set(path: str | Path) -> tuple[NamedSchema, ...]:
    """The file's schemas, each checked against its JSON Schema metaschema; SpecError naming the entry otherwise."""
    from jsonschema import exceptions, validators

    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SpecError(problem(FIELD, f"{path} does not exist", f"write {SHAPE} there, or fix the path")) from None
    except (OSError, ValueError) as err:
        raise SpecError(problem(FIELD, f"{path} is not readable JSON ({clip(str(err))})", f"write {SHAPE}")) from None
    if not isinstance(data, list) or not data:
        raise SpecError(problem(FIELD, f"{path} is not a list of schemas", f"write {SHAPE}"))
    schemas, seen = [], set()
    for i, entry in enumerate(data):
        where = f"{FIELD} ({path}, entry {i})"
        if not (isinstance(entry, dict) and isinstance(entry.get("name"), str) and entry["name"]
                and isinstance(entry.get("schema"), dict)):
            raise SpecError(problem(where, "is not a {\"name\": string, \"schema\": object} entry", f"write {SHAPE}"))
        if entry["name"] in seen:
            raise SpecError(problem(where, f"repeats the name {entry['name']!r}", "give every schema its own name"))
        seen.add(entry["name"])
        try:
            validators.validator_for(entry["schema"]).check_schema(entry["schema"])
        except exceptions.SchemaError as err:
            raise SpecError(problem(where, f"{entry['name']!r} is not a valid JSON schema ({clip(err.message)})",
                                    "fix the schema")) from None
        schemas.append(NamedSchema(entry["name"], entry["schema"], json.dumps(entry["schema"],
                                                                             separators=(",", ":"))))
    return tuple(schemas)


def check_output(text: str, schema: dict, *, hit_limit: bool) -> Outcome:
    """`valid` when the whole text parses as JSON and validates against `schema`; otherwise `truncated` when the
    request ended at its max_tokens (a cut output is a prefix, not a wrong answer), else `invalid`."""
    from jsonschema import validators

    try:
        value = json.loads(text)
    except ValueError:
        return "truncated" if hit_limit else "invalid"
    if validators.validator_for(schema)(schema).is_valid(value):
        return "valid"
    return "truncated" if hit_limit else "invalid"
