"""Rendering: golden files, byte-identical re-render, protobuf round-trip, wiring checks, atomic writes."""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import text_format

from specs import assert_golden, served_files
from tritongen import contract
from tritongen.errors import SpecError
from tritongen.render import render_for
from tritongen.plan import plan_from_file
from tritongen.render import render_repository, write_repository
from tritongen.verify import parse_config, verify_repository

GOLDEN = Path(__file__).parents[1] / "golden" / "tiny-cpu"
ROOT = Path(__file__).resolve().parents[2]
MODEL_PLACEHOLDER = "${TINY_MODEL}"


def _normalised(files: dict[str, bytes], model_dir: Path) -> dict[str, bytes]:
    return {k: v.replace(str(model_dir).encode(), MODEL_PLACEHOLDER.encode()) for k, v in files.items()}


@pytest.fixture(scope="module")
def rendered(tiny_spec_path):
    spec, plan = plan_from_file(tiny_spec_path)
    return spec, plan, render_for(plan)


@pytest.fixture(scope="module")
def rendered_scheduler(tiny_spec_path, tmp_path_factory):
    """The tiny spec with serving.ensemble: triton (NVIDIA's ensemble scheduler in front of tensorrt_llm_bls)."""
    import yaml

    data = yaml.safe_load(tiny_spec_path.read_text())
    data.setdefault("serving", {})["ensemble"] = "triton"
    path = tmp_path_factory.mktemp("scheduler") / "tiny-cpu.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    spec, plan = plan_from_file(path)
    return spec, plan, render_for(plan)


def test_golden_repository(rendered, tiny_model):
    # The python models are shipped verbatim; they are compared with their source, not kept twice.
    files = _normalised({k: v for k, v in rendered[2].items() if not k.endswith(".py")}, tiny_model)
    assert {k: v for k, v in rendered[2].items() if k.endswith(".py")} == served_files(rendered[2])
    assert_golden(files, GOLDEN)


def test_rerender_is_byte_identical(rendered, tiny_spec_path):
    spec, plan = plan_from_file(tiny_spec_path)
    assert render_for(plan) == rendered[2]


def test_every_config_round_trips_through_protobuf(rendered, tmp_path):
    write_repository(rendered[2], tmp_path / "repo")
    for cfg in sorted((tmp_path / "repo").glob("*/config.pbtxt")):
        parsed = parse_config(cfg)
        again = parse_config_text(text_format.MessageToString(parsed))
        assert again == parsed, cfg
        assert parsed.name == cfg.parent.name


def parse_config_text(text: str):
    from tritonclient.grpc import model_config_pb2

    config = model_config_pb2.ModelConfig()
    text_format.Parse(text, config)
    return config


def test_rendered_repo_matches_contract(rendered, tmp_path):
    spec, plan, files = rendered
    write_repository(files, tmp_path / "repo")
    assert verify_repository(tmp_path / "repo") == []
    llm = parse_config(tmp_path / "repo" / "tensorrt_llm" / "config.pbtxt")
    assert llm.model_transaction_policy.decoupled is True
    assert llm.max_batch_size == plan.max_batch_size
    assert [t.name for t in llm.input] == [t.name for t in contract.TENSORRT_LLM_INPUTS]
    assert llm.dynamic_batching.default_queue_policy.max_queue_size == 64
    assert llm.parameters["exclude_input_in_output"].string_value == "true"
    # serving.ensemble: bls (the default): `ensemble` is the BLS itself, with NVIDIA's ensemble tensors exactly.
    ens = parse_config(tmp_path / "repo" / "ensemble" / "config.pbtxt")
    assert ens.platform == "" and ens.backend == "tritongen_bls" and not ens.ensemble_scheduling.step
    assert [(t.name, t.optional) for t in ens.input] == [(t.name, t.optional) for t in contract.ENSEMBLE_INPUTS]
    assert [t.name for t in ens.output] == [t.name for t in contract.ENSEMBLE_OUTPUTS]
    assert ens.model_transaction_policy.decoupled is True
    assert ens.parameters["tokenizer_dir"].string_value == plan.tokenizer.dir
    bls = parse_config(tmp_path / "repo" / "tensorrt_llm_bls" / "config.pbtxt")
    assert bls.model_transaction_policy.decoupled is True
    assert bls.parameters["tokenizer_dir"].string_value == plan.tokenizer.dir
    # One max batch size everywhere keeps the ensemble <= every composing model.
    assert {parse_config(p).max_batch_size for p in (tmp_path / "repo").glob("*/config.pbtxt")} == {8}


def test_the_ensemble_scheduler_has_one_step_mapping_every_tensor_by_name(rendered_scheduler, tmp_path):
    write_repository(rendered_scheduler[2], tmp_path / "repo")
    assert verify_repository(tmp_path / "repo") == []
    ens = parse_config(tmp_path / "repo" / "ensemble" / "config.pbtxt")
    assert ens.platform == "ensemble"
    # One step: every ensemble input and output goes to and from tensorrt_llm_bls under its own name.
    assert [s.model_name for s in ens.ensemble_scheduling.step] == ["tensorrt_llm_bls"]
    step = ens.ensemble_scheduling.step[0]
    assert dict(step.input_map) == {t.name: t.name for t in contract.ENSEMBLE_INPUTS}
    assert dict(step.output_map) == {t.name: t.name for t in contract.ENSEMBLE_OUTPUTS}
    assert not (tmp_path / "repo" / "ensemble" / "1" / "model.py").exists()


def test_verify_catches_dtype_mismatch_and_missing_step_model(rendered_scheduler, tmp_path):
    repo = tmp_path / "repo"
    write_repository(rendered_scheduler[2], repo)
    cfg = repo / "tensorrt_llm_bls" / "config.pbtxt"
    cfg.write_text(cfg.read_text().replace('name: "max_tokens"\n    data_type: TYPE_INT32',
                                           'name: "max_tokens"\n    data_type: TYPE_INT64'))
    findings = [str(f) for f in verify_repository(repo)]
    assert ("ensemble/config.pbtxt step 0 (tensorrt_llm_bls): 'max_tokens' is TYPE_INT32 but tensorrt_llm_bls "
            "input 'max_tokens' is TYPE_INT64") in findings
    (repo / "tensorrt_llm_bls" / "config.pbtxt").unlink()
    findings = [str(f) for f in verify_repository(repo)]
    assert ("ensemble/config.pbtxt step 0 (tensorrt_llm_bls): model 'tensorrt_llm_bls' is not in the repository"
            in findings)


def test_verify_reports_unparsable_config(rendered, tmp_path):
    repo = tmp_path / "repo"
    write_repository(rendered[2], repo)
    (repo / "ensemble" / "config.pbtxt").write_text("max_batch_size: ${triton_max_batch_size}\n")
    findings = [str(f) for f in verify_repository(repo)]
    assert findings[0].startswith("ensemble/config.pbtxt: does not parse as ModelConfig")


def test_existing_output_is_never_clobbered(rendered, tmp_path):
    out = tmp_path / "repo"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    for force in (False, True):
        with pytest.raises(SpecError, match="is not empty and was not written by tritongen"):
            write_repository(rendered[2], out, overwrite=force)
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
    write_repository(rendered[2], tmp_path / "ours")
    with pytest.raises(SpecError, match="exists and is not empty; pass --force"):
        write_repository(rendered[2], tmp_path / "ours")


def test_failed_write_leaves_nothing_and_keeps_old(rendered, tmp_path):
    out = tmp_path / "repo"
    write_repository(rendered[2], out)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    bad = dict(rendered[2])
    bad["zz/dir-collides"] = b"x"
    bad["zz/dir-collides/file"] = b"y"  # a file and a folder of the same name: the write must fail midway
    with pytest.raises(OSError):
        write_repository(bad, out, overwrite=True)
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert [p.name for p in tmp_path.iterdir()] == ["repo"]


def test_paths_outside_the_output_are_refused(tmp_path):
    with pytest.raises(SpecError, match="refusing to write outside the output folder"):
        write_repository({"../evil": b""}, tmp_path / "repo")
    assert not (tmp_path / "evil").exists()


def test_quoting_of_parameter_values(rendered, tmp_path):
    _, plan, _ = rendered
    tricky = plan.model_copy(update={"tokenizer": plan.tokenizer.model_copy(
        update={"dir": '/models/a "quoted" dir\\with\nnewline }'})})
    files = render_repository(tricky)
    (tmp_path / "c.pbtxt").write_bytes(files["preprocessing/config.pbtxt"])
    parsed = parse_config(tmp_path / "c.pbtxt")
    assert parsed.parameters["tokenizer_dir"].string_value == '/models/a "quoted" dir\\with\nnewline }'
