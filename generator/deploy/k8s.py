"""Kubernetes target: plain, kustomize-friendly manifests under k8s/.

Server groups of the same kind (same MIG profile, or same number of full GPUs of one product) become one
Deployment whose replicas are the groups the inventory's node holds. Devices come from the NVIDIA device
plugin: with `--mig-strategy mixed` a MIG slice is the resource `nvidia.com/mig-<profile>` (`+me` -> `.me`);
with `single` every slice of a node is `nvidia.com/gpu` and the node's product label names the profile; full
GPUs are always `nvidia.com/gpu`. A server group spanning several GPUs is a single pod asking for all of them
(tensor/pipeline parallel within one node; the inventory describes one node, so no group spans nodes).

Layout (`kubectl apply -k k8s/base` applies on a plain cluster; nothing needs a CRD):
  k8s/base/             models volume and the Job that fills it, Deployments, PDBs, Service
  k8s/monitoring/       kustomize Component: PodMonitor, HPAs on LLM saturation (needs the Prometheus Operator
                        CRDs and prometheus-adapter with the rules in prometheus-adapter-rules.yaml)
  k8s/with-monitoring/  the base plus that component: `kubectl apply -k k8s/with-monitoring`

Resources: every container sets CPU and memory requests equal to its limits, so the pods are Guaranteed QoS:
under node memory pressure the kubelet evicts BestEffort and Burstable pods first, and a tritonserver that took
minutes to load its engine is the most expensive pod to lose. The sizes come from the plan (`pod_resources`).
"""

from __future__ import annotations

import math
import re
import shlex
from dataclasses import dataclass

from tritongen.deploy import clients
from tritongen.deploy.artifacts import models_job
from tritongen.deploy.common import (
    CONTAINER_PORTS, HF_DOCKERFILE, MODELS, Deployment, hf_dockerfile, k8s_name, render_template, tritongen_dockerfile,
)
from tritongen.deploy.image import DOCKERFILE as TRITONGEN_DOCKERFILE, image_tag
from tritongen.deploy.signals import saturation_signals
from tritongen.errors import SpecError, problem
from tritongen.placement.inventory import GIB
from tritongen.placement import ServerGroup
from tritongen.runtimes import runtime_of

STARTUP_MINUTES = 30
SERVES_LABEL = "tritongen.io/serves"
SHM_GIB = 2
MIG_STRATEGIES = ("mixed", "single")


@dataclass(frozen=True)
class K8sKind:
    """One Deployment: the server groups sharing a device kind."""

    name: str
    component: str
    groups: tuple[ServerGroup, ...]
    resource: str
    count: int
    node_selector: dict[str, str]
    command: list[str]
    base_labels: dict[str, str]
    nodes: int = 1
    """Pods per replica: 1 (a Deployment) or a LeaderWorkerSet group spanning this many nodes."""

    @property
    def gpus_per_pod(self) -> int:
        return self.count // self.nodes

    @property
    def workload_file(self) -> str:
        return f"{'leaderworkerset' if self.nodes > 1 else 'deployment'}-{self.component}.yaml"

    @property
    def replicas(self) -> int:
        return len(self.groups)

    @property
    def world_size(self) -> int:
        return self.groups[0].world_size

    @property
    def devices(self) -> list[str]:
        return [", ".join(g.devices) for g in self.groups]

    @property
    def selector(self) -> dict[str, str]:
        return {**self.base_labels, "app.kubernetes.io/component": self.component}

    @property
    def labels(self) -> dict[str, str]:
        return {**self.selector, "app.kubernetes.io/managed-by": "tritongen"}


def _label_value(text: str) -> str:
    """A label value as GPU feature discovery writes it: spaces to '-', nothing outside [A-Za-z0-9._-]."""
    return re.sub(r"[^A-Za-z0-9._-]", ".", text.replace(" ", "-"))[:63].strip("-_.")


def _check_single(dep: Deployment) -> None:
    migs = [d for d in dep.placement.devices if d.kind == "mig"]
    profiles = sorted({d.profile for d in migs})
    full = sorted({d.gpu_index for d in dep.placement.devices if d.kind == "gpu"})
    if migs and (len(profiles) > 1 or full):
        layout = ", ".join(profiles) + (f" and full GPUs {', '.join(map(str, full))}" if full else "")
        raise SpecError(problem("--k8s-mig-strategy", f"single needs one MIG profile on every GPU of a node; the "
                                f"inventory has {layout}", "use --k8s-mig-strategy mixed, or a uniform MIG layout "
                                "(e.g. nvidia.com/mig.config=all-3g.71gb)"))


def kinds(dep: Deployment, mig_strategy: str = "mixed") -> list[K8sKind]:
    if mig_strategy not in MIG_STRATEGIES:
        raise SpecError(problem("--k8s-mig-strategy", f"unknown strategy {mig_strategy!r}",
                                f"use one of {', '.join(MIG_STRATEGIES)}"))
    if mig_strategy == "single":
        _check_single(dep)
    base = {"app.kubernetes.io/name": "tritonserver", "app.kubernetes.io/instance": dep.name}
    by_kind: dict[tuple[str | None, int, str], list[ServerGroup]] = {}
    for g in dep.placement.server_groups:
        by_kind.setdefault((g.mig_profile, g.world_size, dep.gpu_name(g)), []).append(g)
    out = []
    for (profile, world, gpu), groups in by_kind.items():
        product = _label_value(gpu)
        if profile is None:
            component = "gpu" if world == 1 else f"gpu-x{world}"
            if dep.plan.deploy.nodes > 1:
                component += f"-{dep.plan.deploy.nodes}nodes"
            resource, selector = "nvidia.com/gpu", product
        elif mig_strategy == "mixed":
            component = "mig-" + re.sub(r"[^a-z0-9]+", "-", profile.lower()).strip("-")
            resource, selector = f"nvidia.com/mig-{profile.replace('+', '.')}", product
        else:
            component = "mig-" + re.sub(r"[^a-z0-9]+", "-", profile.lower()).strip("-")
            resource, selector = "nvidia.com/gpu", _label_value(f"{gpu}-MIG-{profile}")
        if sum(1 for p, w, _ in by_kind if (p, w) == (profile, world)) > 1:  # same kind on two products
            component += "-" + product.lower()
        # LeaderWorkerSet pods are named <name>-<group>-<worker>: leave room for both indices.
        nodes = dep.plan.deploy.nodes
        out.append(K8sKind(name=k8s_name(dep.name, component, limit=63 if nodes == 1 else 50), component=component,
                           groups=tuple(groups), resource=resource, count=world,
                           node_selector={"nvidia.com/gpu.product": selector}, command=dep.command(groups[0]),
                           base_labels=base, nodes=nodes))
    return out


@dataclass(frozen=True)
class PodResources:
    """CPU and memory of one tritonserver container (requests = limits: Guaranteed QoS)."""

    cpu: int
    memory_gib: int
    why: str


def pod_resources(dep: Deployment, kind: K8sKind) -> PodResources:
    """Host resources of one server pod, from the plan.

    CPU: two cores for tritonserver's HTTP/gRPC front and the LLM model's scheduling loop, plus one per two
    python-backend instances (tokenizing pre/postprocessing, BLS). Memory: the pod's share of the weights once
    (TensorRT-LLM reads each rank's engine into host memory before copying it to the GPU; transformers
    materialises a checkpoint shard on the host), 2 GiB for the server and its backends, 0.5 GiB per python
    instance (a tokenizer each), and the shared-memory volume, which counts against the container's memory.
    """
    plan = dep.plan
    python = plan.preprocessing_instances + plan.postprocessing_instances + plan.bls_instances
    if runtime_of(dep.plan).python_model:  # the LLM model is a python model too
        python += plan.llm_instance_group.count
    cpu = 2 + math.ceil(python / 2)
    ranks = kind.world_size // kind.nodes
    weights = dep.memory.weight_bytes_per_rank * ranks
    memory = math.ceil(weights / GIB + 2 + 0.5 * python + SHM_GIB)
    why = (f"{ranks} rank(s) x {dep.memory.weight_bytes_per_rank / GIB:.1f} GiB weights + 2 GiB server + "
           f"{python} python instance(s) x 0.5 GiB + {SHM_GIB} GiB /dev/shm; CPU 2 + {python}/2")
    return PodResources(cpu, memory, why)


def fill_memory_gib(dep: Deployment) -> int:
    """The models Job: checkpoint conversion holds the whole checkpoint in host memory (tensorrtllm); a download
    needs little."""
    weights = dep.memory.weight_bytes_per_rank * dep.memory.world_size if runtime_of(dep.plan).builds_engine else 0
    return math.ceil(weights * 1.2 / GIB) + 4


def volume_gib(dep: Deployment) -> int:
    """deploy.volume_gib, else all weights x 2.5 (checkpoint, converted checkpoint or engine) + 10 GiB."""
    if dep.plan.deploy.volume_gib:
        return dep.plan.deploy.volume_gib
    weights = dep.memory.weight_bytes_per_rank * dep.memory.world_size
    return math.ceil(weights * 2.5 / GIB) + 10


KUBESSH = "/tools/kubessh"


def kubessh_setup() -> str:
    """Init container script: kubectl and Open MPI's rsh agent (`agent POD command...` -> kubectl exec) in /tools."""
    agent = '#!/bin/sh\npod=$1; shift\nexec /tools/kubectl exec -i "$pod" -c tritonserver -- sh -c "$*"\n'
    return (f"cp \"$(command -v kubectl)\" /tools/kubectl && printf %s {shlex.quote(agent)} > {KUBESSH} && "
            f"chmod +x {KUBESSH}")


def leader_script(kind: K8sKind) -> str:
    """The LeaderWorkerSet leader: wait for the group's workers, then mpirun over them (rank 0 here)."""
    workers = " ".join(f'"$POD_NAME-{i}"' for i in range(1, kind.nodes))
    argv = kind.command
    assert argv[:2] == ["mpirun", "--allow-run-as-root"], argv
    ranks = shlex.join(argv[2:])
    return "\n".join([
        "set -eu",
        f'hosts="$POD_NAME:{kind.gpus_per_pod}"',
        f"for pod in {workers}; do",
        '  /tools/kubectl wait --for=condition=Ready "pod/$pod" --timeout=1800s',
        f'  hosts="$hosts,$pod:{kind.gpus_per_pod}"',
        "done",
        f'exec mpirun --allow-run-as-root --mca plm_rsh_agent {KUBESSH} --host "$hosts" {ranks}',
    ])


@dataclass(frozen=True)
class ToolPod:
    """A pod of the tritongen image: the OpenAI frontend (Deployment + Service) or the load test (Job)."""

    name: str
    labels: dict[str, str]
    selector: dict[str, str]
    image: str
    args: list[str]
    wait_script: str
    api_key_env: str | None
    secret: str
    port: int = 0
    target: clients.LoadTarget | None = None
    files: dict[str, str] | None = None
    configmap: str = ""
    reports_pvc: str = ""
    cpu: int = 0
    memory_gib: int = 0
    reports: str = clients.REPORTS
    plan_dir: str = clients.LOADTEST_DIR
    plan_path: str = clients.LOADTEST_PLAN

    @property
    def out(self) -> str:
        return self.args[self.args.index("--out") + 1] if "--out" in self.args else ""


def _tool_labels(dep: Deployment, component: str) -> tuple[dict[str, str], dict[str, str]]:
    selector = {"app.kubernetes.io/name": "tritongen", "app.kubernetes.io/instance": dep.name,
                "app.kubernetes.io/component": component}
    return {**selector, "app.kubernetes.io/managed-by": "tritongen", "app.kubernetes.io/part-of": dep.name}, selector


def openai_pod(dep: Deployment) -> ToolPod | None:
    """tritongen's OpenAI frontend (frontend.openai enabled, implementation tritongen) against the Service."""
    if clients.frontend_mode(dep) != "tritongen":
        return None
    assert dep.plan.frontend is not None
    labels, selector = _tool_labels(dep, "openai")
    return ToolPod(name=k8s_name(dep.name, "openai"), labels=labels, selector=selector, image=image_tag(),
                   args=clients.frontend_args(dep, dep.name), api_key_env=dep.plan.frontend.api_key_env,
                   wait_script=clients.wait_script(f"http://{dep.name}:{CONTAINER_PORTS.http}/v2/health/ready"),
                   secret=k8s_name(dep.name, "openai-api-key"), port=clients.openai_port(dep))


def loadtest_pod(dep: Deployment, ks: list[K8sKind]) -> ToolPod:
    """The Job running `tritongen loadtest` against the Service (or the OpenAI frontend's) with the plan lock."""
    frontend = openai_pod(dep)
    target = clients.load_target(dep, dep.name, sum(k.replicas for k in ks),
                                 frontend_host=frontend.name if frontend else "",
                                 triton_openai_port=clients.openai_port(dep)
                                 if clients.frontend_mode(dep) == "triton" else None)
    labels, selector = _tool_labels(dep, "loadtest")
    files = {name: data.decode() for name, data in clients.loadtest_files(dep).items()}
    processes = dep.plan.load.processes
    api_key_env = dep.plan.frontend.api_key_env if dep.plan.frontend and target.protocol == "openai" else None
    return ToolPod(name=k8s_name(dep.name, "loadtest"), labels=labels, selector=selector, image=image_tag(),
                   args=target.args(f"{clients.REPORTS}/{dep.name}"), wait_script=clients.wait_script(target.ready_url),
                   api_key_env=api_key_env, secret=k8s_name(dep.name, "openai-api-key"), target=target, files=files,
                   configmap=k8s_name(dep.name, "loadtest-plan"), reports_pvc=k8s_name(dep.name, "loadtest-reports"),
                   cpu=processes + 1, memory_gib=1 + processes)


def render_k8s(dep: Deployment, *, mig_strategy: str = "mixed") -> dict[str, bytes]:
    """The base kustomization (k8s/base), the monitoring component, and an overlay that applies both."""
    ks = kinds(dep, mig_strategy)
    labels = {"app.kubernetes.io/name": "tritonserver", "app.kubernetes.io/instance": dep.name,
              "app.kubernetes.io/managed-by": "tritongen"}
    selector = {k: v for k, v in labels.items() if k != "app.kubernetes.io/managed-by"}
    # Service and PodMonitor reach the pods that serve: every Deployment pod, only the leader of a LeaderWorkerSet.
    serving = {**selector, SERVES_LABEL: "true"}
    pvc = k8s_name(dep.name, "models")
    job = models_job(dep)
    deploy = dep.plan.deploy
    # Triton's in-process OpenAI frontend (implementation triton): its port on the server pods and the Service.
    triton_openai = clients.openai_port(dep) if clients.frontend_mode(dep) == "triton" else None
    common = {"labels": labels, "selector": serving, "pvc": pvc, "job": job, "serves_label": SERVES_LABEL,
              "triton_openai": triton_openai}
    files = {"k8s/base/pvc.yaml": render_template("k8s-pvc.yaml.j2", dep, size_gib=volume_gib(dep), models=MODELS,
                                             storage_class=deploy.storage_class, access_mode=deploy.access_mode,
                                             **common),
             "k8s/base/models-job.yaml": render_template("k8s-models-job.yaml.j2", dep, models=MODELS, kind0=ks[0],
                                                    fill_memory_gib=fill_memory_gib(dep), **common)}
    for kind in ks:
        files[f"k8s/base/{kind.workload_file}"] = render_template(
            "k8s-lws.yaml.j2" if kind.nodes > 1 else "k8s-deployment.yaml.j2", dep, kind=kind, models=MODELS,
            startup_minutes=STARTUP_MINUTES, resources=pod_resources(dep, kind), shm_gib=SHM_GIB,
            kubessh_setup=kubessh_setup(), leader_script=leader_script(kind) if kind.nodes > 1 else "", **common)
        files[f"k8s/base/pdb-{kind.component}.yaml"] = render_template("k8s-pdb.yaml.j2", dep, kind=kind)
    if any(k.nodes > 1 for k in ks):
        files["k8s/base/rbac.yaml"] = render_template("k8s-rbac.yaml.j2", dep, **common)
    files["k8s/base/service.yaml"] = render_template("k8s-service.yaml.j2", dep, **common)
    # Pods of the tritongen image mount the models volume; a ReadWriteOnce volume pins them to the servers' node.
    tools = {"colocate": deploy.access_mode == "ReadWriteOnce", "models": MODELS, **common}
    frontend = openai_pod(dep)
    if frontend:
        files["k8s/base/openai-deployment.yaml"] = render_template("k8s-openai-deployment.yaml.j2", dep, tool=frontend,
                                                                   **tools)
        files["k8s/base/openai-service.yaml"] = render_template("k8s-openai-service.yaml.j2", dep, tool=frontend)
    resources = sorted(p.removeprefix("k8s/base/") for p in files)
    files["k8s/base/kustomization.yaml"] = render_template("k8s-kustomization.yaml.j2", dep, resources=resources,
                                                      hf_image=dep.builds_hf_image, lws=any(k.nodes > 1 for k in ks))
    if dep.builds_hf_image:
        files[HF_DOCKERFILE] = hf_dockerfile(dep)
    files[TRITONGEN_DOCKERFILE] = tritongen_dockerfile(dep)

    files["k8s/loadtest/loadtest.yaml"] = render_template("k8s-loadtest.yaml.j2", dep, tool=loadtest_pod(dep, ks),
                                                          storage_class=deploy.storage_class, **tools)
    files["k8s/loadtest/kustomization.yaml"] = render_template("k8s-loadtest-component.yaml.j2", dep,
                                                               image=image_tag())
    files["k8s/with-loadtest/kustomization.yaml"] = render_template("k8s-with-loadtest.yaml.j2", dep)

    signals = saturation_signals(dep)
    component = {"k8s/monitoring/podmonitor.yaml": render_template("k8s-podmonitor.yaml.j2", dep, **common)}
    for kind in ks:
        component[f"k8s/monitoring/hpa-{kind.component}.yaml"] = render_template(
            "k8s-hpa.yaml.j2", dep, kind=kind, signals=signals, **common)
    files.update(component)
    files["k8s/monitoring/kustomization.yaml"] = render_template(
        "k8s-monitoring-component.yaml.j2", dep, resources=sorted(p.removeprefix("k8s/monitoring/") for p in component),
        kinds=ks)
    files["k8s/monitoring/prometheus-adapter-rules.yaml"] = render_template(
        "k8s-adapter-rules.yaml.j2", dep, signals=signals, **common)
    files["k8s/with-monitoring/kustomization.yaml"] = render_template("k8s-with-monitoring.yaml.j2", dep)
    return files
