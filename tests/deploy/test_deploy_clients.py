"""The tritongen image and its containers next to the servers: Dockerfile.tritongen and the wheel in its build
context, the load test (compose profile `loadtest`, Kubernetes component k8s/loadtest) and tritongen's OpenAI
frontend (compose service, Deployment + Service). Validated by docker-compose config (v1), kubectl kustomize and
kubernetes-validate --strict, like the server manifests (tests/deploy/test_deploy.py, tests/deploy/test_deploy_k8s.py)."""

from __future__ import annotations

import importlib.metadata
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from k8s_schemas import validate
from tritongen import cli
from tritongen.deploy import render_deployment
from tritongen.deploy.common import prepare
from tritongen.deploy.image import _wheel_from_installation, wheel_name
from tritongen.errors import SpecError
from tritongen.plan import plan_from_json, plan_from_file
from validators import compose_config, kustomize

FIXTURES = Path(__file__).parents[1] / "fixtures"
INVENTORIES = FIXTURES / "inventories"
ENGINE_8B = FIXTURES / "engines" / "llama3-8b-bf16-tp1"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, tiny_model) -> Path:
    root = tmp_path_factory.mktemp("clients")
    shutil.copytree(tiny_model, root / "checkpoint")
    base = yaml.safe_load((FIXTURES / "specs" / "tiny-hf-gpu.yaml").read_text())
    specs = {
        "grpc": {},
        "frontend": {"frontend": {"api_key_env": "TINY_API_KEY", "openai": {"enabled": True}},
                     "validation": {"load": {"protocol": "openai", "users": 3, "processes": 2}}},
        "triton": {"frontend": {"openai": {"enabled": True, "implementation": "triton", "port": 9100}},
                   "validation": {"load": {"protocol": "openai"}}},
        "rwx": {"deploy": {"access_mode": "ReadWriteMany", "storage_class": "nfs-client"},
                "validation": {"load": {"protocol": "http_stream"}}},
    }
    for name, extra in specs.items():
        (root / f"{name}.yaml").write_text(yaml.safe_dump({**base, **extra}, sort_keys=False))
    return root


def _write(files: dict[str, bytes], out: Path) -> Path:
    for rel, data in files.items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_bytes(data)
    return out


def _render(workdir: Path, spec: str, target: str, out: Path, inventory: str = "mixed-h200-node.yaml") -> Path:
    return _write(render_deployment(prepare(workdir / f"{spec}.yaml", inventory=str(INVENTORIES / inventory)),
                                    target), out)


def _flag(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def _long_volume(v: dict | str) -> dict:
    """`config` prints short-syntax volumes (SOURCE:TARGET[:MODE]) as strings."""
    if isinstance(v, dict):
        return v
    source, target, *mode = v.split(":")
    return {"type": "bind", "source": source, "target": target, "read_only": mode == ["ro"]}


def _container_ports(service: dict) -> set[int]:
    return {int(p["target"]) for p in service.get("ports", [])}


# ---------------------------------------------------------------------------------------------- image


def test_dockerfile_build_context_has_every_copy_source_and_a_working_wheel(workdir, tmp_path, capsys):
    dockerfile_parse = pytest.importorskip("dockerfile_parse", reason="pip install dockerfile-parse")
    out = tmp_path / "out"
    assert cli.main(["deploy", str(workdir / "grpc.yaml"), "--target", "k8s", "-o", str(out),
                     "--inventory", str(INVENTORIES / "h200-1x.yaml")]) == 0
    assert f"   create  dist/{wheel_name()}" in capsys.readouterr().out
    parser = dockerfile_parse.DockerfileParser(fileobj=(out / "Dockerfile.tritongen").open("rb"))
    instructions = [(i["instruction"], i["value"]) for i in parser.structure if i["instruction"] != "COMMENT"]
    assert {name for name, _ in instructions} <= {"FROM", "RUN", "COPY", "WORKDIR", "ENTRYPOINT"}
    assert parser.baseimage == "python:3.11-slim-bookworm"
    copies = [value.split() for name, value in instructions if name == "COPY"]
    # COPY --from=<image> takes from that image, the rest from the build context.
    context = [c for c in copies if not c[0].startswith("--from=")]
    assert context and all((out / src).is_file() for *sources, _ in context for src in sources)
    assert [c[0] for c in copies if c not in context] == ["--from=registry.k8s.io/kubectl:v1.34.0"]
    assert json.loads(dict(instructions)["ENTRYPOINT"]) == ["tritongen"]
    # The wheel is this tritongen: its version, the CLI entry point, package data (templates) and the loadtests.
    wheel = out / "dist" / wheel_name()
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        info = f"tritongen-{importlib.metadata.version('tritongen')}.dist-info"
        assert "tritongen = tritongen.cli:main" in zf.read(f"{info}/entry_points.txt").decode()
        assert f"Version: {importlib.metadata.version('tritongen')}" in zf.read(f"{info}/METADATA").decode()
    assert {"tritongen/cli/__init__.py", "tritongen/loadtests/runner.py", "tritongen/frontend/server.py",
            "tritongen/data/deploy_templates/Dockerfile.tritongen.j2"} <= names
    # Installed on its own, it is importable and finds its templates (not this checkout's).
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)],
                   check=True, capture_output=True, timeout=300)
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import tritongen; "
            "from tritongen.resources import data_dir; print(tritongen.__file__); print(data_dir('deploy_templates'))")
    # -S: no site folder, so no editable tritongen's import hook (it precedes sys.path) takes the import.
    where = subprocess.run([sys.executable, "-S", "-c", code, str(target)], capture_output=True, text=True,
                           timeout=120, check=True).stdout.split()
    assert all(w.startswith(str(target)) for w in where), where
    # An installed (not editable) tritongen re-packs the same files from its RECORD.
    dist = importlib.metadata.Distribution.at(target / info)
    with zipfile.ZipFile(__import__("io").BytesIO(_wheel_from_installation(dist))) as zf:
        repacked = set(zf.namelist())
    assert repacked == names


# ---------------------------------------------------------------------------------------------- compose


def test_compose_loadtest_is_a_profile_service_aimed_at_the_servers(workdir, tmp_path):
    out = _render(workdir, "grpc", "compose", tmp_path)
    config = compose_config(out)
    services = config["services"]
    test = services["loadtest"]
    assert test["profiles"] == ["loadtest"], "`docker-compose up` must not start the load test"
    # Every service outside the optional profiles (loadtest, monitoring: Prometheus + Grafana) starts by default.
    optional = {name for name, s in services.items() if s.get("profiles")}
    assert all(services[name]["profiles"] in (["loadtest"], ["monitoring"]) for name in optional)
    assert {name for name in optional if services[name]["profiles"] == ["monitoring"]} <= {"prometheus", "grafana"}
    assert any("tritonserver" in " ".join(map(str, s.get("command") or [])) or name.startswith("triton")
               for name, s in services.items() if name not in optional)
    assert test["build"]["dockerfile"] == "Dockerfile.tritongen" and test["image"] == f"tritongen:{importlib.metadata.version('tritongen')}"
    argv = test["command"]
    assert argv[0] == "loadtest"
    host, port = _flag(argv, "--url").split(":")
    assert host == "lb" and int(port) == 8001  # grpc through nginx, which listens on 8001 inside
    assert "8001" in (out / "nginx.conf").read_text() and "--no-metrics" in argv  # 5 servers behind lb
    mounts = {v["target"]: v for v in map(_long_volume, test["volumes"])}
    plan_path = argv[1]
    assert plan_path in mounts and mounts[plan_path]["read_only"]
    plan = plan_from_json(Path(mounts[plan_path]["source"]))  # a valid lock file
    assert plan.tokenizer.dir in mounts, "the tokenizer the plan names must be mounted"
    # The checkpoint folder by its variable: ./models/checkpoint next to the file unless TRITONGEN_CHECKPOINT_DIR.
    assert Path(mounts[plan.tokenizer.dir]["source"]) == out / "models" / "checkpoint"
    reports = _flag(argv, "--out")
    assert any(reports.startswith(t + "/") for t, v in mounts.items() if not v.get("read_only")), "report volume"
    assert set(test["depends_on"]) == {"lb", "loadtest-worker-1"} and "openai" not in services


def test_compose_single_server_scrapes_its_metrics(workdir, tmp_path):
    config = compose_config(_render(workdir, "grpc", "compose", tmp_path, "h200-1x.yaml"))
    argv = config["services"]["loadtest"]["command"]
    server = next(n for n in config["services"] if n.startswith("triton-"))
    assert _flag(argv, "--url") == f"{server}:8001"
    assert _flag(argv, "--metrics-url") == f"http://{server}:8002/metrics"
    assert config["services"]["loadtest"]["depends_on"] == {server: {"condition": "service_healthy"},
                                                           "loadtest-worker-1": {"condition": "service_started"}}


def test_compose_tritongen_frontend_with_api_key_passthrough(workdir, tmp_path):
    out = _render(workdir, "frontend", "compose", tmp_path)
    services = compose_config(out)["services"]
    openai, test = services["openai"], services["loadtest"]
    argv = openai["command"]
    assert argv[:2] == ["serve", "/models/model_repository"] and _flag(argv, "--openai-host") == "0.0.0.0"
    port = int(_flag(argv, "--openai"))
    assert port in _container_ports(openai)
    assert _flag(argv, "--triton-url") == "lb:8001"
    # Passed through from the environment of `docker-compose`, never written into the file.
    assert openai["environment"] == {"TINY_API_KEY": None} and test["environment"] == {"TINY_API_KEY": None}
    assert "TINY_API_KEY=" not in (out / "docker-compose.yaml").read_text()
    frontend = json.loads((out / "model_repository" / "frontend.json").read_text())
    assert frontend["api_key_env"] == "TINY_API_KEY"
    assert frontend["models"][0]["tokenizer_dir"] in {v["target"] for v in map(_long_volume, openai["volumes"])}
    assert _flag(test["command"], "--url") == f"openai:{port}"
    assert test["depends_on"] == {"openai": {"condition": "service_healthy"},
                                  **{f"loadtest-worker-{k}": {"condition": "service_started"} for k in (1, 2)}}
    assert "/health" in " ".join(openai["healthcheck"]["test"])


def test_compose_triton_frontend_port_is_published_and_balanced(workdir, tmp_path):
    # Eight alike GPUs: Triton's frontend cannot select per-group configs, so the groups must not need them.
    out = _render(workdir, "triton", "compose", tmp_path, "a100-80gb-x8.yaml")
    services = compose_config(out)["services"]
    servers = {n: s for n, s in services.items() if n.startswith("triton-")}
    for s in servers.values():
        assert any(a.startswith("--openai-port=9100") for a in s["command"]) and 9100 in _container_ports(s)
    assert 9100 in _container_ports(services["lb"]) and "listen 9100;" in (out / "nginx.conf").read_text()
    assert _flag(services["loadtest"]["command"], "--url") == "lb:9100"
    assert "openai" not in services  # Triton's own frontend: no tritongen frontend container


# ---------------------------------------------------------------------------------------------- kubernetes


def _by(objects: list[dict], kind: str) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def _service_port(services: dict[str, dict], url: str) -> dict:
    host, port = url.split(":")
    assert host in services, f"{host} is no Service of the build"
    return next(p for p in services[host]["spec"]["ports"] if p["port"] == int(port))


def test_k8s_loadtest_component_builds_with_and_without(workdir, tmp_path):
    k8s = _render(workdir, "grpc", "k8s", tmp_path) / "k8s"
    plain, tested = kustomize(k8s / "base"), kustomize(k8s / "with-loadtest")
    assert not _by(plain, "Job").keys() - {n for n in _by(plain, "Job") if "-models-" in n}, "base has no load test"
    for obj in tested:
        validate(obj)
    job = _by(tested, "Job")["tiny-hf-loadtest"]
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never" and job["spec"]["backoffLimit"] == 0
    container = pod["containers"][0]
    argv = container["args"]
    # Aimed at the Service's grpc port, whose target port is the servers' grpc container port.
    assert _service_port(_by(tested, "Service"), _flag(argv, "--url"))["name"] == "grpc"
    assert "--no-metrics" in argv  # 5 server pods behind one Service
    # The plan lock the Job reads is the ConfigMap key mounted at that path, and its tokenizer is on the models volume.
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    plan_dir, plan_file = argv[1].rsplit("/", 1)
    configmap = _by(tested, "ConfigMap")[volumes[mounts[plan_dir]]["configMap"]["name"]]
    lock = tmp_path / "plan.json"
    lock.write_text(configmap["data"][plan_file])
    plan = plan_from_json(lock)
    models = next(p for p, n in mounts.items() if "persistentVolumeClaim" in volumes[n]
                  and volumes[n]["persistentVolumeClaim"]["claimName"] == "tiny-hf-models")
    assert plan.tokenizer.dir.startswith(models + "/")
    reports = volumes[mounts[next(p for p in mounts if _flag(argv, "--out").startswith(p + "/"))]]
    assert reports["persistentVolumeClaim"]["claimName"] in _by(tested, "PersistentVolumeClaim")
    # RWO models volume: the Job runs where the server pods are; it waits for the Service to be ready.
    term = pod["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    server_labels = next(iter(_by(tested, "Deployment").values()))["spec"]["template"]["metadata"]["labels"]
    assert term["labelSelector"]["matchLabels"].items() <= server_labels.items()
    assert "http://tiny-hf:8000/v2/health/ready" in pod["initContainers"][0]["command"][2]
    for c in pod["initContainers"] + pod["containers"]:
        assert c["resources"]["requests"] == c["resources"]["limits"]
    # Together with monitoring in one overlay.
    both = k8s / "both"
    both.mkdir()
    (both / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": ["../base"],
        "components": ["../monitoring", "../loadtest"]}))
    kinds = {o["kind"] for o in kustomize(both)}
    assert {"Job", "PodMonitor", "HorizontalPodAutoscaler"} <= kinds


def test_k8s_loadtest_plan_is_the_deployments_plan_moved_into_the_container(workdir, tmp_path):
    k8s = _render(workdir, "grpc", "k8s", tmp_path, "h200-1x.yaml") / "k8s"
    job_file = yaml.safe_load_all((k8s / "loadtest" / "loadtest.yaml").read_text())
    lock = tmp_path / "plan.json"
    lock.write_text(next(job_file)["data"]["plan.json"])
    moved = plan_from_json(lock).model_dump(mode="json")
    original = plan_from_file(workdir / "grpc.yaml", str(INVENTORIES / "h200-1x.yaml"))[1].model_dump(mode="json")
    assert moved["tokenizer"].pop("dir") == "/models/tokenizer"
    assert moved["paths"].pop("checkpoint") == "/models/checkpoint"
    assert moved["runtime_settings"].pop("checkpoint_dir") == "/models/checkpoint"
    # The serving image carries the native BLS: the deployment runs what was planned.
    assert moved["bls_backend"] == original["bls_backend"] == "native"
    for section, key in (("tokenizer", "dir"), ("paths", "checkpoint"), ("runtime_settings", "checkpoint_dir")):
        original[section].pop(key)
    # Provenance moves too: the spec folder and the files placement read are the machine's that planned.
    assert moved.pop("spec_dir") == "/loadtest" and original.pop("spec_dir") == str(workdir)
    assert moved["placement"]["inventory"].pop("source") == "h200-1x.yaml"
    assert moved["placement"]["memory"].pop("source") == moved["placement"]["result"].pop("model") == \
        "/models/checkpoint/config.json"
    for key in ("inventory", "memory", "result"):
        original["placement"][key].pop("source" if key != "result" else "model")
    for route in moved["frontend"]["models"] + original["frontend"]["models"]:
        route.pop("tokenizer_dir"), route.pop("chat_template")
    assert moved == original  # every decision as planned
    job = _by(kustomize(k8s / "with-loadtest"), "Job")["tiny-hf-loadtest"]["spec"]["template"]["spec"]
    assert _flag(job["containers"][0]["args"], "--metrics-url") == "http://tiny-hf:8002/metrics"


def test_k8s_tritongen_frontend_deployment_service_and_secret(workdir, tmp_path):
    k8s = _render(workdir, "frontend", "k8s", tmp_path) / "k8s"
    plain, tested = kustomize(k8s / "base"), kustomize(k8s / "with-loadtest")
    for obj in plain + tested:
        validate(obj)
    services = _by(plain, "Service")
    frontend = _by(plain, "Deployment")["tiny-hf-openai"]
    pod = frontend["spec"]["template"]["spec"]
    container = pod["containers"][0]
    argv = container["args"]
    assert _service_port(services, _flag(argv, "--triton-url"))["name"] == "grpc"
    port = int(_flag(argv, "--openai"))
    assert {"name": "openai", "containerPort": port, "protocol": "TCP"} in container["ports"]
    selector = services["tiny-hf-openai"]["spec"]["selector"]
    assert selector.items() <= frontend["spec"]["template"]["metadata"]["labels"].items()
    assert not selector.items() <= next(d for n, d in _by(plain, "Deployment").items() if n != "tiny-hf-openai")[
        "spec"]["template"]["metadata"]["labels"].items(), "the frontend Service must not select tritonservers"
    assert _service_port(services, f"tiny-hf-openai:{port}")["targetPort"] == "openai"
    assert container["env"] == [{"name": "TINY_API_KEY", "valueFrom": {"secretKeyRef": {
        "name": "tiny-hf-openai-api-key", "key": "TINY_API_KEY"}}}, {"name": "HOME", "value": "/tmp"}]
    assert container["readinessProbe"]["httpGet"]["path"] == "/health"
    assert {m["mountPath"] for m in container["volumeMounts"]} == {"/models", "/tmp"}  # /tmp: read-only root
    job = _by(tested, "Job")["tiny-hf-loadtest"]["spec"]["template"]["spec"]["containers"][0]
    assert _service_port(_by(tested, "Service"), _flag(job["args"], "--url"))["name"] == "openai"
    assert job["env"] == container["env"]  # the load generator authenticates like any client
    workers = _by(tested, "Job")["tiny-hf-loadtest-workers"]["spec"]
    assert workers["parallelism"] == 2  # validation.load.processes: one Locust worker pod each
    assert workers["template"]["spec"]["containers"][0]["env"] == container["env"]


def test_k8s_triton_frontend_port_on_pods_and_service(workdir, tmp_path):
    k8s = _render(workdir, "triton", "k8s", tmp_path, "a100-80gb-x8.yaml") / "k8s"
    tested = kustomize(k8s / "with-loadtest")
    for obj in tested:
        validate(obj)
    assert "tiny-hf-openai" not in _by(tested, "Deployment")
    for d in _by(tested, "Deployment").values():
        c = d["spec"]["template"]["spec"]["containers"][0]
        assert "--openai-port=9100" in c["command"] and {"name": "openai", "containerPort": 9100,
                                                          "protocol": "TCP"} in c["ports"]
    job = _by(tested, "Job")["tiny-hf-loadtest"]["spec"]["template"]["spec"]["containers"][0]
    assert _service_port(_by(tested, "Service"), _flag(job["args"], "--url"))["targetPort"] == "openai"


def test_k8s_rwx_volume_needs_no_colocation(workdir, tmp_path):
    k8s = _render(workdir, "rwx", "k8s", tmp_path) / "k8s"
    tested = kustomize(k8s / "with-loadtest")
    job = _by(tested, "Job")["tiny-hf-loadtest"]["spec"]["template"]["spec"]
    assert "affinity" not in job
    assert _service_port(_by(tested, "Service"), _flag(job["containers"][0]["args"], "--url"))["name"] == "http"
    assert _by(tested, "PersistentVolumeClaim")["tiny-hf-loadtest-reports"]["spec"]["storageClassName"] == "nfs-client"


def test_openai_load_test_without_a_frontend_is_refused(workdir, tmp_path):
    data = yaml.safe_load((workdir / "grpc.yaml").read_text())
    data["validation"] = {"load": {"protocol": "openai"}}
    spec = workdir / "openai-without-frontend.yaml"
    spec.write_text(yaml.safe_dump(data))
    dep = prepare(spec, inventory=str(INVENTORIES / "h200-1x.yaml"))
    with pytest.raises(SpecError, match=r"^validation.load.protocol: openai needs the OpenAI frontend"):
        render_deployment(dep, "compose")
