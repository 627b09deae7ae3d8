"""The `serving` section: Triton serving settings every runtime shares."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from tritongen.spec.kv_cache import KVCacheSection
from tritongen.spec_base import Section


class DynamicBatchingSection(Section):
    max_queue_delay_us: int = Field(0, ge=0)
    """Dynamic batcher max_queue_delay_microseconds (preprocessing and the LLM model)."""

    max_queue_size: int = Field(0, ge=0)
    """default_queue_policy.max_queue_size; 0 means unbounded. Requests beyond it are rejected."""


class ServingSection(Section):
    max_batch_size: int = Field(8, ge=1, le=4096)
    """Triton max_batch_size, the same in every model of the ensemble."""

    streaming: bool = True
    """Decoupled tensorrt_llm model: streamed tokens over gRPC ModelStreamInfer and HTTP generate_stream."""

    exclude_input_in_output: bool = True
    """Return only the completion, not the prompt."""

    max_tokens_default: int = Field(64, ge=1)
    """Completion length the examples and `tritongen generate` ask for when none is given."""

    preprocessing_instances: int = Field(1, ge=1)
    """Instance count of the tokenizer model."""

    postprocessing_instances: int = Field(1, ge=1)
    """Instance count of the detokenizer model."""

    dynamic_batching: DynamicBatchingSection = DynamicBatchingSection()
    """Queue settings of the dynamic batcher."""

    kv_cache: KVCacheSection = KVCacheSection()
    """KV-cache budget."""

    batching_strategy: Literal["inflight_fused_batching", "inflight_batching"] = "inflight_fused_batching"
    """tensorrtllm gpt_model_type (V1/static batching is deprecated and not offered)."""

    batch_scheduler_policy: Literal["max_utilization", "guaranteed_no_evict"] = "guaranteed_no_evict"
    """tensorrtllm scheduler policy."""

    enable_chunked_context: bool = False
    """tensorrtllm context chunking (needs an engine with use_paged_context_fmha)."""

    bls_instances: int | None = Field(None, ge=1)
    """tensorrt_llm_bls instances (the ensemble's only step). Streaming (decoupled): each instance serves many
    requests on threads; default min(4, max_batch_size). Not streaming: each serves one request at a time; default
    serving.max_batch_size."""

    bls: Literal["auto", "native", "python"] = "auto"
    """What runs tensorrt_llm_bls, the text path's per-token step. native: tritongen's C++ backend
    (tritongen_bls), which detokenises each LLM response inside tritonserver (no IPC round trip into a Python
    process per token); it needs a byte-level BPE or SentencePiece byte-fallback tokenizer (checked against the
    tokenizer when planning); the library is built by `make install` (generator/tritongen/native/build.sh) and, in
    deployments, by the serving image's builder stage. python: the python BLS (any tokenizer).
    Neither does speculative decoding: neither has a draft loop, and both refuse num_draft_tokens > 0. auto: native
    when the tokenizer allows it, else python."""

    bls_accumulate_tokens: bool = False
    """tensorrt_llm_bls streams the text of all tokens so far in each response (beam width 1)."""

    max_batch_tokens: int | None = Field(None, ge=1)
    """hf runtime: tokens per continuous-batching step (prefill chunking budget). None: 512 on CPU, and on GPU
    transformers sizes it from free memory."""

    stream_interval: int = Field(1, ge=1, le=1024)
    """hf and synthetic runtimes: tokens per streamed response (the final response carries the rest). Each response
    costs the serving path the same CPU whatever it carries (tritonserver, BLS, gRPC), so N > 1 divides that cost
    by about N at the price of text arriving in bursts of N tokens (mean ITL unchanged, as trtllm-serve's
    stream_interval). tensorrtllm/trtllm: 1 (the C++ backend sends a response per generated token)."""

    stream_flush_ms: int = Field(0, ge=0, le=10000)
    """hf runtime: send a streamed request's waiting tokens at most every N ms (0: every step). Tokens come from
    decode steps, so a response goes out at the first step N ms after the previous one, with every token since:
    clients see text at a steady pace with fewer responses when steps are faster than N ms, and each step's tokens
    still when steps are slower. Combined with stream_interval, both must be met (the final response carries the
    rest)."""

    cancellation_check_period_ms: int = Field(100, ge=1, le=10000)
    """hf runtime: how often the model asks Triton whether a client cancelled; a cancelled request stops
    generating within this period plus one step (TensorRT-LLM's parameter of the same name)."""

    sampling: Literal["per_request", "greedy"] = "per_request"
    """hf runtime: `per_request` honours temperature/top_k/top_p per request (sampling processors run for every
    request of a step, greedy ones as top_k=1); `greedy` runs no sampling processors (the fast path) and rejects
    requests that ask for sampling."""

    cuda_graphs: bool | None = None
    """hf runtime: CUDA graphs for the continuous-batching steps. None: on for GPU placement, off on CPU."""

    attention: Literal["sdpa_mem_efficient", "sdpa", "eager"] | None = None
    """hf runtime attention kernels. None: `sdpa_mem_efficient` on GPU (cuDNN and flash SDPA off: cuDNN attention
    builds a plan per new shape), `sdpa` on CPU."""

    log_probs: bool = True
    """hf runtime: compute log probs so requests may ask for them (return_log_probs); false rejects those requests."""
