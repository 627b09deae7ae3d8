"""Every behaviour of a test double names the upstream file and commit it reproduces: each `# facts: <key>` comment
in a double's model.py has an entry in its facts file, and each entry is referenced by the double."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
DOUBLES = {
    "llmapi": (TESTS / "doubles" / "llmapi" / "model.py", TESTS / "doubles" / "llmapi" / "facts.json"),
    "vllm": (TESTS / "doubles" / "vllm" / "model.py", TESTS / "fixtures" / "nvidia" / "vllm_backend-r26.01.json"),
}
_MARK = re.compile(r"# facts: (\w+)")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def _citations(entry) -> list[dict]:
    return entry if isinstance(entry, list) else [entry]


@pytest.mark.parametrize("double", sorted(DOUBLES))
def test_every_behaviour_of_the_double_cites_an_upstream_file_and_commit(double):
    model, facts = DOUBLES[double]
    marked = set(_MARK.findall(model.read_text()))
    behaviours = {k: v for k, v in json.loads(facts.read_text())["double_behaviours"].items() if k != "_about"}
    assert marked == set(behaviours), (f"in the double, not in {facts.name}: {sorted(marked - set(behaviours))}; "
                                       f"in {facts.name}, not in the double: {sorted(set(behaviours) - marked)}")
    unverified = []
    for key, entry in behaviours.items():
        for cite in _citations(entry):
            assert cite["repo"].count("/") == 1 and cite["path"] and cite["what"], (key, cite)
            if cite["commit"] is None and "artifact_sha256" in cite:
                # A released package read as its registry publishes it (vLLM 0.13.0's wheel): named and hashed.
                assert cite["artifact"] and _SHA256.match(cite["artifact_sha256"]), (key, cite)
            elif cite["commit"] is None:
                # Allowed only when the entry says so in capitals: the report lists it.
                assert "NOT VERIFIED" in cite["what"], (key, cite)
                unverified.append(key)
            else:
                assert _COMMIT.match(cite["commit"]), (key, cite)
    assert len(unverified) <= 1, unverified
