"""The check of a structured request's output (validation.load.structured; the schema set:
tritongen.plan.schema_set)."""

from __future__ import annotations

import json
from typing import Literal

Outcome = Literal["valid", "invalid", "truncated"]


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
