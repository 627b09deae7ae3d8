"""Memory model: parameter counts, weight bytes by dtype/quantisation and sharding, KV bytes, KV token budgets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tritongen.errors import SpecError
from tritongen.placement.memory import (CUDA_CONTEXT_BYTES, GIB, NCCL_BYTES, load_memory_model, memory_from_engine_config,
                              memory_from_hf_config, with_mapping)

MODELS = Path(__file__).parents[1] / "fixtures" / "models"
HF_8B = MODELS / "llama-3.1-8b-hf"
ENGINE_8B = MODELS / "llama-3.1-8b-bf16-tp1-engine"
ENGINE_70B = MODELS / "llama-3.1-70b-fp8-tp4-engine"


def _hf_8b() -> dict:
    return json.loads((HF_8B / "config.json").read_text())


def _hf_70b() -> dict:
    return {**_hf_8b(), "hidden_size": 8192, "num_hidden_layers": 80, "num_attention_heads": 64,
            "intermediate_size": 28672}


def test_llama_8b_checkpoint():
    model = load_memory_model(HF_8B)
    assert (model.layout, model.dtype, model.tp, model.pp, model.quant_algo) == ("hf", "bfloat16", 1, 1, None)
    assert model.param_count == 8_030_261_248  # Meta's published 8.03B
    assert model.weight_bytes == 2 * 8_030_261_248  # bf16: about 16 GB
    assert model.kv_bytes_per_token == 128 * 1024  # 2 x 32 layers x 8 kv heads x 128 head_dim x 2 bytes
    assert model.weight_bytes_per_rank == model.weight_bytes


def test_llama_8b_engine_matches_checkpoint():
    engine, checkpoint = load_memory_model(ENGINE_8B / "config.json"), load_memory_model(HF_8B)
    assert engine.layout == "engine"
    assert engine.shape == checkpoint.shape
    assert (engine.weight_bytes, engine.kv_bytes_per_token) == (checkpoint.weight_bytes, checkpoint.kv_bytes_per_token)
    assert (engine.max_batch_size, engine.max_seq_len, engine.max_num_tokens, engine.tokens_per_block) == (
        64, 8192, 8192, 32)


def test_llama_70b_fp8_tp4_engine():
    model = load_memory_model(ENGINE_70B)
    assert (model.tp, model.pp, model.world_size, model.quant_algo, model.kv_cache_quant_algo) == (
        4, 1, 4, "FP8", "FP8")
    assert model.param_count == 70_553_706_496
    # FP8 linear layers (1 byte) + bf16 embedding and lm_head (2.1 GB each): about 70 GB.
    assert 70e9 < model.weight_bytes < 73e9
    # Per rank: a quarter of the layers and of lm_head, the whole (unsharded) embedding table.
    layers = 80 * model.shape.linear_params_per_layer / 4 + 80 * model.shape.other_params_per_layer * 2
    assert model.weight_bytes_per_rank == pytest.approx(layers + 128256 * 8192 * (2 + 2 / 4) + 8192 * 2, abs=2)
    assert model.kv_bytes_per_token == 2 * 80 * 8 * 128 * 1
    assert model.kv_bytes_per_token_per_rank == 2 * 80 * 2 * 128 * 1


def test_headroom_breakdown():
    single, parallel = load_memory_model(ENGINE_8B), load_memory_model(ENGINE_70B)
    assert single.headroom() == {
        "cuda_context": CUDA_CONTEXT_BYTES,
        "activations": (3 * 14336 + (32 + 16) * 128 + 2 * 4096) * 2 * 8192,
        "logits": 64 * 128256 * 4}
    assert parallel.headroom()["nccl"] == NCCL_BYTES
    assert single.runtime_headroom_bytes == sum(single.headroom().values())


def test_kv_token_budget_formula():
    model = load_memory_model(ENGINE_8B)
    device = 32 * GIB
    free = device - model.fixed_bytes_per_instance
    expected = int(free * 0.9) // model.kv_bytes_per_token_per_rank
    assert model.kv_token_budget(device, 0.9) == expected - expected % 32
    # Two instances: each pays its own weights and headroom, then halves what is left.
    two = int((64 * GIB - 2 * model.fixed_bytes_per_instance) * 0.9 / 2) // model.kv_bytes_per_token_per_rank
    assert model.kv_token_budget(64 * GIB, 0.9, instances=2) == two - two % 32 > 0
    assert model.kv_token_budget(device, 0.9, instances=2) == 0
    assert model.kv_token_budget(16 * GIB, 0.9) == 0  # the weights alone need more than a 1g.18gb


@given(max_seq_len=st.integers(1, 131072), kv_fraction=st.floats(0.01, 1.0), instances=st.integers(1, 4),
       tp=st.sampled_from([1, 2, 4, 8]))
def test_min_device_bytes_is_tight(max_seq_len, kv_fraction, instances, tp):
    model = with_mapping(load_memory_model(HF_8B), tp)
    need = model.min_device_bytes(max_seq_len, kv_fraction, instances)
    assert model.kv_token_budget(need, kv_fraction, instances) >= max_seq_len
    assert model.kv_token_budget(need - 32 * model.kv_bytes_per_token_per_rank, kv_fraction, instances) < max_seq_len


def test_tp_and_pp_sharding():
    model = load_memory_model(HF_8B)
    tp2, pp2 = with_mapping(model, 2), with_mapping(model, 1, 2)
    assert tp2.kv_bytes_per_token_per_rank == model.kv_bytes_per_token // 2
    assert pp2.kv_bytes_per_token_per_rank == model.kv_bytes_per_token // 2
    # tp beyond the KV heads replicates heads: each of 16 ranks still holds one of the 8.
    assert with_mapping(model, 16).kv_bytes_per_token_per_rank == 2 * 32 * 1 * 128 * 2
    # pp: the busiest rank holds half the layers plus the larger of embedding and lm_head.
    half_layers = 16 * (model.shape.linear_params_per_layer + model.shape.other_params_per_layer) * 2
    assert pp2.weight_bytes_per_rank == half_layers + 128256 * 4096 * 2 + 4096 * 2
    assert tp2.weight_bytes_per_rank < model.weight_bytes_per_rank < 2 * tp2.weight_bytes_per_rank


@pytest.mark.parametrize(("algo", "bytes_per_weight"), [
    (None, 2), ("FP8", 1), ("W8A16", 1), ("W4A16", 0.5), ("W4A16_AWQ", 0.5 + 2 / 128), ("NVFP4", 0.5 + 1 / 16)])
def test_weight_bytes_by_quantisation(algo, bytes_per_weight):
    model = memory_from_hf_config(_hf_8b(), quant_algo=algo)
    linear = 32 * model.shape.linear_params_per_layer
    rest = model.param_count - linear
    assert model.weight_bytes == pytest.approx(linear * bytes_per_weight + rest * 2, abs=1)


def test_kv_cache_quantisation_and_dtype():
    assert memory_from_hf_config(_hf_8b(), kv_cache_quant_algo="FP8").kv_bytes_per_token == 64 * 1024
    assert memory_from_hf_config(_hf_8b(), dtype="float32").kv_bytes_per_token == 256 * 1024


def test_70b_checkpoint_with_fp8_build_matches_engine():
    built, engine = memory_from_hf_config(_hf_70b(), quant_algo="FP8", kv_cache_quant_algo="FP8", tp=4), \
        load_memory_model(ENGINE_70B)
    assert (built.weight_bytes_per_rank, built.kv_bytes_per_token_per_rank) == (
        engine.weight_bytes_per_rank, engine.kv_bytes_per_token_per_rank)


def test_prequantised_checkpoints():
    fp8 = {**_hf_8b(), "quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic"}}
    assert memory_from_hf_config(fp8).quant_algo == "FP8"
    awq = {**_hf_8b(), "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 64}}
    assert (memory_from_hf_config(awq).quant_algo, memory_from_hf_config(awq).group_size) == ("W4A16_AWQ", 64)
    with pytest.raises(SpecError) as info:
        memory_from_hf_config({**_hf_8b(), "quantization_config": {"quant_method": "bitsandbytes", "bits": 4}})
    assert str(info.value) == ("config.quantization_config: quant_method 'bitsandbytes' (4 bits) is not modelled; "
                               "start from the unquantised checkpoint and set engine.quantization")


def test_tied_embeddings_and_plain_mlp():
    tied = memory_from_hf_config({**_hf_8b(), "tie_word_embeddings": True})
    assert tied.param_count == 8_030_261_248 - 128256 * 4096
    plain = memory_from_hf_config({**_hf_8b(), "hidden_act": "gelu"})
    assert plain.param_count == 8_030_261_248 - 32 * 4096 * 14336


def _spec_error(call) -> str:
    with pytest.raises(SpecError) as info:
        call()
    return str(info.value)


def test_refusals_name_the_fix():
    assert _spec_error(lambda: memory_from_hf_config({**_hf_8b(), "num_local_experts": 8})) == (
        "config: mixture-of-experts models are not modelled; place this model by hand; only dense decoders are "
        "modelled")
    config = _hf_8b()
    del config["intermediate_size"]
    assert _spec_error(lambda: memory_from_hf_config(config)) == (
        "config.intermediate_size: is missing; pass the config.json of a llama-like decoder")
    assert _spec_error(lambda: memory_from_hf_config(_hf_8b(), quant_algo="INT3")).startswith(
        "config.quantization.quant_algo: 'INT3' is not modelled; use one of FP8, ")
    assert _spec_error(lambda: memory_from_hf_config(_hf_8b(), tp=3)) == (
        "engine.tp_size: 3 does not divide the 32 attention heads; pick a tp_size that divides num_attention_heads")
    assert _spec_error(lambda: memory_from_hf_config(_hf_8b(), pp=5)) == (
        "engine.pp_size: 5 does not divide the 32 layers; pick a pp_size that divides num_hidden_layers")
    assert _spec_error(lambda: load_memory_model("/nonexistent")) == (
        "/nonexistent: not found; point at a checkpoint or engine folder with config.json")


def test_engine_moe_section_with_no_experts_is_dense():
    config = json.loads((ENGINE_8B / "config.json").read_text())
    assert config["pretrained_config"]["moe"]["num_experts"] == 0
    config["pretrained_config"]["moe"]["num_experts"] = 8
    assert _spec_error(lambda: memory_from_engine_config(config)).startswith(
        "pretrained_config: mixture-of-experts models are not modelled")


def test_engine_disagreeing_with_the_spec_fails_the_check():
    with pytest.raises(SpecError) as info:
        load_memory_model(ENGINE_70B, tp=2, quant_algo="FP8", max_batch_size=256)
    assert info.value.problems == [
        f"engine.tp_size: is 2 but the engine in {ENGINE_70B} was built with 4; rebuild the engine or change the "
        "spec to match it",
        f"engine.build_max_batch_size: is 256 but the engine in {ENGINE_70B} was built with 128; rebuild the engine or "
        "change the spec to match it"]
