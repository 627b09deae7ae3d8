"""Compose target: docker-compose.yaml (one service per server group) and, for several servers, nginx.conf.

Host ports are the placement's (server group k: 8000 + 10k, ...); the load balancer takes the next free slot.
Devices are reserved per service (`deploy.resources.reservations.devices`, driver nvidia): the MIG instance's
UUID or the GPU indices.
"""

from __future__ import annotations

from dataclasses import dataclass

from tritongen.deploy import clients
from tritongen.deploy.common import (
    CONTAINER_PORTS, HF_DOCKERFILE, REPOSITORY, TOKENIZER, Deployment, Mount, device_ids, hf_dockerfile,
    render_template, tritongen_dockerfile,
)
from tritongen.deploy.image import DOCKERFILE as TRITONGEN_DOCKERFILE, image_tag
from tritongen.placement import ServerGroup

NGINX_IMAGE = "nginx:1.27-alpine"  # `http2 on;` needs nginx >= 1.25.1


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


@dataclass(frozen=True)
class ToolService:
    """A service of the tritongen image: the OpenAI frontend or the load test."""

    service: str
    args: list[str]
    volumes: list[Mount]
    depends_on: list[str]
    ports: list[tuple[int, int]]
    """(container port, host port)."""
    environment: list[str]
    """Variables passed through from the environment `docker-compose` runs in (no value in the file)."""
    healthcheck_url: str | None = None
    profile: str | None = None
    comment: str = ""


def compose_services(dep: Deployment) -> list[ComposeService]:
    volumes = [Mount("./model_repository", REPOSITORY), *dep.mounts]
    triton_openai = clients.frontend_mode(dep) == "triton"
    return [ComposeService(service=f"triton-{g.name}", group=g, command=dep.command(g),
                           ports=list(zip(CONTAINER_PORTS, g.ports)) + (
                               # Triton's OpenAI frontend in the server: host port next to the group's three.
                               [(clients.openai_port(dep), g.metrics_port + 1)] if triton_openai else []),
                           volumes=volumes, device_ids=device_ids(g),
                           build=HF_DOCKERFILE if dep.builds_hf_image else None)
            for g in dep.placement.server_groups]


def load_balancer(dep: Deployment) -> LoadBalancer | None:
    """nginx in front when there is more than one server; its host ports follow the last server group's."""
    groups = dep.placement.server_groups
    if len(groups) < 2:
        return None
    base = (max(max(g.ports) for g in groups) // 10 + 1) * 10
    triton_openai = clients.frontend_mode(dep) == "triton"
    return LoadBalancer(NGINX_IMAGE, base, base + 1, base + 3 if triton_openai else None)


def tool_services(dep: Deployment, services: list[ComposeService], lb: LoadBalancer | None) -> list[ToolService]:
    """tritongen's OpenAI frontend (implementation tritongen) and the load test (profile `loadtest`)."""
    triton = "lb" if lb else services[0].service
    servers = [s.service for s in services] if lb is None else ["lb"]
    model_files = [Mount("./model_repository", REPOSITORY), next(m for m in dep.mounts if m.target == TOKENIZER)]
    out = []
    api_key_env = dep.plan.frontend.api_key_env if dep.plan.frontend else None
    if clients.frontend_mode(dep) == "tritongen":
        port = clients.openai_port(dep)
        out.append(ToolService("openai", clients.frontend_args(dep, triton), model_files, servers, [(port, port)],
                               [api_key_env] if api_key_env else [], f"http://127.0.0.1:{port}/health"))
    target = clients.load_target(dep, triton, len(services), frontend_host="openai",
                                 triton_openai_port=clients.openai_port(dep) if clients.frontend_mode(dep) == "triton"
                                 else None)
    reports = Mount("./loadtest-report", clients.REPORTS)
    plan_files = [Mount(f"./loadtest/{name}", f"{clients.LOADTEST_DIR}/{name}") for name in clients.loadtest_files(dep)]
    openai = target.protocol == "openai"
    out.append(ToolService("loadtest", target.args(f"{clients.REPORTS}/{dep.name}"), [*plan_files, model_files[1],
                           reports], ["openai"] if openai and clients.frontend_mode(dep) == "tritongen" else servers,
                           [], [api_key_env] if openai and api_key_env else [], profile="loadtest",
                           comment=target.why_no_metrics))
    return out


def render_compose(dep: Deployment) -> dict[str, bytes]:
    services, lb = compose_services(dep), load_balancer(dep)
    tools = tool_services(dep, services, lb)
    files = {"docker-compose.yaml": render_template("docker-compose.yaml.j2", dep, services=services, lb=lb,
                                                    tools=tools, tool_image=image_tag(),
                                                    tool_dockerfile=TRITONGEN_DOCKERFILE, reports=clients.REPORTS,
                                                    openai_port=clients.openai_port(dep) if lb and lb.openai_port else None)}
    if lb:
        files["nginx.conf"] = render_template("nginx.conf.j2", dep, services=services, lb=lb,
                                              openai_port=clients.openai_port(dep) if lb.openai_port else None)
    if dep.builds_hf_image:
        files[HF_DOCKERFILE] = hf_dockerfile(dep)
    files[TRITONGEN_DOCKERFILE] = tritongen_dockerfile(dep)
    files.update({f"loadtest/{name}": data for name, data in clients.loadtest_files(dep).items()})
    return files


def compose_endpoints(dep: Deployment, host: str = "127.0.0.1") -> list[str]:
    """Every published endpoint: each server group's three ports, and the load balancer's when there is one."""
    lines = [f"{g.name}: http {host}:{g.http_port}  grpc {host}:{g.grpc_port}  metrics {host}:{g.metrics_port}"
             for g in dep.placement.server_groups]
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
