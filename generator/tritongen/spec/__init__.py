"""The deployment spec (v1): one YAML file in, validated into typed sections.

One module per section (`spec/serving.py`, `spec/load.py`, ...); a runtime's own section lives in its package
(`runtimes/<name>/spec.py`, a `tritongen.spec_base.RuntimeSection` named by `Runtime.spec_section`), and `Spec`
composes those from the runtime registry. Every field carries a docstring; `tritongen validate --explain` and
docs/reference.md are generated from them. Paths are kept as written here; the Plan resolves them against the spec
file's folder.
"""

from __future__ import annotations

import difflib
import inspect
import re
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args, get_origin

from pydantic import BaseModel, Field, ValidationError, ValidationInfo, create_model, field_validator, model_validator
from pydantic_core import PydanticCustomError

from tritongen.errors import SpecError, clip, problem, shown
from tritongen.runtimes import CHOICES as RUNTIME_CHOICES, RuntimeName, names, planning, plannings
from tritongen.spec.deploy import DeploySection
from tritongen.spec.frontend import FrontendSection, OpenAIFrontendSection
from tritongen.spec.kv_cache import KVCacheSection
from tritongen.spec.load import LoadSection, TokenDistribution
from tritongen.spec.model import ModelSection
from tritongen.spec.placement import PlacementSection
from tritongen.spec.serving import DynamicBatchingSection, ServingSection
from tritongen.spec.slo import SLOSection
from tritongen.spec.structured_output import StructuredOutputSection
from tritongen.spec.validation import ValidationSection
from tritongen.spec_base import Problems, RuntimeSection, Section, SpecDeprecation

__all__ = ["DeploySection", "DynamicBatchingSection", "FrontendSection", "KVCacheSection", "LoadSection",
           "ModelSection", "OpenAIFrontendSection", "PlacementSection", "RUNTIME_SECTIONS", "SLOSection",
           "ServingSection", "Spec", "SpecDeprecation", "StructuredOutputSection", "TokenDistribution",
           "ValidationSection", "current_names", "explain", "explain_markdown", "load_spec", "parse_spec"]

RUNTIME_SECTIONS: tuple[type[RuntimeSection], ...] = tuple(
    r.spec_section for r in plannings().values() if r.spec_section is not None)
"""Every runtime's own section, in the registry's order (each a top-level key of the spec)."""

_NAME = re.compile(r"[a-z]([a-z0-9._-]{0,38}[a-z0-9])?")
_NAME_RULE = ("must start with a lowercase letter, end with a letter or digit and hold at most 40 lowercase "
              "letters, digits, '.', '_', '-' (Kubernetes object names)")


def _name_example(value: str) -> str:
    core = re.sub(r"[^a-z0-9._-]", "-", value.lower()).strip("._-")[:38].strip("._-") or "model"
    return core if core[0].isalpha() else f"m-{core}"[:40]


def _move_deprecated(data: dict[str, Any], moved: list[str]) -> dict[str, Any]:
    """`data` with every old path a runtime section still accepts (`RuntimeSection.moved`) moved to its new field;
    one message per move is appended to `moved`. The input is not changed."""
    out = dict(data)
    problems = []
    for section in RUNTIME_SECTIONS:
        for old, field in section.moved.items():
            *parents, leaf = old.split(".")
            node = out
            for part in parents:
                child = node.get(part)
                if not isinstance(child, dict):
                    break
                node[part] = node = dict(child)
            else:
                if leaf not in node:
                    continue
                new = f"{section.key}.{field}"
                if not isinstance(out.get(section.key, {}), dict):
                    continue  # the section's own error says what is wrong
                if field in out.get(section.key, {}):
                    problems.append(problem(old, f"is the old name of {new}, which is set too", f"remove {old}"))
                    continue
                value = node.pop(leaf)  # first: `node` may be the section itself (a field renamed in place)
                out[section.key] = {**out.get(section.key, {}), field: value}
                moved.append(problem(old, f"is deprecated, renamed {new}",
                                     f"write {new} (the old name is accepted until the next release)"))
    if problems:
        raise Problems("\n".join(problems))
    return out


class SpecCore(Section):
    """A tritongen deployment spec: the sections every runtime shares (`Spec` adds the runtimes' own)."""

    version: Literal[1] = 1
    """Spec format version."""

    name: str
    """Deployment name: a lowercase letter first, then lowercase letters, digits, `.`, `_`, `-`, ending in a letter
    or digit, at most 40 characters. Used for server groups and deploy files; Kubernetes objects and compose
    services use it with `.` and `_` mapped to `-` (a DNS-1035 label, so Service names are valid by construction,
    with room for suffixes such as `-mig-3g-71gb`)."""

    runtime: RuntimeName = Field("hf", description=RUNTIME_CHOICES)
    # Described by the runtimes themselves (tritongen.runtimes.CHOICES), so a new runtime documents itself here.

    model: ModelSection
    """The checkpoint and tokenizer."""

    serving: ServingSection = ServingSection()
    """Triton serving settings shared by all runtimes."""

    placement: PlacementSection = PlacementSection()
    """Where the model runs."""

    validation: ValidationSection = ValidationSection()
    """Load test and SLOs."""

    frontend: FrontendSection = FrontendSection()
    """The OpenAI-compatible frontend."""

    deploy: DeploySection = DeploySection()
    """Generated deployment files (compose, Kubernetes)."""

    structured_output: StructuredOutputSection = StructuredOutputSection()
    """Constrained decoding (guided decoding: JSON, JSON schema, regex, EBNF grammar) and tool calls."""

    @model_validator(mode="before")
    @classmethod
    def _moved(cls, data: Any, info: ValidationInfo) -> Any:
        if not isinstance(data, dict):
            return data
        moved: list[str] = []
        data = _move_deprecated(data, moved)
        sink = (info.context or {}).get("moved")
        if sink is not None:
            sink.extend(moved)
        else:
            for message in moved:
                warnings.warn(message, SpecDeprecation, stacklevel=2)
        return data

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        # Rejected rather than mapped: a name that changed on the way into Kubernetes would not match the one in
        # reports, labels and server groups.
        if not _NAME.fullmatch(value):
            raise PydanticCustomError("spec_name", _NAME_RULE + " (got '{value}'); rename it, e.g. '{example}'",
                                      {"value": value, "example": _name_example(value)})
        return value

    @model_validator(mode="after")
    def _cross_field(self) -> SpecCore:
        problems = []
        if self.placement.device == "cpu" and self.placement.gpu_ids:
            problems.append(problem("placement.gpu_ids", "is set but placement.device is cpu",
                                    "set placement.device: gpu or remove gpu_ids"))
        rt = planning(self.runtime)
        if not rt.runs_on_cpu and self.placement.device == "cpu":
            problems.append(problem("placement.device", f"cpu cannot run the {self.runtime} runtime",
                                    "set placement.device: gpu, or runtime: hf"))
        if not rt.honours_stream_interval and self.serving.stream_interval != 1:
            problems.append(problem("serving.stream_interval", f"({self.serving.stream_interval}) is honoured by the "
                                    f"{names(lambda r: r.honours_stream_interval)} runtimes only; the {self.runtime} "
                                    "runtime sends a response per generated token", "remove it (or set 1)"))
        problems.extend(self._adapter_problems())
        problems.extend(self._structured_load_problems())
        for section in RUNTIME_SECTIONS:
            if section is not rt.spec_section:
                problems.extend(getattr(self, section.key).unused_problems())
        if problems:
            raise ValueError("\n".join(problems))
        return self


    def _adapter_problems(self) -> list[str]:
        shares = self.validation.load.adapters
        known = {"base", *(a.name for a in self.model.adapters)}
        problems = [problem(f"validation.load.adapters.{name}", f"names no adapter of model.adapters (known: "
                            f"{', '.join(sorted(known))})", "use an adapter's name, or `base` for the base model")
                    for name in shares if name not in known]
        problems += [problem(f"validation.load.adapters.{name}", f"weight {weight:g} is not positive",
                             "give it a weight > 0, or leave it out") for name, weight in shares.items() if weight <= 0]
        adapters = sorted(known - {"base"})
        problems += [problem(f"deploy.adapter_uris.{name}", "names no adapter of model.adapters" +
                             (f" (known: {', '.join(adapters)})" if adapters else " (it has none)"),
                             "use an adapter's name, or remove the entry")
                     for name in self.deploy.adapter_uris if name not in adapters]
        if not self.model.adapters:
            return problems
        refused = planning(self.runtime).adapters_refused(self)
        if refused is not None:
            return problems + [problem("model.adapters", f"the {self.runtime} runtime cannot serve them: {refused}",
                            f"use runtime {names(lambda r: r.serves_adapters)}, or remove model.adapters")]
        served = self.frontend.openai.served_model_name or self.name
        return problems + [problem(f"model.adapters.{i}.name", f"{a.name!r} is the base model's served name (OpenAI "
                                   "`model`)", "rename the adapter (or set frontend.openai.served_model_name)")
                           for i, a in enumerate(self.model.adapters) if a.name == served]


    def _structured_load_problems(self) -> list[str]:
        """A structured share of the load needs a runtime whose model takes a json_schema guide."""
        if self.validation.load.structured.share <= 0:
            return []
        guide_types, how = planning(self.runtime).guided_decoding(self)
        if "json_schema" in guide_types:
            return []
        return [problem("validation.load.structured.share", f"the {self.runtime} runtime cannot constrain decoding "
                        f"to a JSON schema ({how})", f"use runtime "
                        f"{names(lambda r: 'json_schema' in r.guided_decoding(self)[0])}, or set share 0")]


def _runtime_fields() -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for section in RUNTIME_SECTIONS:
        doc = inspect.cleandoc(section.__doc__ or "").replace("\n", " ")
        fields[section.key] = (section, Field(default_factory=section, description=doc))
    return fields


if TYPE_CHECKING:
    _Composed = SpecCore
else:
    _Composed = create_model("_Composed", __base__=SpecCore, __module__=__name__, **_runtime_fields())


class Spec(_Composed):
    """A tritongen deployment spec: the shared sections, then each runtime's own under its `key`."""

    if TYPE_CHECKING:
        def __getattr__(self, key: str) -> Any: ...  # the runtimes' sections, added from the registry


def _field_names(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """The field names valid at `loc` (for a did-you-mean hint)."""
    current: Any = model
    for part in loc[:-1]:
        field = getattr(current, "model_fields", {}).get(part)
        if field is None:
            return []
        current = field.annotation
    return list(getattr(current, "model_fields", {}))


def _format_errors(err: ValidationError) -> list[str]:
    lines = []
    for e in err.errors():
        loc = tuple(e["loc"])
        path = clip(".".join(str(p) for p in loc) or "(spec)", 120)
        if e["type"] == "extra_forbidden":
            close = difflib.get_close_matches(str(loc[-1]), _field_names(Spec, loc), n=1)
            fix = f"did you mean `{close[0]}`?" if close else "remove it (see `tritongen validate --explain`)"
            lines.append(problem(path, "unknown field", fix))
        elif e["type"] == "missing":
            lines.append(problem(path, "is required", "add it to the spec"))
        elif e["type"] == "spec_name":
            lines.append(f"{path}: {e['msg']}")
        elif e["type"] == "value_error" and (not loc or isinstance(e["ctx"]["error"], Problems)):
            # Cross-field problems are already formatted, one per line.
            lines.extend(str(e["ctx"]["error"]).splitlines())
        else:
            given = e.get("input")
            got = f" (got {shown(given)})" if not isinstance(given, (dict, list)) else ""
            # Lower-case only the first letter: the rest may quote a pattern or a value exactly.
            msg = e["msg"][:1].lower() + e["msg"][1:]
            lines.append(problem(path, f"{clip(msg)}{got}", "fix the value"))
    return lines


_WARNED: dict[Any, Any] = {}
"""The warnings registry of deprecated names: each is shown once per process, however often the spec is read."""


def _warn(moved: list[str], source: str) -> None:
    for message in moved:
        warnings.warn_explicit(message, SpecDeprecation, source, 0, registry=_WARNED)


def current_names(data: Any, source: str = "spec") -> Any:
    """`data` with every old field name moved to its new path (a `SpecDeprecation` warning each, attributed to
    `source`): what a caller that sets fields in the mapping before validating it (tune's trials) starts from."""
    if not isinstance(data, dict):
        return data
    moved: list[str] = []
    try:
        out = _move_deprecated(data, moved)
    except Problems as err:
        raise SpecError(str(err).splitlines()) from None
    _warn(moved, source)
    return out


def parse_spec(data: Any, source: str = "spec") -> Spec:
    """Validate a mapping into a Spec, raising SpecError with one line per problem. A field under its old name is
    moved to its new one with a `SpecDeprecation` warning (naming both) attributed to `source`."""
    if not isinstance(data, dict):
        raise SpecError(problem("(spec)", "must be a YAML mapping", "start from examples/tiny-cpu.yaml"))
    moved: list[str] = []
    try:
        spec = Spec.model_validate(data, context={"moved": moved})
    except ValidationError as err:
        raise SpecError(_format_errors(err)) from None
    _warn(moved, source)
    return spec


def load_spec(path: str | Path) -> Spec:
    """Read and validate a spec file."""
    from tritongen.core.source import read_yaml

    p = Path(path)
    if p.is_dir():
        inside = sorted(str(f) for f in p.glob("*.y*ml"))[:3]
        raise SpecError(problem(str(p), "is a folder, not a spec file", "pass the path of a YAML spec"
                                + (f" (this folder holds {', '.join(inside)})" if inside else "")))
    if not p.is_file():
        raise SpecError(problem(str(p), "spec file not found", "pass the path of a YAML spec"))
    return parse_spec(read_yaml(p), str(p))


def explain(model: type[BaseModel] = Spec, prefix: str = "") -> list[tuple[str, str, str, str]]:
    """(dotted path, type, default, doc) for every field, depth first, for docs and `validate --explain`."""
    rows = []
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            rows.append((path, "section", "", field.description or ""))
            rows.extend(explain(ann, path + "."))
            continue
        item = get_args(ann)[0] if get_origin(ann) in (tuple, list) and get_args(ann) else None
        if isinstance(item, type) and issubclass(item, BaseModel):
            # A list of sections (model.adapters): its entries' fields under `path[].`.
            doc = (field.description or "").replace("\n", " ")
            rows.append((path, f"list of {item.__name__}", repr(field.get_default(call_default_factory=True)), doc))
            rows.extend(explain(item, path + "[]."))
            continue
        default = "required" if field.is_required() else repr(field.get_default(call_default_factory=True))
        type_name = str(ann).replace("typing.", "") if not isinstance(ann, type) else ann.__name__
        rows.append((path, type_name, default, (field.description or "").replace("\n", " ")))
    return rows


def explain_markdown() -> str:
    """The spec reference as a Markdown table (docs/reference.md; a test keeps the two equal)."""
    lines = ["| field | type | default | meaning |", "|---|---|---|---|"]
    for path, type_name, default, doc in explain():
        if type_name == "section":
            lines.append(f"| **{path}** | section | | {doc} |")
        else:
            lines.append(f"| `{path}` | `{type_name}` | `{default}` | {doc.replace('|', '/')} |")
    return "\n".join(lines) + "\n"
