"""What the Kubernetes HPA scales on: per-pod signals of LLM saturation, served by prometheus-adapter.

Triton's queue time / compute time ratio (the usual Triton HPA metric) stays flat for an in-flight-batched LLM:
requests leave Triton's queue at once and wait inside the batch manager instead. Measured on tensorrt_llm: queue
0.11-0.27 ms per request while TTFT p95 went from 30 to 239 ms under rising load (issue 16). The signals here
count what actually waits:

- tensorrtllm: `nv_trt_llm_request_metrics{request_type="waiting"}` (requests the batch manager has not
  scheduled: batch slots or KV blocks are exhausted) and the paged KV cache's used fraction
  (`nv_trt_llm_kv_cache_block_metrics`, used / max blocks). The HPA takes the larger proposal of the two.
- hf: its model exports `tritongen_llm_active_requests`; requests beyond the planned batch
  (serving.max_batch_size x instances per pod) are the ones waiting for a slot.

- trtllm: NVIDIA's llmapi model passes every request to its engine inside `execute` and returns, so Triton's
  pending count stays 0 and its request counters count arrivals (measured with the test double on the embedded
  tritonserver: tests/test_llmapi_served.py); the model exports no gauge. The per-pod arrival rate,
  rate(nv_inference_request_success) of `tensorrt_llm`, moves with the load; its target is a capacity.
  The OpenAI frontend's in-flight gauge (tritongen_openai_active_requests) moves too, but it lives in the
  frontend's own pod, not in the server pods the HPA scales.

Extension point: a deployment that runs the OpenAI frontend can add a TTFT signal here (a histogram quantile of
the frontend's time to first token), keyed on what the Deployment runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tritongen.deploy.common import Deployment


@dataclass(frozen=True)
class Signal:
    """One custom pods metric: its prometheus-adapter rule and the HPA target (AverageValue per pod)."""

    name: str
    """Metric name the HPA asks the custom metrics API for."""
    series: str
    """The Prometheus series the adapter discovers it from (seriesQuery)."""
    query: str
    """metricsQuery, with the adapter's <<.LabelMatchers>> / <<.GroupBy>> placeholders."""
    target: str
    """HPA averageValue (a Kubernetes quantity)."""
    meaning: str


def _quantity(value: float) -> str:
    """A Kubernetes quantity: integers as they are, fractions in milli-units."""
    return str(int(value)) if float(value).is_integer() else f"{round(value * 1000)}m"


def _tensorrtllm(dep: Deployment) -> list[Signal]:
    d = dep.plan.deploy
    return [
        Signal("tritongen_waiting_requests", 'nv_trt_llm_request_metrics{request_type="waiting",pod!=""}',
               'sum by (<<.GroupBy>>) (nv_trt_llm_request_metrics{<<.LabelMatchers>>,request_type="waiting"})',
               _quantity(d.hpa_waiting_requests), "requests waiting for a batch slot or KV blocks"),
        Signal("tritongen_kv_cache_utilization", 'nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="used",pod!=""}',
               'sum by (<<.GroupBy>>) (nv_trt_llm_kv_cache_block_metrics{<<.LabelMatchers>>,kv_cache_block_type="used"})'
               ' / clamp_min(sum by (<<.GroupBy>>) (nv_trt_llm_kv_cache_block_metrics{<<.LabelMatchers>>,'
               'kv_cache_block_type="max"}), 1)',
               _quantity(d.hpa_kv_cache_utilization), "used fraction of the paged KV cache"),
    ]


def _hf(dep: Deployment) -> list[Signal]:
    capacity = dep.plan.triton_max_batch_size * dep.plan.llm_instance_group.count
    return [Signal("tritongen_waiting_requests", 'tritongen_llm_active_requests{pod!=""}',
                   f'clamp_min(sum by (<<.GroupBy>>) (tritongen_llm_active_requests{{<<.LabelMatchers>>}}) - {capacity}, 0)',
                   _quantity(dep.plan.deploy.hpa_waiting_requests),
                   f"requests in flight beyond the planned batch of {capacity}")]


def _llmapi(dep: Deployment) -> list[Signal]:
    return [Signal("tritongen_request_rate", 'nv_inference_request_success{model="tensorrt_llm",pod!=""}',
                   'sum by (<<.GroupBy>>) (rate(nv_inference_request_success{<<.LabelMatchers>>,'
                   'model="tensorrt_llm"}[1m]))',
                   _quantity(dep.plan.deploy.hpa_requests_per_s), "requests per second arriving at the model")]


_SIGNALS: dict[str, Callable[[Deployment], list[Signal]]] = {"tensorrtllm": _tensorrtllm, "hf": _hf,
                                                             "trtllm": _llmapi}


def _pending(dep: Deployment) -> list[Signal]:
    """Runtimes without a signal of their own (synthetic): Triton's requests pending for the model."""
    return [Signal("tritongen_waiting_requests", 'nv_inference_pending_request_count{pod!=""}',
                   'sum by (<<.GroupBy>>) (nv_inference_pending_request_count{<<.LabelMatchers>>})',
                   _quantity(dep.plan.deploy.hpa_waiting_requests), "requests pending in Triton for a model")]


def saturation_signals(dep: Deployment) -> list[Signal]:
    return _SIGNALS.get(dep.plan.runtime, _pending)(dep)
