"""The hf runtime's section of the Plan (runtime hf)."""

from __future__ import annotations

from typing import Literal

from tritongen.runtimes.base import RuntimeSettings


class HFRuntimePlan(RuntimeSettings):
    """Settings of the python-backend LLM model (runtime hf)."""

    runtime: Literal["hf"] = "hf"
    checkpoint_dir: str
    dtype: str
    block_size: int
    """Tokens per KV-cache block; the block count follows the Plan's `kv_tokens` (kv_cache_blocks)."""
    max_batch_tokens: int | None
    max_memory_percent: float
    cancellation_check_period_ms: int = 100
    stream_flush_ms: int = 0
    """Streamed tokens are sent at most every N ms (hf.stream_flush_ms); 0: every step."""
    sampling: str = "per_request"
    cuda_graphs: bool | None = None
    attention: str | None = None
    log_probs: bool = True
