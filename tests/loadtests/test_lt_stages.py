"""Where the time goes, on the real tritonserver: the synthetic runtime (python token source with its own timings,
python BLS) behind the ensemble. The stages come from the server (Triton's statistics extension and the model's
own counters, read at the window's edges); their sum must match the client's mean end-to-end latency of the same
window within 10% at every level, and the report must name the dominant stage."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from specs import render_spec
from streaming_text import start_server

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.integration, pytest.mark.serial]  # the stages' times against the configured ones

TTFT_MS, ITL_MS, TOKENS = 60, 20, 24


@pytest.fixture(scope="module")
def stages_setup(tiny_model, tmp_path_factory):
    data = yaml.safe_load((ROOT / "examples" / "synthetic-cpu.yaml").read_text())
    data["model"]["checkpoint"] = str(tiny_model)
    data["synthetic"].update(ttft_ms=TTFT_MS, itl_ms=ITL_MS, source="python")
    data["serving"]["bls"] = "python"
    data["validation"]["load"]["output_tokens"] = {"mean": TOKENS, "stddev": 0}
    root = tmp_path_factory.mktemp("stages")
    spec = root / "synthetic.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    render_spec(spec, root / "model_repository")
    server = start_server(root / "model_repository", root / "tritonserver.log")
    yield spec, server
    server.stop()


def test_stages_add_up_to_the_client_e2e_at_every_level(stages_setup, tmp_path):
    spec, server = stages_setup
    proc = subprocess.run([sys.executable, "-m", "tritongen.cli", "loadtest", str(spec), "--url", server.grpc_url,
                           "--metrics-url", server.metrics_url, "--out", str(tmp_path), "--protocol", "grpc",
                           "--sweep", "1,4", "-t", "4", "--warmup", "1"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    summary = json.loads((tmp_path / "loadtest.json").read_text())
    assert [level["level"] for level in summary["levels"]] == [1, 4]
    for level in summary["levels"]:
        stages = level["stages"]
        by = {s["name"]: s for s in stages["stages"]}
        assert stages["called_model"] == "ensemble" and stages["requests"] > 0, stages
        e2e = level["metrics"]["e2e_ms"]["avg"]
        # The client's mean over the requests the server's reads cover: close to the window's.
        assert stages["client_e2e_ms"] == pytest.approx(e2e, rel=0.1)
        assert abs(stages["sum_ms"] - stages["client_e2e_ms"]) <= 0.1 * stages["client_e2e_ms"], stages
        assert stages["coverage"] == "", stages
        # The model's own timings: the configured pace, measured by the server.
        assert by["first token"]["ms"] == pytest.approx(TTFT_MS, rel=0.3), by["first token"]
        assert stages["per_token_ms"] == pytest.approx(ITL_MS, rel=0.3), stages
        assert by["per-token"]["ms"] == pytest.approx(stages["per_token_ms"] * (TOKENS - 1), rel=0.05)
        assert by["preprocessing"]["ms"] is not None and by["queue"]["ms"] is not None
        assert stages["dominant"] == "per-token"
        assert all(m["plausible"] for m in stages["models"])
    assert "dominant: per-token" in proc.stdout
    html = (tmp_path / "loadtest.html").read_text()
    assert "Where the time goes" in html and 'alt="Where the time goes"' in html


def test_dashboard_queries_what_a_real_tritonserver_exports(stages_setup):
    """The dashboard's Triton series and the synthetic runtime's are all in a served tritonserver's /metrics, and
    so is every name of the declared Triton list (the GPU list cannot run here)."""
    from tritongen.deploy import dashboard as dash
    from tritongen.loadtests.prom import scrape

    _, server = stages_setup
    exported = {name for name, _ in scrape(server.metrics_url).values}
    board = dash.dashboard("x", "synthetic", "server_group", frontend=False, gpu=False, called_model="ensemble")
    used = set().union(*map(dash.series_names, dash.queries(board)))
    assert used <= exported, used - exported
    assert set(dash.TRITON) | set(dash.RUNTIME_SERIES["synthetic"].names) <= exported
