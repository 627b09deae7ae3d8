"""docker target: the server groups of a Deployment as containers, started through the docker SDK."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tritongen.deploy import clients
from tritongen.deploy.common import CONTAINER_PORTS, REPOSITORY, TOKENIZER, Deployment, container_name, device_ids
from tritongen.deploy.image import DOCKERFILE as TRITONGEN_DOCKERFILE, image_tag
from tritongen.deploy.serving_image import DOCKERFILE as SERVING_DOCKERFILE
from tritongen.errors import CheckFailed, EnvironmentMissing, problem
from tritongen.placement import ServerGroup
from tritongen.readiness import server_ready, wait_until_ready

# The docker SDK (about 0.4 s of CPU to import) is imported where an engine is called: only `--target docker` talks
# to one; compose and k8s import this module for engine_host().


RESTART = {"Name": "unless-stopped"}
"""Containers come back after a crash or a reboot of the engine's host, as the compose services do."""


def network_name(dep: Deployment) -> str:
    """The user-defined bridge the containers share, so tritongen's frontend reaches a server by its name."""
    return dep.name


def _published(dep: Deployment, group: ServerGroup) -> dict[str, int]:
    ports = dict(zip(CONTAINER_PORTS, group.ports))
    if clients.frontend_mode(dep) == "triton":
        # Triton's in-process OpenAI frontend: its port next to the group's three, and no metrics listener.
        ports.pop(CONTAINER_PORTS.metrics)
        ports[clients.openai_port(dep)] = group.metrics_port + 1
    return {f"{c}/tcp": h for c, h in ports.items()}


def docker_run_kwargs(dep: Deployment, group: ServerGroup, out_dir: Path) -> dict[str, Any]:
    """Keyword arguments of `client.containers.run` for one server group."""
    from docker.types import DeviceRequest, Mount as DockerMount, Ulimit

    mounts = [DockerMount(REPOSITORY, str((out_dir / "model_repository").resolve()), type="bind", read_only=True)]
    mounts += [DockerMount(m.target, m.source, type="bind", read_only=True) for m in dep.mounts]
    devices = [] if dep.on_cpu else [DeviceRequest(driver="nvidia", device_ids=device_ids(group, dep.inventory),
                                                   capabilities=[["gpu"]])]
    return {
        "image": dep.image,
        "command": dep.command(group, "compose"),
        "name": container_name(dep, group),
        "detach": True,
        "device_requests": devices,
        "ports": _published(dep, group),
        "mounts": mounts,
        "environment": dep.environment("compose"),
        "shm_size": "2g",
        "ulimits": [Ulimit(name="memlock", soft=-1, hard=-1), Ulimit(name="stack", soft=67108864, hard=67108864)],
        "labels": {"tritongen.deployment": dep.plan.name, "tritongen.server-group": group.name},
        "restart_policy": dict(RESTART),
        "network": network_name(dep),
    }


def frontend_run_kwargs(dep: Deployment, out_dir: Path) -> dict[str, Any] | None:
    """tritongen's OpenAI frontend (frontend.openai enabled, implementation tritongen) in front of the first server
    group's gRPC port, on the deployment's network; its port published as the compose target does."""
    from docker.types import Mount as DockerMount

    if clients.frontend_mode(dep) != "tritongen":
        return None
    assert dep.plan.frontend is not None
    port = clients.openai_port(dep)
    tokenizer = next(m for m in dep.mounts if m.target == TOKENIZER)
    env_name = dep.plan.frontend.api_key_env
    return {
        "image": image_tag(),
        "command": clients.frontend_args(dep, container_name(dep, dep.placement.server_groups[0])),
        "name": f"{dep.name}-openai",
        "detach": True,
        "ports": {f"{port}/tcp": port},
        "mounts": [DockerMount(REPOSITORY, str((out_dir / "model_repository").resolve()), type="bind", read_only=True),
                   DockerMount(tokenizer.target, tokenizer.source, type="bind", read_only=True)],
        # The key is passed from this environment, never written anywhere.
        "environment": {env_name: os.environ.get(env_name, "")} if env_name else {},
        "labels": {"tritongen.deployment": dep.plan.name, "tritongen.component": "openai"},
        "restart_policy": dict(RESTART),
        "network": network_name(dep),
    }


def docker_client() -> Any:
    """A client of the docker engine DOCKER_HOST (or the local socket) names; EnvironmentMissing when none answers."""
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
    value = docker_host if docker_host is not None else os.environ.get("DOCKER_HOST", "")
    parts = urlsplit(value) if "://" in value else None
    if parts and parts.scheme in ("tcp", "ssh", "http", "https") and parts.hostname:
        return parts.hostname
    return "127.0.0.1"


def run_docker(dep: Deployment, out_dir: Path, *, client: Any, replace: bool = False, timeout: float = 1800,
               ready: Callable[[str], bool] = server_ready, log: Callable[[str], None] = print) -> list[str]:
    """Start one container per server group, wait until each is ready, return the endpoints."""
    import docker

    if dep.builds_serving_image:
        log(f"building {dep.image} from {out_dir / SERVING_DOCKERFILE} (compiles the native backends) ...")
        client.images.build(path=str(out_dir), dockerfile=SERVING_DOCKERFILE, tag=dep.image)
    frontend = frontend_run_kwargs(dep, out_dir)
    if frontend is not None:
        log(f"building {image_tag()} from {out_dir / TRITONGEN_DOCKERFILE} ...")
        client.images.build(path=str(out_dir), dockerfile=TRITONGEN_DOCKERFILE, tag=image_tag())
    try:
        client.networks.get(network_name(dep))
    except docker.errors.NotFound:
        client.networks.create(network_name(dep), driver="bridge", labels={"tritongen.deployment": dep.plan.name})
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
        log(f"started  {kwargs['name']}  ({', '.join(device_ids(group, dep.inventory)) if not dep.on_cpu else 'cpu'})")
    deadline = time.monotonic() + timeout
    endpoints = []
    host = engine_host()  # published ports live on the engine's machine, which DOCKER_HOST may put elsewhere
    for group, container in containers:
        def exited(container=container) -> bool:
            container.reload()
            return container.status in ("exited", "dead")

        outcome = wait_until_ready(f"{host}:{group.http_port}", max(0.0, deadline - time.monotonic()),
                                   stopped=exited, interval=2, probe=ready)
        if outcome == "stopped":
            tail = container.logs(tail=40).decode(errors="replace")
            raise CheckFailed(problem(f"server group {group.name}", f"container {container.name} exited:\n{tail}",
                                      "fix the cause above and deploy again with --force"))
        if outcome == "timeout":
            raise CheckFailed(problem(f"server group {group.name}", f"not ready after {timeout:.0f} s",
                                      f"see `docker logs {container.name}`"))
        published = {int(c.split("/")[0]): h for c, h in _published(dep, group).items()}
        line = f"{group.name}: http {host}:{group.http_port}  grpc {host}:{group.grpc_port}"
        if clients.frontend_mode(dep) == "triton":
            line += f"  openai http://{host}:{published[clients.openai_port(dep)]}/v1 (metrics at /metrics)"
        else:
            line += f"  metrics {host}:{group.metrics_port}"
        endpoints.append(line)
    if frontend is not None:
        if replace:
            try:
                client.containers.get(frontend["name"]).remove(force=True)
            except docker.errors.NotFound:
                pass
        client.containers.run(**frontend)
        port = clients.openai_port(dep)
        log(f"started  {frontend['name']}  (tritongen's OpenAI frontend)")
        endpoints.append(f"openai (tritongen frontend): http://{host}:{port}/v1")
    return endpoints
