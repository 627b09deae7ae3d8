// Generated from generator/tritongen/contract.py (bls_wiring) by tritongen.native.bls_wiring_header();
// do not edit: tests/native/test_build.py checks it is current.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace tritongen {
namespace bls {

// BLS input -> preprocessing input
inline const std::vector<std::pair<std::string, std::string>> kToPreprocessing = {
    {"text_input", "QUERY"},
    {"decoder_text_input", "DECODER_QUERY"},
    {"max_tokens", "REQUEST_OUTPUT_LEN"},
    {"bad_words", "BAD_WORDS_DICT"},
    {"stop_words", "STOP_WORDS_DICT"},
    {"embedding_bias_words", "EMBEDDING_BIAS_WORDS"},
    {"embedding_bias_weights", "EMBEDDING_BIAS_WEIGHTS"},
    {"end_id", "END_ID"},
    {"pad_id", "PAD_ID"},
    {"prompt_table_extra_id", "PROMPT_TABLE_EXTRA_ID"}};
// preprocessing output -> tensorrt_llm input
inline const std::vector<std::pair<std::string, std::string>> kFromPreprocessing = {
    {"REQUEST_INPUT_LEN", "input_lengths"},
    {"INPUT_ID", "input_ids"},
    {"REQUEST_DECODER_INPUT_LEN", "decoder_input_lengths"},
    {"DECODER_INPUT_ID", "decoder_input_ids"},
    {"REQUEST_OUTPUT_LEN", "request_output_len"},
    {"STOP_WORDS_IDS", "stop_words_list"},
    {"BAD_WORDS_IDS", "bad_words_list"},
    {"EMBEDDING_BIAS", "embedding_bias"},
    {"OUT_END_ID", "end_id"},
    {"OUT_PAD_ID", "pad_id"},
    {"OUT_PROMPT_TABLE_EXTRA_IDS", "prompt_table_extra_ids"}};
// BLS input -> tensorrt_llm input
inline const std::vector<std::pair<std::string, std::string>> kToLlm = {
    {"exclude_input_in_output", "exclude_input_in_output"},
    {"top_k", "runtime_top_k"},
    {"top_p", "runtime_top_p"},
    {"temperature", "temperature"},
    {"length_penalty", "len_penalty"},
    {"repetition_penalty", "repetition_penalty"},
    {"min_tokens", "min_tokens"},
    {"presence_penalty", "presence_penalty"},
    {"frequency_penalty", "frequency_penalty"},
    {"seed", "seed"},
    {"return_log_probs", "return_log_probs"},
    {"return_context_logits", "return_context_logits"},
    {"return_generation_logits", "return_generation_logits"},
    {"return_perf_metrics", "return_perf_metrics"},
    {"return_num_input_tokens", "return_num_input_tokens"},
    {"return_num_output_tokens", "return_num_output_tokens"},
    {"num_return_sequences", "num_return_sequences"},
    {"beam_width", "beam_width"},
    {"stream", "streaming"},
    {"prompt_embedding_table", "prompt_embedding_table"},
    {"prompt_vocab_size", "prompt_vocab_size"},
    {"lora_task_id", "lora_task_id"},
    {"lora_weights", "lora_weights"},
    {"lora_config", "lora_config"},
    {"guided_decoding_guide_type", "guided_decoding_guide_type"},
    {"guided_decoding_guide", "guided_decoding_guide"}};
// tensorrt_llm outputs returned as they are
inline const std::vector<std::string> kPassedOutputs = {
    "cum_log_probs",
    "output_log_probs",
    "context_logits",
    "generation_logits",
    "batch_index",
    "sequence_index",
    "kv_cache_alloc_new_blocks",
    "kv_cache_reused_blocks",
    "kv_cache_alloc_total_blocks",
    "arrival_time_ns",
    "first_scheduled_time_ns",
    "first_token_time_ns",
    "last_token_time_ns",
    "acceptance_rate",
    "total_accepted_draft_tokens",
    "total_draft_tokens",
    "num_input_tokens",
    "num_output_tokens"};

}  // namespace bls
}  // namespace tritongen
