"""The tensorrtllm runtime's section of the Plan: the engine build settings (what the engine cache key hashes) and the
C++ backend's settings."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from tritongen.runtimes.base import RuntimeSettings
from tritongen.runtimes.tensorrtllm.lora import LoraBuild
from tritongen.runtimes.tensorrtllm.lora_cache import LoraPlan


class BuildSettings(BaseModel):
    """Every value that reaches checkpoint conversion and trtllm-build, defaults resolved while planning.

    Exactly what the engine cache key hashes (besides the checkpoint's digest, the TensorRT-LLM version, the GPU
    architecture and, for the calibrated formats, the calibration data's digest).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    tp_size: int
    pp_size: int
    dtype: str
    quantization: str
    kv_cache_dtype: str
    max_batch_size: int
    """The engine's batch: engine.build_max_batch_size, else the Plan's max_batch_size (the engine follows the Triton
    batch unless pinned; NVIDIA's model_config.md keeps the two independent)."""
    max_input_len: int
    max_seq_len: int
    max_num_tokens: int
    max_beam_width: int
    use_paged_context_fmha: bool
    gemm_plugin: str
    # Fixed by tritongen: in-flight batching cannot run without them.
    kv_cache_type: Literal["paged"] = "paged"
    remove_input_padding: Literal[True] = True
    lora: LoraBuild | None = None
    """The LoRA plugin for the plan's adapters (None: no plugin; left out of the cache key then)."""

    @property
    def needs_calibration(self) -> bool:
        """Whether conversion goes through quantize.py (calibration data) rather than convert_checkpoint.py."""
        # convert_checkpoint.py handles plain and weight-only checkpoints without data; activation and KV-cache
        # quantisation need ModelOpt calibration, which only quantize.py does for every architecture.
        return self.quantization in ("fp8", "int4_awq", "smoothquant") or self.kv_cache_dtype != "auto"

    @property
    def world_size(self) -> int:
        return self.tp_size * self.pp_size


class TensorrtllmPlan(RuntimeSettings):
    """The TensorRT engine path (runtime tensorrtllm): which engine, how it is built, how the backend runs it."""

    runtime: Literal["tensorrtllm"] = "tensorrtllm"
    engine_dir: str
    """The engine folder the tensorrt_llm model loads (gpt_model_path)."""
    engine_key: str | None
    """The engine cache key when the engine is tritongen's cache entry; None for a given engine_dir."""
    cache_dir: str
    gpu_arch: str
    build: BuildSettings
    calibration_dataset: str | None = None
    """The local calibration dataset folder (absolute; engine.calibration_dataset) for the calibrated formats."""
    build_gpus: tuple[int, ...] = ()
    """The GPUs a docker build may use (placement.gpu_ids); empty: all of them."""
    batching_strategy: str
    batch_scheduler_policy: str
    kv_cache_free_gpu_mem_fraction: float
    kv_cache_host_memory_bytes: int
    enable_kv_cache_reuse: bool
    enable_chunked_context: bool
    gpu_device_ids: tuple[tuple[int, ...], ...] | None
    """Without a placement: the GPUs of the one model instance (placement.gpu_ids); None means all visible."""
    lora: LoraPlan | None = None
    """With adapters: the converted adapters' folder and the LoRA cache planned for them."""

    @property
    def world_size(self) -> int:
        return self.build.world_size
