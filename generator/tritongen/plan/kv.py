"""The KV-cache budget per LLM instance, decided once while planning: what the deployment holds at once (its
sequences x the longest sequence, rounded up to whole blocks), bounded by the machine's memory.

On placement.device cpu the bound is the host's memory: serving.kv_cache.free_gpu_mem_fraction of the memory free
now, less the weights and one step's activations (placement.memory.MemoryModel.kv_token_budget with host=True).
On GPUs the placement (`--inventory`) bounds it per server group; without one the runtime applies the fraction to
the GPU memory free after its model loads, and the planner's budget is an upper limit on top.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from tritongen.errors import SpecError, problem
from tritongen.runtimes import planning
from tritongen.spec import Spec

GIB = 1 << 30


@dataclass(frozen=True)
class KVSizing:
    """The KV budget per LLM instance (None: the runtime sizes its own) and how it was decided, for the plan."""

    tokens: int | None
    how: str


def _gib(n: float) -> str:
    return f"{n / GIB:.2f} GiB"


def host_available_bytes() -> int:
    """Memory the host can give a new process now without swapping (what `free` calls available)."""
    import psutil

    return int(psutil.virtual_memory().available)


def need_tokens(spec: Spec, max_batch_size: int, max_seq_len: int) -> tuple[int, int] | None:
    """(sequences, tokens): what one instance holds at once, rounded up to whole KV blocks; None when the runtime
    keeps no KV cache or sizes its batch from the budget."""
    sequences = planning(spec.runtime).kv_sequences(spec, max_batch_size)
    if sequences is None:
        return None
    block = spec.serving.kv_cache.block_size
    return sequences, -(-sequences * max_seq_len // block) * block


def size_kv(spec: Spec, checkpoint: Path, max_batch_size: int, max_seq_len: int, *, placed: bool = False,
            available: int | None = None) -> KVSizing:
    """The budget before placement: serving.kv_cache.max_tokens when set (checked against the host's memory on
    CPU), else the deployment's need capped by the host's memory on CPU. Refuses (SpecError naming the field) a
    budget the host cannot hold, or a host that cannot hold one sequence. `placed`: a placement on an inventory
    bounds it per server group afterwards. `available`: host bytes (tests)."""
    kv = spec.serving.kv_cache
    need = need_tokens(spec, max_batch_size, max_seq_len)
    if kv.max_tokens is not None:
        tokens, how = kv.max_tokens, f"serving.kv_cache.max_tokens {kv.max_tokens}"
        if need is not None and kv.max_tokens > need[1] and not kv.enable_reuse:
            how += f" (more than the {need[1]} that {need[0]} sequences x max_seq_len {max_seq_len} need at once)"
    elif need is not None and kv.enable_reuse and spec.placement.device != "cpu":
        # Blocks of finished sequences serve later prefix hits, so a dedicated GPU's spare memory is not waste.
        fraction = f"free_gpu_mem_fraction {kv.free_gpu_mem_fraction} of"
        return KVSizing(None, "not bounded by the batch (serving.kv_cache.enable_reuse keeps finished sequences' "
                        "blocks for prefix hits): " + (f"{fraction} each server group's device (the placement)"
                                                       if placed else f"the runtime takes {fraction} the GPU memory "
                                                       "free after its model loads"))
    elif need is not None:
        tokens = need[1]
        how = (f"{tokens} = {need[0]} sequences (max_batch_size) x max_seq_len {max_seq_len}, rounded up to blocks "
               f"of {kv.block_size}")
    else:
        return KVSizing(None, "not set: the runtime sizes its own (a model with a KV cache takes free_gpu_mem_fraction "
                        f"{kv.free_gpu_mem_fraction} of the memory free after it loads), or keeps none")
    if placed:
        return KVSizing(tokens, how + "; each server group's capped by what free_gpu_mem_fraction "
                        f"{kv.free_gpu_mem_fraction} of its device holds (the placement)")
    if spec.placement.device != "cpu":
        return KVSizing(tokens, how + "; GPU memory: the runtime's free_gpu_mem_fraction "
                        f"{kv.free_gpu_mem_fraction} caps it at load (plan with --inventory to check it here)")
    return _on_host(spec, checkpoint, tokens, how, max_seq_len,
                    host_available_bytes() if available is None else available)


def _on_host(spec: Spec, checkpoint: Path, tokens: int, how: str, max_seq_len: int, available: int) -> KVSizing:
    from tritongen.placement.memory import load_memory_model

    kv = spec.serving.kv_cache
    try:
        memory = load_memory_model(checkpoint, dtype=None if spec.model.dtype == "auto" else spec.model.dtype)
    except SpecError as err:
        return KVSizing(tokens, how + f"; host memory not checked (the memory model does not cover this checkpoint: "
                        f"{err.problems[0]})")
    memory = dataclasses.replace(memory, tokens_per_block=kv.block_size)
    limit = memory.kv_token_budget(available, kv.free_gpu_mem_fraction, host=True)
    fraction = (f"free_gpu_mem_fraction {kv.free_gpu_mem_fraction} of the {_gib(available)} of host memory free "
                f"now, less {_gib(memory.host_fixed_bytes_per_instance)} of weights and activations, holds {limit} "
                f"tokens of {memory.kv_bytes_per_token} bytes")
    if kv.max_tokens is not None and tokens > limit:
        raise SpecError(problem("serving.kv_cache.max_tokens", f"{tokens} tokens ({_gib(tokens * memory.kv_bytes_per_token)}) "
                                f"do not fit on this host: {fraction}",
                                f"lower it to at most {limit}, or free host memory"))
    if limit < max_seq_len:
        raise SpecError(problem("serving.kv_cache.free_gpu_mem_fraction", f"not even one sequence of max_seq_len "
                                f"{max_seq_len} fits on this host: {fraction}",
                                "free host memory, raise the fraction, or shorten validation.load's sequences"))
    if tokens > limit:
        return KVSizing(limit, how + f"; capped to {limit} by host memory: {fraction}")
    return KVSizing(tokens, how + f"; host memory (RAM on placement.device cpu; free_gpu_mem_fraction "
                    f"{kv.free_gpu_mem_fraction} of what is free) holds it")
