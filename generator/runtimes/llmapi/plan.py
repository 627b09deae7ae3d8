"""The LLM-API runtime's part of the Plan (runtime `trtllm`): every value its model.yaml will carry."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from tritongen.runtimes.base import RuntimeSettings
from tritongen.runtimes.llmapi.sizing import cuda_graph_batch_sizes, size_for

if TYPE_CHECKING:
    from tritongen.spec import Spec

# LLM API defaults used when no KV budget is known (no inventory, no serving.kv_cache.max_tokens).
DEFAULT_MAX_NUM_TOKENS = 8192


class LlmApiPlan(RuntimeSettings):
    """Settings of NVIDIA's llmapi model; `sizing` says where max_batch_size and max_num_tokens came from."""

    runtime: Literal["trtllm"] = "trtllm"
    checkpoint_dir: str
    tokenizer_dir: str | None
    dtype: str
    tp: int
    pp: int
    max_batch_size: int
    max_num_tokens: int
    max_seq_len: int
    kv_max_tokens: int | None
    kv_free_gpu_memory_fraction: float
    enable_block_reuse: bool
    kv_cache_dtype: str
    cuda_graph_batch_sizes: tuple[int, ...]
    """Empty: CUDA graphs off."""
    cuda_graph_padding: bool
    enable_chunked_prefill: bool
    trust_remote_code: bool
    instances: int
    gpu_device_ids: str
    """Per instance, as each server sees its devices (`;` between instances); rendered when instances > 1."""
    sizing: dict[str, float | int | str]


def make_llmapi_plan(spec: Spec, checkpoint: str, tokenizer: str | None, *, max_seq_len: int,
                     kv_tokens: int | None, instances: int) -> LlmApiPlan:
    """Resolve the trtllm runtime's settings; `kv_tokens` is the absolute KV budget per model instance, if known."""
    s, load = spec.llmapi, spec.validation.load
    isl, osl = load.input_tokens.mean, load.output_tokens.mean
    if kv_tokens is not None:
        sized = size_for(kv_tokens, isl, osl, s.pp_size)
        batch, tokens = sized.max_batch_size, sized.max_num_tokens
        sizing = {"source": "kv budget at input+output tokens (tensorrt_llm/bench/build/tuning.py)",
                  "kv_tokens": kv_tokens, "input_tokens": isl, "output_tokens": osl,
                  "kv_requests": round(sized.kv_requests, 2)}
    else:
        batch, tokens = spec.serving.max_batch_size, DEFAULT_MAX_NUM_TOKENS
        sizing = {"source": "no KV budget known (plan with --inventory or set serving.kv_cache.max_tokens): "
                            "serving.max_batch_size and the LLM API's 8192 tokens"}
    batch = s.max_batch_size or batch
    tokens = s.max_num_tokens or tokens
    world = s.tp_size * s.pp_size
    ids = ";".join([",".join(str(r) for r in range(world))] * instances)
    return LlmApiPlan(
        checkpoint_dir=checkpoint, tokenizer_dir=tokenizer, dtype=spec.model.dtype, tp=s.tp_size, pp=s.pp_size,
        max_batch_size=batch, max_num_tokens=tokens, max_seq_len=max_seq_len, kv_max_tokens=kv_tokens,
        kv_free_gpu_memory_fraction=spec.serving.kv_cache.free_gpu_mem_fraction,
        enable_block_reuse=spec.serving.kv_cache.enable_reuse, kv_cache_dtype=s.kv_cache_dtype,
        cuda_graph_batch_sizes=tuple(cuda_graph_batch_sizes(batch, s.cuda_graph_padding)) if s.cuda_graphs else (),
        cuda_graph_padding=s.cuda_graph_padding, enable_chunked_prefill=s.enable_chunked_prefill,
        trust_remote_code=s.trust_remote_code, instances=instances, gpu_device_ids=ids, sizing=sizing,
    )
