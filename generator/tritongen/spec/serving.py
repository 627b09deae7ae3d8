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
    """The deployment's batch: Triton's max_batch_size in every model's config.pbtxt, the requests one LLM instance
    runs at once (hf, synthetic, vllm), and what the KV budget is sized for. The TensorRT-LLM limits are their own
    fields: engine.build_max_batch_size (the largest batch trtllm-build compiles the engine for; default this
    value) and llmapi.runtime_max_batch_size (the LLM API scheduler's batch, LlmArgs max_batch_size)."""

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

    ensemble: Literal["bls", "triton"] = "bls"
    """What serves the public `ensemble` model (NVIDIA's text I/O contract, the same tensors either way).
    bls: the BLS itself (serving.bls's backend) under the name `ensemble`: one hop fewer, and a client that leaves
    a stream stops generation within a few steps. triton: Triton's ensemble scheduler (`platform: "ensemble"`) with
    tensorrt_llm_bls as its only step, as NVIDIA's templates render it; it does not pass a client's cancellation on
    to the running step (triton-inference-server/server#6739), so generation runs to max_tokens after the client
    left, and each response takes one more hop (docs/serving-behaviour.md)."""

    bls_accumulate_tokens: bool = False
    """tensorrt_llm_bls streams the text of all tokens so far in each response (beam width 1)."""

    stream_interval: int = Field(1, ge=1, le=1024)
    """hf and synthetic runtimes: tokens per streamed response (the final response carries the rest). Each response
    costs the serving path the same CPU whatever it carries (tritonserver, BLS, gRPC), so N > 1 divides that cost
    by about N at the price of text arriving in bursts of N tokens (mean ITL unchanged, as trtllm-serve's
    stream_interval). tensorrtllm/trtllm: 1 (the C++ backend sends a response per generated token)."""
