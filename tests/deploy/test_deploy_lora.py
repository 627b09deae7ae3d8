"""LoRA adapters in deployments: compose (and the docker target, from the same mounts) carries the tensorrtllm
runtime's converted adapters read-only at /models/lora, where the tensorrt_llm model prefetches them and the BLS
resends them from; on Kubernetes the models Job fetches each PEFT folder (deploy.adapter_uris, or the volume) and
converts them there; runtimes that cannot carry adapters refuse with the field and the fix."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from tritongen.deploy import render_deployment
from tritongen.deploy.common import prepare
from tritongen.deploy.docker import docker_run_kwargs
from tritongen.deploy.next_steps import warnings
from tritongen.errors import SpecError
from k8s_schemas import validate
from validators import compose_config, kustomize

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


def _k8s_spec(lora_spec: Path, **deploy) -> Path:
    data = yaml.safe_load(lora_spec.read_text())
    data["deploy"] = deploy
    spec = lora_spec.parent / "k8s.yaml"  # next to the checkpoint and adapters
    spec.write_text(yaml.safe_dump(data))
    return spec


def _job_script(objects: list[dict]) -> str:
    job = next(o for o in objects if o["kind"] == "Job")
    return job["spec"]["template"]["spec"]["containers"][0]["command"][2]


def test_kubernetes_converts_the_adapters_into_the_folder_the_models_read(lora_spec, tmp_path):
    dep = prepare(_k8s_spec(lora_spec, adapter_uris={"a1": "hf://org/lora-a1@v2"}), inventory=INVENTORY)
    files = render_deployment(dep, "k8s")
    objects = kustomize(_write(files, tmp_path) / "k8s" / "base")
    for obj in objects:
        validate(obj)
    # The repository the Job copies into the volume reads the adapters where the Job converts them.
    configmap = next(o for o in objects if o["kind"] == "ConfigMap" and "model-repository" in o["metadata"]["name"])
    items = {i["path"]: i["key"] for o in objects if o["kind"] == "Job"
             for i in o["spec"]["template"]["spec"]["volumes"][1]["configMap"]["items"]}
    params = {model: {k: v.string_value for k, v in text_format.Parse(
        configmap["data"][items[f"{model}/config.pbtxt"]], model_config_pb2.ModelConfig()).parameters.items()}
        for model in ("tensorrt_llm", "tensorrt_llm_bls")}
    assert params["tensorrt_llm"]["lora_prefetch_dir"] == params["tensorrt_llm_bls"]["lora_dir"] == "/models/lora"
    script = _job_script(objects)
    # a1 fetched from its URI, a2 expected in the volume; both converted by the image's own script, then swapped in
    assert "org/lora-a1 v2 /models/adapters/a1.partial" in script
    assert ("test -e /models/adapters/a2/adapter_config.json || fail '/models/adapters/a2 is empty: set "
            "deploy.adapter_uris.a2, or copy the files into the volume (docs/deploy.md)'") in script
    assert ("rm -rf /models/lora.partial && python3 /app/examples/hf_lora_convert.py -i /models/adapters/a1 -o "
            "/models/lora.partial/1 --storage-type float16 && python3 /app/examples/hf_lora_convert.py -i "
            "/models/adapters/a2 -o /models/lora.partial/2 --storage-type float16 && rm -rf /models/lora && "
            "mv /models/lora.partial /models/lora || fail") in script
    assert script.index("/models/lora.partial /models/lora") < script.index("touch /models/.tritongen/")
    assert "lora/ (LoRA adapters converted from adapters/)" in files["k8s/base/pvc.yaml"].decode()
    # What would fail at apply time: a2's folder is not fetched, so it must be in the volume.
    assert [w for w in warnings(dep, "k8s", image_given=False) if w.startswith("deploy.adapter_uris")] == [
        "deploy.adapter_uris: none for a2, so the models Job expects those PEFT folders already in the volume at "
        "/models/adapters/<name> and fails otherwise; set deploy.adapter_uris.<name> (hf://org/name or an http(s) "
        ".tar.gz), or copy them into the volume before the Job runs"]


def _run_job(script: str, root: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    """The Job's script with /models and the ConfigMap under `root`, and a `python3` that converts as
    hf_lora_convert.py does with tritongen's own converter (the serving image is not here)."""
    shim = tmp_path / "bin" / "python3"
    shim.parent.mkdir(exist_ok=True)
    shim.write_text(f"""#!{sys.executable}
import sys
from pathlib import Path
import numpy as np
from tritongen.runtimes.tensorrtllm.lora import CONFIG, WEIGHTS, convert_adapter
args = sys.argv[1:]
assert args[0].endswith("/hf_lora_convert.py") and args[-2:] == ["--storage-type", "float16"], args
if Path(args[args.index("-i") + 1], "broken").exists():
    sys.exit("cannot convert")
out = Path(args[args.index("-o") + 1])
out.mkdir(parents=True)
weights, config = convert_adapter(args[args.index("-i") + 1])
np.save(out / WEIGHTS, weights)
np.save(out / CONFIG, config)
""")
    shim.chmod(0o755)
    text = script.replace("/config/model_repository", str(root / "config")).replace("/models", str(root / "models"))
    env = {**os.environ, "PATH": f"{shim.parent}:{os.environ['PATH']}", "JOB_NAME": "job"}
    return subprocess.run(["sh", "-c", text], env=env, capture_output=True, text=True, timeout=120)


def test_the_models_job_converts_the_adapters_it_finds_and_names_the_one_it_does_not(lora_spec, tmp_path):
    from tritongen.runtimes.tensorrtllm.lora import CONFIG, WEIGHTS, convert_adapter

    dep = prepare(_k8s_spec(lora_spec), inventory=INVENTORY)
    script = _job_script(kustomize(_write(render_deployment(dep, "k8s"), tmp_path / "out") / "k8s" / "base"))
    root = tmp_path / "volume"
    (root / "config").mkdir(parents=True)
    for folder in ("checkpoint", "engine"):  # the checkpoint and the engine are there: only the adapters are work
        (root / "models" / folder).mkdir(parents=True)
        (root / "models" / folder / "config.json").write_text("{}")
    adapters = {a.name: a for a in dep.plan.adapters}
    shutil.copytree(adapters["a1"].path, root / "models" / "adapters" / "a1")
    failed = _run_job(script, root, tmp_path)
    assert failed.returncode != 0
    (reason,) = [p.read_text() for p in (root / "models" / ".tritongen").glob("*.failed")]
    assert reason.startswith(f"{root}/models/adapters/a2 is empty: set deploy.adapter_uris.a2")
    shutil.copytree(adapters["a2"].path, root / "models" / "adapters" / "a2")
    (root / "models" / "adapters" / "a2" / "broken").touch()  # the converter fails on it
    failed = _run_job(script, root, tmp_path)
    assert failed.returncode != 0 and not (root / "models" / "lora").exists()
    (reason,) = [p.read_text() for p in (root / "models" / ".tritongen").glob("*.failed")]
    assert reason == "converting the LoRA adapters failed; see the log of job/job\n"
    (root / "models" / "adapters" / "a2" / "broken").unlink()
    done = _run_job(script, root, tmp_path)
    assert done.returncode == 0, done.stderr
    assert [p.suffix for p in (root / "models" / ".tritongen").iterdir()] == [".done"]
    for name, adapter in adapters.items():
        weights, config = convert_adapter(adapter.path)
        folder = root / "models" / "lora" / str(adapter.task_id)
        assert np.load(folder / WEIGHTS).tobytes() == weights.tobytes()
        assert np.load(folder / CONFIG).tolist() == config.tolist()
    assert not (root / "models" / "lora.partial").exists()


def test_a_failed_engine_build_or_fetch_ends_the_models_job_with_its_reason(lora_spec, tmp_path):
    # `set -e` does not end a script at a failure inside an && list, also not as an if's body: without `|| fail` the
    # Job went on after a failed build or fetch and wrote the done marker. (The python3 here converts adapters only,
    # so the engine build's and the fetch's python3 fail.)
    dep = prepare(_k8s_spec(lora_spec, adapter_uris={"a2": "https://example.invalid/a2.tar.gz"}), inventory=INVENTORY)
    script = _job_script(kustomize(_write(render_deployment(dep, "k8s"), tmp_path / "out") / "k8s" / "base"))
    root = tmp_path / "volume"
    (root / "config").mkdir(parents=True)
    (root / "models" / "checkpoint").mkdir(parents=True)
    (root / "models" / "checkpoint" / "config.json").write_text("{}")
    run = _run_job(script, root, tmp_path)
    assert run.returncode != 0 and not (root / "models" / "engine").exists()
    (reason,) = [p.read_text() for p in (root / "models" / ".tritongen").glob("*.failed")]
    assert reason == "building the TensorRT-LLM engine failed; see the log of job/job\n"
    (root / "models" / "engine").mkdir()
    (root / "models" / "engine" / "config.json").write_text("{}")
    shutil.copytree(next(a.path for a in dep.plan.adapters if a.name == "a1"), root / "models" / "adapters" / "a1")
    run = _run_job(script, root, tmp_path)
    assert run.returncode != 0 and not (root / "models" / "adapters" / "a2").exists()
    (reason,) = [p.read_text() for p in (root / "models" / ".tritongen").glob("*.failed")]
    assert reason == ("fetching https://example.invalid/a2.tar.gz (deploy.adapter_uris.a2) failed; see the log of "
                      "job/job\n")
    assert not list((root / "models" / ".tritongen").glob("*.done"))


def test_an_adapter_uri_must_name_an_adapter(lora_spec):
    with pytest.raises(SpecError) as err:
        prepare(_k8s_spec(lora_spec, adapter_uris={"a3": "hf://org/a3"}), inventory=INVENTORY)
    assert err.value.problems == [
        "deploy.adapter_uris.a3: names no adapter of model.adapters (known: a1, a2); use an adapter's name, or "
        "remove the entry"]
