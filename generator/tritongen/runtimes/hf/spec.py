"""The hf runtime's section of the spec (`hf`): the knobs of tritongen's python model on transformers."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from tritongen.errors import problem
from tritongen.spec_base import RuntimeSection

_FIELDS = ("max_batch_tokens", "stream_flush_ms", "cancellation_check_period_ms", "sampling", "cuda_graphs",
           "attention", "log_probs")


class HfSection(RuntimeSection):
    """The python model on transformers' continuous batching (runtime hf)."""

    key = "hf"
    moved = {f"serving.{name}": name for name in _FIELDS}

    max_batch_tokens: int | None = Field(None, ge=1)
    """Tokens per continuous-batching step (prefill chunking budget). None: 512 on CPU, and on GPU transformers sizes
    it from free memory."""

    stream_flush_ms: int = Field(0, ge=0, le=10000)
    """Send a streamed request's waiting tokens at most every N ms (0: every step). Tokens come from decode steps,
    so a response goes out at the first step N ms after the previous one, with every token since: clients see text
    at a steady pace with fewer responses when steps are faster than N ms, and each step's tokens still when steps
    are slower. Combined with serving.stream_interval, both must be met (the final response carries the rest)."""

    cancellation_check_period_ms: int = Field(100, ge=1, le=10000)
    """How often the model asks Triton whether a client cancelled; a cancelled request stops generating within this
    period plus one step (TensorRT-LLM's parameter of the same name)."""

    sampling: Literal["per_request", "greedy"] = "per_request"
    """`per_request` honours temperature/top_k/top_p per request (sampling processors run for every request of a
    step, greedy ones as top_k=1); `greedy` runs no sampling processors (the fast path) and rejects requests that
    ask for sampling."""

    cuda_graphs: bool | None = None
    """CUDA graphs for the continuous-batching steps. None: on for GPU placement, off on CPU."""

    attention: Literal["sdpa_mem_efficient", "sdpa", "eager"] | None = None
    """Attention kernels. None: `sdpa_mem_efficient` on GPU (cuDNN and flash SDPA off: cuDNN attention builds a plan
    per new shape), `sdpa` on CPU."""

    log_probs: bool = True
    """Compute log probs so requests may ask for them (return_log_probs); false rejects those requests."""

    def unused_problems(self) -> list[str]:
        if self.stream_flush_ms:
            return [problem("hf.stream_flush_ms", f"({self.stream_flush_ms}) is honoured by the hf runtime only",
                            "remove it (or set 0)")]
        return []
