"""The deployment files' part of the Plan: what `tritongen deploy` needs beyond the placement (storage, model
sources, multi-node span, monitoring and autoscaling targets).

Resolved once from the spec's `deploy` section by the planner (plan/make.py); generator/tritongen/deploy/* reads
only this. The spec validates the values (patterns, limits); a lock file carries them as they were planned.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class DeployPlan(BaseModel):
    """Settings of the generated deployment files (spec `deploy`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    storage_class: str | None
    """Kubernetes: storageClassName of the models volume; None: the cluster's default class."""
    access_mode: Literal["ReadWriteOnce", "ReadWriteMany", "ReadWriteOncePod"]
    """Kubernetes: access mode of the models volume."""
    volume_gib: int | None
    """Kubernetes: size of the models volume; None: the weights x 2.5 + 10 GiB (deploy.k8s sizes it)."""
    checkpoint_uri: str | None
    """Kubernetes: where the models Job fetches the checkpoint (hf://org/name[@revision] or an http(s) archive)."""
    tokenizer_uri: str | None
    """Kubernetes: like checkpoint_uri, for a tokenizer kept apart from the checkpoint."""
    nodes: int
    """Nodes one model replica spans (above 1: a LeaderWorkerSet)."""
    replicas: int | None
    """Kubernetes HPA maxReplicas of each device kind; None: what one node holds."""
    grace_period_s: int = Field(30, ge=1)
    """Seconds a stopping server or frontend may drain (terminationGracePeriodSeconds, stop_grace_period)."""
    monitor_labels: dict[str, str]
    """Kubernetes: labels of the PodMonitor (the Prometheus Operator's podMonitorSelector)."""
    hpa_waiting_requests: float
    """HPA target: requests waiting for a batch slot per pod (average)."""
    hpa_kv_cache_utilization: float
    """HPA target (tensorrtllm): used fraction of the paged KV cache."""
    hpa_requests_per_s: float
    """HPA target (trtllm): requests per second arriving at a pod (average)."""

