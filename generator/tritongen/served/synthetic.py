# Shipped by tritongen. The `tensorrt_llm` model of the synthetic runtime (python backend).
"""A token source with the tensor contract of TensorRT-LLM's `tensorrt_llm` model and no model behind it.

Each request gets its first token `ttft_ms` after it arrives and one more every `itl_ms`, exactly
request_output_len tokens (min_tokens = max_tokens semantics: the end id is never emitted), so a load test
measures the serving path around it (preprocessing, postprocessing, ensemble or BLS, gRPC/HTTP, the load
generator) on their own, as llm-d's inference simulator does for vLLM. Token ids cycle through the tokenizer's
ordinary ids (never the end or pad id), so postprocessing detokenises real text.

Decoupled: streamed requests get one response per `stream_interval` tokens (the last one the rest), others one
response with all tokens. Honoured per
request: request_output_len, streaming, return_num_input_tokens, return_num_output_tokens, lora_task_id (see
ADAPTER_SHIFT), stop (the backend's input: a request carrying stop=true ends the request in flight with
the same request id, as tensorrt_llm_bls sends it when its own client cancels); a cancelled request stops at its
next token. Outputs carry the generated tokens only: exclude_input_in_output true (or unset) is what it does, and
false is rejected with an error naming it rather than silently ignored, as is a guided_decoding_guide_type. Emission times are scheduled from the
arrival (due = arrival + ttft + i * itl), so a serving path that cannot keep up shows as growing lateness, not as
a slower clock.

Engine model (parameter engine_model true): tokens come in steps instead, one per running request per step, each
step taking engine_step_base_ms + engine_per_sequence_ms * running + engine_per_prefill_token_ms * prefill tokens,
with admission limited by engine_max_batch and engine_kv_tokens (engine_model.py, shipped beside this model, is
the schedule's one definition).

Metrics: tritongen_llm_output_tokens_total (tokens sent in responses) and tritongen_llm_active_requests; and the
model's own timings, summed over the requests that got their last response, so a load test can split a request's
time (tritongen.loadtests.stages): tritongen_llm_first_response_us_total (arrival at the model -> first response),
tritongen_llm_generation_us_total (first -> last response), tritongen_llm_later_tokens_total (tokens after the
first, the gaps that time spans) and tritongen_llm_finished_requests_total.
"""

import heapq
import itertools
import json
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils

from . import engine_model
from .error_kinds import BAD_REQUEST, RequestError
from .stub import exit_with_server, leave_without_teardown, param

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
ADAPTER_SHIFT = 97
"""LoRA adapters (parameter lora_adapters: how many; lora_task_id 1..N): adapter k's tokens are the base's shifted
by ADAPTER_SHIFT x k places in the id cycle, so its stream differs from the base's and the other adapters'
deterministically and a test can tell which adapter answered."""


def _scalar(request, name, default=None, cast=float):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return default
    values = tensor.as_numpy().reshape(-1)
    return default if values.size == 0 else cast(values[0])


class _Request:
    def __init__(self, sender, prompt_len, n_out, streaming, counts, first_id, triton_id, arrival):
        self.sender, self.prompt_len, self.n_out, self.streaming = sender, prompt_len, n_out, streaming
        self.counts, self.first_id, self.triton_id = counts, first_id, triton_id
        self.arrival, self.first_sent = arrival, None
        self.stopped = False
        self.tokens = []
        self.sent = 0  # tokens already sent (streaming)


class TritonPythonModel:
    def initialize(self, args):
        exit_with_server("tritongen-watch")
        config = json.loads(args["model_config"])
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(config)
        self.ttft_s = float(param(config, "ttft_ms", "50")) / 1e3
        self.itl_s = float(param(config, "itl_ms", "10")) / 1e3
        self.interval = max(1, int(param(config, "stream_interval", "1")))
        self.adapters = int(param(config, "lora_adapters", "0"))
        vocab = int(param(config, "vocab_size", "256"))
        reserved = {int(param(config, "end_id", "0")), int(param(config, "pad_id", "0"))}
        # Skip the lowest ids, where tokenizers keep their special tokens.
        self.ids = [i for i in range(min(16, vocab - 1), vocab) if i not in reserved] or [vocab - 1]
        labels = {"model": args["model_name"], "version": "1"}
        counter, gauge = pb_utils.MetricFamily.COUNTER, pb_utils.MetricFamily.GAUGE
        self.families = [
            pb_utils.MetricFamily("tritongen_llm_output_tokens_total", "Output tokens sent in responses", counter),
            pb_utils.MetricFamily("tritongen_llm_active_requests", "Requests in flight", gauge),
            pb_utils.MetricFamily("tritongen_llm_first_response_us_total",
                                  "Microseconds from arrival at the model to the first response, finished requests",
                                  counter),
            pb_utils.MetricFamily("tritongen_llm_generation_us_total",
                                  "Microseconds from the first to the last response, finished requests", counter),
            pb_utils.MetricFamily("tritongen_llm_later_tokens_total",
                                  "Output tokens after the first, finished requests", counter),
            pb_utils.MetricFamily("tritongen_llm_finished_requests_total",
                                  "Requests that got their last response with tokens", counter),
        ]
        self.m_tokens = self.families[0].Metric(labels=labels)
        self.m_active = self.families[1].Metric(labels=labels)
        self.m_timings = [family.Metric(labels=labels) for family in self.families[2:]]
        self.heap = []  # (due time, sequence, request)
        self.seq = itertools.count()
        self.active = 0
        self.cv = threading.Condition()
        self.running = True
        self.engine = None
        loop = self._emit_loop
        if param(config, "engine_model", "false") == "true":
            self.engine = engine_model
            self.core = engine_model.EngineCore(engine_model.EngineParams(
                step_base_ms=float(param(config, "engine_step_base_ms", "0")),
                per_sequence_ms=float(param(config, "engine_per_sequence_ms", "0")),
                per_prefill_token_ms=float(param(config, "engine_per_prefill_token_ms", "0")),
                max_batch=max(1, int(float(param(config, "engine_max_batch", "1")))),
                kv_tokens=int(float(param(config, "engine_kv_tokens", "0")))))
            loop = self._engine_loop
        self.thread = threading.Thread(target=loop, name="synthetic-tokens", daemon=True)
        self.thread.start()

    def execute(self, requests):
        now = time.monotonic()
        for request in requests:
            sender = request.get_response_sender()
            if _scalar(request, "stop", False, bool):
                self._stop(request.request_id())
                sender.send(flags=FINAL)
                continue
            try:
                ids = pb_utils.get_input_tensor_by_name(request, "input_ids")
                prompt_len = _scalar(request, "input_lengths", None, int)
                if prompt_len is None:
                    prompt_len = 0 if ids is None else int(ids.as_numpy().size)
                n_out = _scalar(request, "request_output_len", None, int)
                if n_out is None:
                    raise RequestError("request_output_len: required (the number of tokens to generate, >= 1)",
                                       BAD_REQUEST, "request_output_len")
                if n_out < 1:
                    raise RequestError(f"request_output_len: must be >= 1 (got {n_out})", BAD_REQUEST,
                                       "request_output_len")
                if not _scalar(request, "exclude_input_in_output", True, bool):
                    raise RequestError("exclude_input_in_output: false is not supported by the synthetic runtime "
                                       "(its outputs carry the generated tokens only); send true or leave it unset",
                                       BAD_REQUEST, "exclude_input_in_output")
                guide = pb_utils.get_input_tensor_by_name(request, "guided_decoding_guide_type")
                if guide is not None and any(v for v in guide.as_numpy().reshape(-1)):
                    raise RequestError("guided_decoding_guide_type: not supported by the synthetic runtime (its "
                                       "token source emits fixed ids without a model, so they cannot follow a "
                                       "guide); leave it unset", BAD_REQUEST, "guided_decoding_guide_type")
                for name, neutral in (("beam_width", 1), ("num_return_sequences", 1)):
                    value = _scalar(request, name, neutral, int)
                    if value != neutral:
                        raise RequestError(f"{name}: {value} > 1 is not supported by the synthetic runtime",
                                           BAD_REQUEST, name)
                task_id = _scalar(request, "lora_task_id", 0, int)
                if not 0 <= task_id <= self.adapters:
                    known = "0 (the base)" + (f" to {self.adapters}" if self.adapters else "")
                    raise RequestError(f"lora_task_id: {task_id} is not a LoRA adapter of this deployment; known "
                                       f"ids: {known}", BAD_REQUEST, "lora_task_id")
                req = _Request(sender, prompt_len, n_out,
                               streaming=self.decoupled and _scalar(request, "streaming", False, bool),
                               counts=(_scalar(request, "return_num_input_tokens", False, bool),
                                       _scalar(request, "return_num_output_tokens", False, bool)),
                               first_id=prompt_len + ADAPTER_SHIFT * task_id, triton_id=request.request_id(),
                               arrival=now)
            except Exception as err:  # a RequestError is tagged (error_kinds); others keep their raiser's words
                sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(err))), flags=FINAL)
                continue
            with self.cv:
                self.active += 1
                self.m_active.set(self.active)
                if self.engine is not None:
                    self.core.enqueue(req, prompt_len, n_out)
                else:
                    heapq.heappush(self.heap, (now + self.ttft_s, next(self.seq), req))
                self.cv.notify()
        return None

    def _stop(self, triton_id):
        """Mark the requests in flight with this Triton request id; each ends (a flags-only final response) when its
        next token is due."""
        with self.cv:
            queued = [req for _, _, req in self.heap]
            if self.engine is not None:
                queued = list(self.core.running) + [w[0] for w in self.core.waiting]
            for req in queued:
                if triton_id and req.triton_id == triton_id:
                    req.stopped = True

    def _response(self, req, tokens):
        n = len(tokens)
        tensors = [pb_utils.Tensor("output_ids", np.array(tokens, dtype=np.int32).reshape(1, 1, n)),
                   pb_utils.Tensor("sequence_length", np.array([[n]], dtype=np.int32))]
        if req.counts[0]:
            tensors.append(pb_utils.Tensor("num_input_tokens", np.array([[req.prompt_len]], dtype=np.int32)))
        if req.counts[1]:
            # Per response, as TensorRT-LLM's C++ backend counts: the ids in this response's output_ids.
            tensors.append(pb_utils.Tensor("num_output_tokens", np.array([[n]], dtype=np.int32)))
        return pb_utils.InferenceResponse(output_tensors=tensors)

    def _sent(self, req, last):
        """Time the response just sent; at the last one, add the request's timings to the counters."""
        now = time.monotonic()
        if req.first_sent is None:
            req.first_sent = now
        if last:
            first, generation, later, finished = self.m_timings
            first.increment(round((req.first_sent - req.arrival) * 1e6))
            generation.increment(round((now - req.first_sent) * 1e6))
            later.increment(len(req.tokens) - 1 if req.streaming else 0)  # one response: no gap timed
            finished.increment(1)

    def _done(self):
        with self.cv:
            self.active -= 1
            self.m_active.set(self.active)

    def _emit_loop(self):
        while True:
            with self.cv:
                while self.running and (not self.heap or self.heap[0][0] > time.monotonic()):
                    timeout = None if not self.heap else max(0.0, self.heap[0][0] - time.monotonic())
                    self.cv.wait(timeout)
                if not self.running:
                    return
                due, _, req = heapq.heappop(self.heap)
            if self._token(req):
                self._done()
            else:
                with self.cv:
                    heapq.heappush(self.heap, (due + self.itl_s, next(self.seq), req))

    def _engine_loop(self):
        """Steps of the engine model: admit, wait the step's time, one token per running request."""
        step_start = time.monotonic()
        while True:
            with self.cv:
                prefill = self.core.admit()
                if not self.core.running:
                    while self.running and not self.core.waiting:
                        self.cv.wait()
                    if not self.running:
                        return
                    step_start = time.monotonic()  # an idle engine starts its next step when work arrives
                    continue
                batch = list(self.core.running)
                step_end = step_start + self.engine.step_ms(self.core.params, len(batch), prefill) / 1e3
                while self.running and time.monotonic() < step_end:
                    self.cv.wait(max(0.0, step_end - time.monotonic()))
                if not self.running:
                    return
            ended = [req for req in batch if self._token(req)]
            with self.cv:
                self.core.finish(ended)
            for _ in ended:
                self._done()
            step_start = step_end  # the model's clock: a late host emits late steps back to back

    def _token(self, req):
        """One token of `req` (or its end when cancelled or stopped); True when the request has ended."""
        try:
            if req.sender.is_cancelled():
                return True
            if req.stopped:
                req.sender.send(flags=FINAL)
                return True
            token = self.ids[(req.first_id + len(req.tokens)) % len(self.ids)]
            req.tokens.append(token)
            last = len(req.tokens) >= req.n_out
            if req.streaming and (last or len(req.tokens) - req.sent >= self.interval):
                chunk, req.sent = req.tokens[req.sent:], len(req.tokens)
                self.m_tokens.increment(len(chunk))
                req.sender.send(self._response(req, chunk), flags=FINAL if last else 0)
                self._sent(req, last)
            elif last and not req.streaming:
                self.m_tokens.increment(len(req.tokens))
                req.sender.send(self._response(req, req.tokens), flags=FINAL)
                self._sent(req, last)
        except Exception as err:  # a request whose client is gone must not stop the others
            last = True
            try:
                req.sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(err))), flags=FINAL)
            except Exception:
                pass
        return last

    def finalize(self):
        with self.cv:
            self.running = False
            self.cv.notify()
        self.thread.join(timeout=5)
        leave_without_teardown()
