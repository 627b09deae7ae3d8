"""The trtllm runtime's section of the spec (`llmapi`): LlmArgs of NVIDIA's llmapi Triton model."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from tritongen.spec_base import RuntimeSection


class LlmApiSection(RuntimeSection):
    """LLM-API model settings (runtime trtllm: NVIDIA's llmapi Triton model, PyTorch backend, no engine build)."""

    key = "llmapi"
    moved = {"llmapi.max_batch_size": "runtime_max_batch_size"}

    tp_size: int = Field(1, ge=1)
    """Tensor-parallel degree (LlmArgs tensor_parallel_size)."""

    pp_size: int = Field(1, ge=1)
    """Pipeline-parallel degree (LlmArgs pipeline_parallel_size)."""

    runtime_max_batch_size: int | None = Field(None, ge=1)
    """The LLM API scheduler's batch, the requests it runs at once (LlmArgs max_batch_size; serving.max_batch_size
    stays Triton's). None: sized from the workload and the KV budget as
    trtllm-bench does (tensorrt_llm/bench/build/tuning.py); without a KV budget (no inventory, no
    serving.kv_cache.max_tokens) the LLM API's own default."""

    max_num_tokens: int | None = Field(None, ge=1)
    """Tokens per scheduler step (LlmArgs max_num_tokens). None: sized like runtime_max_batch_size."""

    max_seq_len: int | None = Field(None, ge=2)
    """Longest prompt + completion (LlmArgs max_seq_len). None: the checkpoint's context length
    (max_position_embeddings in config.json)."""

    kv_cache_dtype: Literal["auto", "fp8"] = "auto"
    """KV-cache dtype (KvCacheConfig.dtype); `auto` follows the checkpoint."""

    cuda_graphs: bool = True
    """Capture CUDA graphs for decode batches up to runtime_max_batch_size (cuda_graph_config; off renders null)."""

    cuda_graph_padding: bool = True
    """Round a decode batch up to the next captured size (CudaGraphConfig.enable_padding)."""

    enable_chunked_prefill: bool = False
    """Split long prompts over several scheduler steps (LlmArgs enable_chunked_prefill)."""

    trust_remote_code: bool = False
    """Let the checkpoint run its own modelling code (LlmArgs trust_remote_code)."""
