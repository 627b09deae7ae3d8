"""NVIDIA's AIPerf (the benchmark client on PyPI) against the OpenAI frontend on the real tritonserver.

AIPerf pins its own dependencies, so it lives in a virtual environment of its own:
    python3 -m venv /tmp/aiperf-venv && /tmp/aiperf-venv/bin/pip install aiperf
and the tests find it through $AIPERF (the executable) or PATH; without it they skip. Each run takes ~1 min on
2 cores (AIPerf's start-up is most of it). The tiny demo model is random: a prompt whose first token is the end
token gets an empty completion, which AIPerf counts as an error, so the runs send `ignore_eos`, as AIPerf's own
docs do for a fixed output length.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

pytestmark = pytest.mark.integration

AIPERF = os.environ.get("AIPERF") or shutil.which("aiperf")
if not AIPERF:
    pytest.skip("aiperf is not installed (set AIPERF=/path/to/aiperf; see this module's docstring)",
                allow_module_level=True)
MODEL = "tiny-cpu"


@pytest.fixture(scope="module")
def frontend(triton, tiny_repo):
    from tritongen.frontend.server import FrontendServer
    from tritongen.plan.frontend import FrontendPlan

    config = FrontendPlan.read(tiny_repo).model_copy(update={"port": 0})
    with FrontendServer(config, triton.grpc_url) as server:
        yield server, config.route(MODEL).default_max_tokens


@pytest.mark.parametrize("flags", [
    [],  # AIPerf's defaults: non-streamed chat, client-side token counts
    ["--streaming", "--use-server-token-count", "--per-chunk-usage"],  # usage chunks, continuous_usage_stats
], ids=["defaults", "server-token-count"])
def test_aiperf_runs_without_errors(frontend, tiny_model, tmp_path, flags):
    server, max_tokens = frontend
    out = tmp_path / "aiperf"
    proc = subprocess.run([AIPERF, "profile", "-m", MODEL, "--url", f"http://{server.url}", "--tokenizer",
                           str(tiny_model), "--request-count", "4", "--extra-inputs", "ignore_eos:true",
                           "--ui", "none", "--artifact-dir", str(out), *flags],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads((out / "profile_export_aiperf.json").read_text())
    assert result["completed_request_count"]["avg"] == 4 and not result.get("error_summary"), result
    assert not (result.get("error_request_count") or {}).get("avg"), result["error_summary"]
    if "--use-server-token-count" in flags:
        # ignore_eos: every request ran to the route's token limit, as the server counted it.
        lengths = result["output_sequence_length"]
        assert lengths["min"] == lengths["max"] == max_tokens, lengths
        assert result["time_to_first_token"]["avg"] > 0
