"""Containers of the tritongen image next to the servers: the load test and tritongen's OpenAI frontend.

- Load test (compose service `loadtest` under the profile `loadtest`; Kubernetes Job in the `k8s/loadtest`
  component): `tritongen loadtest /loadtest/plan.json --url <service>:<port> --out /reports/<name>`. The plan is
  the deployment's lock file as the container sees it (`container_plan`): every decision as planned, only the
  files it reads moved to where the container has them (tokenizer under /models, prompts and trace next to the
  plan). Users, duration, levels and SLOs are the spec's (`validation.load`, `slo`), read from that plan.
- OpenAI frontend (`frontend.openai.enabled` with `implementation: tritongen`): `tritongen serve
  /models/model_repository --openai PORT --openai-host 0.0.0.0 --triton-url <service>:8001`; the repository's
  frontend.json names the tokenizer at /models/tokenizer. The API key comes from the variable the spec names
  (`frontend.api_key_env`): passed through from the host environment (compose) or a Secret (Kubernetes).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from tritongen.deploy.common import (
    CHECKPOINT, CONTAINER_PORTS, ENGINE, MODELS, REPOSITORY, TOKENIZER, Deployment,
)
from tritongen.errors import SpecError, problem
from tritongen.runtimes import launch

LOADTEST_DIR = "/loadtest"
LOADTEST_PLAN = f"{LOADTEST_DIR}/plan.json"
REPORTS = "/reports"
DEFAULT_OPENAI_PORT = 9000
PROMPTS = "prompts.jsonl"
TRACE = "trace.jsonl"
SCHEMAS = "schemas.json"


def openai_port(dep: Deployment) -> int:
    """The OpenAI API's port inside its container (frontend.openai.port; 0, 'any free port', means 9000 here)."""
    assert dep.plan.frontend is not None
    return dep.plan.frontend.port or DEFAULT_OPENAI_PORT


def frontend_mode(dep: Deployment) -> str | None:
    """'tritongen' (a frontend container), 'triton' (Triton's frontend inside each server) or None."""
    f = dep.plan.frontend
    return f.implementation if f is not None and f.enabled else None


def metrics_port(dep: Deployment) -> tuple[str, int]:
    """(port name, container port) where a server pod serves Triton's Prometheus metrics at /metrics.

    Triton's in-process OpenAI frontend starts the server without its metrics listener (main.py has no metrics
    port); it serves the same metrics text at /metrics on the OpenAI port instead."""
    if frontend_mode(dep) == "triton":
        return "openai", openai_port(dep)
    return "metrics", CONTAINER_PORTS.metrics


def frontend_args(dep: Deployment, triton_host: str) -> list[str]:
    """tritongen's argv (after the image's `tritongen` entrypoint) fronting the Triton at `triton_host`:8001, with
    the planned workers (its container is sized for them, so serve's cap by the host's cores does not apply)."""
    assert dep.plan.frontend is not None
    return ["serve", REPOSITORY, "--openai", str(openai_port(dep)), "--openai-host", "0.0.0.0",
            "--openai-workers", str(dep.plan.frontend.workers), "--triton-url", f"{triton_host}:{CONTAINER_PORTS.grpc}"]


def frontend_resources(dep: Deployment) -> tuple[int, int]:
    """(CPU cores, memory GiB) of tritongen's frontend container: a core and a GiB (tokenizer, gRPC channel, event
    loop) per worker, plus one of each for uvicorn's supervisor and the network stack."""
    assert dep.plan.frontend is not None
    workers = dep.plan.frontend.workers
    return workers + 1, workers + 1


def loadtest_files(dep: Deployment) -> dict[str, bytes]:
    """{file name: bytes} the load test reads from /loadtest: plan.json, and the prompts / trace / schema files it
    names."""
    plan, files = dep.plan, {}
    updates: dict[str, object] = {
        "tokenizer": plan.tokenizer.model_copy(update={"dir": TOKENIZER}),
        "paths": plan.paths.model_copy(update={"checkpoint": CHECKPOINT,
                                               "engine": ENGINE if plan.paths.engine else None}),
    }
    # Runtime sections name host folders too; in the container they are the volume's.
    updates["runtime_settings"] = launch(plan).weights_in_container(plan.runtime_settings, CHECKPOINT, ENGINE,
                                                                        MODELS)
    # The load profile's files are absolute (planned); the container has its copies next to the plan.
    moved_load: dict[str, object] = {}
    if plan.load.prompts_file:
        files[PROMPTS] = _read(plan.load.prompts_file, "validation.load.prompts_file")
        moved_load["prompts_file"] = f"{LOADTEST_DIR}/{PROMPTS}"
    if plan.load.trace_file:
        files[TRACE] = _read(plan.load.trace_file, "validation.load.trace_file")
        moved_load["trace_file"] = f"{LOADTEST_DIR}/{TRACE}"
    if plan.load.structured.share > 0:
        files[SCHEMAS] = _read(plan.load.structured.schemas, "validation.load.structured.schemas")
        moved_load["structured"] = plan.load.structured.model_copy(update={"schemas": f"{LOADTEST_DIR}/{SCHEMAS}"})
    if moved_load:
        updates["load"] = plan.load.model_copy(update=moved_load)
    if plan.frontend is not None:
        routes = tuple(r.model_copy(update={"tokenizer_dir": TOKENIZER, "chat_template": None})
                       for r in plan.frontend.models)
        updates["frontend"] = plan.frontend.model_copy(update={"models": routes})
    # Provenance fields name files of the machine that planned (spec folder, inventory, engine config): in the
    # container they are the volume's, or just their names. A workstation's layout stays out of the cluster.
    updates["spec_dir"] = LOADTEST_DIR
    if plan.placement is not None:
        moved = _container_paths(plan)
        pl = plan.placement
        updates["placement"] = pl.model_copy(update={
            "inventory": replace(pl.inventory, source=moved(pl.inventory.source)),
            "memory": replace(pl.memory, source=moved(pl.memory.source)),
            "result": replace(pl.result, model=moved(pl.result.model))})
    files["plan.json"] = plan.model_copy(update=updates).to_json().encode()
    return dict(sorted(files.items()))


def _container_paths(plan):
    """host path -> where the container has it (engine, checkpoint, tokenizer folders), else the file's name."""
    folders = [(plan.paths.engine, ENGINE), (plan.paths.checkpoint, CHECKPOINT), (plan.tokenizer.dir, TOKENIZER)]

    def moved(value: str) -> str:
        if not value.startswith("/"):
            return value  # 'nvml', 'cpu': no path
        for host, inside in folders:
            if host and (value == host or value.startswith(host.rstrip("/") + "/")):
                return inside + value[len(host.rstrip("/")):]
        return Path(value).name

    return moved


def _read(path: str, field: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as err:
        raise SpecError(problem(field, f"cannot read {path} ({err.strerror})",
                                "deploy from the machine that has the file; the load test container gets a copy")) from None


@dataclass(frozen=True)
class LoadTarget:
    """Where the in-cluster load test sends requests and scrapes Triton's metrics."""

    protocol: str
    url: str
    metrics_url: str | None
    """None with several servers behind one address: one server's counters cannot match the client's totals."""
    ready_url: str
    """HTTP URL that answers 200 once the target serves (the Job's init container polls it)."""
    why_no_metrics: str = ""

    def args(self, out: str) -> list[str]:
        argv = ["loadtest", LOADTEST_PLAN, "--url", self.url, "--out", out]
        return argv + (["--metrics-url", self.metrics_url] if self.metrics_url else ["--no-metrics"])


def load_target(dep: Deployment, triton_host: str, servers: int, *, frontend_host: str,
                triton_openai_port: int | None) -> LoadTarget:
    """The target of `validation.load.protocol`: Triton's gRPC / HTTP port at `triton_host`, or the OpenAI API.

    `servers`: how many tritonservers answer at `triton_host` (metrics are scraped only when it is one).
    `triton_openai_port`: the port of Triton's in-process OpenAI frontend at `triton_host` (implementation triton).
    """
    protocol = dep.plan.load.protocol
    health = f"http://{triton_host}:{CONTAINER_PORTS.http}/v2/health/ready"
    if protocol == "openai":
        mode = frontend_mode(dep)
        if mode == "tritongen":
            url, health = f"{frontend_host}:{openai_port(dep)}", f"http://{frontend_host}:{openai_port(dep)}/health"
        elif mode == "triton" and triton_openai_port is not None:
            url = f"{triton_host}:{triton_openai_port}"
        else:
            raise SpecError(problem("validation.load.protocol", "openai needs the OpenAI frontend in the deployment",
                                    "set frontend.openai.enabled: true, or load-test with protocol grpc"))
    else:
        port = CONTAINER_PORTS.grpc if protocol == "grpc" else CONTAINER_PORTS.http
        url = f"{triton_host}:{port}"
    if servers == 1:
        return LoadTarget(protocol, url, f"http://{triton_host}:{metrics_port(dep)[1]}/metrics", health)
    return LoadTarget(protocol, url, None, health,
                      why_no_metrics=f"{servers} servers answer at {triton_host}: one server's counters cannot be "
                                     "checked against the client's totals, so Triton's /metrics is not scraped")


def wait_script(url: str) -> str:
    """python3 one-liner that polls `url` until it answers 200 (the tritongen image has no curl)."""
    return ("import time, urllib.request\n"
            "while True:\n"
            "    try:\n"
            f"        urllib.request.urlopen({json.dumps(url)}, timeout=5); break\n"
            "    except Exception as err:\n"
            f"        print('waiting for', {json.dumps(url)}, err, flush=True); time.sleep(10)\n")
