"""The LLM-API runtime's part of the Plan (runtime `trtllm`): every value its model.yaml will carry."""

from __future__ import annotations

from typing import Literal

from tritongen.core import SpecView
from tritongen.runtimes.base import RuntimeSettings
from tritongen.runtimes.llmapi.sizing import cuda_graph_batch_sizes, size_for




class LlmApiPlan(RuntimeSettings):
    """Settings of NVIDIA's llmapi model; `sizing` says where max_batch_size and max_num_tokens came from."""

    runtime: Literal["trtllm"] = "trtllm"
    checkpoint_dir: str
    tokenizer_dir: str | None
    dtype: str
    tp: int
    pp: int
    max_batch_size: int | None
    """The LLM API's max_batch_size (model.yaml): requests its scheduler runs at once, sized from the KV budget
    (`sizing`). None: no KV budget known, so model.yaml leaves it (and max_num_tokens) to the LLM API's own
    default."""
    max_num_tokens: int | None
    max_seq_len: int
    kv_free_gpu_memory_fraction: float
    enable_block_reuse: bool
    kv_cache_dtype: str
    cuda_graphs: bool
    cuda_graph_batch_sizes: tuple[int, ...]
    """Empty with cuda_graphs on: the runtime's own sizes for its max_batch_size."""
    cuda_graph_padding: bool
    enable_chunked_prefill: bool
    trust_remote_code: bool
    sizing: dict[str, float | int | str]


def make_llmapi_plan(spec: SpecView, checkpoint: str, tokenizer: str | None, *, max_seq_len: int,
                     kv_tokens: int | None) -> LlmApiPlan:
    """Resolve the trtllm runtime's settings; `kv_tokens` is the absolute KV budget per model instance, if known
    (the Plan's `kv_tokens`, which model.yaml carries)."""
    s, load = spec.llmapi, spec.validation.load
    isl, osl = load.input_tokens.mean, load.output_tokens.mean
    if kv_tokens is not None:
        sized = size_for(kv_tokens, isl, osl, s.pp_size)
        batch, tokens = sized.max_batch_size, sized.max_num_tokens
        sizing = {"source": "kv budget at input+output tokens (tensorrt_llm/bench/build/tuning.py)",
                  "kv_tokens": kv_tokens, "input_tokens": isl, "output_tokens": osl,
                  "kv_requests": round(sized.kv_requests, 2)}
    else:
        # A guess (serving.max_batch_size) would cap the engine below what the GPU holds; the LLM API's scheduler
        # admits what fits in the KV cache it sizes itself.
        batch, tokens = None, None
        sizing = {"source": "no KV budget known (plan with --inventory or set serving.kv_cache.max_tokens): "
                            "the LLM API's own max_batch_size and max_num_tokens"}
    batch = s.runtime_max_batch_size or batch
    tokens = s.max_num_tokens or tokens
    return LlmApiPlan(
        checkpoint_dir=checkpoint, tokenizer_dir=tokenizer, dtype=spec.model.dtype, tp=s.tp_size, pp=s.pp_size,
        max_batch_size=batch, max_num_tokens=tokens, max_seq_len=max_seq_len,
        kv_free_gpu_memory_fraction=spec.serving.kv_cache.free_gpu_mem_fraction,
        enable_block_reuse=spec.serving.kv_cache.enable_reuse, kv_cache_dtype=s.kv_cache_dtype,
        cuda_graph_batch_sizes=tuple(cuda_graph_batch_sizes(batch, s.cuda_graph_padding))
        if s.cuda_graphs and batch else (),
        cuda_graphs=s.cuda_graphs,
        cuda_graph_padding=s.cuda_graph_padding, enable_chunked_prefill=s.enable_chunked_prefill,
        trust_remote_code=s.trust_remote_code, sizing=sizing,
    )
