"""The one request builder (tritongen.requests): every input it can set is the contract's, with the contract's data
type, and every client (`tritongen generate` and tritongen.client, the load test's users, the OpenAI frontend) sends
the same tensors for the same request, over gRPC and HTTP, on the text path and the ids path."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import typing
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest
from tritonclient.utils import serialize_byte_tensor

from specs import CharTokenizer
from tritongen import client, contract
from tritongen.requests import COUNTS, OPTIONAL_FIELDS, Request, grpc_tensors, llm_inputs, tensor_array
from tritongen.token_ids import ENCODED, Codec

ENSEMBLE = {t.name: t for t in contract.ENSEMBLE_INPUTS}
BLS = {t.name: t for t in contract.BLS_INPUTS}
LLM = {t.name: t for t in contract.TENSORRT_LLM_INPUTS}
# The Python type of a field -> the config data types it may carry.
KINDS = {str: {"TYPE_STRING"}, bool: {"TYPE_BOOL"}, int: {"TYPE_INT32", "TYPE_UINT64"}, float: {"TYPE_FP32"}}
# A config data type -> its numpy type and wire name, as tritonclient's triton_to_np_dtype maps them.
NUMPY = {"TYPE_STRING": (np.object_, "BYTES"), "TYPE_BOOL": (np.bool_, "BOOL"), "TYPE_INT32": (np.int32, "INT32"),
         "TYPE_UINT64": (np.uint64, "UINT64"), "TYPE_FP32": (np.float32, "FP32")}
PROMPT, MAX_TOKENS, SCHEMA = "Answer in JSON:", 24, '{"type":"object"}'
# Every field set, so a test over it covers every input the builder can send.
FULL = Request(PROMPT, MAX_TOKENS, True, ("\n\n", "END"), end_id=2, pad_id=0, min_tokens=3, temperature=0.5,
               top_k=7, top_p=0.9, presence_penalty=0.25, frequency_penalty=0.125, repetition_penalty=1.5, seed=11,
               beam_width=1, lora_task_id=2, guided_decoding_guide_type="json_schema", guided_decoding_guide=SCHEMA,
               exclude_input_in_output=True, return_num_input_tokens=True, return_num_output_tokens=True)


def _field_kind(annotation: str) -> type:
    """str, bool, int or float of a field's annotation (`int | None`, `tuple[str, ...]`)."""
    hint = eval(annotation, {"tuple": tuple})  # noqa: S307 - the dataclass's own annotations
    args = [a for a in typing.get_args(hint) if a is not type(None) and a is not Ellipsis] or [hint]
    return args[0]


def test_every_field_sets_the_ensemble_and_bls_input_of_its_name_with_the_contracts_type():
    assert {f.name for f in fields(Request)} == set(FULL.values())  # FULL sets every field
    for f in fields(Request):
        for table in (ENSEMBLE, BLS):  # the clients call both entry models
            assert f.name in table, f.name
            assert table[f.name].data_type in KINDS[_field_kind(f.type)], f.name
            assert table[f.name].data_type == ENSEMBLE[f.name].data_type, f.name
    for name, datatype, array in FULL.inputs():
        tensor = ENSEMBLE[name]
        assert (array.dtype, datatype) == NUMPY[tensor.data_type], name
        # batch 1, then the declared dims (a -1 holds as many values as were given)
        assert array.shape[0] == 1 and len(array.shape) == 1 + len(tensor.dims), name
        assert all(d == -1 or d == n for d, n in zip(tensor.dims, array.shape[1:])), name


def test_every_field_reaches_tensorrt_llm_on_the_ids_path_through_the_codec_or_the_wiring():
    passed_on = dict(contract.bls_wiring()["to_llm"])
    for f in fields(Request):
        assert (f.name in ENCODED) != (f.name in passed_on), f.name
    arrays = _codec().inputs(dataclasses.replace(FULL, beam_width=None))
    for name, array in arrays.items():
        assert name in LLM and array.dtype == NUMPY[LLM[name].data_type][0], name
    assert {passed_on[n] for n in FULL.values() if n in passed_on} - {"beam_width"} <= set(arrays)
    with pytest.raises(ValueError, match="beam_width"):
        _codec().inputs(FULL)


def test_an_unknown_keyword_is_refused_naming_the_known_ones():
    with pytest.raises(ValueError, match="unknown ensemble input 'best_of'; known: beam_width, end_id"):
        Request.of(PROMPT, 4, stream=False, best_of=2)
    assert "text_input" not in OPTIONAL_FIELDS and "lora_task_id" in OPTIONAL_FIELDS


def test_the_http_body_is_the_grpc_tensors_as_triton_reads_json():
    # Triton's generate extension makes each JSON field the input of its name, with the type the model declares.
    from_json = {name: tensor_array(ENSEMBLE[name], value) for name, value in FULL.http_body().items()}
    assert json.loads(json.dumps(FULL.http_body())) == FULL.http_body()
    assert _same(from_json, FULL.arrays())


# --- each client, driven through its own entry point ------------------------------------------------------------


def _codec() -> Codec:
    return Codec(CharTokenizer())


def _wire(inputs) -> dict:
    """{name: (data type, shape, bytes)} of tritonclient InferInputs."""
    out = {}
    for tensor in inputs:
        proto = tensor._get_tensor()
        out[proto.name] = (proto.datatype, list(proto.shape), tensor._get_content())
    return out


def _wire_of_infer_request(request) -> dict:
    """The same of a ModelInferRequest (the OpenAI frontend's)."""
    return {t.name: (t.datatype, list(t.shape), raw) for t, raw in zip(request.inputs, request.raw_input_contents)}


def _wire_of_arrays(inputs) -> dict:
    return {name: (datatype, list(array.shape),
                   serialize_byte_tensor(array).item() if datatype == "BYTES" else array.tobytes())
            for name, datatype, array in inputs}


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]) for k in a)


SAMPLED = dict(stop_words=["\n\n", "END"], temperature=0.5, top_p=0.9, seed=11, presence_penalty=0.25,
               frequency_penalty=0.125)
"""What the OpenAI frontend's test request sets beyond the load test's."""


def _frontend(guide: str | None) -> tuple[dict, dict]:
    """What the OpenAI frontend sends for a completion of PROMPT (and SAMPLED) on an adapter's route: (text path,
    ids path)."""
    from tritongen.frontend.ids import build_ids_request
    from tritongen.frontend.engine import build_request
    from tritongen.frontend.schemas import CompletionRequest
    from tritongen.frontend.service import generation
    from tritongen.frontend.structured import Guide, guided
    from tritongen.plan.frontend import ModelRoute

    route = ModelRoute(name="m-lora", triton_model="ensemble", tokenizer_dir="/t", lora_task_id=2, lora_name="lora")
    sampled = {("stop" if k == "stop_words" else k): v for k, v in SAMPLED.items()}
    req = CompletionRequest(model="m-lora", prompt=PROMPT, max_tokens=MAX_TOKENS, stream=True,
                            min_tokens=None if guide else MAX_TOKENS, **sampled)
    gen = generation(route, req, PROMPT)
    if guide:
        gen = guided(gen, Guide("json_schema", guide, "response_format"), req)
    return (_wire_of_infer_request(build_request("ensemble", gen, "id")),
            _wire_of_infer_request(build_ids_request(_codec(), gen, "id")))


# Runs in its own process: importing the users imports locust, which monkey-patches the process for gevent.
_LOAD_TEST = """
import json, sys
from types import SimpleNamespace
sys.path.insert(0, {tests!r})
from test_requests import _codec, _wire
from tritongen.loadtests import users
from tritongen.loadtests.workload import Prompt
from tritongen.plan.load import AdapterShare
from tritongen.schema_set import NamedSchema

guide = {guide!r}
schema = NamedSchema("s", json.loads(guide), guide) if guide else None
prompt = Prompt({prompt!r}, 5, {max_tokens}, None if guide else {max_tokens},
                adapter=AdapterShare(name="lora", task_id=2, weight=1.0), schema=schema)
users._ProcessState.codec = _codec()
text, _, _ = users.GrpcStreamUser.request(None, prompt)
ids, _, _ = users.GrpcIdsUser.request(None, prompt)
bodies = []
posting = SimpleNamespace(dialect=None, config=SimpleNamespace(model="ensemble"), http=SimpleNamespace(
    post=lambda path, body, headers: bodies.append(json.loads(body)) or SimpleNamespace(status_code=200)))
users._HttpUserBase.post(posting, "generate", prompt, SimpleNamespace(), stream=True)
hexed = lambda wire: {{k: [t, s, raw.hex()] for k, (t, s, raw) in wire.items()}}
print(json.dumps({{"grpc": hexed(_wire(text)), "ids": hexed(_wire(ids)), "http": bodies[0]}}))
"""


def _load_test(guide: str | None) -> tuple[dict, dict, dict]:
    """What the load test's gRPC, ids and HTTP users send for a prompt of the same request: (text, ids, body)."""
    code = _LOAD_TEST.format(tests=str(Path(__file__).parent), guide=guide, prompt=PROMPT, max_tokens=MAX_TOKENS)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    sent = json.loads(out.stdout.splitlines()[-1])
    unhex = lambda wire: {k: (t, s, bytes.fromhex(raw)) for k, (t, s, raw) in wire.items()}  # noqa: E731
    return unhex(sent["grpc"]), unhex(sent["ids"]), sent["http"]


@pytest.mark.parametrize("guide", [None, SCHEMA], ids=["plain", "json_schema"])
def test_every_client_sends_the_same_tensors_for_the_same_request(guide):
    min_tokens = None if guide else MAX_TOKENS  # a guided request has none (the grammar ends it)
    keywords = dict(stream=True, min_tokens=min_tokens, lora_task_id=2, **COUNTS,
                    guide=("json_schema", guide) if guide else None)
    library = _wire(client.grpc_inputs(PROMPT, MAX_TOKENS, **keywords))
    expected = Request.of(PROMPT, MAX_TOKENS, **keywords)
    assert library == _wire_of_arrays(expected.inputs())

    frontend_text, frontend_ids = _frontend(guide)
    assert frontend_text == _wire(client.grpc_inputs(PROMPT, MAX_TOKENS, **keywords, **SAMPLED))
    assert frontend_ids == _wire(grpc_tensors(llm_inputs(_codec().inputs(Request.of(PROMPT, MAX_TOKENS, **keywords,
                                                                                    **SAMPLED)))))
    load_text, load_ids, load_body = _load_test(guide)
    assert load_text == library
    # HTTP: the same body from the library and the load test's users, and the same tensors once Triton reads it.
    assert load_body == client.request_body(PROMPT, MAX_TOKENS, **keywords) == expected.http_body()
    # The ids path: the same tensorrt_llm inputs from the load test and the library's codec (the frontend's above).
    ids = _wire(grpc_tensors(llm_inputs(_codec().inputs(expected))))
    assert load_ids == ids
    assert ids["lora_task_id"][0] == "UINT64" and ("guided_decoding_guide" in ids) == bool(guide)


def test_generate_sends_each_flag_as_the_input_of_its_name(monkeypatch):
    from tritongen.cli import main

    sent = []
    monkeypatch.setattr(client, "require_server", lambda url, protocol: None)
    monkeypatch.setattr(client, "stream_grpc", lambda url, prompt, max_tokens, **kw: sent.append(
        client.grpc_inputs(prompt, max_tokens, **{k: v for k, v in kw.items() if k != "model"})) or iter(()))
    assert main(["generate", PROMPT, "--url", "127.0.0.1:1", "--max-tokens", "9", "--min-tokens", "3",
                 "--temperature", "0.5", "--top-k", "7", "--top-p", "0.9"]) == 0
    expected = Request.of(PROMPT, 9, stream=False, min_tokens=3, temperature=0.5, top_k=7, top_p=0.9)
    assert _wire(sent[0]) == _wire_of_arrays(expected.inputs())
