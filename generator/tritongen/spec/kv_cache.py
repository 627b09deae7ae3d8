"""The `serving.kv_cache` section: the KV-cache budget."""

from __future__ import annotations

from pydantic import Field

from tritongen.spec_base import Section


class KVCacheSection(Section):
    free_gpu_mem_fraction: float = Field(0.9, gt=0, le=1)
    """Fraction of the memory left after the weights that the KV cache may take. placement.device gpu: of the GPU's
    memory (the placement applies it with --inventory; else the runtime at load, as TensorRT-LLM's
    free_gpu_memory_fraction). placement.device cpu: of the host memory (RAM) free when planning."""

    max_tokens: int | None = Field(None, ge=1)
    """KV-cache budget per LLM instance in tokens (max_tokens_in_paged_kv_cache). Unset: what the deployment holds
    at once, max_batch_size x the longest sequence rounded up to whole blocks, capped by free_gpu_mem_fraction of
    the machine's memory; set: checked against that memory (exit 2 when it cannot fit). `tritongen plan` says how it
    was sized (kv_sizing)."""

    enable_reuse: bool = False
    """Prefix (KV block) reuse across requests (tensorrtllm: enable_kv_cache_reuse)."""

    host_memory_bytes: int = Field(0, ge=0)
    """Host memory for KV offload (tensorrtllm: kv_cache_host_memory_bytes)."""

    block_size: int = Field(32, ge=1)
    """Tokens per KV block (hf runtime's paged cache)."""
