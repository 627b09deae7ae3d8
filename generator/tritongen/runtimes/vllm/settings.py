"""The vllm runtime's section of the Plan (runtime vllm): what 1/model.json carries."""

from __future__ import annotations

from typing import Literal

from tritongen.runtimes.base import RuntimeSettings


class VllmPlan(RuntimeSettings):
    """Settings of the vLLM backend's model (runtime vllm): what 1/model.json carries."""

    runtime: Literal["vllm"] = "vllm"
    checkpoint_dir: str
    separate_tokenizer: bool
    """model.tokenizer names a folder other than the checkpoint (model.json then names it)."""
    dtype: str
    max_model_len: int
    gpu_memory_utilization: float
    enable_prefix_caching: bool
    max_lora_rank: int | None = None
    """With adapters: model.json's max_lora_rank (the plan's maximum rank, rounded up to a rank vLLM takes)."""
    max_loras: int | None = None
    """With adapters: model.json's max_loras, the adapters one batch holds (all of them, so any mix is served)."""
