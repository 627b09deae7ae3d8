"""The Grafana dashboard of a deployment queries only series its servers export: every series name in every
PromQL query is one Triton exports (a real tritonserver's /metrics: tests/loadtests/test_lt_stages.py), one
tritongen's own models or OpenAI frontend declare, or one upstream's model exports (the lists in
tritongen.deploy.dashboard, cited there). The compose files provision it, the k8s component labels it for the
Grafana sidecar, and `kubectl kustomize` builds the overlay."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from tritongen.deploy import dashboard as dash
from tritongen.runtimes import NAMES

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).parents[1] / "golden" / "deploy"
# tritongen's own model files: the metric families they create are what those runtimes export.
OWN_MODELS = {"hf": ROOT / "generator" / "tritongen" / "served" / "hf_model.py",
              "synthetic": ROOT / "generator" / "tritongen" / "served" / "synthetic.py"}


def frontend_names() -> set[str]:
    """The series tritongen's OpenAI frontend exports, as prometheus_client names them."""
    from tritongen.frontend.metrics import FrontendMetrics

    suffixes = {"histogram": ("_bucket", "_sum", "_count"), "counter": ("_total",), "gauge": ("",)}
    return {family.name + s for family in FrontendMetrics().registry.collect() for s in suffixes[family.type]}


def declared(runtime: str, *, frontend: bool, gpu: bool) -> set[str]:
    return (set(dash.TRITON) | (set(dash.TRITON_GPU) if gpu else set()) | set(dash.RUNTIME_SERIES[runtime].names)
            | (frontend_names() if frontend else set()))


def test_every_runtime_has_an_entry():
    assert set(dash.RUNTIME_SERIES) == set(NAMES)


@pytest.mark.parametrize("runtime", sorted(dash.RUNTIME_SERIES))
@pytest.mark.parametrize("frontend", [False, True])
@pytest.mark.parametrize("gpu", [False, True])
def test_queries_read_only_exported_series(runtime, frontend, gpu):
    board = dash.dashboard("x", runtime, "pod", frontend=frontend, gpu=gpu, called_model="ensemble")
    used = set().union(*map(dash.series_names, dash.queries(board)))
    assert used and used <= declared(runtime, frontend=frontend, gpu=gpu), used - declared(
        runtime, frontend=frontend, gpu=gpu)
    titles = {p["title"] for p in board["panels"]}
    assert {"Throughput", "Queue", "Errors"} <= titles
    assert ("Time to first token" in titles) == (frontend or runtime == "vllm")
    assert ("KV cache used" in titles) == (runtime == "tensorrtllm")


def test_the_vllm_series_are_the_families_the_pinned_backend_creates():
    # vllm_backend r26.01 src/utils/metrics.py (tests/fixtures/nvidia/vllm_backend-r26.01.json, `metric_families`):
    # Triton serves a counter under its name and a histogram as _bucket, _sum and _count.
    facts = json.loads((ROOT / "tests" / "fixtures" / "nvidia" / "vllm_backend-r26.01.json").read_text())
    families = facts["vllm_backend"]["request"]["metric_families"]
    suffixes = {"counter": ("",), "histogram": ("_bucket", "_sum", "_count")}
    assert set(dash.RUNTIME_SERIES["vllm"].names) == {n + s for n, kind in families.items() for s in suffixes[kind]}


@pytest.mark.parametrize("runtime", sorted(OWN_MODELS))
def test_own_runtime_lists_are_what_the_model_files_create(runtime):
    created = set(re.findall(r'MetricFamily\(\s*"([a-z_:]+)"', OWN_MODELS[runtime].read_text()))
    assert set(dash.RUNTIME_SERIES[runtime].names) <= created


def test_series_names_skip_labels_functions_and_ranges():
    expr = ('histogram_quantile(0.95, sum by (pod, le) (rate(vllm:time_to_first_token_seconds_bucket{model="m"}'
            '[$__rate_interval]))) / clamp_min(sum without (reason) (nv_inference_request_failure), 1e-9)')
    assert dash.series_names(expr) == {"vllm:time_to_first_token_seconds_bucket", "nv_inference_request_failure"}


def test_compose_provisions_prometheus_and_grafana():
    out = GOLDEN / "llama3-8b-mig-compose"
    services = yaml.safe_load((out / "docker-compose.yaml").read_text())["services"]
    assert services["grafana"]["profiles"] == ["monitoring"] == services["prometheus"]["profiles"]
    scrape = yaml.safe_load((out / "monitoring" / "prometheus.yml").read_text())["scrape_configs"][0]
    groups = {c["labels"]["server_group"] for c in scrape["static_configs"]}
    servers = {name for name, s in services.items() if "tritongen.server-group" in s.get("labels", {})}
    assert len(groups) == len(servers) > 1
    assert {t.split(":")[0] for c in scrape["static_configs"] for t in c["targets"]} == servers
    provider = yaml.safe_load((out / "monitoring/grafana/provisioning/dashboards/tritongen.yaml").read_text())
    assert provider["providers"][0]["options"]["path"] == dash.DASHBOARD_FOLDER
    board = json.loads(next((out / "monitoring/grafana/dashboards").glob("*.json")).read_text())
    assert all("server_group" in q for q in dash.queries(board))


def test_k8s_dashboard_component_builds_with_the_sidecar_label():
    from validators import kustomize

    objects = kustomize(GOLDEN / "tiny-cpu-k8s" / "k8s" / "with-dashboard")
    maps = [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["labels"].get("grafana_dashboard")]
    assert len(maps) == 1 and maps[0]["metadata"]["labels"]["grafana_dashboard"] == "1"
    board = json.loads(next(iter(maps[0]["data"].values())))
    assert board["panels"] and all("by (pod" in q for q in dash.queries(board))
