"""The OpenAI frontend's part of the Plan: public model names, the Triton model behind each, tokenizer, template.

Rendered into the repository as `frontend.json` (tritonserver ignores files at the repository root), so
`tritongen serve REPO --openai` and deploy targets need nothing else. Secrets never travel: only the *name* of
the environment variable that holds the API key is stored.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from tritongen.core.sections import AdapterPlan
from tritongen.errors import EnvironmentMissing, SpecError, problem
from tritongen.runtimes import ENSEMBLE, Dialect, DialectKey

CONFIG_FILE = "frontend.json"
TEMPLATE_FILE = "chat_template.jinja"
STREAMS_PER_WORKER = 48
"""Streams one frontend worker carries: on a 16-core H200 host, 6 workers carried 37,100 tok/s of exact text at 256
streams (about 43 each, 5 ms ITL) where 1 worker was the bottleneck (docs/deploy.md, "OpenAI frontend workers")."""
MAX_PLANNED_WORKERS = 16


def planned_workers(streams: int) -> int:
    """Frontend workers for `streams` concurrent streams: one per STREAMS_PER_WORKER, 1 to MAX_PLANNED_WORKERS."""
    return max(1, min(MAX_PLANNED_WORKERS, math.ceil(streams / STREAMS_PER_WORKER)))


class StructuredRoute(BaseModel):
    """What the frontend may ask of the runtime's constrained decoding (from the Plan's structured_output)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    runtime: str
    """The runtime in words, for refusals ("the hf runtime")."""
    guide_types: tuple[str, ...] = ()
    """guided_decoding_guide_type values the deployment accepts (json, json_schema, regex, ebnf_grammar); empty:
    decoding cannot be constrained, so response_format json_* and tool_choice required/named are refused."""
    tool_call_format: Literal["auto", "llama3_json", "hermes", "mistral"] = "auto"
    """How the model writes tool calls (auto: read from the chat template)."""
    max_schema_bytes: int = Field(65536, ge=1)
    """The largest JSON schema (as sent, compact JSON) a request may carry."""


class ModelRoute(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    """Public model name (what clients pass as `model` and see in /v1/models)."""
    triton_model: str
    """The Triton model that serves it: ensemble or tensorrt_llm_bls (C++ contract), or a runtime's own model."""
    dialect: DialectKey = ENSEMBLE
    """The tensors it speaks: `ensemble`, the C++ contract's (text_input, max_tokens, stream, token counts), or the
    key of a runtime's request dialect (`llmapi`: NVIDIA's llmapi model; `vllm`: Triton's vLLM backend), which the
    frontend looks up in the runtimes registry (tritongen.runtimes.dialect)."""
    tokenizer_dir: str
    """Tokenizer folder; its chat template renders chat messages."""
    chat_template: str | None = None
    """A Jinja chat template file used instead of the tokenizer's own."""
    default_max_tokens: int = Field(64, ge=1)
    """Completion length when a request sets none."""
    structured_output: StructuredRoute | None = None
    """None: no constrained decoding (a repository rendered before it); tool_choice auto still parses calls."""
    lora_task_id: int | None = None
    """A LoRA adapter's route (spec model.adapters): the task id every request sends (`lora_task_id`); None: the
    base model."""
    lora_name: str | None = None
    """The adapter's name as the runtime's own model knows it (vLLM's `lora_name`)."""
    parent: str | None = None
    """An adapter's base model (the public name of the base route): /v1/models shows it as vLLM does."""
    root: str | None = None
    """An adapter's folder: /v1/models shows it as `root`, as vLLM does."""


class FrontendPlan(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = False
    """`serve`/`up`/deploy start the OpenAI frontend without being asked."""
    implementation: Literal["tritongen", "triton"] = "tritongen"
    """Deploy targets: tritongen's frontend, or Triton's own python/openai frontend in the NGC container."""
    port: int = Field(9000, ge=0, le=65535)
    """HTTP port of the OpenAI API (0: a free port)."""
    api_key_env: str | None = None
    """Name of the environment variable that holds the API key; None: no authentication."""
    workers: int = Field(1, ge=1, le=64)
    """Worker processes of tritongen's frontend: frontend.openai.workers, else planned from the streams the
    servers carry at once (`planned_workers`). Deployments run exactly this many (their pod requests a core per
    worker); `serve` runs `workers_on_host`."""
    workers_planned: bool = False
    """True: `workers` was planned (serve caps it at half its host's cores); False: set in the spec (run as is)."""
    workers_why: str = ""
    """How `workers` was decided, for `plan` and `serve` to say."""
    models: tuple[ModelRoute, ...]

    def workers_on_host(self, cores: int | None = None) -> tuple[int, str]:
        """(workers `serve` starts on this host, why): a planned count at most half the host's cores (the
        tritonserver beside it needs the rest), a count set in the spec as it is."""
        if not self.workers_planned:
            return self.workers, self.workers_why
        cores = cores or len(os.sched_getaffinity(0))
        n = max(1, min(self.workers, cores // 2))
        why = self.workers_why if n == self.workers else f"{self.workers_why}; capped at {cores} cores / 2"
        return n, why

    def route(self, name: str) -> ModelRoute | None:
        return next((m for m in self.models if m.name == name), None)

    def api_key(self) -> str | None:
        """The key from the environment, read at start; a named but unset variable is an error."""
        if not self.api_key_env:
            return None
        value = os.environ.get(self.api_key_env)
        if not value:
            raise EnvironmentMissing(problem("frontend.api_key_env", f"names {self.api_key_env}, which is not set",
                                             f"export {self.api_key_env}=<key> or remove api_key_env"))
        return value

    def to_json(self) -> str:
        # The default dialect, a route without structured output and the adapter fields of a base route are left
        # out, so repositories of the C++ contract keep the bytes they had.
        plain = {i: ({"dialect"} if r.dialect == ENSEMBLE else set())
                 | ({"structured_output"} if r.structured_output is None else set())
                 | ({"lora_task_id", "lora_name", "parent", "root"} if r.lora_task_id is None else set())
                 for i, r in enumerate(self.models)}
        plain = {i: keys for i, keys in plain.items() if keys}
        return self.model_dump_json(indent=2, exclude={"models": plain} if plain else None) + "\n"

    def repository_files(self, tokenizer_dir: str) -> dict[str, bytes]:
        """frontend.json (and chat_template.jinja) for a model repository whose server sees the tokenizer at
        `tokenizer_dir`; the template is copied in, so the repository carries everything the frontend needs."""
        files, routes = {}, []
        for route in self.models:
            template = None
            if route.chat_template:
                files[TEMPLATE_FILE] = Path(route.chat_template).read_bytes()
                template = TEMPLATE_FILE  # relative: resolved against the repository when read
            routes.append(route.model_copy(update={"tokenizer_dir": tokenizer_dir, "chat_template": template}))
        files[CONFIG_FILE] = self.model_copy(update={"models": tuple(routes)}).to_json().encode()
        return files

    @classmethod
    def read(cls, repo: str | Path) -> FrontendPlan:
        """The settings rendered into a model repository, with the chat template's path made absolute."""
        path = Path(repo) / CONFIG_FILE
        if not path.is_file():
            raise SpecError(problem(str(path), "missing", "render the repository with `tritongen render`, which "
                                    "writes the frontend's settings next to the models"))
        plan = cls.model_validate(json.loads(path.read_text()))
        routes = tuple(r.model_copy(update={"chat_template": str((Path(repo) / r.chat_template).resolve())})
                       if r.chat_template else r for r in plan.models)
        return plan.model_copy(update={"models": routes})


def make_frontend_plan(spec, resolve: Callable[[str], Path], tokenizer_dir: Path,
                       dialect: Dialect | None = None, *, streams: int, streams_why: str = "",
                       structured: StructuredRoute | None = None,
                       adapters: Sequence[AdapterPlan] = ()) -> FrontendPlan:
    """The frontend section of a spec, resolved: public name, template file (absolute: `resolve` is the planner's
    tritongen.plan.make.resolve_path from the spec's folder), defaults filled in. `dialect`: the runtime's own
    model and tensors (None: the ensemble's). `streams`: how many streams the servers carry at once (the
    frontend's planned concurrency), `streams_why` how that count was made. `structured`: what the route may ask
    of constrained decoding (the Plan's structured_output). `adapters`: the LoRA adapters, each a route of its own
    (same Triton model, its task id) listed after the base."""
    f, o = spec.frontend, spec.frontend.openai
    template = None
    if f.chat_template:
        path = resolve(f.chat_template)
        if not path.is_file():
            raise SpecError(problem("frontend.chat_template", f"file {path} does not exist",
                                    "point it at a Jinja chat template file, or remove it to use the tokenizer's"))
        template = str(path)
    triton_model, key = o.triton_model, ENSEMBLE
    if dialect is not None:
        # A runtime whose own model is the repository: the frontend calls that model in the runtime's dialect.
        triton_model, key = dialect.model, dialect.key
        if o.implementation == "triton":
            raise SpecError(problem(
                "frontend.openai.implementation", f"triton cannot drive the {spec.runtime} runtime's model (tritongen "
                "starts Triton's frontend with its TensorRT-LLM converter, which sends stream, max_tokens and 2-D "
                f"tensors; {dialect.title} takes {dialect.takes})",
                "use implementation: tritongen, or disable frontend.openai"))
    route = ModelRoute(name=o.served_model_name or spec.name, triton_model=triton_model, dialect=key,
                       tokenizer_dir=str(tokenizer_dir), chat_template=template,
                       default_max_tokens=o.default_max_tokens or spec.serving.max_tokens_default,
                       structured_output=structured)
    routes = (route, *(route.model_copy(update={"name": a.name, "lora_task_id": a.task_id, "lora_name": a.name,
                                                "parent": route.name, "root": a.path}) for a in adapters))
    if o.workers is not None:
        workers, planned, why = o.workers, False, "frontend.openai.workers"
    else:
        workers, planned = planned_workers(streams), True
        why = (f"planned: {streams} streams ({streams_why}) / {STREAMS_PER_WORKER} per worker, at most "
               f"{MAX_PLANNED_WORKERS}" if streams_why else
               f"planned: {streams} streams / {STREAMS_PER_WORKER} per worker, at most {MAX_PLANNED_WORKERS}")
    return FrontendPlan(enabled=o.enabled, implementation=o.implementation, port=o.port, api_key_env=f.api_key_env,
                        workers=workers, workers_planned=planned, workers_why=why, models=routes)
