"""What the python tensorrt_llm_bls forwards between the models: the tables render writes as wiring.json beside it
(tritongen.contract.bls_wiring, which also generates the native BLS's bls/wiring.h), read back."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

FILE = "wiring.json"


@dataclass(frozen=True)
class Wiring:
    to_preprocessing: dict[str, str]
    """BLS input -> preprocessing input."""
    from_preprocessing: dict[str, str]
    """preprocessing output -> tensorrt_llm input."""
    to_llm: dict[str, str]
    """BLS input -> tensorrt_llm input."""
    passed_outputs: tuple[str, ...]
    """tensorrt_llm outputs returned as they are."""

    @classmethod
    def of(cls, tables: dict[str, list]) -> Wiring:
        """The tables of contract.bls_wiring() (lists of [from, to] pairs and a list of names)."""
        return cls(to_preprocessing=dict(tables["to_preprocessing"]),
                   from_preprocessing=dict(tables["from_preprocessing"]),
                   to_llm=dict(tables["to_llm"]), passed_outputs=tuple(tables["passed_outputs"]))


def load(folder: str) -> Wiring:
    """The wiring.json rendered into `folder` (the BLS's version folder)."""
    with open(os.path.join(folder, FILE)) as f:
        return Wiring.of(json.load(f))
