"""LoRA adapters in deployments: compose (and the docker target, from the same mounts) carries the tensorrtllm
runtime's converted adapters read-only at /models/lora, where the tensorrt_llm model prefetches them and the BLS
resends them from; targets and runtimes that cannot carry adapters refuse with the field and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from tritongen.deploy import render_deployment
from tritongen.deploy.common import prepare
from tritongen.deploy.docker import docker_run_kwargs
from tritongen.errors import SpecError
from validators import compose_config

ROOT = Path(__file__).resolve().parents[2]
INVENTORY = str(ROOT / "tests" / "fixtures" / "inventories" / "h200-1x.yaml")


@pytest.fixture(scope="module")
def lora_spec(tmp_path_factory):
    from tritongen.demo.adapters import make_demo_adapters
    from tritongen.demo.model import make_demo_model

    root = tmp_path_factory.mktemp("deploy-lora")
    model = make_demo_model(root / "tiny-llama")
    adapters = make_demo_adapters(model, 2)
    data = yaml.safe_load((ROOT / "examples" / "llama3-8b-trtllm.yaml").read_text())
    data["model"].update(checkpoint=str(model), adapters=[{"name": f"a{i}", "path": str(p)}
                                                          for i, p in enumerate(adapters, 1)])
    data["engine"]["cache_dir"] = str(root / "cache")
    spec = root / "spec.yaml"
    spec.write_text(yaml.safe_dump(data))
    return spec


def _write(files: dict[str, bytes], out: Path) -> Path:
    for rel, data in files.items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_bytes(data)
    return out


def _params(files: dict[str, bytes], model: str) -> dict[str, str]:
    config = text_format.Parse(files[f"model_repository/{model}/config.pbtxt"].decode(), model_config_pb2.ModelConfig())
    return {k: v.string_value for k, v in config.parameters.items()}


def test_compose_mounts_the_converted_adapters_where_the_models_read_them(lora_spec, tmp_path, monkeypatch):
    dep = prepare(lora_spec, inventory=INVENTORY)
    prefetch = dep.plan.runtime_settings.lora.prefetch_dir
    files = render_deployment(dep, "compose")
    assert _params(files, "tensorrt_llm")["lora_prefetch_dir"] == "/models/lora"
    assert _params(files, "tensorrt_llm_bls")["lora_dir"] == "/models/lora"
    out = _write(files, tmp_path / "out")
    assert prefetch not in (out / "docker-compose.yaml").read_text()  # named by variable, as the other folders
    monkeypatch.setenv("TRITONGEN_LORA_DIR", prefetch)
    volumes = compose_config(out)["services"]["triton-gpu0"]["volumes"]
    assert [(v["source"], v.get("read_only")) for v in volumes if v["target"] == "/models/lora"] == [(prefetch, True)]
    # The docker target starts the same containers from the same mounts.
    run = docker_run_kwargs(dep, dep.placement.server_groups[0], out)
    lora = [m for m in run["mounts"] if m["Target"] == "/models/lora"]
    assert [(m["Source"], m["ReadOnly"]) for m in lora] == [(prefetch, True)]
    # The load test's plan names the container's folder, not this machine's.
    plan = yaml.safe_load(files["loadtest/plan.json"])
    assert plan["runtime_settings"]["lora"]["prefetch_dir"] == "/models/lora"


def test_kubernetes_refuses_adapters_with_the_fix(lora_spec):
    dep = prepare(lora_spec, inventory=INVENTORY)
    with pytest.raises(SpecError) as err:
        render_deployment(dep, "k8s")
    assert err.value.problems == [
        "model.adapters: the Kubernetes target's models Job does not put LoRA adapters into the models volume yet; "
        "deploy with --target compose (it mounts the converted adapters), or without model.adapters"]
