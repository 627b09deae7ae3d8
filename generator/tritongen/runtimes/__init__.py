"""The runtimes registry: every runtime tritongen can plan, render, serve and deploy, in one place.

A runtime is one package or module behind `runtimes.base.Runtime` (its roles: Planning, Repository, Launch,
EngineBuilder, Clients). Registering one is one import line below; the
spec's `runtime` choices, the Plan's runtime section (a union tagged by `runtime`), the request dialects the OpenAI
frontend and the load test speak (`Runtime.dialect()`, stored by key) and every stage follow from it.
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import Field

from tritongen.core import PlanView, SpecView
from tritongen.runtimes.base import Clients, Dialect, EngineBuilder, Launch, Planning, Repository, Runtime
# One line per runtime, in the order the spec's choices and the docs list them.
from tritongen.runtimes.hf.runtime import RUNTIME as _hf
from tritongen.runtimes.tensorrtllm.runtime import RUNTIME as _tensorrtllm
from tritongen.runtimes.llmapi.runtime import RUNTIME as _trtllm
from tritongen.runtimes.synthetic.runtime import RUNTIME as _synthetic
from tritongen.runtimes.vllm.runtime import RUNTIME as _vllm

RUNTIMES: dict[str, Runtime] = {r.name: r for r in list(globals().values()) if isinstance(r, Runtime)}
NAMES = tuple(RUNTIMES)
RuntimeName = Literal[NAMES]  # type: ignore[valid-type]
CHOICES = ("What serves the model named tensorrt_llm: "
           + ", ".join(f"`{r.name}` ({r.choice})" for r in list(RUNTIMES.values())[:-1])
           + f", or `{NAMES[-1]}` ({RUNTIMES[NAMES[-1]].choice}).")
"""The spec's description of its `runtime` field, from every runtime's own `choice`."""
ENSEMBLE = "ensemble"
"""The dialect key of the ensemble's tensors (the C++ TensorRT-LLM contract: no Dialect object)."""
DIALECTS: dict[str, Dialect] = {d.key: d for d in (r.dialect() for r in RUNTIMES.values()) if d is not None}
DialectKey = Literal[(ENSEMBLE, *DIALECTS)]  # type: ignore[valid-type]
RuntimeSettingsUnion = Annotated[Union[tuple(r.settings for r in RUNTIMES.values())],  # type: ignore[valid-type]
                                 Field(discriminator="runtime")]


def _of(of: str | PlanView | SpecView) -> Runtime:
    return RUNTIMES[of if isinstance(of, str) else of.runtime]


# Each stage asks for the one role it uses (runtimes/base.py), by a runtime's name, a Spec or a Plan; no stage holds
# the whole runtime (tests/test_import_graph.py).

def planning(of: str | PlanView | SpecView) -> Planning:
    """The runtime's planning role: spec -> its Plan section, and the planner's questions (plan/, spec/, tune/)."""
    return _of(of)


def repository(of: str | PlanView | SpecView) -> Repository:
    """The runtime's repository role: the model files it renders and the checks of a rendered one (render/)."""
    return _of(of)


def launch(of: str | PlanView | SpecView) -> Launch:
    """The runtime's launch role: its image, the tritonserver command, the deploy targets' needs (serve/, deploy/)."""
    return _of(of)


def builder(of: str | PlanView | SpecView) -> EngineBuilder:
    """The runtime's engine builder (`tritongen build`, the Kubernetes models Job)."""
    return _of(of)


def clients(of: str | PlanView | SpecView) -> Clients:
    """How tritongen's clients speak to the runtime's model (the load test, the OpenAI frontend)."""
    return _of(of)


# A stage that asks every runtime the same question holds that one role of each.

def plannings() -> dict[str, Planning]:
    """Every runtime's planning role, by name (the spec's sections, the runtimes that run on CPUs)."""
    return dict(RUNTIMES)


def repositories() -> dict[str, Repository]:
    """Every runtime's repository role, by name (`tritongen verify` runs each one's checks)."""
    return dict(RUNTIMES)


def launches() -> dict[str, Launch]:
    """Every runtime's launch role, by name (`tritongen pins`)."""
    return dict(RUNTIMES)


def names(where) -> str:
    """The names of the runtimes for which `where(runtime)` holds, as prose ("hf and synthetic")."""
    chosen = [r.name for r in RUNTIMES.values() if where(r)]
    return chosen[0] if len(chosen) == 1 else ", ".join(chosen[:-1]) + " and " + chosen[-1]


def dialect(key: str) -> Dialect | None:
    """The request dialect stored under `key` (a Plan's frontend route, the load test's configuration); None for
    the ensemble's tensors."""
    if key == ENSEMBLE:
        return None
    try:
        return DIALECTS[key]
    except KeyError:
        raise ValueError(f"unknown request dialect {key!r}; known: {', '.join([ENSEMBLE, *DIALECTS])}") from None


def completes_own_config(repo) -> bool:
    """Whether a rendered repository holds a model whose config.pbtxt its code completes at load time
    (`Runtime.completes_own_config`): tritonserver then runs with auto-completion on."""
    from pathlib import Path

    return any(r.completes_own_config(Path(repo)) for r in RUNTIMES.values())


def missing_model_code(repo) -> tuple[str, str, str] | None:
    """The first runtime's report of model code the repository lacks here (`Runtime.missing_model_code`)."""
    from pathlib import Path

    return next((m for r in RUNTIMES.values() if (m := r.missing_model_code(Path(repo))) is not None), None)
