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
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import jinja2

from tritongen.core import Locations, Ports
from tritongen.deploy import image, serving_image
from tritongen.errors import SpecError, problem
from tritongen.frontend.ngc import triton_frontend_command
from tritongen.placement import Placement, ServerGroup
from tritongen.placement.inventory import Inventory
from tritongen.placement.memory import MemoryModel, load_memory_model
from tritongen.plan import Plan, is_plan_file, load_plan, plan_for_deployment
from tritongen.plan.deploy import Orchestrator
from tritongen.plan.frontend import FrontendPlan
from tritongen.render import HEADER, environment, render_for
from tritongen.resources import data_dir
from tritongen.runtimes import builder, launch, plannings, repository

TEMPLATES = data_dir("deploy_templates")

# Container-side layout; every target mounts (compose, docker) or fills (Kubernetes PVC) these paths.
MODELS = "/models"
REPOSITORY = f"{MODELS}/model_repository"
ENGINE = f"{MODELS}/engine"
CHECKPOINT = f"{MODELS}/checkpoint"
TOKENIZER = f"{MODELS}/tokenizer"
ADAPTERS = f"{MODELS}/lora"
"""The runtime's adapter files (Launch.adapter_folder: tensorrtllm's converted adapters): mounted read-only
(compose, docker), or converted there by the models Job (Kubernetes)."""
ADAPTER_SOURCES = f"{MODELS}/adapters"
"""Kubernetes: the PEFT folders the models Job converts, one per adapter name (deploy.adapter_uris)."""
CONTAINER_PORTS = Ports(8000, 8001, 8002)

STARTUP_MINUTES = 30
"""How long a server pod may take to become ready (model load, engine build waits) before Kubernetes restarts it."""


@dataclass(frozen=True)
class Mount:
    """One host folder the servers need, and where it appears inside the container."""

    source: str
    target: str
    variable: str = ""
    """Compose: the variable naming the host folder on the machine that runs the containers (the generating
    machine's own paths stay out of the file); empty for folders the output carries itself."""


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
    def builds_serving_image(self) -> bool:
        """The deployment runs the serving image its Dockerfile.serving builds (deploy/serving_image.py), not an
        image named with --image or a runtime's container as it is."""
        return serving_image.needed(self.plan, self.repository) and self.image == serving_image.image_tag(self.plan)

    @property
    def on_cpu(self) -> bool:
        """The CPU profile: one tritonserver on CPU nodes, no GPU requested anywhere."""
        return self.placement.server_groups[0].gpu_indices == ()

    def gpu_name(self, group: ServerGroup) -> str:
        return next(g.name for g in self.inventory.gpus if g.index == group.gpu_indices[0])

    def command(self, group: ServerGroup, orchestrator: Orchestrator) -> list[str]:
        """tritonserver argv for a server group (mpirun leader mode when it spans several GPUs); with
        frontend.openai `implementation: triton` (and enabled), Triton's own OpenAI frontend serving the repository.
        Its environment: `environment(orchestrator)`."""
        frontend = self.plan.frontend
        if frontend is not None and frontend.enabled and frontend.implementation == "triton":
            return self._triton_openai_command(group)
        # A stopping server drains (no new requests, those in flight finish) within the planned grace period.
        extra = [f"--exit-timeout-secs={self.plan.deploy.stop_budget(orchestrator).exit_timeout_s}"]
        if not group.gpu_metrics:
            # Triton's DCGM metrics fail to start on MIG; every rank gets the flag (only rank 0 serves).
            extra.append("--allow-gpu-metrics=false")
        if self.plan.group_configs:
            # This group's own KV budget and instances: tensorrt_llm/configs/<group>.pbtxt.
            extra.append(f"--model-config-name={group.name}")
        return launch(self.plan).server_command(self.plan, group.world_size, REPOSITORY, CONTAINER_PORTS, extra)

    def environment(self, orchestrator: Orchestrator) -> dict[str, str]:
        """The server container's environment: the drain of its stop budget (plan/deploy.py StopBudget)."""
        return self.plan.deploy.stop_budget(orchestrator).environment()

    def _triton_openai_command(self, group: ServerGroup) -> list[str]:
        if group.world_size > 1 or not launch(self.plan).ensemble:
            raise SpecError(problem("frontend.openai.implementation", "triton starts one in-process tritonserver "
                                    "for the ensemble, but this server group is an MPI launch or its runtime "
                                    f"({self.plan.runtime}) has no ensemble",
                                    "use implementation: tritongen (it fronts any Triton), or tp_size*pp_size = 1"))
        if self.plan.group_configs:
            # Its main.py has no --model-config-name: every server would load the default config.pbtxt and
            # its KV budget instead of the one placement sized for the group's device.
            budgets = ", ".join(f"{g.name} {g.kv_tokens}" for g in self.plan.server_groups)
            raise SpecError(problem("frontend.openai.implementation", "triton cannot select a server group's own "
                                    f"model config (KV tokens per group: {budgets})", "use implementation: tritongen "
                                    "(it fronts each tritonserver started with its group's config), or a placement "
                                    "whose server groups are alike"))
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

    A spec or plan with `placement.device: cpu` (runtimes hf and synthetic) deploys as the CPU profile: one
    tritonserver on a CPU node, no inventory. Raises SpecError / CheckFailed.
    """
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
        plan = plan_for_deployment(source, inventory, engine_dir)
    if plan.placement is None and not planned_on_cpu(plan):
        raise SpecError(problem(str(source), "is a plan made without --inventory, so it places no server groups",
                                "make it with `tritongen plan SPEC --inventory nvml|FILE --json`"))
    adapters = launch(plan).adapter_folder(plan) if plan.adapters else None
    if plan.adapters and adapters is None:
        # Each adapter's own folder would need a mount and a place in the models volume; only a runtime that reads
        # one folder of converted adapters (tensorrtllm) is carried.
        raise SpecError(problem("model.adapters", f"deploy targets do not carry the {plan.runtime} runtime's LoRA "
                                "adapters into their containers yet", "serve the adapters on this machine "
                                "(`tritongen serve` / `tritongen up`), use runtime tensorrtllm, or deploy without "
                                "model.adapters"))
    # The host folders the servers read; compose names them by variable (see Mount.variable).
    # A tokenizer inside the checkpoint folder is the same host folder, so the same variable.
    same = plan.tokenizer.dir == plan.paths.checkpoint
    mounts = [Mount(plan.tokenizer.dir, TOKENIZER, "TRITONGEN_CHECKPOINT_DIR" if same else "TRITONGEN_TOKENIZER_DIR")]
    if builder(plan).builds_engine:
        assert plan.paths.engine is not None
        mounts.append(Mount(plan.paths.engine, ENGINE, "TRITONGEN_ENGINE_DIR"))
    else:
        mounts.append(Mount(plan.paths.checkpoint, CHECKPOINT, "TRITONGEN_CHECKPOINT_DIR"))
    if adapters is not None:
        mounts.append(Mount(adapters, ADAPTERS, "TRITONGEN_LORA_DIR"))
    # Inside a container the files are under /models and each server sees its devices numbered from 0.
    repository = render_for(plan, Locations(tokenizer=TOKENIZER, checkpoint=CHECKPOINT, engine=ENGINE,
                                            adapters=ADAPTERS if adapters is not None else None))
    # The serving image carries tritongen's native backends (and the runtime's python packages) when the
    # repository needs them; --image names one that already does.
    chosen = image or (serving_image.image_tag(plan) if serving_image.needed(plan, repository) else launch(plan).image())
    if plan.placement is None:
        placement, gpus, memory = cpu_placement(plan)
    else:
        placement, gpus, memory = plan.placement.result, plan.placement.inventory, plan.placement.memory
    return Deployment(plan, placement, gpus, memory, chosen, repository, tuple(mounts))


# ------------------------------------------------------------------------------- runtime-specific answers
# What a deployment needs to know of its runtime, asked of the runtime registry.

CPU_RUNTIMES = tuple(name for name, rt in plannings().items() if rt.runs_on_cpu)
"""Runtimes whose tritonserver runs on CPU nodes (python models on Triton's plain image)."""


def builds_engine(plan: Plan) -> bool:
    """Whether the models Job builds an engine (on a GPU of the serving kind) rather than only fetching files."""
    return builder(plan).builds_engine


def llm_is_python_model(plan: Plan) -> bool:
    """Whether the model named tensorrt_llm is a python-backend model (a process and a tokenizer's memory each)."""
    return repository(plan).python_model


def planned_on_cpu(plan: Plan) -> bool:
    return plan.placement is None and plan.runtime in CPU_RUNTIMES and plan.llm_instance_group.kind == "KIND_CPU"


def cpu_placement(plan: Plan) -> tuple[Placement, Inventory, MemoryModel]:
    """One server group on a CPU node: no devices, the container ports, host memory sized from the checkpoint."""
    if plan.runtime not in CPU_RUNTIMES:
        raise SpecError(problem("placement.device", f"cpu deploys runtimes {', '.join(CPU_RUNTIMES)}, not "
                                f"{plan.runtime}", "set placement.device: gpu and pass --inventory"))
    memory = load_memory_model(plan.paths.checkpoint, tp=1, pp=1, max_batch_size=plan.max_batch_size)
    group = ServerGroup(name="cpu", devices=("cpu",), gpu_indices=(), mig_profile=None, cuda_visible_devices=None,
                        gpu_metrics=False, http_port=CONTAINER_PORTS.http, grpc_port=CONTAINER_PORTS.grpc,
                        metrics_port=CONTAINER_PORTS.metrics, tp=1, pp=1, instances=plan.llm_instance_group.count,
                        kv_tokens=plan.kv_tokens or 0, max_batch_size=plan.max_batch_size, gpu_device_ids="")
    placement = Placement(model=plan.paths.checkpoint, tp=1, pp=1, max_seq_len=0, kv_fraction=0.0,
                          instances_per_device=plan.llm_instance_group.count, devices=(), server_groups=(group,))
    return placement, Inventory(gpus=(), source="cpu"), memory


# ---------------------------------------------------------------------------------------------- templates


@functools.cache
def templates() -> jinja2.Environment:
    """render.environment()'s settings (StrictUndefined, trim_blocks, ...) over deploy/templates."""
    env = environment().overlay(loader=jinja2.FileSystemLoader(str(TEMPLATES)))
    env.filters = dict(env.filters)  # overlay shares the dict; keep the base environment's filters untouched
    env.filters.update(shquote=shlex.quote)
    return env


def render_template(name: str, dep: Deployment, **context: object) -> bytes:
    text = templates().get_template(name).render(dep=dep, header=HEADER.format(name=dep.plan.name), **context)
    return (text.rstrip() + "\n").encode()


def serving_dockerfile(dep: Deployment) -> bytes:
    """Dockerfile.serving: the pinned container with tritongen's native backends built in (deploy/serving_image.py)."""
    si = serving_image
    backends = [{"built": si.library(b, si.BUILD_PREFIX), "installed": si.library(b, si.BACKEND_DIRECTORY)}
                for b in si.NATIVE_BACKENDS]
    return render_template("Dockerfile.serving.j2", dep, base=si.base_image(dep.plan), names=si.NATIVE_BACKENDS,
                           backends=backends, packages=si.python_packages(dep.plan), runtime=dep.plan.runtime,
                           tag=dep.image, dockerfile=si.DOCKERFILE, context=si.NATIVE_CONTEXT, prefix=si.BUILD_PREFIX,
                           build_packages=si.BUILD_PACKAGES, triton_include=si.TRITON_INCLUDE, triton_lib=si.TRITON_LIB)


def tritongen_dockerfile(dep: Deployment) -> bytes:
    """Dockerfile.tritongen: the image of the load test and of tritongen's OpenAI frontend (deploy.image)."""
    return render_template("Dockerfile.tritongen.j2", dep, base=image.BASE_IMAGE, torch_index=image.TORCH_CPU_INDEX,
                           torch_version=image.TORCH_VERSION, constraints=image.CONSTRAINTS,
                           wheel=image.wheel_name(), dist=image.DIST, tag=image.image_tag(),
                           kubectl_image=image.KUBECTL_IMAGE)


def device_ids(group: ServerGroup, inventory: Inventory | None = None) -> list[str]:
    """What a docker device request names: the MIG instance's UUID, or the GPUs' UUIDs when the inventory has them
    (indices follow the driver's enumeration order, which changes with PCI topology and MIG mode; UUIDs do not)."""
    if group.mig_profile is None:
        uuids = {g.index: g.uuid for g in inventory.gpus} if inventory is not None else {}
        return [uuids.get(i) or str(i) for i in group.gpu_indices]
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
