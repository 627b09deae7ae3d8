"""The hf model's guided-decoding pieces (tritongen.served.hf_guided) without a server: the device path of the mask
(tensor operations, what a GPU with CUDA graphs runs) equals XGrammar's own kernel, and the schema rewrite of
length-bounded strings keeps outputs valid JSON."""

from __future__ import annotations

import json
import sys
import types

import pytest
import torch


@pytest.fixture(scope="module")
def hf_guided():
    # The module imports the python backend's utils by name only (its functions are used when serving). The stand-in
    # and the modules imported with it leave sys.modules afterwards: a later test in this process imports the real
    # utils (tests/served/test_served.py).
    before = set(sys.modules)
    sys.modules.setdefault("triton_python_backend_utils", types.ModuleType("triton_python_backend_utils"))
    from tritongen.served import hf_guided

    yield hf_guided
    for name in set(sys.modules) - before:
        if name == "triton_python_backend_utils" or name.startswith("tritongen.served"):
            del sys.modules[name]


class _Future:
    def __init__(self, rid, tokens):
        self.state = types.SimpleNamespace(request_id=rid, generated_tokens=tokens)


def test_the_device_path_masks_exactly_as_xgrammars_kernel(hf_guided, tiny_model):
    import xgrammar

    guides = hf_guided.Guides(str(tiny_model), 512, 2, 65536)
    schema = json.dumps({"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 99}},
                         "required": ["n"], "additionalProperties": False})
    processor = hf_guided.GuidedProcessor(512, 4, "cpu", graphs=True)
    processor.on_cpu = False  # the tensor-operations path, on CPU tensors
    for rid in ("a", "c"):
        processor.matchers[rid] = hf_guided.Guided(guides.matcher("json_schema", schema))
    futures = [_Future("a", []), _Future("b", []), _Future("c", [])]
    args = processor.prepare_tensor_args(futures)
    assert args.tolist() == [0, -1, 2]
    scores = torch.randn(3, 512)
    got = processor(scores.clone(), args)
    want = scores.clone()
    xgrammar.apply_token_bitmask_inplace(want, processor.host[:3], indices=[0, 2])
    assert torch.equal(got, want)
    assert torch.equal(got[1], scores[1])  # an unguided row is left as it is
    # The first token of `{"n": ...}`: only tokens that start the object are allowed.
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    allowed = torch.isfinite(got[0]).nonzero().reshape(-1).tolist()
    assert allowed and all(tokenizer.decode([t]).startswith("{") for t in allowed)


def test_length_bounded_strings_become_patterns_that_keep_json_valid(hf_guided):
    schema = {"type": "object", "properties": {
        "a": {"type": "string", "maxLength": 5},
        "b": {"type": "string", "minLength": 2, "pattern": "^[a-z]+$"},  # a pattern wins: left as it is
        "c": {"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": 3}},
        "d": {"enum": [{"type": "string", "maxLength": 1}]}}}  # data, not a schema: left as it is
    out = hf_guided._bounded_strings(schema)
    assert out["properties"]["a"] == {"type": "string", "pattern": "^.{0,5}$"}
    assert out["properties"]["b"] == schema["properties"]["b"]
    assert out["properties"]["c"]["items"] == {"type": "string", "pattern": "^.{1,3}$"}
    assert out["properties"]["d"] == schema["properties"]["d"]
