"""The llmapi Triton model's contract as data (TensorRT-LLM 1.2.1, `triton_backend/all_models/llmapi`).

NVIDIA ships the model itself (`1/model.py`, `1/helpers.py`, in the container under TRTLLM.llmapi_model_dir);
tritongen renders only its `config.pbtxt` and `1/model.yaml`. The model reads `triton_config` from model.yaml
(max_batch_size, decoupled) in its auto_complete_config, so config.pbtxt carries neither, and passes every other
top-level key to `LLM(...)`: those keys must be fields of the release's LlmArgs. The tables below are the facts
tritongen relies on; tests/fixtures/nvidia/trtllm-1.2.1.json records what was read upstream (files, commits).

Left out on purpose: the multimodal `image_url` input and the LoRA inputs (text LLMs only; both are optional).
"""

from __future__ import annotations

from tritongen.contract import Tensor


def _rows(text: str) -> tuple[Tensor, ...]:
    out = []
    for line in text.strip().splitlines():
        name, dtype, dims, *flags = line.split()
        out.append(Tensor(name, "TYPE_" + dtype, tuple(int(d) for d in dims.split(",")), "opt" in flags))
    return tuple(out)


INPUTS = _rows("""
text_input STRING -1
streaming BOOL 1 opt
sampling_param_best_of INT32 1 opt
sampling_param_temperature FP32 1 opt
sampling_param_top_k INT32 1 opt
sampling_param_top_p FP32 1 opt
sampling_param_frequency_penalty FP32 1 opt
sampling_param_presence_penalty FP32 1 opt
sampling_param_max_tokens INT32 1 opt
sampling_param_stop STRING -1 opt
sampling_param_seed UINT64 1 opt
sampling_param_exclude_input_from_output BOOL 1 opt
sampling_param_return_perf_metrics BOOL 1 opt
return_finish_reason BOOL 1 opt
return_stop_reason BOOL 1 opt
return_cumulative_logprob BOOL 1 opt
stop BOOL 1 opt
""")

OUTPUTS = _rows("""
text_output STRING -1
finish_reason STRING -1
stop_reason STRING -1
cumulative_logprob FP32 -1
kv_cache_reused_block INT32 -1
kv_cache_missed_block INT32 -1
kv_cache_alloc_new_blocks INT32 -1
kv_cache_alloc_total_blocks INT32 -1
kv_cache_hit_rate FP32 -1
arrival_time_ns INT64 1
first_scheduled_time_ns INT64 1
first_token_time_ns INT64 1
last_token_time_ns INT64 1
acceptance_rate FP32 1
total_accepted_draft_tokens INT32 1
total_draft_tokens INT32 1
""")

# model.yaml keys tritongen writes, per LlmArgs class of the release (TorchLlmArgs and the BaseLlmArgs it extends).
LLM_ARGS_KEYS = frozenset({
    "model", "tokenizer", "backend", "dtype", "trust_remote_code", "tensor_parallel_size", "pipeline_parallel_size",
    "max_batch_size", "max_num_tokens", "max_seq_len", "kv_cache_config", "cuda_graph_config",
    "enable_chunked_prefill",
})
KV_CACHE_CONFIG_KEYS = frozenset({"free_gpu_memory_fraction", "max_tokens", "enable_block_reuse", "dtype"})
CUDA_GRAPH_CONFIG_KEYS = frozenset({"batch_sizes", "enable_padding"})
# What the model itself reads from model.yaml's triton_config block.
TRITON_CONFIG_KEYS = frozenset({"max_batch_size", "decoupled"})

# The model does not batch inside Triton (each request is one LLM.generate_async call); triton_config says 0.
TRITON_MAX_BATCH_SIZE = 0
