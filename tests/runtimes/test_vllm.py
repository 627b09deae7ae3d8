"""The vllm runtime (Triton's vLLM backend) against recorded facts of the vllm_backend release, rendered, verified
and deployed as files. Nothing here starts vLLM: no vLLM container is available to the test suite."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from tritonclient.grpc import model_config_pb2

from specs import apply_overrides
from tritongen.cli import main
from tritongen.runtimes import clients, launch
from tritongen.runtimes import vllm
from tritongen.runtimes.tensorrtllm.release import TRTLLM
from tritongen.verify import parse_config, verify_repository

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).parents[1] / "fixtures"
FACTS = json.loads((FIXTURES / "nvidia" / "vllm_backend-r26.01.json").read_text())
BACKEND = FACTS["vllm_backend"]["model_py"]


def _spec(tmp_path: Path, tiny_model: Path, **overrides) -> Path:
    """examples/llama3-8b-vllm.yaml with the 8B config.json as checkpoint and the tiny demo tokenizer beside it."""
    ckpt = tmp_path / "ckpt"
    if not ckpt.exists():
        shutil.copytree(ROOT / "examples" / "checkpoints" / "llama-3.1-8b", ckpt)
        for f in tiny_model.glob("tokenizer*"):
            shutil.copy(f, ckpt / f.name)
    data = yaml.safe_load((ROOT / "examples" / "llama3-8b-vllm.yaml").read_text())
    data["model"]["checkpoint"] = str(ckpt)
    apply_overrides(data, overrides)
    path = tmp_path / f"spec-{len(list(tmp_path.glob('spec-*')))}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_the_contract_is_the_backends():
    recorded = {name: (dtype, tuple(dims), optional) for name, dtype, dims, optional in BACKEND["inputs"]}
    for name, dtype, dims, optional in vllm.CONTRACT_INPUTS:
        assert recorded.pop(name) == (dtype, dims, optional), name
    assert sorted(recorded) == ["embedding_request", "image"]  # left out on purpose (module docstring)
    assert [(n, d, tuple(s)) for n, d, s, _ in BACKEND["outputs"]] == list(vllm.CONTRACT_OUTPUTS)
    assert {"text_input", "stream", "sampling_parameters", "exclude_input_in_output"} <= {
        n for n, *_ in vllm.CONTRACT_INPUTS}
    assert {"num_input_tokens", "num_output_tokens"} <= {n for n, *_ in vllm.CONTRACT_OUTPUTS}


def test_the_names_tritongen_sends_and_reads_are_the_recorded_upstream_names():
    from tritongen.runtimes.vllm.dialect import SAMPLING_FIELDS

    # What the dialect puts in sampling_parameters: vLLM SamplingParams fields (tests/fixtures/nvidia).
    assert {"max_tokens", "stop", *SAMPLING_FIELDS} <= set(FACTS["sampling_params"]["fields_used"])
    # The counter the load report checks its token total against: one the backend exports.
    assert clients("vllm").output_token_counter in FACTS["vllm_backend"]["request"]["metric_counters"]


def test_engine_args_keys_are_engine_args_fields():
    assert vllm.ENGINE_ARGS_KEYS <= set(FACTS["engine_args"]["fields"])


def test_guides_and_lora_ranks_are_the_pinned_vllms():
    from tritongen.runtimes.vllm.dialect import STRUCTURED_OUTPUTS_FIELDS

    # vLLM 0.13.0's StructuredOutputsParams constraints and LoRAConfig ranks (the fixture's `sampling_params`,
    # `engine_args`); the SamplingParams field is `structured_outputs`, which the fixture lists as used.
    assert set(STRUCTURED_OUTPUTS_FIELDS.values()) <= set(
        FACTS["sampling_params"]["structured_outputs_params"]["constraints"])
    assert "structured_outputs" in FACTS["sampling_params"]["fields_used"]
    assert vllm.MAX_LORA_RANKS == tuple(FACTS["engine_args"]["lora_config"]["max_lora_rank"])
    assert vllm.GPU_MEMORY_UTILIZATION == FACTS["engine_args"]["defaults"]["gpu_memory_utilization"]
    # The fixture describes the release the runtime pins (vllm/release.py).
    release = FACTS["release"]
    assert release["vllm"] == vllm.VLLM_VERSION == release["build_py"]["vllm_version"]
    assert release["matrix"]["vllm"].split("+", 1)[0] == vllm.VLLM_VERSION
    assert FACTS["vllm_backend"]["commit"] == launch("vllm").upstream.pin.backend.source.commit


def test_image_is_the_vllm_runtimes_own_pin():
    # Its own release: the vllm line goes on after the TensorRT-LLM one stopped at 26.07 (vllm/release.py).
    assert vllm.IMAGE == "nvcr.io/nvidia/tritonserver:26.01-vllm-python-py3" == FACTS["container"]
    assert vllm.IMAGE != TRTLLM.container.replace("-trtllm-python-py3", "-vllm-python-py3")
    assert launch("vllm").image() == vllm.IMAGE


def test_rendered_repository_parses_and_verifies(tmp_path, tiny_model):
    out = tmp_path / "repo"
    spec = _spec(tmp_path, tiny_model)
    assert main(["render", str(spec), "-o", str(out), "--inventory", str(FIXTURES / "inventories" / "h200-1x.yaml")]) == 0
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file() and p.name != ".tritongen-rendered")
    assert files == ["frontend.json", "tensorrt_llm/1/model.json", "tensorrt_llm/config.pbtxt", "tritongen-repository.json"]
    (route,) = json.loads((out / "frontend.json").read_text())["models"]
    assert (route["triton_model"], route["dialect"]) == ("tensorrt_llm", "vllm")
    assert verify_repository(out) == []
    assert main(["verify", str(out)]) == 0
    config = parse_config(out / "tensorrt_llm" / "config.pbtxt")
    assert config.backend == "vllm" and config.max_batch_size == BACKEND["max_batch_size"] == 0
    assert config.model_transaction_policy.decoupled is BACKEND["decoupled"] is True
    assert [(t.name, model_config_pb2.DataType.Name(t.data_type), list(t.dims), t.optional) for t in config.input] \
        == [(n, d, list(s), o) for n, d, s, o in vllm.CONTRACT_INPUTS]
    (group,) = config.instance_group
    assert model_config_pb2.ModelInstanceGroup.Kind.Name(group.kind) == "KIND_GPU" and list(group.gpus) == [0]
    assert config.parameters[BACKEND["custom_metrics_parameter"]].string_value == "true"
    args = json.loads((out / "tensorrt_llm" / "1" / "model.json").read_text())
    assert set(args) <= vllm.ENGINE_ARGS_KEYS
    assert args["model"] == str(tmp_path / "ckpt") and args["tensor_parallel_size"] == 1
    assert args["max_num_seqs"] == 64 and args["enable_prefix_caching"] is True and args["dtype"] == "bfloat16"


def test_streaming_off_is_refused(tmp_path, tiny_model, capsys):
    spec = _spec(tmp_path, tiny_model, **{"serving.streaming": False})
    assert main(["render", str(spec), "-o", str(tmp_path / "repo")]) == 2
    assert "serving.streaming: is false, and the vLLM backend requires a decoupled model" in capsys.readouterr().err


def test_up_says_vllm_needs_its_container(tmp_path, tiny_model, capsys):
    assert main(["up", str(_spec(tmp_path, tiny_model)), "--out", str(tmp_path / "up")]) == 3
    assert "the embedded tritonserver has no vLLM" in capsys.readouterr().err


def test_the_dialect_speaks_the_backends_tensors():
    from tritongen.runtimes import dialect
    from tritongen.runtimes.vllm.dialect import DIALECT

    assert clients("vllm").dialect() is DIALECT is dialect("vllm") and dialect("ensemble") is None
    contract = {name: (dtype, dims) for name, dtype, dims, _ in vllm.CONTRACT_INPUTS}
    inputs = DIALECT.grpc_inputs("Hello", 16, stream=True, stop=["\n\n", "", "END"], temperature=0.5, top_p=0.9,
                                 top_k=4, seed=7, presence_penalty=0.1, frequency_penalty=0.2, min_tokens=3)
    for tensor in inputs:
        dtype, dims = contract[tensor.name()]
        assert "TYPE_" + tensor.datatype().replace("BYTES", "STRING") == dtype
        assert tensor.shape() == list(dims)  # max_batch_size 0: the config dims are the whole shape
    body = DIALECT.http_body("Hello", 16, stream=True, stop=["\n\n", "", "END"], temperature=0.5, top_p=0.9,
                             top_k=4, seed=7, presence_penalty=0.1, frequency_penalty=0.2, min_tokens=3)
    assert [t.name() for t in inputs] == list(body) == [
        "text_input", "stream", "sampling_parameters", "exclude_input_in_output", "return_finish_reason",
        "return_num_input_tokens", "return_num_output_tokens"]
    assert body["text_input"] == "Hello" and body["stream"] is True and body["exclude_input_in_output"] is True
    # One JSON string of vLLM SamplingParams fields; the empty stop string (which vLLM refuses) is left out.
    assert json.loads(body["sampling_parameters"]) == {
        "max_tokens": 16, "stop": ["\n\n", "END"], "temperature": 0.5, "top_p": 0.9, "top_k": 4, "seed": 7,
        "presence_penalty": 0.1, "frequency_penalty": 0.2, "min_tokens": 3}
    assert json.loads(DIALECT.http_body("Hi", 4, stream=False, temperature=None)["sampling_parameters"]) == {
        "max_tokens": 4}
    with pytest.raises(ValueError, match="takes no 'best_of'"):
        DIALECT.request_inputs("Hello", 16, stream=True, best_of=2)
    assert set(DIALECT.outputs) <= {n for n, *_ in vllm.CONTRACT_OUTPUTS}
    assert DIALECT.count_source == "server" and DIALECT.unsupported == ()
    # The reader follows the recorded streamed text_output (tests/fixtures/nvidia, `request`): each response's
    # delta passed on as it is ("delta"), or the text new since the previous whole text ("whole").
    pieces = ["Hel", "lo", " 🙂"]
    sent = pieces if FACTS["vllm_backend"]["request"]["streamed_text_output"] == "delta" else \
        ["Hel", "Hello", "Hello 🙂"]
    text = DIALECT.text()
    assert [text.feed(p, i == 2) for i, p in enumerate(sent)] == pieces
    assert text.sent == "Hello 🙂" and text.end(sent[-1]) == ""


def test_the_openai_frontend_is_planned_for_the_vllm_backend(tmp_path, tiny_model, capsys):
    out = tmp_path / "repo"
    assert main(["render", str(_spec(tmp_path, tiny_model, **{"frontend.openai.enabled": True})), "-o", str(out)]) == 0
    config = json.loads((out / "frontend.json").read_text())
    assert config["enabled"] is True and config["models"][0]["dialect"] == "vllm"
    spec = _spec(tmp_path, tiny_model, **{"frontend.openai.enabled": True, "frontend.openai.implementation": "triton"})
    assert main(["render", str(spec), "-o", str(tmp_path / "repo2")]) == 2
    assert capsys.readouterr().err.startswith(
        "error: frontend.openai.implementation: triton cannot drive the vllm runtime's model (tritongen starts "
        "Triton's frontend with its TensorRT-LLM converter, which sends stream, max_tokens and 2-D tensors; Triton's "
        "vLLM backend takes stream, sampling_parameters as one JSON string and 1-D tensors)")


@pytest.mark.parametrize("inventory,groups", [("h200-1x.yaml", 1), ("h200-2x3g.yaml", 2)])
def test_deploy_vllm_to_compose_and_k8s_with_its_image(tmp_path, tiny_model, inventory, groups):
    import kubernetes_validate

    from tritongen.deploy import render_deployment
    from tritongen.deploy.common import prepare

    dep = prepare(_spec(tmp_path, tiny_model, **{"frontend.openai.enabled": True}),
                  inventory=str(FIXTURES / "inventories" / inventory))
    assert dep.image == vllm.IMAGE and not dep.builds_serving_image
    assert json.loads(dep.repository["tensorrt_llm/1/model.json"])["model"] == "/models/checkpoint"
    # The frontend and the load test are served as for the other runtimes: through the vLLM dialect.
    assert json.loads(dep.repository["frontend.json"])["models"][0]["dialect"] == "vllm"
    services = yaml.safe_load(render_deployment(dep, "compose")["docker-compose.yaml"])["services"]
    assert services["openai"]["command"][:3] == ["serve", "/models/model_repository", "--openai"]
    assert services["loadtest"]["command"][0] == "loadtest"
    assert {"k8s/base/openai-deployment.yaml", "k8s/loadtest/loadtest.yaml"} <= set(render_deployment(dep, "k8s"))
    for target in ("compose", "k8s"):
        out = tmp_path / target
        for rel, data in render_deployment(dep, target).items():
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            (out / rel).write_bytes(data)
        if target == "compose":
            if shutil.which("docker-compose") is None:
                continue
            done = subprocess.run(["docker-compose", "config"], cwd=out, capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, done.stderr
            services = {k: v for k, v in yaml.safe_load(done.stdout)["services"].items() if k.startswith("triton-")}
            assert len(services) == groups
            for service in services.values():
                assert service["image"] == vllm.IMAGE
                assert service["command"][0] == vllm.TRITONSERVER and "mpirun" not in service["command"]
        else:
            done = subprocess.run(["kubectl", "kustomize", str(out / "k8s" / "base")], capture_output=True, text=True,
                                  timeout=60)
            assert done.returncode == 0, done.stderr
            docs = list(yaml.safe_load_all(done.stdout))
            for doc in docs:
                if doc["kind"] != "PodMonitor":
                    assert kubernetes_validate.validate(doc, "1.30", strict=True) == "1.30", doc["kind"]
            pods = [d for d in docs if d["kind"] == "Deployment" and "openai" not in d["metadata"]["name"]]
            assert sum(d["spec"]["replicas"] for d in pods) == groups
            images = {c["image"] for d in pods for c in d["spec"]["template"]["spec"]["containers"]}
            assert vllm.IMAGE in images


def test_verify_flags_a_model_json_key_that_is_no_engine_args_field(tmp_path, tiny_model):
    out = tmp_path / "repo"
    assert main(["render", str(_spec(tmp_path, tiny_model)), "-o", str(out)]) == 0
    path = out / "tensorrt_llm" / "1" / "model.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "gpu_memory_utilisation": 0.5}))
    assert [str(f) for f in verify_repository(out)] == [
        "tensorrt_llm/1/model.json: 'gpu_memory_utilisation' is not a vLLM EngineArgs field tritongen checked"]
