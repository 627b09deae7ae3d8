"""Compose target: docker-compose.yaml (one service per server group) and, for several servers, nginx.conf.

Host ports are the placement's (server group k: 8000 + 10k, ...); the load balancer takes the next free slot.
Devices are reserved per service (`deploy.resources.reservations.devices`, driver nvidia): the MIG instance's
UUID or the GPU indices.
"""

from __future__ import annotations

from dataclasses import dataclass

from tritongen.deploy.common import (
    CONTAINER_PORTS, HF_DOCKERFILE, REPOSITORY, Deployment, Mount, device_ids, hf_dockerfile, render_template,
)
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


def compose_services(dep: Deployment) -> list[ComposeService]:
    volumes = [Mount("./model_repository", REPOSITORY), *dep.mounts]
    return [ComposeService(service=f"triton-{g.name}", group=g, command=dep.command(g),
                           ports=list(zip(CONTAINER_PORTS, g.ports)), volumes=volumes, device_ids=device_ids(g),
                           build=HF_DOCKERFILE if dep.builds_hf_image else None)
            for g in dep.placement.server_groups]


def load_balancer(dep: Deployment) -> LoadBalancer | None:
    """nginx in front when there is more than one server; its host ports follow the last server group's."""
    groups = dep.placement.server_groups
    if len(groups) < 2:
        return None
    base = (max(max(g.ports) for g in groups) // 10 + 1) * 10
    return LoadBalancer(NGINX_IMAGE, base, base + 1)


def render_compose(dep: Deployment) -> dict[str, bytes]:
    services, lb = compose_services(dep), load_balancer(dep)
    files = {"docker-compose.yaml": render_template("docker-compose.yaml.j2", dep, services=services, lb=lb)}
    if lb:
        files["nginx.conf"] = render_template("nginx.conf.j2", dep, services=services)
    if dep.builds_hf_image:
        files[HF_DOCKERFILE] = hf_dockerfile(dep)
    return files


def compose_endpoints(dep: Deployment, host: str = "127.0.0.1") -> list[str]:
    """Every published endpoint: each server group's three ports, and the load balancer's when there is one."""
    lines = [f"{g.name}: http {host}:{g.http_port}  grpc {host}:{g.grpc_port}  metrics {host}:{g.metrics_port}"
             for g in dep.placement.server_groups]
    lb = load_balancer(dep)
    if lb:
        lines.append(f"load balancer (nginx, least_conn): http {host}:{lb.http_port}  grpc {host}:{lb.grpc_port}")
    return lines
