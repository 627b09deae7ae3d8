"""The models volume of a Kubernetes deployment: correct on one node and on many.

ReadWriteOnce (every default class) mounts on one node, so every pod that mounts it carries one label and a
required pod affinity to it: the first pod picks the node, the others follow (Multi-Attach errors or volume
node-affinity conflicts otherwise, on a multi-node pool). ReadWriteMany (NFS, CephFS, EFS, ...) lets pods spread.
What cannot work is refused: ReadWriteOncePod (the models Job and the servers both mount the volume), and more
pods of a kind than one node holds on a ReadWriteOnce volume.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tritongen.deploy import pods
from tritongen.deploy.common import Deployment, k8s_name
from tritongen.errors import SpecError, problem

if TYPE_CHECKING:
    from tritongen.deploy.k8s import K8sKind



@dataclass(frozen=True)
class Storage:
    """The models volume and how its users are kept where they can mount it."""

    pvc: str
    access_mode: str
    storage_class: str | None
    gpu_nodes: bool = True
    """The servers run on GPU nodes (tainted nvidia.com/gpu on most clusters); False for the CPU profile."""

    @property
    def colocate(self) -> bool:
        return self.access_mode == "ReadWriteOnce"

    @property
    def label(self) -> dict[str, str]:
        return {pods.MODELS_VOLUME_LABEL: self.pvc}

    def affinity(self) -> dict | None:
        """Pods that mount the volume: on its node when it is ReadWriteOnce (they also carry `label`)."""
        return pods.same_node_as(self.label) if self.colocate else None

    def tolerate_gpu(self) -> bool:
        """Pods without GPUs that must share the servers' node (ReadWriteOnce) tolerate its GPU taint."""
        return self.colocate and self.gpu_nodes

    def labels(self, labels: dict[str, str]) -> dict[str, str]:
        return {**labels, **self.label}


def storage(dep: Deployment, ks: list[K8sKind]) -> Storage:
    deploy = dep.plan.deploy
    if deploy.access_mode == "ReadWriteOncePod":
        raise SpecError(problem("deploy.access_mode", "ReadWriteOncePod lets one pod mount the models volume, but the "
                                f"models Job and {sum(k.replicas * k.nodes for k in ks)} server pod(s) mount it",
                                "use ReadWriteOnce (every pod on one node) or ReadWriteMany"))
    for kind in ks:
        if deploy.access_mode == "ReadWriteOnce" and (deploy.replicas or 0) > kind.replicas:
            raise SpecError(problem("deploy.replicas", f"{deploy.replicas} pods of kind {kind.component} need "
                                    f"more than one node (a node holds {kind.replicas}), but a ReadWriteOnce models "
                                    "volume mounts on one node", "set deploy.access_mode: ReadWriteMany with a "
                                    f"storage_class that provides it, or deploy.replicas <= {kind.replicas}"))
    return Storage(k8s_name(dep.name, "models"), deploy.access_mode, deploy.storage_class, gpu_nodes=not dep.on_cpu)


def pvc_object(name: str, labels: dict[str, str], access_mode: str, storage_class: str | None, gib: int) -> dict:
    spec: dict = {"accessModes": [access_mode]}
    if storage_class:
        spec["storageClassName"] = storage_class
    spec["resources"] = {"requests": {"storage": f"{gib}Gi"}}
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": pods.metadata(name, labels), "spec": spec}
