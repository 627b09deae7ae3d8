"""What the Kubernetes HPA scales on: per-pod signals of LLM saturation, served by prometheus-adapter.

Triton's queue time / compute time ratio (the usual Triton HPA metric) stays flat for an in-flight-batched LLM:
requests leave Triton's queue at once and wait inside the batch manager instead. Measured on tensorrt_llm: queue
0.11-0.27 ms per request while TTFT p95 went from 30 to 239 ms under rising load (docs/deploy.md). Each runtime
names the series that count what actually waits (`Runtime.hpa_signals`): the batch manager's waiting requests and
KV-cache use for tensorrtllm, requests beyond the planned batch for hf, Triton's pending requests otherwise.
"""

from __future__ import annotations

from tritongen.deploy.common import Deployment
from tritongen.runtimes import launch
from tritongen.runtimes.base import Signal

__all__ = ["Signal", "saturation_signals"]


def saturation_signals(dep: Deployment) -> list[Signal]:
    return launch(dep.plan).hpa_signals(dep.plan)
