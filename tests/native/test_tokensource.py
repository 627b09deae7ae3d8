"""The synthetic runtime's native token source (generator/tritongen/native/tokensource/) on the real tritonserver:
the same responses as the python model it stands in for, cancellation, stop, bad requests, and its token counter
against the client's count. One server holds both: `tensorrt_llm` (native) and `tensorrt_llm_python` (the python
model, copied from a repository rendered with synthetic.source: python)."""

from __future__ import annotations

import queue
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from specs import apply_overrides, render_spec
from streaming_text import grpc_responses, grpc_tensor, start_server

ROOT = Path(__file__).resolve().parents[2]
N = 12


def _spec(tiny_model: Path, out: Path, **overrides) -> Path:
    data = yaml.safe_load((ROOT / "examples" / "synthetic-cpu.yaml").read_text())
    data["model"]["checkpoint"] = str(tiny_model)
    apply_overrides(data, {"synthetic.ttft_ms": 5, "synthetic.itl_ms": 2, **overrides})
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


def test_the_synthetic_runtime_renders_the_native_source_by_default(tiny_model, tmp_path):
    native = tmp_path / "native"
    render_spec(_spec(tiny_model, tmp_path / "native.yaml"), native)
    assert 'backend: "tritongen_tokensource"' in (native / "tensorrt_llm" / "config.pbtxt").read_text()
    assert sorted(p.name for p in (native / "tensorrt_llm" / "1").iterdir()) == [".keep"]
    python = tmp_path / "python"
    render_spec(_spec(tiny_model, tmp_path / "python.yaml", **{"synthetic.source": "python"}), python)
    assert 'backend: "python"' in (python / "tensorrt_llm" / "config.pbtxt").read_text()
    assert (python / "tensorrt_llm" / "1" / "model.py").is_file()
    from tritongen import native as native_backends

    # Both render the native BLS (the default text path); only the native source adds the token source.
    assert native_backends.used_by(native) == ("tritongen_bls", "tritongen_tokensource")
    assert native_backends.used_by(python) == ("tritongen_bls",)


@pytest.fixture(scope="module")
def source_server(tiny_model, tmp_path_factory):
    base = tmp_path_factory.mktemp("tokensource")
    repo = base / "model_repository"
    render_spec(_spec(tiny_model, base / "native.yaml"), repo)
    python = base / "python_repository"
    render_spec(_spec(tiny_model, base / "python.yaml", **{"synthetic.source": "python"}), python)
    shutil.copytree(python / "tensorrt_llm", repo / "tensorrt_llm_python")
    config = repo / "tensorrt_llm_python" / "config.pbtxt"
    config.write_text(config.read_text().replace('name: "tensorrt_llm"', 'name: "tensorrt_llm_python"', 1))
    server = start_server(repo, base / "tritonserver.log")
    yield server
    server.stop()


def _inputs(n: int = N, prompt=(5, 6, 7), **extra) -> dict:
    return {"input_ids": np.array([prompt], np.int32), "input_lengths": np.array([[len(prompt)]], np.int32),
            "request_output_len": np.array([[n]], np.int32), **extra}


def _summary(results) -> list[tuple]:
    """Each response as (output_ids, sequence_length, num_input_tokens, num_output_tokens), None where absent."""
    def value(r, name):
        array = r.as_numpy(name)
        return None if array is None else array.reshape(-1).tolist()
    return [tuple(value(r, name) for name in ("output_ids", "sequence_length", "num_input_tokens",
                                               "num_output_tokens")) for r in results]


@pytest.mark.integration
@pytest.mark.parametrize("flags", [
    {"streaming": np.array([[True]]), "return_num_output_tokens": np.array([[True]]),
     "return_num_input_tokens": np.array([[True]])},
    {"streaming": np.array([[True]])},
    {"streaming": np.array([[False]]), "return_num_output_tokens": np.array([[True]])},
], ids=["streamed-with-counts", "streamed", "one-response"])
def test_native_responses_equal_the_python_models(source_server, flags):
    inputs = _inputs(**flags)
    native = _summary(grpc_responses(source_server.grpc_url, "tensorrt_llm", inputs))
    python = _summary(grpc_responses(source_server.grpc_url, "tensorrt_llm_python", inputs))
    assert native == python
    ids = [i for ids, *_ in native for i in ids]
    assert len(ids) == N and len(native) == (N if flags["streaming"][0][0] else 1)
    # The id cycle starts at the prompt length and skips the lowest (special) ids.
    assert ids[0] > 3 and ids == list(range(ids[0], ids[0] + N))


def _stream(url: str):
    import tritonclient.grpc as grpcclient

    results: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(url)
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    return client, results


def _send(client, inputs: dict, request_id: str = "") -> None:
    client.async_stream_infer("tensorrt_llm", [grpc_tensor(k, v) for k, v in inputs.items()],
                              request_id=request_id, enable_empty_final_response=True)


def _metrics(server) -> dict[str, float]:
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(server.metrics_url, timeout=10).read().decode()
    return {s.name: s.value for family in text_string_to_metric_families(text) for s in family.samples
            if s.name.startswith("tritongen_llm_") and s.labels.get("model") == "tensorrt_llm"}


def _wait_idle(server, timeout: float = 10.0) -> dict[str, float]:
    deadline = time.monotonic() + timeout
    while True:
        metrics = _metrics(server)
        if metrics.get("tritongen_llm_active_requests") == 0 or time.monotonic() > deadline:
            return metrics
        time.sleep(0.05)


@pytest.mark.integration
def test_stop_ends_the_request_in_flight_with_a_final_response(source_server):
    streaming = {"streaming": np.array([[True]])}
    client, results = _stream(source_server.grpc_url)
    stopper, stop_results = _stream(source_server.grpc_url)
    try:
        _send(client, _inputs(5000, **streaming), request_id="to-stop")
        result, error = results.get(timeout=30)
        assert error is None and result.as_numpy("output_ids") is not None
        _send(stopper, _inputs(1, stop=np.array([[True]])), request_id="to-stop")
        result, error = stop_results.get(timeout=30)
        assert error is None and result.get_response().parameters["triton_final_response"].bool_param
        tokens = 1
        while True:
            result, error = results.get(timeout=30)
            assert error is None
            if result.as_numpy("output_ids") is not None:
                tokens += result.as_numpy("output_ids").size
            if result.get_response().parameters["triton_final_response"].bool_param:
                break
        assert result.as_numpy("output_ids") is None and tokens < 5000  # a flags-only final, well before the end
    finally:
        client.stop_stream(cancel_requests=True)
        stopper.stop_stream(cancel_requests=True)
    assert _wait_idle(source_server)["tritongen_llm_active_requests"] == 0


@pytest.mark.integration
def test_cancelled_requests_stop_and_free_the_source(source_server):
    client, results = _stream(source_server.grpc_url)
    for i in range(4):
        _send(client, _inputs(5000, streaming=np.array([[True]])), request_id=f"cancel-{i}")
    for _ in range(8):
        result, error = results.get(timeout=30)
        assert error is None
    client.stop_stream(cancel_requests=True)
    idle = _wait_idle(source_server)
    assert idle["tritongen_llm_active_requests"] == 0
    # A probe of 3 tokens run to its end, instead of a fixed wait: the counter then grows by exactly the probe's
    # tokens unless a cancelled request still produced some.
    assert len(grpc_responses(source_server.grpc_url, "tensorrt_llm", _inputs(3))) == 1
    assert _metrics(source_server)["tritongen_llm_output_tokens_total"] == \
        idle["tritongen_llm_output_tokens_total"] + 3


@pytest.mark.integration
@pytest.mark.parametrize("extra, message", [
    ({"request_output_len": np.array([[0]], np.int32)}, "request_output_len: must be >= 1 (got 0)"),
    ({"beam_width": np.array([[2]], np.int32)}, "beam_width: 2 > 1 is not supported by the synthetic runtime"),
    ({"num_return_sequences": np.array([[3]], np.int32)}, "num_return_sequences: 3 > 1 is not supported"),
])
def test_a_bad_request_gets_an_error_naming_the_input(source_server, extra, message):
    with pytest.raises(RuntimeError, match=message.replace("(", r"\(").replace(")", r"\)")):
        grpc_responses(source_server.grpc_url, "tensorrt_llm", {**_inputs(), **extra})
    # ... and the source still serves the next request.
    assert len(grpc_responses(source_server.grpc_url, "tensorrt_llm", _inputs(3))) == 1


@pytest.mark.integration
@pytest.mark.parametrize("model", ["tensorrt_llm", "tensorrt_llm_python"])
def test_a_guide_is_refused_naming_it_and_an_empty_guide_type_is_none(source_server, model):
    # The synthetic runtime refuses guided decoding (plan: structured_output.guide_types empty, with the reason).
    guide = {"guided_decoding_guide_type": np.array([[b"json"]], np.object_)}
    with pytest.raises(RuntimeError, match=r"\[bad_request:guided_decoding_guide_type\] .*not supported by the "
                                           "synthetic runtime"):
        grpc_responses(source_server.grpc_url, model, {**_inputs(), **guide})
    empty = {"guided_decoding_guide_type": np.array([[b""]], np.object_)}
    assert len(grpc_responses(source_server.grpc_url, model, _inputs(3, **empty))) == 1


@pytest.mark.integration
def test_token_counter_equals_the_clients_count(source_server):
    before = _wait_idle(source_server)["tritongen_llm_output_tokens_total"]
    client_tokens = 0
    for n, streaming in ((7, True), (9, False), (N, True)):
        for r in grpc_responses(source_server.grpc_url, "tensorrt_llm", _inputs(n, streaming=np.array([[streaming]]))):
            client_tokens += r.as_numpy("output_ids").size
    # Through the text paths too: the ensemble and the BLS call the native source.
    text = {"text_input": np.array([["count me".encode()]], np.object_), "max_tokens": np.array([[N]], np.int32),
            "stream": np.array([[True]]), "return_num_output_tokens": np.array([[True]])}
    for model in ("ensemble", "tensorrt_llm_bls"):
        for r in grpc_responses(source_server.grpc_url, model, text):
            if r.as_numpy("num_output_tokens") is not None:
                client_tokens += int(r.as_numpy("num_output_tokens").sum())
    after = _wait_idle(source_server)["tritongen_llm_output_tokens_total"]
    assert client_tokens == 7 + 9 + N + 2 * N and after - before == client_tokens


@pytest.mark.integration
@pytest.mark.parametrize("target", ["tensorrt_llm", "ensemble"])
def test_the_bench_client_sees_exact_text_and_the_servers_count(source_server, target):
    import sys

    sys.path.insert(0, str(ROOT / "bench"))
    import streamclient

    cfg = streamclient.Config(source_server.grpc_url, target, processes=1, streams=4, duration_s=1.0, warmup_s=0.5,
                              output_tokens=16, input_tokens=8)
    before = _wait_idle(source_server)["tritongen_llm_output_tokens_total"]
    result = streamclient.run(cfg, *streamclient.prepare(cfg), start_in=1.0)
    after = _wait_idle(source_server)["tritongen_llm_output_tokens_total"]
    assert result["errors"] == 0 and result["text_checked"] > 0
    assert result["text_exact"] == result["text_checked"] and result["tok_per_s"] > 0
    assert result["tokens_total"] == after - before
    assert result.get("ids_decoded_exact", True) is True


def test_the_bench_client_reports_a_text_that_differs():
    import struct
    import sys

    sys.path.insert(0, str(ROOT / "bench"))
    import streamclient

    prompt = streamclient.Prompt("p", [1, 2], expected_ids=[20, 21], expected_text=b"ab")
    cfg = streamclient.Config("unused", "ensemble")

    def record(*pieces: bytes):
        chunks = [struct.pack("<I", len(p)) + p for p in pieces]
        return (0, 1.0, [1.1, 1.2], [1, 1], chunks, None)

    good = streamclient._summarize_process(cfg, [record(b"a", b"b")], [prompt], (0.0, 9.0), [0.0, 1.0], 0.0, 0,
                                           False)
    bad = streamclient._summarize_process(cfg, [record(b"a", b"c")], [prompt], (0.0, 9.0), [0.0, 1.0], 0.0, 0, False)
    assert (good["checked"], good["exact"], good["mismatch"]) == (1, 1, None)
    assert (bad["checked"], bad["exact"], bad["mismatch"]) == (1, 0, {"prompt": 0, "got": "ac"})
    assert streamclient.synthetic_ids(3, 4, vocab_size=20, end_id=2, pad_id=17) == [16, 18, 19, 16]


def test_serving_a_native_repository_without_built_backends_is_exit_3(tiny_model, tmp_path, monkeypatch):
    from tritongen import native
    from tritongen.errors import EnvironmentMissing
    from tritongen.serve import backend_dir

    monkeypatch.setenv(native.ENV_DIR, str(tmp_path / "nothing-built"))
    python = tmp_path / "python"
    render_spec(_spec(tiny_model, tmp_path / "python.yaml", **{"synthetic.source": "python", "serving.bls": "python"}),
                python)
    assert native.used_by(python) == ()
    backend_dir(tmp_path / "python-backends", native.used_by(python))  # python models only: nothing to build
    repo = tmp_path / "native"
    render_spec(_spec(tiny_model, tmp_path / "native.yaml", **{"serving.bls": "python"}), repo)
    with pytest.raises(EnvironmentMissing) as err:
        backend_dir(tmp_path / "backends", native.used_by(repo))
    assert err.value.exit_code == 3
    lib = tmp_path / "nothing-built" / "tritongen_tokensource" / "libtriton_tritongen_tokensource.so"
    assert str(err.value) == (
        f"native backend tritongen_tokensource: {lib} is not built (TRITONGEN_BACKEND_DIR names "
        f"{tmp_path / 'nothing-built'}); build them there with `{native.BUILD_SCRIPT} --prefix "
        f"{tmp_path / 'nothing-built'}`, or unset TRITONGEN_BACKEND_DIR to use the ones installed with tritongen")
    assert not (tmp_path / "backends").exists()


def test_a_deployed_synthetic_runtime_serves_the_native_source(tiny_model, tmp_path):
    from tritongen.deploy.common import prepare

    data = yaml.safe_load((ROOT / "tests" / "fixtures" / "specs" / "tiny-hf-gpu.yaml").read_text())
    data["model"]["checkpoint"] = str(tiny_model)
    data["runtime"] = "synthetic"
    spec = tmp_path / "synthetic-gpu.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    dep = prepare(spec, inventory=str(ROOT / "tests" / "fixtures" / "inventories" / "mixed-h200-node.yaml"))
    # The serving image builds the native backends (deploy/serving_image.py), so a deployment keeps the C++ source.
    assert dep.plan.runtime_settings.source == "native"
    assert b'backend: "tritongen_tokensource"' in dep.repository["tensorrt_llm/config.pbtxt"]
    assert "tensorrt_llm/1/model.py" not in dep.repository
