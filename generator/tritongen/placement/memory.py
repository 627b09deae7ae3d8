"""Memory model of a decoder-only LLM: weights, KV cache per token, runtime headroom, KV token budget.

Input is either a Hugging Face checkpoint's config.json (the engine still to be built is described by the
overrides of `load_memory_model`) or a built TensorRT-LLM engine's config.json (``pretrained_config`` +
``build_config``; the engine decides everything).

Covered: llama-like dense decoders (Llama, Mistral, Qwen2, ...) with standard field names, GQA, gated or plain
MLPs. Mixture-of-experts configs are refused rather than mis-sized.

Definitions used by the planner (all per tensor/pipeline rank, per model instance):

* weights: the rank's share of the parameters. Linear layers are split by tp, layers by pp; the embedding table
  sits on the first pipeline rank (split by tp only with ``use_parallel_embedding``), lm_head on the last (always
  split by tp, as TensorRT-LLM does). Quantisation applies to linear layers only; embeddings, lm_head and norms
  stay in the activation dtype, which is TensorRT-LLM's default (lm_head is in its quantisation exclude list).
* headroom: `MemoryModel.headroom()`: CUDA context and libraries, one engine step's activations, float32 logits,
  NCCL buffers under tp/pp, and the runtime's LoRA cache when adapters are served. These are estimates from the constants below, not measurements; TensorRT-LLM's own
  accounting when the engine loads is what finally decides, so the planner errs high.
* free = device memory - instances x (weights + headroom).
* KV token budget (``max_tokens_in_paged_kv_cache``) per instance
  = floor(free x kv_fraction / instances / KV bytes per token), rounded down to whole KV blocks.
  That is what TensorRT-LLM's ``free_gpu_memory_fraction`` means (a fraction of what is free after the model is
  loaded), made absolute so that instances sharing a device cannot take each other's share.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from tritongen.errors import SpecError, problem

GIB = 1 << 30
MIB = 1 << 20

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}

# Estimates, not measurements of this exact build; they err high so that a plan which fits leaves slack.
CUDA_CONTEXT_BYTES = 1 * GIB
"""CUDA context + cuBLAS/cuBLASLt + TensorRT runtime libraries per process and device. A CUDA 12 context with lazy
loading takes roughly 0.3-0.6 GiB on Hopper; the libraries loaded by an engine add about as much again."""

NCCL_BYTES = 512 * MIB
"""NCCL communicator buffers per rank when tp x pp > 1 (a few channels of NCCL's 4 MiB default buffers per peer,
plus TensorRT-LLM's all-reduce workspace)."""

DEFAULT_MAX_NUM_TOKENS = 8192
"""TensorRT-LLM's default ``max_num_tokens`` (tokens per engine step), used when the config does not say."""

DEFAULT_MAX_BATCH_SIZE = 256
"""TensorRT-LLM's default ``max_batch_size`` before 0.12, used when the config does not say."""

DEFAULT_TOKENS_PER_BLOCK = 32
"""TensorRT-LLM's default paged KV block size (``tokens_per_block``)."""

LOGITS_BYTES = 4
"""Logits are float32 in TensorRT-LLM engines (``logits_dtype``)."""

# Bytes per weight of the quantised linear layers, by TensorRT-LLM quant_algo. Per-channel scales are too small
# to count; per-group scales (float16, one per group_size weights) are added for the grouped int4 algorithms.
QUANT_WEIGHT_BYTES = {"FP8": 1.0, "FP8_PER_CHANNEL_PER_TOKEN": 1.0, "FP8_BLOCK_SCALES": 1.0, "W8A16": 1.0,
                      "W8A8_SQ_PER_CHANNEL": 1.0, "W8A8_SQ_PER_CHANNEL_PER_TOKEN_PLUGIN": 1.0,
                      "W8A8_SQ_PER_TENSOR_PLUGIN": 1.0, "W4A16": 0.5, "W4A16_AWQ": 0.5, "W4A16_GPTQ": 0.5,
                      "W4A8_AWQ": 0.5, "NVFP4": 0.5 + 1 / 16}
_GROUPED = {"W4A16_AWQ", "W4A16_GPTQ", "W4A8_AWQ"}
KV_QUANT_BYTES = {"FP8": 1, "INT8": 1}

# Activations that decide gated vs. plain MLPs (gate, up and down projections vs. fc and proj).
_GATED_ACTS = {"silu", "swiglu", "geglu"}


@dataclass(frozen=True)
class ModelShape:
    """The architecture numbers that decide memory."""

    architecture: str
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    gated_mlp: bool = True
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    parallel_embedding: bool = False

    @property
    def linear_params_per_layer(self) -> int:
        q_out, kv_out = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        attention = self.hidden_size * (q_out + 2 * kv_out) + q_out * self.hidden_size
        return attention + (3 if self.gated_mlp else 2) * self.hidden_size * self.intermediate_size

    @property
    def other_params_per_layer(self) -> int:
        """Two norms, plus q/k/v biases where the architecture has them (Qwen2)."""
        bias = (self.num_heads + 2 * self.num_kv_heads) * self.head_dim if self.attention_bias else 0
        return 2 * self.hidden_size + bias

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def lm_head_params(self) -> int:
        return 0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size

    @property
    def param_count(self) -> int:
        per_layer = self.linear_params_per_layer + self.other_params_per_layer
        return self.embedding_params + self.num_layers * per_layer + self.hidden_size + self.lm_head_params


@dataclass(frozen=True)
class MemoryModel:
    """Memory of one model instance as built for a (tp, pp) mapping. Byte figures are ints."""

    source: str
    layout: Literal["hf", "engine"]
    """``hf`` (checkpoint config.json) or ``engine`` (TensorRT-LLM engine config.json)."""
    shape: ModelShape
    dtype: str
    quant_algo: str | None = None
    kv_cache_quant_algo: str | None = None
    group_size: int = 128
    tp: int = 1
    pp: int = 1
    max_batch_size: int | None = None
    """The engine's limit; None for a checkpoint (the build decides)."""
    max_seq_len: int | None = None
    """The engine's longest prompt + completion; None for a checkpoint."""
    max_num_tokens: int = DEFAULT_MAX_NUM_TOKENS
    tokens_per_block: int = DEFAULT_TOKENS_PER_BLOCK
    lora_cache_bytes: int = 0
    """GPU memory of the runtime's LoRA cache per rank and instance (TensorRT-LLM makes it before the KV cache, so
    it comes out of the memory the KV budget is a fraction of); 0 without adapters."""

    @property
    def world_size(self) -> int:
        return self.tp * self.pp

    @property
    def param_count(self) -> int:
        return self.shape.param_count

    @property
    def _linear_bytes_per_weight(self) -> float:
        if self.quant_algo is None:
            return DTYPE_BYTES[self.dtype]
        extra = 2 / self.group_size if self.quant_algo in _GROUPED else 0.0
        return QUANT_WEIGHT_BYTES[self.quant_algo] + extra

    def _layer_bytes(self, tp: int) -> float:
        s = self.shape
        return s.linear_params_per_layer * self._linear_bytes_per_weight / tp + \
            s.other_params_per_layer * DTYPE_BYTES[self.dtype]

    @property
    def weight_bytes(self) -> int:
        """All weights of one replica, all ranks together."""
        return math.ceil(self.shape.num_layers * self._layer_bytes(1) + (
            self.shape.embedding_params + self.shape.lm_head_params + self.shape.hidden_size)
            * DTYPE_BYTES[self.dtype])

    @property
    def weight_bytes_per_rank(self) -> int:
        """Weights on the busiest rank (see the module docstring for how they split)."""
        s, size = self.shape, DTYPE_BYTES[self.dtype]
        layers = math.ceil(s.num_layers / self.pp) * self._layer_bytes(self.tp)
        embedding = s.embedding_params * size / (self.tp if s.parallel_embedding else 1)
        head = (s.lm_head_params / self.tp + s.hidden_size) * size
        if self.pp == 1:
            return math.ceil(layers + embedding + head)
        return math.ceil(layers + max(embedding, head))

    @property
    def kv_dtype_bytes(self) -> int:
        return KV_QUANT_BYTES[self.kv_cache_quant_algo] if self.kv_cache_quant_algo else DTYPE_BYTES[self.dtype]

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V for every layer and KV head of one token, whole model: 2 x layers x kv_heads x head_dim x bytes."""
        s = self.shape
        return 2 * s.num_layers * s.num_kv_heads * s.head_dim * self.kv_dtype_bytes

    @property
    def kv_bytes_per_token_per_rank(self) -> int:
        """A rank holds kv_heads / tp heads (at least one: heads are replicated when tp > kv_heads) of its layers."""
        s = self.shape
        heads = max(1, math.ceil(s.num_kv_heads / self.tp))
        return 2 * math.ceil(s.num_layers / self.pp) * heads * s.head_dim * self.kv_dtype_bytes

    def headroom(self) -> dict[str, int]:
        """Runtime memory besides weights and KV cache per rank and instance, by cause (estimates)."""
        s, act = self.shape, DTYPE_BYTES[self.dtype]
        # One layer's live activations per token in a step (TensorRT-LLM reuses buffers across layers): the MLP's
        # up/gate output and activation, the fused QKV output and two hidden-state buffers (residual, output).
        per_token = (3 * s.intermediate_size // self.tp + (s.num_heads + 2 * s.num_kv_heads) * s.head_dim // self.tp
                     + 2 * s.hidden_size) * act
        batch = self.max_batch_size or DEFAULT_MAX_BATCH_SIZE
        parts = {"cuda_context": CUDA_CONTEXT_BYTES, "activations": per_token * self.max_num_tokens,
                 "logits": batch * math.ceil(s.vocab_size / self.tp) * LOGITS_BYTES}
        if self.world_size > 1:
            parts["nccl"] = NCCL_BYTES
        if self.lora_cache_bytes:
            parts["lora_cache"] = self.lora_cache_bytes
        return parts

    @property
    def runtime_headroom_bytes(self) -> int:
        return sum(self.headroom().values())

    @property
    def fixed_bytes_per_instance(self) -> int:
        """Weights + headroom of one instance on one rank: what must fit before any KV cache."""
        return self.weight_bytes_per_rank + self.runtime_headroom_bytes

    @property
    def host_fixed_bytes_per_instance(self) -> int:
        """Weights + activations + logits of one instance on a CPU, where one instance holds the whole model and
        there is no CUDA context or NCCL."""
        parts = self.headroom()
        return self.weight_bytes + parts["activations"] + parts["logits"]

    def kv_token_budget(self, device_bytes: int, kv_fraction: float, instances: int = 1, *,
                        host: bool = False) -> int:
        """max_tokens_in_paged_kv_cache per instance on a device of `device_bytes` (0 when nothing is left);
        `host`: the device is the CPU and `device_bytes` the host's free memory."""
        fixed = self.host_fixed_bytes_per_instance if host else self.fixed_bytes_per_instance
        free = device_bytes - instances * fixed
        if free <= 0:
            return 0
        per_token = self.kv_bytes_per_token if host else self.kv_bytes_per_token_per_rank
        tokens = int(free * kv_fraction / instances) // per_token
        return tokens - tokens % self.tokens_per_block

    def min_device_bytes(self, max_seq_len: int, kv_fraction: float, instances: int = 1) -> int:
        """Smallest device on which every instance can hold one sequence of `max_seq_len` tokens."""
        tokens = math.ceil(max_seq_len / self.tokens_per_block) * self.tokens_per_block
        kv = tokens * self.kv_bytes_per_token_per_rank
        return instances * self.fixed_bytes_per_instance + math.ceil(instances * kv / kv_fraction)


# ---------------------------------------------------------------------------------------------------- loading


def _require(config: dict[str, Any], key: str, where: str) -> Any:
    if key not in config:
        raise SpecError(problem(f"{where}.{key}", "is missing", "pass the config.json of a llama-like decoder"))
    return config[key]


def _shape(config: dict[str, Any], where: str, *, parallel_embedding: bool = False) -> ModelShape:
    # TensorRT-LLM engine configs carry a `moe` section with num_experts 0 for dense models.
    if config.get("num_local_experts") or config.get("num_experts") or (config.get("moe") or {}).get("num_experts"):
        raise SpecError(problem(where, "mixture-of-experts models are not modelled",
                                "place this model by hand; only dense decoders are modelled"))
    hidden, heads = _require(config, "hidden_size", where), _require(config, "num_attention_heads", where)
    return ModelShape(
        architecture=str(config.get("architecture") or (config.get("architectures") or ["unknown"])[0]),
        vocab_size=_require(config, "vocab_size", where), hidden_size=hidden,
        num_layers=_require(config, "num_hidden_layers", where), num_heads=heads,
        num_kv_heads=config.get("num_key_value_heads") or heads,
        # HF says head_dim, TensorRT-LLM head_size; both are optional when hidden_size / heads holds.
        head_dim=config.get("head_dim") or config.get("head_size") or hidden // heads,
        intermediate_size=_require(config, "intermediate_size", where),
        gated_mlp=config.get("hidden_act", "silu") in _GATED_ACTS,
        tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
        attention_bias=bool(config.get("attention_bias", config.get("attn_bias", False))),
        parallel_embedding=parallel_embedding)


def _check_algos(quant_algo: str | None, kv_algo: str | None, where: str) -> None:
    if quant_algo is not None and quant_algo not in QUANT_WEIGHT_BYTES:
        raise SpecError(problem(f"{where}.quant_algo", f"{quant_algo!r} is not modelled",
                                f"use one of {', '.join(QUANT_WEIGHT_BYTES)}"))
    if kv_algo is not None and kv_algo not in KV_QUANT_BYTES:
        raise SpecError(problem(f"{where}.kv_cache_quant_algo", f"{kv_algo!r} is not modelled",
                                f"use one of {', '.join(KV_QUANT_BYTES)}"))


def _checkpoint_quantisation(config: dict[str, Any]) -> tuple[str | None, str | None, int]:
    """(quant_algo, kv_cache_quant_algo, group_size) of an already quantised HF checkpoint."""
    q = config.get("quantization_config")
    if not q:
        return None, None, 128
    method, bits, group = q.get("quant_method"), q.get("bits"), q.get("group_size", 128)
    if method == "modelopt":
        return q.get("quant_algo"), q.get("kv_cache_quant_algo"), group
    if method == "fp8":
        return "FP8", None, group
    if method in ("awq", "gptq") and bits == 4:
        return ("W4A16_AWQ" if method == "awq" else "W4A16_GPTQ"), None, group
    raise SpecError(problem("config.quantization_config", f"quant_method {method!r} ({bits} bits) is not modelled",
                            "start from the unquantised checkpoint and set engine.quantization"))


def memory_from_hf_config(config: dict[str, Any], source: str = "config.json", *, dtype: str | None = None,
                          quant_algo: str | None = None, kv_cache_quant_algo: str | None = None,
                          tp: int = 1, pp: int = 1, max_batch_size: int | None = None,
                          max_num_tokens: int | None = None) -> MemoryModel:
    """Memory model of the engine to be built from a HF checkpoint; arguments override what the checkpoint says."""
    dtype = dtype or config.get("torch_dtype") or config.get("dtype") or "bfloat16"
    if dtype not in DTYPE_BYTES:
        raise SpecError(problem("config.torch_dtype", f"{dtype!r} is not modelled",
                                f"use one of {', '.join(DTYPE_BYTES)}"))
    shape = _shape(config, "config")
    if shape.num_layers % pp:
        raise SpecError(problem("engine.pp_size", f"{pp} does not divide the {shape.num_layers} layers",
                                "pick a pp_size that divides num_hidden_layers"))
    if shape.num_heads % tp:
        raise SpecError(problem("engine.tp_size", f"{tp} does not divide the {shape.num_heads} attention heads",
                                "pick a tp_size that divides num_attention_heads"))
    ckpt_algo, ckpt_kv, group = _checkpoint_quantisation(config)
    quant_algo, kv_cache_quant_algo = quant_algo or ckpt_algo, kv_cache_quant_algo or ckpt_kv
    _check_algos(quant_algo, kv_cache_quant_algo, "config.quantization")
    return MemoryModel(source, "hf", shape, dtype, quant_algo, kv_cache_quant_algo, group, tp, pp,
                       max_batch_size=max_batch_size, max_num_tokens=max_num_tokens or DEFAULT_MAX_NUM_TOKENS)


def memory_from_engine_config(config: dict[str, Any], source: str = "config.json") -> MemoryModel:
    """Memory model of a built TensorRT-LLM engine (its config.json: pretrained_config + build_config)."""
    pretrained, build = config["pretrained_config"], config.get("build_config") or {}
    where = "pretrained_config"
    shape = _shape(pretrained, where, parallel_embedding=bool(pretrained.get("use_parallel_embedding", False)))
    dtype = _require(pretrained, "dtype", where)
    if dtype not in DTYPE_BYTES:
        raise SpecError(problem(f"{where}.dtype", f"{dtype!r} is not modelled", f"use one of {', '.join(DTYPE_BYTES)}"))
    quant, mapping = pretrained.get("quantization") or {}, pretrained.get("mapping") or {}
    _check_algos(quant.get("quant_algo"), quant.get("kv_cache_quant_algo"), f"{where}.quantization")
    plugins = build.get("plugin_config") or {}
    return MemoryModel(
        source, "engine", shape, dtype, quant.get("quant_algo"), quant.get("kv_cache_quant_algo"),
        quant.get("group_size") or 128, mapping.get("tp_size", 1), mapping.get("pp_size", 1),
        max_batch_size=build.get("max_batch_size"), max_seq_len=build.get("max_seq_len"),
        max_num_tokens=build.get("max_num_tokens") or DEFAULT_MAX_NUM_TOKENS,
        tokens_per_block=plugins.get("tokens_per_block") or DEFAULT_TOKENS_PER_BLOCK)


# Spec fields that a build setting comes from, for messages about a built engine that disagrees with the spec.
_SPEC_FIELDS = {"dtype": "engine.dtype", "quant_algo": "engine.quantization", "kv_cache_quant_algo":
                "engine.kv_cache_dtype", "tp": "engine.tp_size", "pp": "engine.pp_size",
                "max_batch_size": "engine.build_max_batch_size", "max_num_tokens": "engine.max_num_tokens"}


def load_memory_model(path: str | Path, *, dtype: str | None = None, quant_algo: str | None = None,
                      kv_cache_quant_algo: str | None = None, tp: int | None = None, pp: int | None = None,
                      max_batch_size: int | None = None, max_num_tokens: int | None = None,
                      lora_cache_bytes: int = 0) -> MemoryModel:
    """Read a HF checkpoint or TensorRT-LLM engine config.json (or the folder holding it).

    The keyword arguments describe the engine to build from a checkpoint. A built engine decides for itself; an
    argument that disagrees with it is bad input (SpecError naming the spec field). `lora_cache_bytes` is the
    runtime's LoRA cache on each rank (planned from the adapters, not part of the engine).
    """
    p = Path(path)
    p = p / "config.json" if p.is_dir() else p
    try:
        config = json.loads(p.read_text())
    except FileNotFoundError:
        raise SpecError(problem(str(p), "not found",
                                "point at a checkpoint or engine folder with config.json")) from None
    except json.JSONDecodeError as err:
        raise SpecError(problem(str(p), f"is not valid JSON ({err})", "fix or regenerate the file")) from None
    asked = {"dtype": dtype, "quant_algo": quant_algo, "kv_cache_quant_algo": kv_cache_quant_algo, "tp": tp,
             "pp": pp, "max_batch_size": max_batch_size, "max_num_tokens": max_num_tokens}
    if "pretrained_config" not in config:
        model = memory_from_hf_config(config, str(p), **{**asked, "tp": tp or 1, "pp": pp or 1})
        return replace(model, lora_cache_bytes=lora_cache_bytes)
    model = memory_from_engine_config(config, str(p))
    mismatched = [problem(_SPEC_FIELDS[key], f"is {value!r} but the engine in {p.parent} was built with "
                          f"{getattr(model, key)!r}", "rebuild the engine or change the spec to match it")
                  for key, value in asked.items() if value is not None and value != getattr(model, key)]
    if mismatched:
        raise SpecError(mismatched)
    return replace(model, lora_cache_bytes=lora_cache_bytes)


def with_mapping(model: MemoryModel, tp: int, pp: int = 1) -> MemoryModel:
    """The same model built for another (tp, pp), e.g. to ask how many full GPUs a model would need."""
    return replace(model, tp=tp, pp=pp)
