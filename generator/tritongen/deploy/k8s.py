"""Kubernetes target: plain, kustomize-friendly manifests under k8s/, built as data and dumped as YAML.

Server groups of the same kind (same MIG profile, or same number of full GPUs of one product) become one
Deployment whose replicas are the groups the inventory's node holds. Devices come from the NVIDIA device
plugin: with `--mig-strategy mixed` a MIG slice is the resource `nvidia.com/mig-<profile>` (`+me` -> `.me`);
with `single` every slice of a node is `nvidia.com/gpu` and the node's product label names the profile; full
GPUs are always `nvidia.com/gpu`. A server group spanning several GPUs is a single pod asking for all of them; a
replica spanning nodes (deploy.nodes) is a LeaderWorkerSet. The CPU profile (placement.device cpu) is one
Deployment on CPU nodes.

Layout (`kubectl apply -k k8s/base` applies on a plain cluster; nothing needs a CRD but LeaderWorkerSet's):
  k8s/base/             models volume and the Job that fills it, server workloads, PDBs, Service
  k8s/monitoring/       kustomize Component: PodMonitor, HPAs on LLM saturation (deploy/monitoring.py)
  k8s/dashboard/        kustomize Component: the Grafana dashboard ConfigMap for the sidecar (deploy/dashboard.py)
  k8s/loadtest/         kustomize Component: Locust master Job + Service and workers (deploy/tools.py)
  k8s/with-monitoring/, k8s/with-loadtest/, k8s/with-dashboard/  the base plus one component each

Storage: the models volume is correct on one node and on many (deploy/storage.py).

Resources: requests equal limits for CPU and memory (Guaranteed QoS): under node memory pressure the kubelet evicts
BestEffort and Burstable pods first, and a tritonserver that took minutes to load its engine is the most expensive
pod to lose. The sizes come from the plan (`pod_resources`).
"""

from __future__ import annotations

import math
import re
import shlex
from dataclasses import dataclass

from tritongen.deploy import clients, dashboard, monitoring, pods, tools
from tritongen.deploy.artifacts import models_job, models_job_objects
from tritongen.deploy.common import (
    CONTAINER_PORTS, MODELS, STARTUP_MINUTES, Deployment, k8s_name, serving_dockerfile, tritongen_dockerfile,
)
from tritongen.deploy.image import DOCKERFILE as TRITONGEN_DOCKERFILE, image_tag
from tritongen.deploy.serving_image import DOCKERFILE as SERVING_DOCKERFILE
from tritongen.deploy.storage import Storage, pvc_object, storage
from tritongen.errors import SpecError, problem
from tritongen.placement import ServerGroup
from tritongen.placement.inventory import GIB
from tritongen.runtimes import repository

SERVES_LABEL = "tritongen.io/serves"
SHM_GIB = 2
MIG_STRATEGIES = ("mixed", "single")
KUSTOMIZATION = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization"}
COMPONENT = {"apiVersion": "kustomize.config.k8s.io/v1alpha1", "kind": "Component"}


@dataclass(frozen=True)
class K8sKind:
    """One server workload: the server groups sharing a device kind."""

    name: str
    component: str
    groups: tuple[ServerGroup, ...]
    resource: str | None
    """Device-plugin resource (None on CPU nodes)."""
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

    @property
    def api(self) -> tuple[str, str]:
        """(apiVersion, kind) of the workload."""
        return ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet") if self.nodes > 1 else ("apps/v1", "Deployment")


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
    base = {"app.kubernetes.io/name": "tritonserver", "app.kubernetes.io/instance": dep.name}
    if dep.on_cpu:
        groups = dep.placement.server_groups
        return [K8sKind(name=k8s_name(dep.name, "cpu"), component="cpu", groups=groups, resource=None, count=0,
                        node_selector={"kubernetes.io/os": "linux"}, command=dep.command(groups[0], "k8s"),
                        base_labels=base)]
    if mig_strategy == "single":
        _check_single(dep)
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
                           node_selector={"nvidia.com/gpu.product": selector}, command=dep.command(groups[0], "k8s"),
                           base_labels=base, nodes=nodes))
    return out


@dataclass(frozen=True)
class PodResources:
    """CPU and memory of one tritonserver container (requests = limits: Guaranteed QoS)."""

    cpu: int
    memory_gib: int
    shm_gib: float
    """The /dev/shm volume (Triton's python-backend regions), part of `memory_gib`."""
    why: str


def pod_resources(dep: Deployment, kind: K8sKind) -> PodResources:
    return server_resources(dep, max(1, kind.world_size // kind.nodes))


def server_resources(dep: Deployment, ranks: int) -> PodResources:
    """Host resources of one tritonserver (a k8s pod, a compose service) with `ranks` GPUs' share of the model,
    from the plan.

    Memory: the server's share of the weights once (TensorRT-LLM reads each rank's engine into host memory before
    copying it to the GPU; transformers materialises a checkpoint shard on the host), 0.5 GiB per python-backend
    instance (a stub that imports transformers holds 0.32-0.38 GiB resident with the demo model's tokenizer), the
    server itself, and the shared-memory volume, which counts against the container's memory. CPU on GPUs: two
    cores for tritonserver's HTTP/gRPC front and the LLM model's scheduling loop, plus one per two python instances
    (tokenizing pre/postprocessing, a python BLS) that keep pace with a GPU's tokens. The CPU profile's model runs
    on the pod's cores: one per LLM instance, plus one for the server and the other python instances, which at a
    CPU model's token rate are nearly idle (the demo model at 139 tokens/s: its LLM stub 0.5 cores, tritonserver
    with the native BLS 0.03, pre/postprocessing under 0.01), and its python regions hold CPU tensors of a
    CPU-sized model, so 2 GiB server and shared-memory allowances shrink to 0.5 GiB each.
    """
    plan = dep.plan
    python = plan.preprocessing_instances + plan.postprocessing_instances + plan.bls_instances
    if repository(dep.plan).python_model:  # the LLM model is a python model too
        python += plan.llm_instance_group.count
    weights = dep.memory.weight_bytes_per_rank * ranks
    if dep.on_cpu:
        server_gib, shm_gib = 0.5, 0.5
        cpu = plan.llm_instance_group.count + 1
        cpu_why = f"CPU {plan.llm_instance_group.count} LLM instance(s) + 1"
    else:
        server_gib, shm_gib = 2, SHM_GIB
        cpu = 2 + math.ceil(python / 2)
        cpu_why = f"CPU 2 + {python}/2"
    memory = math.ceil(weights / GIB + server_gib + 0.5 * python + shm_gib)
    why = (f"{ranks} rank(s) x {dep.memory.weight_bytes_per_rank / GIB:.1f} GiB weights + {server_gib:g} GiB server + "
           f"{python} python instance(s) x 0.5 GiB + {shm_gib:g} GiB /dev/shm; {cpu_why}")
    return PodResources(cpu, memory, shm_gib, why)


def volume_gib(dep: Deployment) -> int:
    """deploy.volume_gib, else all weights x 2.5 (checkpoint, converted checkpoint or engine) + 10 GiB."""
    if dep.plan.deploy.volume_gib:
        return dep.plan.deploy.volume_gib
    weights = dep.memory.weight_bytes_per_rank * dep.memory.world_size
    return math.ceil(weights * 2.5 / GIB) + 10


# ---------------------------------------------------------------------------------------------- servers


def _wait_for_models(dep: Deployment, job) -> dict:
    """Init container: wait for the Job's marker; fail (and so show the Job's reason) when the Job gave up."""
    script = (f"until [ -e {job.marker} ]; do if [ -e {job.failed} ]; then cat {job.failed}; exit 1; fi; "
              f"echo waiting for job/{job.name}; sleep 10; done")
    return pods.container("wait-for-models", dep.image, command=["sh", "-c", script],
                          res=pods.resources("100m", "64Mi", ephemeral_gib=0.125),
                          mounts=[{"name": "models", "mountPath": MODELS, "readOnly": True}])


def _server_ports(dep: Deployment) -> list[dict]:
    ports = [{"name": "http", "containerPort": CONTAINER_PORTS.http, "protocol": "TCP"},
             {"name": "grpc", "containerPort": CONTAINER_PORTS.grpc, "protocol": "TCP"}]
    name, port = clients.metrics_port(dep)
    if name == "metrics":
        ports.append({"name": "metrics", "containerPort": port, "protocol": "TCP"})
    if clients.frontend_mode(dep) == "triton":
        ports.append({"name": "openai", "containerPort": clients.openai_port(dep), "protocol": "TCP"})
    return ports


def _probes() -> dict:
    ready = {"httpGet": {"path": "/v2/health/ready", "port": "http"}}
    return {"startupProbe": {**ready, "periodSeconds": 10, "failureThreshold": STARTUP_MINUTES * 6},
            "readinessProbe": {**ready, "periodSeconds": 5, "failureThreshold": 3},
            "livenessProbe": {"httpGet": {"path": "/v2/health/live", "port": "http"}, "periodSeconds": 10,
                              "failureThreshold": 6}}


def _server_resources(dep: Deployment, kind: K8sKind) -> dict:
    r = pod_resources(dep, kind)
    devices = {kind.resource: kind.gpus_per_pod} if kind.resource else None
    return pods.resources(r.cpu, f"{r.memory_gib}Gi", ephemeral_gib=pods.SCRATCH_GIB, extra=devices)


def _server_mounts(extra: list[dict] = ()) -> list[dict]:
    return [{"name": "models", "mountPath": MODELS, "readOnly": True}, {"name": "dshm", "mountPath": "/dev/shm"},
            *extra]


def _server_pod(dep: Deployment, kind: K8sKind, store: Storage, containers: list[dict], *, init: list[dict],
                extra_volumes: list[dict] = (), service_account: str | None = None) -> dict:
    return pods.pod_spec(containers, init=init, gpu=kind.resource is not None, node_selector=kind.node_selector,
                         affinity=store.affinity(), grace_s=dep.plan.deploy.grace_period_s,
                         service_account=service_account,
                         volumes=[pods.models_volume(store.pvc), pods.shm_volume(pod_resources(dep, kind).shm_gib),
                                  *extra_volumes])


def deployment_object(dep: Deployment, kind: K8sKind, store: Storage, job) -> dict:
    c = pods.container("tritonserver", dep.image, command=kind.command, res=_server_resources(dep, kind),
                       mounts=_server_mounts(), ports=_server_ports(dep), env=pods.env_list(dep.environment("k8s")),
                       lifecycle=pods.drain_lifecycle(dep.plan.deploy.stop_budget("k8s")), **_probes())
    labels = store.labels({**kind.labels, SERVES_LABEL: "true"})
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": pods.metadata(kind.name, kind.labels),
            "spec": {"replicas": kind.replicas,
                     # GPUs are the scarce resource: replace pods one at a time instead of surging onto devices
                     # that are not free.
                     "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
                     "selector": {"matchLabels": kind.selector},
                     "template": {"metadata": {"labels": labels},
                                  "spec": _server_pod(dep, kind, store, [c], init=[_wait_for_models(dep, job)])}}}


KUBESSH = "/tools/kubessh"


def kubessh_setup() -> str:
    """Init container script: kubectl (built into the tritongen image) and Open MPI's rsh agent in /tools."""
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
        f'exec mpirun --mca plm_rsh_agent {KUBESSH} --host "$hosts" {ranks}',
    ])


def leaderworkerset_object(dep: Deployment, kind: K8sKind, store: Storage, job) -> dict:
    """One model replica = one group of `nodes` pods, as NVIDIA's multi-node Triton TensorRT-LLM example runs it:
    the leader waits for its workers, then mpirun starts every rank through `kubectl exec` (rbac.yaml)."""
    tools = {"name": "tools", "mountPath": "/tools", "readOnly": True}
    kubectl = pods.container("kubectl", image_tag(), command=["sh", "-c", kubessh_setup()],
                             res=pods.resources("100m", "128Mi", ephemeral_gib=0.25),
                             mounts=[{"name": "tools", "mountPath": "/tools"}])
    leader = pods.container("tritonserver", dep.image, command=["sh", "-c", leader_script(kind)],
                            res=_server_resources(dep, kind), mounts=_server_mounts([tools]), ports=_server_ports(dep),
                            env=[{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                                 *pods.env_list(dep.environment("k8s"))],
                            lifecycle=pods.drain_lifecycle(dep.plan.deploy.stop_budget("k8s")), **_probes())
    # Ranks arrive through `kubectl exec` from the leader; the worker container only holds the GPUs and the volume.
    worker = pods.container("tritonserver", dep.image, command=["sleep", "infinity"],
                            res=_server_resources(dep, kind), mounts=_server_mounts())
    tools_volume = [{"name": "tools", "emptyDir": {"sizeLimit": "1Gi"}}]
    leader_labels = store.labels({**kind.labels, "tritongen.io/role": "leader", SERVES_LABEL: "true"})
    worker_labels = store.labels({**kind.labels, "tritongen.io/role": "worker"})
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": pods.metadata(kind.name, kind.labels),
            "spec": {"replicas": 1, "startupPolicy": "LeaderCreated",
                     "leaderWorkerTemplate": {
                         "size": kind.nodes, "restartPolicy": "RecreateGroupOnPodRestart",
                         "leaderTemplate": {"metadata": {"labels": leader_labels}, "spec": _server_pod(
                             dep, kind, store, [leader], init=[_wait_for_models(dep, job), kubectl],
                             extra_volumes=tools_volume, service_account=k8s_name(dep.name, "mpi-leader"))},
                         "workerTemplate": {"metadata": {"labels": worker_labels},
                                            "spec": _server_pod(dep, kind, store, [worker], init=[])}}}}


def pdb_object(kind: K8sKind) -> dict:
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": pods.metadata(kind.name, kind.labels),
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": kind.selector}}}


def rbac_objects(dep: Deployment, labels: dict[str, str]) -> list[dict]:
    name = k8s_name(dep.name, "mpi-leader")
    meta = pods.metadata(name, labels)
    return [{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta,
             "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
                       {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"]}]},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": meta,
             "subjects": [{"kind": "ServiceAccount", "name": name}],
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name}}]


def service_object(dep: Deployment, labels: dict[str, str], selector: dict[str, str]) -> dict:
    ports = [{"name": "http", "port": CONTAINER_PORTS.http, "targetPort": "http", "protocol": "TCP"},
             {"name": "grpc", "port": CONTAINER_PORTS.grpc, "targetPort": "grpc", "protocol": "TCP",
              "appProtocol": "kubernetes.io/h2c"}]
    name, port = clients.metrics_port(dep)
    if name == "metrics":
        ports.append({"name": "metrics", "port": port, "targetPort": "metrics", "protocol": "TCP"})
    if clients.frontend_mode(dep) == "triton":
        ports.append({"name": "openai", "port": clients.openai_port(dep), "targetPort": "openai", "protocol": "TCP"})
    return {"apiVersion": "v1", "kind": "Service", "metadata": pods.metadata(dep.name, labels),
            "spec": {"selector": selector, "ports": ports}}


# ---------------------------------------------------------------------------------------------- images

IMAGES = "images"
"""The kustomize Component that sets every image the manifests name: the one place to point them at a registry."""
IMAGES_NOTE = ("Images are set in one place, ../images/kustomization.yaml, which every kustomization here includes "
               "last\n(an `images` entry in base would not reach the pods a component adds).")


def split_image(ref: str) -> tuple[str, str]:
    """(name, tag or @digest) of an image reference; a registry's port is part of the name."""
    if "@" in ref:
        name, _, digest = ref.partition("@")
        return name, f"@{digest}"
    name, _, tag = ref.rpartition(":")
    return (name, tag) if name and "/" not in tag else (ref, "")


def image_names(dep: Deployment) -> list[tuple[str, str, str]]:
    """(name as the manifests write it, tag or @digest, Dockerfile that builds it or '') of every image the pods
    run."""
    return [(*split_image(dep.image), SERVING_DOCKERFILE if dep.builds_serving_image else ""),
            (*split_image(image_tag()), TRITONGEN_DOCKERFILE)]


def images_component(dep: Deployment) -> dict:
    entries = []
    for name, tag, _ in image_names(dep):
        entry = {"name": name, "newName": name}
        if tag.startswith("@"):
            entry["digest"] = tag[1:]
        elif tag:
            entry["newTag"] = tag
        entries.append(entry)
    return {**COMPONENT, "images": entries}


def images_comment(dep: Deployment) -> str:
    built = [(n, t, f) for n, t, f in image_names(dep) if f]
    lines = ["Every image the manifests name, set once for k8s/base, k8s/with-monitoring and k8s/with-loadtest.",
             "Build and push the images (in the output folder), then point this file at them:"]
    lines += [f"  docker build -t $REGISTRY/{n}:{t} -f {f} . && docker push $REGISTRY/{n}:{t}" for n, t, f in built]
    lines.append("  cd k8s/images && kustomize edit set image " + " ".join(
        f"{n}=$REGISTRY/{n}:{t}" for n, t, _ in built))
    lines.append("(or edit newName/newTag below by hand; an image from a mirror: the same, with its name there).")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- render


def render_k8s(dep: Deployment, *, mig_strategy: str = "mixed") -> dict[str, bytes]:
    """The base kustomization (k8s/base), the monitoring and load-test components, and overlays that apply them."""
    ks = kinds(dep, mig_strategy)
    store = storage(dep, ks)
    labels = {"app.kubernetes.io/name": "tritonserver", "app.kubernetes.io/instance": dep.name,
              "app.kubernetes.io/managed-by": "tritongen"}
    selector = {k: v for k, v in labels.items() if k != "app.kubernetes.io/managed-by"}
    # Service and PodMonitor reach the pods that serve: every Deployment pod, only the leader of a LeaderWorkerSet.
    serving = {**selector, SERVES_LABEL: "true"}
    job = models_job(dep)
    name = dep.name
    lora = ", lora/ (LoRA adapters converted from adapters/)" if dep.plan.adapters else ""
    rwo = ("ReadWriteOnce: every pod that mounts it carries the label "
           f"{pods.MODELS_VOLUME_LABEL}={store.pvc} and a required pod affinity to it, so they share one node "
           "(set deploy.access_mode: ReadWriteMany and a storage_class that provides it to spread them)."
           if store.colocate else f"{store.access_mode}: pods that mount it may run on any node.")
    files = {
        "k8s/base/pvc.yaml": pods.dump(name, [pvc_object(store.pvc, labels, store.access_mode, store.storage_class,
                                                         volume_gib(dep))],
                                       f"Holds what every server pod reads at {MODELS}: model_repository/, checkpoint/, "
                                       f"tokenizer, engine/ (tensorrtllm){lora}; models-job.yaml fills it.\nSize: "
                                       f"deploy.volume_gib, else weights x 2.5 + 10Gi.\n{rwo}"),
        "k8s/base/models-job.yaml": pods.dump(name, models_job_objects(dep, job, ks[0], store, labels),
                                              job.comment),
    }
    for kind in ks:
        r = pod_resources(dep, kind)
        if kind.nodes > 1:
            obj = leaderworkerset_object(dep, kind, store, job)
            why = (f"One model replica = {kind.nodes} pods on {kind.nodes} nodes ({kind.gpus_per_pod} GPU(s) each, "
                   f"tp x pp = {kind.count}); rank 0 in the leader serves. Needs the LeaderWorkerSet controller "
                   f"(https://lws.sigs.k8s.io).\nRequests = limits (Guaranteed): {r.why}.")
        else:
            obj = deployment_object(dep, kind, store, job)
            where = "; ".join(kind.devices)
            why = (f"{kind.replicas} replica(s): the server groups of this kind that the inventory's node holds "
                   f"({where}).\nRequests = limits (Guaranteed QoS): {r.why}.")
        files[f"k8s/base/{kind.workload_file}"] = pods.dump(name, [obj], why)
        files[f"k8s/base/pdb-{kind.component}.yaml"] = pods.dump(name, [pdb_object(kind)], (
            "Voluntary disruptions (node drains, upgrades) take one pod of this kind at a time: each reloads its "
            "model for minutes.\nmaxUnavailable rather than minAvailable, so a kind with one replica can be drained."))
    if any(k.nodes > 1 for k in ks):
        files["k8s/base/rbac.yaml"] = pods.dump(name, rbac_objects(dep, labels), (
            "The LeaderWorkerSet leader starts the MPI ranks of its workers through `kubectl exec` (Open MPI's rsh "
            "agent):\nit may read pods and exec into them in this namespace, nothing else."))
    files["k8s/base/service.yaml"] = pods.dump(name, [service_object(dep, labels, serving)], (
        "Every tritonserver pod of the deployment. gRPC streams are long-lived HTTP/2 connections that a Service "
        "balances per\nconnection; put an L7 proxy in front for per-request balancing."))
    files.update(tools.openai_files(dep, store, labels))
    resources = sorted(p.removeprefix("k8s/base/") for p in files if p.startswith("k8s/base/"))
    lws = " except LeaderWorkerSet's" if any(k.nodes > 1 for k in ks) else ""
    files["k8s/base/kustomization.yaml"] = pods.dump(name, [{
        **KUSTOMIZATION, "labels": [{"pairs": {"app.kubernetes.io/part-of": name}}], "resources": resources,
        "components": [f"../{IMAGES}"]}],
        f"kubectl apply -k .   (plain cluster: no CRD needed{lws}); with monitoring: kubectl apply -k "
        f"../with-monitoring; load test: kubectl apply -k ../with-loadtest\n{IMAGES_NOTE}")
    files[f"k8s/{IMAGES}/kustomization.yaml"] = pods.dump(name, [images_component(dep)], images_comment(dep))
    if dep.builds_serving_image:
        files[SERVING_DOCKERFILE] = serving_dockerfile(dep)
    files[TRITONGEN_DOCKERFILE] = tritongen_dockerfile(dep)
    files.update(tools.loadtest_files(dep, ks, store, labels))
    files.update(monitoring.monitoring_files(dep, ks, labels, serving))
    files.update(dashboard.k8s_files(dep, labels))
    for component in ("loadtest", "monitoring", "dashboard"):
        files[f"k8s/with-{component}/kustomization.yaml"] = pods.dump(name, [{
            **KUSTOMIZATION, "resources": ["../base"], "components": [f"../{component}", f"../{IMAGES}"]}],
            f"The deployment plus the {component} component: kubectl apply -k .\n{IMAGES_NOTE}")
    return files
