"""The deployment files' part of the Plan: what `tritongen deploy` needs beyond the placement (storage, model
sources, multi-node span, monitoring and autoscaling targets).

Resolved once from the spec's `deploy` section by the planner (plan/make.py); generator/tritongen/deploy/* reads
only this. The spec validates the values (patterns, limits); a lock file carries them as they were planned.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Orchestrator = Literal["k8s", "compose", "serve"]
"""What stops the server: a Kubernetes pod (preStop, then SIGTERM), docker compose or docker (SIGTERM at once), or
`tritongen serve` (SIGTERM from its own stop)."""

PRESTOP_S = 5
"""Kubernetes: seconds a stopping pod keeps serving before its process gets SIGTERM: the endpoints controller has
already taken it out of the Service, and kube-proxy and ingress controllers need a few seconds to stop sending to it."""
EXIT_MARGIN_S = 3
"""Left at the end of the grace period for the process to exit (release GPU memory, /dev/shm) before the kill."""
UNLOAD_S = 5
"""After the drain: unloading the models (the python stubs' finalize and exit, an engine's memory released)."""
CLIENT_LAG_S = 7
"""After the drain: clients slower than the model still read responses already sent (a 5-7 s backlog at 256
streams of a 5 ms ITL source read by 8 client processes, docs/serving-behaviour.md "Stopping"); tritonserver keeps
the entry model loaded until its streams are read, and its exit timeout counts that time."""
MIN_DRAIN_S = 5
"""The shortest drain the fixed allowances are kept for; a shorter grace period scales every allowance down."""


class StopBudget(BaseModel):
    """How a stopping server spends its grace period, in the order it happens: preStop, drain (streams in flight
    finish; those still running then end with UNAVAILABLE "the server is stopping"), the clients' lag reading
    what was sent, the models' unload, the exit margin. tritonserver's --exit-timeout-secs covers all but the
    preStop and the margin. Every generated command line and environment takes its numbers from here."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    grace_s: int = Field(ge=1)
    """The whole period: terminationGracePeriodSeconds, stop_grace_period, `serve --grace-period`."""
    prestop_s: int = Field(ge=0)
    """Kubernetes preStop sleep before SIGTERM (0 elsewhere)."""
    drain_s: int = Field(ge=0)
    """TRITONGEN_DRAIN_S: seconds streams in flight may run on after SIGTERM (both BLS models, the hf model)."""
    client_lag_s: int = Field(ge=0)
    """Allowed after the drain for clients to read the responses already sent."""
    unload_s: int = Field(ge=0)
    """Allowed after the drain for the models to unload."""
    exit_margin_s: int = Field(ge=0)
    """Left for the process to exit before the kill."""

    @property
    def exit_timeout_s(self) -> int:
        """tritonserver --exit-timeout-secs: from SIGTERM, the drain, the clients' lag and the unload."""
        return self.drain_s + self.client_lag_s + self.unload_s

    @classmethod
    def of(cls, grace_s: float, orchestrator: Orchestrator) -> StopBudget:
        """The budget of `grace_s` seconds. Below the fixed allowances plus MIN_DRAIN_S (25 s on Kubernetes, 20 s
        elsewhere) every allowance shrinks in proportion, so the parts always add up to the grace period."""
        grace = max(1, int(grace_s))
        parts = {"prestop_s": PRESTOP_S if orchestrator == "k8s" else 0, "client_lag_s": CLIENT_LAG_S,
                 "unload_s": UNLOAD_S, "exit_margin_s": EXIT_MARGIN_S}
        needed = sum(parts.values()) + MIN_DRAIN_S
        if grace < needed:
            parts = {k: v * grace // needed for k, v in parts.items()}
        return cls(grace_s=grace, drain_s=grace - sum(parts.values()), **parts)

    def environment(self) -> dict[str, str]:
        """What the server's processes read: the drain of the BLS models and the hf model."""
        return {"TRITONGEN_DRAIN_S": str(self.drain_s)}

    def describe(self) -> str:
        return (f"grace {self.grace_s} s = preStop {self.prestop_s} + drain {self.drain_s} + client lag "
                f"{self.client_lag_s} + unload {self.unload_s} + exit margin {self.exit_margin_s} "
                f"(--exit-timeout-secs={self.exit_timeout_s})")


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
    adapter_uris: dict[str, str] = {}
    """Kubernetes: like checkpoint_uri, for LoRA adapters by name (fetched to /models/adapters/<name>)."""
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


    def stop_budget(self, orchestrator: Orchestrator) -> StopBudget:
        """How a server stopped by `orchestrator` spends grace_period_s (StopBudget)."""
        return StopBudget.of(self.grace_period_s, orchestrator)
