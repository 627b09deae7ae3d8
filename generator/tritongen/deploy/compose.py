"""Compose target: docker-compose.yaml (one service per server group), built as data, and nginx.conf for several.

Host ports are the placement's (server group k: 8000 + 10k, ...); the load balancer takes the next free slot.
Devices are reserved per service (`deploy.resources.reservations.devices`, driver nvidia) by UUID: the MIG
instance's, or the GPUs' when the inventory has them (indices change with PCI enumeration and MIG mode). The CPU
profile reserves none.

The file carries no path of the machine that wrote it: the model's folders are variables
(TRITONGEN_CHECKPOINT_DIR, TRITONGEN_TOKENIZER_DIR, TRITONGEN_ENGINE_DIR) that default to ./models/<folder> next
to the file, so the output folder can be copied to the GPU host with the model beside it, or pointed at the
host's folders through the environment or a .env file.

The load test (profile `loadtest`) is a Locust master (`loadtest`) and validation.load.processes workers
(`loadtest-worker-<k>`), one process each: `docker compose --profile loadtest up --exit-code-from loadtest loadtest`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tritongen.deploy import clients, dashboard, pods
from tritongen.deploy.common import (
    CONTAINER_PORTS, REPOSITORY, TOKENIZER, Deployment, Mount, device_ids, render_template, serving_dockerfile,
    tritongen_dockerfile,
)
from tritongen.deploy.serving_image import DOCKERFILE as SERVING_DOCKERFILE
from tritongen.deploy.image import DOCKERFILE as TRITONGEN_DOCKERFILE, image_tag
from tritongen.deploy.tools import DEFAULT_MASTER_PORT
from tritongen.placement import ServerGroup
from tritongen.render import HEADER

NGINX_IMAGE = "nginx:1.27-alpine"  # `http2 on;` needs nginx >= 1.25.1


def stop_grace(dep: Deployment) -> str:
    """deploy.grace_period_s: servers spend it as their StopBudget says (the drain, the clients' lag, the unload
    within --exit-timeout-secs), the frontend drains for as long; docker's default 10 s would cut requests in flight
    off."""
    return f"{dep.plan.deploy.grace_period_s}s"


@dataclass(frozen=True)
class ComposeService:
    service: str
    group: ServerGroup
    command: list[str]
    ports: list[tuple[int, int]]
    """(container port, host port)."""
    volumes: list[Mount]
    device_ids: list[str]
    build: str | None


@dataclass(frozen=True)
class LoadBalancer:
    image: str
    http_port: int
    grpc_port: int
    openai_port: int | None = None
    """Host port of Triton's in-process OpenAI frontends (implementation triton), balanced like HTTP."""


def _escape(value: str) -> str:
    # docker-compose interpolates $VAR in every value; $$ is a literal dollar.
    return value.replace("$", "$$")


def _source(m: Mount) -> str:
    """A bind source: the output's own folders as they are, the model's through their variable."""
    if not m.variable:
        return m.source
    return f"${{{m.variable}:-{default_folder(m)}}}"


def default_folder(m: Mount) -> str:
    return default_folder_of(m.variable)


def default_folder_of(variable: str) -> str:
    """TRITONGEN_CHECKPOINT_DIR -> ./models/checkpoint: next to the compose file unless the variable is set."""
    return "./models/" + variable.removeprefix("TRITONGEN_").removesuffix("_DIR").lower()


def model_folders(dep: Deployment) -> dict[str, str]:
    """{variable: the folder on the machine that planned}: what `deploy` prints, never writes."""
    return {m.variable: m.source for m in dep.mounts if m.variable}


def _bind(m: Mount) -> dict:
    return {"type": "bind", "source": _source(m), "target": m.target, "read_only": True}


def compose_services(dep: Deployment) -> list[ComposeService]:
    volumes = [Mount("./model_repository", REPOSITORY), *dep.mounts]
    triton_openai = clients.frontend_mode(dep) == "triton"
    return [ComposeService(service=f"triton-{g.name}", group=g, command=dep.command(g, "compose"),
                           # Triton's OpenAI frontend in the server has no metrics port (its metrics are at
                           # /metrics of the OpenAI port, published next to the group's three).
                           ports=list(zip(CONTAINER_PORTS, g.ports))[:2 if triton_openai else 3] + (
                               [(clients.openai_port(dep), g.metrics_port + 1)] if triton_openai else []),
                           volumes=volumes, device_ids=[] if dep.on_cpu else device_ids(g, dep.inventory),
                           build=SERVING_DOCKERFILE if dep.builds_serving_image else None)
            for g in dep.placement.server_groups]


def load_balancer(dep: Deployment) -> LoadBalancer | None:
    """nginx in front when there is more than one server; its host ports follow the last server group's."""
    groups = dep.placement.server_groups
    if len(groups) < 2:
        return None
    base = (max(max(g.ports) for g in groups) // 10 + 1) * 10
    triton_openai = clients.frontend_mode(dep) == "triton"
    return LoadBalancer(NGINX_IMAGE, base, base + 1, base + 3 if triton_openai else None)


def _ports(pairs: list[tuple[int, int]]) -> list[str]:
    return [f"{host}:{container}" for container, host in pairs]


def _healthcheck(url: str, start_s: int) -> dict:
    return {"test": ["CMD", "python3", "-c", f"import urllib.request; urllib.request.urlopen('{url}', timeout=4)"],
            "interval": "10s", "timeout": "5s", "retries": 3, "start_period": f"{start_s}s"}


def server_service(dep: Deployment, s: ComposeService) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if s.build:
        out["build"] = {"context": ".", "dockerfile": s.build}
    out.update({
        "image": dep.image, "command": [_escape(a) for a in s.command], "ports": _ports(s.ports),
        "environment": dep.environment("compose"),
        "volumes": [_bind(m) for m in s.volumes], "shm_size": "2gb",
        "ulimits": {"memlock": -1, "stack": 67108864},
        "labels": {"tritongen.deployment": dep.plan.name, "tritongen.server-group": s.group.name,
                   "tritongen.devices": ", ".join(s.group.devices)},
        "healthcheck": _healthcheck(f"http://127.0.0.1:{CONTAINER_PORTS.http}/v2/health/ready", 1800),
        "restart": "unless-stopped", "stop_grace_period": stop_grace(dep),
    })
    if s.device_ids:
        out["deploy"] = {"resources": {"reservations": {"devices": [
            {"driver": "nvidia", "device_ids": list(s.device_ids), "capabilities": ["gpu"]}]}}}
    return out


def tool_services(dep: Deployment, services: list[ComposeService], lb: LoadBalancer | None) -> dict[str, dict]:
    """tritongen's OpenAI frontend (implementation tritongen) and the load test (profile `loadtest`)."""
    triton = "lb" if lb else services[0].service
    servers = {s.service: {"condition": "service_healthy"} for s in services} if lb is None else \
        {"lb": {"condition": "service_started"}}
    repository = _bind(Mount("./model_repository", REPOSITORY))
    tokenizer = _bind(next(m for m in dep.mounts if m.target == TOKENIZER))
    image = {"build": {"context": ".", "dockerfile": TRITONGEN_DOCKERFILE}, "image": image_tag()}
    api_key_env = dep.plan.frontend.api_key_env if dep.plan.frontend else None
    out: dict[str, dict] = {}
    mode = clients.frontend_mode(dep)
    if mode == "tritongen":
        port = clients.openai_port(dep)
        out["openai"] = {**image, "command": [_escape(a) for a in clients.frontend_args(dep, triton)],
                         "ports": [f"{port}:{port}"], **({"environment": [api_key_env]} if api_key_env else {}),
                         "volumes": [repository, tokenizer],
                         "healthcheck": _healthcheck(f"http://127.0.0.1:{port}/health", 120),
                         "restart": "unless-stopped", "stop_grace_period": stop_grace(dep), "depends_on": servers}
    target = clients.load_target(dep, triton, len(services), frontend_host="openai",
                                 triton_openai_port=clients.openai_port(dep) if mode == "triton" else None)
    openai = target.protocol == "openai"
    env = {"environment": [api_key_env]} if openai and api_key_env else {}
    plan_files = [_bind(Mount(f"./loadtest/{name}", f"{clients.LOADTEST_DIR}/{name}"))
                  for name in clients.loadtest_files(dep)]
    upstream = {"openai": {"condition": "service_healthy"}} if openai and mode == "tritongen" else servers
    workers = dep.plan.load.processes
    names = [f"loadtest-worker-{k}" for k in range(1, workers + 1)]
    master = {"profiles": ["loadtest"], **image,
              "command": [_escape(a) for a in [*target.args(f"{clients.REPORTS}/{dep.name}"), "--master", "--workers",
                                               str(workers), "--master-port", str(DEFAULT_MASTER_PORT),
                                               "--processes", "1"]],
              **env,
              # Short syntax for the reports: docker creates ./loadtest-report when it is missing.
              "volumes": [*plan_files, tokenizer, f"./loadtest-report:{clients.REPORTS}"],
              "depends_on": {**upstream, **{n: {"condition": "service_started"} for n in names}}}
    out["loadtest"] = master
    for n in names:
        out[n] = {"profiles": ["loadtest"], **image,
                  "command": [_escape(a) for a in ["loadtest", clients.LOADTEST_PLAN, "--url", target.url, "--worker",
                                                   "--master-host", "loadtest", "--master-port",
                                                   str(DEFAULT_MASTER_PORT), "--processes", "1", "--out",
                                                   "/tmp/worker"]],
                  **env, "volumes": [*plan_files, tokenizer], "depends_on": upstream}
    return out


def compose_document(dep: Deployment) -> dict[str, Any]:
    services, lb = compose_services(dep), load_balancer(dep)
    doc: dict[str, Any] = {s.service: server_service(dep, s) for s in services}
    if lb:
        ports = [f"{lb.http_port}:{CONTAINER_PORTS.http}", f"{lb.grpc_port}:{CONTAINER_PORTS.grpc}"]
        if lb.openai_port:
            ports.append(f"{lb.openai_port}:{clients.openai_port(dep)}")
        doc["lb"] = {"image": lb.image, "ports": ports,
                     "volumes": [{"type": "bind", "source": "./nginx.conf", "target": "/etc/nginx/nginx.conf",
                                  "read_only": True}],
                     "restart": "unless-stopped", "stop_grace_period": "30s",
                     "depends_on": {s.service: {"condition": "service_healthy"} for s in services}}
    doc.update(tool_services(dep, services, lb))
    doc.update(dashboard.compose_services(dep, services))
    return {"services": doc}


def render_compose(dep: Deployment) -> dict[str, bytes]:
    services, lb = compose_services(dep), load_balancer(dep)
    variables = ", ".join(sorted({f"{m.variable} (default {default_folder(m)})" for m in dep.mounts}))
    comment = [HEADER.format(name=dep.plan.name),
               f"# One tritonserver per server group of the placement{', nginx (least_conn) in front' if lb else ''}.",
               f"# Model folders on the host that runs it: {variables}.",
               "# Build: docker compose --profile loadtest build    Start: docker compose up -d --wait",
               "# Load test (profile loadtest: a Locust master and its workers; report in ./loadtest-report):",
               "#   docker compose --profile loadtest up --exit-code-from loadtest loadtest",
               "# Dashboard (profile monitoring: Prometheus on :9090, Grafana on :3000 with the dashboard provisioned):",
               "#   docker compose --profile monitoring up -d prometheus grafana"]
    why = clients.load_target(dep, "lb" if lb else services[0].service, len(services), frontend_host="openai",
                              triton_openai_port=clients.openai_port(dep) if clients.frontend_mode(dep) == "triton"
                              else None).why_no_metrics
    if why:
        comment.append(f"# {why}.")
    body = pods.to_yaml(compose_document(dep))
    files = {"docker-compose.yaml": ("\n".join(comment) + "\n" + body).encode()}
    if lb:
        files["nginx.conf"] = render_template("nginx.conf.j2", dep, services=services, lb=lb,
                                              openai_port=clients.openai_port(dep) if lb.openai_port else None)
    if dep.builds_serving_image:
        files[SERVING_DOCKERFILE] = serving_dockerfile(dep)
    files[TRITONGEN_DOCKERFILE] = tritongen_dockerfile(dep)
    files.update({f"loadtest/{name}": data for name, data in clients.loadtest_files(dep).items()})
    files.update(dashboard.compose_files(dep, services))
    return files


def compose_endpoints(dep: Deployment, host: str = "127.0.0.1") -> list[str]:
    """Every published endpoint: each server group's three ports, and the load balancer's when there is one."""
    triton = clients.frontend_mode(dep) == "triton"
    lines = [f"{g.name}: http {host}:{g.http_port}  grpc {host}:{g.grpc_port}  metrics "
             f"{host}:{g.metrics_port + 1 if triton else g.metrics_port}" for g in dep.placement.server_groups]
    lb = load_balancer(dep)
    if lb:
        lines.append(f"load balancer (nginx, least_conn): http {host}:{lb.http_port}  grpc {host}:{lb.grpc_port}"
                     + (f"  openai {host}:{lb.openai_port}" if lb.openai_port else ""))
    mode = clients.frontend_mode(dep)
    if mode == "tritongen":
        lines.append(f"openai (tritongen frontend): http://{host}:{clients.openai_port(dep)}/v1")
    elif mode == "triton":
        lines += [f"{g.name}: openai (Triton frontend) http://{host}:{g.metrics_port + 1}/v1"
                  for g in dep.placement.server_groups]
    return lines
