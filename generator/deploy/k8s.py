"""Kubernetes target: plain, kustomize-friendly manifests under k8s/.

Server groups of the same kind (same MIG profile, or same number of full GPUs of one product) become one
Deployment whose replicas are the groups the inventory's node holds. Devices come from the NVIDIA device
plugin: with `--mig-strategy mixed` a MIG slice is the resource `nvidia.com/mig-<profile>` (`+me` -> `.me`);
with `single` every slice of a node is `nvidia.com/gpu` and the node's product label names the profile; full
GPUs are always `nvidia.com/gpu`. A server group spanning several GPUs is a single pod asking for all of them
(tensor/pipeline parallel within one node; the inventory describes one node, so no group spans nodes).
"""

from __future__ import annotations

import math
import re
import shlex
from dataclasses import dataclass

from tritongen.deploy.common import ENGINE, MODELS, REPOSITORY, TOKENIZER, CHECKPOINT, Deployment, render_template
from tritongen.errors import SpecError, problem
from tritongen.placement.inventory import GIB
from tritongen.placement import ServerGroup

HPA_METRIC = "triton_queue_compute_ratio"
HPA_TARGET = "500m"  # scale out once requests queue half as long as they compute
STARTUP_MINUTES = 30
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
            resource, selector = "nvidia.com/gpu", product
        elif mig_strategy == "mixed":
            component = "mig-" + re.sub(r"[^a-z0-9]+", "-", profile.lower()).strip("-")
            resource, selector = f"nvidia.com/mig-{profile.replace('+', '.')}", product
        else:
            component = "mig-" + re.sub(r"[^a-z0-9]+", "-", profile.lower()).strip("-")
            resource, selector = "nvidia.com/gpu", _label_value(f"{gpu}-MIG-{profile}")
        if sum(1 for p, w, _ in by_kind if (p, w) == (profile, world)) > 1:  # same kind on two products
            component += "-" + product.lower()
        out.append(K8sKind(name=f"{dep.name}-{component}"[:63].rstrip("-"), component=component,
                           groups=tuple(groups), resource=resource, count=world,
                           node_selector={"nvidia.com/gpu.product": selector}, command=dep.command(groups[0]),
                           base_labels=base))
    return out


def _volume_layout(dep: Deployment) -> list[tuple[str, str]]:
    layout = [(REPOSITORY, "the model_repository folder written next to k8s/"),
              (TOKENIZER, f"the tokenizer files of {dep.plan.tokenizer.dir}")]
    if dep.plan.runtime == "tensorrtllm":
        engine = next(m.source for m in dep.mounts if m.target == ENGINE)
        layout.append((ENGINE, f"the engine folder {engine} (config.json + rank*.engine)"))
    else:
        runtime = dep.plan.hf or dep.plan.llmapi
        layout.append((CHECKPOINT, f"the checkpoint {runtime.checkpoint_dir if runtime else ''}"))
    return layout


def _check_script(dep: Deployment, layout: list[tuple[str, str]]) -> str:
    """Fail the pod early, naming what is missing, instead of letting tritonserver fail to load."""
    first = "tensorrt_llm" if dep.plan.runtime == "trtllm" else "ensemble"  # trtllm: the llmapi model alone
    checks = [f"{REPOSITORY}/{first}/config.pbtxt", *(p for p, _ in layout[1:])]
    if any(p == ENGINE for p, _ in layout):
        checks[-1] = f"{ENGINE}/config.json"
    lines = [f"test -e {shlex.quote(p)} || {{ echo {shlex.quote(f'missing {p}: fill the volume (docs/deploy.md)')}; "
             "exit 1; }" for p in checks]
    return "\n".join(lines)


def render_k8s(dep: Deployment, *, mig_strategy: str = "mixed") -> dict[str, bytes]:
    """k8s/*.yaml (listed in k8s/kustomization.yaml) and k8s/prometheus-adapter-rules.yaml."""
    ks = kinds(dep, mig_strategy)
    labels = {"app.kubernetes.io/name": "tritonserver", "app.kubernetes.io/instance": dep.name,
              "app.kubernetes.io/managed-by": "tritongen"}
    selector = {k: v for k, v in labels.items() if k != "app.kubernetes.io/managed-by"}
    pvc = f"{dep.name}-models"
    layout = _volume_layout(dep)
    weights = dep.memory.weight_bytes_per_rank * dep.memory.world_size
    size_gib = math.ceil(weights * 1.25 / GIB) + 10
    common = {"labels": labels, "selector": selector, "metric": HPA_METRIC, "target": HPA_TARGET}
    files = {"k8s/pvc.yaml": render_template("k8s-pvc.yaml.j2", dep, pvc=pvc, layout=layout, size_gib=size_gib,
                                             models=MODELS, **common)}
    for kind in ks:
        files[f"k8s/deployment-{kind.component}.yaml"] = render_template(
            "k8s-deployment.yaml.j2", dep, kind=kind, pvc=pvc, models=MODELS, check_script=_check_script(dep, layout),
            startup_minutes=STARTUP_MINUTES)
        files[f"k8s/hpa-{kind.component}.yaml"] = render_template("k8s-hpa.yaml.j2", dep, kind=kind, **common)
    files["k8s/service.yaml"] = render_template("k8s-service.yaml.j2", dep, **common)
    files["k8s/podmonitor.yaml"] = render_template("k8s-podmonitor.yaml.j2", dep, **common)
    resources = sorted(p.removeprefix("k8s/") for p in files)
    files["k8s/kustomization.yaml"] = render_template("k8s-kustomization.yaml.j2", dep, resources=resources)
    files["k8s/prometheus-adapter-rules.yaml"] = render_template("k8s-adapter-rules.yaml.j2", dep, **common)
    return files
