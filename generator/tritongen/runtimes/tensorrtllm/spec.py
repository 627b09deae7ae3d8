"""The tensorrtllm runtime's section of the spec (`engine`): the engine build and the C++ backend's settings."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from tritongen.errors import problem
from tritongen.spec_base import Problems, RuntimeSection


class EngineSection(RuntimeSection):
    """TensorRT-LLM engine build and the C++ tensorrtllm backend's scheduling (runtime tensorrtllm)."""

    key = "engine"
    moved = {"engine.max_batch_size": "build_max_batch_size", "serving.batching_strategy": "batching_strategy",
             "serving.batch_scheduler_policy": "batch_scheduler_policy",
             "serving.enable_chunked_context": "enable_chunked_context"}

    tp_size: int = Field(1, ge=1)
    """Tensor-parallel degree of the engine."""

    pp_size: int = Field(1, ge=1)
    """Pipeline-parallel degree of the engine."""

    dtype: Literal["float16", "bfloat16", "float32"] = "bfloat16"
    """Activation/weight dtype used for checkpoint conversion."""

    quantization: Literal["none", "fp8", "int8_weight_only", "int4_weight_only", "int4_awq", "smoothquant"] = "none"
    """Quantisation applied at conversion (where TensorRT-LLM supports it for the architecture)."""

    kv_cache_dtype: Literal["auto", "fp8", "int8"] = "auto"
    """KV-cache dtype; `auto` follows `dtype`."""

    build_max_batch_size: int | None = Field(None, ge=1)
    """The engine's max batch size (trtllm-build --max_batch_size): the largest batch the engine is compiled for,
    which the served batch serving.max_batch_size cannot exceed. Unset: serving.max_batch_size (a change of the
    served batch then rebuilds the engine; pin it to serve several batch sizes from one engine)."""

    max_input_len: int = Field(2048, ge=1)
    """Longest prompt the engine accepts (tokens)."""

    max_seq_len: int = Field(4096, ge=2)
    """Longest prompt + completion (tokens)."""

    max_num_tokens: int | None = Field(None, ge=1)
    """Tokens per engine step (in-flight batching budget); default 8192."""

    max_beam_width: int = Field(1, ge=1)
    """Largest beam width the engine supports."""

    use_paged_context_fmha: bool = True
    """Needed for KV-cache reuse and chunked context."""

    gemm_plugin: Literal["auto", "float16", "bfloat16", "float32", "disable"] = "auto"
    """GEMM plugin dtype passed to trtllm-build (`auto` follows `dtype`)."""

    calibration_dataset: str | None = None
    """Local calibration dataset folder (a `datasets` folder with a text column) for the calibrated formats (fp8,
    int4_awq, smoothquant, an fp8/int8 KV cache). Unset, quantize.py downloads cnn_dailymail from the Hugging Face
    hub; a build without that network stops with exit 3."""

    engine_dir: str | None = None
    """Use an already built engine folder instead of building one (its config.json is checked against the spec)."""

    gpu_arch: str | None = Field(None, pattern=r"^sm[0-9]{2,3}[a-z]?$")
    """GPU architecture the engine is built for (`sm90` for H100/H200, `sm80` A100, `sm89` L40S, `sm100` B200): part
    of the engine cache key, so `plan`/`render`/`deploy` work off the GPU machine. Default: `--gpu-arch`, else the
    inventory's GPUs, else GPU 0 through NVML. `build` refuses a machine whose GPU differs."""

    cache_dir: str = "~/.cache/tritongen/engines"
    """Content-addressed engine cache."""

    batching_strategy: Literal["inflight_fused_batching", "inflight_batching"] = "inflight_fused_batching"
    """The backend's gpt_model_type (V1/static batching is deprecated upstream and not offered)."""

    batch_scheduler_policy: Literal["max_utilization", "guaranteed_no_evict"] = "guaranteed_no_evict"
    """The backend's scheduler policy (batch_scheduler_policy)."""

    enable_chunked_context: bool = False
    """Context chunking in the backend (enable_chunked_context; needs an engine built with use_paged_context_fmha)."""

    @model_validator(mode="after")
    def _lengths(self) -> EngineSection:
        if self.max_input_len >= self.max_seq_len:
            raise Problems(problem("engine.max_input_len", f"({self.max_input_len}) must be below engine.max_seq_len "
                                   f"({self.max_seq_len})", "raise max_seq_len or lower max_input_len"))
        return self
