"""serving.stream_interval: tokens per streamed response of the hf and synthetic tensorrt_llm models.

Checked on the real tritonserver with the hf tiny model: the responses carry N tokens each (the last one the rest),
their per-response counts sum to max_tokens, the streamed text equals the completion, and a load test's client
total equals the server's counter. The benchmark of what it saves is bench/serving_path.py --stream-interval.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from specs import render_spec
from streaming_text import grpc_responses, start_server
from tritongen.errors import SpecError
from tritongen.spec import parse_spec

ROOT = Path(__file__).resolve().parents[2]
INTERVAL = 4
N = 10  # max_tokens, forced with min_tokens: responses of 4, 4 and 2 tokens


def test_engine_runtimes_refuse_an_interval_they_cannot_honour():
    for runtime in ("tensorrtllm", "trtllm"):
        with pytest.raises(SpecError) as err:
            parse_spec({"name": "x", "runtime": runtime, "model": {"checkpoint": "."}, "placement": {"device": "gpu"},
                        "serving": {"stream_interval": 2}})
        assert any(p.startswith("serving.stream_interval: (2) is honoured by the hf and synthetic runtimes only")
                   for p in err.value.problems), err.value.problems
    with pytest.raises(SpecError) as err:
        parse_spec({"name": "x", "model": {"checkpoint": "."}, "serving": {"stream_interval": 0}})
    assert err.value.problems[0].startswith("serving.stream_interval:")


@pytest.fixture(scope="module")
def chunked_spec(tiny_spec_path, tmp_path_factory) -> Path:
    data = yaml.safe_load(tiny_spec_path.read_text())
    data["serving"]["stream_interval"] = INTERVAL
    data["validation"]["load"]["output_tokens"] = {"mean": N, "stddev": 0}
    path = tmp_path_factory.mktemp("chunked") / "chunked.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def chunked_server(chunked_spec, tmp_path_factory):
    repo = tmp_path_factory.mktemp("chunked-repo") / "model_repository"
    assert render_spec(chunked_spec, repo).stream_interval == INTERVAL
    assert f'string_value: "{INTERVAL}"' in (repo / "tensorrt_llm" / "config.pbtxt").read_text()
    server = start_server(repo, repo.parent / "tritonserver.log")
    yield server
    server.stop()


@pytest.mark.integration
def test_responses_carry_interval_tokens_and_counts_sum(chunked_server):
    inputs = {"input_ids": np.array([[5, 6, 7]], np.int32), "input_lengths": np.array([[3]], np.int32),
              "request_output_len": np.array([[N]], np.int32), "min_tokens": np.array([[N]], np.int32),
              "streaming": np.array([[True]]), "return_num_output_tokens": np.array([[True]])}
    results = [r for r in grpc_responses(chunked_server.grpc_url, "tensorrt_llm", inputs)
               if r.as_numpy("output_ids") is not None]
    sizes = [int(r.as_numpy("output_ids").size) for r in results]
    counts = [int(r.as_numpy("num_output_tokens").reshape(-1)[0]) for r in results]
    assert sizes == [4, 4, 2] and counts == sizes


@pytest.mark.integration
@pytest.mark.parametrize("model", ["ensemble", "tensorrt_llm_bls"])
def test_chunked_stream_text_equals_the_completion(chunked_server, model):
    text = {"text_input": np.array([["Streams in chunks of four tokens: ünïcödé 汉字 🙂".encode()]], np.object_),
            "max_tokens": np.array([[N]], np.int32), "min_tokens": np.array([[N]], np.int32),
            "return_num_output_tokens": np.array([[True]]), "exclude_input_in_output": np.array([[True]])}

    def run(stream: bool) -> tuple[str, int, int]:
        results = grpc_responses(chunked_server.grpc_url, model, {**text, "stream": np.array([[stream]])})
        pieces = [r.as_numpy("text_output") for r in results if r.as_numpy("text_output") is not None]
        joined = b"".join(bytes(p.reshape(-1)[0]) for p in pieces).decode()
        counts = [int(r.as_numpy("num_output_tokens").reshape(-1)[0]) for r in results
                  if r.as_numpy("num_output_tokens") is not None]
        return joined, sum(counts), len(pieces)

    streamed, streamed_count, pieces = run(True)
    whole, whole_count, _ = run(False)
    assert streamed == whole and streamed_count == whole_count == N
    assert pieces <= 1 + -(-N // INTERVAL)  # chunks of 4 (plus held-back text at most once)


@pytest.mark.integration
def test_load_test_counts_equal_the_servers_with_chunks(chunked_spec, chunked_server, tmp_path):
    out = tmp_path / "lt"
    proc = subprocess.run([sys.executable, "-m", "tritongen.cli", "loadtest", str(chunked_spec), "--url",
                           chunked_server.grpc_url, "--metrics-url", chunked_server.metrics_url, "--protocol", "grpc",
                           "-u", "2", "-t", "8", "--out", str(out)], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    level = json.loads((out / "loadtest.json").read_text())["levels"][0]
    assert level["metrics"]["request_count"] > 0
    assert level["metrics"]["output_tokens"]["max"] == level["metrics"]["output_tokens"]["min"] == N
    assert level["tokens"]["equal"] is True
