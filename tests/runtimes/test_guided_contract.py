"""Guided decoding per runtime against the pinned releases' files (docs/structured-output.md): what the plan says,
what render writes, what the clients send. The served paths are tests/served/test_guided.py (hf, both BLSs),
tests/runtimes/test_vllm_served.py (vllm double) and tests/native/test_tokensource.py (synthetic)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from specs import apply_overrides, render_spec

ROOT = Path(__file__).resolve().parents[2]
FACTS = json.loads((ROOT / "tests" / "fixtures" / "nvidia" / "trtllm-1.2.1.json").read_text())


def _spec(tmp_path: Path, tiny_model: Path, example: str, **overrides) -> Path:
    """An example spec on the 8B config.json with the tiny demo tokenizer beside it (tiny-cpu: the tiny model)."""
    data = yaml.safe_load((ROOT / "examples" / example).read_text())
    if example == "tiny-cpu.yaml":
        data["model"]["checkpoint"] = str(tiny_model)
    else:
        ckpt = tmp_path / "ckpt"
        if not ckpt.exists():
            shutil.copytree(ROOT / "examples" / "checkpoints" / "llama-3.1-8b", ckpt)
            for f in tiny_model.glob("tokenizer*"):
                shutil.copy(f, ckpt / f.name)
        data["model"]["checkpoint"] = str(ckpt)
    apply_overrides(data, overrides)
    path = tmp_path / f"{example}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _plan(path: Path):
    from tritongen.plan import plan_from_file

    return plan_from_file(path)[1]


@pytest.mark.parametrize("example, types, words", [
    ("tiny-cpu.yaml", ("json", "json_schema", "regex", "ebnf_grammar"), "XGrammar token masks"),
    ("llama3-8b-trtllm.yaml", ("json", "json_schema", "regex", "ebnf_grammar"), "guided_decoding_backend xgrammar"),
    ("llama3-8b-vllm.yaml", ("json", "json_schema", "regex", "ebnf_grammar"), 'sampling_parameters["structured_outputs"]'),
    ("llama3-8b-llmapi.yaml", (), "refused: NVIDIA's llmapi model of TensorRT-LLM 1.2.1"),
    ("synthetic-cpu.yaml", (), "refused: the synthetic token source"),
])
def test_the_plan_says_what_each_runtime_does_with_a_guide(tmp_path, tiny_model, example, types, words):
    from tritongen.plan.show import plan_text

    plan = _plan(_spec(tmp_path, tiny_model, example, **{"structured_output.max_schema_bytes": 1000,
                                                         "structured_output.tool_call_format": "hermes"}))
    s = plan.structured_output
    assert s.guide_types == types and words in s.how
    assert (s.backend, s.tool_call_format, s.max_schema_bytes) == ("xgrammar", "hermes", 1000)
    row = next(line for line in plan_text(plan).splitlines() if "guided decoding" in line)
    assert ("refused" in row) == (not types) and s.how in row and "tool calls: hermes" in row


def test_the_spec_section_refuses_what_it_does_not_know(tmp_path, tiny_model):
    from tritongen.errors import SpecError
    from tritongen.plan import plan_from_file

    for key, value, words in (("backend", "outlines", "backend"), ("tool_call_format", "pythonic", "tool_call_format"),
                              ("max_schema_bytes", 0, "max_schema_bytes"), ("max_grammar", 1, "unknown field")):
        with pytest.raises(SpecError, match=words):
            plan_from_file(_spec(tmp_path, tiny_model, "tiny-cpu.yaml", **{f"structured_output.{key}": value}))


def test_validate_explain_shows_the_section_with_its_defaults():
    from tritongen.spec import explain

    rows = {path: (default, doc) for path, _, default, doc in explain()}
    assert rows["structured_output.backend"][0] == "'xgrammar'"
    assert rows["structured_output.tool_call_format"][0] == "'auto'" and "chat template" in \
        rows["structured_output.tool_call_format"][1]
    assert rows["structured_output.max_schema_bytes"][0] == "65536"


# ---------------------------------------------------------------------------------------------- tensorrtllm
# The C++ backend (tensorrtllm_backend inflight_batcher_llm/src/model_instance_state.cc, the copy in TensorRT-LLM's
# triton_backend; getGuidedDecodingConfigFromParams) turns guided decoding on when guided_decoding_backend is
# "xgrammar" and xgrammar_tokenizer_info_path names a file, which it reads for encoded_vocab, tokenizer_str and
# stop_token_ids; it refuses to load when the file does not exist.


def test_tensorrtllm_renders_the_guided_parameters_of_the_release(tmp_path, tiny_model):
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2 as pb

    repo = tmp_path / "repo"
    plan = render_spec(_spec(tmp_path, tiny_model, "llama3-8b-trtllm.yaml"), repo)
    body = (repo / "tensorrt_llm" / "config.pbtxt").read_text().partition("\n")[2]
    params = {k: v.string_value for k, v in text_format.Parse(body, pb.ModelConfig()).parameters.items()}
    assert params["guided_decoding_backend"] == "xgrammar"
    assert params["xgrammar_tokenizer_info_path"] == f"{plan.paths.engine}/xgrammar_tokenizer_info.json"


def test_the_engine_build_writes_the_tokenizer_info_file_xgrammar_reads(tmp_path, tiny_model):
    import xgrammar
    from transformers import AutoTokenizer

    from tritongen.runtimes.tensorrtllm.runtime import RUNTIME
    from tritongen.runtimes.tensorrtllm.xgrammar_info import FILE

    # The models Job's build steps end with it (the local build writes it with the same module).
    plan = _plan(_spec(tmp_path, tiny_model, "llama3-8b-trtllm.yaml"))
    engine = tmp_path / "engine"
    engine.mkdir()
    *_, write = RUNTIME.engine_build_commands(plan, str(tiny_model), str(engine), converted_dir="/c",
                                              examples_dir="/e", calibration_dir=None)
    assert write[:2] == ["python3", "-c"]
    write[0] = sys.executable
    # The step is the module's own source given to `python -c`: it imports nothing of tritongen, so it runs in the
    # build container as here.
    subprocess.run(write, check=True, cwd=tmp_path, env={"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"})
    info = json.loads((engine / FILE).read_text())
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    assert set(info) == {"encoded_vocab", "tokenizer_str", "stop_token_ids"}
    assert info["stop_token_ids"] == [tokenizer.eos_token_id] and len(info["encoded_vocab"]) == len(tokenizer)
    # What the backend builds from the file is what XGrammar builds from the tokenizer itself.
    metadata = xgrammar.TokenizerInfo._detect_metadata_from_hf(info["tokenizer_str"])
    from_file = xgrammar.TokenizerInfo(info["encoded_vocab"], metadata["vocab_type"],
                                       stop_token_ids=info["stop_token_ids"],
                                       add_prefix_space=metadata["add_prefix_space"])
    assert from_file.decoded_vocab == xgrammar.TokenizerInfo.from_huggingface(tokenizer).decoded_vocab


# ---------------------------------------------------------------------------------------------- trtllm (llmapi)


def test_the_llmapi_model_of_the_release_has_no_guided_input_and_the_dialect_refuses_one(tmp_path, tiny_model):
    from tritongen.runtimes.llmapi.dialect import DIALECT

    inputs = [t["name"] for t in FACTS["llmapi_config_pbtxt"]["inputs"]]
    assert inputs and not [name for name in inputs if "guid" in name or "structured" in name]
    repo = tmp_path / "repo"
    render_spec(_spec(tmp_path, tiny_model, "llama3-8b-llmapi.yaml"), repo)
    # The rendered model declares no such input either, so tritonserver refuses a request that carries one.
    assert "guided" not in (repo / "tensorrt_llm" / "config.pbtxt").read_text()
    with pytest.raises(ValueError, match="no guided-decoding input"):
        DIALECT.request_inputs("a", 4, stream=False, guide=("json", ""))


# ---------------------------------------------------------------------------------------------- vllm


@pytest.mark.parametrize("guide, expected", [
    (("json", ""), {"json_object": True}),
    (("json_schema", '{"type": "object"}'), {"json": {"type": "object"}}),
    (("regex", "[a-z]+"), {"regex": "[a-z]+"}),
    (("ebnf_grammar", 'root ::= "a"'), {"grammar": 'root ::= "a"'}),
])
def test_the_vllm_dialect_sends_structured_outputs_as_a_json_string(guide, expected):
    from tritongen.runtimes.vllm.dialect import DIALECT

    inputs = {name: value for name, _, value in DIALECT.request_inputs("a", 4, stream=False, guide=guide)}
    params = json.loads(inputs["sampling_parameters"][0])
    assert isinstance(params["structured_outputs"], str)  # json.loads'ed by the backend, then splatted
    assert json.loads(params["structured_outputs"]) == expected
    with pytest.raises(ValueError, match="unknown guide type"):
        DIALECT.request_inputs("a", 4, stream=False, guide=("xml", ""))
