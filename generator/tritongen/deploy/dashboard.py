"""A Grafana dashboard for a deployment: TTFT, ITL, throughput, queue, KV cache and errors per server group, from
the metrics its servers really export, built as data (Grafana's dashboard JSON model, schemaVersion 39).

Sources, by what serves the deployment:
- every tritonserver: Triton's per-model counters and gauges (`TRITON`: nv_inference_*, nv_cpu_*, and nv_gpu_* on
  GPU servers);
- each runtime's own series (`RUNTIME_SERIES`): tritongen's models (hf, synthetic: tritongen_llm_*), NVIDIA's
  TensorRT-LLM C++ backend (nv_trt_llm_*, nv_llm_*: triton_backend/inflight_batcher_llm/src/custom_metrics_reporter/
  custom_metrics_reporter.cc), the vLLM backend (vllm:*: vllm_backend src/utils/metrics.py); NVIDIA's llmapi
  model exports none of its own;
- tritongen's OpenAI frontend (tritongen.frontend.metrics: tritongen_openai_*), when the deployment runs it.
Panels whose series the deployment does not export are left out, so every query can return data.

Series are summed per server group: `server_group` on compose (the label the generated Prometheus configuration
puts on each server's target), `pod` on Kubernetes (a pod is one server group; the PodMonitor labels its series
with it). Compose provisions the dashboard into Grafana (profile `monitoring`); Kubernetes gets it as a ConfigMap
labelled `grafana_dashboard: "1"` for the Grafana sidecar (component k8s/dashboard).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import yaml

from tritongen.deploy import clients, pods
from tritongen.render import HEADER
from tritongen.runtimes import launch

RATE = "$__rate_interval"

TRITON = ("nv_inference_request_success", "nv_inference_request_failure", "nv_inference_count",
          "nv_inference_exec_count", "nv_inference_request_duration_us", "nv_inference_queue_duration_us",
          "nv_inference_compute_input_duration_us", "nv_inference_compute_infer_duration_us",
          "nv_inference_compute_output_duration_us", "nv_inference_pending_request_count",
          "nv_cpu_utilization", "nv_cpu_memory_total_bytes", "nv_cpu_memory_used_bytes")
"""What tritonserver (2.51, the embedded server; the same names in 26.07) exports for every model and the host."""
TRITON_GPU = ("nv_gpu_utilization", "nv_gpu_memory_total_bytes", "nv_gpu_memory_used_bytes", "nv_gpu_power_usage",
              "nv_energy_consumption")
"""Only with GPU metrics (a GPU server; MIG servers run with GPU metrics off)."""


@dataclass(frozen=True)
class RuntimeSeries:
    """What a runtime's model exports besides Triton's own, and which of it the panels use."""

    output_tokens: str = ""
    """PromQL of generated tokens per second (one series per server group after `sum by`), `{G}` the group label."""
    waiting: tuple[tuple[str, str], ...] = ()
    """(legend, PromQL) of requests waiting or running inside the model."""
    kv_fraction: str = ""
    """PromQL of the used fraction of the KV cache."""
    ttft_bucket: str = ""
    """A histogram of the time to first token (seconds), without the `_bucket` suffix."""
    itl_bucket: str = ""
    """A histogram of the time per output token (seconds)."""
    names: tuple[str, ...] = ()
    """Every series name the model exports (upstream's list where the model is upstream's), for the check that
    the dashboard queries only what exists."""


TRITONGEN_LLM = ("tritongen_llm_output_tokens_total", "tritongen_llm_active_requests")
RUNTIME_SERIES: dict[str, RuntimeSeries] = {
    "hf": RuntimeSeries(
        output_tokens="sum by ({G}) (rate(tritongen_llm_output_tokens_total[" + RATE + "]))",
        waiting=(("in flight", "sum by ({G}) (tritongen_llm_active_requests)"),),
        names=TRITONGEN_LLM + ("tritongen_llm_steps_total", "tritongen_llm_step_requests_total",
                               "tritongen_llm_step_requests_max", "tritongen_llm_rejected_requests_total",
                               "tritongen_llm_generation_loop_up", "tritongen_llm_setting",
                               "tritongen_llm_first_response_us_total", "tritongen_llm_generation_us_total",
                               "tritongen_llm_later_tokens_total", "tritongen_llm_finished_requests_total")),
    "synthetic": RuntimeSeries(
        output_tokens="sum by ({G}) (rate(tritongen_llm_output_tokens_total[" + RATE + "]))",
        waiting=(("in flight", "sum by ({G}) (tritongen_llm_active_requests)"),), names=TRITONGEN_LLM),
    "tensorrtllm": RuntimeSeries(
        output_tokens="sum by ({G}) (rate(nv_llm_output_token_len_sum[" + RATE + "]))",
        waiting=(("waiting", 'sum by ({G}) (nv_trt_llm_request_metrics{request_type="waiting"})'),
                 ("active", 'sum by ({G}) (nv_trt_llm_request_metrics{request_type="active"})')),
        kv_fraction='max by ({G}) (nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="fraction"})',
        names=("nv_trt_llm_request_metrics", "nv_trt_llm_runtime_memory_metrics", "nv_trt_llm_kv_cache_block_metrics",
               "nv_trt_llm_disaggregated_serving_metrics", "nv_trt_llm_inflight_batcher_metrics",
               "nv_trt_llm_general_metrics", "nv_llm_output_token_len_bucket", "nv_llm_output_token_len_sum",
               "nv_llm_output_token_len_count", "nv_llm_input_token_len_bucket", "nv_llm_input_token_len_sum",
               "nv_llm_input_token_len_count")),
    "trtllm": RuntimeSeries(),  # NVIDIA's llmapi model: no series of its own
    # Triton's metrics port carries only the families the backend creates with pb_utils.MetricFamily
    # (vllm_backend r26.01 c70d6547 src/utils/metrics.py: two counters, six histograms). vLLM's own Prometheus
    # series (vllm:num_requests_waiting, vllm:kv_cache_usage_perc, ...) live in the python process's registry,
    # which tritonserver does not serve: no queue or KV panel of vLLM's own.
    "vllm": RuntimeSeries(
        output_tokens="sum by ({G}) (rate(vllm:generation_tokens_total[" + RATE + "]))",
        ttft_bucket="vllm:time_to_first_token_seconds", itl_bucket="vllm:time_per_output_token_seconds",
        names=("vllm:prompt_tokens_total", "vllm:generation_tokens_total",
               *(f"{h}_{s}" for h in ("vllm:time_to_first_token_seconds", "vllm:time_per_output_token_seconds",
                                      "vllm:e2e_request_latency_seconds", "vllm:request_prompt_tokens",
                                      "vllm:request_generation_tokens", "vllm:request_params_n")
                 for s in ("bucket", "sum", "count")))),
}

FRONTEND_TTFT = "tritongen_openai_time_to_first_token_seconds"
FRONTEND_ITL = "tritongen_openai_inter_token_latency_seconds"


def _target(expr: str, legend: str, ref: str) -> dict:
    return {"datasource": {"type": "prometheus", "uid": "${datasource}"}, "expr": expr, "legendFormat": legend,
            "refId": ref}


def _panel(title: str, unit: str, targets: list[tuple[str, str]], description: str, index: int) -> dict:
    return {"type": "timeseries", "title": title, "description": description,
            "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "gridPos": {"h": 8, "w": 12, "x": 12 * (index % 2), "y": 8 * (index // 2)},
            "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
            "options": {"legend": {"displayMode": "list", "placement": "bottom"}, "tooltip": {"mode": "multi"}},
            "targets": [_target(expr, legend, chr(ord("A") + i)) for i, (expr, legend) in enumerate(targets)]}


def _quantiles(histogram: str, g: str, who: str) -> list[tuple[str, str]]:
    return [(f"histogram_quantile({q}, sum by ({g}, le) (rate({histogram}_bucket[{RATE}])))",
             f"{{{{{g}}}}} p{round(q * 100)} ({who})") for q in (0.5, 0.95)]


def panels(runtime: str, group_label: str, *, frontend: bool, gpu: bool, called_model: str) -> list[dict]:
    """The dashboard's panels for a deployment of `runtime`, series summed by `group_label`; `frontend`: tritongen's
    OpenAI frontend runs (its TTFT/ITL histograms and status counts); `gpu`: the servers export GPU metrics;
    `called_model`: the Triton model clients call (its request rate and latency)."""
    g, rt = group_label, RUNTIME_SERIES[runtime]
    legend = f"{{{{{g}}}}}"
    m = f'model="{called_model}"'
    out: list[tuple[str, str, list[tuple[str, str]], str]] = []
    ttft = (_quantiles(FRONTEND_TTFT, g, "frontend") if frontend else []) + \
        (_quantiles(rt.ttft_bucket, g, runtime) if rt.ttft_bucket else [])
    itl = (_quantiles(FRONTEND_ITL, g, "frontend") if frontend else []) + \
        (_quantiles(rt.itl_bucket, g, runtime) if rt.itl_bucket else [])
    latency = [(f"sum by ({g}) (rate(nv_inference_request_duration_us{{{m}}}[{RATE}])) / clamp_min(sum by ({g}) "
                f"(rate(nv_inference_request_success{{{m}}}[{RATE}])), 1e-9) / 1e6", f"{legend} mean request")]
    if ttft:
        out.append(("Time to first token", "s", ttft, "p50/p95 of the time to first token (tritongen's OpenAI "
                    "frontend: request received to first chunk; vLLM: the engine's)."))
    else:
        out.append(("Request latency (mean)", "s", latency, "Nothing in this deployment exports a time to first "
                    f"token (tritongen's OpenAI frontend or vLLM would): Triton's mean request time of {called_model}, "
                    "receipt to final response."))
    if itl:
        out.append(("Inter-token latency", "s", itl, "p50/p95 of the time between tokens (or content chunks)."))
    throughput = [(f"sum by ({g}) (rate(nv_inference_request_success{{{m}}}[{RATE}]))", f"{legend} requests/s")]
    if rt.output_tokens:
        throughput.append((rt.output_tokens.replace("{G}", g), f"{legend} output tokens/s"))
    out.append(("Throughput", "short", throughput,
                f"Requests completed per second ({called_model}) and output tokens per second where the model counts "
                "them."))
    queue = [(f"sum by ({g}) (nv_inference_pending_request_count)", f"{legend} pending in Triton"),
             *((expr.replace("{G}", g), f"{legend} {name}") for name, expr in rt.waiting)]
    out.append(("Queue", "short", queue, "Requests pending in Triton's queues, and waiting or running inside the "
                "model where it says so (an in-flight-batched model takes requests off Triton's queue at once)."))
    queue_time = [(f"sum by ({g}, model) (rate(nv_inference_queue_duration_us[{RATE}])) / clamp_min(sum by ({g}, "
                   f"model) (rate(nv_inference_request_success[{RATE}])), 1e-9) / 1e6", f"{legend} {{{{model}}}}")]
    out.append(("Queue time per request", "s", queue_time, "Triton's queue time per successful request, per model."))
    if rt.kv_fraction:
        out.append(("KV cache used", "percentunit", [(rt.kv_fraction.replace("{G}", g), legend)],
                    "Used fraction of the paged KV cache."))
    memory = [(f"sum by ({g}) (nv_gpu_memory_used_bytes)", f"{legend} GPU memory used")] if gpu else \
        [(f"max by ({g}) (nv_cpu_memory_used_bytes)", f"{legend} host memory used")]
    out.append(("Memory", "bytes", memory, "Device memory (GPU servers) or host memory in use: the KV cache's "
                "budget lives here for runtimes that export no KV metric."))
    errors = [(f"sum by ({g}, reason) (rate(nv_inference_request_failure[{RATE}]))", f"{legend} {{{{reason}}}}")]
    if frontend:
        errors.append((f'sum by (status) (rate(tritongen_openai_requests_total{{status=~"[45].."}}[{RATE}]))',
                       "frontend HTTP {{status}}"))
    out.append(("Errors", "reqps", errors, "Failed requests per second by Triton's reason (REJECTED: queue full, "
                "CANCELED, BACKEND, OTHER) and the frontend's 4xx/5xx answers."))
    return [_panel(title, unit, targets, desc, i) for i, (title, unit, targets, desc) in enumerate(out)]


def dashboard(name: str, runtime: str, group_label: str, *, frontend: bool, gpu: bool, called_model: str) -> dict:
    """The dashboard JSON model (import it, or let provisioning / the Grafana sidecar load it)."""
    return {
        "title": f"tritongen {name}", "uid": re.sub(r"[^a-zA-Z0-9-]", "-", f"tritongen-{name}")[:40],
        "description": f"Generated by tritongen for the deployment {name} ({runtime} runtime), per {group_label}.",
        "tags": ["tritongen", "triton", "llm"], "timezone": "browser", "schemaVersion": 39, "version": 1,
        "refresh": "30s", "time": {"from": "now-1h", "to": "now"},
        "templating": {"list": [{"name": "datasource", "label": "Prometheus", "type": "datasource",
                                 "query": "prometheus", "current": {}, "hide": 0}]},
        "panels": panels(runtime, group_label, frontend=frontend, gpu=gpu, called_model=called_model),
    }


def for_deployment(dep, group_label: str, *, frontend_scraped: bool) -> dict:
    """The dashboard of a deployment (tritongen.deploy.common.Deployment); `frontend_scraped`: the Prometheus the
    dashboard reads scrapes tritongen's OpenAI frontend (compose's does; the k8s PodMonitor scrapes the servers)."""
    plan = dep.plan
    runtime = launch(plan)
    frontend = frontend_scraped and clients.frontend_mode(dep) == "tritongen"
    gpu = any(g.gpu_metrics for g in dep.placement.server_groups)
    called = "ensemble" if runtime.ensemble else "tensorrt_llm"
    return dashboard(plan.name, runtime.name, group_label, frontend=frontend, gpu=gpu, called_model=called)


def dump(board: dict) -> bytes:
    return (json.dumps(board, indent=2) + "\n").encode()


# PromQL words that are not series names: functions, aggregations, keywords, Grafana's variables.
_NOT_SERIES = {"sum", "max", "min", "avg", "count", "rate", "irate", "increase", "histogram_quantile", "clamp_min",
               "clamp_max", "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless",
               "offset", "bool", "le"}


def series_names(expr: str) -> set[str]:
    """The series names a PromQL expression reads: label matchers, ranges, grouping labels, strings and numbers
    removed, then every remaining identifier that is not a function or keyword."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)
    text = re.sub(r"\{[^}]*\}", "", text)
    text = re.sub(r"\[[^\]]*\]", "", text)
    text = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", "", text)
    words = re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", re.sub(r"\b\d+(\.\d+)?(e-?\d+)?\b", "", text))
    return {w for w in words if w not in _NOT_SERIES}


def queries(board: dict) -> list[str]:
    return [t["expr"] for p in board["panels"] for t in p["targets"]]


# --------------------------------------------------------------------------------------------- deployment files

PROMETHEUS_IMAGE = "quay.io/prometheus/prometheus:v3.5.0"
GRAFANA_IMAGE = "docker.io/grafana/grafana:12.1.1"
COMPOSE_DIR = "monitoring"
DASHBOARD_FOLDER = "/var/lib/grafana/dashboards"


def compose_services(dep, services) -> dict[str, dict]:
    """Prometheus (scraping every server group, and the OpenAI frontend) and Grafana with the dashboard provisioned;
    profile `monitoring`, so a plain `up` starts neither."""
    return {
        "prometheus": {"profiles": ["monitoring"], "image": PROMETHEUS_IMAGE, "ports": ["9090:9090"],
                       "volumes": [f"./{COMPOSE_DIR}/prometheus.yml:/etc/prometheus/prometheus.yml:ro"],
                       "restart": "unless-stopped",
                       "depends_on": {s.service: {"condition": "service_started"} for s in services}},
        "grafana": {"profiles": ["monitoring"], "image": GRAFANA_IMAGE, "ports": ["3000:3000"],
                    "volumes": [f"./{COMPOSE_DIR}/grafana/provisioning:/etc/grafana/provisioning:ro",
                                f"./{COMPOSE_DIR}/grafana/dashboards:{DASHBOARD_FOLDER}:ro"],
                    "restart": "unless-stopped", "depends_on": {"prometheus": {"condition": "service_started"}}},
    }


def compose_files(dep, services) -> dict[str, bytes]:
    """monitoring/: Prometheus' scrape configuration (each server's target labelled with its server group) and
    Grafana's provisioning (the Prometheus data source, the dashboard folder, the dashboard)."""

    _, port = clients.metrics_port(dep)
    jobs = [{"job_name": "triton", "scrape_interval": "15s", "static_configs": [
        {"targets": [f"{s.service}:{port}"], "labels": {"server_group": s.group.name}} for s in services]}]
    if clients.frontend_mode(dep) == "tritongen":
        jobs.append({"job_name": "openai", "scrape_interval": "15s",
                     "static_configs": [{"targets": [f"openai:{clients.openai_port(dep)}"],
                                         "labels": {"server_group": "openai"}}]})
    header = HEADER.format(name=dep.plan.name) + "\n"

    def yml(data: dict) -> bytes:
        return (header + yaml.safe_dump(data, sort_keys=False)).encode()

    board = for_deployment(dep, "server_group", frontend_scraped=True)
    return {
        f"{COMPOSE_DIR}/prometheus.yml": yml({"global": {"scrape_interval": "15s"}, "scrape_configs": jobs}),
        f"{COMPOSE_DIR}/grafana/provisioning/datasources/prometheus.yaml": yml({"apiVersion": 1, "datasources": [
            {"name": "Prometheus", "type": "prometheus", "uid": "prometheus", "access": "proxy",
             "url": "http://prometheus:9090", "isDefault": True}]}),
        f"{COMPOSE_DIR}/grafana/provisioning/dashboards/tritongen.yaml": yml({"apiVersion": 1, "providers": [
            {"name": "tritongen", "type": "file", "disableDeletion": False,
             "options": {"path": DASHBOARD_FOLDER}}]}),
        f"{COMPOSE_DIR}/grafana/dashboards/{dep.name}.json": dump(board),
    }


def k8s_files(dep, labels: dict[str, str]) -> dict[str, bytes]:
    """k8s/dashboard: a kustomize Component with the dashboard as a ConfigMap labelled for the Grafana sidecar
    (kube-prometheus-stack's grafana.sidecar.dashboards: label grafana_dashboard, value "1")."""
    board = for_deployment(dep, "pod", frontend_scraped=False)
    config_map = {"apiVersion": "v1", "kind": "ConfigMap",
                  "metadata": pods.metadata(f"{dep.name}-grafana-dashboard", {**labels, "grafana_dashboard": "1"}),
                  "data": {f"{dep.name}.json": dump(board).decode()}}
    return {
        "k8s/dashboard/grafana-dashboard.yaml": pods.dump(dep.name, [config_map], (
            "The deployment's Grafana dashboard (TTFT, ITL, throughput, queue, KV cache, errors per pod). Grafana's "
            "dashboard sidecar\nloads ConfigMaps labelled grafana_dashboard: \"1\" from the namespaces it watches "
            "(kube-prometheus-stack:\ngrafana.sidecar.dashboards.searchNamespace); the queries read the series the "
            "PodMonitor of k8s/monitoring scrapes.")),
        "k8s/dashboard/kustomization.yaml": pods.dump(dep.name, [{
            "apiVersion": "kustomize.config.k8s.io/v1alpha1", "kind": "Component",
            "resources": ["grafana-dashboard.yaml"]}],
            "Optional kustomize Component: the Grafana dashboard ConfigMap (no CRD needed)."),
    }
