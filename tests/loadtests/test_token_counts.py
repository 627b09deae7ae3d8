"""The `num_output_tokens` convention: per response, summed over a request's responses.

What NVIDIA's code does was read upstream and is recorded, with files and commits, in
tests/fixtures/nvidia/trtllm-1.2.1.json (`num_output_tokens`). The unit tests pin tritongen's aggregation (load-test
samples, the OpenAI frontend's usage) to it; the integration tests check, on the real tritonserver serving the
hf tiny model, that the `tensorrt_llm` model counts the way the C++ backend does and that every path's total equals
max_tokens, streamed or not.
"""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from streaming_text import grpc_responses
from tritongen import client
from tritongen.frontend.engine import Counts, Delta
from tritongen.loadtests.samples import Sample

FACTS = json.loads((Path(__file__).parents[1] / "fixtures" / "nvidia" / "trtllm-1.2.1.json").read_text())
COUNTS = FACTS["num_output_tokens"]
N = 9  # max_tokens of the integration requests, forced with min_tokens


def _count_params() -> dict:
    """What the load test's and the OpenAI frontend's requests ask for beside the prompt (tritongen.requests.COUNTS)."""
    from tritongen.requests import COUNTS

    return dict(COUNTS)


def _request_total(per_response: list[int]) -> int:
    """A request's output tokens from its responses' num_output_tokens, under the convention recorded from the C++
    backend's code (tests/fixtures/nvidia/trtllm-1.2.1.json): summed when each response counts its own tokens,
    the last value when each counts all so far."""
    convention = COUNTS["cpp_backend"]["convention"]
    assert convention in ("per_response", "cumulative"), convention
    return sum(per_response) if convention == "per_response" else per_response[-1]


def test_load_test_samples_aggregate_counts_as_the_backend_reports_them():
    per_response = [1, 3, 0, 2]  # tokens carried by each streamed response (a response may carry none)
    s = Sample.begin("r", "grpc", input_tokens=4, level=1)
    for i, n in enumerate(per_response):
        s.mark_response(now=s.send_time + 0.1 * (i + 1), tokens=n)
    s.mark_response(now=s.send_time + 0.5)  # the flags-only final response carries no count
    assert s.output_tokens == _request_total(per_response)
    assert [n for _, n in s.token_arrivals()] == [1, 3, 2]
    assert sum(n for _, n in s.token_arrivals()) == s.output_tokens


def test_openai_usage_aggregates_counts_as_the_backend_reports_them():
    counts = Counts()
    for n in (2, 1, 3):
        counts.add(Delta("x", output_tokens=n, input_tokens=5, final=False))
    assert counts.completion_tokens == _request_total([2, 1, 3]) and counts.prompt_tokens == 5


def test_clients_keep_the_prompt_out_of_the_count():
    # A non-streamed response that repeats the prompt counts it too (cpp_backend.non_streaming), so every client
    # asks the server to leave it out; the integration tests below check the counts on the real server.
    params = _count_params()
    assert params == {**params, "return_num_output_tokens": True, "exclude_input_in_output": True}


# --- the real server (hf runtime, tiny model) --------------------------------------------------------------------

def _output_counter(server) -> float:
    text = urllib.request.urlopen(server.metrics_url, timeout=10).read().decode()
    match = re.search(r'^tritongen_llm_output_tokens_total\{[^}]*model="tensorrt_llm"[^}]*\} (\S+)$', text,
                      re.MULTILINE)
    assert match, "tritongen_llm_output_tokens_total not exported"
    return float(match.group(1))


def _llm(prompt_ids: list[int], *, stream: bool, exclude: bool) -> dict:
    return {"input_ids": np.array([prompt_ids], np.int32), "input_lengths": np.array([[len(prompt_ids)]], np.int32),
            "request_output_len": np.array([[N]], np.int32), "min_tokens": np.array([[N]], np.int32),
            "streaming": np.array([[stream]]), "exclude_input_in_output": np.array([[exclude]]),
            "return_num_output_tokens": np.array([[True]]), "return_num_input_tokens": np.array([[True]])}


def _pairs(results) -> list[tuple[int, int]]:
    """(ids in output_ids, num_output_tokens) of each response that carries tokens."""
    return [(int(r.as_numpy("output_ids").size), int(r.as_numpy("num_output_tokens").reshape(-1)[0]))
            for r in results if r.as_numpy("output_ids") is not None]


@pytest.mark.integration
def test_tensorrt_llm_counts_the_ids_of_each_response_as_the_cpp_backend_does(triton):
    prompt = [5, 6, 7, 8]
    before = _output_counter(triton)
    streamed = _pairs(grpc_responses(triton.grpc_url, "tensorrt_llm", _llm(prompt, stream=True, exclude=False)))
    assert len(streamed) > 1 and all(ids == count for ids, count in streamed)
    assert sum(count for _, count in streamed) == N  # streamed responses never repeat the prompt

    whole = _pairs(grpc_responses(triton.grpc_url, "tensorrt_llm", _llm(prompt, stream=False, exclude=True)))
    assert whole == [(N, N)]
    # Not excluded, a whole response's count includes the prompt (the C++ backend's value); the server's
    # output-token counter does not, as the backend's own metric subtracts it.
    repeated = _pairs(grpc_responses(triton.grpc_url, "tensorrt_llm", _llm(prompt, stream=False, exclude=False)))
    assert repeated == [(len(prompt) + N, len(prompt) + N)]
    assert _output_counter(triton) - before == 3 * N


@pytest.mark.integration
@pytest.mark.parametrize("model", ["ensemble", "tensorrt_llm_bls"])
def test_streamed_counts_sum_to_the_unstreamed_count_and_max_tokens(triton, model):
    text = {"text_input": np.array([[b"Counting tokens the way Triton does"]], np.object_),
            "max_tokens": np.array([[N]], np.int32), "min_tokens": np.array([[N]], np.int32),
            "return_num_output_tokens": np.array([[True]]), "exclude_input_in_output": np.array([[True]])}

    def counts(stream: bool) -> list[int]:
        results = grpc_responses(triton.grpc_url, model, {**text, "stream": np.array([[stream]])})
        return [int(r.as_numpy("num_output_tokens").reshape(-1)[0]) for r in results
                if r.as_numpy("num_output_tokens") is not None]

    streamed, whole = counts(True), counts(False)
    assert len(streamed) > 1 and len(whole) == 1
    assert sum(streamed) == whole[0] == N
    # The same over HTTP generate (one JSON response), as the load test's `http` protocol reads it.
    body = json.dumps(client.request_body("Counting tokens the way Triton does", N, stream=False, min_tokens=N,
                                          **_count_params())).encode()
    request = urllib.request.Request(f"http://{triton.http_url}/v2/models/{model}/generate", body,
                                     {"Content-Type": "application/json"})
    reply = json.loads(urllib.request.urlopen(request, timeout=120).read())
    assert int(np.asarray(reply["num_output_tokens"]).reshape(-1)[0]) == N
