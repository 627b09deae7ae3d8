"""Deployment targets: compose (docker-compose config), Kubernetes (kubernetes-validate), docker (SDK objects)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from unittest import mock

import pytest
import yaml

from tritongen import cli
from tritongen.deploy import render_deployment
from tritongen.deploy.common import Deployment, prepare
from tritongen.deploy.docker import docker_run_kwargs, run_docker
from tritongen.deploy.image import version
from tritongen.errors import SpecError
from specs import assert_golden
from validators import compose_config

FIXTURES = Path(__file__).parents[1] / "fixtures"
GOLDEN = Path(__file__).parents[1] / "golden" / "deploy"
MIG_UUIDS = {"3g.71gb": "MIG-5a9c1e3b-7d2f-5e8a-9c4b-1f6d3a8e2c70", "2g.35gb": "MIG-8e2d4f6a-1c3b-5a7e-9d8c-4b2f6e1a3d95"}
CASES = {  # spec, inventory, engine
    "llama3-8b-mig": ("llama3-8b-mig", "h200-all-balanced.yaml", "llama3-8b-bf16-tp1"),
    "llama3-70b-tp4": ("llama3-70b-tp4", "h100-80gb-x8.yaml", "llama3-70b-fp8-tp4"),  # FP8: not on A100
    "tiny-hf-gpu": ("tiny-hf-gpu", "mixed-h200-node.yaml", None),
    "tiny-cpu": ("tiny-cpu", None, None),  # the CPU profile: examples/tiny-cpu.yaml, no inventory
}
EXAMPLES = Path(__file__).parents[2] / "examples"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, tiny_model) -> Path:
    """The spec fixtures copied next to a demo checkpoint (config.json + tokenizer), engines pointed at fixtures."""
    root = tmp_path_factory.mktemp("deploy")
    shutil.copytree(tiny_model, root / "checkpoint")
    for spec, _, engine in CASES.values():
        source = EXAMPLES if spec == "tiny-cpu" else FIXTURES / "specs"
        data = yaml.safe_load((source / f"{spec}.yaml").read_text())
        data["model"]["checkpoint"] = "checkpoint"
        if engine:
            data["engine"]["engine_dir"] = str(FIXTURES / "engines" / engine)
        (root / f"{spec}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return root


def _prepare(workdir: Path, case: str, **kwargs) -> Deployment:
    spec, inventory, engine = CASES[case]
    if engine:
        kwargs.setdefault("engine_config", FIXTURES / "engines" / engine / "config.json")
    return prepare(workdir / f"{spec}.yaml", inventory=str(FIXTURES / "inventories" / inventory) if inventory else None,
                   **kwargs)


def _write(files: dict[str, bytes], out: Path) -> Path:
    for rel, data in files.items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_bytes(data)
    return out


def _run_cli(argv: list[str]) -> int:
    return cli.main(argv)


def _k8s_docs(out: Path) -> dict[str, dict]:
    """The single-document files of k8s/base and k8s/monitoring by file name (models-job.yaml holds two)."""
    return {p.name: yaml.safe_load(p.read_text()) for d in ("base", "monitoring")
            for p in sorted((out / "k8s" / d).glob("*.yaml")) if p.name != "models-job.yaml"}


def _validate_k8s(docs: dict[str, dict]) -> None:
    """Built-in kinds against kubernetes-validate's strict schemas, PodMonitor against the vendored CRD schema."""
    from k8s_schemas import validate

    for name, doc in docs.items():
        if doc["kind"] in ("Kustomization", "Component"):
            continue
        validate(doc)
    monitor = docs["podmonitor.yaml"]
    for pod in (d for d in docs.values() if d["kind"] == "Deployment"):
        labels = pod["spec"]["template"]["metadata"]["labels"]
        assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()


# ---------------------------------------------------------------------------------------------- compose


def test_compose_mig_one_service_per_fitting_instance(workdir, tmp_path):
    dep = _prepare(workdir, "llama3-8b-mig")
    out = _write(render_deployment(dep, "compose"), tmp_path)
    config = compose_config(out)
    servers = {k: v for k, v in config["services"].items() if k.startswith("triton-")}
    # 3g.71gb and 2g.35gb hold the 8B engine at max_seq_len 4096; the two 1g.18gb instances do not.
    assert sorted(servers) == ["triton-gpu0-mig1", "triton-gpu0-mig5"]
    devices = {k: v["deploy"]["resources"]["reservations"]["devices"] for k, v in servers.items()}
    assert devices["triton-gpu0-mig1"] == [{"driver": "nvidia", "device_ids": [MIG_UUIDS["3g.71gb"]],
                                            "capabilities": ["gpu"]}]
    assert devices["triton-gpu0-mig5"][0]["device_ids"] == [MIG_UUIDS["2g.35gb"]]
    host_ports = [p["published"] for s in servers.values() for p in s["ports"]]
    assert sorted(map(int, host_ports)) == [8000, 8001, 8002, 8010, 8011, 8012]
    for s in servers.values():
        assert s["command"][0] == "/opt/tritonserver/bin/tritonserver"
        assert "--allow-gpu-metrics=false" in s["command"]
        assert "/v2/health/ready" in " ".join(s["healthcheck"]["test"])
        assert {v["target"] for v in s["volumes"]} == {"/models/model_repository", "/models/engine", "/models/tokenizer"}
    assert config["services"]["lb"]["depends_on"] == {k: {"condition": "service_healthy"} for k in servers}
    nginx = (out / "nginx.conf").read_text()
    assert nginx.count("least_conn;") == 2 and "grpc_pass grpc://triton_grpc;" in nginx and "http2 on;" in nginx
    assert "server triton-gpu0-mig5:8001;" in nginx
    repo = (out / "model_repository" / "tensorrt_llm" / "config.pbtxt").read_text()
    assert '"/models/engine"' in repo and str(workdir) not in repo


def test_compose_tp4_uses_mpirun_on_four_gpus(workdir, tmp_path):
    dep = _prepare(workdir, "llama3-70b-tp4")
    config = compose_config(_write(render_deployment(dep, "compose"), tmp_path))
    first = config["services"]["triton-gpu0-1-2-3"]
    assert first["command"][:2] == ["mpirun", "--allow-run-as-root"]
    assert first["command"].count("/opt/tritonserver/bin/tritonserver") == 4
    assert "--allow-gpu-metrics=false" not in first["command"]
    # By the inventory's UUIDs: indices follow the driver's enumeration order, which can change.
    uuids = [f"GPU-h100000{i}-0000-4000-8000-00000000000{i}" for i in range(8)]
    assert first["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"] == uuids[:4]
    assert config["services"]["triton-gpu4-5-6-7"]["deploy"]["resources"]["reservations"]["devices"][0][
        "device_ids"] == uuids[4:]
    assert [p["published"] for p in config["services"]["lb"]["ports"]] in (["8020", "8021"], [8020, 8021])


def test_compose_hf_builds_its_image(workdir, tmp_path):
    dep = _prepare(workdir, "tiny-hf-gpu")
    out = _write(render_deployment(dep, "compose"), tmp_path)
    config = compose_config(out)
    assert config["services"]["triton-gpu1"]["build"]["dockerfile"] == "Dockerfile.serving"
    assert "FROM nvcr.io/nvidia/tritonserver:26.07-py3 AS backends" in (out / "Dockerfile.serving").read_text()
    pbtxt = (out / "model_repository" / "tensorrt_llm" / "config.pbtxt").read_text()
    assert '"/models/checkpoint"' in pbtxt and "gpus: [ 0 ]" in pbtxt.replace("gpus: [0]", "gpus: [ 0 ]")


def test_compose_names_model_folders_by_variable(workdir, tmp_path, monkeypatch):
    """The file holds no path of the generating machine; a host path with $, quotes and spaces given through the
    variable reaches the container as written (compose interpolates $VAR in the file, not in variables' values)."""
    odd = tmp_path / "odd $HOME 'ck' \"x\""
    shutil.copytree(workdir / "checkpoint", odd)
    data = yaml.safe_load((workdir / "tiny-hf-gpu.yaml").read_text())
    data["model"]["checkpoint"] = str(odd)
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(data))
    dep = prepare(spec, inventory=str(FIXTURES / "inventories" / "a100-80gb-x8.yaml"))
    out = _write(render_deployment(dep, "compose"), tmp_path / "out")
    assert str(tmp_path) not in (out / "docker-compose.yaml").read_text()
    volumes = compose_config(out)["services"]["triton-gpu0"]["volumes"]
    assert {v["source"] for v in volumes if v["target"] == "/models/checkpoint"} == {str(out / "models/checkpoint")}
    monkeypatch.setenv("TRITONGEN_CHECKPOINT_DIR", str(odd))
    volumes = compose_config(out)["services"]["triton-gpu0"]["volumes"]
    # `config` prints a compose file again, so a literal $ comes back escaped as $$.
    assert {v["source"] for v in volumes if v["target"] == "/models/checkpoint"} == {str(odd).replace("$", "$$")}


# ---------------------------------------------------------------------------------------------- kubernetes


def test_k8s_mig_mixed_resources_and_validation(workdir, tmp_path):
    dep = _prepare(workdir, "llama3-8b-mig")
    docs = _k8s_docs(_write(render_deployment(dep, "k8s"), tmp_path))
    _validate_k8s(docs)
    for profile in ("3g.71gb", "2g.35gb"):
        d = docs[f"deployment-mig-{profile.replace('.', '-')}.yaml"]
        assert d["spec"]["replicas"] == 1
        pod = d["spec"]["template"]["spec"]
        c = pod["containers"][0]
        assert c["resources"]["limits"][f"nvidia.com/mig-{profile}"] == 1
        assert c["resources"]["requests"] == c["resources"]["limits"]
        assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H200"}
        assert c["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
        assert c["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
        assert c["startupProbe"]["httpGet"]["path"] == "/v2/health/ready"
        assert "--allow-gpu-metrics=false" in c["command"]
    assert "deployment-mig-1g-18gb.yaml" not in docs
    # One pod of each kind on this node: an HPA could never scale (deploy.replicas raises the bound).
    assert not [n for n in docs if n.startswith("hpa-")]
    assert "No HPA for mig-3g-71gb, mig-2g-35gb" in (tmp_path / "k8s" / "monitoring" / "kustomization.yaml").read_text()
    rules = yaml.safe_load(docs["prometheus-adapter-rules.yaml"]["data"]["config.yaml"])["rules"]
    assert [r["name"]["as"] for r in rules] == ["tritongen_waiting_requests", "tritongen_kv_cache_utilization"]
    assert 'request_type="waiting"' in rules[0]["metricsQuery"]
    assert [p["name"] for p in docs["service.yaml"]["spec"]["ports"]] == ["http", "grpc", "metrics"]


def test_k8s_tp4_is_one_four_gpu_pod(workdir, tmp_path):
    dep = _prepare(workdir, "llama3-70b-tp4")
    docs = _k8s_docs(_write(render_deployment(dep, "k8s"), tmp_path))
    _validate_k8s(docs)
    d = docs["deployment-gpu-x4.yaml"]
    assert d["spec"]["replicas"] == 2  # two groups of four on the 8-GPU node
    c = d["spec"]["template"]["spec"]["containers"][0]
    assert c["resources"]["limits"]["nvidia.com/gpu"] == 4
    assert c["command"][0] == "mpirun" and c["command"].count("-n") == 4
    assert d["spec"]["template"]["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}


def test_k8s_single_strategy(workdir, tmp_path):
    with pytest.raises(SpecError, match=r"^--k8s-mig-strategy: single needs one MIG profile on every GPU of a node"):
        render_deployment(_prepare(workdir, "llama3-8b-mig"), "k8s", mig_strategy="single")
    data = yaml.safe_load((workdir / "tiny-hf-gpu.yaml").read_text())
    dep = prepare(workdir / "tiny-hf-gpu.yaml", inventory=str(FIXTURES / "inventories" / "h200-7x1g.yaml"))
    docs = _k8s_docs(_write(render_deployment(dep, "k8s", mig_strategy="single"), tmp_path))
    _validate_k8s(docs)
    pod = docs["deployment-mig-1g-18gb.yaml"]["spec"]["template"]["spec"]
    assert data["name"] == "tiny-hf"
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H200-MIG-1g.18gb"}
    assert docs["deployment-mig-1g-18gb.yaml"]["spec"]["replicas"] == 7


# ---------------------------------------------------------------------------------------------- golden files


@pytest.mark.parametrize("case,target", [("llama3-8b-mig", "compose"), ("llama3-8b-mig", "k8s"),
                                         ("llama3-70b-tp4", "compose"), ("llama3-70b-tp4", "k8s"),
                                         ("tiny-cpu", "compose"), ("tiny-cpu", "k8s")])
def test_golden_deployment_files(workdir, case, target):
    files = {rel: data.replace(str(workdir).encode(), b"${WORKDIR}").replace(str(FIXTURES).encode(), b"${FIXTURES}")
             for rel, data in render_deployment(_prepare(workdir, case), target).items()
             if not rel.startswith("model_repository/")}
    assert_golden(files, GOLDEN / f"{case}-{target}")


@pytest.mark.parametrize("case", ["llama3-8b-mig", "llama3-70b-tp4", "tiny-cpu"])
def test_golden_deployment_repository_runs_the_native_bls_from_its_serving_image(workdir, case):
    from tritongen.deploy import serving_image

    dep = _prepare(workdir, case)
    assert 'backend: "tritongen_bls"' in dep.repository["tensorrt_llm_bls/config.pbtxt"].decode()
    assert "tritongen_bls" in serving_image.native_backends(dep.repository)
    assert dep.builds_serving_image and dep.image == serving_image.image_tag(dep.plan)


def test_a_tiny_cpu_model_is_sized_from_its_plan_in_k8s_and_compose(workdir):
    """The CPU profile's server is sized by what its plan runs: one core per LLM instance plus one, 0.5 GiB per
    python instance (measured 0.32-0.38 GiB resident each), not a GPU server's 2 GiB allowances; a GPU plan keeps
    the cores that keep pace with a GPU's tokens. Compose limits each service to the same sizes."""
    from tritongen.deploy.compose import compose_services, server_service
    from tritongen.deploy.k8s import kinds, pod_resources

    dep = _prepare(workdir, "tiny-cpu")
    [kind] = kinds(dep, "mixed")
    r = pod_resources(dep, kind)
    python = (dep.plan.preprocessing_instances + dep.plan.postprocessing_instances + dep.plan.bls_instances
              + dep.plan.llm_instance_group.count)
    assert (r.cpu, r.memory_gib, r.shm_gib) == (dep.plan.llm_instance_group.count + 1, math.ceil(1 + 0.5 * python),
                                               0.5), r
    assert r.cpu <= 2 and r.memory_gib <= 4, r  # a 0.7M-parameter model
    service = server_service(dep, compose_services(dep)[0])
    assert service["deploy"]["resources"]["limits"] == {"cpus": str(r.cpu), "memory": f"{r.memory_gib}g"}
    assert service["shm_size"] == "512mb"
    gpu = _prepare(workdir, "llama3-8b-mig")
    big = pod_resources(gpu, kinds(gpu, "mixed")[0])
    assert big.cpu >= 4 and big.memory_gib >= 15 + 2 + 2 and big.shm_gib == 2, big


def test_the_serving_images_python_pins_are_what_this_suite_runs():
    """Dockerfile.serving installs the versions of torch, transformers, tokenizers and numpy that the tests ran
    with (`make install` constrains the environment to the same file), so a deployment serves what was tested."""
    from importlib.metadata import version

    from tritongen.deploy import serving_image

    pins = dict(line.split("==") for line in serving_image.pinned_packages())
    assert set(pins) == {"torch", "transformers", "tokenizers", "numpy", "xgrammar"}
    assert {name: version(name).split("+")[0] for name in pins} == pins  # torch's local tag: +cpu here
    dockerfile = (GOLDEN / "tiny-cpu-compose" / "Dockerfile.serving").read_text()
    assert all(f'"{name}=={pin}"' in dockerfile for name, pin in pins.items()), dockerfile
    makefile = (Path(__file__).parents[2] / "Makefile").read_text()
    assert "PINS := deploy/templates/serving-packages.txt" in makefile and "-c $(PINS) -e" in makefile


# ---------------------------------------------------------------------------------------------- docker


def test_docker_run_kwargs_are_sdk_objects(workdir, tmp_path):
    from docker.types import DeviceRequest, Mount

    dep = _prepare(workdir, "llama3-8b-mig")
    kwargs = docker_run_kwargs(dep, dep.placement.server_groups[0], tmp_path)
    (request,) = kwargs["device_requests"]
    assert isinstance(request, DeviceRequest)
    assert request == {"Driver": "nvidia", "Count": 0, "DeviceIDs": [MIG_UUIDS["3g.71gb"]],
                       "Capabilities": [["gpu"]], "Options": {}}
    assert all(isinstance(m, Mount) for m in kwargs["mounts"])
    assert {m["Target"]: (m["Source"], m["ReadOnly"], m["Type"]) for m in kwargs["mounts"]} == {
        "/models/model_repository": (str(tmp_path / "model_repository"), True, "bind"),
        "/models/tokenizer": (str(workdir / "checkpoint"), True, "bind"),
        "/models/engine": (str(FIXTURES / "engines" / "llama3-8b-bf16-tp1"), True, "bind"),
    }
    assert kwargs["ports"] == {"8000/tcp": 8000, "8001/tcp": 8001, "8002/tcp": 8002}
    # The pinned container with tritongen's native backends built in (Dockerfile.serving).
    assert kwargs["image"] == f"tritongen-serving:{version()}-26.07-trtllm-python-py3"
    assert "--allow-gpu-metrics=false" in kwargs["command"] and kwargs["name"] == "llama3-8b-gpu0-mig1"


def test_run_docker_starts_every_group_and_waits(workdir, tmp_path):
    dep = _prepare(workdir, "llama3-70b-tp4")
    client = mock.MagicMock()
    client.containers.run.return_value.status = "running"
    asked = []
    endpoints = run_docker(dep, tmp_path, client=client, ready=lambda url: asked.append(url) or True,
                           log=lambda _: None)
    assert [c.kwargs["name"] for c in client.containers.run.call_args_list] == [
        "llama3-70b-gpu0-1-2-3", "llama3-70b-gpu4-5-6-7"]
    assert client.containers.run.call_args_list[1].kwargs["device_requests"][0]["DeviceIDs"] == [
        f"GPU-h100000{i}-0000-4000-8000-00000000000{i}" for i in range(4, 8)]
    assert asked == ["127.0.0.1:8000", "127.0.0.1:8010"]
    (build,) = client.images.build.call_args_list  # the serving image, before any container starts
    assert build.kwargs == {"path": str(tmp_path), "dockerfile": "Dockerfile.serving", "tag": dep.image}
    assert endpoints[1].startswith("gpu4-5-6-7: http 127.0.0.1:8010  grpc 127.0.0.1:8011")


def test_docker_without_engine_exits_3_and_writes_nothing(workdir, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:9")  # discard port: nothing answers
    out = tmp_path / "out"
    code = _run_cli(["deploy", str(workdir / "llama3-8b-mig.yaml"), "--target", "docker", "-o", str(out),
                     "--engine-config", str(FIXTURES / "engines" / "llama3-8b-bf16-tp1"),
                     "--inventory", str(FIXTURES / "inventories" / "h200-all-balanced.yaml")])
    err = capsys.readouterr().err
    assert code == 3
    # The plan's notes (the inventory names no driver) come first; the error is the first line that is one.
    (first_error,) = [line for line in err.splitlines() if line.startswith("error:")][:1]
    assert first_error.startswith("error: --target docker: no docker engine answers at tcp://127.0.0.1:9 "
                                  "(DockerException); start dockerd here, or point DOCKER_HOST at a running engine")
    assert not out.exists()


# ---------------------------------------------------------------------------------------------- CLI


def test_cli_deploy_compose_and_refusals(workdir, tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["deploy", str(workdir / "llama3-8b-mig.yaml"), "--target", "compose", "-o", str(out),
            "--inventory", str(FIXTURES / "inventories" / "h200-all-balanced.yaml"),
            "--engine-config", str(FIXTURES / "engines" / "llama3-8b-bf16-tp1")]
    assert _run_cli(argv) == 0
    printed = capsys.readouterr().out
    assert "   create  docker-compose.yaml" in printed and "2 server group(s)" in printed
    assert "endpoint  gpu0-mig1: http 127.0.0.1:8000  grpc 127.0.0.1:8001  metrics 127.0.0.1:8002" in printed
    assert "endpoint  load balancer (nginx, least_conn): http 127.0.0.1:8020  grpc 127.0.0.1:8021" in printed
    assert (f"models    TRITONGEN_ENGINE_DIR={FIXTURES / 'engines' / 'llama3-8b-bf16-tp1'}  (unset: ./models/engine "
            "next to the file)") in printed
    assert (out / "model_repository" / "ensemble" / "config.pbtxt").is_file()
    assert _run_cli(argv) == 2  # exists, no --force
    assert _run_cli([*argv, "--force"]) == 0
    assert "identical  docker-compose.yaml" in capsys.readouterr().out
    bad = _run_cli(["deploy", str(workdir / "llama3-8b-mig.yaml"), "--target", "k8s", "-o", str(tmp_path / "x"),
                    "--inventory", str(FIXTURES / "inventories" / "h200-all-balanced.yaml"),
                    "--engine-config", str(FIXTURES / "engines" / "llama3-70b-fp8-tp4")])
    assert bad == 2  # a tp 4 engine against a tp 1 spec is bad input (checked while planning: checks.check_plan_engine)
    assert capsys.readouterr().err.startswith("error: engine.tp_size x engine.pp_size (1 x 1 = 1): must equal")
    assert not (tmp_path / "x").exists()


def test_readiness_is_checked_on_the_engines_host(workdir, tmp_path, monkeypatch):
    from tritongen.deploy.docker import engine_host

    assert engine_host("ssh://ops@gpu-node-7") == "gpu-node-7"
    assert engine_host("tcp://10.1.2.3:2376") == "10.1.2.3"
    assert engine_host("unix:///var/run/docker.sock") == engine_host("") == "127.0.0.1"
    monkeypatch.setenv("DOCKER_HOST", "tcp://gpu-node-7:2376")
    dep = _prepare(workdir, "llama3-70b-tp4")
    client = mock.MagicMock()
    client.containers.run.return_value.status = "running"
    asked = []
    endpoints = run_docker(dep, tmp_path, client=client, ready=lambda url: asked.append(url) or True,
                           log=lambda _: None)
    assert asked == ["gpu-node-7:8000", "gpu-node-7:8010"]
    assert endpoints[0].startswith("gpu0-1-2-3: http gpu-node-7:8000  grpc gpu-node-7:8001")


def test_the_load_tests_schema_set_travels_with_its_plan(workdir, tmp_path):
    """A structured load's schema file is copied beside plan.json, and the container's plan names the copy."""
    import dataclasses

    from tritongen.deploy.clients import LOADTEST_DIR, SCHEMAS, loadtest_files

    dep = _prepare(workdir, "tiny-cpu")
    schemas = tmp_path / "s.json"
    schemas.write_text('[{"name": "a", "schema": {"type": "object"}}]')
    load = dep.plan.load.model_copy(update={"structured": dep.plan.load.structured.model_copy(
        update={"share": 0.5, "schemas": str(schemas)})})
    files = loadtest_files(dataclasses.replace(dep, plan=dep.plan.model_copy(update={"load": load})))
    assert files[SCHEMAS] == schemas.read_bytes()
    shipped = json.loads(files["plan.json"])["load"]["structured"]
    assert shipped == {"share": 0.5, "schemas": f"{LOADTEST_DIR}/{SCHEMAS}", "max_tokens": 256}
