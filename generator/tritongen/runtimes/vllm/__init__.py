"""The vllm runtime: Triton's vLLM backend serving the Hugging Face checkpoint (runtime.py says how). runtime.py: the
runtime; settings.py: its Plan section; dialect.py: how clients speak to its model; release.py: the pinned release.
It has no spec section of its own."""

from tritongen.runtimes.vllm.dialect import DIALECT, MODEL
from tritongen.runtimes.vllm.release import IMAGE, RELEASE, VLLM_PIN, VLLM_VERSION
from tritongen.runtimes.vllm.runtime import (BACKEND, CONTRACT_INPUTS, CONTRACT_OUTPUTS, ENGINE_ARGS_KEYS,
                                             GPU_MEMORY_UTILIZATION, MAX_LORA_RANKS, MULTI_LORA, RUNTIME, TRITONSERVER,
                                             VllmRuntime, engine_args, max_lora_rank, model_config)
from tritongen.runtimes.vllm.settings import VllmPlan

__all__ = ["BACKEND", "CONTRACT_INPUTS", "CONTRACT_OUTPUTS", "DIALECT", "ENGINE_ARGS_KEYS", "GPU_MEMORY_UTILIZATION",
           "IMAGE", "MAX_LORA_RANKS", "MODEL", "MULTI_LORA", "RELEASE", "RUNTIME", "TRITONSERVER", "VLLM_PIN",
           "VLLM_VERSION", "VllmPlan", "VllmRuntime", "engine_args", "max_lora_rank", "model_config"]
