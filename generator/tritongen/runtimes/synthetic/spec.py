"""The synthetic runtime's section of the spec (`synthetic`): token timing, fixed or from an engine model."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from tritongen.spec_base import RuntimeSection, Section


class SyntheticEngineSection(Section):
    """An engine model in place of the fixed TTFT/ITL: steps whose time grows with the running batch and the prefill
    tokens, admission limited by serving.max_batch_size and the KV budget serving.kv_cache.max_tokens (prompt +
    output tokens reserved per request), so those settings have an optimum under an SLO (docs/tune.md). Defaults:
    the hf runtime's streaming manager on an H200 (docs/benchmarks.md)."""

    enabled: bool = False
    """Time tokens with the engine model (synthetic.ttft_ms and itl_ms then do not apply)."""

    step_base_ms: float = Field(24.4, ge=0)
    """Time of a step with no request and no prefill: the fixed cost of one forward pass, milliseconds."""

    per_sequence_ms: float = Field(0.153, ge=0)
    """Added step time per running request (decode), milliseconds."""

    per_prefill_token_ms: float = Field(0.004, ge=0)
    """Added step time per prompt token prefilled in the step, milliseconds."""


class SyntheticSection(RuntimeSection):
    """Token timing of the synthetic runtime (runtime synthetic)."""

    key = "synthetic"

    ttft_ms: float = Field(50, ge=0)
    """Time from a request's arrival at the tensorrt_llm model to its first token."""

    itl_ms: float = Field(10, ge=0)
    """Time between two tokens of one request."""

    source: Literal["native", "python"] = "native"
    """What serves the token source: `native` (a C++ Triton backend, built by `make install` and, in deployments,
    by the serving image's builder stage; tens of thousands of tokens/s per core, so a benchmark measures the serving
    path, not the source) or `python` (the same behaviour as a python model, but its per-response IPC caps it at a
    few thousand tokens/s)."""

    engine: SyntheticEngineSection = SyntheticEngineSection()
    """The engine model (off by default: each request gets the fixed ttft_ms/itl_ms)."""
