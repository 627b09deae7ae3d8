"""Validation of generated Kubernetes manifests: built-in kinds with kubernetes-validate's strict schemas, custom
resources (PodMonitor, ServiceMonitor, LeaderWorkerSet) with the CRD schemas vendored in tests/fixtures/crds.

kubernetes-validate ships no CRD schemas (it warns and passes them), so a CRD's openAPIV3Schema is checked here
with jsonschema in the same strict sense: an object that lists `properties` accepts no other key unless the
schema says `x-kubernetes-preserve-unknown-fields` or gives `additionalProperties`.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import jsonschema

CRDS = Path(__file__).parent / "fixtures" / "crds"
K8S_VERSION = "1.30"


def _strict(schema: object) -> object:
    if isinstance(schema, list):
        return [_strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _strict(v) for k, v in schema.items()}
    if ("properties" in out and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    return out


@functools.cache
def crd_validators() -> dict[tuple[str, str], jsonschema.protocols.Validator]:
    """(apiVersion, kind) -> a validator of the vendored CRD schema."""
    out = {}
    for path in sorted(CRDS.glob("*.json")):
        crd = json.loads(path.read_text())
        schema = _strict(crd["openAPIV3Schema"])
        out[(f"{crd['group']}/{crd['version']}", crd["kind"])] = jsonschema.Draft202012Validator(schema)
    return out


def validate(doc: dict) -> None:
    """Raise (jsonschema / kubernetes_validate ValidationError) when `doc` is not a valid object of its kind."""
    import kubernetes_validate

    key = (doc["apiVersion"], doc["kind"])
    validator = crd_validators().get(key)
    if validator is None:
        assert kubernetes_validate.validate(doc, K8S_VERSION, strict=True) == K8S_VERSION
        return
    validator.validate(doc)
