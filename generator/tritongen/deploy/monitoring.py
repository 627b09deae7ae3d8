"""The k8s/monitoring component: a PodMonitor for the Prometheus Operator, HPAs on LLM saturation, and the
prometheus-adapter rules that turn Triton's metrics into the HPAs' per-pod metrics (deploy/signals.py).

The PodMonitor carries deploy.monitor_labels (default `release: prometheus`, what kube-prometheus-stack's
podMonitorSelector matches) and scrapes the port that serves Triton's metrics (clients.metrics_port). An HPA exists
only for a kind that can scale: maxReplicas is deploy.replicas, else what the inventory's node holds, and a kind
whose bound is one pod gets none (min = max would never scale).
"""

from __future__ import annotations

import yaml

from tritongen.deploy import clients, pods
from tritongen.deploy.common import Deployment
from tritongen.deploy.signals import saturation_signals

COMPONENT = {"apiVersion": "kustomize.config.k8s.io/v1alpha1", "kind": "Component"}


def hpa_bounds(dep: Deployment, kind) -> tuple[int, int]:
    """(minReplicas, maxReplicas) of a kind: one pod at least, deploy.replicas or the node's groups at most."""
    return 1, dep.plan.deploy.replicas or (1 if kind.nodes > 1 else kind.replicas)


def podmonitor_object(dep: Deployment, labels: dict[str, str], selector: dict[str, str]) -> dict:
    port, _ = clients.metrics_port(dep)
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PodMonitor",
            "metadata": pods.metadata(dep.name, {**labels, **dep.plan.deploy.monitor_labels}),
            "spec": {"selector": {"matchLabels": selector},
                     "podMetricsEndpoints": [{"port": port, "path": "/metrics", "interval": "15s"}]}}


def hpa_object(dep: Deployment, kind, signals) -> dict:
    api_version, workload = kind.api
    low, high = hpa_bounds(dep, kind)
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": pods.metadata(kind.name, kind.labels),
            "spec": {"scaleTargetRef": {"apiVersion": api_version, "kind": workload, "name": kind.name},
                     "minReplicas": low, "maxReplicas": high,
                     "metrics": [{"type": "Pods", "pods": {"metric": {"name": s.name}, "target": {
                         "type": "AverageValue", "averageValue": s.target}}} for s in signals],
                     # A new replica takes minutes to load its model; do not give it back on a short lull.
                     "behavior": {"scaleDown": {"stabilizationWindowSeconds": 600}}}}


def adapter_rules_object(dep: Deployment, labels: dict[str, str], signals) -> dict:
    rules = [{"seriesQuery": s.series, "resources": {"overrides": {"namespace": {"resource": "namespace"},
                                                                   "pod": {"resource": "pod"}}},
              "name": {"as": s.name}, "metricsQuery": s.query} for s in signals]
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": pods.metadata(f"{dep.name}-prometheus-adapter-rules", labels),
            "data": {"config.yaml": yaml.safe_dump({"rules": rules}, sort_keys=False, width=1000)}}


def monitoring_files(dep: Deployment, ks, labels: dict[str, str], selector: dict[str, str]) -> dict[str, bytes]:
    signals = saturation_signals(dep)
    name = dep.name
    port = clients.metrics_port(dep)
    files = {"k8s/monitoring/podmonitor.yaml": pods.dump(name, [podmonitor_object(dep, labels, selector)], (
        f"Prometheus Operator scrapes port {port[0]} ({port[1]}) /metrics of every serving pod (needs the "
        f"monitoring.coreos.com CRDs).\nIts labels {dep.plan.deploy.monitor_labels} must match your Prometheus' "
        "podMonitorSelector (deploy.monitor_labels)."))}
    scaled = []
    for kind in ks:
        low, high = hpa_bounds(dep, kind)
        if high <= low:
            continue
        scaled.append(kind)
        meaning = "\n".join(f"  {s.name}: {s.meaning}; target {s.target} per pod" for s in signals)
        files[f"k8s/monitoring/hpa-{kind.component}.yaml"] = pods.dump(name, [hpa_object(dep, kind, signals)], (
            "Scales on LLM saturation (prometheus-adapter-rules.yaml), not Triton's queue/compute time, which stays "
            f"flat under in-flight batching:\n{meaning}\nmaxReplicas: deploy.replicas, else what one node of the "
            "inventory holds."))
    patches = [{"target": {"group": k.api[0].split("/")[0], "version": k.api[0].split("/")[1], "kind": k.api[1],
                           "name": k.name},
                "patch": "- op: remove\n  path: /spec/replicas\n"} for k in scaled]
    unscaled = [k.component for k in ks if k not in scaled]
    note = (f"\nNo HPA for {', '.join(unscaled)}: one pod is all its bound allows (raise deploy.replicas to scale "
            "over more nodes of the same layout)." if unscaled else "")
    component = {**COMPONENT, "resources": sorted(p.removeprefix("k8s/monitoring/") for p in files)}
    if patches:
        component["patches"] = patches
    files["k8s/monitoring/kustomization.yaml"] = pods.dump(name, [component], (
        "Optional kustomize Component: Prometheus Operator PodMonitor and HPAs on LLM saturation. Needs the "
        "monitoring.coreos.com CRDs\nand prometheus-adapter serving the rules of prometheus-adapter-rules.yaml. The "
        "HPA owns the replica count of what it scales,\nso the patches drop `replicas` from those workloads." + note))
    files["k8s/monitoring/prometheus-adapter-rules.yaml"] = pods.dump(name, [adapter_rules_object(dep, labels, signals)], (
        "prometheus-adapter rules for the HPA metrics. Not part of any kustomization: merge `rules` into the "
        "adapter's own\nconfiguration (helm values `rules.custom`, or its ConfigMap in its namespace)."))
    return files
