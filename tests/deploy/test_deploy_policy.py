"""Deployments that run as generated on a multi-node cluster: the policy checks of tests/deploy_policy.py over every
generated manifest (kubectl kustomize builds, kubernetes-validate --strict) and compose file (docker-compose
config), and one test per way a generated deployment can fail on a real cluster or host."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from unittest import mock

import pytest
import yaml

import deploy_policy as policy
from k8s_schemas import validate
from validators import compose_config, kustomize
from tritongen.deploy import render_deployment
from tritongen.deploy.common import prepare
from tritongen.errors import SpecError

FIXTURES = Path(__file__).parents[1] / "fixtures"
EXAMPLES = Path(__file__).parents[2] / "examples"
INVENTORIES = FIXTURES / "inventories"
ENGINES = FIXTURES / "engines"

# name: (base spec, overrides, inventory, engine config)
CASES = {
    "tiny-hf-mixed": ("tiny-hf-gpu", {}, "mixed-h200-node.yaml", None),
    "tiny-hf-7x1g": ("tiny-hf-gpu", {}, "h200-7x1g.yaml", None),
    "tiny-hf-rwx-replicas": ("tiny-hf-gpu", {"deploy": {"access_mode": "ReadWriteMany", "storage_class": "nfs-client",
                                                        "replicas": 4}}, "h200-2x3g.yaml", None),
    "tiny-hf-frontend": ("tiny-hf-gpu", {"frontend": {"api_key_env": "K", "openai": {"enabled": True}},
                                         "validation": {"load": {"protocol": "openai", "processes": 3}}},
                         "h200-1x.yaml", None),
    "tiny-hf-triton-frontend": ("tiny-hf-gpu", {"frontend": {"openai": {"enabled": True, "implementation": "triton"}},
                                                "validation": {"load": {"protocol": "openai"}}}, "h200-1x.yaml", None),
    "llama3-8b-mig": ("llama3-8b-mig", {}, "h200-all-balanced.yaml", "llama3-8b-bf16-tp1"),
    "llama3-70b-tp4": ("llama3-70b-tp4", {}, "h100-80gb-x8.yaml", "llama3-70b-fp8-tp4"),
    "llama3-70b-2nodes": ("llama3-70b-tp4", {"deploy": {"nodes": 2, "access_mode": "ReadWriteMany",
                                                        "storage_class": "nfs-client"}},
                          "h100-80gb-x8.yaml", "llama3-70b-fp8-tp4"),
    "tiny-cpu": ("tiny-cpu", {}, None, None),
    "synthetic-cpu": ("synthetic-cpu", {}, None, None),
}


def _spec_data(base: str) -> dict:
    if base in ("tiny-cpu", "synthetic-cpu"):
        return yaml.safe_load((EXAMPLES / f"{base}.yaml").read_text())
    return yaml.safe_load((FIXTURES / "specs" / f"{base}.yaml").read_text())


def _merge(data: dict, extra: dict) -> dict:
    for k, v in extra.items():
        data[k] = _merge(dict(data.get(k) or {}), v) if isinstance(v, dict) else v
    return data


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, tiny_model) -> Path:
    root = tmp_path_factory.mktemp("policy")
    shutil.copytree(tiny_model, root / "checkpoint")
    for name, (base, extra, _inv, engine) in CASES.items():
        data = _merge(_spec_data(base), extra)
        data["model"]["checkpoint"] = "checkpoint"
        if engine:
            data["engine"]["engine_dir"] = str(ENGINES / engine)
        (root / f"{name}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return root


def _prepare(workdir: Path, name: str, spec: Path | None = None):
    _base, _extra, inventory, engine = CASES[name]
    return prepare(spec or workdir / f"{name}.yaml", inventory=str(INVENTORIES / inventory) if inventory else None,
                   engine_config=ENGINES / engine / "config.json" if engine else None)


def _write(files: dict[str, bytes], out: Path) -> Path:
    for rel, data in files.items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_bytes(data)
    return out


def _k8s(workdir: Path, name: str, out: Path, **kwargs) -> tuple[Path, list[dict]]:
    """Render, then build the base with both components (what `kubectl apply` would create). Without kubectl the
    policy still runs, on the objects as written (the components' patches only drop `replicas`)."""
    _write(render_deployment(_prepare(workdir, name, **kwargs), "k8s"), out)
    if not shutil.which("kubectl"):
        return out, _as_written(out / "k8s")
    both = out / "k8s" / "all"
    both.mkdir()
    (both / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": ["../base"],
        "components": ["../monitoring", "../loadtest"]}))
    return out, kustomize(both)


def _as_written(k8s: Path) -> list[dict]:
    objects = []
    for folder in ("base", "monitoring", "loadtest"):
        for f in sorted((k8s / folder).glob("*.yaml")):
            if f.name not in ("kustomization.yaml", "prometheus-adapter-rules.yaml"):
                objects += [d for d in yaml.safe_load_all(f.read_text()) if d]
    return objects


def _by(objects: list[dict], kind: str) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def _flag(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


# ---------------------------------------------------------------------------------------------- every output


@pytest.mark.parametrize("name", sorted(CASES))
def test_policy_over_every_generated_manifest(workdir, name, tmp_path):
    out, objects = _k8s(workdir, name, tmp_path)
    assert policy.k8s_policy(objects, out) == []


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_generated_manifest_builds_and_validates_strictly(workdir, name, tmp_path):
    import kubernetes_validate

    out, objects = _k8s(workdir, name, tmp_path)
    for obj in objects:
        validate(obj)
        if "monitoring.coreos.com" not in obj["apiVersion"] and "leaderworkerset" not in obj["apiVersion"]:
            # The newest schemas kubernetes-validate ships too, not only the oldest supported release's.
            kubernetes_validate.validate(obj, kubernetes_validate.latest_version(), strict=True)
    for overlay in ("base", "with-monitoring", "with-loadtest"):
        for obj in kustomize(out / "k8s" / overlay):
            validate(obj)


# Not compose: a multi-node replica (Kubernetes only), MIG instances without UUIDs (docker cannot select them).
@pytest.mark.parametrize("name", sorted(n for n in CASES if n not in ("llama3-70b-2nodes", "tiny-hf-7x1g")))
def test_policy_over_every_compose_file(workdir, name, tmp_path):
    out = _write(render_deployment(_prepare(workdir, name), "compose"), tmp_path)
    compose_config(out)
    assert policy.compose_policy(out) == []


def test_policy_checks_fail_on_what_they_guard(tmp_path):
    """The checks are not vacuous: each finds the fault it exists for."""
    pod = {"securityContext": {}, "containers": [{"name": "c", "image": "bitnami/kubectl:1.30", "ports": [
        {"name": "metrics", "containerPort": 8002}], "command": ["python3", "main.py", "--openai-port=9000"]}],
        "volumes": [{"name": "m", "persistentVolumeClaim": {"claimName": "m"}}]}
    objects = [{"kind": "Deployment", "metadata": {"name": "d"}, "spec": {"replicas": 2, "template": {
                   "metadata": {"labels": {"a": "b"}}, "spec": pod}}},
               {"kind": "PersistentVolumeClaim", "metadata": {"name": "m"}, "spec": {"accessModes": ["ReadWriteOnce"]}},
               {"kind": "HorizontalPodAutoscaler", "metadata": {"name": "h"}, "spec": {
                   "minReplicas": 1, "maxReplicas": 1, "scaleTargetRef": {"kind": "Deployment", "name": "d"}}},
               {"kind": "PodMonitor", "metadata": {"name": "p"}, "spec": {"selector": {"matchLabels": {"a": "b"}},
                                                                          "podMetricsEndpoints": [{"port": "openai"}]}}]
    assert any("runAsNonRoot" in v for v in policy.restricted(objects))
    assert any("ephemeral-storage" in v for v in policy.restricted(objects))
    assert any("bitnami" in v for v in policy.images(objects, tmp_path))
    assert policy.image_problems("tritongen:latest", set()) and policy.image_problems("nginx", set())
    assert any("without a required same-node affinity" in v for v in policy.storage(objects))
    assert any("min 1 >= max 1" in v for v in policy.autoscaling(objects))
    scraped = policy.scraped_ports(objects)
    assert any("declares metrics 8002" in v for v in scraped) and any("no port openai" in v for v in scraped)


# ---------------------------------------------------------------------------------------------- 1. storage


def test_rwo_models_volume_keeps_every_user_on_one_node(workdir, tmp_path):
    _out, objects = _k8s(workdir, "tiny-hf-7x1g", tmp_path)
    pvc = _by(objects, "PersistentVolumeClaim")["tiny-hf-models"]
    assert pvc["spec"]["accessModes"] == ["ReadWriteOnce"]
    users = [(w, m, s) for w, m, s, _n in policy.pod_templates(objects)
             if any(v.get("persistentVolumeClaim", {}).get("claimName") == "tiny-hf-models" for v in s["volumes"])]
    for where, meta, spec in users:
        terms = spec.get("affinity", {}).get("podAffinity", {}).get("requiredDuringSchedulingIgnoredDuringExecution")
        assert terms, f"{where} mounts the ReadWriteOnce volume and may land on any node"
        (term,) = terms
        assert term["topologyKey"] == "kubernetes.io/hostname", where
        assert term["labelSelector"]["matchLabels"] == {"tritongen.io/models-volume": "tiny-hf-models"}
        assert meta["labels"]["tritongen.io/models-volume"] == "tiny-hf-models", where
    # The 7 replicas of the 1g kind, the models Job, the load-test master and its workers.
    assert {w.split("/")[0] for w, _m, _s in users} == {"Deployment", "Job"} and len(users) == 4


def test_storage_that_cannot_work_is_refused(workdir):
    data = yaml.safe_load((workdir / "tiny-hf-mixed.yaml").read_text())
    for deploy, message in (({"access_mode": "ReadWriteOncePod"}, r"^deploy.access_mode: ReadWriteOncePod lets one "
                                                                  r"pod mount the models volume"),
                            ({"replicas": 9}, r"^deploy.replicas: 9 pods of kind \S+ need more than one node")):
        spec = workdir / "refused.yaml"
        spec.write_text(yaml.safe_dump({**data, "deploy": deploy}))
        with pytest.raises(SpecError, match=message):
            render_deployment(_prepare(workdir, "tiny-hf-mixed", spec=spec), "k8s")


def test_rwx_volume_lets_replicas_spread(workdir, tmp_path):
    _out, objects = _k8s(workdir, "tiny-hf-rwx-replicas", tmp_path)
    for where, _m, spec, _n in policy.pod_templates(objects):
        assert "podAffinity" not in spec.get("affinity", {}), where


# ---------------------------------------------------------------------------------------------- 2. images


def test_leader_kubectl_comes_from_the_tritongen_image(workdir, tmp_path):
    out, objects = _k8s(workdir, "llama3-70b-2nodes", tmp_path)
    (lws,) = _by(objects, "LeaderWorkerSet").values()
    init = {c["name"]: c for c in lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["initContainers"]}
    from tritongen.deploy.image import image_tag

    assert init["kubectl"]["image"] == image_tag()
    assert "bitnami" not in json.dumps(objects)
    dockerfile = (out / "Dockerfile.tritongen").read_text()
    assert re.search(r"^COPY --from=registry\.k8s\.io/kubectl:v\d+\.\d+\.\d+ /bin/kubectl /usr/local/bin/kubectl$",
                     dockerfile, re.M)


# ---------------------------------------------------------------------------------------------- 3. Triton's frontend


def test_triton_frontend_is_scraped_where_it_serves_metrics(workdir, tmp_path):
    _out, objects = _k8s(workdir, "tiny-hf-triton-frontend", tmp_path)
    (server,) = [d for n, d in _by(objects, "Deployment").items()]
    c = server["spec"]["template"]["spec"]["containers"][0]
    assert c["command"][1].endswith("openai_frontend/main.py")
    assert {p["name"] for p in c["ports"]} == {"http", "grpc", "openai"}  # main.py has no metrics port
    assert "metrics" not in {p["name"] for p in _by(objects, "Service")["tiny-hf"]["spec"]["ports"]}
    (monitor,) = _by(objects, "PodMonitor").values()
    assert monitor["spec"]["podMetricsEndpoints"] == [{"port": "openai", "path": "/metrics", "interval": "15s"}]
    master = _by(objects, "Job")["tiny-hf-loadtest"]["spec"]["template"]["spec"]["containers"][0]
    assert _flag(master["args"], "--metrics-url") == "http://tiny-hf:9000/metrics"


def test_triton_frontend_with_per_group_configs_is_refused(workdir):
    data = yaml.safe_load((workdir / "llama3-8b-mig.yaml").read_text())
    data["runtime"] = "hf"
    data.pop("engine", None)
    data["frontend"] = {"openai": {"enabled": True, "implementation": "triton"}}
    # A budget above what any MIG slice holds, so each group gets its slice's (they differ).
    data.setdefault("serving", {})["kv_cache"] = {"max_tokens": 10 ** 9}
    spec = workdir / "mig-triton.yaml"
    spec.write_text(yaml.safe_dump(data))
    dep = prepare(spec, inventory=str(INVENTORIES / "h200-all-balanced.yaml"))
    assert dep.plan.group_configs
    with pytest.raises(SpecError, match=r"^frontend.openai.implementation: triton cannot select a server group's "
                                        r"own model config \(KV tokens per group: "):
        render_deployment(dep, "k8s")


# ---------------------------------------------------------------------------------------------- 4. docker target


def test_docker_starts_tritongen_frontend_and_restarts_containers(workdir, tmp_path, monkeypatch):
    from tritongen.deploy.docker import docker_run_kwargs, run_docker

    monkeypatch.setenv("K", "secret")
    dep = _prepare(workdir, "tiny-hf-frontend")
    client = mock.MagicMock()
    client.containers.run.return_value.status = "running"
    endpoints = run_docker(dep, tmp_path, client=client, ready=lambda url: True, log=lambda _: None)
    calls = [c.kwargs for c in client.containers.run.call_args_list]
    assert [c["name"] for c in calls] == ["tiny-hf-gpu0", "tiny-hf-openai"]
    server, frontend = calls
    assert server["restart_policy"] == frontend["restart_policy"] == {"Name": "unless-stopped"}
    assert server["network"] == frontend["network"] == "tiny-hf"
    assert _flag(frontend["command"], "--triton-url") == "tiny-hf-gpu0:8001"
    assert frontend["ports"] == {"9000/tcp": 9000} and frontend["environment"] == {"K": "secret"}
    assert endpoints[-1] == "openai (tritongen frontend): http://127.0.0.1:9000/v1"
    assert client.images.build.call_args.kwargs["dockerfile"] == "Dockerfile.tritongen"
    triton = docker_run_kwargs(_prepare(workdir, "tiny-hf-triton-frontend"), dep.placement.server_groups[0], tmp_path)
    assert triton["ports"] == {"8000/tcp": 8000, "8001/tcp": 8001, "9000/tcp": 8003}


# ---------------------------------------------------------------------------------------------- 5. air-gapped models


def test_models_job_prepares_the_model_air_gapped(workdir, tmp_path):
    _out, objects = _k8s(workdir, "llama3-70b-tp4", tmp_path)
    job = next(o for n, o in _by(objects, "Job").items() if "-models-" in n)
    pod = job["spec"]["template"]["spec"]
    c = pod["containers"][0]
    script = c["command"][2]
    assert "git clone" not in script and "github.com" not in script
    assert "/app/examples/" in script and "trtllm-build" in script
    # FP8: ModelOpt calibration from a dataset in the volume, the hub offline.
    assert "--calib_dataset /models/calibration" in script and "/models/calibration is missing" in script
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["HF_HUB_OFFLINE"] == "1" and env["HF_DATASETS_OFFLINE"] == "1"
    # The converted checkpoint goes to an emptyDir the pod requests as ephemeral storage, not the image's /tmp.
    work = next(v for v in pod["volumes"] if v["name"] == "work")
    assert "--output_dir /work/tllm_checkpoint" in script
    assert int(work["emptyDir"]["sizeLimit"].removesuffix("Gi")) >= 70 * 0.9  # the fp8 70B checkpoint: ~70 GB
    assert int(c["resources"]["requests"]["ephemeral-storage"].removesuffix("Gi")) > int(
        work["emptyDir"]["sizeLimit"].removesuffix("Gi"))


def test_servers_fail_when_the_models_job_cannot_fill_the_volume(workdir, tmp_path):
    _out, objects = _k8s(workdir, "tiny-hf-mixed", tmp_path)
    job = next(o for n, o in _by(objects, "Job").items() if "-models-" in n)
    script = job["spec"]["template"]["spec"]["containers"][0]["command"][2]
    failed = re.search(r"(/models/\.tritongen/\w+\.failed)", script).group(1)
    assert "/models/checkpoint is empty: set deploy.checkpoint_uri" in script and f"tee {failed}" in script
    for d in _by(objects, "Deployment").values():
        init = d["spec"]["template"]["spec"].get("initContainers", [])
        waits = [c for c in init if c["name"] == "wait-for-models"]
        if waits:
            assert f"if [ -e {failed} ]; then cat {failed}; exit 1; fi" in waits[0]["command"][2]


# ---------------------------------------------------------------------------------------------- 6. pod security


def test_every_pod_meets_the_restricted_level(workdir, tmp_path):
    _out, objects = _k8s(workdir, "llama3-70b-2nodes", tmp_path)
    assert policy.restricted(objects) == []
    (lws,) = _by(objects, "LeaderWorkerSet").values()
    leader = lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]
    assert leader["securityContext"]["runAsUser"] == 1000 and leader["securityContext"]["runAsNonRoot"]
    assert "--allow-run-as-root" not in leader["containers"][0]["command"][2]
    mounts = {m["mountPath"] for m in leader["containers"][0]["volumeMounts"]}
    assert {"/tmp", "/dev/shm"} <= mounts  # writable paths on a read-only root


# ---------------------------------------------------------------------------------------------- 7. HPA, PodMonitor


def test_hpa_bounds_follow_placement_and_replicas(workdir, tmp_path):
    _out, mig = _k8s(workdir, "llama3-8b-mig", tmp_path / "mig")
    assert not _by(mig, "HorizontalPodAutoscaler"), "one pod per kind on this node: nothing to scale"
    _out, rwx = _k8s(workdir, "tiny-hf-rwx-replicas", tmp_path / "rwx")
    (hpa,) = _by(rwx, "HorizontalPodAutoscaler").values()
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (1, 4)
    _out, seven = _k8s(workdir, "tiny-hf-7x1g", tmp_path / "seven")
    (hpa,) = _by(seven, "HorizontalPodAutoscaler").values()
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (1, 7)


def test_podmonitor_carries_the_selector_label(workdir, tmp_path):
    _out, objects = _k8s(workdir, "tiny-hf-mixed", tmp_path / "default")
    (monitor,) = _by(objects, "PodMonitor").values()
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    data = yaml.safe_load((workdir / "tiny-hf-mixed.yaml").read_text())
    data["deploy"] = {"monitor_labels": {"prometheus": "platform"}}
    spec = workdir / "labels.yaml"
    spec.write_text(yaml.safe_dump(data))
    _out, objects = _k8s(workdir, "tiny-hf-mixed", tmp_path / "custom", spec=spec)
    (monitor,) = _by(objects, "PodMonitor").values()
    assert monitor["metadata"]["labels"]["prometheus"] == "platform" and "release" not in monitor["metadata"]["labels"]
    data["deploy"] = {"monitor_labels": {"release": "kube prometheus"}}
    spec.write_text(yaml.safe_dump(data))
    with pytest.raises(SpecError, match=r"^deploy.monitor_labels: 'release: kube prometheus' is not a Kubernetes "
                                        r"label \(keys \[prefix/\]name, values up to 63 of \[A-Za-z0-9._-\]\)"):
        _prepare(workdir, "tiny-hf-mixed", spec=spec)


# ---------------------------------------------------------------------------------------------- 8. Locust master + workers


def test_k8s_load_test_is_a_locust_master_and_workers(workdir, tmp_path):
    _out, objects = _k8s(workdir, "tiny-hf-frontend", tmp_path)
    jobs, services = _by(objects, "Job"), _by(objects, "Service")
    master, workers = jobs["tiny-hf-loadtest"], jobs["tiny-hf-loadtest-workers"]
    margs = master["spec"]["template"]["spec"]["containers"][0]["args"]
    assert _flag(margs, "--workers") == "3" and "--master" in margs
    assert workers["spec"]["parallelism"] == workers["spec"]["completions"] == 3
    assert workers["spec"]["activeDeadlineSeconds"] >= 1800  # workers never outlive a master that is gone
    wargs = workers["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--worker" in wargs and _flag(wargs, "--url") == _flag(margs, "--url") == "tiny-hf-openai:9000"
    service = services[_flag(wargs, "--master-host")]
    assert service["spec"]["ports"][0]["port"] == int(_flag(wargs, "--master-port")) == int(_flag(margs, "--master-port"))
    assert service["spec"]["selector"].items() <= master["spec"]["template"]["metadata"]["labels"].items()
    assert not service["spec"]["selector"].items() <= workers["spec"]["template"]["metadata"]["labels"].items()


def test_compose_load_test_is_a_locust_master_and_workers(workdir, tmp_path):
    out = _write(render_deployment(_prepare(workdir, "tiny-hf-frontend"), "compose"), tmp_path)
    services = compose_config(out)["services"]
    master = services["loadtest"]
    workers = {n: s for n, s in services.items() if n.startswith("loadtest-worker-")}
    assert len(workers) == 3 and _flag(master["command"], "--workers") == "3"
    for s in workers.values():
        assert s["profiles"] == ["loadtest"] and _flag(s["command"], "--master-host") == "loadtest"
    assert set(workers) <= set(master["depends_on"])


# ---------------------------------------------------------------------------------------------- 9. compose, plan


def test_compose_reserves_gpus_by_uuid_without_host_paths(workdir, tmp_path):
    out = _write(render_deployment(_prepare(workdir, "llama3-70b-tp4"), "compose"), tmp_path)
    text = (out / "docker-compose.yaml").read_text()
    assert str(workdir) not in text and str(FIXTURES) not in text
    config = compose_config(out)
    server = config["services"]["triton-gpu0-1-2-3"]
    ids = server["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"]
    assert ids == [f"GPU-h100000{i}-0000-4000-8000-00000000000{i}" for i in range(4)]
    assert server["stop_grace_period"] in ("30s", 30)  # deploy.grace_period_s's default
    sources = {v["target"]: v["source"] for v in server["volumes"]}
    assert sources["/models/engine"].endswith("models/engine")  # ./models/engine unless TRITONGEN_ENGINE_DIR is set
    (out / ".env").write_text(f"TRITONGEN_ENGINE_DIR={ENGINES / 'llama3-70b-fp8-tp4'}\n")
    server = compose_config(out)["services"]["triton-gpu0-1-2-3"]
    assert {v["target"]: v["source"] for v in server["volumes"]}["/models/engine"] == str(ENGINES / "llama3-70b-fp8-tp4")


def test_loadtest_plan_holds_no_workstation_path(workdir, tmp_path):
    _out, objects = _k8s(workdir, "llama3-8b-mig", tmp_path)
    plan = _by(objects, "ConfigMap")["llama3-8b-loadtest-plan"]["data"]["plan.json"]
    assert str(workdir) not in plan and str(FIXTURES) not in plan and str(Path.home()) + "/" not in plan
    assert json.loads(plan)["placement"]["memory"]["source"] == "/models/engine/config.json"


# ---------------------------------------------------------------------------------------------- 10. CPU profile


@pytest.mark.parametrize("name", ["tiny-cpu", "synthetic-cpu"])
def test_cpu_profile_deploys_without_gpus(workdir, name, tmp_path):
    _out, objects = _k8s(workdir, name, tmp_path / "k8s")
    assert "nvidia.com" not in json.dumps([o for o in objects if o["kind"] != "ConfigMap"])
    (server,) = [d for n, d in _by(objects, "Deployment").items()]
    pod = server["spec"]["template"]["spec"]
    assert "tolerations" not in pod and pod["containers"][0]["command"][0] == "/opt/tritonserver/bin/tritonserver"
    out = _write(render_deployment(_prepare(workdir, name), "compose"), tmp_path / "compose")
    services = compose_config(out)["services"]
    # No device reservation, only the limits the plan sizes.
    assert list(services["triton-cpu"]["deploy"]["resources"]) == ["limits"]
    assert services["triton-cpu"]["build"]["dockerfile"] == "Dockerfile.serving"
    from tritongen.deploy.docker import docker_run_kwargs

    dep = _prepare(workdir, name)
    assert docker_run_kwargs(dep, dep.placement.server_groups[0], tmp_path)["device_requests"] == []
    with pytest.raises(SpecError, match=r"^--inventory: places servers on GPUs, but placement.device is cpu"):
        prepare(workdir / f"{name}.yaml", inventory=str(INVENTORIES / "h200-1x.yaml"))
