"""The TensorRT-LLM Triton model contract (text path) as data.

Tensor names, data types, dims and flags of the official inflight_batcher_llm models (preprocessing,
tensorrt_llm, postprocessing, tensorrt_llm_bls, ensemble) and the ensemble wiring, as listed in
shared/reference/tensorrtllm_contract.md. Templates loop over these tables and `tritongen verify` checks a
repository against them, so the contract is written down once.

Left out on purpose: the multimodal tensors (images, video, vision/encoder features, mrope, cross-attention
masks); tritongen serves text LLMs. The official ensemble declares `kv_cache_alloc_total_blocks` twice; it is
declared once here.
"""

from __future__ import annotations

from dataclasses import dataclass

LOGITS = "${logits_datatype}"  # resolved per deployment (TYPE_FP32 unless the engine says otherwise)


@dataclass(frozen=True)
class Tensor:
    name: str
    data_type: str
    dims: tuple[int, ...]
    optional: bool = False
    reshape_scalar: bool = False
    ragged: bool = False

    def resolved(self, logits_datatype: str) -> Tensor:
        if self.data_type != LOGITS:
            return self
        return Tensor(self.name, logits_datatype, self.dims, self.optional, self.reshape_scalar, self.ragged)


def _t(spec: str) -> Tensor:
    """Parse one compact row: 'name TYPE dims [opt] [reshape] [ragged]' (dims like 1 or -1,-1)."""
    name, dtype, dims, *flags = spec.split()
    return Tensor(name, dtype if dtype.startswith("TYPE_") or dtype == LOGITS else "TYPE_" + dtype,
                  tuple(int(d) for d in dims.split(",")), "opt" in flags, "reshape" in flags, "ragged" in flags)


def _table(rows: str) -> tuple[Tensor, ...]:
    return tuple(_t(line) for line in rows.strip().splitlines())


PREPROCESSING_INPUTS = _table("""
QUERY STRING 1
DECODER_QUERY STRING 1 opt
REQUEST_OUTPUT_LEN INT32 1
BAD_WORDS_DICT STRING -1 opt
STOP_WORDS_DICT STRING -1 opt
EMBEDDING_BIAS_WORDS STRING -1 opt
EMBEDDING_BIAS_WEIGHTS FP32 -1 opt
END_ID INT32 1 opt
PAD_ID INT32 1 opt
PROMPT_TABLE_EXTRA_ID UINT64 1 opt
DETOKENIZER_TABLE_REQUEST INT32 1 opt
""")

PREPROCESSING_OUTPUTS = _table("""
INPUT_ID INT32 -1
REQUEST_INPUT_LEN INT32 1
DECODER_INPUT_ID INT32 -1
REQUEST_DECODER_INPUT_LEN INT32 1
BAD_WORDS_IDS INT32 2,-1
STOP_WORDS_IDS INT32 2,-1
EMBEDDING_BIAS FP32 -1
REQUEST_OUTPUT_LEN INT32 -1
OUT_END_ID INT32 1
OUT_PAD_ID INT32 1
OUT_PROMPT_TABLE_EXTRA_IDS UINT64 -1
DETOKENIZER_TABLE STRING 1
""")
# DETOKENIZER_TABLE_REQUEST / DETOKENIZER_TABLE are tritongen's, not NVIDIA's: the native BLS asks preprocessing
# (which owns the tokenizer) for the tokenizer's decoding as a table (generator/tritongen/served/detok_table.py).

TENSORRT_LLM_INPUTS = _table(f"""
input_ids INT32 -1 opt ragged
input_lengths INT32 1 reshape
request_output_len INT32 1 reshape
num_return_sequences INT32 1 opt reshape
draft_input_ids INT32 -1 opt ragged
decoder_input_ids INT32 -1 opt ragged
decoder_input_lengths INT32 1 opt reshape
draft_logits {LOGITS} -1,-1 opt ragged
draft_acceptance_threshold FP32 1 opt reshape
end_id INT32 1 opt reshape
pad_id INT32 1 opt reshape
stop_words_list INT32 2,-1 opt ragged
bad_words_list INT32 2,-1 opt ragged
embedding_bias FP32 -1 opt ragged
beam_width INT32 1 opt reshape
temperature FP32 1 opt reshape
runtime_top_k INT32 1 opt reshape
runtime_top_p FP32 1 opt reshape
runtime_top_p_min FP32 1 opt reshape
runtime_top_p_decay FP32 1 opt reshape
runtime_top_p_reset_ids INT32 1 opt reshape
len_penalty FP32 1 opt reshape
early_stopping BOOL 1 opt reshape
repetition_penalty FP32 1 opt reshape
min_tokens INT32 1 opt reshape
beam_search_diversity_rate FP32 1 opt reshape
presence_penalty FP32 1 opt reshape
frequency_penalty FP32 1 opt reshape
seed UINT64 1 opt reshape
return_log_probs BOOL 1 opt reshape
return_context_logits BOOL 1 opt reshape
return_generation_logits BOOL 1 opt reshape
return_perf_metrics BOOL 1 opt reshape
return_num_input_tokens BOOL 1 opt reshape
return_num_output_tokens BOOL 1 opt reshape
exclude_input_in_output BOOL 1 opt reshape
stop BOOL 1 opt reshape
streaming BOOL 1 opt reshape
prompt_embedding_table FP16 -1,-1 opt ragged
prompt_table_extra_ids UINT64 -1 opt ragged
prompt_vocab_size INT32 1 opt reshape
lora_task_id UINT64 1 opt reshape
lora_weights FP16 -1,-1 opt ragged
lora_config INT32 -1,3 opt ragged
context_phase_params UINT8 -1 opt ragged
retention_token_range_starts INT32 -1 opt ragged
retention_token_range_ends INT32 -1 opt ragged
retention_token_range_priorities INT32 -1 opt ragged
retention_token_range_durations_ms INT32 -1 opt ragged
retention_decode_priority INT32 1 opt ragged
retention_decode_duration_ms INT32 1 opt ragged
guided_decoding_guide_type STRING 1 opt ragged
guided_decoding_guide STRING 1 opt ragged
lookahead_window_size INT32 1 opt ragged
lookahead_ngram_size INT32 1 opt ragged
lookahead_verification_set_size INT32 1 opt ragged
""")

TENSORRT_LLM_OUTPUTS = _table(f"""
output_ids INT32 -1,-1
sequence_length INT32 -1
cum_log_probs FP32 -1
output_log_probs FP32 -1,-1
context_logits {LOGITS} -1,-1
generation_logits {LOGITS} -1,-1,-1
batch_index INT32 1
sequence_index INT32 1
context_phase_params UINT8 -1
kv_cache_alloc_new_blocks INT32 1
kv_cache_reused_blocks INT32 1
kv_cache_alloc_total_blocks INT32 1
arrival_time_ns INT64 1
first_scheduled_time_ns INT64 1
first_token_time_ns INT64 1
last_token_time_ns INT64 1
acceptance_rate FP32 1
total_accepted_draft_tokens INT32 1
total_draft_tokens INT32 1
num_input_tokens INT32 1
num_output_tokens INT32 1
""")

POSTPROCESSING_INPUTS = _table("""
TOKENS_BATCH INT32 -1,-1
SEQUENCE_LENGTH INT32 -1
""")

POSTPROCESSING_OUTPUTS = _table("""
OUTPUT STRING -1
""")

# text_input and max_tokens are optional here although every request needs them: tritonserver 2.51 does not check
# an ensemble's required inputs when enough others are present, and its scheduler then never runs a step whose
# input is missing, answering an empty response. Optional, the step runs and tensorrt_llm_bls names what is missing.
ENSEMBLE_INPUTS = _table("""
text_input STRING 1 opt
decoder_text_input STRING 1 opt
max_tokens INT32 1 opt
num_return_sequences INT32 1 opt
bad_words STRING -1 opt
stop_words STRING -1 opt
exclude_input_in_output BOOL 1 opt
end_id INT32 1 opt
pad_id INT32 1 opt
top_k INT32 1 opt
top_p FP32 1 opt
temperature FP32 1 opt
length_penalty FP32 1 opt
repetition_penalty FP32 1 opt
min_tokens INT32 1 opt
presence_penalty FP32 1 opt
frequency_penalty FP32 1 opt
seed UINT64 1 opt
return_log_probs BOOL 1 opt
return_context_logits BOOL 1 opt
return_generation_logits BOOL 1 opt
return_perf_metrics BOOL 1 opt
return_num_input_tokens BOOL 1 opt
return_num_output_tokens BOOL 1 opt
beam_width INT32 1 opt
stream BOOL 1 opt
prompt_embedding_table FP16 -1,-1 opt
prompt_table_extra_id UINT64 1 opt
prompt_vocab_size INT32 1 opt
embedding_bias_words STRING -1 opt
embedding_bias_weights FP32 -1 opt
lora_task_id UINT64 1 opt
lora_weights FP16 -1,-1 opt ragged
lora_config INT32 -1,3 opt ragged
guided_decoding_guide_type STRING 1 opt ragged
guided_decoding_guide STRING 1 opt ragged
""")

ENSEMBLE_OUTPUTS = _table(f"""
text_output STRING -1
cum_log_probs FP32 -1
output_log_probs FP32 -1,-1
context_logits {LOGITS} -1,-1
generation_logits {LOGITS} -1,-1,-1
batch_index INT32 1
sequence_index INT32 1
kv_cache_alloc_new_blocks INT32 1
kv_cache_reused_blocks INT32 1
kv_cache_alloc_total_blocks INT32 1
arrival_time_ns INT64 1
first_scheduled_time_ns INT64 1
first_token_time_ns INT64 1
last_token_time_ns INT64 1
acceptance_rate FP32 1
total_accepted_draft_tokens INT32 1
total_draft_tokens INT32 1
num_input_tokens INT32 1
num_output_tokens INT32 1
""")

BLS_INPUTS = _table("""
text_input STRING 1
decoder_text_input STRING 1 opt
max_tokens INT32 1
bad_words STRING -1 opt
stop_words STRING -1 opt
exclude_input_in_output BOOL 1 opt
end_id INT32 1 opt
pad_id INT32 1 opt
top_k INT32 1 opt
top_p FP32 1 opt
temperature FP32 1 opt
length_penalty FP32 1 opt
repetition_penalty FP32 1 opt
min_tokens INT32 1 opt
presence_penalty FP32 1 opt
frequency_penalty FP32 1 opt
seed UINT64 1 opt
return_log_probs BOOL 1 opt reshape
return_context_logits BOOL 1 opt reshape
return_generation_logits BOOL 1 opt reshape
num_return_sequences INT32 1 opt reshape
beam_width INT32 1 opt
stream BOOL 1 opt
prompt_embedding_table FP16 -1,-1 opt
prompt_vocab_size INT32 1 opt
prompt_table_extra_id UINT64 1 opt
embedding_bias_words STRING -1 opt
embedding_bias_weights FP32 -1 opt
num_draft_tokens INT32 1 opt
use_draft_logits BOOL 1 opt reshape
lora_task_id UINT64 1 opt reshape
lora_weights FP16 -1,-1 opt ragged
lora_config INT32 -1,3 opt ragged
return_perf_metrics BOOL 1 opt reshape
return_num_input_tokens BOOL 1 opt reshape
return_num_output_tokens BOOL 1 opt reshape
guided_decoding_guide_type STRING 1 opt
guided_decoding_guide STRING 1 opt
""")

BLS_OUTPUTS = tuple(t for t in ENSEMBLE_OUTPUTS)

# NVIDIA's ensemble wiring (reference/tensorrtllm_contract.md), kept as the record of what the composing models
# exchange; tensorrt_llm_bls sends the same tensors between the same models.
NVIDIA_ENSEMBLE_STEPS: tuple[tuple[str, dict[str, str], dict[str, str]], ...] = (
    ("preprocessing", {
        "QUERY": "text_input", "DECODER_QUERY": "decoder_text_input", "REQUEST_OUTPUT_LEN": "max_tokens",
        "BAD_WORDS_DICT": "bad_words", "STOP_WORDS_DICT": "stop_words",
        "EMBEDDING_BIAS_WORDS": "embedding_bias_words", "EMBEDDING_BIAS_WEIGHTS": "embedding_bias_weights",
        "END_ID": "end_id", "PAD_ID": "pad_id", "PROMPT_TABLE_EXTRA_ID": "prompt_table_extra_id",
    }, {
        "REQUEST_INPUT_LEN": "_REQUEST_INPUT_LEN", "INPUT_ID": "_INPUT_ID",
        "REQUEST_DECODER_INPUT_LEN": "_REQUEST_DECODER_INPUT_LEN", "DECODER_INPUT_ID": "_DECODER_INPUT_ID",
        "REQUEST_OUTPUT_LEN": "_REQUEST_OUTPUT_LEN", "STOP_WORDS_IDS": "_STOP_WORDS_IDS",
        "BAD_WORDS_IDS": "_BAD_WORDS_IDS", "EMBEDDING_BIAS": "_EMBEDDING_BIAS",
        "OUT_END_ID": "_PREPROCESSOR_END_ID", "OUT_PAD_ID": "_PREPROCESSOR_PAD_ID",
        "OUT_PROMPT_TABLE_EXTRA_IDS": "_OUT_PROMPT_TABLE_EXTRA_IDS",
    }),
    ("tensorrt_llm", {
        "input_ids": "_INPUT_ID", "decoder_input_ids": "_DECODER_INPUT_ID", "input_lengths": "_REQUEST_INPUT_LEN",
        "decoder_input_lengths": "_REQUEST_DECODER_INPUT_LEN", "exclude_input_in_output": "exclude_input_in_output",
        "request_output_len": "_REQUEST_OUTPUT_LEN", "end_id": "_PREPROCESSOR_END_ID",
        "pad_id": "_PREPROCESSOR_PAD_ID", "embedding_bias": "_EMBEDDING_BIAS", "runtime_top_k": "top_k",
        "runtime_top_p": "top_p", "temperature": "temperature", "len_penalty": "length_penalty",
        "repetition_penalty": "repetition_penalty", "min_tokens": "min_tokens",
        "presence_penalty": "presence_penalty", "frequency_penalty": "frequency_penalty", "seed": "seed",
        "return_log_probs": "return_log_probs", "return_context_logits": "return_context_logits",
        "return_generation_logits": "return_generation_logits", "return_perf_metrics": "return_perf_metrics",
        "return_num_input_tokens": "return_num_input_tokens",
        "return_num_output_tokens": "return_num_output_tokens",
        "num_return_sequences": "num_return_sequences", "beam_width": "beam_width", "streaming": "stream",
        "prompt_embedding_table": "prompt_embedding_table", "prompt_vocab_size": "prompt_vocab_size",
        "stop_words_list": "_STOP_WORDS_IDS", "bad_words_list": "_BAD_WORDS_IDS",
        "prompt_table_extra_ids": "_OUT_PROMPT_TABLE_EXTRA_IDS", "lora_task_id": "lora_task_id",
        "lora_weights": "lora_weights", "lora_config": "lora_config",
        "guided_decoding_guide_type": "guided_decoding_guide_type", "guided_decoding_guide": "guided_decoding_guide",
    }, {
        "output_ids": "_TOKENS_BATCH", "sequence_length": "_SEQUENCE_LENGTH",
        **{name: name for name in (
            "cum_log_probs", "output_log_probs", "context_logits", "generation_logits", "batch_index",
            "sequence_index", "kv_cache_alloc_new_blocks", "kv_cache_reused_blocks", "kv_cache_alloc_total_blocks",
            "arrival_time_ns", "first_scheduled_time_ns", "first_token_time_ns", "last_token_time_ns",
            "acceptance_rate", "total_accepted_draft_tokens", "total_draft_tokens", "num_input_tokens",
            "num_output_tokens")},
    }),
    ("postprocessing", {"TOKENS_BATCH": "_TOKENS_BATCH", "SEQUENCE_LENGTH": "_SEQUENCE_LENGTH"},
     {"OUTPUT": "text_output"}),
)

# Ensemble steps: (model, input_map {model tensor: ensemble tensor}, output_map {model tensor: ensemble tensor}).
# tritongen's ensemble is one step, tensorrt_llm_bls: streamed text is exact only when one model sees every
# response of a request (docs/streaming.md), and NVIDIA's three steps cannot carry state between responses.
ENSEMBLE_STEPS: tuple[tuple[str, dict[str, str], dict[str, str]], ...] = (
    ("tensorrt_llm_bls", {t.name: t.name for t in ENSEMBLE_INPUTS}, {t.name: t.name for t in ENSEMBLE_OUTPUTS}),
)

MODEL_TENSORS: dict[str, tuple[tuple[Tensor, ...], tuple[Tensor, ...]]] = {
    "preprocessing": (PREPROCESSING_INPUTS, PREPROCESSING_OUTPUTS),
    "tensorrt_llm": (TENSORRT_LLM_INPUTS, TENSORRT_LLM_OUTPUTS),
    "postprocessing": (POSTPROCESSING_INPUTS, POSTPROCESSING_OUTPUTS),
    "tensorrt_llm_bls": (BLS_INPUTS, BLS_OUTPUTS),
    "ensemble": (ENSEMBLE_INPUTS, ENSEMBLE_OUTPUTS),
}


def bls_parameters(accumulate_tokens: bool) -> dict[str, str]:
    """The `parameters` of tensorrt_llm_bls (every ensemble runtime's). Empty means "use the model's default"
    (get_valid_param_value)."""
    # accumulate_tokens re-decodes all tokens so far on every streamed response; it is only valid for beam 1.
    return {
        "accumulate_tokens": "true" if accumulate_tokens else "false",
        "tensorrt_llm_model_name": "tensorrt_llm",
        "tensorrt_llm_draft_model_name": "",
        "multimodal_encoders_name": "",
    }


def bls_wiring() -> dict[str, list]:
    """What tensorrt_llm_bls forwards between the models, derived from NVIDIA_ENSEMBLE_STEPS (the one source for
    both BLS implementations: bls/wiring.h for the native one, wiring.json beside the python one).

    to_preprocessing: [BLS input, preprocessing input]; from_preprocessing: [preprocessing output, tensorrt_llm
    input]; to_llm: [BLS input, tensorrt_llm input]; passed_outputs: tensorrt_llm outputs returned as they are."""
    (_, pre_in, pre_out), (_, llm_in, llm_out), _ = NVIDIA_ENSEMBLE_STEPS
    llm_by_source = {source: target for target, source in llm_in.items()}
    return {
        "to_preprocessing": [[source, target] for target, source in pre_in.items()],
        "from_preprocessing": [[output, llm_by_source[wire]] for output, wire in pre_out.items()
                               if wire in llm_by_source],
        "to_llm": [[source, target] for target, source in llm_in.items() if not source.startswith("_")],
        "passed_outputs": [name for name, wire in llm_out.items() if name == wire],
    }
