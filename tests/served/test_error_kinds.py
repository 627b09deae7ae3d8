"""Request error kinds, defined once (tritongen.served.error_kinds): the tag's form, the native backends' spelling of it
(generator/tritongen/native/error_kinds.h, through a small driver), the module shipped next to the python models
that import it, and the frontend reading the kind instead of the words."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from cli_driver import build_cli
from tritongen import served
from tritongen.served import error_kinds
from tritongen.frontend.engine import classify
from tritongen.native import SOURCES

ROOT = Path(__file__).resolve().parents[2]
SERVED = [p for p in (ROOT / "generator" / "tritongen" / "served").glob("*.py") if p.name != "error_kinds.py"]
"""The served modules other than the kinds' own definition."""


def test_a_tag_round_trips_and_other_brackets_are_not_tags():
    message = error_kinds.tagged(error_kinds.BAD_REQUEST, "top_p: 2.0 is outside [0, 1]", "top_p")
    assert message == "[bad_request:top_p] top_p: 2.0 is outside [0, 1]"
    assert error_kinds.parse(message) == ("bad_request", "top_p", "top_p: 2.0 is outside [0, 1]")
    assert error_kinds.parse("in ensemble 'ensemble', [overloaded] Exceeds maximum queue size") == \
        ("overloaded", None, "in ensemble 'ensemble', Exceeds maximum queue size")
    for foreign in ("[request id: 7] unexpected shape for input 'x'", "[bad_request:a b] x", "[Bad_request] x",
                    "Error generating request: top_p (2.0) must be within [0, 1]"):
        assert error_kinds.parse(foreign) is None, foreign
    with pytest.raises(ValueError, match="unknown error kind 'busy'"):
        error_kinds.tag("busy")


def test_wrap_keeps_the_tag_in_front_and_leaves_foreign_errors_untagged():
    inner = "[bad_request:runtime_top_p] tensorrt_llm (hf): runtime_top_p: 2.0 is outside [0, 1]"
    assert error_kinds.wrap("tensorrt_llm", inner) == \
        "[bad_request:runtime_top_p] tensorrt_llm: tensorrt_llm (hf): runtime_top_p: 2.0 is outside [0, 1]"
    assert error_kinds.wrap("tensorrt_llm", "Encountered an error in forward") == \
        "tensorrt_llm: Encountered an error in forward"
    assert error_kinds.wrap("p", "boom", error_kinds.INTERNAL) == "[internal] p: boom"
    assert str(error_kinds.RequestError("seed: no seed", error_kinds.BAD_REQUEST, "seed")) == \
        "[bad_request:seed] seed: no seed"
    assert str(error_kinds.RequestError("tensorrt_llm: x", kind=None)) == "tensorrt_llm: x"


@pytest.fixture(scope="module")
def native_driver(tmp_path_factory):
    return build_cli(tmp_path_factory, "error_kinds_cli", strict=False)


def test_the_native_backends_spell_the_same_tags(native_driver):
    cases = [("wrap", "tensorrt_llm", "[bad_request:runtime_top_p] tensorrt_llm (hf): runtime_top_p: 2.0 is bad"),
             ("wrap", "tensorrt_llm", "[context_length_exceeded:input_ids] input_ids: 9 tokens exceed"),
             ("wrap", "preprocessing", "[internal] boom"),
             ("wrap", "tensorrt_llm", "[request id: 7] unexpected shape"),
             ("wrap", "tensorrt_llm", "[bad_request:a b] not a tag"),
             ("bad", "text_input", "required"),
             ("bad", "max_tokens", "required")]
    done = subprocess.run([str(native_driver)], input="".join("\t".join(c) + "\n" for c in cases),
                          capture_output=True, text=True, check=True)
    lines = done.stdout.splitlines()
    assert [line.split("\t")[1] for line in lines if line.startswith("kind\t")] == list(error_kinds.KINDS)
    answers = [line for line in lines if not line.startswith("kind\t")]
    expected = [error_kinds.wrap(a, b) if op == "wrap" else error_kinds.tagged(error_kinds.BAD_REQUEST, f"{a}: {b}", a)
                for op, a, b in cases]
    assert answers == expected


def test_no_tag_is_spelled_by_hand():
    """Tags come from the kinds' one definition (error_kinds / error_kinds.h), never from a string literal."""
    literal = re.compile(r"\[(?:" + "|".join(error_kinds.KINDS) + r")[:\]]")
    sources = [*SOURCES.rglob("*.cc"), *(p for p in SOURCES.rglob("*.h") if p.name != "error_kinds.h"),
               *SERVED]
    assert [str(p) for p in sources if literal.search(p.read_text())] == []
    for path in SERVED:  # no model defines its own error class beside the shared one
        assert "class RequestError" not in path.read_text(), path


def test_the_module_is_shipped_next_to_each_python_model_that_imports_it(tiny_repo):
    source = served.source("error_kinds")
    importing = {p.parent.relative_to(tiny_repo).as_posix() for p in tiny_repo.glob("*/1/*.py")
                 if "from .error_kinds import" in p.read_text()}
    assert importing >= {"preprocessing/1", "tensorrt_llm/1", "tensorrt_llm_bls/1"}
    shipped = {p.parent.relative_to(tiny_repo).as_posix() for p in tiny_repo.glob("*/1/error_kinds.py")}
    assert shipped == importing
    assert all((tiny_repo / folder / "error_kinds.py").read_bytes() == source for folder in shipped)


@pytest.mark.parametrize("message, status, kind, param, code", [
    ("[bad_request:runtime_top_p] tensorrt_llm: runtime_top_p: 2.0 is outside [0, 1]", 400,
     "invalid_request_error", "top_p", None),
    ("[bad_request:stream] stream: this deployment is not decoupled", 400, "invalid_request_error", None, None),
    ("[context_length_exceeded:input_ids] tensorrt_llm (hf): input_ids: 5000 tokens exceed the model's limit", 400,
     "invalid_request_error", "prompt", "context_length_exceeded"),
    ("[overloaded] Exceeds maximum queue size: tensorrt_llm_bls holds 8 requests", 429, "rate_limit_error", None,
     None),
    ("[unavailable] token source: the model is unloading", 503, "server_error", None, None),
    ("[internal] tensorrt_llm_bls: tensorrt_llm: a token id outside the tokenizer's vocabulary", 500, "server_error",
     None, None),
])
def test_the_frontend_reads_the_kind_and_shows_the_message_without_its_tag(message, status, kind, param, code):
    err = classify(message)
    assert (err.status, err.kind, err.param, err.code) == (status, kind, param, code)
    assert error_kinds.parse(err.message) is None and error_kinds.parse(message)[2] in err.message
