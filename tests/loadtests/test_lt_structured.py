"""A load with a structured share against the real tritonserver (hf runtime, tiny demo model): half the requests
carry a JSON schema (gRPC: NVIDIA's guide tensors; OpenAI: response_format json_schema, strict), every such output
validates, and the report's counts are the samples'."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from tritongen.loadtests.samples import read_samples

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ("flat_object", "boolean_flag", "enum_color", "const_value", "integer_range")
pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def frontend(triton, tiny_repo):
    from tritongen.frontend.server import FrontendServer
    from tritongen.plan.frontend import FrontendPlan

    with FrontendServer(FrontendPlan.read(tiny_repo).model_copy(update={"port": 0}), triton.grpc_url) as server:
        yield server


@pytest.mark.parametrize("protocol", ["grpc", "openai"])
def test_a_structured_share_validates_and_is_counted(tiny_spec_path, triton, request, tmp_path, protocol):
    url = triton.grpc_url if protocol == "grpc" else request.getfixturevalue("frontend").url
    every = {s["name"]: s for s in json.loads((ROOT / "tests" / "data" / "json_schemas.json").read_text())}
    (tmp_path / "schemas.json").write_text(json.dumps([every[name] for name in SCHEMAS]))
    data = yaml.safe_load(tiny_spec_path.read_text())
    data["validation"]["load"].update(users=4, spawn_rate=4, duration_s=8, warmup_s=1, sweep=[],
                                      output_tokens={"mean": 8, "stddev": 0},
                                      structured={"share": 0.5, "schemas": "schemas.json"})
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "tritongen.cli", "loadtest", str(spec), "--url", url, "--protocol", protocol,
                           "--metrics-url", triton.metrics_url, "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    summary = json.loads((out / "loadtest.json").read_text())
    [level] = summary["levels"]
    samples = read_samples(summary["files"]["samples"])
    structured = [s for s in samples if s.schema is not None]
    assert structured and len(structured) < len(samples)  # a share, not all or none
    for s in structured:
        assert s.ok, s.error
        jsonschema.validate(json.loads(s.output_text), every[s.schema]["schema"])
    assert {s.schema_result for s in structured} == {"valid"}
    got = level["structured"]
    assert (got["n"], got["valid"], got["invalid"], got["truncated"], got["failed"]) == \
        (len(structured), len(structured), 0, 0, 0)
    assert got["plain"]["n"] == len(samples) - len(structured)
    assert got["ttft_ms"]["count"] > 0 and got["plain"]["ttft_ms"]["count"] > 0
    [check] = [r for r in level["slo"]["results"] if r["name"] == "structured_outputs_invalid"]
    assert check["passed"] and check["line"] == "PASS structured_outputs_invalid: measured 0.0 outputs == limit 0 outputs"
    assert f"structured: {len(structured)} sent, {len(structured)} valid, 0 invalid" in proc.stdout
