"""What every deployment target shares: the Deployment (plan, placement, container-side repository) and templates.

`prepare()` turns a spec, an inventory and an engine config into a `Deployment`: the Plan, the Placement (one
tritonserver per server group) and the model repository rendered for the paths it has *inside* the serving
container (everything under /models). Renderers (deploy.compose, deploy.k8s) are pure: Deployment in,
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2

from tritongen.errors import SpecError, problem
from tritongen.placement.inventory import Inventory, load_inventory
from tritongen.placement.memory import MemoryModel
from tritongen.placement import Placement, ServerGroup, place
from tritongen.plan import InstanceGroup, Plan, max_sequence_length, memory_model_for, plan_from_file
from tritongen.render import HEADER, environment
from tritongen.resources import data_dir
from tritongen.spec import Spec
from tritongen.runtimes.tensorrtllm import TRTLLM, Ports, launch_command

TEMPLATES = data_dir("deploy_templates")

# Container-side layout; every target mounts (compose, docker) or fills (Kubernetes PVC) these paths.
MODELS = "/models"
REPOSITORY = f"{MODELS}/model_repository"
ENGINE = f"{MODELS}/engine"
CHECKPOINT = f"{MODELS}/checkpoint"
TOKENIZER = f"{MODELS}/tokenizer"
CHAT_TEMPLATE_DIR = f"{MODELS}/chat_template"
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
        """tritonserver argv for a server group (mpirun leader mode when it spans several GPUs); with
        frontend.openai `implementation: triton` (and enabled), Triton's own OpenAI frontend serving the repository."""
        frontend = self.plan.frontend
        if frontend is not None and frontend.enabled and frontend.implementation == "triton":
            from tritongen.frontend.ngc import triton_frontend_command

            if group.world_size > 1:
                raise SpecError(problem("frontend.openai.implementation", "triton runs in-process with one "
                                        "tritonserver, but this server group spans several GPUs (mpirun ranks)",
                                        "use implementation: tritongen, or tp_size*pp_size = 1"))
            return triton_frontend_command(frontend, REPOSITORY, http_port=CONTAINER_PORTS.http,
                                           grpc_port=CONTAINER_PORTS.grpc, openai_port=frontend.port)
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
    if plan.frontend is not None:
        routes = tuple(r.model_copy(update={
            "tokenizer_dir": TOKENIZER,
            "chat_template": r.chat_template and f"{CHAT_TEMPLATE_DIR}/{Path(r.chat_template).name}"})
            for r in plan.frontend.models)
        update["frontend"] = plan.frontend.model_copy(update={"models": routes})
    if plan.hf is not None:
        update["hf"] = plan.hf.model_copy(update={"checkpoint_dir": CHECKPOINT})
        update["llm_instance_group"] = InstanceGroup(kind="KIND_GPU", count=spec.placement.instances_per_gpu,
                                                     gpus=(0,))
    return spec, plan.model_copy(update=update)


def prepare(spec_path: str | Path, *, inventory: str = "nvml", engine_config: str | Path | None = None,
            image: str | None = None) -> Deployment:
    """Plan, place and render the model repository for containers. Raises SpecError / CheckFailed."""
    from tritongen.pipeline import check_engine_dir, render_for, resolve_engine_dir

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
    if plan.frontend is not None and plan.frontend.models[0].chat_template:
        mounts.append(Mount(str(Path(plan.frontend.models[0].chat_template).parent), CHAT_TEMPLATE_DIR))
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
