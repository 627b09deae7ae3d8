"""model.adapters checked against the base checkpoint: every bad adapter is one error line naming the field and
the fix (exact text pinned), exit code 2, and nothing written; the runtimes that cannot serve adapters say why."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from tritongen.cli import main
from tritongen.errors import SpecError
from tritongen.plan import plan_from_file
from tritongen.runtimes.hf import hf_parameters

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """The demo model with 3 adapters, and a narrower model (hidden 32) with one adapter of the wrong shape."""
    from tritongen.demo.adapters import make_demo_adapters
    from tritongen.demo.model import make_demo_model

    tmp = tmp_path_factory.mktemp("adapters")
    base = make_demo_model(tmp / "tiny")
    narrow = make_demo_model(tmp / "narrow", hidden_size=32)
    return base, make_demo_adapters(base, 3), make_demo_adapters(narrow, 1)[0]


def _spec(tmp_path: Path, base: Path, adapters: list[dict], **top) -> Path:
    data = yaml.safe_load((ROOT / "examples" / "tiny-cpu.yaml").read_text())
    data["model"].update(checkpoint=str(base), adapters=adapters)
    data.update(top)
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _problems(path: Path) -> list[str]:
    with pytest.raises(SpecError) as err:
        plan_from_file(path)
    return err.value.problems


def test_a_valid_spec_plans_task_ids_ranks_and_modules_in_order(models, tmp_path):
    base, paths, _ = models
    _, plan = plan_from_file(_spec(tmp_path, base, [{"name": f"a{i}", "path": str(p)} for i, p in enumerate(paths)]))
    assert [(a.name, a.task_id, a.rank, a.path) for a in plan.adapters] == \
        [("a0", 1, 4, str(paths[0])), ("a1", 2, 8, str(paths[1])), ("a2", 3, 4, str(paths[2]))]
    assert plan.adapters[0].target_modules == ("q_proj", "v_proj") and plan.max_adapter_rank == 8
    params = json.loads(hf_parameters(plan, plan.paths.checkpoint, None)["lora_adapters"])
    assert params == [{"task_id": i + 1, "name": f"a{i}", "path": str(p)} for i, p in enumerate(paths)]


@pytest.mark.parametrize("adapters, top, expected", [
    ([{"name": "x", "path": "P0"}, {"name": "x", "path": "P1"}], {},
     "model.adapters.1.name: 'x' is also the name of model.adapters.0; give every adapter its own name"),
    ([{"name": "a/b", "path": "P0"}], {},
     "model.adapters.0.name: 'a/b' is not usable as an OpenAI model id; use a letter or digit, then at most 63 "
     "letters, digits, '.', '_', '-'"),
    ([{"name": "tiny-cpu", "path": "P0"}], {},
     "model.adapters.0.name: 'tiny-cpu' is the base model's served name (OpenAI `model`); rename the adapter (or "
     "set frontend.openai.served_model_name)"),
    ([{"name": "base", "path": "P0"}], {},
     "model.adapters.0.name: 'base' names the base model (validation.load.adapters); give the adapter another name"),
    ([{"name": "x", "path": "P0"}], {"validation": {"load": {"adapters": {"base": 1, "y": 2, "x": 0}}}},
     "validation.load.adapters.y: names no adapter of model.adapters (known: base, x); use an adapter's name, or "
     "`base` for the base model\nvalidation.load.adapters.x: weight 0 is not positive; give it a weight > 0, or "
     "leave it out"),
    ([{"name": "x", "path": "P0"}], {"runtime": "trtllm", "placement": {"device": "gpu"}},
     None),  # the llmapi model of the pinned release: refused with its reason (checked below)
])
def test_spec_problems(models, tmp_path, adapters, top, expected):
    base, paths, _ = models
    adapters = [{**a, "path": str(paths[int(a["path"][1])])} for a in adapters]
    problems = _problems(_spec(tmp_path, base, adapters, **top))
    if expected is None:
        assert len(problems) == 1 and problems[0].startswith(
            "model.adapters: the trtllm runtime cannot serve them: the LLM-API Triton model of TensorRT-LLM 1.2.1 "
            "passes no LoRA request to the LLM"), problems
    else:
        assert problems == expected.split("\n")


def test_plan_problems(models, tmp_path):
    base, paths, wrong_shape = models
    bad_modules = tmp_path / "bad-modules"
    shutil.copytree(paths[0], bad_modules)
    config = json.loads((bad_modules / "adapter_config.json").read_text())
    (bad_modules / "adapter_config.json").write_text(json.dumps({**config, "target_modules": ["qkv_proj"]}))
    dora = tmp_path / "dora"
    shutil.copytree(paths[0], dora)
    (dora / "adapter_config.json").write_text(json.dumps({**config, "use_dora": True}))
    unreadable = tmp_path / "unreadable"
    shutil.copytree(paths[0], unreadable)
    (unreadable / "adapter_config.json").write_text("{not json")
    cases = [
        ({"path": str(tmp_path / "nowhere")},
         f"model.adapters.0.path: folder {tmp_path / 'nowhere'} does not exist; point it at a PEFT adapter folder "
         "(make some with `tritongen demo-model DIR --adapters 3`)"),
        ({"path": str(bad_modules)},
         "model.adapters.0.path: target module 'qkv_proj' is not in the base checkpoint (its layers' linear "
         "modules: down_proj, gate_proj, k_proj, o_proj, q_proj, up_proj, v_proj); use an adapter trained for this "
         "base model"),
        ({"path": str(wrong_shape)},
         "model.adapters.0.path: adapter_model.safetensors: base_model.model.model.layers.0.self_attn.q_proj.lora_A"
         ".weight has shape [4, 32], but model.layers.0.self_attn.q_proj of the base is [64, 64] (lora_A must be "
         "[r, 64]); use an adapter trained for this base model"),
        ({"path": str(dora)},
         f"model.adapters.0.path: {dora / 'adapter_config.json'} is a DoRA adapter (use_dora: true), which no runtime "
         "serves per request (PEFT refuses DoRA in a mixed-adapter batch; TensorRT-LLM's LoRA converter and vLLM "
         "take plain LoRA); merge it into a checkpoint of its own, or train the adapter without use_dora"),
        ({"path": str(paths[1]), "max": 4},
         "model.adapters.0.path: rank 8 is above model.max_adapter_rank 4; raise model.max_adapter_rank (or leave "
         "it unset: the largest adapter's rank)"),
    ]
    for case, expected in cases:
        spec = _spec(tmp_path, base, [{"name": "x", "path": case["path"]}])
        if "max" in case:
            data = yaml.safe_load(spec.read_text())
            data["model"]["max_adapter_rank"] = case["max"]
            spec.write_text(yaml.safe_dump(data))
        assert _problems(spec) == [expected]
    problems = _problems(_spec(tmp_path, base, [{"name": "x", "path": str(unreadable)}]))
    assert len(problems) == 1 and problems[0].startswith(
        f"model.adapters.0.path: {unreadable / 'adapter_config.json'} is not readable JSON ("), problems


def test_a_bad_adapter_exits_2_and_writes_nothing(models, tmp_path, capsys):
    base, paths, wrong_shape = models
    spec = _spec(tmp_path, base, [{"name": "x", "path": str(wrong_shape)}])
    out = tmp_path / "repo"
    assert main(["render", str(spec), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "model.adapters.0.path: adapter_model.safetensors:" in err and "Traceback" not in err
    assert not out.exists()
    assert main(["validate", str(spec)]) == 2


def test_deploy_targets_refuse_adapters_until_they_carry_them(models, tmp_path):
    from tritongen.deploy.common import prepare

    base, paths, _ = models
    with pytest.raises(SpecError) as err:
        prepare(_spec(tmp_path, base, [{"name": "x", "path": str(paths[0])}]))
    runtime = yaml.safe_load(_spec(tmp_path, base, []).read_text())["runtime"]
    assert err.value.problems == [
        f"model.adapters: deploy targets do not carry the {runtime} runtime's LoRA adapters into their containers "
        "yet; serve the adapters on this machine (`tritongen serve` / `tritongen up`), use runtime tensorrtllm, or "
        "deploy without model.adapters"]
