"""The parts of the Plan and the Spec a runtime reads, as Protocols: `tritongen.plan.model.Plan` and
`tritongen.spec.Spec` satisfy them structurally, so a runtime names these types and never the stages above it.

A runtime's own spec section (engine, llmapi, synthetic) is typed `Any` here: its runtime package owns its type.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol

from pydantic import BaseModel

from tritongen.core.sections import (
    AdapterPlan, InstanceGroup, PathsPlan, ServerGroupPlan, StructuredOutputPlan, TokenizerPlan,
)


class _Lengths(Protocol):
    @property
    def mean(self) -> int: ...
    @property
    def stddev(self) -> float: ...


class LoadView(Protocol):
    """What the load test sends (the Plan's `load`, the Spec's `validation.load`): prompt and completion lengths."""

    @property
    def prompts_file(self) -> str | None: ...
    @property
    def input_tokens(self) -> _Lengths: ...
    @property
    def output_tokens(self) -> _Lengths: ...


class DeployView(Protocol):
    """The Plan's `deploy` section: the HPA targets a runtime's signals scale on."""

    @property
    def hpa_waiting_requests(self) -> float: ...
    @property
    def hpa_requests_per_s(self) -> float: ...
    @property
    def hpa_kv_cache_utilization(self) -> float: ...


class PlanView(Protocol):
    """The Plan as a runtime reads it (`tritongen.plan.model.Plan`)."""

    @property
    def name(self) -> str: ...
    @property
    def runtime(self) -> str: ...
    @property
    def paths(self) -> PathsPlan: ...
    @property
    def tokenizer(self) -> TokenizerPlan: ...
    @property
    def max_batch_size(self) -> int: ...
    @property
    def decoupled(self) -> bool: ...
    @property
    def exclude_input_in_output(self) -> bool: ...
    @property
    def stream_interval(self) -> int: ...
    @property
    def logits_datatype(self) -> str: ...
    @property
    def llm_instance_group(self) -> InstanceGroup: ...
    @property
    def preprocessing_instances(self) -> int: ...
    @property
    def postprocessing_instances(self) -> int: ...
    @property
    def bls_instances(self) -> int: ...
    @property
    def bls_parameters(self) -> Mapping[str, str]: ...
    @property
    def bls_backend(self) -> str: ...
    @property
    def ensemble_entry(self) -> str: ...
    @property
    def group_configs(self) -> bool: ...
    @property
    def runtime_settings(self) -> BaseModel:
        """The runtime's own section; `Role.own(plan)` gives it typed."""
    @property
    def kv_tokens(self) -> int | None: ...
    @property
    def placement(self) -> object | None:
        """Set when the plan is placed on an inventory (runtimes test only whether it is)."""
    @property
    def server_groups(self) -> Sequence[ServerGroupPlan]: ...
    @property
    def load(self) -> LoadView: ...
    @property
    def deploy(self) -> DeployView: ...
    @property
    def structured_output(self) -> StructuredOutputPlan: ...
    @property
    def adapters(self) -> Sequence[AdapterPlan]: ...
    @property
    def max_adapter_rank(self) -> int | None: ...


class ModelView(Protocol):
    @property
    def dtype(self) -> str: ...
    @property
    def tokenizer(self) -> str | None: ...


class PlacementView(Protocol):
    @property
    def device(self) -> Literal["cpu", "gpu"]: ...
    @property
    def gpu_ids(self) -> list[int]: ...
    @property
    def instances_per_gpu(self) -> int: ...


class KvCacheView(Protocol):
    @property
    def block_size(self) -> int: ...
    @property
    def free_gpu_mem_fraction(self) -> float: ...
    @property
    def host_memory_bytes(self) -> int | None: ...
    @property
    def enable_reuse(self) -> bool: ...


class ServingView(Protocol):
    """The Spec's `serving` section as the runtimes read it (a runtime's own knobs are in its own section)."""

    @property
    def streaming(self) -> bool: ...
    @property
    def kv_cache(self) -> KvCacheView: ...


class StructuredOutputView(Protocol):
    """The Spec's `structured_output` section (tritongen.spec.structured_output)."""

    @property
    def backend(self) -> str: ...
    @property
    def tool_call_format(self) -> str: ...
    @property
    def max_schema_bytes(self) -> int: ...


class ValidationView(Protocol):
    @property
    def load(self) -> LoadView: ...


class SpecView(Protocol):
    """The Spec as a runtime reads it while planning (`tritongen.spec.Spec`)."""

    @property
    def runtime(self) -> str: ...
    @property
    def model(self) -> ModelView: ...
    @property
    def placement(self) -> PlacementView: ...
    @property
    def serving(self) -> ServingView: ...
    @property
    def validation(self) -> ValidationView: ...
    @property
    def structured_output(self) -> StructuredOutputView: ...
    @property
    def engine(self) -> Any:
        """runtime tensorrtllm's section (its package owns the type)."""
    @property
    def llmapi(self) -> Any:
        """runtime trtllm's section (its package owns the type)."""
    @property
    def synthetic(self) -> Any:
        """runtime synthetic's section (its package owns the type)."""
    @property
    def hf(self) -> Any:
        """runtime hf's section (its package owns the type)."""
