"""The runtime seam: what serves the model named `tensorrt_llm`, behind small role interfaces.

A runtime owns its part of the Plan (a settings model with a `runtime` tag: one member of the Plan's discriminated
union) and plays five roles, each an ABC generic over that settings class, so a method gets the runtime's own
section typed (`own(plan)`) with no narrowing:
- `Planning`: the Spec becomes the runtime's section of the Plan, and the planner's questions (sequence length,
  instances, KV sequences, memory model, knobs, checks of a plan and of its GPUs);
- `Repository`: the models it puts in the repository, each with its backend, and the checks of a rendered one (the
  runtimes served through tritongen's ensemble share `runtimes/ensemble.py`);
- `Launch`: its serving image, how a tritonserver is launched for it, the deploy targets' needs (weights in the
  container, HPA signals, the node's driver);
- `EngineBuilder`: how the engine it serves is built from the checkpoint (`tritongen build`, the Kubernetes models
  Job); only runtimes with `builds_engine` implement it;
- `Clients`: how tritongen's clients address it (its request `Dialect`, the server's token counter).
`Runtime` adds the runtime's words for the docs to the roles. A stage asks the registry for the one role it uses
(`tritongen.runtimes.planning(plan)`, `repository`, `launch`, `builder`, `clients`), never for the whole runtime, and
never tests its name.

Layering: this package sits below plan, render, deploy and the load test and imports none of them, not even for
annotations: it reads the Plan and the Spec through the views of `tritongen.core` (`PlanView`, `SpecView`), and the
render stage hands its template functions in (`tritongen.core.Renderer`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Literal, Protocol, TypeVar, cast

from pydantic import BaseModel, ConfigDict

from tritongen.core import AdapterPlan, Locations, PlanView, Ports, Renderer, SpecView, TokenizerPlan
from tritongen.runtimes.pins import ContainerPin, driver_version
from tritongen.spec_base import RuntimeSection

if TYPE_CHECKING:
    import numpy as np

__all__ = ["BuiltEngine", "Clients", "Dialect", "EngineBuilder", "Knob", "Launch", "ModelRepository", "PlanContext",
           "Planning", "Ports",
           "Renderer", "Repository", "RevisedText", "Runtime", "RuntimeSettings", "Signal", "TextDeltas",
           "TokenCounter", "Upstream", "driver_version", "quantity", "serving_knobs"]


class RuntimeSettings(BaseModel):
    """Base of every runtime's Plan section; each subclass pins `runtime: Literal["<name>"]` (the union's tag).
    Field docstrings are the fields' descriptions (`tritongen plan` prints them)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)


@dataclass(frozen=True)
class PlanContext:
    """What planning has resolved before it asks the runtime for its section."""

    spec: SpecView
    resolve: Callable[[str], Path]
    """A path from the spec or a flag made absolute (`~` expanded, relative to the spec's folder)."""
    checkpoint: Path
    config: dict[str, Any]
    """The checkpoint's config.json."""
    inventory_gpus: Callable[[], Sequence[tuple[int, str]]]
    """(index, product name) of each GPU of the inventory planned for (read on first use; needs `inventory`)."""
    tokenizer: TokenizerPlan | None
    """None before the tokenizer is read (the runtime's engine is resolved first)."""
    max_batch_size: int
    """The Plan's `max_batch_size` (serving.max_batch_size, resolved by the planner)."""
    kv_tokens: int | None
    """The Plan's `kv_tokens`: KV budget per LLM instance (the spec's, or with a placement the smallest over the
    server groups)."""
    max_seq_len: int
    inventory: str | None
    engine_dir: str | None
    """--engine-dir given to `plan`/`deploy` (tensorrtllm)."""
    gpu_arch: str | None
    adapters: tuple[AdapterPlan, ...] = ()
    """The LoRA adapters (plan.adapters: checked against the checkpoint), for runtimes that build or size for them."""
    max_adapter_rank: int | None = None


@dataclass(frozen=True)
class Upstream:
    """The upstream release a runtime was checked against, and what its serving image needs of a node."""

    release: str
    """What serves the model, with its version ("vLLM 0.27.1 in Triton 26.08")."""
    pin: ContainerPin | None
    """The runtime's pinned container and its facts (driver rule included); None: an image of tritongen's own,
    whose driver need is not established."""
    checked: str
    """What was read, where and at which commit (docs/runtimes.md has the full list)."""


@dataclass(frozen=True)
class Signal:
    """One custom pods metric: its prometheus-adapter rule and the HPA target (AverageValue per pod)."""

    name: str
    """Metric name the HPA asks the custom metrics API for."""
    series: str
    """The Prometheus series the adapter discovers it from (seriesQuery)."""
    query: str
    """metricsQuery, with the adapter's <<.LabelMatchers>> / <<.GroupBy>> placeholders."""
    target: str
    """HPA averageValue (a Kubernetes quantity)."""
    meaning: str


def quantity(value: float) -> str:
    """A Kubernetes quantity: integers as they are, fractions in milli-units."""
    return str(int(value)) if float(value).is_integer() else f"{round(value * 1000)}m"


class RevisedText(Exception):
    """A model changed text it had already streamed (so no exact delta exists)."""


class TextDeltas:
    """The text of a model whose every response carries the next piece of text (its delta)."""

    def __init__(self) -> None:
        self.sent = ""

    def feed(self, text: str, final: bool) -> str:
        """The exact delta of one response (`final`: the request's last)."""
        self.sent += text
        return text

    def end(self, last: str) -> str:
        """What is left when a stream ends without a response marked final (`last`: the last text_output):
        nothing, every piece was passed on whole."""
        return ""


class TokenCounter:
    """Token counts for a model that returns none: the deployment's tokenizer's count of the text (no special
    tokens added), so `count(a + b)` is the count of the text received so far, not a sum of pieces."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def count(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False)) if text else 0

    def prompt(self, text: str) -> int:
        """The prompt as the model sees it: with the special tokens the tokenizer adds (BOS)."""
        return len(self.tokenizer.encode(text))


class Dialect(ABC):
    """How tritongen's clients (the OpenAI frontend, the load test's users) speak to a runtime whose own model is
    the repository, with its own tensor names: a runtime's `dialect()`. The clients ask this object; they never
    test which runtime it is. None in its place means the ensemble's tensors (the C++ TensorRT-LLM contract).

    Sampling parameters go by their OpenAI names: temperature, top_p, seed, presence_penalty, frequency_penalty,
    min_tokens (those in `unsupported` are refused before a request is built).
    """

    key: ClassVar[str]
    """What the Plan's frontend routes and the load test's configuration store (`tritongen.runtimes.dialect`)."""
    model: ClassVar[str]
    """The Triton model the clients call."""
    title: ClassVar[str]
    """The model in words, for messages ("NVIDIA's llmapi model")."""
    takes: ClassVar[str]
    """Its request tensors in a phrase, for messages ("streaming, sampling_param_* and 1-D tensors")."""
    outputs: ClassVar[tuple[str, ...]]
    """The outputs a client asks for."""
    list_inputs: ClassVar[frozenset[str]] = frozenset()
    """Inputs that stay lists in an HTTP generate body even with one element (the others become scalars)."""
    count_source: ClassVar[Literal["server", "client"]]
    """`server`: responses carry num_input_tokens and per-response num_output_tokens. `client`: the model returns
    no counts, so clients count the text with the deployment's tokenizer (`TokenCounter`) and say so."""
    unsupported: ClassVar[tuple[str, ...]] = ()
    """Request parameters (OpenAI names) it has no input for."""
    stop_on_client: ClassVar[bool] = False
    """The model cannot take stop sequences, so `request_inputs` refuses them: a client matches them in the streamed
    text and cancels the request once it finds one (the OpenAI frontend does)."""

    @property
    def why(self) -> str:
        """Why the load test's `--model` does not apply."""
        return f"the load test calls {self.title} ({self.model}) with its own tensors"

    @abstractmethod
    def request_inputs(self, prompt: str, max_tokens: int, *, stream: bool, stop: Iterable[str] = (),
                       guide: tuple[str, str] | None = None, **sampling: Any) -> list[tuple[str, str, np.ndarray]]:
        """(name, Triton data type, array) of each input of one request (None sampling values: the model's
        defaults). `guide`: (guide type, guide) in NVIDIA's names (tritongen.core.GUIDE_TYPES), passed the model's
        way; a dialect whose model takes none raises ValueError (the Plan's structured_output.guide_types is empty
        for it, so callers refuse such a request first)."""

    def text(self) -> TextDeltas:
        """A fresh reader of one request's text_output values: `feed(text, final)` -> the exact delta; `sent`."""
        return TextDeltas()

    def grpc_inputs(self, prompt: str, max_tokens: int, *, stream: bool, stop: Iterable[str] = (),
                    **sampling: Any) -> list:
        """tritonclient gRPC InferInputs of one request."""
        import tritonclient.grpc as grpcclient

        out = []
        for name, dtype, value in self.request_inputs(prompt, max_tokens, stream=stream, stop=stop, **sampling):
            tensor = grpcclient.InferInput(name, list(value.shape), dtype)
            tensor.set_data_from_numpy(value)
            out.append(tensor)
        return out

    def http_body(self, prompt: str, max_tokens: int, *, stream: bool, stop: Iterable[str] = (),
                  **sampling: Any) -> dict:
        """The JSON body of a generate / generate_stream request (Triton maps each field to the input of its
        name)."""
        body: dict[str, Any] = {}
        for name, _, value in self.request_inputs(prompt, max_tokens, stream=stream, stop=stop, **sampling):
            items = [v.decode("utf-8") if isinstance(v, bytes) else v.item() for v in value.reshape(-1)]
            body[name] = items if name in self.list_inputs else items[0]
        return body


@dataclass(frozen=True)
class Knob:
    """A spec setting the planner owns that `tritongen tune` may search, with the range this runtime accepts."""

    path: str
    """The spec field, dotted (serving.max_batch_size)."""
    low: float
    high: float
    kind: Literal["int", "float"] = "int"
    log: bool = False
    """Sample on a log scale (sizes that matter by ratio: batch, KV budget)."""
    why: str = ""
    """What it trades, in a phrase (the winning spec's diff says it next to each change)."""
    admits: bool = False
    """Its highest value admits the most work at once: tune's informed first trial sets every such knob to `high`."""


S = TypeVar("S", bound=RuntimeSettings)
"""A runtime's settings class: its section of the Plan."""


class _Owns(Generic[S]):
    """What every role of one runtime shares: its name, its settings class, whether it is served through the ensemble,
    and the typed view of its section of a Plan."""

    name: ClassVar[str]
    settings: ClassVar[type[RuntimeSettings]]
    """Its section of the Plan (Plan.runtime_settings)."""
    ensemble: ClassVar[bool] = True
    """Speaks the TensorRT-LLM C++ model's tensors, so tritongen's preprocessing, postprocessing, BLS, ensemble,
    clients and OpenAI frontend serve it; False: the runtime's own model is the whole repository."""

    def own(self, plan: PlanView) -> S:
        """The plan's runtime section as this runtime's settings class (a Plan's section is always its runtime's:
        the registry picks the runtime by the same tag the Plan checks against its section)."""
        return cast(S, plan.runtime_settings)


def serving_knobs(rt: Planning, spec: SpecView) -> list[Knob]:
    """The knobs every runtime with a Triton batch and a KV budget has (Planning.knobs' default)."""
    load = spec.validation.load
    # The KV budget's floor holds one whole request of the load, at three standard deviations above the mean of
    # each length: a budget below the longest requests refuses them, which no search should try.
    io = math.ceil(load.input_tokens.mean + 3 * load.input_tokens.stddev
                   + load.output_tokens.mean + 3 * load.output_tokens.stddev)
    knobs = [Knob("serving.max_batch_size", 1, 256, log=True, why="requests in one batch: throughput vs ITL",
                  admits=True),
             Knob("serving.kv_cache.max_tokens", io, max(io * 512, 4096), log=True,
                  why="KV budget per instance: requests admitted at once vs memory", admits=True)]
    if rt.honours_stream_interval:
        knobs.append(Knob("serving.stream_interval", 1, 16, log=True, why="tokens per streamed response: "
                          "fewer responses vs a later first token"))
    if rt.honours_stream_flush:
        knobs.append(Knob("hf.stream_flush_ms", 0, 50, why="coalescing streamed tokens: fewer responses vs ITL"))
    return knobs


class Planning(_Owns[S], ABC):
    """Spec -> the runtime's section of the Plan, and the planner's questions to the runtime."""

    spec_section: ClassVar[type[RuntimeSection] | None] = None
    """Its own section of the spec (`runtimes/<name>/spec.py`; `tritongen.spec.Spec` adds it under its `key`)."""
    runs_on_cpu: ClassVar[bool] = True
    honours_stream_interval: ClassVar[bool] = True
    """Sends one response per serving.stream_interval tokens (else one per token)."""
    honours_stream_flush: ClassVar[bool] = False
    """Sends a streamed request's tokens at most every hf.stream_flush_ms."""
    needs_tokenizer_files: ClassVar[bool] = False
    """Planning refuses a tokenizer folder without tokenizer files (else it plans from config.json)."""
    spans_nodes: ClassVar[bool] = False
    """A server group may span nodes (deploy.nodes > 1)."""
    serves_adapters: ClassVar[bool] = False
    """Serves LoRA adapters (model.adapters) with some settings (`adapters_refused` says which)."""
    group_configs: ClassVar[bool] = True
    """The plan gives server groups that differ their own tensorrt_llm/configs/<group>.pbtxt."""

    def adapters_refused(self, spec: SpecView) -> str | None:
        """Why this runtime cannot serve the spec's model.adapters (validate says it, naming the runtime); None:
        it serves them."""
        return None if self.serves_adapters else "it does not serve LoRA adapters"

    def max_seq_len(self, spec: SpecView) -> int | None:
        """The longest prompt + completion the runtime is configured for; None: derive it from the load."""
        return None

    def context_length(self, checkpoint_config: dict[str, Any]) -> int | None:
        """The longest sequence to configure when max_seq_len is not set, from the checkpoint's config.json; None:
        derive it from the load profile."""
        return None

    def instances_per_device(self, spec: SpecView) -> int:
        return spec.placement.instances_per_gpu

    def kv_sequences(self, spec: SpecView, max_batch_size: int) -> int | None:
        """Sequences one LLM instance holds in its KV cache at once (the planner's KV budget is this x the longest
        sequence); None: the runtime has no KV cache, or sizes its batch from the KV budget."""
        return max_batch_size

    def memory_model(self, spec: SpecView, plan: PlanView) -> tuple[Path, dict[str, Any]]:
        """What placement sizes memory from: (config.json or its folder, placement.memory.load_memory_model
        keyword arguments) of what will be served (`plan` is the plan before placement)."""
        dtype = None if spec.model.dtype == "auto" else spec.model.dtype
        return Path(plan.paths.checkpoint), {"dtype": dtype, "tp": 1, "pp": 1, "max_batch_size": plan.max_batch_size}

    def cache_rows(self, plan: PlanView) -> list[tuple[str, str, str]]:
        """(setting, value, meaning) rows `tritongen plan` shows beside the KV budget: caches the runtime sizes
        besides the KV cache (a LoRA cache)."""
        return []

    def llm_instance_group(self, spec: SpecView, placed: bool) -> dict[str, Any]:
        """The tensorrt_llm model's instance_group (kind, count, gpus)."""
        if spec.placement.device == "cpu":
            return {"kind": "KIND_CPU", "count": 1}
        # With a placement each server group sees only its own devices (CUDA_VISIBLE_DEVICES), numbered from 0.
        gpus = (0,) if placed else tuple(spec.placement.gpu_ids or [0])
        return {"kind": "KIND_GPU", "count": spec.placement.instances_per_gpu, "gpus": gpus}

    def knobs(self, spec: SpecView) -> list[Knob]:
        """The settings `tritongen tune` may search for this runtime, each with its range."""
        return serving_knobs(self, spec)

    def guided_decoding(self, spec: SpecView) -> tuple[tuple[str, ...], str]:
        """(the `guided_decoding_guide_type` values its model accepts, what it does with a guide in a line for
        `tritongen plan`); no types: its model refuses a guide, and the line says why (the Plan's
        `structured_output`)."""
        return (), f"refused: the {self.name} runtime cannot constrain decoding"

    def prepare(self, ctx: PlanContext) -> S | None:
        """Work done once before the tokenizer is read and the model placed (an engine resolved); its result comes
        back to `plan_settings` as `prepared`."""
        return None

    @abstractmethod
    def plan_settings(self, ctx: PlanContext, prepared: S | None) -> S:
        """The runtime's Plan section (called again with the placement's KV budget)."""

    def engine_dir(self, settings: S) -> str | None:
        return None

    def logits_datatype(self, settings: S) -> str:
        return "TYPE_FP32"  # trtllm-build's default for the Llama family, and the hf/synthetic models' output

    def check_plan(self, plan: PlanView) -> None:
        """Checks of a finished plan before it is placed (log nothing: render says what is missing)."""

    def check_placement(self, spec: SpecView, plan: PlanView, gpus: Sequence[tuple[str, str]]) -> None:
        """Checks of the GPUs the placement uses ((label, product name) each)."""


@dataclass(frozen=True)
class ModelRepository:
    """A model repository in memory, as a runtime renders it."""

    files: dict[str, bytes]
    """{posix path relative to the repository: content}."""
    backends: dict[str, str]
    """Each model's Triton backend (its config.pbtxt's `backend`, or `platform` for an ensemble), by model name:
    the render manifest records them."""


class Repository(_Owns[S], ABC):
    """The runtime's files in a model repository, and the checks of a rendered one."""

    python_model: ClassVar[bool] = True
    """The LLM model runs in a Python-backend stub (each instance a process: CPU and memory per instance)."""

    def bls_parameters(self, plan: PlanView, where: Locations) -> dict[str, str]:
        """Parameters of the tensorrt_llm_bls model that come from this runtime (the tensorrtllm runtime's converted
        adapters, which the BLS resends on a LoRA cache miss)."""
        return {}

    def check_before_render(self, plan: PlanView) -> None:
        """Checks against files that exist now (a built engine); render runs it before rendering."""

    @abstractmethod
    def model_repository(self, plan: PlanView, where: Locations, render: Renderer) -> ModelRepository:
        """The runtime's model repository: every model's files and backend (render adds the frontend's files and
        the manifest). The engine-backed runtimes share one: `tritongen.runtimes.ensemble.EnsembleRepository`."""

    def check_repository(self, repo: Path) -> list[tuple[str, str]]:
        """(relative path, problem) for each of this runtime's own files in a rendered repository that its release
        would refuse (`tritongen verify` runs every runtime's check; each looks only at files it owns)."""
        return []

    def completes_own_config(self, repo: Path) -> bool:
        """Whether `repo` holds this runtime's model with a config.pbtxt its model code completes when it loads
        (tritonserver must then run with auto-completion on; every other config.pbtxt is complete)."""
        return False

    def missing_model_code(self, repo: Path) -> tuple[str, str, str] | None:
        """(path, what is missing, the fix) when the repository lacks model code that only the runtime's container
        adds at launch, so the embedded tritonserver cannot load it; None when it can."""
        return None


class Launch(_Owns[S], ABC):
    """Serving the repository: the image, the tritonserver command, and what the deploy targets need."""

    upstream: ClassVar[Upstream]
    """The upstream release it was checked against and the driver its image needs (`plan` with an inventory
    refuses nodes whose driver is older)."""
    embedded: ClassVar[bool] = True
    """The embedded tritonserver (python backend only) can load it, so `tritongen up` serves it here."""
    builds_image: ClassVar[bool] = False
    """`image()` is built from a generated Dockerfile (deploy writes it)."""
    base_image: ClassVar[str | None] = None
    """builds_image: the image that Dockerfile starts from."""

    def adapter_folder(self, plan: PlanView) -> str | None:
        """The one host folder holding every adapter file the served models read, which a deploy target mounts
        (Locations.adapters); None: the runtime reads the adapters' own folders, which deploy does not carry."""
        return None

    @abstractmethod
    def image(self) -> str:
        """The serving container image."""

    @abstractmethod
    def server_command(self, plan: PlanView, world_size: int, repository: str, ports: tuple[int, int, int],
                       extra_args: Sequence[str]) -> list[str]:
        """argv that serves `repository` in the serving container; `extra_args` go to every tritonserver."""

    def weights_in_container(self, settings: S, checkpoint: str, engine: str, models: str) -> S:
        """The section with its host folders replaced by the container's (the in-cluster load test reads it)."""
        return settings

    def hpa_signals(self, plan: PlanView) -> list[Signal]:
        """Per-pod saturation signals: by default Triton's pending requests, the one queue every model has."""
        return [Signal("tritongen_waiting_requests", 'nv_inference_pending_request_count{pod!=""}',
                       'sum by (<<.GroupBy>>) (nv_inference_pending_request_count{<<.LabelMatchers>>})',
                       quantity(plan.deploy.hpa_waiting_requests), "requests pending in Triton for a model")]

    def not_embedded(self) -> str:
        """Why the embedded tritonserver cannot serve it, and what to do (when `embedded` is False)."""
        return f"the {self.name} runtime needs its own container ({self.image()})"

    def driver_problem(self, driver: str | None, datacenter: bool | None = None) -> tuple[bool, str] | None:
        """(refuse, message) about a node's NVIDIA driver (None: unknown) for this runtime's image, by NVIDIA's rule
        (`pins.DriverRule.decide`; `datacenter`: every GPU of the node is a data-center GPU, None: not known); None
        when the driver runs the image or the image's need is not established. refuse: below every rule."""
        pin = self.upstream.pin
        if pin is None:
            return None
        decision = pin.driver.decide(driver, datacenter)
        what = f"{self.image()} ({self.upstream.release})"
        if decision.verdict == "ok":
            return None
        if decision.verdict == "unknown":
            return False, (f"{decision.rule}, for {what}: check the nodes (an NVML inventory or an inventory "
                           "file's `driver` records it)")
        if decision.verdict == "warn":
            return False, f"NVIDIA driver {driver} runs {what} under {decision.rule}"
        return True, f"NVIDIA driver {driver} cannot run {what}: {decision.rule}"


class BuiltEngine(Protocol):
    """What an engine build did (or, dry, would do)."""

    key: str
    engine_dir: Path
    commands: list[list[str]]
    """What ran (or, dry, would run); empty when the engine was already built."""
    runner: str


class EngineBuilder(_Owns[S], ABC):
    """Building the engine a runtime serves from the checkpoint. A runtime serves the checkpoint as it is unless
    it sets `builds_engine` and implements both methods."""

    builds_engine: ClassVar[bool] = False
    """Serves an engine built from the checkpoint (`tritongen build`; the Kubernetes models Job builds it)."""

    def build_engine(self, plan: PlanView, *, examples_dir: str | None, dry_run: bool,
                     arch_source: Callable[[str], tuple[str, str]]) -> BuiltEngine:
        """Build the plan's engine here (`tritongen build`); `arch_source(this machine's architecture)` gives the
        setting that chose the planned architecture and how to change it, for the message when the two differ."""
        raise NotImplementedError(f"the {self.name} runtime serves the checkpoint as it is")

    def engine_build_commands(self, plan: PlanView, checkpoint: str, engine: str, *, converted_dir: str,
                              examples_dir: str, calibration_dir: str | None) -> list[list[str]]:
        """argv of each step that builds the plan's engine into `engine` inside a container (the models Job)."""
        raise NotImplementedError(f"the {self.name} runtime serves the checkpoint as it is")

    def adapter_convert_commands(self, plan: PlanView, sources: dict[int, str], out: str, *,
                                 examples_dir: str) -> list[list[str]]:
        """argv of each step that converts the plan's adapters (task id -> PEFT folder) into `out` in the layout of
        `Launch.adapter_folder`, inside a container (the models Job)."""
        raise NotImplementedError(f"the {self.name} runtime reads the adapters' own folders")


class Clients(_Owns[S], ABC):
    """How tritongen's clients (the OpenAI frontend, the load test) speak to the runtime's model."""

    output_token_counter: ClassVar[str | None] = None
    """The server's Prometheus counter of generated tokens, which the load report checks the client's token count
    against (levels[].tokens); None: the runtime's model exports none."""

    def dialect(self) -> Dialect | None:
        """How the OpenAI frontend and the load test's users speak to its model; None: the ensemble's tensors.
        A runtime that is not an ensemble and has no dialect is served by neither (refused, exit 2)."""
        return None


class Runtime(Planning[S], Repository[S], Launch[S], EngineBuilder[S], Clients[S], ABC):
    """One runtime: its words for the docs, and the five roles above (each a base class with its own members)."""

    summary: ClassVar[str]
    """One line for the docs: what serves the model."""
    choice: ClassVar[str]
    """What it is and when to pick it, for the spec's `runtime` field (validate --explain)."""
    executed_here: ClassVar[str]
    """Where tritongen has run it for real (the runtime table of docs/guide.md), or that it has not."""
