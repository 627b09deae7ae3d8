"""The `deploy` section: settings of the generated deployment files."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, field_validator
from pydantic_core import PydanticCustomError

from tritongen.spec_base import Section


_LABEL_KEY = re.compile(r"([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")
_URI = r"^(hf://[A-Za-z0-9][\w.-]*/[\w.-]+(@[\w./-]+)?|https?://\S+)$"
"""What the models Job fetches: a Hugging Face Hub repository, or an http(s) archive."""


class DeploySection(Section):
    """Settings of the generated deployment files (`tritongen deploy`)."""

    storage_class: str | None = Field(None, pattern=r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
    """Kubernetes: storageClassName of the models volume; unset uses the cluster's default class."""

    access_mode: Literal["ReadWriteOnce", "ReadWriteMany", "ReadWriteOncePod"] = "ReadWriteOnce"
    """Kubernetes: access mode of the models volume. ReadWriteOnce works with every default class but mounts on one
    node only; pods on several nodes (more replicas than a node holds, LeaderWorkerSet) need ReadWriteMany and a
    class that provides it (NFS, CephFS, EFS, Filestore, ...)."""

    volume_gib: int | None = Field(None, ge=1)
    """Kubernetes: size of the models volume; unset: the weights x 2.5 (checkpoint + engine) + 10 GiB."""

    checkpoint_uri: str | None = Field(None, pattern=_URI)
    """Kubernetes: where the models Job fetches the checkpoint into the volume: `hf://org/name[@revision]`
    (Hugging Face Hub; token from the optional Secret `<name>-hf-token`, key HF_TOKEN) or an http(s) URL of a
    .tar/.tar.gz archive of the checkpoint folder. Unset: the Job expects the checkpoint already in the volume at
    /models/checkpoint and fails naming this field otherwise."""

    tokenizer_uri: str | None = Field(None, pattern=_URI)
    """Kubernetes: like checkpoint_uri, for a tokenizer kept apart from the checkpoint (model.tokenizer)."""

    adapter_uris: dict[str, Annotated[str, Field(pattern=_URI)]] = {}
    """Kubernetes: like checkpoint_uri, for LoRA adapters (model.adapters, by name): where the models Job fetches each
    PEFT folder into the volume at /models/adapters/<name>. An adapter without one must already be there, or the Job
    fails naming this field. The Job then converts every adapter into /models/lora/<task id>/ with the serving
    image's own hf_lora_convert.py (TensorRT-LLM's examples), the folder the tensorrt_llm model prefetches and the
    BLS resends from on a LoRA cache miss."""

    nodes: int = Field(1, ge=1, le=64)
    """Kubernetes: nodes one model replica spans (multi-node tensor/pipeline parallelism). Above 1 the replica is a
    LeaderWorkerSet of this many pods, one per node, each taking engine.tp_size x engine.pp_size / nodes full GPUs
    of a node like the inventory's; mpirun on the leader starts the ranks in the worker pods."""

    replicas: int | None = Field(None, ge=1)
    """Kubernetes HPA: the most server pods of each device kind (maxReplicas), e.g. what the inventory's node
    holds times the nodes of that layout; unset: what one node holds. More than one node holds needs
    access_mode ReadWriteMany (a ReadWriteOnce volume keeps every pod on one node)."""

    grace_period_s: int = Field(30, ge=10, le=3600)
    """Seconds a stopping server (and tritongen's OpenAI frontend) may take to drain: it stops taking new requests
    and finishes those in flight. Kubernetes terminationGracePeriodSeconds and compose stop_grace_period, spent in
    this order: the pod's preStop (5 s, Kubernetes only) while the Service stops sending it traffic; then
    tritonserver gets SIGTERM and streams in flight run on for the drain (TRITONGEN_DRAIN_S), those still running
    then end with UNAVAILABLE "the server is stopping"; 7 s for clients to read what was sent, 5 s to unload the
    models (the two with the drain: --exit-timeout-secs) and 3 s to exit before the kill. 30 s drains 10 s on
    Kubernetes and 15 s under compose; below 25 s every part shrinks in proportion. Raise it above the longest
    generation a client may wait for (max tokens x ITL) plus those 20 s."""

    monitor_labels: dict[str, str] = {"release": "prometheus"}
    """Kubernetes: labels of the PodMonitor, for the Prometheus Operator's podMonitorSelector (kube-prometheus-stack
    selects `release: <helm release name>`)."""

    @field_validator("monitor_labels")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        for key, text in value.items():
            if not (_LABEL_KEY.fullmatch(key) and _LABEL_VALUE.fullmatch(text)):
                raise PydanticCustomError("label", "'{key}: {text}' is not a Kubernetes label (keys [prefix/]name, "
                                          "values up to 63 of [A-Za-z0-9._-])", {"key": key, "text": text})
        return value

    hpa_waiting_requests: float = Field(2, gt=0)
    """Kubernetes HPA: scale out when requests waiting for a batch slot exceed this per pod (average)."""

    hpa_kv_cache_utilization: float = Field(0.85, gt=0, le=1)
    """Kubernetes HPA (tensorrtllm): scale out when the paged KV cache's used-block fraction exceeds this."""

    hpa_requests_per_s: float = Field(4, gt=0)
    """Kubernetes HPA (trtllm): scale out when a pod receives more requests per second than this (average). The
    llmapi model hands every request to its engine at once and exports no gauge of its own, so its arrival rate
    is the signal that moves; set it from the load test's capacity line (open loop, requests/s per pod)."""
