"""The synthetic runtime behind the real tritonserver, and the load modes that need a server: open loop, HTTP
token counts, cancellation freeing the server (runtime `synthetic`: exact token counts and timing, no model)."""

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
pytestmark = [pytest.mark.integration, pytest.mark.serial]  # the source's pace and the open loop's counts


def tritongen(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tritongen.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, check=False)


@pytest.fixture(scope="module")
def synthetic_spec(tiny_model, tmp_path_factory) -> Path:
    data = yaml.safe_load((ROOT / "examples" / "synthetic-cpu.yaml").read_text())
    data["model"]["checkpoint"] = str(tiny_model)
    data["validation"]["load"]["output_tokens"] = {"mean": 16, "stddev": 0}
    path = tmp_path_factory.mktemp("synthetic") / "synthetic.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def synthetic_server(synthetic_spec, tmp_path_factory):
    repo = tmp_path_factory.mktemp("synthetic-repo") / "model_repository"
    render_spec(synthetic_spec, repo)
    server = start_server(repo, repo.parent / "tritonserver.log")
    yield server
    server.stop()


def run(spec: Path, server, out: Path, *flags: str) -> dict:
    url = server.grpc_url if "grpc" in flags else server.http_url
    proc = tritongen("loadtest", str(spec), "--url", url, "--metrics-url", server.metrics_url, "--out", str(out),
                     *flags)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    return json.loads((out / "loadtest.json").read_text())


def test_synthetic_tokens_arrive_at_the_configured_pace(synthetic_spec, synthetic_server):
    import time

    from tritongen.client import stream_grpc

    synthetic = yaml.safe_load(synthetic_spec.read_text())["synthetic"]
    ttft, itl = synthetic["ttft_ms"] / 1000, synthetic["itl_ms"] / 1000
    sent = time.perf_counter()
    arrivals, chunks = [], []
    for chunk in stream_grpc(synthetic_server.grpc_url, "hello", 20, min_tokens=20):
        arrivals.append(time.perf_counter())
        chunks.append(chunk)
    assert len(chunks) == 20 and all(chunks)
    # The source never runs ahead of its schedule: the first token no sooner than TTFT, each next one no sooner
    # than ITL after it (a little slack for timer rounding); 19 gaps of ITL cannot take less than 19 x ITL.
    assert arrivals[0] - sent >= 0.9 * ttft, arrivals[0] - sent
    assert arrivals[-1] - arrivals[0] >= 0.9 * 19 * itl, arrivals[-1] - arrivals[0]
    # ... nor far behind it on an idle server (a source that ignored the pace, or slept a step per token twice).
    gaps = sorted(b - a for a, b in zip(arrivals, arrivals[1:]))
    assert gaps[len(gaps) // 2] < 3 * itl, gaps


def test_the_tools_ttft_is_the_first_tokens_time(synthetic_spec, synthetic_server, tmp_path):
    """The tool's TTFT and e2e, checked against bounds that only the server's own pace sets: the source sleeps TTFT
    before the first token and ITL before each next one, so a busy host can only make the true times longer. A
    direct measurement by a second client cannot serve here: beside other work the two clients' medians differed
    by 2x within one minute."""
    import numpy as np

    from tritongen.loadtests.samples import Sample

    synthetic = yaml.safe_load(synthetic_spec.read_text())["synthetic"]
    ttft_ms, itl_ms, tokens = synthetic["ttft_ms"], synthetic["itl_ms"], 16
    out = tmp_path / "out"
    summary = run(synthetic_spec, synthetic_server, out, "--protocol", "grpc", "-u", "1", "-t", "4", "--warmup", "0")
    m = summary["levels"][0]["metrics"]
    assert m["error_count"] == 0 and m["ttft_ms"]["count"] >= 5, m
    # Lower bounds: no request's first token before the source's TTFT, nor its last before the 15 ITLs after it
    # (a tool that stamped the first token at the stream's acknowledgement, or ended e2e at the first response).
    assert m["ttft_ms"]["min"] >= 0.95 * ttft_ms, m["ttft_ms"]
    assert m["e2e_ms"]["min"] >= 0.95 * (ttft_ms + (tokens - 1) * itl_ms), m["e2e_ms"]
    # A ratio within one run: the first token's time, not the last's. The server spaces the other 15 tokens
    # >= 150 ms after a 20 ms first one (ratio ~0.1); a TTFT stamped at the final response would be ~1.
    assert m["ttft_ms"]["p50"] < 0.5 * m["e2e_ms"]["p50"], (m["ttft_ms"], m["e2e_ms"])
    # The report summarizes the samples it kept: its median is that of their first responses (those sent inside
    # the 4 s window), each of which carried a token.
    samples = [Sample.from_dict(json.loads(line)) for f in (out / "samples").rglob("*.jsonl")
               for line in f.read_text().splitlines()]
    start = min(s.start_wall_s for s in samples)
    sent_in = [s for s in samples if s.ok and s.start_wall_s - start < 4]
    assert all(s.response_tokens[0] for s in sent_in)
    firsts = [s.response_times[0] * 1e3 for s in sent_in]
    assert (len(firsts), float(np.percentile(firsts, 50))) == (m["ttft_ms"]["count"],
                                                              pytest.approx(m["ttft_ms"]["p50"])), m["ttft_ms"]


def test_open_loop_http_counts_equal_the_servers(synthetic_spec, synthetic_server, tmp_path):
    summary = run(synthetic_spec, synthetic_server, tmp_path, "--protocol", "http", "--request-rate", "6",
                  "--arrival", "constant", "--max-concurrency", "8", "-t", "5", "--warmup", "1")
    level = summary["levels"][0]
    assert summary["load"]["mode"] == "open" and level["level"] == 6
    m = level["metrics"]
    assert m["error_count"] == 0 and (m["output_tokens"]["min"], m["output_tokens"]["max"]) == (16, 16)
    assert level["tokens"]["equal"] is True and level["tokens"]["client_output_tokens"] > 0
    # Constant arrivals at 6/s for 4 s of window: about 24 requests were sent inside it.
    assert 18 <= m["request_count"] <= 26
    assert m["schedule_lag_ms"]["count"] == m["request_count"]


def test_open_loop_grpc_at_a_low_rate_with_many_idle_slots(synthetic_spec, synthetic_server, tmp_path):
    # The default 64 concurrency slots at 4 requests/s: most gRPC streams sit idle. Under gevent each idle
    # stream's reader holds a hub thread; with gevent's default pool of 10 every response of the run would
    # arrive at once, ~20 s late (TTFT p50 ~24 s). And no request may go out after -t.
    out = tmp_path / "out"
    # At these settings the server's own TTFT is ~50 ms; a load generator whose idle readers starve the hub shows
    # p95 in seconds.
    summary = run(synthetic_spec, synthetic_server, out, "--protocol", "grpc", "--request-rate", "3",
                  "--arrival", "constant", "-t", "8", "--warmup", "1")
    m = summary["levels"][0]["metrics"]
    assert m["error_count"] == 0 and 18 <= m["request_count"] <= 22
    assert m["ttft_ms"]["p95"] < 1000, m["ttft_ms"]  # synthetic TTFT is 50 ms
    samples = [json.loads(line) for f in (out / "samples").rglob("*.jsonl") for line in f.read_text().splitlines()]
    assert len(samples) <= 3 * 8 + 1  # 3/s for 8 s: nothing sent after the run


def test_cancelled_streams_free_the_server(synthetic_spec, synthetic_server, tmp_path):
    # Long streams (200 tokens at 10 ms ITL, ~2 s), cancelled at 150 ms: the server must count the requests as
    # cancelled (not run them to their end) and end the level with no active request. The load test calls
    # `ensemble`, which is the BLS itself (serving.ensemble: bls), so a cancellation reaches the LLM.
    data = yaml.safe_load(synthetic_spec.read_text())
    data["validation"]["load"]["output_tokens"] = {"mean": 200, "stddev": 0}
    spec = tmp_path / "long.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    summary = run(spec, synthetic_server, tmp_path / "out", "--protocol", "grpc", "--request-rate", "4",
                  "--max-concurrency", "16", "--cancel-rate", "0.5", "--cancel-after-ms", "150", "-t", "5",
                  "--warmup", "1")
    level = summary["levels"][0]
    m = level["metrics"]
    assert summary["metadata"]["workload"]["model"] == "ensemble"
    assert m["cancelled_count"] > 0 and m["error_count"] == 0
    assert level["server_active_after"] == 0
    # Triton's own per-model failure counters do not see it (a decoupled python model's request counts as a
    # success when execute() returns), so the proof is the server's token counter: every request that ran to its
    # end made 200 tokens; each cancelled one stopped well before (at 150 ms plus up to one response of delay).
    bls = next(m for m in level["server_run"]["models"] if m["model"] == "ensemble")
    # The native BLS reports a cancelled request as a failure (at its final response), the python BLS as a success.
    requests = bls["request_success"] + sum(f["count"] for f in bls["request_failure"])
    assert 0 < level["tokens"]["server_output_tokens"] <= 200 * requests - 100 * m["cancelled_count"], level["tokens"]
    assert level["tokens"]["equal"] is None  # not comparable with cancellations


def test_synthetic_rejects_exclude_input_in_output_false_by_name(synthetic_server):
    import numpy as np

    from streaming_text import grpc_responses

    inputs = {"input_ids": np.array([[5, 6, 7]], np.int32), "input_lengths": np.array([[3]], np.int32),
              "request_output_len": np.array([[2]], np.int32)}
    assert len(grpc_responses(synthetic_server.grpc_url, "tensorrt_llm",
                              {**inputs, "exclude_input_in_output": np.array([[True]])})) == 1
    with pytest.raises(RuntimeError, match="exclude_input_in_output: false is not supported"):
        grpc_responses(synthetic_server.grpc_url, "tensorrt_llm",
                       {**inputs, "exclude_input_in_output": np.array([[False]])})
