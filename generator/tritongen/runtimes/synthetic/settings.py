"""The synthetic runtime's section of the Plan (runtime synthetic)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from tritongen.runtimes.base import RuntimeSettings
from tritongen.served import engine_model as engine_module


class SyntheticEnginePlan(BaseModel):
    """The engine model's parameters (served.engine_model with the Plan's max_batch_size and kv_tokens)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    step_base_ms: float
    per_sequence_ms: float
    per_prefill_token_ms: float
    max_batch: int
    kv_tokens: int
    """0: unlimited."""

    def params(self) -> engine_module.EngineParams:
        return engine_module.EngineParams(**self.model_dump())


class SyntheticPlan(RuntimeSettings):
    """Token timing of the synthetic runtime's tensorrt_llm model (a token source with no model)."""

    runtime: Literal["synthetic"] = "synthetic"
    ttft_ms: float
    itl_ms: float
    source: Literal["native", "python"] = "native"
    """native: the tritongen_tokensource C++ backend; python: tritongen.served.synthetic."""
    engine: SyntheticEnginePlan | None = None
    """The engine model (served.engine_model, with the Plan's max_batch_size and kv_tokens); None: fixed timing."""
