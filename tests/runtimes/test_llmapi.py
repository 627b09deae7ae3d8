"""The trtllm runtime (NVIDIA's LLM-API model) against recorded facts of the pinned release, plus golden
repositories for the LLM-API example (one H200, MIG 3g.71gb) and the TensorRT engine example."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from tritonclient.grpc import model_config_pb2

from specs import apply_overrides, assert_golden, served_files
from tritongen.cli import main
from tritongen.plan import Plan
from tritongen.runtimes.llmapi import contract, model_yaml
from tritongen.runtimes.llmapi.sizing import cuda_graph_batch_sizes, finetune
from tritongen.verify import parse_config, verify_repository

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).parents[1] / "fixtures"
GOLDEN = Path(__file__).parents[1] / "golden"
FACTS = json.loads((FIXTURES / "nvidia" / "trtllm-1.2.1.json").read_text())


def _spec(tmp_path: Path, tiny_model: Path, example: str, **overrides) -> Path:
    """An example spec with the 8B config.json as checkpoint and the tiny demo tokenizer beside it."""
    ckpt = tmp_path / "ckpt"
    if not ckpt.exists():
        shutil.copytree(ROOT / "examples" / "checkpoints" / "llama-3.1-8b", ckpt)
        for f in tiny_model.glob("tokenizer*"):
            shutil.copy(f, ckpt / f.name)
    data = yaml.safe_load((ROOT / "examples" / example).read_text())
    data["model"]["checkpoint"] = str(ckpt)
    apply_overrides(data, overrides)
    path = tmp_path / f"spec-{len(list(tmp_path.glob('spec-*')))}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _render(spec: Path, out: Path, *extra: str) -> dict[str, str]:
    assert main(["render", str(spec), "-o", str(out), *extra]) == 0
    return {str(p.relative_to(out)): p.read_text() for p in sorted(out.rglob("*"))
            if p.is_file() and p.name != ".tritongen-rendered"}  # the marker of a folder tritongen wrote


def _tensors(tensors) -> list[dict]:
    return [{"name": t.name, "data_type": model_config_pb2.DataType.Name(t.data_type), "dims": list(t.dims),
             "optional": getattr(t, "optional", False)} for t in tensors]


# ---------------------------------------------------------------------------------------------- sizing


@pytest.mark.parametrize("case", FACTS["bench_tuning"]["cases"], ids=lambda c: f"{c['kv_requests']}req")
def test_sizing_rounds_as_trtllm_bench(case):
    assert finetune(case["kv_requests"], case["isl"], case["osl"], case["pp"]) == (case["max_batch_size"],
                                                                                   case["max_num_tokens"])


def test_cuda_graph_batch_sizes_follow_the_release_rules():
    assert cuda_graph_batch_sizes(384, padding=True) == [1, 2, 4, *range(8, 129, 8), 192, 256, 320, 384]
    assert cuda_graph_batch_sizes(300, padding=False) == [*range(1, 33), 64, 128, 256, 300]
    assert cuda_graph_batch_sizes(64, padding=True) == [1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64]


# ---------------------------------------------------------------------------------------------- contract


def test_package_tables_are_within_the_recorded_release_facts():
    facts = FACTS["llmapi_config_pbtxt"]
    recorded = {t["name"]: t for t in facts["inputs"]}
    for t in contract.INPUTS:
        assert recorded[t.name] == {"name": t.name, "data_type": t.data_type, "dims": list(t.dims),
                                    "optional": t.optional}
    assert [(t.name, t.data_type, list(t.dims)) for t in contract.OUTPUTS] == [
        (t["name"], t["data_type"], t["dims"]) for t in facts["outputs"]]
    args = FACTS["llm_args"]
    assert contract.LLM_ARGS_KEYS <= set(args["TorchLlmArgs"])
    assert contract.KV_CACHE_CONFIG_KEYS <= set(args["KvCacheConfig"])
    assert contract.CUDA_GRAPH_CONFIG_KEYS <= set(args["CudaGraphConfig"])
    assert contract.TRITON_CONFIG_KEYS == set(FACTS["llmapi_model_yaml"]["triton_config_keys"])
    assert contract.TRITON_MAX_BATCH_SIZE == FACTS["llmapi_model_yaml"]["triton_max_batch_size"]


def test_rendered_llmapi_repository_matches_the_release(tmp_path, tiny_model):
    spec = _spec(tmp_path, tiny_model, "llama3-8b-llmapi.yaml", **{"llmapi.cuda_graphs": False})
    out = tmp_path / "repo"
    files = _render(spec, out, "--inventory", str(FIXTURES / "inventories" / "h200-1x.yaml"))
    assert sorted(files) == ["frontend.json", "tensorrt_llm/1/model.yaml", "tensorrt_llm/config.pbtxt",
                             "tritongen-repository.json"]
    facts = FACTS["llmapi_config_pbtxt"]
    config = parse_config(out / "tensorrt_llm" / "config.pbtxt")
    assert (config.name, config.backend) == (facts["name"], facts["backend"])
    # triton_config in model.yaml sets these through auto_complete_config; config.pbtxt must leave them unset.
    assert config.max_batch_size == 0 and not config.HasField("model_transaction_policy")
    recorded_inputs = {t["name"]: t for t in facts["inputs"]}
    assert all(recorded_inputs[t["name"]] == t for t in _tensors(config.input))
    assert [t for t in recorded_inputs.values() if not t["optional"]] == [
        t for t in _tensors(config.input) if not t["optional"]]
    assert [(t["name"], t["data_type"], t["dims"]) for t in _tensors(config.output)] == [
        (t["name"], t["data_type"], t["dims"]) for t in facts["outputs"]]
    group = config.instance_group[0]
    assert (group.count, model_config_pb2.ModelInstanceGroup.Kind.Name(group.kind)) == (1, "KIND_CPU")
    assert "gpu_device_ids" not in config.parameters

    data = yaml.safe_load(files["tensorrt_llm/1/model.yaml"])
    args = FACTS["llm_args"]
    assert set(data) - {"triton_config"} <= set(args["TorchLlmArgs"])
    assert set(data["kv_cache_config"]) <= set(args["KvCacheConfig"])
    assert data["triton_config"] == {"max_batch_size": 0, "decoupled": True}
    assert data["cuda_graph_config"] is None
    assert data["backend"] == "pytorch" and data["tensor_parallel_size"] == 1
    assert data["kv_cache_config"]["max_tokens"] > 0  # the placement's budget, absolute
    # The checkpoint's context length, not the load profile's longest request.
    assert data["max_seq_len"] == json.loads((ROOT / "examples/checkpoints/llama-3.1-8b/config.json").read_text())[
        "max_position_embeddings"]
    assert verify_repository(out) == []


def test_several_instances_per_server_are_refused_for_the_pinned_release(tmp_path, tiny_model, capsys):
    spec = _spec(tmp_path, tiny_model, "llama3-8b-llmapi.yaml", **{"placement.instances_per_gpu": 2})
    assert main(["render", str(spec), "-o", str(tmp_path / "repo")]) == 2
    assert capsys.readouterr().err.startswith(
        "error: placement.instances_per_gpu: is 2, and NVIDIA's llmapi model in TensorRT-LLM 1.2.1 runs one instance "
        "per tritonserver")


def test_without_a_kv_budget_the_llm_api_sizes_the_batch_itself(tmp_path, tiny_model):
    files = _render(_spec(tmp_path, tiny_model, "llama3-8b-llmapi.yaml"), tmp_path / "repo")
    data = yaml.safe_load(files["tensorrt_llm/1/model.yaml"])
    assert "max_batch_size" not in data and "max_num_tokens" not in data
    assert data["cuda_graph_config"] == {"enable_padding": True}
    assert data["max_seq_len"] == 131072
    shorter = _render(_spec(tmp_path, tiny_model, "llama3-8b-llmapi.yaml", **{"llmapi.max_seq_len": 4096}),
                      tmp_path / "repo2")
    assert yaml.safe_load(shorter["tensorrt_llm/1/model.yaml"])["max_seq_len"] == 4096


def test_an_enabled_frontend_is_planned_for_the_llmapi_model(tmp_path, tiny_model, capsys):
    files = _render(_spec(tmp_path, tiny_model, "llama3-8b-llmapi.yaml", **{"frontend.openai.enabled": True}),
                    tmp_path / "repo")
    (route,) = json.loads(files["frontend.json"])["models"]
    assert json.loads(files["frontend.json"])["enabled"] is True
    assert (route["triton_model"], route["dialect"]) == ("tensorrt_llm", "llmapi")
    spec = _spec(tmp_path, tiny_model, "llama3-8b-llmapi.yaml", **{"frontend.openai.enabled": True,
                                                                     "frontend.openai.implementation": "triton"})
    assert main(["render", str(spec), "-o", str(tmp_path / "repo3")]) == 2
    assert capsys.readouterr().err.startswith("error: frontend.openai.implementation: triton cannot drive the "
                                              "trtllm runtime's model")


def test_verify_flags_a_model_yaml_key_that_is_no_llm_args_field(tmp_path, tiny_model):
    out = tmp_path / "repo"
    _render(_spec(tmp_path, tiny_model, "llama3-8b-llmapi.yaml"), out)
    path = out / "tensorrt_llm" / "1" / "model.yaml"
    data = yaml.safe_load(path.read_text())
    data["max_tokens_in_paged_kv_cache"] = 1000
    data["kv_cache_config"]["fraction"] = 0.5
    path.write_text(yaml.safe_dump(data))
    found = sorted(str(f) for f in verify_repository(out))
    assert found == ["tensorrt_llm/1/model.yaml: 'max_tokens_in_paged_kv_cache' is not an LlmArgs field tritongen "
                     "checked for the release",
                     "tensorrt_llm/1/model.yaml: kv_cache_config.'fraction' is not a field of kv_cache_config"]


def test_sizing_follows_the_placement_budget(tmp_path, tiny_model, capsys, gpu_here):
    spec = _spec(tmp_path, tiny_model, "llama3-8b-llmapi.yaml")
    plans = {}
    for inv in ("h200-1x", "h200-2x3g"):
        assert main(["plan", str(spec), "--json", "--inventory", str(FIXTURES / "inventories" / f"{inv}.yaml")]) == 0
        plans[inv] = json.loads(capsys.readouterr().out)
    full, mig = plans["h200-1x"]["runtime_settings"], plans["h200-2x3g"]["runtime_settings"]
    assert len(plans["h200-2x3g"]["server_groups"]) == 2
    for p, plan in ((full, plans["h200-1x"]), (mig, plans["h200-2x3g"])):
        kv = plan["kv_tokens"]
        assert model_yaml(Plan.model_validate(plan))["kv_cache_config"]["max_tokens"] == kv
        assert p["sizing"]["kv_tokens"] == kv
        assert p["sizing"]["kv_requests"] == round(kv / (1024 + 256), 2)
        assert (p["max_batch_size"], p["max_num_tokens"]) == finetune(kv / 1280, 1024, 256)
    assert plans["h200-2x3g"]["kv_tokens"] < plans["h200-1x"]["kv_tokens"]
    assert mig["max_batch_size"] < full["max_batch_size"]
    # Without a KV budget nothing is invented: the LLM API sizes the batch itself, said so.
    assert main(["plan", str(spec), "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    p = plan["runtime_settings"]
    assert (p["max_batch_size"], p["max_num_tokens"], plan["kv_tokens"]) == (None, None, None)
    assert "max_tokens" not in model_yaml(Plan.model_validate(plan))["kv_cache_config"]
    assert p["sizing"]["source"].startswith("no KV budget known")


# ---------------------------------------------------------------------------------------------- golden


def _engine_for_example(tmp_path: Path) -> Path:
    """The 8B bf16 engine fixture, rebuilt (on paper) with the engine example's lengths."""
    engine = tmp_path / "engine"
    engine.mkdir()
    config = json.loads((FIXTURES / "engines" / "llama3-8b-bf16-tp1" / "config.json").read_text())
    config["build_config"].update(max_input_len=4096, max_seq_len=8192)
    (engine / "config.json").write_text(json.dumps(config))
    return engine


CASES = {
    "llmapi-8b-h200": ("llama3-8b-llmapi.yaml", ("--inventory", "h200-1x.yaml")),
    "llmapi-8b-mig-3g": ("llama3-8b-llmapi.yaml", ("--inventory", "h200-2x3g.yaml")),
    "trtllm-engine-8b": ("llama3-8b-trtllm.yaml", ()),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden_repositories(tmp_path, tiny_model, case):
    example, extra = CASES[case]
    args = [str(FIXTURES / "inventories" / a) if a.endswith(".yaml") else a for a in extra]
    if example == "llama3-8b-trtllm.yaml":
        args += ["--engine-dir", str(_engine_for_example(tmp_path))]
    out = tmp_path / "repo"
    files = {rel: text.replace(str(tmp_path), "${WORKDIR}")
             for rel, text in _render(_spec(tmp_path, tiny_model, example), out, *args).items()}
    assert verify_repository(out) == []
    # Shipped python models are compared with their source, not kept as golden copies.
    shipped = {rel: files.pop(rel).encode() for rel in [rel for rel in files if rel.endswith(".py") and "/1/" in rel]}
    assert shipped == served_files(shipped)
    assert_golden({rel: text.encode() for rel, text in files.items()}, GOLDEN / case)


# ---------------------------------------------------------------------------------------------- deploy


@pytest.mark.parametrize("inventory,groups", [("h200-1x.yaml", 1), ("h200-2x3g.yaml", 2)])
def test_deploy_llmapi_to_compose_and_k8s_passes_the_validators(tmp_path, tiny_model, inventory, groups):
    import subprocess

    import kubernetes_validate

    from tritongen.deploy import render_deployment
    from tritongen.deploy.common import prepare
    from tritongen.runtimes.tensorrtllm.release import TRTLLM

    spec = _spec(tmp_path, tiny_model, "llama3-8b-llmapi.yaml")
    dep = prepare(spec, inventory=str(FIXTURES / "inventories" / inventory))
    assert dep.image == TRTLLM.container and sorted(dep.repository) == ["frontend.json", "tensorrt_llm/1/model.yaml",
                                                                          "tensorrt_llm/config.pbtxt",
                                                                          "tritongen-repository.json"]
    inner = yaml.safe_load(dep.repository["tensorrt_llm/1/model.yaml"])
    assert inner["model"] == "/models/checkpoint" and inner["kv_cache_config"]["max_tokens"] > 0
    for target in ("compose", "k8s"):
        out = tmp_path / target
        for rel, data in render_deployment(dep, target).items():
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            (out / rel).write_bytes(data)
        if target == "compose":
            done = subprocess.run(["docker-compose", "config"], cwd=out, capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, done.stderr
            services = {k: v for k, v in yaml.safe_load(done.stdout)["services"].items() if k.startswith("triton-")}
            assert len(services) == groups
            for service in services.values():
                script = service["command"][-1]
                assert service["command"][:2] == ["bash", "-c"]
                assert f"cp {TRTLLM.llmapi_model_dir}/model.py {TRTLLM.llmapi_model_dir}/helpers.py" in script
                assert "--disable-auto-complete-config" not in script and "mpirun" not in script
                assert ("--allow-gpu-metrics=false" in script) == (groups == 2)
        else:
            done = subprocess.run(["kubectl", "kustomize", str(out / "k8s" / "base")], capture_output=True, text=True,
                                  timeout=60)
            assert done.returncode == 0, done.stderr
            for doc in yaml.safe_load_all(done.stdout):
                if doc["kind"] != "PodMonitor":
                    assert kubernetes_validate.validate(doc, "1.30", strict=True) == "1.30", doc["kind"]
            pods = [d for d in yaml.safe_load_all(done.stdout) if d["kind"] == "Deployment"]
            assert sum(d["spec"]["replicas"] for d in pods) == groups
            # The models Job puts the llmapi model into the volume (its ConfigMap maps the files back to paths).
            (job,) = [d for d in yaml.safe_load_all(done.stdout) if d["kind"] == "Job"]
            assert "tensorrt_llm/config.pbtxt" in json.dumps(job)
            # The HPA scales on the model's arrival rate: its pending count stays 0 (docs/deploy.md).
            rules = (out / "k8s" / "monitoring" / "prometheus-adapter-rules.yaml").read_text()
            assert "tritongen_request_rate" in rules and "nv_inference_pending_request_count" not in rules
            hpas = [p.read_text() for p in (out / "k8s" / "monitoring").glob("hpa-*.yaml")]  # none: nothing to scale
            assert all("tritongen_request_rate" in h for h in hpas)


# ---------------------------------------------------------------------------------------------- clients


def test_load_test_requests_speak_the_llmapi_tensor_names():
    from tritongen.runtimes.llmapi import dialect

    recorded = {t["name"]: t for t in FACTS["llmapi_config_pbtxt"]["inputs"]}
    inputs = dialect.DIALECT.grpc_inputs("Hello", 16, stream=True, temperature=0.5, top_p=0.9,
                                         top_k=4, seed=7, presence_penalty=0.1, frequency_penalty=0.2)
    for tensor in inputs:
        fact = recorded[tensor.name()]
        assert "TYPE_" + tensor.datatype().replace("BYTES", "STRING") == fact["data_type"]
        assert tensor.shape() == [1]  # max_batch_size 0: the config dims are the whole shape
    names = [t.name() for t in inputs]
    assert names[:5] == ["text_input", "streaming", "sampling_param_max_tokens",
                         "sampling_param_exclude_input_from_output", "return_finish_reason"]
    assert len(names) == 11
    body = dialect.DIALECT.http_body("Hello", 16, stream=False)
    assert set(body) <= set(recorded) and body["sampling_param_max_tokens"] == 16
    assert body["sampling_param_exclude_input_from_output"] is True
    with pytest.raises(ValueError, match="no input for 'min_tokens'"):
        dialect.request_inputs("Hello", 16, stream=True, min_tokens=4)


def test_stop_sequences_are_never_sent_to_the_llmapi_model():
    """helpers.py hands SamplingParams the stop tensor as bytes, which its tokenizer refuses (facts.json,
    double_behaviours.stop_as_bytes): the dialect refuses them and says who matches them instead."""
    from tritongen.runtimes.llmapi import dialect

    assert dialect.DIALECT.stop_on_client
    with pytest.raises(ValueError, match="sampling_param_stop.*stop_on_client"):
        dialect.DIALECT.request_inputs("Hello", 16, stream=True, stop=["END"])
    # Empty stop strings are no stop sequence at all.
    assert "sampling_param_stop" not in [n for n, _, _ in dialect.DIALECT.request_inputs("Hi", 4, stream=True,
                                                                                        stop=[""])]


@pytest.mark.parametrize("pieces, expected", [
    (["Hel", "Hello", "Hello wor", "Hello world"], ["Hel", "lo", " wor", "ld"]),
    # A response may end inside a multi-byte character; it is held back until it is complete.
    (["caf\ufffd", "café", "café \ufffd\ufffd", "café 🙂"], ["caf", "é", " ", "🙂"]),
    # A length cut inside a character: the final text keeps its U+FFFD, as the unstreamed text does.
    (["a", "a\ufffd"], ["a", "\ufffd"]),
])
def test_whole_text_responses_become_exact_deltas(pieces, expected):
    from tritongen.runtimes.llmapi.dialect import WholeText

    whole = WholeText()
    assert [whole.feed(p, i == len(pieces) - 1) for i, p in enumerate(pieces)] == expected


def test_whole_text_refuses_a_revision():
    from tritongen.runtimes.llmapi.dialect import RevisedText, WholeText

    whole = WholeText()
    whole.feed("abc", False)
    with pytest.raises(RevisedText):
        whole.feed("abd", False)


def test_up_refuses_trtllm_with_exit_3(tmp_path, tiny_model, capsys):
    spec = _spec(tmp_path, tiny_model, "llama3-8b-llmapi.yaml")
    assert main(["up", str(spec), "--out", str(tmp_path / "up")]) == 3
    assert capsys.readouterr().err.startswith("error: runtime: trtllm serves NVIDIA's llmapi model, which needs "
                                              "TensorRT-LLM 1.2.1 inside nvcr.io/nvidia/tritonserver:26.07-trtllm")


def test_trtllm_plan_is_a_lock_file_render_accepts(tmp_path, tiny_model, capsys):
    spec = _spec(tmp_path, tiny_model, "llama3-8b-llmapi.yaml")
    inventory = str(FIXTURES / "inventories" / "h200-2x3g.yaml")
    assert main(["plan", str(spec), "--json", "--inventory", inventory]) == 0
    lock = tmp_path / "plan.json"
    lock.write_text(capsys.readouterr().out)
    direct = _render(spec, tmp_path / "direct", "--inventory", inventory)
    assert _render(lock, tmp_path / "locked") == direct


def test_servers_ask_the_runtimes_whether_a_repository_completes_its_config(tmp_path, tiny_model, tiny_repo):
    """The embedded server turns auto-completion on only for a repository whose model completes its config.pbtxt
    (NVIDIA's llmapi model, from model.yaml), and verify --load names the model code that only the container adds."""
    from tritongen.errors import EnvironmentMissing
    from tritongen.runtimes import completes_own_config, missing_model_code
    from tritongen.serve import TritonServer
    from tritongen.verify import verify_load

    out = tmp_path / "repo"
    _render(_spec(tmp_path, tiny_model, "llama3-8b-llmapi.yaml"), out)
    assert completes_own_config(out) and not completes_own_config(tiny_repo)
    assert "--disable-auto-complete-config" not in TritonServer(out).command()
    assert "--disable-auto-complete-config" in TritonServer(tiny_repo).command()
    assert missing_model_code(tiny_repo) is None
    with pytest.raises(EnvironmentMissing, match=r"tensorrt_llm/1/model.py.*NVIDIA's llmapi model code"):
        verify_load(out)
    (out / "tensorrt_llm" / "1" / "model.py").write_text("")
    assert missing_model_code(out) is None
