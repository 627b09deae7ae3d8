"""Kubernetes output that applies on a plain cluster: every recorded inventory x runtime builds with
`kubectl kustomize` (with and without the monitoring component) and every object validates strictly
(kubernetes-validate for built-in kinds, vendored CRD schemas for PodMonitor and LeaderWorkerSet)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml

from k8s_schemas import validate
from validators import kustomize
from tritongen.deploy import render_deployment
from tritongen.deploy.common import prepare
from tritongen.errors import SpecError

FIXTURES = Path(__file__).parents[1] / "fixtures"
INVENTORIES = sorted(p.name for p in (FIXTURES / "inventories").iterdir())
ENGINE_8B = FIXTURES / "engines" / "llama3-8b-bf16-tp1"
ENGINE_70B = FIXTURES / "engines" / "llama3-70b-fp8-tp4"
DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")


@pytest.fixture(scope="module")
def specs(tmp_path_factory, tiny_model) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("k8s")
    shutil.copytree(tiny_model, root / "checkpoint")
    out = {}
    for name, engine, extra in (("tiny-hf-gpu", None, {}), ("llama3-8b-mig", ENGINE_8B, {}),
                                ("llama3-70b-tp4", ENGINE_70B, {}),
                                ("llama3-70b-tp4", ENGINE_70B, {"deploy": {"nodes": 2, "access_mode": "ReadWriteMany",
                                                                            "storage_class": "nfs-client"}})):
        data = yaml.safe_load((FIXTURES / "specs" / f"{name}.yaml").read_text())
        if engine:
            data["engine"]["engine_dir"] = str(engine)
        data.update(extra)
        key = name + ("-2nodes" if extra else "")
        (root / f"{key}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
        out[key] = root / f"{key}.yaml"
    return out


def _render(spec: Path, inventory: str, tmp_path: Path, **kwargs) -> Path:
    engine = kwargs.pop("engine", None)
    dep = prepare(spec, inventory=str(FIXTURES / "inventories" / inventory), engine_config=engine, **kwargs)
    for rel, data in render_deployment(dep, "k8s").items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(data)
    return tmp_path / "k8s"


def _check_built(objects: list[dict]) -> None:
    for obj in objects:
        validate(obj)
        name = obj["metadata"]["name"]
        assert len(name) <= 63 and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name), name
        if obj["kind"] == "Service":
            assert DNS_LABEL.fullmatch(name), name
    pods = [o["spec"]["template"]["spec"] for o in objects if o["kind"] == "Deployment"]
    pods += [t["spec"] for o in objects if o["kind"] == "LeaderWorkerSet"
             for t in (o["spec"]["leaderWorkerTemplate"]["leaderTemplate"],
                       o["spec"]["leaderWorkerTemplate"]["workerTemplate"])]
    assert pods
    for pod in pods:  # Guaranteed QoS: every container's requests equal its limits for cpu and memory
        for c in pod.get("initContainers", []) + pod["containers"]:
            r = c["resources"]
            assert r["requests"] == r["limits"] and {"cpu", "memory"} <= set(r["requests"]), c["name"]


CASES = [("tiny-hf-gpu", inv) for inv in INVENTORIES] + [("llama3-8b-mig", inv) for inv in INVENTORIES]


@pytest.mark.parametrize("spec_name,inventory", CASES)
def test_every_inventory_and_runtime_builds_and_validates(specs, spec_name, inventory, tmp_path):
    engine = ENGINE_8B / "config.json" if spec_name == "llama3-8b-mig" else None
    try:
        k8s = _render(specs[spec_name], inventory, tmp_path, engine=engine)
    except SpecError as err:  # placement refusals are bad input (exit 2)
        # The only refusal: an 8B bf16 engine on 1g.18gb instances (16 GiB) cannot hold its weights.
        assert spec_name == "llama3-8b-mig" and inventory == "h200-7x1g.yaml", err
        assert str(err).startswith("placement: "), err
        return
    plain = kustomize(k8s / "base")
    kinds = {o["kind"] for o in plain}
    assert {"PersistentVolumeClaim", "Job", "ConfigMap", "Deployment", "PodDisruptionBudget", "Service"} <= kinds
    assert not kinds & {"PodMonitor", "HorizontalPodAutoscaler"}, "the base applies without CRDs or an adapter"
    _check_built(plain)
    monitored = kustomize(k8s / "with-monitoring")
    _check_built(monitored)
    hpas = [o for o in monitored if o["kind"] == "HorizontalPodAutoscaler"]
    assert {o["kind"] for o in monitored} - kinds == {"PodMonitor"} | ({"HorizontalPodAutoscaler"} if hpas else set())
    scaled = {h["spec"]["scaleTargetRef"]["name"] for h in hpas}
    for d in (o for o in monitored if o["kind"] == "Deployment"):
        # The HPA owns the replica count of what it scales; a kind one node holds once has no HPA.
        assert ("replicas" in d["spec"]) == (d["metadata"]["name"] not in scaled)
        assert d["metadata"]["name"] in scaled or d["spec"]["replicas"] == 1
    names = {m["pods"]["metric"]["name"] for h in hpas for m in h["spec"]["metrics"]}
    expected = {"tritongen_waiting_requests"} | ({"tritongen_kv_cache_utilization"}
                                                 if spec_name == "llama3-8b-mig" else set())
    assert names == (expected if hpas else set())
    rules = yaml.safe_load(yaml.safe_load((k8s / "monitoring" / "prometheus-adapter-rules.yaml").read_text())
                           ["data"]["config.yaml"])["rules"]
    assert {r["name"]["as"] for r in rules} == expected
    assert "nv_inference_queue_duration_us" not in str(rules)
    validate(yaml.safe_load((k8s / "monitoring" / "prometheus-adapter-rules.yaml").read_text()))
    # The load-test component adds exactly its ConfigMap, reports PVC and Job, aimed at the Service's gRPC port.
    tested = kustomize(k8s / "with-loadtest")
    _check_built(tested)
    added = sorted((o["kind"], o["metadata"]["name"]) for o in tested
                   if (o["kind"], o["metadata"]["name"]) not in {(p["kind"], p["metadata"]["name"]) for p in plain})
    name = next(o for o in plain if o["kind"] == "Service")["metadata"]["name"]
    assert added == [("ConfigMap", f"{name}-loadtest-plan"), ("Job", f"{name}-loadtest"),
                     ("Job", f"{name}-loadtest-workers"), ("PersistentVolumeClaim", f"{name}-loadtest-reports"),
                     ("Service", f"{name}-loadtest-master")]
    job = next(o for o in tested if o["kind"] == "Job" and o["metadata"]["name"] == f"{name}-loadtest")
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--url") + 1] == f"{name}:8001"


def test_multi_node_is_a_leaderworkerset(specs, tmp_path):
    # FP8 engine: a node with FP8 (an A100 node is refused at plan time).
    k8s = _render(specs["llama3-70b-tp4-2nodes"], "h100-80gb-x8.yaml", tmp_path, engine=ENGINE_70B / "config.json")
    objects = kustomize(k8s / "base")
    _check_built(objects)
    (lws,) = [o for o in objects if o["kind"] == "LeaderWorkerSet"]
    template = lws["spec"]["leaderWorkerTemplate"]
    assert template["size"] == 2
    leader = template["leaderTemplate"]["spec"]["containers"][0]
    assert leader["resources"]["limits"]["nvidia.com/gpu"] == 2  # tp 4 over 2 nodes
    script = leader["command"][2]
    assert "--mca plm_rsh_agent /tools/kubessh" in script and script.count("tritonserver ") == 4
    assert {"Role", "RoleBinding", "ServiceAccount"} <= {o["kind"] for o in objects}
    pvc = next(o for o in objects if o["kind"] == "PersistentVolumeClaim")
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"] and pvc["spec"]["storageClassName"] == "nfs-client"
    service = next(o for o in objects if o["kind"] == "Service")
    assert service["spec"]["selector"]["tritongen.io/serves"] == "true"
    assert "tritongen.io/serves" not in template["workerTemplate"]["metadata"]["labels"]
    monitored = kustomize(k8s / "with-monitoring")
    _check_built(monitored)
    (lws,) = [o for o in monitored if o["kind"] == "LeaderWorkerSet"]
    assert lws["spec"]["replicas"] == 1 and not [o for o in monitored if o["kind"] == "HorizontalPodAutoscaler"]
    # deploy.replicas: the HPA scales the LeaderWorkerSet's groups up to that many and owns the count.
    data = yaml.safe_load(specs["llama3-70b-tp4-2nodes"].read_text())
    data["deploy"]["replicas"] = 3
    scaled_spec = specs["llama3-70b-tp4-2nodes"].parent / "lws-scaled.yaml"
    scaled_spec.write_text(yaml.safe_dump(data))
    scaled = kustomize(_render(scaled_spec, "h100-80gb-x8.yaml", tmp_path / "scaled", engine=ENGINE_70B / "config.json")
                       / "with-monitoring")
    (hpa,) = [o for o in scaled if o["kind"] == "HorizontalPodAutoscaler"]
    assert hpa["spec"]["scaleTargetRef"]["kind"] == "LeaderWorkerSet" and hpa["spec"]["maxReplicas"] == 3
    assert "replicas" not in next(o for o in scaled if o["kind"] == "LeaderWorkerSet")["spec"]
    tested = kustomize(k8s / "with-loadtest")
    _check_built(tested)
    job = next(o for o in tested if o["kind"] == "Job" and o["metadata"]["name"].endswith("-loadtest"))
    pod = job["spec"]["template"]["spec"]
    assert "affinity" not in pod  # ReadWriteMany: the load generator may run on any node
    args = pod["containers"][0]["args"]
    assert args[args.index("--url") + 1] == f"{service['metadata']['name']}:8001"


def test_multi_node_needs_a_shared_volume(specs, tmp_path):
    data = yaml.safe_load(specs["llama3-70b-tp4-2nodes"].read_text())
    data["deploy"]["access_mode"] = "ReadWriteOnce"
    spec = specs["llama3-70b-tp4-2nodes"].parent / "rwo.yaml"  # next to the checkpoint
    spec.write_text(yaml.safe_dump(data))
    with pytest.raises(SpecError, match=r"^deploy.access_mode: ReadWriteOnce mounts the models volume on one node"):
        prepare(spec, inventory=str(FIXTURES / "inventories" / "a100-80gb-x8.yaml"),
                engine_config=ENGINE_70B / "config.json")


def test_models_job_fetches_and_builds(specs, tmp_path):
    data = yaml.safe_load(specs["llama3-8b-mig"].read_text())
    data["deploy"] = {"checkpoint_uri": "hf://meta-llama/Llama-3.1-8B-Instruct@main"}
    spec = specs["llama3-8b-mig"].parent / "fetch.yaml"  # next to the checkpoint
    spec.write_text(yaml.safe_dump(data))
    k8s = _render(spec, "h200-all-balanced.yaml", tmp_path / "out", engine=ENGINE_8B / "config.json")
    objects = kustomize(k8s / "base")
    job = next(o for o in objects if o["kind"] == "Job")
    script = job["spec"]["template"]["spec"]["containers"][0]["command"][2]
    assert "snapshot_download" in script and "meta-llama/Llama-3.1-8B-Instruct main " in script
    # The conversion scripts of the serving image itself (its TensorRT-LLM release): nothing cloned.
    assert "trtllm-build" in script and "/app/examples/models/" in script and "git clone" not in script
    marker = re.search(r"touch (\S+)", script).group(1)
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    wait = deployment["spec"]["template"]["spec"]["initContainers"][0]["command"][2]
    assert marker in wait and job["metadata"]["name"] in wait
    cm = next(o for o in objects if o["kind"] == "ConfigMap")
    items = job["spec"]["template"]["spec"]["volumes"][1]["configMap"]["items"]
    assert {i["path"] for i in items} >= {"ensemble/config.pbtxt", "tensorrt_llm/config.pbtxt"}
    assert set(cm["data"]) == {i["key"] for i in items}
