# Shipped by tritongen. The tensorrt_llm_bls model: tokenizer -> tensorrt_llm -> incremental detokenizer.
"""One python model that runs a whole request, with the `tensorrt_llm_bls` tensor contract.

Why text is decoded here: streamed text is only exact when each response is decoded with the tokens before it
(detokenizer.py), and only this model sees every response of a request. An ensemble cannot carry state from one
decoupled response to the next, and its postprocessing responses may run on different instances; so tritongen's
ensemble is one step that calls this model, and the concatenated streamed `text_output` equals the unstreamed
`text_output` of the same request, byte for byte.

Every declared input reaches preprocessing or tensorrt_llm with the shape the TensorRT-LLM backend expects
([batch, 1] for scalars, whatever the `reshape` of this model's config); every output of tensorrt_llm that this
model declares is returned; every beam and sequence is decoded; text-level stop sequences end the request.
Inputs that need a model tritongen does not render (a draft model) are rejected with an error naming them.
"""

import json
import os
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import triton_python_backend_utils as pb_utils
from transformers import AutoTokenizer

from .detokenizer import IncrementalDetokenizer, StopStrings, held_ids
from .error_kinds import BAD_REQUEST, INTERNAL, OVERLOADED, RequestError, tagged, wrap
from .lora_resend import with_resend
from .stub import param
from .wiring import load as load_wiring

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


class Cancelled(Exception):
    """The client cancelled the request; it ends with Triton's CANCELLED error, as a cancelled LLM request does."""


class _InFlight:
    """One request between admission and its FINAL response, as the cancellation watcher sees it. Its lock
    serialises every use of the response sender (sends, the watcher's is_cancelled), as the hf tensorrt_llm model
    does: the python backend's sender is not safe to use from two threads at once."""

    def __init__(self, request, sender):
        self.request, self.sender = request, sender
        self.llm_id = ""  # the request id of its tensorrt_llm request, once sent by a non-streamed request
        self.cancelled = False
        self.closed = False  # FINAL sent: Triton may free the request, so it is not asked anything any more
        self.lock = threading.Lock()


def _error(message, code_name):
    """A TritonError with Triton's code `code_name` where this python backend knows it (UNAVAILABLE for a full
    model, as Triton's own queue rejection: HTTP 503, gRPC UNAVAILABLE); UNKNOWN otherwise."""
    code = getattr(pb_utils.TritonError, code_name, None)
    return pb_utils.TritonError(message, code) if code is not None else pb_utils.TritonError(message)


def _input(request, name):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return None if tensor is None else tensor.as_numpy()


def _batched(value, batch):
    # Inputs declared with `reshape: { shape: [ ] }` arrive as [batch]; tensorrt_llm wants [batch, 1].
    return value.reshape(batch, 1) if value.ndim == 1 else value


def _first(value, default=None):
    return default if value is None or value.size == 0 else value.reshape(-1)[0].item()


def _words(value, row):
    if value is None:
        return []
    row_words = value[row] if value.ndim > 1 else value
    return [w.decode("utf-8") if isinstance(w, bytes) else str(w) for w in row_words.reshape(-1)]


class _Sequence:
    """Decoding state of one output sequence (batch entry, sequence index, beam)."""

    def __init__(self, tokenizer, skip_special_tokens, held, stops):
        self.detok = IncrementalDetokenizer(tokenizer, skip_special_tokens, held)
        self.stops = StopStrings(stops)
        self.text = []  # what has been sent, for accumulate_tokens
        self.stopped = False

    def push(self, tokens, final=False):
        if self.stopped:
            return ""
        delta = self.detok.add(tokens)
        if final:
            delta += self.detok.finish()
        delta, self.stopped = self.stops.feed(delta)
        self.text.append(delta)
        return delta


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        # What is forwarded between the models: wiring.json, rendered beside this file from tritongen's contract.
        self.wiring = load_wiring(os.path.dirname(os.path.abspath(__file__)))
        self.passed = frozenset(self.wiring.passed_outputs)
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(config)
        self.accumulate = param(config, "accumulate_tokens", "false").lower() in ("true", "1", "yes", "t")
        self.llm_name = param(config, "tensorrt_llm_model_name", "tensorrt_llm")
        self.draft_name = param(config, "tensorrt_llm_draft_model_name")
        # The converted adapters (the tensorrt_llm model's lora_prefetch_dir): sent again on a LoRA cache miss.
        self.lora_dir = param(config, "lora_dir")
        self.skip_special_tokens = param(config, "skip_special_tokens", "true").lower() in ("true", "1", "yes", "t")
        # The arguments NVIDIA's preprocessing/postprocessing load tokenizers with.
        self.tokenizer = AutoTokenizer.from_pretrained(param(config, "tokenizer_dir"), legacy=False,
                                                       padding_side="left", trust_remote_code=True)
        self.held = held_ids(self.tokenizer, self.skip_special_tokens)
        self.input_cap = input_byte_cap(self.tokenizer, param(config, "max_input_tokens"))
        # Requests wait on the LLM, not on this model's CPU: a few times the LLM's batch keeps it busy.
        self.pool = ThreadPoolExecutor(max_workers=max(16, 4 * int(config.get("max_batch_size", 1))),
                                       thread_name_prefix="tensorrt_llm_bls")
        # This model accepts requests onto threads, so Triton's queue never fills and cannot refuse: the model
        # enforces the deployment's limit itself, per instance its share of the LLM's batch (max_in_flight) plus its
        # share of max_queue_size, and refuses the excess at once with Triton's own wording (`execute` returns at
        # once: the worker threads make BLS calls, and a stub of this model can crash under load while
        # `execute` is kept waiting for room).
        instances = sum(int(g.get("count", 1)) for g in config.get("instance_group", [])) or 1
        limit = int(param(config, "max_in_flight", 0) or 0)
        queue = int(config.get("dynamic_batching", {}).get("default_queue_policy", {}).get("max_queue_size", 0) or 0)
        # max_queue_size 0 is Triton's unbounded queue: nothing is refused (the LLM model's queue holds the rest).
        self.capacity = (-(-limit // instances) + -(-queue // instances)) if limit > 0 and queue > 0 else None
        self.in_flight = {}  # id -> _InFlight
        self.room = threading.Lock()
        self.stopping = False
        self.watcher = threading.Thread(target=self._watch, name="tensorrt_llm_bls-watch", daemon=True)
        self.watcher.start()

    # ------------------------------------------------------------------ requests to the composing models
    def _call(self, model, inputs, outputs, request_id=""):
        response = pb_utils.InferenceRequest(model_name=model, inputs=inputs, request_id=request_id,
                                             requested_output_names=list(outputs)).exec()
        if response.has_error():
            raise RequestError(wrap(model, response.error().message()), kind=None)
        return response

    def _validate(self, request, decoupled_stream):
        if (_first(_input(request, "num_draft_tokens"), 0) or 0) > 0 and not self.draft_name:
            raise RequestError("num_draft_tokens: speculative decoding needs a draft model, and this deployment "
                               "has none (tensorrt_llm_draft_model_name); leave it unset or 0", BAD_REQUEST,
                               "num_draft_tokens")
        if _first(_input(request, "use_draft_logits"), False):
            raise RequestError("use_draft_logits: needs a draft model, and this deployment has none; leave it unset",
                               BAD_REQUEST, "use_draft_logits")
        if decoupled_stream and not self.decoupled:
            raise RequestError("stream: this deployment is not decoupled (serving.streaming: false); "
                               "send stream=false or render it with streaming", BAD_REQUEST, "stream")

    def _llm_inputs(self, request, batch):
        pre_inputs = [pb_utils.Tensor(target, value) for name, target in self.wiring.to_preprocessing.items()
                      if (value := _input(request, name)) is not None]
        pre = self._call("preprocessing", pre_inputs, self.wiring.from_preprocessing)
        inputs = []
        for name, target in self.wiring.from_preprocessing.items():
            tensor = pb_utils.get_output_tensor_by_name(pre, name)
            if tensor is None:
                continue
            value = tensor.as_numpy()
            if name == "EMBEDDING_BIAS" and value.size == 0:
                continue  # no bias words: send nothing rather than an empty bias
            inputs.append(pb_utils.Tensor(target, value))
        for name, target in self.wiring.to_llm.items():
            value = _input(request, name)
            if value is not None:
                inputs.append(pb_utils.Tensor(target, _batched(value, batch)))
        prompt_lengths = pb_utils.get_output_tensor_by_name(pre, "REQUEST_INPUT_LEN").as_numpy().reshape(-1)
        prompt_ids = pb_utils.get_output_tensor_by_name(pre, "INPUT_ID").as_numpy()
        return inputs, prompt_ids, prompt_lengths

    def _stop_llm(self, request_id):
        """Ask tensorrt_llm to end a request early: the backend's `stop` input, as NVIDIA's BLS sends it."""
        inputs = [pb_utils.Tensor("input_ids", np.zeros((1, 1), np.int32)),
                  pb_utils.Tensor("input_lengths", np.zeros((1, 1), np.int32)),
                  pb_utils.Tensor("request_output_len", np.zeros((1, 1), np.int32)),
                  pb_utils.Tensor("stop", np.ones((1, 1), np.bool_))]
        stop = pb_utils.InferenceRequest(model_name=self.llm_name, inputs=inputs, request_id=request_id,
                                         requested_output_names=[])
        try:
            for _ in (stop.exec(decoupled=True) if self.decoupled else [stop.exec()]):
                pass
        except Exception as err:  # the request may have ended on its own meanwhile
            pb_utils.Logger.log_warn(f"tensorrt_llm_bls: stop request {request_id}: {err}")

    # ------------------------------------------------------------------ responses
    def _response(self, llm_response, texts):
        tensors = [pb_utils.Tensor("text_output", np.array([t.encode("utf-8") for t in texts], dtype=np.object_))]
        tensors += [pb_utils.Tensor(t.name(), t.as_numpy()) for t in llm_response.output_tensors()
                    if t.name() in self.passed]
        return pb_utils.InferenceResponse(output_tensors=tensors)

    def _run(self, request, send, entry=None):
        text_input = _input(request, "text_input")
        if text_input is None or text_input.size == 0:
            raise RequestError("text_input: required", BAD_REQUEST, "text_input")
        if _input(request, "max_tokens") is None:
            raise RequestError("max_tokens: required (the most tokens to generate)", BAD_REQUEST, "max_tokens")
        check_input_size(text_input, self.input_cap)
        batch = text_input.shape[0]
        stream = bool(_first(_input(request, "stream"), False))
        self._validate(request, stream)
        stop_words = _input(request, "stop_words")
        llm_inputs, prompt_ids, prompt_lengths = self._llm_inputs(request, batch)
        request_id = uuid.uuid4().hex
        if entry is not None and not stream:
            # A streamed request is checked at each LLM response on its own thread; a non-streamed one waits for
            # its only response, so the watcher checks it meanwhile.
            entry.llm_id = request_id
            if entry.cancelled:
                raise Cancelled()
        responses = self._exec_llm(llm_inputs, request_id, _input(request, "lora_task_id"),
                                   _input(request, "lora_weights") is not None)
        if stream:
            self._stream(request, responses, batch, stop_words, request_id, send, entry)
        else:
            self._whole(responses, prompt_ids, prompt_lengths, stop_words, send)
        if entry is not None and entry.cancelled:
            raise Cancelled()

    def _exec_llm(self, inputs, request_id, task_ids, with_weights):
        """The tensorrt_llm responses of one request; a LoRA cache miss is answered by sending the adapter's
        weights once (lora_resend.py)."""
        def run(extra):
            llm = pb_utils.InferenceRequest(model_name=self.llm_name, inputs=inputs + extra, request_id=request_id,
                                            requested_output_names=["output_ids", "sequence_length",
                                                                    *self.wiring.passed_outputs])
            return llm.exec(decoupled=True) if self.decoupled else [llm.exec()]

        responses = run([])
        if task_ids is None or with_weights or not self.lora_dir:
            return responses
        return with_resend(responses, task_ids.reshape(-1), self.lora_dir,
                           lambda r: r.error().message() if r.has_error() else None,
                           lambda weights, config: run([pb_utils.Tensor("lora_weights", weights),
                                                        pb_utils.Tensor("lora_config", config)]))

    def _output_ids(self, response):
        """The LLM response's output_ids; None for the empty final response of a decoupled model. Its error, raised."""
        if response.has_error():
            raise RequestError(wrap(self.llm_name, response.error().message()), kind=None)
        ids = pb_utils.get_output_tensor_by_name(response, "output_ids")
        return None if ids is None else ids.as_numpy()

    def _whole(self, responses, prompt_ids, prompt_lengths, stop_words, send):
        for response in responses:
            ids = self._output_ids(response)
            if ids is None:
                continue
            lengths = pb_utils.get_output_tensor_by_name(response, "sequence_length").as_numpy()
            # Explicit sizes: an empty generation (the first token was the end token) has 0 tokens, and numpy
            # cannot infer a -1 dimension next to a 0.
            ids = ids.reshape(ids.shape[0], int(np.prod(ids.shape[1:-1])), ids.shape[-1])
            lengths = lengths.reshape(ids.shape[0], ids.shape[1])
            texts = []
            for b in range(ids.shape[0]):
                row = b if ids.shape[0] == len(prompt_lengths) else 0
                stops = StopStrings(_words(stop_words, row))
                prompt = prompt_ids[row][: int(prompt_lengths[row])].tolist()
                for beam in range(ids.shape[1]):
                    tokens = ids[b, beam, : int(lengths[b, beam])].tolist()
                    # Stop strings are looked for in the completion only, also when the output repeats the prompt.
                    start = len(self._decode(prompt)) if tokens[: len(prompt)] == prompt else 0
                    texts.append(stops.cut(self._decode(tokens), start)[0])
            send(self._response(response, texts))

    def _stream(self, request, responses, batch, stop_words, request_id, send, entry):
        sequences = {}  # (batch index, sequence index) -> [_Sequence per beam]
        wanted = batch * max(1, int(_first(_input(request, "num_return_sequences"), 1)))
        max_tokens = int(_first(_input(request, "max_tokens"), 0))
        for response in responses:
            if request.is_cancelled():
                self._stop_llm(request_id)
                raise Cancelled()
            ids = self._output_ids(response)
            if ids is None:
                continue
            ids = ids.reshape(int(np.prod(ids.shape[:-1])), ids.shape[-1])  # [beams, tokens] of one entry and sequence
            lengths = pb_utils.get_output_tensor_by_name(response, "sequence_length").as_numpy().reshape(-1)
            key = (int(_first(_output(response, "batch_index"), 0)),
                   int(_first(_output(response, "sequence_index"), 0)))
            if key not in sequences:
                words = _words(stop_words, key[0] if stop_words is not None and key[0] < len(stop_words) else 0)
                sequences[key] = [_Sequence(self.tokenizer, self.skip_special_tokens, self.held, words)
                                  for _ in range(ids.shape[0])]
            texts = []
            for seq, tokens in zip(sequences[key], ids):
                tokens = tokens[: int(lengths[len(texts)])]
                if len(sequences[key]) > 1:
                    # Beam search may rewrite earlier tokens, so each response carries whole beams: whole text.
                    text, seq.stopped = seq.stops.cut(self._decode(tokens))
                else:
                    # A sequence at max_tokens has ended: release held-back text now rather than in an extra response.
                    text = seq.push(tokens, final=len(seq.detok.tokens) + len(tokens) >= max_tokens)
                    text = "".join(seq.text) if self.accumulate else text
                texts.append(text)
            send(self._response(response, texts))
            done = [k for k, beams in sequences.items() if all(seq.stopped for seq in beams)]
            if len(done) >= wanted:
                self._stop_llm(request_id)  # every sequence hit a stop string: end generation
                return
        # Text held back at the very end (an incomplete or invalid UTF-8 tail) goes out in one last response.
        for (b, s), beams in sequences.items():
            if len(beams) > 1:
                continue
            tail = beams[0].push([], final=True)
            if tail:
                text = "".join(beams[0].text) if self.accumulate else tail
                send(pb_utils.InferenceResponse(output_tensors=[
                    pb_utils.Tensor("text_output", np.array([text.encode("utf-8")], dtype=np.object_)),
                    pb_utils.Tensor("batch_index", np.array([[b]], dtype=np.int32)),
                    pb_utils.Tensor("sequence_index", np.array([[s]], dtype=np.int32))]))

    def _decode(self, ids):
        return self.tokenizer.decode([int(i) for i in ids], skip_special_tokens=self.skip_special_tokens,
                                     clean_up_tokenization_spaces=False)

    def execute(self, requests):
        if not self.decoupled:
            responses = []
            for request in requests:
                collected = []
                try:
                    self._run(request, collected.append)
                    responses.append(collected[-1])
                except Exception as err:
                    responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(err))))
            return responses
        # Decoupled: each request runs on a worker thread, so one instance serves many requests at once.
        for request in requests:
            entry = _InFlight(request, request.get_response_sender())
            with self.room:
                full = self.capacity is not None and len(self.in_flight) >= self.capacity
                if not full:
                    self.in_flight[id(entry)] = entry
            if full:
                entry.sender.send(pb_utils.InferenceResponse(error=_error(
                    tagged(OVERLOADED, f"Exceeds maximum queue size: tensorrt_llm_bls holds {self.capacity} requests "
                           "per instance (its share of max_batch_size in flight plus max_queue_size waiting); "
                           "retry later"), "UNAVAILABLE")), flags=FINAL)
                continue
            self.pool.submit(self._serve, entry)
        return None

    def _serve(self, entry):
        sender = entry.sender

        def send(response):
            with entry.lock:
                sender.send(response)

        final = pb_utils.InferenceResponse(
            error=pb_utils.TritonError(tagged(INTERNAL, "tensorrt_llm_bls: internal error")))
        try:
            self._run(entry.request, send, entry)
            final = None
        except Cancelled:
            final = pb_utils.InferenceResponse(error=_error("request cancelled", "CANCELLED"))
        except Exception as err:  # a RequestError is tagged (error_kinds); others keep their raiser's words
            final = pb_utils.InferenceResponse(error=pb_utils.TritonError(str(err)))
        finally:
            with self.room:
                self.in_flight.pop(id(entry), None)
            with entry.lock:
                entry.closed = True
                try:
                    if final is None:
                        sender.send(flags=FINAL)
                    else:
                        sender.send(final, flags=FINAL)
                except Exception as err:
                    pb_utils.Logger.log_error(f"tensorrt_llm_bls: could not send a final response: {err}")

    def _watch(self):
        """Every 100 ms: stop the LLM request of a client that left (also while a non-streamed request waits
        for its only response, when no per-response check can run), and exit when tritonserver is gone, so an
        orphaned stub never lives on."""
        parent = os.getppid()
        while not self.stopping:
            time.sleep(0.1)
            if os.getppid() != parent:
                os._exit(1)
            self._check_cancelled()

    def _check_cancelled(self):
        """One pass of the watcher, in its own method so that no request outlives the pass in a local (in the loop
        of `_watch`, the loop variable held the last request seen, and its response sender, until a later pass saw
        another: Triton frees a request's response factory only once its sender is gone)."""
        with self.room:
            entries = list(self.in_flight.values())
        for entry in entries:
            with entry.lock:
                if entry.closed or entry.cancelled or not entry.llm_id:
                    continue
                try:
                    entry.cancelled = bool(entry.sender.is_cancelled())
                except Exception:  # a request whose client is gone can fail to answer
                    entry.cancelled = True
            if entry.cancelled and entry.llm_id:
                self._stop_llm(entry.llm_id)

    def finalize(self):
        self.stopping = True
        self.pool.shutdown(wait=False, cancel_futures=True)


def input_byte_cap(tokenizer, max_input_tokens):
    """The most text_input bytes a prompt of at most `max_input_tokens` tokens can have: no token stands for more
    bytes than the longest vocabulary entry (byte-level and SentencePiece entries are at least as long as the text
    they cover), doubled for normalisers that shorten text (NFKC). None when the limit is unknown."""
    if not max_input_tokens:
        return None
    longest = max((len(t.encode("utf-8")) for t in tokenizer.get_vocab()), default=1)
    return int(max_input_tokens) * max(1, longest) * 2, int(max_input_tokens), longest


def check_input_size(text_input, cap):
    """Refuse an oversized prompt before it is tokenized: tokenizing tens of MB takes a minute and GBs."""
    if cap is None:
        return
    limit, tokens, longest = cap
    for value in text_input.reshape(-1):
        size = len(value) if isinstance(value, bytes) else len(str(value).encode("utf-8"))
        if size > limit:
            raise RequestError(f"text_input: {size} bytes exceed the limit of {limit} bytes (at most {tokens} "
                               f"prompt tokens of at most {longest} bytes each); shorten the prompt", BAD_REQUEST,
                               "text_input")


def _output(response, name):
    tensor = pb_utils.get_output_tensor_by_name(response, name)
    return None if tensor is None else tensor.as_numpy()
