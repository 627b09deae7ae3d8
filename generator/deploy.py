"""Deployment targets: compose files, Kubernetes manifests, or containers started through the docker SDK.

`prepare()` turns a spec, an inventory and an engine config into a `Deployment`: the Plan, the Placement (one
tritonserver per server group) and the model repository rendered for the paths it has *inside* the serving
container (everything under /models). Renderers (deploy_compose, deploy_k8s) are pure: Deployment in,
{relative path: bytes} out; `write_deployment` writes them atomically next to the model repository, and
`run_docker` starts the same server groups through a docker engine.

Inside every container the server listens on 8000/8001/8002 and sees its own devices numbered from 0 (the
device request or device plugin selects them), so the placement's host-side CUDA_VISIBLE_DEVICES is not passed
on; the placement's ports are the host ports.
"""

from __future__ import annotations

import functools
import json
import re
import shlex
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2

from generator.errors import CheckFailed, EnvironmentMissing, SpecError, problem
from generator.inventory import Inventory, load_inventory
from generator.memory import MemoryModel
from generator.placement import Placement, ServerGroup, place
from generator.plan import InstanceGroup, Plan, max_sequence_length, memory_model_for, plan_from_file
from generator.render import HEADER, environment
from generator.spec import Spec
from generator.trtllm import TRTLLM, Ports, launch_command

TEMPLATES = Path(__file__).resolve().parent.parent / "deploy" / "templates"

# Container-side layout; every target mounts (compose, docker) or fills (Kubernetes PVC) these paths.
MODELS = "/models"
REPOSITORY = f"{MODELS}/model_repository"
ENGINE = f"{MODELS}/engine"
CHECKPOINT = f"{MODELS}/checkpoint"
TOKENIZER = f"{MODELS}/tokenizer"
CONTAINER_PORTS = Ports(8000, 8001, 8002)

# The hf runtime runs on Triton's plain python image of the same release as the TensorRT-LLM one, plus torch
# and transformers baked in by a generated Dockerfile (installing at start would download on every restart).
_RELEASE = re.search(r":(\d+\.\d+)-", TRTLLM.container).group(1)
HF_BASE_IMAGE = f"nvcr.io/nvidia/tritonserver:{_RELEASE}-py3"
HF_IMAGE = f"tritongen-hf:{_RELEASE}"
HF_DOCKERFILE = "Dockerfile.hf"



@dataclass(frozen=True)
class Mount:
    """One host folder the servers need, and where it appears inside the container."""

    source: str
    target: str


@dataclass(frozen=True)
class Deployment:
    """Everything a target needs; built once by `prepare`, read by every renderer."""

    spec: Spec
    plan: Plan
    placement: Placement
    inventory: Inventory
    memory: MemoryModel
    image: str
    repository: dict[str, bytes]
    """The model repository as the containers see it (paths under /models)."""
    mounts: tuple[Mount, ...]
    """Read-only host folders besides the repository (engine, checkpoint, tokenizer)."""

    @property
    def name(self) -> str:
        """spec.name as a DNS-1123 label (Kubernetes names, compose services)."""
        return self.spec.name.replace("_", "-").replace(".", "-")

    @property
    def builds_hf_image(self) -> bool:
        return self.spec.runtime == "hf" and self.image == HF_IMAGE

    def gpu_name(self, group: ServerGroup) -> str:
        return next(g.name for g in self.inventory.gpus if g.index == group.gpu_indices[0])

    def command(self, group: ServerGroup) -> list[str]:
        """tritonserver argv for a server group (mpirun leader mode when it spans several GPUs)."""
        argv = launch_command(group.world_size, REPOSITORY, CONTAINER_PORTS)
        if group.gpu_metrics:
            return argv
        # Triton's DCGM metrics fail to start on MIG; every rank gets the flag (only rank 0 serves).
        out = []
        for arg in argv:
            out.append(arg)
            if arg == TRTLLM.tritonserver:
                out.append("--allow-gpu-metrics=false")
        return out


def _container_view(spec: Spec, plan: Plan) -> tuple[Spec, Plan]:
    """The spec and plan as seen inside a container: paths under /models, devices numbered from 0."""
    spec = spec.model_copy(update={"placement": spec.placement.model_copy(update={"gpu_ids": []})})
    update: dict[str, Any] = {"tokenizer": plan.tokenizer.model_copy(update={"dir": TOKENIZER})}
    if plan.hf is not None:
        update["hf"] = plan.hf.model_copy(update={"checkpoint_dir": CHECKPOINT})
        update["llm_instance_group"] = InstanceGroup(kind="KIND_GPU", count=spec.placement.instances_per_gpu,
                                                     gpus=(0,))
    return spec, plan.model_copy(update=update)


def prepare(spec_path: str | Path, *, inventory: str = "nvml", engine_config: str | Path | None = None,
            image: str | None = None) -> Deployment:
    """Plan, place and render the model repository for containers. Raises SpecError / CheckFailed."""
    from generator.pipeline import check_engine_dir, render_for, resolve_engine_dir

    spec, plan = plan_from_file(spec_path)
    if spec.placement.device != "gpu":
        raise SpecError(problem("placement.device", "is cpu; deployment targets place tritonservers on GPUs",
                                "set placement.device: gpu (use `tritongen serve` for CPU)"))
    config = None
    if engine_config is not None:
        config = Path(engine_config)
        config = config / "config.json" if config.is_dir() else config
        if not config.is_file():
            raise SpecError(problem("--engine-config", f"{config} does not exist",
                                    "point it at the engine's config.json written by trtllm-build"))
    mounts = [Mount(plan.tokenizer.dir, TOKENIZER)]
    if spec.runtime == "tensorrtllm":
        engine = config.parent.resolve() if config else resolve_engine_dir(spec, plan)
        config = config or engine / "config.json"
        check_engine_dir(spec, plan, engine)
        mounts.append(Mount(str(engine), ENGINE))
    else:
        assert plan.hf is not None
        mounts.append(Mount(plan.hf.checkpoint_dir, CHECKPOINT))
    memory = memory_model_for(spec, Path(plan.spec_dir), config)
    inv = load_inventory(inventory)
    placement = place(inv, memory, max_seq_len=max_sequence_length(spec),
                      kv_fraction=spec.serving.kv_cache.free_gpu_mem_fraction,
                      instances_per_device=1 if spec.runtime == "tensorrtllm" else spec.placement.instances_per_gpu,
                      gpu_ids=spec.placement.gpu_ids or None)
    inner_spec, inner_plan = _container_view(spec, plan)
    repository = render_for(inner_spec, inner_plan, engine_dir=ENGINE)
    chosen = image or (TRTLLM.container if spec.runtime == "tensorrtllm" else HF_IMAGE)
    return Deployment(spec, plan, placement, inv, memory, chosen, repository, tuple(mounts))


# ---------------------------------------------------------------------------------------------- templates


def _json_scalar(value: object) -> str:
    """A YAML scalar that stays a string (JSON strings are YAML double-quoted scalars)."""
    return json.dumps(value if isinstance(value, (int, float, bool)) else str(value))


def _compose_scalar(value: object) -> str:
    # docker-compose interpolates $VAR in every value; $$ is a literal dollar.
    return _json_scalar(str(value).replace("$", "$$")) if isinstance(value, str) else _json_scalar(value)


@functools.cache
def templates() -> jinja2.Environment:
    """render.environment()'s settings (StrictUndefined, trim_blocks, ...) over deploy/templates."""
    env = environment().overlay(loader=jinja2.FileSystemLoader(str(TEMPLATES)))
    env.filters = dict(env.filters)  # overlay shares the dict; keep the base environment's filters untouched
    env.filters.update(shquote=shlex.quote, yq=_json_scalar, cq=_compose_scalar)
    return env


def render_template(name: str, dep: Deployment, **context: object) -> bytes:
    text = templates().get_template(name).render(dep=dep, header=HEADER.format(name=dep.spec.name), **context)
    return (text.rstrip() + "\n").encode()


def hf_dockerfile(dep: Deployment) -> bytes:
    return render_template("Dockerfile.hf.j2", dep, base=HF_BASE_IMAGE)


def render_deployment(dep: Deployment, target: str, *, mig_strategy: str = "mixed") -> dict[str, bytes]:
    """All files of one target, the model repository included, as {relative path: bytes}."""
    files = {f"model_repository/{rel}": data for rel, data in dep.repository.items()}
    if target == "compose":
        from generator.deploy_compose import render_compose

        files.update(render_compose(dep))
    elif target == "k8s":
        from generator.deploy_k8s import render_k8s

        files.update(render_k8s(dep, mig_strategy=mig_strategy))
    elif dep.builds_hf_image:
        files[HF_DOCKERFILE] = hf_dockerfile(dep)
    return dict(sorted(files.items()))


# ---------------------------------------------------------------------------------------------- docker target


def device_ids(group: ServerGroup) -> list[str]:
    """What a docker device request names: the MIG instance's UUID, or the GPU indices."""
    if group.mig_profile is None:
        return [str(i) for i in group.gpu_indices]
    if not group.cuda_visible_devices:
        raise SpecError(problem("--inventory", f"server group {group.name} ({group.mig_profile}) has no MIG UUID, "
                                "so docker cannot select the instance", "use --inventory nvml on the node, or save "
                                "`nvidia-smi -L` there and pass that file"))
    return [group.cuda_visible_devices]


def container_name(dep: Deployment, group: ServerGroup) -> str:
    return f"{dep.name}-{group.name}"


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
        "labels": {"tritongen.deployment": dep.spec.name, "tritongen.server-group": group.name},
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
    for group, container in containers:
        url = f"http://127.0.0.1:{group.http_port}/v2/health/ready"
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
        endpoints.append(f"{group.name}: http 127.0.0.1:{group.http_port}  grpc 127.0.0.1:{group.grpc_port}  "
                         f"metrics 127.0.0.1:{group.metrics_port}")
    return endpoints
