"""Runtime batch sizing for the LLM-API model, as trtllm-bench sizes it (tensorrt_llm/bench/build/tuning.py).

trtllm-bench derives how many requests of the target length (input + output tokens) the KV cache holds and then
rounds, slightly optimistically, to a max_batch_size and a max_num_tokens; the runtime's own scheduler then
admits what actually fits. tritongen feeds it the KV budget its placement computed (absolute tokens per model
instance) instead of trtllm-bench's memory estimate, so both settings follow the same budget the model.yaml
declares. Pure functions; the rounding rules are the ones of TensorRT-LLM 1.2.x.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# Caps trtllm-bench applies before rounding: decoder buffers grow with the batch, activations with the tokens.
MAX_BATCH_CAP = 4096
MAX_TOKENS_CAP = 32768


@dataclass(frozen=True)
class Sizing:
    """The two LLM settings and the numbers they came from."""

    max_batch_size: int
    max_num_tokens: int
    kv_requests: float
    """Requests of input_len + output_len tokens the KV budget holds at once."""


def kv_requests(kv_tokens: int, input_len: int, output_len: int) -> float:
    """How many requests of `input_len + output_len` tokens fit in `kv_tokens` of KV cache."""
    if input_len < 1 or output_len < 1:
        raise ValueError("input_len and output_len must be at least 1")
    return kv_tokens / (input_len + output_len)


def finetune(requests: float, input_len: int, output_len: int, pp_size: int = 1) -> tuple[int, int]:
    """(max_batch_size, max_num_tokens) from the KV capacity in requests, with trtllm-bench's rounding."""
    raw_bs = min(requests, MAX_BATCH_CAP) / pp_size
    raw_tokens = min(raw_bs * (1 + input_len / output_len), MAX_TOKENS_CAP)
    if raw_bs < 256:
        batch = max(64, 32 * math.ceil(raw_bs / 32))
    elif raw_bs < 1024:
        batch = 128 * math.ceil(raw_bs / 128)
    else:
        batch = 256 * math.ceil(raw_bs / 256)
    if raw_tokens < 4096:
        tokens = max(2048, 256 * math.ceil(raw_tokens / 256))
    elif raw_tokens < 8192:
        tokens = 512 * math.ceil(raw_tokens / 512)
    else:
        tokens = 1024 * math.ceil(raw_tokens / 1024)
    return batch, tokens


def size_for(kv_tokens: int, input_len: int, output_len: int, pp_size: int = 1) -> Sizing:
    """Sizing for a KV budget of `kv_tokens` per model instance and a workload of input_len/output_len."""
    requests = kv_requests(kv_tokens, input_len, output_len)
    batch, tokens = finetune(requests, input_len, output_len, pp_size)
    return Sizing(batch, tokens, requests)


def cuda_graph_batch_sizes(max_batch_size: int, padding: bool) -> list[int]:
    """The decode batch sizes TensorRT-LLM captures CUDA graphs for when given only max_batch_size.

    Written out in model.yaml so the captured sizes are reviewable and do not change with the runtime's defaults.
    """
    if padding:
        sizes = [1, 2, 4] + [8 * i for i in range(1, 17)]
        while sizes[-1] + 64 <= max_batch_size:
            sizes.append(sizes[-1] + 64)
    else:
        sizes = list(range(1, 32)) + [32, 64, 128]
        sizes += [2 ** i for i in range(8, math.ceil(math.log2(max_batch_size)))] if max_batch_size > 1 else []
    sizes = sorted(s for s in sizes if s <= max_batch_size)
    if not sizes or sizes[-1] != max_batch_size:
        sizes.append(max_batch_size)
    return sizes
