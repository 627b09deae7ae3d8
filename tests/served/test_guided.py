"""Guided decoding through Triton (docs/structured-output.md): NVIDIA's guided_decoding_guide_type and
guided_decoding_guide tensors through the ensemble and both BLSs (native and python) to the hf runtime, over gRPC
streaming and HTTP generate. Every JSON-schema output parses and validates; greedy streamed text concatenates to
the unstreamed text; bad guides are 400s naming the input, and the server serves on."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jsonschema
import pytest

from streaming_text import render_repo, start_server
from tritongen.client import grpc_inputs, request_body

pytestmark = pytest.mark.integration

SCHEMAS = json.loads((Path(__file__).resolve().parents[1] / "data" / "json_schemas.json").read_text())
PROMPT = "Answer with JSON:"
MAX_TOKENS = 160  # the longest bounded output of the set on the tiny model is under 90 tokens


@pytest.fixture(scope="module", params=["native", "python"])
def served(request, tiny_model, tmp_path_factory):
    base = tmp_path_factory.mktemp(f"guided-{request.param}")
    repo = render_repo(tiny_model, base / "repo", bls=request.param, max_batch_size=8)
    server = start_server(repo, base / "tritonserver.log")
    yield server
    server.stop()


def _post(url: str, body: dict) -> tuple[int, dict]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


def _http(server, model: str, guide: tuple[str, str], max_tokens: int = MAX_TOKENS) -> str:
    status, body = _post(f"http://{server.http_url}/v2/models/{model}/generate",
                         request_body(PROMPT, max_tokens, stream=False, guide=guide))
    assert status == 200, body
    return body["text_output"]


def _grpc_stream(server, model: str, guide: tuple[str, str]) -> str:
    from tritongen.client import _grpc_results

    inputs = grpc_inputs(PROMPT, MAX_TOKENS, stream=True, guide=guide)
    pieces = []
    for result, _ in _grpc_results(server.grpc_url, model, inputs, timeout=120):
        out = result.as_numpy("text_output")
        if out is not None and out.size:
            pieces.append(out.reshape(-1)[0].decode("utf-8"))
    return "".join(pieces)


def test_json_schema_outputs_parse_validate_and_stream_exactly(served):
    # Each schema is asked twice, streamed over gRPC and whole over HTTP, alternating the entry model (BLS or
    # ensemble) so that every entry model meets every protocol.
    def run(i: int, case: dict) -> tuple[str, str, str]:
        guide = ("json_schema", json.dumps(case["schema"]))
        first, second = ("tensorrt_llm_bls", "ensemble") if i % 2 == 0 else ("ensemble", "tensorrt_llm_bls")
        return case["name"], _grpc_stream(served, first, guide), _http(served, second, guide)

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(run, range(len(SCHEMAS)), SCHEMAS))
    assert len(results) >= 30
    for (name, streamed, whole), case in zip(results, SCHEMAS):
        assert streamed == whole, name
        jsonschema.validate(json.loads(whole), case["schema"])  # raises with the schema's name in the trace


def test_regex_grammar_and_json_guides(served):
    import re

    text = _http(served, "ensemble", ("regex", "[a-z]{3}-[0-9]{2}"))
    assert re.fullmatch("[a-z]{3}-[0-9]{2}", text), text
    assert _http(served, "tensorrt_llm_bls", ("ebnf_grammar", 'root ::= "yes" | "no" | "maybe"')) in \
        ("yes", "no", "maybe")
    # Any JSON (XGrammar's built-in grammar): a prefix of JSON at most, a whole value when it ends before max_tokens.
    assert _http(served, "ensemble", ("json", ""), max_tokens=8)[:1] in "{["
    # The same prompt with no guide is unconstrained: the guide, not the prompt, shaped the outputs above.
    status, body = _post(f"http://{served.http_url}/v2/models/ensemble/generate",
                         request_body(PROMPT, 16, stream=False))
    assert status == 200 and not re.fullmatch("[a-z]{3}-[0-9]{2}", body["text_output"])


BAD = [
    ("json_schema", "{not json", "guided_decoding_guide", "is not JSON"),
    ("json_schema", json.dumps({"type": "strin"}), "guided_decoding_guide", 'Unsupported type "strin"'),
    ("json_schema", json.dumps({"properties": {"a": {"$ref": "#/$defs/missing"}}}), "guided_decoding_guide",
     "$defs"),
    ("json_schema", "[1, 2]", "guided_decoding_guide", "a JSON schema is an object"),
    ("regex", "([a-z", "guided_decoding_guide", "XGrammar rejects this regex"),
    ("ebnf_grammar", "root ::= foo", "guided_decoding_guide", 'Rule "foo" is not defined'),
    ("xml", "<a/>", "guided_decoding_guide_type", "'xml' is not a guide type"),
    ("json_schema", "", "guided_decoding_guide", "is required with guide type json_schema"),
    ("regex", "a" * 65537, "guided_decoding_guide", "65537 bytes exceed the deployment's limit of 65536"),
]


@pytest.mark.parametrize("guide_type,guide,name,words", BAD, ids=[f"{b[0]}-{b[3][:24]}" for b in BAD])
def test_a_bad_guide_is_a_400_naming_the_input_and_the_server_serves_on(served, guide_type, guide, name, words):
    start = time.monotonic()
    body = request_body(PROMPT, 8, stream=False)
    body.update({"guided_decoding_guide_type": guide_type, "guided_decoding_guide": guide})
    for model in ("ensemble", "tensorrt_llm_bls"):
        status, answer = _post(f"http://{served.http_url}/v2/models/{model}/generate", body)
        assert status == 400, answer
        assert f"[bad_request:{name}]" in answer["error"] and words in answer["error"], answer["error"]
    assert time.monotonic() - start < 20
    with urllib.request.urlopen(f"http://{served.http_url}/v2/health/ready", timeout=10) as r:
        assert r.status == 200
    assert _http(served, "ensemble", ("ebnf_grammar", 'root ::= "ok"')) == "ok"


def test_a_guide_without_its_type_is_refused_naming_the_type(served):
    body = {**request_body(PROMPT, 8, stream=False), "guided_decoding_guide": "{}"}
    status, answer = _post(f"http://{served.http_url}/v2/models/ensemble/generate", body)
    assert status == 400 and "[bad_request:guided_decoding_guide_type]" in answer["error"], answer


def test_bad_guides_beside_guided_streams_leave_those_streams_whole(served):
    # Guided streams in flight while bad guides are refused: each stream still ends with its valid, exact output.
    case = next(c for c in SCHEMAS if c["name"] == "mixed_record")
    guide = ("json_schema", json.dumps(case["schema"]))
    whole = _http(served, "ensemble", guide)
    with ThreadPoolExecutor(4) as pool:
        streams = [pool.submit(_grpc_stream, served, "tensorrt_llm_bls", guide) for _ in range(3)]
        for bad_type, bad, name, _ in BAD:
            body = {**request_body(PROMPT, 8, stream=False), "guided_decoding_guide_type": bad_type,
                    "guided_decoding_guide": bad}
            status, answer = _post(f"http://{served.http_url}/v2/models/ensemble/generate", body)
            assert status == 400 and f"[bad_request:{name}]" in answer["error"]
        assert [s.result(timeout=120) for s in streams] == [whole] * 3
    jsonschema.validate(json.loads(whole), case["schema"])
