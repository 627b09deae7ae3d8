"""What every deployment target shares: the Deployment (plan, placement, container-side repository) and templates.

`prepare()` turns a Plan (a plan JSON, or a spec planned there with an inventory and an engine config) into a
`Deployment`: the Plan, its Placement (one tritonserver per server group) and the model repository rendered for
the paths it has *inside* the serving container (everything under /models). Renderers (deploy.compose, deploy.k8s) are pure: Deployment in,
{relative path: bytes} out; `write_deployment` writes them atomically next to the model repository, and
`run_docker` starts the same server groups through a docker engine.

Inside every container the server listens on 8000/8001/8002 and sees its own devices numbered from 0 (the
device request or device plugin selects them), so the placement's host-side CUDA_VISIBLE_DEVICES is not passed
on; the placement's ports are the host ports.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import jinja2

from tritongen.errors import SpecError, problem
from tritongen.placement import Placement, ServerGroup
from tritongen.placement.inventory import Inventory
from tritongen.placement.memory import MemoryModel
from tritongen.plan import Plan, is_plan_file, load_plan
from tritongen.render import HEADER, Locations, environment
from tritongen.resources import data_dir
from tritongen.runtimes import runtime_of
from tritongen.runtimes.hf import HF_BASE_IMAGE
from tritongen.runtimes.tensorrtllm import Ports

TEMPLATES = data_dir("deploy_templates")

# Container-side layout; every target mounts (compose, docker) or fills (Kubernetes PVC) these paths.
MODELS = "/models"
REPOSITORY = f"{MODELS}/model_repository"
ENGINE = f"{MODELS}/engine"
CHECKPOINT = f"{MODELS}/checkpoint"
TOKENIZER = f"{MODELS}/tokenizer"
CONTAINER_PORTS = Ports(8000, 8001, 8002)

# The image a runtime builds from a generated Dockerfile (the hf runtime's: Triton's python image plus torch and
# transformers, runtimes/hf.py) is written under this name.
HF_DOCKERFILE = "Dockerfile.hf"



@dataclass(frozen=True)
class Mount:
    """One host folder the servers need, and where it appears inside the container."""

    source: str
    target: str


@dataclass(frozen=True)
class Deployment:
    """Everything a target needs; built once by `prepare`, read by every renderer."""

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
        """The deployment's name as a DNS-1035 label (Kubernetes names, compose services): the spec's name rule (a
        letter first, a letter or digit last, at most 40 characters) makes it valid; `_` and `.` become `-`."""
        return self.plan.name.replace("_", "-").replace(".", "-")

    @property
    def builds_hf_image(self) -> bool:
        rt = runtime_of(self.plan)
        return rt.builds_image and self.image == rt.image()

    def gpu_name(self, group: ServerGroup) -> str:
        return next(g.name for g in self.inventory.gpus if g.index == group.gpu_indices[0])

    def command(self, group: ServerGroup) -> list[str]:
        """tritonserver argv for a server group (mpirun leader mode when it spans several GPUs); with
        frontend.openai `implementation: triton` (and enabled), Triton's own OpenAI frontend serving the repository."""
        frontend = self.plan.frontend
        if frontend is not None and frontend.enabled and frontend.implementation == "triton":
            return self._triton_openai_command(group)
        extra = []
        if not group.gpu_metrics:
            # Triton's DCGM metrics fail to start on MIG; every rank gets the flag (only rank 0 serves).
            extra.append("--allow-gpu-metrics=false")
        if self.plan.group_configs:
            # This group's own KV budget and instances: tensorrt_llm/configs/<group>.pbtxt.
            extra.append(f"--model-config-name={group.name}")
        return runtime_of(self.plan).server_command(self.plan, group.world_size, REPOSITORY, CONTAINER_PORTS, extra)

    def _triton_openai_command(self, group: ServerGroup) -> list[str]:
        from tritongen.frontend.ngc import triton_frontend_command
        from tritongen.plan.frontend import FrontendPlan

        if group.world_size > 1 or not runtime_of(self.plan).ensemble:
            raise SpecError(problem("frontend.openai.implementation", "triton starts one in-process tritonserver "
                                    "for the ensemble, but this server group is an MPI launch or its runtime "
                                    f"({self.plan.runtime}) has no ensemble",
                                    "use implementation: tritongen (it fronts any Triton), or tp_size*pp_size = 1"))
        # The frontend's settings as rendered into the container's repository (tokenizer and template paths).
        rendered = FrontendPlan.model_validate_json(self.repository["frontend.json"])
        route = rendered.models[0]
        if route.chat_template:
            rendered = rendered.model_copy(update={"models": (route.model_copy(
                update={"chat_template": f"{REPOSITORY}/{route.chat_template}"}),)})
        return triton_frontend_command(rendered, REPOSITORY, http_port=CONTAINER_PORTS.http,
                                       grpc_port=CONTAINER_PORTS.grpc, openai_port=rendered.port)


def prepare(source: str | Path, *, inventory: str | None = None, engine_config: str | Path | None = None,
            image: str | None = None) -> Deployment:
    """The Deployment of a spec (planned here, on `inventory`, default 'nvml') or of a plan JSON (as written).

    Raises SpecError / CheckFailed.
    """
    from tritongen.render import render_for

    engine_dir = None
    if engine_config is not None:
        config = Path(engine_config)
        config = config / "config.json" if config.is_dir() else config
        if not config.is_file():
            raise SpecError(problem("--engine-config", f"{config} does not exist",
                                    "point it at the engine's config.json written by trtllm-build"))
        engine_dir = str(config.parent.resolve())
    if is_plan_file(source):
        plan = load_plan(source, inventory, engine_dir=engine_dir)
    else:
        plan = load_plan(source, inventory or "nvml", engine_dir=engine_dir)
    if plan.placement is None:
        raise SpecError(problem(str(source), "is a plan made without --inventory, so it places no server groups",
                                "make it with `tritongen plan SPEC --inventory nvml|FILE --json`"))
    if plan.bls_backend == "native":
        # The serving images (NGC, the hf image) do not carry the tritongen_bls backend library yet.
        plan = plan.model_copy(update={"bls_backend": "python", "bls_backend_reason":
                                       "deployment images do not carry the native tritongen_bls backend yet"})
    mounts = [Mount(plan.tokenizer.dir, TOKENIZER)]
    rt = runtime_of(plan)
    if rt.builds_engine:
        assert plan.paths.engine is not None
        mounts.append(Mount(plan.paths.engine, ENGINE))
    else:
        mounts.append(Mount(plan.paths.checkpoint, CHECKPOINT))
    # Inside a container the files are under /models and each server sees its devices numbered from 0.
    repository = render_for(plan, Locations(tokenizer=TOKENIZER, checkpoint=CHECKPOINT, engine=ENGINE))
    chosen = image or rt.image()
    return Deployment(plan, plan.placement.placed(), plan.placement.gpus(), plan.placement.memory_model(), chosen,
                      repository, tuple(mounts))


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
    text = templates().get_template(name).render(dep=dep, header=HEADER.format(name=dep.plan.name), **context)
    return (text.rstrip() + "\n").encode()


def hf_dockerfile(dep: Deployment) -> bytes:
    return render_template("Dockerfile.hf.j2", dep, base=HF_BASE_IMAGE)


def tritongen_dockerfile(dep: Deployment) -> bytes:
    """Dockerfile.tritongen: the image of the load test and of tritongen's OpenAI frontend (deploy.image)."""
    from tritongen.deploy import image

    return render_template("Dockerfile.tritongen.j2", dep, base=image.BASE_IMAGE, torch_index=image.TORCH_CPU_INDEX,
                           wheel=image.wheel_name(), dist=image.DIST, tag=image.image_tag())


def device_ids(group: ServerGroup) -> list[str]:
    """What a docker device request names: the MIG instance's UUID, or the GPU indices."""
    if group.mig_profile is None:
        return [str(i) for i in group.gpu_indices]
    if not group.cuda_visible_devices:
        raise SpecError(problem("--inventory", f"server group {group.name} ({group.mig_profile}) has no MIG UUID, "
                                "so docker cannot select the instance", "use --inventory nvml on the node, or save "
                                "`nvidia-smi -L` there and pass that file"))
    return [group.cuda_visible_devices]


def k8s_name(*parts: str, limit: int = 63) -> str:
    """A DNS-1123 label from name parts: lowercase, [a-z0-9-], at most `limit` characters, no '-' at either end;
    shortened names keep a hash of the full one, so two long names never collide."""
    full = re.sub(r"[^a-z0-9-]+", "-", "-".join(parts).lower()).strip("-")
    if len(full) <= limit:
        return full
    digest = hashlib.sha256(full.encode()).hexdigest()[:6]
    return f"{full[:limit - 7].rstrip('-')}-{digest}"


def container_name(dep: Deployment, group: ServerGroup) -> str:
    return f"{dep.name}-{group.name}"
