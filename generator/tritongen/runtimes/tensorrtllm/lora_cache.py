"""The tensorrt_llm model's LoRA cache, sized from the declared adapters as TensorRT-LLM pages it.

TensorRT-LLM keeps LoRA weights in two paged caches per rank (host and GPU). How it sizes and fills them, read in
NVIDIA/TensorRT-LLM index copies (not tied to the 1.2.1 tag, which could not be read):
- cpp/tensorrt_llm/batch_manager/peftCacheManager.cpp (9df6d722) `getPageManagerConfig`: for every LoRA module of the
  engine oneD = localInDim + localOutDim; pageWidth = the smallest oneD; a page has
  max(optimal x sum(ceil(oneD / pageWidth)) x local layers, ceil(max x largest oneD / pageWidth)) slots of pageWidth
  values (the engine dtype); each cache must hold ceil(max x sum(oneD) x local layers / pageWidth) slots (one
  max-sized adapter) or the model fails to load. `getMaxNumSlots`: host slots = lora_cache_host_memory_bytes /
  (pageWidth x dtype bytes); GPU slots = lora_cache_gpu_memory_fraction x the GPU memory free when the cache is
  made / (pageWidth x dtype bytes). Optimal and max adapter sizes are clamped to the engine's max_lora_rank.
- cpp/tensorrt_llm/runtime/loraCache.cpp (c85e8726) `determineNumPages`: an adapter's rows (one per module and layer
  of this rank) go into pages in order, each taking ceil(rank x oneD / pageWidth) slots; a row that does not fit
  the page's remaining slots starts the next page.
- cpp/tensorrt_llm/runtime/loraModule.cpp (2a9abd95) `createLoraModules`: q/k/v, h_to_4h, gate split their output
  by tp, dense and 4h_to_h their input; dims (in, out): attn_q (hidden, heads x head_dim), attn_k / attn_v
  (hidden, kv_heads x head_dim), attn_dense (hidden, hidden), mlp_h_to_4h / mlp_gate (hidden, intermediate),
  mlp_4h_to_h (intermediate, hidden).
- cpp/tensorrt_llm/batch_manager/trtGptModelInflightBatching.cpp (b35ac1b6 and newer copies): the PEFT cache is
  made before the KV cache, so the GPU fraction is of the memory left by the engine and its buffers, and the KV
  cache's free_gpu_mem_fraction applies to what the LoRA cache leaves.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from tritongen.core import AdapterPlan
from tritongen.runtimes.tensorrtllm.lora import HF_TO_TRTLLM, MODULE_IDS, LoraBuild

DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}
_A = re.compile(r".*\.layers\.([0-9]+)\.(?:self_attn|mlp)\.([a-z_]+)\.lora_A\.weight.*")


class LoraCachePlan(BaseModel):
    """The planned LoRA cache of each rank: page geometry, pages per adapter, host and GPU sizes."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    optimal_adapter_size: int
    """lora_cache_optimal_adapter_size: the smallest declared rank, so the smallest adapter fills one page and a
    larger one a few (less rounding waste than pages sized for the largest)."""
    max_adapter_size: int
    """lora_cache_max_adapter_size: the engine's max_lora_rank."""
    page_bytes: int
    """One cache page: slots per page x page width x the engine dtype's bytes."""
    adapter_pages: tuple[int, ...]
    """Pages each adapter takes, in task-id order (the busiest pipeline rank)."""
    host_memory_bytes: int
    """lora_cache_host_memory_bytes: every declared adapter at once, so a prefetched adapter is never evicted."""
    gpu_adapters: int
    """Adapters the GPU cache holds at once: all of them, or the batch's worth when there are more."""
    gpu_cache_bytes: int
    """The GPU cache: the `gpu_adapters` largest adapters' pages; subtracted from the KV budget when placing."""


def module_dims(config: dict[str, Any], modules: Sequence[str], tp: int) -> dict[str, tuple[int, int]]:
    """(local in, local out) per TensorRT-LLM LoRA module of a llama-like checkpoint config, as one rank sees it."""
    hidden, mlp = config["hidden_size"], config["intermediate_size"]
    heads = config["num_attention_heads"]
    head_dim = config.get("head_dim") or hidden // heads
    kv = max(1, (config.get("num_key_value_heads") or heads) // tp) * head_dim
    full = {"attn_q": (hidden, heads * head_dim // tp), "attn_k": (hidden, kv), "attn_v": (hidden, kv),
            "attn_dense": (hidden // tp, hidden), "mlp_h_to_4h": (hidden, mlp // tp), "mlp_gate": (hidden, mlp // tp),
            "mlp_4h_to_h": (mlp // tp, hidden)}
    return {m: full[m] for m in modules}


def adapter_rows(adapter: AdapterPlan) -> list[tuple[int, str, int]]:
    """(layer, TensorRT-LLM module, rank) of each converted row, in the converted order (layer, then module id),
    from the safetensors header alone (lora_A is [rank, in])."""
    from safetensors import safe_open

    rows = []
    with safe_open(str(Path(adapter.path) / "adapter_model.safetensors"), "np") as f:
        for key in f.keys():
            m = _A.match(key)
            if m is not None and m.group(2) in HF_TO_TRTLLM:
                rows.append((int(m.group(1)), HF_TO_TRTLLM[m.group(2)], f.get_slice(key).get_shape()[0]))
    return sorted(rows, key=lambda r: (r[0], MODULE_IDS[r[1]]))


def _pages(rows: Sequence[tuple[int, str, int]], one_d: dict[str, int], width: int, per_page: int,
           layers: range) -> int:
    page = slot = 0
    for layer, module, rank in rows:
        if layer in layers:
            slots = -(-rank * one_d[module] // width)
            if slot + slots > per_page:
                page, slot = page + 1, 0
            slot += slots
    return page + 1


def size_lora_cache(lora: LoraBuild, adapters: Sequence[AdapterPlan], rows: Sequence[Sequence[tuple[int, str, int]]],
                    config: dict[str, Any], *, tp: int, pp: int, dtype: str, max_batch_size: int) -> LoraCachePlan:
    """The cache for `adapters` (with their `rows`, adapter_rows) on an engine with `lora`'s modules and max rank.
    Sized per rank for the pipeline rank that needs most; every rank gets the same parameters."""
    dims = module_dims(config, lora.target_modules, tp)
    one_d = {m: i + o for m, (i, o) in dims.items()}
    width = min(one_d.values())
    layers = config["num_hidden_layers"] // pp
    optimal = min(min(a.rank for a in adapters), lora.max_rank)
    largest = lora.max_rank
    per_page = max(optimal * sum(-(-d // width) for d in one_d.values()) * layers,
                   -(-largest * max(one_d.values()) // width))
    one_max_adapter = -(-(-(-largest * sum(one_d.values()) * layers // width)) // per_page)
    page_bytes = per_page * width * DTYPE_BYTES[dtype]
    pages = [max(_pages(r, one_d, width, per_page, range(p * layers, (p + 1) * layers)) for p in range(pp))
             for r in rows]
    on_gpu = min(len(pages), max_batch_size)
    host = max(sum(pages), one_max_adapter)
    gpu = max(sum(sorted(pages, reverse=True)[:on_gpu]), one_max_adapter)
    return LoraCachePlan(optimal_adapter_size=optimal, max_adapter_size=largest, page_bytes=page_bytes,
                         adapter_pages=tuple(pages), host_memory_bytes=host * page_bytes, gpu_adapters=on_gpu,
                         gpu_cache_bytes=gpu * page_bytes)


def gpu_memory_fraction(cache_bytes: int, free_bytes: int) -> float:
    """lora_cache_gpu_memory_fraction that gives at least `cache_bytes` of `free_bytes` (the GPU memory free after
    the engine and its buffers load), rounded up to 1e-4."""
    if free_bytes <= 0:
        return 1.0
    return min(1.0, math.ceil(cache_bytes / free_bytes * 10_000) / 10_000)


class LoraPlan(BaseModel):
    """Where the converted adapters are and the LoRA cache planned for them (the tensorrtllm section's)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    prefetch_dir: str
    """<engine cache>/lora/<content key>: a folder per task id with model.lora_weights.npy / model.lora_config.npy
    (`tritongen build` writes it), the tensorrt_llm model's lora_prefetch_dir."""
    cache: LoraCachePlan
    """The LoRA cache sized from the adapters (lora_cache_* parameters)."""


def lora_plan(lora: LoraBuild, adapters: Sequence[AdapterPlan], cache_dir: str, config: dict[str, Any], *, tp: int,
              pp: int, dtype: str, max_batch_size: int) -> LoraPlan:
    from tritongen.runtimes.tensorrtllm.lora import prefetch_key

    cache = size_lora_cache(lora, adapters, [adapter_rows(a) for a in adapters], config, tp=tp, pp=pp, dtype=dtype,
                            max_batch_size=max_batch_size)
    return LoraPlan(prefetch_dir=str(Path(cache_dir) / "lora" / prefetch_key(adapters)), cache=cache)


def cache_parameters(plan: LoraPlan, free_gpu_bytes: int | None, prefetch_dir: str | None = None) -> dict[str, str]:
    """The tensorrt_llm model's LoRA cache parameters. `free_gpu_bytes`: the GPU memory free after the engine loads
    on the smallest device of the server group (the placement's); None without a placement, when the GPU share
    stays the backend's documented 0.05. `prefetch_dir`: where the server sees the converted adapters (default the
    plan's folder)."""
    c = plan.cache
    fraction = "0.05" if free_gpu_bytes is None else f"{gpu_memory_fraction(c.gpu_cache_bytes, free_gpu_bytes):g}"
    return {"lora_cache_optimal_adapter_size": str(c.optimal_adapter_size),
            "lora_cache_max_adapter_size": str(c.max_adapter_size), "lora_cache_gpu_memory_fraction": fraction,
            "lora_cache_host_memory_bytes": str(c.host_memory_bytes), "lora_prefetch_dir": prefetch_dir or plan.prefetch_dir}
