"""docker target: the server groups of a Deployment as containers, started through the docker SDK."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tritongen.deploy.common import (
    CONTAINER_PORTS, HF_DOCKERFILE, REPOSITORY, Deployment, container_name, device_ids,
)
from tritongen.errors import CheckFailed, EnvironmentMissing, problem
from tritongen.placement import ServerGroup


def docker_run_kwargs(dep: Deployment, group: ServerGroup, out_dir: Path) -> dict[str, Any]:
    """Keyword arguments of `client.containers.run` for one server group."""
    from docker.types import DeviceRequest, Mount as DockerMount, Ulimit

    mounts = [DockerMount(REPOSITORY, str((out_dir / "model_repository").resolve()), type="bind", read_only=True)]
    mounts += [DockerMount(m.target, m.source, type="bind", read_only=True) for m in dep.mounts]
    return {
        "image": dep.image,
        "command": dep.command(group),
        "name": container_name(dep, group),
        "detach": True,
        "device_requests": [DeviceRequest(driver="nvidia", device_ids=device_ids(group), capabilities=[["gpu"]])],
        "ports": {f"{c}/tcp": h for c, h in zip(CONTAINER_PORTS, group.ports)},
        "mounts": mounts,
        "environment": {},
        "shm_size": "2g",
        "ulimits": [Ulimit(name="memlock", soft=-1, hard=-1), Ulimit(name="stack", soft=67108864, hard=67108864)],
        "labels": {"tritongen.deployment": dep.plan.name, "tritongen.server-group": group.name},
    }


def docker_client() -> Any:
    """A client of the docker engine DOCKER_HOST (or the local socket) names; EnvironmentMissing when none answers."""
    import os

    import docker

    where = os.environ.get("DOCKER_HOST") or "the default socket (unix:///var/run/docker.sock)"
    try:
        client = docker.from_env(timeout=10)
        client.ping()
    except docker.errors.DockerException as err:
        raise EnvironmentMissing(problem(
            "--target docker", f"no docker engine answers at {where} ({err.__class__.__name__})",
            "start dockerd here, or point DOCKER_HOST at a running engine (e.g. DOCKER_HOST=ssh://user@gpu-node or "
            "tcp://gpu-node:2376 with TLS); --target compose or k8s write files without an engine")) from None
    return client


def engine_host(docker_host: str | None = None) -> str:
    """The host whose ports the containers publish: DOCKER_HOST's host for tcp:// and ssh:// engines, else
    127.0.0.1 (a local socket)."""
    import os
    from urllib.parse import urlsplit

    value = docker_host if docker_host is not None else os.environ.get("DOCKER_HOST", "")
    parts = urlsplit(value) if "://" in value else None
    if parts and parts.scheme in ("tcp", "ssh", "http", "https") and parts.hostname:
        return parts.hostname
    return "127.0.0.1"


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def run_docker(dep: Deployment, out_dir: Path, *, client: Any, replace: bool = False, timeout: float = 1800,
               ready: Callable[[str], bool] = _ready, log: Callable[[str], None] = print) -> list[str]:
    """Start one container per server group, wait until each is ready, return the endpoints."""
    import docker

    if dep.builds_hf_image:
        log(f"building {dep.image} from {out_dir / HF_DOCKERFILE} ...")
        client.images.build(path=str(out_dir), dockerfile=HF_DOCKERFILE, tag=dep.image)
    containers = []
    for group in dep.placement.server_groups:
        kwargs = docker_run_kwargs(dep, group, out_dir)
        if replace:
            try:
                client.containers.get(kwargs["name"]).remove(force=True)
            except docker.errors.NotFound:
                pass
        try:
            containers.append((group, client.containers.run(**kwargs)))
        except docker.errors.APIError as err:
            raise CheckFailed(problem(f"server group {group.name}", f"docker could not start {kwargs['name']} "
                                      f"({err.explanation or err})", "see `docker logs`; pass --force to replace "
                                      "an existing container")) from None
        log(f"started  {kwargs['name']}  ({', '.join(device_ids(group))})")
    deadline = time.monotonic() + timeout
    endpoints = []
    host = engine_host()  # published ports live on the engine's machine, which DOCKER_HOST may put elsewhere
    for group, container in containers:
        url = f"http://{host}:{group.http_port}/v2/health/ready"
        while not ready(url):
            container.reload()
            if container.status in ("exited", "dead"):
                tail = container.logs(tail=40).decode(errors="replace")
                raise CheckFailed(problem(f"server group {group.name}", f"container {container.name} exited:\n{tail}",
                                          "fix the cause above and deploy again with --force"))
            if time.monotonic() > deadline:
                raise CheckFailed(problem(f"server group {group.name}", f"not ready after {timeout:.0f} s",
                                          f"see `docker logs {container.name}`"))
            time.sleep(2)
        endpoints.append(f"{group.name}: http {host}:{group.http_port}  grpc {host}:{group.grpc_port}  "
                         f"metrics {host}:{group.metrics_port}")
    return endpoints
