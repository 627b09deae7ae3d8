"""The base classes of the spec's sections: a leaf both `tritongen.spec` and the runtimes import.

A runtime owns its section of the spec (`runtimes/<name>/spec.py`, a `RuntimeSection`) as it owns its section of
the Plan; `tritongen.spec.Spec` composes the sections from the runtime registry, so a runtime's knob is a field in
its own package and nowhere else. This module imports nothing of tritongen.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, ConfigDict


class Problems(ValueError):
    """Cross-field problems of a section, already formatted one per line (`dotted.path: what; fix`)."""


class Section(BaseModel):
    """A section of the spec: unknown keys refused, frozen, every field's docstring its description."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, frozen=True)


class RuntimeSection(Section):
    """A runtime's own top-level section of the spec (`Runtime.spec_section`), present whatever the runtime (its
    defaults apply; only the runtime that owns it reads it)."""

    key: ClassVar[str]
    """Its key at the top of the spec (`hf`, `engine`, ...)."""

    moved: ClassVar[dict[str, str]] = {}
    """Old dotted spec paths still accepted for one release -> the field of this section that replaced them. Loading
    a spec that uses one moves the value and warns once, naming the old and the new path (`SpecDeprecation`)."""

    def unused_problems(self) -> list[str]:
        """Problems (`dotted.path: what; fix`) of settings in this section that another chosen runtime would
        ignore silently where the user must be told; most sections have none."""
        return []


class SpecDeprecation(FutureWarning):
    """A spec uses a field name that moved; the message names the old and the new path (shown by default)."""
