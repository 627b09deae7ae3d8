"""Kubernetes objects as data: pod security, containers, volumes, placement next to the models volume, and the
YAML dump every manifest goes through.

Every pod meets the "restricted" Pod Security Standard, so a namespace that enforces it admits the deployment:
non-root (uid/gid 1000, the `triton-server` user of NVIDIA's images and what Triton's k8s-onprem Helm chart runs as),
no privilege escalation, every capability dropped, seccomp RuntimeDefault. Root filesystems are read-only; what a
process writes goes to an emptyDir (/tmp for Triton's python backend stubs, Open MPI's session directory and
HOME-relative caches, /dev/shm for tensors the python backend exchanges).
"""

from __future__ import annotations

from typing import Any

import yaml

from tritongen.plan.deploy import StopBudget
from tritongen.render import HEADER

RUN_AS = 1000
SCRATCH = "/tmp"
SCRATCH_GIB = 2
"""emptyDir size and ephemeral-storage request of a pod's /tmp (logs, stubs, MPI session files)."""
MODELS_VOLUME_LABEL = "tritongen.io/models-volume"
"""Every pod that mounts the models volume carries it: with ReadWriteOnce they share one node through it."""
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def pod_security() -> dict[str, Any]:
    return {"runAsNonRoot": True, "runAsUser": RUN_AS, "runAsGroup": RUN_AS, "fsGroup": RUN_AS,
            "fsGroupChangePolicy": "OnRootMismatch", "seccompProfile": {"type": "RuntimeDefault"}}


def container_security() -> dict[str, Any]:
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "readOnlyRootFilesystem": True,
            "runAsNonRoot": True}


def quantity_gib(value: float) -> str:
    return f"{value:g}Gi" if value >= 1 else f"{round(value * 1024)}Mi"


def resources(cpu: int | str, memory: str, *, ephemeral_gib: float = 1, extra: dict[str, int] | None = None) -> dict:
    """Requests equal to limits (Guaranteed QoS for CPU and memory), with ephemeral storage so the kubelet
    schedules a pod's writable layers and emptyDirs instead of evicting it when a node's disk fills."""
    r = {"cpu": cpu, "memory": memory, "ephemeral-storage": quantity_gib(ephemeral_gib), **(extra or {})}
    return {"requests": dict(r), "limits": dict(r)}


def container(name: str, image: str, *, command: list[str] | None = None, args: list[str] | None = None,
              res: dict, mounts: list[dict] = (), **extra: Any) -> dict[str, Any]:
    """A container with the restricted security context and a writable /tmp (the `scratch` volume)."""
    c: dict[str, Any] = {"name": name, "image": image}
    if command is not None:
        c["command"] = command
    if args is not None:
        c["args"] = args
    c.update(extra)
    c["env"] = [*c.get("env", []), {"name": "HOME", "value": SCRATCH}]
    c["resources"] = res
    c["securityContext"] = container_security()
    c["volumeMounts"] = [*mounts, {"name": "scratch", "mountPath": SCRATCH}]
    return c


def drain_lifecycle(budget: StopBudget) -> dict:
    """preStop: wait while traffic moves away; the process drains on the SIGTERM that follows."""
    return {"preStop": {"exec": {"command": ["sleep", str(budget.prestop_s)]}}}


def env_list(env: dict[str, str]) -> list[dict]:
    return [{"name": k, "value": v} for k, v in env.items()]


def scratch_volume(gib: float = SCRATCH_GIB) -> dict:
    return {"name": "scratch", "emptyDir": {"sizeLimit": quantity_gib(gib)}}


def models_volume(pvc: str, *, read_only: bool = True) -> dict:
    claim: dict[str, Any] = {"claimName": pvc}
    if read_only:
        claim["readOnly"] = True
    return {"name": "models", "persistentVolumeClaim": claim}


def shm_volume(gib: int) -> dict:
    # The python backend exchanges tensors through shared memory; the container default (64 MiB) is too small.
    return {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": quantity_gib(gib)}}


def same_node_as(labels: dict[str, str]) -> dict:
    """Required pod affinity to the node of the pods with `labels`. A pod that carries the labels itself may start
    where none runs yet, so the first user of a ReadWriteOnce volume picks the node and the others follow."""
    return {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": dict(labels)}}]}}


def pod_spec(containers: list[dict], *, volumes: list[dict], init: list[dict] = (), gpu: bool = False,
             node_selector: dict[str, str] | None = None, affinity: dict | None = None, restart: str | None = None,
             grace_s: int | None = None, service_account: str | None = None, scratch_gib: float = SCRATCH_GIB) -> dict:
    spec: dict[str, Any] = {}
    if service_account:
        spec["serviceAccountName"] = service_account
    else:
        # No pod here talks to the API server except the LeaderWorkerSet leader (its own account).
        spec["automountServiceAccountToken"] = False
    if restart:
        spec["restartPolicy"] = restart
    if grace_s is not None:
        spec["terminationGracePeriodSeconds"] = grace_s
    spec["securityContext"] = pod_security()
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if affinity:
        spec["affinity"] = affinity
    if gpu:  # a GPU pod, or one that must run next to GPU pods
        spec["tolerations"] = [dict(GPU_TOLERATION)]
    if init:
        spec["initContainers"] = list(init)
    spec["containers"] = list(containers)
    spec["volumes"] = [*volumes, scratch_volume(scratch_gib)]
    return spec


def metadata(name: str, labels: dict[str, str], **extra: Any) -> dict:
    return {"name": name, "labels": dict(labels), **extra}


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (scripts, plan JSON) as literal blocks, no anchors for shared objects; everything else as
    safe_dump writes it."""

    def ignore_aliases(self, data: object) -> bool:
        return True


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value and not any(c in value for c in "\t\r") else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def to_yaml(obj: object) -> str:
    return yaml.dump(obj, Dumper=_Dumper, sort_keys=False, width=120, allow_unicode=True)


def dump(name: str, docs: list[dict], comment: str = "") -> bytes:
    """A generated-file header, `comment` (why the objects look as they do) and the objects, one document each."""
    lines = [HEADER.format(name=name)] + [f"# {line}".rstrip() for line in comment.strip().splitlines() if comment]
    body = "---\n".join(to_yaml(d) for d in docs)
    return ("\n".join(lines) + "\n" + body).encode()
