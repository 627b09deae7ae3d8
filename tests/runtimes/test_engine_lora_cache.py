"""The tensorrt_llm model's LoRA cache planned from the adapters (runtimes/tensorrtllm/lora_cache.py): page geometry
and pages per adapter as TensorRT-LLM's PeftCacheManager / LoraCache compute them (worked by hand below), the
rendered lora_cache_* parameters, and the KV budget that shrinks by the GPU cache."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from tritongen.core import AdapterPlan
from tritongen.plan import plan_from_file
from tritongen.plan.show import plan_text
from tritongen.render import render_repository
from tritongen.runtimes.tensorrtllm.lora import LoraBuild
from tritongen.runtimes.tensorrtllm.lora_cache import gpu_memory_fraction, size_lora_cache
from tritongen.runtimes.tensorrtllm.runtime import lora_free_gpu_bytes

ROOT = Path(__file__).resolve().parents[2]
INVENTORY = ROOT / "tests" / "fixtures" / "inventories" / "h200-1x.yaml"
CONFIG = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
          "head_dim": 16, "num_hidden_layers": 2}


def _adapter(k: int, rank: int) -> AdapterPlan:
    return AdapterPlan(name=f"a{k}", task_id=k, path="/unused", rank=rank, alpha=float(rank),
                       target_modules=("q_proj", "v_proj"))


def test_pages_are_counted_as_tensorrt_llm_fills_them():
    # Engine modules attn_q (in 64, out 4 x 16 = 64: oneD 128) and attn_v (in 64, out 2 x 16 = 32: oneD 96), tp 1.
    # pageWidth = min oneD = 96. optimal 4 (the smallest rank), max 8, 2 layers:
    # slots per page = max(4 x (ceil(128/96) + ceil(96/96)) x 2 = 24, ceil(8 x 128 / 96) = 11) = 24;
    # one page = 24 x 96 values x 2 bytes (bfloat16) = 4608 bytes.
    # One max-sized adapter: ceil(8 x (128 + 96) x 2 / 96) = 38 slots = 2 pages (the cache's floor).
    # a1 rank 4, q and v of both layers: rows of ceil(4x128/96) = 6 and ceil(4x96/96) = 4 slots: 6+4+6+4 = 20: 1 page.
    # a2 rank 8, the same rows: 11, 8 | 11, 8 (the third row does not fit 24 - 19): 2 pages.
    # a3 rank 8, q of both layers only: 11 + 11 = 22: 1 page.
    lora = LoraBuild(target_modules=("attn_q", "attn_v"), max_rank=8)
    rows = [[(0, "attn_q", 4), (0, "attn_v", 4), (1, "attn_q", 4), (1, "attn_v", 4)],
            [(0, "attn_q", 8), (0, "attn_v", 8), (1, "attn_q", 8), (1, "attn_v", 8)],
            [(0, "attn_q", 8), (1, "attn_q", 8)]]
    adapters = [_adapter(1, 4), _adapter(2, 8), _adapter(3, 8)]
    cache = size_lora_cache(lora, adapters, rows, CONFIG, tp=1, pp=1, dtype="bfloat16", max_batch_size=2)
    assert (cache.optimal_adapter_size, cache.max_adapter_size, cache.page_bytes) == (4, 8, 4608)
    assert cache.adapter_pages == (1, 2, 1)
    assert cache.host_memory_bytes == 4 * 4608  # every adapter: 1 + 2 + 1 pages
    assert (cache.gpu_adapters, cache.gpu_cache_bytes) == (2, 3 * 4608)  # a batch of 2: the two largest, 2 + 1

    # One small adapter still gets room for one max-sized adapter (TensorRT-LLM refuses to load otherwise).
    small = size_lora_cache(lora, adapters[:1], rows[:1], CONFIG, tp=1, pp=1, dtype="bfloat16", max_batch_size=2)
    assert small.host_memory_bytes == small.gpu_cache_bytes == 2 * 4608

    # pp 2: each rank holds one layer; slots per page = max(4 x 3 x 1, 11) = 12. a2 per rank: 11, 8 -> 2 pages.
    # tp 2 splits q's output (64 -> 32) and v's (32 -> 16): oneD 96 and 80, width 80.
    pp2 = size_lora_cache(lora, adapters, rows, CONFIG, tp=1, pp=2, dtype="bfloat16", max_batch_size=8)
    assert pp2.adapter_pages == (1, 2, 1) and pp2.page_bytes == 12 * 96 * 2
    tp2 = size_lora_cache(lora, adapters, rows, CONFIG, tp=2, pp=1, dtype="float16", max_batch_size=8)
    # slots per page = max(4 x (ceil(96/80) + 1) x 2 = 24, ceil(8 x 96 / 80) = 10) = 24; a2 rows 10, 8, 10, 8 = 36.
    assert tp2.page_bytes == 24 * 80 * 2 and tp2.adapter_pages == (1, 2, 1)


def test_the_gpu_fraction_rounds_up():
    assert gpu_memory_fraction(1, 10_000_000) == 0.0001
    assert gpu_memory_fraction(3 * 4608, 4608 * 100) == 0.03
    assert gpu_memory_fraction(10, 0) == 1.0


@pytest.fixture(scope="module")
def lora_model(tmp_path_factory):
    from tritongen.demo.adapters import make_demo_adapters
    from tritongen.demo.model import make_demo_model

    model = make_demo_model(tmp_path_factory.mktemp("engine-lora-cache") / "tiny-llama")
    return model, make_demo_adapters(model, 3)


def _spec(tmp_path: Path, model: Path, adapters: list[Path]) -> Path:
    data = yaml.safe_load((ROOT / "examples" / "llama3-8b-trtllm.yaml").read_text())
    data["model"].update(checkpoint=str(model), adapters=[{"name": f"a{i}", "path": str(p)}
                                                          for i, p in enumerate(adapters, 1)])
    data["engine"]["cache_dir"] = str(tmp_path / "cache")
    data["engine"]["dtype"] = "float16"
    path = tmp_path / f"spec-{len(adapters)}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_the_demo_adapters_pages_from_their_files(lora_model, tmp_path):
    """The demo adapters (rank 4 q/v; rank 8 every module; rank 4 MLP) on an engine of every module, by hand.
    oneD: q 128, k 96, v 96, dense 128, h_to_4h 192, 4h_to_h 192, gate 192; width 96.
    Slots per page = max(4 x (2+1+1+2+2+2+2) x 2 = 96, ceil(8 x 192 / 96) = 16) = 96; page = 96 x 96 x 2 bytes.
    a1 (q, v at 4): per layer ceil(512/96) = 6 + 4 = 10: 20 slots, 1 page.
    a2 (all at 8): per layer 11+8+8+11+16+16+16 = 86; 86 + 86 > 96: 2 pages.
    a3 (gate, up, down at 4): per layer 3 x 8 = 24: 48 slots, 1 page.
    One max-sized adapter: ceil(8 x 1024 x 2 / 96) = 171 slots = 2 pages."""
    model, paths = lora_model
    _, plan = plan_from_file(_spec(tmp_path, model, paths))
    cache = plan.runtime_settings.lora.cache
    page = 96 * 96 * 2
    assert (cache.optimal_adapter_size, cache.max_adapter_size, cache.page_bytes) == (4, 8, page)
    assert cache.adapter_pages == (1, 2, 1)
    assert cache.host_memory_bytes == cache.gpu_cache_bytes == 4 * page


def test_the_rendered_config_carries_the_planned_cache_and_kv_shrinks_by_it(lora_model, tmp_path):
    model, paths = lora_model
    _, plain = plan_from_file(_spec(tmp_path, model, []), str(INVENTORY))
    _, plan = plan_from_file(_spec(tmp_path, model, paths), str(INVENTORY))
    cache = plan.runtime_settings.lora.cache
    device, plain_device = plan.placement.result.devices[0], plain.placement.result.devices[0]
    # The GPU cache is part of the instance's fixed memory; the KV budget is the fraction of what is left.
    assert device.headroom_bytes == plain_device.headroom_bytes + cache.gpu_cache_bytes
    free = device.memory_bytes - plain_device.weight_bytes - plain_device.headroom_bytes
    memory = plan.placement.memory
    per_token, block = memory.kv_bytes_per_token_per_rank, memory.tokens_per_block
    kv_fraction = plan.placement.result.kv_fraction
    assert plain_device.kv_tokens == int(free * kv_fraction) // per_token // block * block
    assert device.kv_tokens == int((free - cache.gpu_cache_bytes) * kv_fraction) // per_token // block * block
    assert device.kv_tokens < plain_device.kv_tokens
    assert lora_free_gpu_bytes(plan, None) == free

    files = render_repository(plan)
    config = text_format.Parse(files["tensorrt_llm/config.pbtxt"].decode(), model_config_pb2.ModelConfig())
    params = {k: v.string_value for k, v in config.parameters.items()}
    assert params["lora_cache_optimal_adapter_size"] == "4" and params["lora_cache_max_adapter_size"] == "8"
    assert int(params["lora_cache_host_memory_bytes"]) == cache.host_memory_bytes
    fraction = float(params["lora_cache_gpu_memory_fraction"])
    assert fraction * free >= cache.gpu_cache_bytes and (fraction - 0.0001) * free < cache.gpu_cache_bytes
    assert params["lora_prefetch_dir"] == plan.runtime_settings.lora.prefetch_dir
    assert params["max_tokens_in_paged_kv_cache"] == str(plan.kv_tokens)
    # The BLS resends a cache miss with the adapters the model prefetches.
    bls = text_format.Parse(files["tensorrt_llm_bls/config.pbtxt"].decode(), model_config_pb2.ModelConfig())
    assert bls.parameters["lora_dir"].string_value == plan.runtime_settings.lora.prefetch_dir
    plain_bls = text_format.Parse(render_repository(plain)["tensorrt_llm_bls/config.pbtxt"].decode(),
                                  model_config_pb2.ModelConfig())
    assert "lora_dir" not in plain_bls.parameters

    text = plan_text(plan)
    line = next(line for line in text.splitlines() if line.strip().startswith("LoRA cache"))
    assert f"all 3 adapters (4 pages of {cache.page_bytes / 1024:.1f} KiB" in line
    assert f"lora_cache_gpu_memory_fraction {params['lora_cache_gpu_memory_fraction']}" in line
    assert not any(line.strip().startswith("LoRA cache") for line in plan_text(plain).splitlines())
