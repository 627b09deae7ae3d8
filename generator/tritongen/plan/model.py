"""The frozen Plan: every decision tritongen makes about a deployment, serialisable as a lock file.

Later stages (build, render, deploy, load test) read only the Plan, never the spec: `tritongen plan --json`
writes it, and `render`, `deploy` and `loadtest` accept that JSON in place of the spec, without the spec or the
checkpoint being present. The runtime's own section (`runtime_settings`) is the type its runtime defines
(tritongen.runtimes), tagged with the runtime's name.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, field_serializer, field_validator, model_validator

from tritongen.core.sections import (
    AdapterPlan, InstanceGroup, PathsPlan, ServerGroupPlan, StructuredOutputPlan, TokenizerPlan,
)
from tritongen.placement import Placement
from tritongen.placement.inventory import Inventory
from tritongen.placement.memory import MemoryModel
from tritongen.plan.deploy import DeployPlan
from tritongen.plan.frontend import FrontendPlan
from tritongen.plan.load import LoadProfile
from tritongen.plan.slo import SLOPlan
from tritongen.runtimes import RuntimeName, RuntimeSettingsUnion

# A plan JSON of another format is refused with a hint to re-plan (plan_from_json).
PLAN_FORMAT = "tritongen-plan/3"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class PlacementPlan(_Frozen):
    """The placement over a GPU inventory, with what it was computed from (so deploy needs neither again).

    The placement's own types (tritongen.placement: frozen dataclasses), validated from the JSON as they are."""

    inventory: Inventory
    """The inventory as read."""
    memory: MemoryModel
    """The memory model placement sized with."""
    result: Placement
    """Every device's verdict and the server groups."""

    @field_serializer("result")
    def _with_env(self, placed: Placement) -> dict[str, Any]:
        # Each server group's environment is written out for readers of the lock file (Placement.to_dict) ...
        return placed.to_dict()

    @field_validator("result", mode="before")
    @classmethod
    def _without_env(cls, value: Any) -> Any:
        # ... and derived again from cuda_visible_devices when the file is read.
        if isinstance(value, dict) and isinstance(value.get("server_groups"), list):
            groups = [{k: v for k, v in g.items() if k != "env"} if isinstance(g, dict) else g
                      for g in value["server_groups"]]
            return {**value, "server_groups": groups}
        return value


class Plan(_Frozen):
    format: Literal["tritongen-plan/3"] = PLAN_FORMAT
    name: str
    runtime: RuntimeName
    spec_dir: str
    """The folder of the spec the plan was made from (information only: every path is resolved in `paths`)."""
    paths: PathsPlan
    tokenizer: TokenizerPlan
    max_batch_size: int
    """serving.max_batch_size: the Triton max_batch_size of every batched model, the requests one LLM instance
    serves at once (the name it has everywhere in the Plan; runtimes read it from here)."""
    decoupled: bool
    exclude_input_in_output: bool
    max_tokens_default: int
    stream_interval: int = 1
    """Tokens per streamed response of the hf/synthetic tensorrt_llm model (serving.stream_interval)."""
    preprocessing_instances: int
    postprocessing_instances: int
    max_queue_delay_us: int
    max_queue_size: int
    logits_datatype: str
    llm_instance_group: InstanceGroup
    runtime_settings: RuntimeSettingsUnion
    """The runtime's own settings (its `settings` type in tritongen.runtimes), tagged by `runtime`."""
    bls_instances: int
    bls_parameters: dict[str, str]
    bls_backend: Literal["native", "python"] = "python"
    """Triton backend of tensorrt_llm_bls: `native` (tritongen_bls, C++) or `python` (serving.bls)."""
    ensemble_entry: Literal["bls", "triton"] = "triton"
    """What serves the `ensemble` model (serving.ensemble): the BLS under that name, or Triton's ensemble scheduler
    (plans written before the field existed: triton)."""
    bls_backend_reason: str = ""
    """Why `serving.bls: auto` chose the python BLS (the tokenizer's decoder is not table-decodable), else empty."""
    load: LoadProfile
    """What the load test sends (spec `validation.load`, its files absolute); the load test reads nothing else."""
    slo: SLOPlan
    """The SLO gate of the load test: the spec's objectives resolved against the metric registry."""
    deploy: DeployPlan
    """Settings of the generated deployment files (spec `deploy`)."""
    kv_tokens: int | None = None
    """KV-cache budget in tokens per LLM instance of the default config.pbtxt (serving.kv_cache.max_tokens), or
    with a placement the smallest over the server groups (a server started without a group config can hold it
    anywhere); None: the runtime sizes its cache from free memory. Each server group's own is its `kv_tokens`."""
    kv_sizing: str = ""
    """How `kv_tokens` was decided: the spec's budget or the deployment's need (sequences x max_seq_len, whole
    blocks), and the machine's memory that bounds it (host RAM on CPU, the placement on GPUs)."""
    placement: PlacementPlan | None = None
    server_groups: tuple[ServerGroupPlan, ...] = ()
    """One entry per server group of the placement, in the placement's order."""
    adapters: tuple[AdapterPlan, ...] = ()
    """The LoRA adapters served with the base model (spec model.adapters), task ids 1, 2, ... in that order."""
    max_adapter_rank: int | None = None
    """The largest LoRA rank the deployment accepts (model.max_adapter_rank, default the adapters' largest); None
    without adapters."""
    frontend: FrontendPlan | None = None
    """The OpenAI-compatible frontend: public model name, the Triton model behind it, tokenizer and template."""
    structured_output: StructuredOutputPlan = StructuredOutputPlan()
    """Constrained decoding: the guide types the runtime's model accepts, the grammar backend, the tool-call format,
    the largest guide, and what the runtime does with a guide (spec `structured_output`)."""
    group_configs: bool = False
    """True when server groups differ (KV budget, instances): each then gets tensorrt_llm/configs/<group>.pbtxt
    and its tritonserver runs with --model-config-name=<group>."""

    @model_validator(mode="after")
    def _one_runtime(self) -> Plan:
        if self.runtime_settings.runtime != self.runtime:
            raise ValueError(f"runtime_settings are for runtime {self.runtime_settings.runtime!r}, "
                             f"not {self.runtime!r}")
        return self

    def to_json(self) -> str:
        # Key order is kept: parameter dicts render in the order they were decided.
        return json.dumps(self.model_dump(mode="json"), indent=2) + "\n"

    def server_group(self, name: str) -> ServerGroupPlan:
        return next(g for g in self.server_groups if g.name == name)
