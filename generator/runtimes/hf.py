"""The hf runtime (python-backend LLM model on transformers' continuous batching): its model parameters."""

from __future__ import annotations

from tritongen.plan.model import Plan


def hf_parameters(plan: Plan, checkpoint_dir: str, kv_tokens: int | None) -> dict[str, str]:
    """The `parameters` of the hf tensorrt_llm model; `checkpoint_dir` is where the server sees the checkpoint,
    `kv_tokens` the server group's KV budget (None: the plan's)."""
    hf = plan.hf
    assert hf is not None
    # An absolute token budget becomes a block count; without one transformers sizes the cache from memory.
    blocks = hf.num_blocks if kv_tokens is None else -(-kv_tokens // hf.block_size)
    # Off (0) is the model's own default, so the parameter is rendered only when set.
    flush = {"stream_flush_ms": str(hf.stream_flush_ms)} if hf.stream_flush_ms else {}
    return {
        "hf_model_path": checkpoint_dir,
        "dtype": hf.dtype,
        "kv_cache_block_size": str(hf.block_size),
        "kv_cache_num_blocks": "" if blocks is None else str(blocks),
        "kv_cache_free_gpu_mem_fraction": str(hf.max_memory_percent),
        "max_batch_tokens": "" if hf.max_batch_tokens is None else str(hf.max_batch_tokens),
        "exclude_input_in_output": str(plan.exclude_input_in_output).lower(),
        "end_id": str(plan.tokenizer.end_id),
        "pad_id": str(plan.tokenizer.pad_id),
        "cancellation_check_period_ms": str(hf.cancellation_check_period_ms),
        "sampling": hf.sampling,
        "cuda_graphs": "auto" if hf.cuda_graphs is None else str(hf.cuda_graphs).lower(),
        "attention": hf.attention or "",
        "log_probs": str(hf.log_probs).lower(),
        "stream_interval": str(plan.stream_interval),
        **flush,
    }
