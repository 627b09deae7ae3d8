"""hf.stream_flush_ms (hf runtime): a streamed request's tokens go out at most every N ms, and never more
than one response per request per decode step.

Checked on the real tritonserver with the hf tiny model: fewer responses than tokens, spaced by the flush period;
the chunks concatenate to the whole completion (token ids, and text through the ensemble and the ids path); the
per-response counts sum to the total; a load test's client total equals the server's counter.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import yaml

from specs import render_spec
from streaming_text import grpc_responses, start_server
from tritongen import client
from tritongen.errors import SpecError
from tritongen.spec import parse_spec

ROOT = Path(__file__).resolve().parents[2]
FLUSH_MS = 400
N = 16


def test_only_the_hf_runtime_takes_a_flush_period():
    with pytest.raises(SpecError) as err:
        parse_spec({"name": "x", "runtime": "synthetic", "model": {"checkpoint": "."},
                    "hf": {"stream_flush_ms": 50}})
    assert any(p.startswith("hf.stream_flush_ms: (50) is honoured by the hf runtime only")
               for p in err.value.problems), err.value.problems


@pytest.fixture(scope="module")
def flush_spec(tiny_spec_path, tmp_path_factory) -> Path:
    data = yaml.safe_load(tiny_spec_path.read_text())
    data.setdefault("hf", {})["stream_flush_ms"] = FLUSH_MS
    data["validation"]["load"]["output_tokens"] = {"mean": 8, "stddev": 0}
    path = tmp_path_factory.mktemp("flush") / "flush.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def flush_server(flush_spec, tmp_path_factory):
    repo = tmp_path_factory.mktemp("flush-repo") / "model_repository"
    assert render_spec(flush_spec, repo).runtime_settings.stream_flush_ms == FLUSH_MS
    assert f'string_value: "{FLUSH_MS}"' in (repo / "tensorrt_llm" / "config.pbtxt").read_text()
    server = start_server(repo, repo.parent / "tritonserver.log")
    yield server
    server.stop()


def _steps(server) -> float:
    text = urllib.request.urlopen(server.metrics_url, timeout=10).read().decode()
    return float(re.search(r"^tritongen_llm_steps_total{[^}]*} (\S+)$", text, re.MULTILINE).group(1))


@pytest.mark.integration
def test_flushed_chunks_concatenate_to_the_whole_completion(flush_server):
    inputs = {"input_ids": np.array([[5, 6, 7]], np.int32), "input_lengths": np.array([[3]], np.int32),
              "request_output_len": np.array([[N]], np.int32), "min_tokens": np.array([[N]], np.int32),
              "return_num_output_tokens": np.array([[True]]), "exclude_input_in_output": np.array([[True]])}
    steps = _steps(flush_server)
    started = time.monotonic()
    streamed = [r for r in grpc_responses(flush_server.grpc_url, "tensorrt_llm",
                                          {**inputs, "streaming": np.array([[True]])})
                if r.as_numpy("output_ids") is not None]
    elapsed = time.monotonic() - started
    steps = _steps(flush_server) - steps
    whole = grpc_responses(flush_server.grpc_url, "tensorrt_llm", {**inputs, "streaming": np.array([[False]])})
    ids = [t for r in streamed for t in r.as_numpy("output_ids").reshape(-1).tolist()]
    assert ids == whole[-1].as_numpy("output_ids").reshape(-1).tolist() and len(ids) == N
    counts = [int(r.as_numpy("num_output_tokens").reshape(-1)[0]) for r in streamed]
    assert counts == [int(r.as_numpy("output_ids").size) for r in streamed] and sum(counts) == N
    # At most one response per flush period (plus the first token at once and the final rest), and never more
    # than one per step.
    assert len(streamed) <= elapsed / (FLUSH_MS / 1000) + 2, (len(streamed), elapsed)
    assert len(streamed) <= steps


@pytest.mark.integration
def test_flushed_text_equals_the_whole_text_on_both_paths(flush_server):
    prompt = "Flushed text: ünïcödé 汉字 🙂"
    whole = client.generate_http(flush_server.http_url, prompt, N, min_tokens=N)
    streamed = "".join(client.stream_grpc(flush_server.grpc_url, prompt, N, min_tokens=N))
    codec = client.ids_codec(flush_server.grpc_url)
    ids_path = "".join(client.stream_ids(flush_server.grpc_url, codec, prompt, N, min_tokens=N))
    assert streamed.encode() == ids_path.encode() == whole.encode()


@pytest.mark.integration
def test_load_test_counts_equal_the_servers_with_a_flush_period(flush_spec, flush_server, tmp_path):
    out = tmp_path / "lt"
    proc = subprocess.run([sys.executable, "-m", "tritongen.cli", "loadtest", str(flush_spec), "--url",
                           flush_server.grpc_url, "--metrics-url", flush_server.metrics_url, "--protocol", "grpc",
                           "-u", "2", "-t", "8", "--out", str(out)], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    level = json.loads((out / "loadtest.json").read_text())["levels"][0]
    samples = [json.loads(line) for f in (out / "samples").rglob("*.jsonl") for line in f.read_text().splitlines()]
    assert samples and all(s["error"] is None and s["output_tokens"] == 8 for s in samples)
    assert level["tokens"]["equal"] is True
