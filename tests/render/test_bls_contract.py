"""Every input of tensorrt_llm_bls and the ensemble reaches the LLM as the TensorRT-LLM backend expects it.

A probe stands in for the `tensorrt_llm` model under the config tritongen renders (tests/fixtures/probe_llm): the
real tritonserver checks each tensor the BLS sends against the backend's declared names, types and shapes (a
[1] where [-1,1] is declared is refused), and the probe records what arrived. The expected wiring is NVIDIA's
ensemble (contract.NVIDIA_ENSEMBLE_STEPS). Every declared output of the LLM must come back unchanged. Both BLS
implementations run it: the native backend (tritongen_bls, the default) and the python model (`serving.bls: python`).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from streaming_text import ROOT, grpc_responses, render_repo, start_server
from tritongen import contract

pytestmark = pytest.mark.integration
PROBE = ROOT / "tests" / "fixtures" / "probe_llm" / "model.py"
ENTRY_POINTS = ("ensemble", "tensorrt_llm_bls")

# A value of each optional input, distinct enough to recognise where it lands.
VALUES = {
    "decoder_text_input": np.array([[b"decoder text"]], np.object_),
    "num_return_sequences": np.array([[2]], np.int32), "bad_words": np.array([[b"fox"]], np.object_),
    "stop_words": np.array([[b"dog", b"cat"]], np.object_), "exclude_input_in_output": np.array([[True]]),
    "end_id": np.array([[11]], np.int32), "pad_id": np.array([[12]], np.int32), "top_k": np.array([[13]], np.int32),
    "top_p": np.array([[0.75]], np.float32), "temperature": np.array([[0.5]], np.float32),
    "length_penalty": np.array([[1.25]], np.float32), "repetition_penalty": np.array([[1.5]], np.float32),
    "min_tokens": np.array([[2]], np.int32), "presence_penalty": np.array([[0.125]], np.float32),
    "frequency_penalty": np.array([[0.375]], np.float32), "seed": np.array([[14]], np.uint64),
    "return_log_probs": np.array([[True]]), "return_context_logits": np.array([[True]]),
    "return_generation_logits": np.array([[True]]), "return_perf_metrics": np.array([[True]]),
    "return_num_input_tokens": np.array([[True]]), "return_num_output_tokens": np.array([[True]]),
    "beam_width": np.array([[1]], np.int32),
    "prompt_embedding_table": np.arange(8, dtype=np.float16).reshape(1, 2, 4),
    "prompt_table_extra_id": np.array([[15]], np.uint64), "prompt_vocab_size": np.array([[2]], np.int32),
    "embedding_bias_words": np.array([[b"quick"]], np.object_),
    "embedding_bias_weights": np.array([[2.5]], np.float32), "lora_task_id": np.array([[16]], np.uint64),
    "lora_weights": np.arange(12, dtype=np.float16).reshape(1, 2, 6),
    "lora_config": np.arange(6, dtype=np.int32).reshape(1, 2, 3),
    "guided_decoding_guide_type": np.array([[b"json"]], np.object_),
    "guided_decoding_guide": np.array([[b"{}"]], np.object_),
}
# Inputs that only make sense with a model tritongen does not render: refused, naming the input.
REFUSED = {"num_draft_tokens": np.array([[2]], np.int32), "use_draft_logits": np.array([[True]])}
# ensemble/BLS input -> tensorrt_llm input it reaches unchanged, as NVIDIA's ensemble wires it
DIRECT = {source: target for target, source in contract.NVIDIA_ENSEMBLE_STEPS[1][1].items()
          if not source.startswith("_")}
RESHAPED = {t.name for t in contract.TENSORRT_LLM_INPUTS if t.reshape_scalar}
# inputs that preprocessing turns into another tensorrt_llm input
THROUGH_PREPROCESSING = {"text_input": "input_ids", "max_tokens": "request_output_len", "bad_words": "bad_words_list",
                         "stop_words": "stop_words_list", "embedding_bias_words": "embedding_bias",
                         "embedding_bias_weights": "embedding_bias", "decoder_text_input": "decoder_input_ids",
                         "end_id": "end_id", "pad_id": "pad_id", "prompt_table_extra_id": "prompt_table_extra_ids"}


@pytest.fixture(scope="module", params=["native", "python"])
def probed(request, tmp_path_factory, tiny_model):
    tmp = tmp_path_factory.mktemp(f"probe-{request.param}")
    repo = render_repo(tiny_model, tmp / "repo", bls=request.param)
    backend = (repo / "tensorrt_llm_bls" / "config.pbtxt").read_text()
    assert f'backend: "{"tritongen_bls" if request.param == "native" else "python"}"' in backend
    shutil.copy(PROBE, repo / "tensorrt_llm" / "1" / "model.py")
    server = start_server(repo, tmp / "tritonserver.log")
    yield server, repo / "tensorrt_llm" / "probe.jsonl"
    server.stop()


def _received(log: Path) -> list[dict]:
    records = [json.loads(line) for line in log.read_text().splitlines()]
    log.unlink()
    return records


def _request(stream: bool, **extra) -> dict:
    return {"text_input": np.array([[b"The quick brown fox"]], np.object_), "max_tokens": np.array([[3]], np.int32),
            "stream": np.array([[stream]]), **extra}


def test_the_expected_wiring_covers_every_input():
    names = {t.name for t in contract.BLS_INPUTS}
    assert {t.name for t in contract.ENSEMBLE_INPUTS} <= names
    assert names == {"text_input", "max_tokens", "stream"} | set(VALUES) | set(REFUSED)
    assert set(VALUES) | {"text_input", "max_tokens", "stream"} == set(DIRECT) | set(THROUGH_PREPROCESSING)


@pytest.mark.parametrize("model", ENTRY_POINTS)
@pytest.mark.parametrize("stream", [False, True])
def test_every_input_reaches_the_llm_with_the_backends_shape(probed, model, stream):
    server, log = probed
    declared = {t.name for t in (contract.ENSEMBLE_INPUTS if model == "ensemble" else contract.BLS_INPUTS)}
    inputs = {k: v for k, v in VALUES.items() if k in declared}
    responses = grpc_responses(server.grpc_url, model, _request(stream, **inputs))
    (llm,) = [r["inputs"] for r in _received(log) if "stop" not in r["inputs"]]
    for name, value in inputs.items():
        if name in DIRECT:
            got = llm[DIRECT[name]]
            # tritonserver accepted the tensor against the declared dims; a `reshape: []` input then reaches
            # the model as [batch].
            expected = value.reshape(1) if DIRECT[name] in RESHAPED else value.reshape(1, *value.shape[1:])
            assert got["shape"] == list(expected.shape), name
            want = [v.decode() if isinstance(v, bytes) else v for v in expected.reshape(-1)[:8].tolist()]
            assert got["values"] == want, name
    assert llm["streaming"]["values"] == [stream]
    assert llm["input_ids"]["shape"][0] == 1 and llm["request_output_len"]["values"] == [3]
    assert llm["end_id"]["values"] == [11] and llm["pad_id"]["values"] == [12]
    assert llm["bad_words_list"]["shape"][:2] == [1, 2] and llm["stop_words_list"]["shape"][:2] == [1, 2]
    assert llm["embedding_bias"]["shape"][0] == 1 and llm["embedding_bias"]["sum"] > 0
    assert llm["decoder_input_ids"]["shape"][0] == 1 and llm["prompt_table_extra_ids"]["shape"][0] == 1
    # Every output the LLM returned comes back unchanged; text_output is one string per sequence, 1-D.
    outputs = _probe_outputs()
    llm_responses = [r for r in responses if r.as_numpy("cum_log_probs") is not None]
    assert len(llm_responses) == (3 if stream else 1)
    for response in llm_responses:
        for name, (dtype, value) in outputs.items():
            np.testing.assert_array_equal(response.as_numpy(name), np.array(value, dtype), err_msg=name)
    assert all(r.as_numpy("text_output").shape == (1,) for r in responses)


def _probe_outputs() -> dict:
    """OUTPUTS of the probe model, read from its source (it imports the python backend's utils)."""
    import sys
    import types

    sys.modules.setdefault("triton_python_backend_utils",
                           types.SimpleNamespace(TRITONSERVER_RESPONSE_COMPLETE_FINAL=1))
    namespace: dict = {}
    exec(compile(PROBE.read_text(), str(PROBE), "exec"), namespace)
    return namespace["OUTPUTS"]


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_draft_model_inputs_are_refused_by_name(probed, name):
    server, log = probed
    with pytest.raises(RuntimeError, match=name):
        grpc_responses(server.grpc_url, "tensorrt_llm_bls", _request(True, **{name: REFUSED[name]}))
    assert not log.exists() or not _received(log)  # refused before anything reached the LLM
