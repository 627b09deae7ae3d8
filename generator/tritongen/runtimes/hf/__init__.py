"""The hf runtime: a python-backend `tensorrt_llm` model with the C++ model's tensor contract, on transformers'
continuous batching (tritongen.served.hf_model). runtime.py: the runtime; settings.py: its Plan section; spec.py: its
spec section."""

from tritongen.runtimes.hf.runtime import (CPU_MAX_BATCH_TOKENS, HF_BASE_IMAGE, HF_IMAGE, HF_UPSTREAM, RUNTIME,
                                           HfRuntime, hf_parameters, kv_cache_blocks)
from tritongen.runtimes.hf.settings import HFRuntimePlan
from tritongen.runtimes.hf.spec import HfSection

__all__ = ["CPU_MAX_BATCH_TOKENS", "HF_BASE_IMAGE", "HF_IMAGE", "HF_UPSTREAM", "HFRuntimePlan", "HfRuntime",
           "HfSection", "RUNTIME", "hf_parameters", "kv_cache_blocks"]
