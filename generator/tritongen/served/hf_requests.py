# Shipped by tritongen, next to model.py of the hf runtime's `tensorrt_llm` model.
"""Request checks and responses of the hf runtime: every input is honoured or rejected by name, before the request
enters the batch, and no output carries an invented value.

Honoured: input_ids, input_lengths, request_output_len, end_id (-1: no end), pad_id, exclude_input_in_output,
streaming, temperature, runtime_top_k, runtime_top_p, min_tokens (end_id masked until then, as TensorRT-LLM does),
stop_words_list, return_log_probs (log-probability of each generated token under the distribution it was chosen
from), return_num_input_tokens, return_num_output_tokens (per response, as the C++ backend counts: see
response_for), return_perf_metrics (arrival/first/last token times).
Neutral values accepted, anything else rejected with the input's name: beam_width 1, num_return_sequences 1,
repetition_penalty 1, presence_penalty 0, frequency_penalty 0, runtime_top_p_decay 1, return_context_logits and
return_generation_logits false, stop false, empty bad_words_list, all-zero embedding_bias, seed only on greedy
requests. Beam-search-only inputs (len_penalty, early_stopping, beam_search_diversity_rate) have no effect at
beam_width 1 and are accepted. lora_task_id selects one of the deployment's LoRA adapters (0: the base model;
hf_adapters.py); an unknown id is rejected with the known ones. Guided decoding (guided_decoding_guide_type /
guided_decoding_guide) is read and compiled by hf_guided.py. Draft, LoRA weights/config (adapters load from the
spec, not per request), prompt-table, lookahead, retention and disaggregation inputs are rejected when they carry
data.
"""

import math
import threading
import time
from dataclasses import dataclass, field

import numpy as np
import torch
import triton_python_backend_utils as pb_utils
from transformers.generation.continuous_batching.cb_logits_processors import ContinuousBatchingLogitsProcessor

from .error_kinds import BAD_REQUEST, CONTEXT_LENGTH_EXCEEDED, RequestError, wrap
from .hf_adapters import BASE

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL

# Inputs this runtime cannot honour: rejected as soon as they carry data.
UNSUPPORTED = ("draft_input_ids", "draft_logits", "decoder_input_ids", "prompt_embedding_table",
               "lora_weights", "lora_config", "context_phase_params", "retention_token_range_starts",
               "retention_token_range_ends", "retention_token_range_priorities",
               "retention_token_range_durations_ms", "retention_decode_priority", "retention_decode_duration_ms",
               "lookahead_window_size",
               "lookahead_ngram_size", "lookahead_verification_set_size")
# Inputs with one neutral value (anything else is rejected).
NEUTRAL = (("beam_width", 1, int), ("num_return_sequences", 1, int), ("repetition_penalty", 1.0, float),
           ("presence_penalty", 0.0, float), ("frequency_penalty", 0.0, float), ("runtime_top_p_decay", 1.0, float),
           ("return_context_logits", False, bool), ("return_generation_logits", False, bool), ("stop", False, bool))


def _refuse(name, problem, kind=BAD_REQUEST):
    """The error of a request this model will not run: `name: problem`, tagged with its kind and input."""
    return RequestError(f"{name}: {problem}", kind, name)


@dataclass(frozen=True)
class Limits:
    vocab: int
    end_id: int
    pad_id: int
    block_size: int
    num_blocks: int
    kv_tokens: int
    max_position_embeddings: int | None
    sampling: bool
    log_probs: bool
    decoupled: bool
    exclude_default: bool
    adapters: object = None
    """hf_adapters.Adapters of this model, or None without adapters."""

    @property
    def max_total(self) -> int:
        return min(self.kv_tokens, self.max_position_embeddings or self.kv_tokens)

    def describe_total(self) -> str:
        parts = [f"KV cache {self.kv_tokens} tokens ({self.num_blocks} blocks of {self.block_size})"]
        if self.max_position_embeddings:
            parts.append(f"max_position_embeddings {self.max_position_embeddings}")
        return ", ".join(parts)


@dataclass(eq=False)
class Generation:
    """One Triton request in flight."""

    sender: object
    prompt: list
    max_new: int
    streaming: bool
    exclude_input: bool
    end_id: int
    min_tokens: int
    stops: list
    want_counts: tuple
    want_perf: bool
    want_log_probs: bool
    kwargs: dict
    adapter: str = BASE
    """The PEFT adapter name this request runs with (lora_task_id); BASE: the base model."""
    rid: str = ""
    tokens: list = field(default_factory=list)  # accepted completion tokens
    logprobs: list = field(default_factory=list)
    sent: int = 0  # completion tokens already streamed
    sent_at: float = 0.0  # time.monotonic() of the last streamed response (stream_flush_ms)
    seen: int = 0  # tokens consumed from the manager's cumulative output
    arrival_ns: int = field(default_factory=time.time_ns)
    first_token_ns: int = 0
    last_token_ns: int = 0
    first_sent_ns: int = 0  # the first and the last response with tokens went out (the model's own timings)
    last_sent_ns: int = 0
    guided: object = None  # hf_guided.Guided: the request's grammar matcher
    closed: bool = False  # FINAL sent
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def stop_id(self) -> int:
        return self.end_id


def _array(request, name):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return None if tensor is None else tensor.as_numpy()


def _scalar(request, name, cast, default=None):
    value = _array(request, name)
    if value is None:
        return default
    if value.ndim > 0 and value.shape[0] != 1:
        raise _refuse(name, f"batch size per request must be 1, got shape {list(value.shape)}")
    if value.size == 0:
        return default
    if value.size != 1:
        raise _refuse(name, f"expected one value, got shape {list(value.shape)}")
    kind = value.dtype.kind
    if cast is bool and kind != "b" or cast is int and kind not in "iu" or cast is float and kind not in "fiu":
        raise _refuse(name, f"wrong data type {value.dtype}; see the model's config.pbtxt")
    item = value.reshape(-1)[0].item()
    if cast is float and not math.isfinite(item):
        raise _refuse(name, f"{item} is not a finite number")
    return cast(item)


def _word_sequences(request, name, vocab):
    """Decode TensorRT-LLM's [1, 2, N] word-list layout (ids, then end offsets padded with -1) into sequences."""
    value = _array(request, name)
    if value is None or value.size == 0:
        return []
    if value.ndim == 2:
        value = value[np.newaxis]
    if value.ndim != 3 or value.shape[0] != 1 or value.shape[1] != 2:
        raise _refuse(name, f"expected shape [1, 2, N] (ids, then end offsets), got {list(value.shape)}")
    ids, offsets = value[0, 0].tolist(), [o for o in value[0, 1].tolist() if o >= 0]
    if any(b <= a for a, b in zip(offsets, offsets[1:])) or (offsets and offsets[-1] > len(ids)):
        raise _refuse(name, f"end offsets {offsets} must increase and stay within the {len(ids)} ids")
    words = [ids[start:end] for start, end in zip([0] + offsets[:-1], offsets) if end > start]
    for word in words:
        if any(t < 0 or t >= vocab for t in word):
            raise _refuse(name, f"token ids must be in [0, {vocab})")
    return words


def _reject_unsupported(request):
    for name in UNSUPPORTED:
        value = _array(request, name)
        if value is not None and value.size and (value.dtype.kind == "O" or np.any(value != 0)):
            raise _refuse(name, "not supported by the hf runtime; leave it unset")
    for name, neutral, cast in NEUTRAL:
        value = _scalar(request, name, cast, neutral)
        if value != neutral:
            raise _refuse(name, f"not supported by the hf runtime (only {neutral!r}); leave it unset")
    bias = _array(request, "embedding_bias")
    if bias is not None and bias.size and np.any(bias != 0):
        raise _refuse("embedding_bias", "not supported by the hf runtime; leave it unset")


def _prompt(request, limits):
    ids = _array(request, "input_ids")
    if ids is None:
        raise _refuse("input_ids", "required")
    if ids.dtype.kind not in "iu":
        raise _refuse("input_ids", f"wrong data type {ids.dtype}; expected INT32 token ids")
    if ids.ndim > 1 and ids.shape[0] != 1:
        raise _refuse("input_ids", f"batch size per request must be 1, got shape {list(ids.shape)}")
    ids = ids.reshape(-1)
    length = _scalar(request, "input_lengths", int, ids.size)
    if length < 1 or ids.size == 0:
        raise _refuse("input_ids", "the prompt is empty (0 tokens); send at least one token")
    if length > ids.size:
        raise _refuse("input_lengths", f"{length} is more than the {ids.size} input_ids sent")
    if length > limits.max_total:
        raise _refuse("input_ids", f"{length} tokens exceed the model's limit of {limits.max_total} tokens "
                      f"({limits.describe_total()}); shorten the prompt", CONTEXT_LENGTH_EXCEEDED)
    ids = ids[:length]
    low, high = int(ids.min()), int(ids.max())
    if low < 0 or high >= limits.vocab:
        bad = low if low < 0 else high
        raise _refuse("input_ids", f"token id {bad} is outside the vocabulary [0, {limits.vocab})")
    return ids.astype(np.int64).tolist()


def parse_request(request, sender, limits: Limits) -> Generation:
    """Check everything before the request enters the batch; raise RequestError naming the input and the limit."""
    _reject_unsupported(request)
    prompt = _prompt(request, limits)
    max_new = _scalar(request, "request_output_len", int)
    if max_new is None:
        raise _refuse("request_output_len", "required")
    if max_new < 1:
        raise _refuse("request_output_len", f"{max_new} is less than 1")
    if len(prompt) + max_new > limits.max_total:
        raise _refuse(
            "request_output_len", f"{len(prompt)} input tokens + {max_new} = {len(prompt) + max_new} exceeds the "
            f"model's limit of {limits.max_total} tokens ({limits.describe_total()}); ask for at most "
            f"{limits.max_total - len(prompt)} tokens")
    end_id = _scalar(request, "end_id", int, limits.end_id)
    if end_id != -1 and not 0 <= end_id < limits.vocab:
        raise _refuse("end_id", f"{end_id} is outside the vocabulary [0, {limits.vocab}) (-1: no end token)")
    pad_id = _scalar(request, "pad_id", int, limits.pad_id)
    if not 0 <= pad_id < limits.vocab:
        raise _refuse("pad_id", f"{pad_id} is outside the vocabulary [0, {limits.vocab})")
    min_tokens = _scalar(request, "min_tokens", int, 0)
    if min_tokens < 0:
        raise _refuse("min_tokens", f"{min_tokens} is negative")
    streaming = _scalar(request, "streaming", bool, False)
    if streaming and not limits.decoupled:
        raise _refuse("streaming", "this model is not decoupled, so it cannot stream; send streaming=false")
    kwargs, greedy = _sampling(request, limits)
    if _scalar(request, "seed", int, None) is not None and not greedy:
        raise _refuse("seed", "transformers' continuous batching has no per-request seed; leave it unset")
    want_log_probs = _scalar(request, "return_log_probs", bool, False)
    if want_log_probs and not limits.log_probs:
        raise _refuse("return_log_probs", "log probs are off for this deployment (model parameter log_probs)")
    if want_log_probs and greedy and limits.sampling:
        raise _refuse("return_log_probs", "with per-request sampling a greedy request is decoded as top_k=1, "
                      "whose log probs are all 0; send runtime_top_k/runtime_top_p, or deploy with sampling: greedy")
    adapter = _adapter(request, limits)
    min_tokens = min(min_tokens, max_new)
    if min_tokens and end_id != -1:
        kwargs.update(tritongen_min_tokens=int(min_tokens), tritongen_end_id=int(end_id))
    return Generation(
        sender=sender, prompt=prompt, max_new=max_new, streaming=streaming,
        exclude_input=_scalar(request, "exclude_input_in_output", bool, limits.exclude_default),
        end_id=end_id, min_tokens=min_tokens, stops=_word_sequences(request, "stop_words_list", limits.vocab),
        want_counts=(_scalar(request, "return_num_input_tokens", bool, False),
                     _scalar(request, "return_num_output_tokens", bool, False)),
        want_perf=_scalar(request, "return_perf_metrics", bool, False), want_log_probs=want_log_probs,
        kwargs=kwargs, adapter=adapter)


def _adapter(request, limits):
    """The adapter lora_task_id names (TensorRT-LLM's UINT64 input; 0 or absent: the base model)."""
    task_id = _scalar(request, "lora_task_id", int, 0)
    if task_id == 0:
        return BASE
    if limits.adapters is None:
        raise _refuse("lora_task_id", f"{task_id} names a LoRA adapter, and this deployment serves none (only 0, "
                      "the base model); declare adapters in the spec's model.adapters")
    try:
        return limits.adapters.name_of(task_id)
    except KeyError:
        raise _refuse("lora_task_id", f"{task_id} is not a LoRA adapter of this deployment; known ids: "
                      f"{limits.adapters.describe()}") from None


def _sampling(request, limits):
    """TensorRT-LLM semantics: no top_k/top_p (or temperature 0) means greedy; top_k 0 means no top-k filter."""
    bad_words = _word_sequences(request, "bad_words_list", limits.vocab)
    if bad_words:
        raise _refuse("bad_words_list", "not supported by the hf runtime; leave it unset")
    top_k = _scalar(request, "runtime_top_k", int, 0)
    top_p = _scalar(request, "runtime_top_p", float, 0.0)
    temperature = _scalar(request, "temperature", float, 1.0)
    if top_k < 0:
        raise _refuse("runtime_top_k", f"{top_k} is negative")
    if not 0.0 <= top_p <= 1.0:
        raise _refuse("runtime_top_p", f"{top_p} is outside [0, 1]")
    if temperature < 0:
        raise _refuse("temperature", f"{temperature} is negative")
    greedy = (top_k <= 0 and top_p <= 0) or temperature == 0 or top_k == 1
    if greedy:
        return ({"temperature": 1.0, "top_k": 1, "top_p": 1.0} if limits.sampling else {}), True
    if not limits.sampling:
        name = "runtime_top_k" if top_k > 1 else "runtime_top_p"
        raise _refuse(name, "this deployment decodes greedily (model parameter sampling: greedy); "
                      "leave runtime_top_k/runtime_top_p unset")
    return {"temperature": float(temperature), "top_k": int(min(top_k, limits.vocab) if top_k > 0 else limits.vocab),
            "top_p": float(top_p if top_p > 0 else 1.0)}, False


def error_response(message):
    """A FINAL error response; `message` carries its kind's tag (error_kinds), kept in front."""
    return pb_utils.InferenceResponse(error=pb_utils.TritonError(wrap("tensorrt_llm (hf)", message)))


def response_for(gen: Generation, start: int):
    """The response carrying completion tokens [start:] (streaming) or the whole sequence."""
    tokens = gen.tokens[start:] if gen.streaming else gen.tokens
    output = tokens if gen.streaming or gen.exclude_input else gen.prompt + tokens
    n = len(output)
    tensors = [
        pb_utils.Tensor("output_ids", np.array(output, dtype=np.int32).reshape(1, 1, n)),
        pb_utils.Tensor("sequence_length", np.array([[n]], dtype=np.int32)),
        pb_utils.Tensor("batch_index", np.zeros((1, 1), dtype=np.int32)),
        pb_utils.Tensor("sequence_index", np.zeros((1, 1), dtype=np.int32)),
    ]
    if gen.want_log_probs:
        chunk = gen.logprobs[start:] if gen.streaming else gen.logprobs
        tensors.append(pb_utils.Tensor("cum_log_probs", np.array([[sum(gen.logprobs)]], dtype=np.float32)))
        tensors.append(pb_utils.Tensor("output_log_probs",
                                       np.array(chunk, dtype=np.float32).reshape(1, 1, len(chunk))))
    if gen.want_counts[0]:
        tensors.append(pb_utils.Tensor("num_input_tokens", np.array([[len(gen.prompt)]], dtype=np.int32)))
    if gen.want_counts[1]:
        # The C++ backend's count: the token ids in this response's output_ids (streamed: the new ones; whole:
        # the prompt too unless exclude_input_in_output), so a streamed request's counts sum to its total.
        tensors.append(pb_utils.Tensor("num_output_tokens", np.array([[n]], dtype=np.int32)))
    if gen.want_perf:
        for name, value in (("arrival_time_ns", gen.arrival_ns), ("first_token_time_ns", gen.first_token_ns),
                            ("last_token_time_ns", gen.last_token_ns)):
            tensors.append(pb_utils.Tensor(name, np.array([[value]], dtype=np.int64)))
    return pb_utils.InferenceResponse(output_tensors=tensors)


class MinTokensProcessor(ContinuousBatchingLogitsProcessor):
    """Masks a request's end id until it has min_tokens tokens (TensorRT-LLM's min_tokens). One int per row: the id
    to mask, or -1; applied with a gather/scatter, so it is safe inside CUDA graphs."""

    supported_kwargs = {"tritongen_min_tokens": int, "tritongen_end_id": int}
    ignored_kwargs = ()

    def fill_defaults(self, int32_tensor):
        int32_tensor.fill_(-1)

    def prepare_tensor_args(self, requests_with_new_token):
        data = []
        for future in requests_with_new_token:
            state = future.state
            kwargs = state.logit_processor_kwargs
            need = kwargs.get("tritongen_min_tokens", 0)
            data.append(kwargs.get("tritongen_end_id", -1) if need and state.generated_len() < need else -1)
        return torch.tensor(data, dtype=torch.int32, device="cpu")

    def __call__(self, scores, tensor_arg):
        ids = tensor_arg[: scores.size(0)].to(torch.int64)
        index = ids.clamp(min=0).unsqueeze(-1)
        current = scores.gather(-1, index)
        masked = torch.where((ids >= 0).unsqueeze(-1), torch.full_like(current, float("-inf")), current)
        return scores.scatter(-1, index, masked)


def install_processor(manager, processor):
    """Add a processor to the manager's list before it starts (the batch processor sizes its argument storage from
    the list when the loop starts)."""
    processors = manager.logit_processor
    # First: a later top_k=1 would otherwise leave only the masked id and nothing to choose from.
    processors.logits_processor.insert(0, processor)
    processors.tensors_required += 1
    processors.supported_keys.update(processor.supported_kwargs)
    processors.ignored_keys.update(processor.ignored_kwargs)
    processors.do_processing = True
