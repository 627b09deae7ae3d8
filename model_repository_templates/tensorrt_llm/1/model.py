# Shipped by tritongen. The `tensorrt_llm` model of the hf runtime (python backend).
"""An LLM model with the tensor contract of TensorRT-LLM's `tensorrt_llm` model, on transformers.

Generation runs on transformers' continuous batching (a paged KV cache and one background loop that admits
new requests at every step), so concurrent requests share decode steps: in-flight batching. The model is
decoupled: streamed requests get one response per step with the new tokens only, as the TensorRT-LLM backend
sends them; other requests get one response with the whole sequence.

Honoured per request: request_output_len, end_id, pad_id, exclude_input_in_output, streaming, temperature,
runtime_top_k, runtime_top_p, min_tokens, stop_words_list (token sequences of any length), return_num_input_tokens,
return_num_output_tokens, return_perf_metrics (arrival/first/last token times). Rejected with an error when not
neutral: beam_width > 1, num_return_sequences > 1, repetition/presence/frequency penalties. `seed` is not
supported by transformers' continuous batching and is ignored.

Metrics (Triton's /metrics): tritongen_llm_steps_total, tritongen_llm_step_requests_total and
tritongen_llm_step_requests_max count generation steps and how many requests received a token in each; a
step with more than one request is in-flight batching at work.
"""

import itertools
import json
import threading
import time

import numpy as np
import torch
import triton_python_backend_utils as pb_utils
from transformers import AutoModelForCausalLM, GenerationConfig
from transformers.generation.configuration_utils import ContinuousBatchingConfig

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
DTYPES = {"auto": "auto", "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def _param(config, key, default=None):
    value = config.get("parameters", {}).get(key, {}).get("string_value", "")
    return default if value in ("", None) or value.startswith("${") else value


def _scalar(request, name, default=None, cast=float):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return default
    values = tensor.as_numpy().reshape(-1)
    return default if values.size == 0 else cast(values[0])


def _word_sequences(request, name):
    """Decode TensorRT-LLM's [2, N] word-list layout into token sequences."""
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return []
    flat = tensor.as_numpy().reshape(-1, 2, tensor.as_numpy().shape[-1])[0]
    ids, offsets = flat[0].tolist(), [o for o in flat[1].tolist() if o >= 0]
    return [ids[start:end] for start, end in zip([0] + offsets[:-1], offsets) if end > start]


class _Generation:
    """One Triton request in flight."""

    def __init__(self, request, sender, prompt, max_new, streaming, exclude_input, end_id, min_tokens, stops,
                 want_counts, want_perf):
        self.request, self.sender, self.prompt, self.max_new = request, sender, prompt, max_new
        self.streaming, self.exclude_input, self.end_id, self.min_tokens = streaming, exclude_input, end_id, min_tokens
        self.stops, self.want_counts, self.want_perf = stops, want_counts, want_perf
        self.tokens = []  # accepted completion tokens
        self.sent = 0  # completion tokens already streamed
        self.seen = 0  # tokens consumed from the manager's cumulative output
        self.arrival_ns = time.time_ns()
        self.first_token_ns = 0
        self.last_token_ns = 0
        self.done = threading.Event()
        self.response = None  # for the non-decoupled path


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.model_name = args["model_name"]
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(config)
        self.exclude_default = _param(config, "exclude_input_in_output", "false").lower() == "true"
        device = "cpu"
        if args.get("model_instance_kind") == "GPU":
            device = f"cuda:{args['model_instance_device_id']}"
        path = _param(config, "hf_model_path")
        dtype = DTYPES[_param(config, "dtype", "auto")]
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation="sdpa").to(device)
        self.vocab_size = self.model.config.vocab_size
        self.end_id = int(_param(config, "end_id", self.model.config.eos_token_id))
        self.pad_id = int(_param(config, "pad_id", self.end_id))
        num_blocks = _param(config, "kv_cache_num_blocks")
        max_batch_tokens = _param(config, "max_batch_tokens")
        cb_config = ContinuousBatchingConfig(
            per_request_processors=True,
            block_size=int(_param(config, "kv_cache_block_size", 32)),
            num_blocks=int(num_blocks) if num_blocks else None,
            max_batch_tokens=int(max_batch_tokens) if max_batch_tokens else None,
            max_memory_percent=float(_param(config, "kv_cache_free_gpu_mem_fraction", 0.9)),
            # CUDA graphs and async batching hung on first use in tests on an H200; keep the plain loop.
            use_cuda_graph=False,
            use_async_batching=False,
        )
        # Sampling processors exist only when the generation config enables them; every request then passes its
        # own temperature/top_k/top_p, so these values are placeholders, never defaults.
        generation_config = GenerationConfig(do_sample=True, temperature=0.5, top_k=50, top_p=0.9,
                                             eos_token_id=self.end_id, pad_token_id=self.pad_id, max_new_tokens=16)
        self.manager = self.model.init_continuous_batching(generation_config=generation_config,
                                                           continuous_batching_config=cb_config)
        self._init_metrics()
        self._hook_steps()
        self.active = {}
        self.lock = threading.Lock()
        self.ids = itertools.count()
        self.running = True
        self.manager.start()
        # The manager builds its batch processor (cache, static tensors) on its own thread; wait for it so
        # READY means ready and the first request does not pay for the setup.
        deadline = time.monotonic() + 600
        while self.manager.batch_processor is None and self.manager.is_running() and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.manager.batch_processor is None:
            raise RuntimeError("continuous batching did not start; see the log above")
        self.dispatcher = threading.Thread(target=self._dispatch, name="tritongen-dispatch", daemon=True)
        self.dispatcher.start()
        pb_utils.Logger.log_info(f"{self.model_name}: {path} on {device}, continuous batching started")

    # ------------------------------------------------------------------ metrics
    def _init_metrics(self):
        labels = {"model": self.model_name, "version": "1"}
        counter, gauge = pb_utils.MetricFamily.COUNTER, pb_utils.MetricFamily.GAUGE
        # The families must outlive their metrics, so they are kept on the model.
        self.metric_families = {
            "steps": pb_utils.MetricFamily("tritongen_llm_steps_total", "Generation steps that produced tokens",
                                           counter),
            "step_requests": pb_utils.MetricFamily(
                "tritongen_llm_step_requests_total",
                "Sum over steps of requests that received a token in the step", counter),
            "step_max": pb_utils.MetricFamily("tritongen_llm_step_requests_max",
                                              "Most requests that received a token in one step", gauge),
            "active": pb_utils.MetricFamily("tritongen_llm_active_requests", "Requests in flight", gauge),
        }
        self.m_steps = self.metric_families["steps"].Metric(labels=labels)
        self.m_step_requests = self.metric_families["step_requests"].Metric(labels=labels)
        self.m_step_max = self.metric_families["step_max"].Metric(labels=labels)
        self.m_active = self.metric_families["active"].Metric(labels=labels)
        self.step_max = 0

    def _hook_steps(self):
        """Count requests per step where the manager hands a step's outputs over (one call per step)."""
        router = self.manager.output_router
        deliver_batch = router.deliver_batch

        def counting_deliver_batch(outputs):
            n = len(outputs)
            self.m_steps.increment(1)
            self.m_step_requests.increment(n)
            if n > self.step_max:
                self.step_max = n
                self.m_step_max.set(n)
            deliver_batch(outputs)

        router.deliver_batch = counting_deliver_batch

    # ------------------------------------------------------------------ requests
    def _parse(self, request, sender):
        ids = pb_utils.get_input_tensor_by_name(request, "input_ids")
        if ids is None:
            raise ValueError("input_ids is required")
        ids = ids.as_numpy()
        if ids.ndim > 1 and ids.shape[0] != 1:
            raise ValueError(f"batch size per request must be 1, got {ids.shape[0]}")
        length = _scalar(request, "input_lengths", ids.shape[-1], int)
        prompt = ids.reshape(-1)[:length].astype(int).tolist()
        for name, neutral in (("beam_width", 1), ("num_return_sequences", 1)):
            if _scalar(request, name, neutral, int) != neutral:
                raise ValueError(f"{name} > 1 is not supported by the hf runtime")
        for name, neutral in (("repetition_penalty", 1.0), ("presence_penalty", 0.0), ("frequency_penalty", 0.0)):
            if _scalar(request, name, neutral) != neutral:
                raise ValueError(f"{name} is not supported by the hf runtime; leave it unset")
        max_new = _scalar(request, "request_output_len", None, int)
        if max_new is None or max_new < 1:
            raise ValueError("request_output_len must be >= 1")
        return _Generation(
            request, sender, prompt, max_new,
            streaming=_scalar(request, "streaming", False, bool) and self.decoupled,
            exclude_input=_scalar(request, "exclude_input_in_output", self.exclude_default, bool),
            end_id=_scalar(request, "end_id", self.end_id, int),
            min_tokens=min(_scalar(request, "min_tokens", 0, int), max_new),
            stops=_word_sequences(request, "stop_words_list"),
            want_counts=(_scalar(request, "return_num_input_tokens", False, bool),
                         _scalar(request, "return_num_output_tokens", False, bool)),
            want_perf=_scalar(request, "return_perf_metrics", False, bool),
        )

    def _sampling(self, request):
        """TensorRT-LLM semantics: no top_k/top_p means greedy; top_k 0 means no top-k filter."""
        top_k = _scalar(request, "runtime_top_k", 0, int)
        top_p = _scalar(request, "runtime_top_p", 0.0)
        temperature = _scalar(request, "temperature", 1.0)
        if (top_k <= 0 and top_p <= 0) or temperature <= 0:
            top_k, top_p, temperature = 1, 1.0, 1.0
        return {"temperature": float(temperature), "top_k": int(top_k if top_k > 0 else self.vocab_size),
                "top_p": float(top_p if 0 < top_p <= 1 else 1.0)}

    def _submit(self, request, sender):
        gen = self._parse(request, sender)
        rid = f"r{next(self.ids)}"
        with self.lock:
            self.active[rid] = gen
            self.m_active.set(len(self.active))
        # With min_tokens the end id must not stop the manager early; this model stops the request itself.
        eos = -1 if gen.min_tokens > 0 else gen.end_id
        self.manager.add_request(gen.prompt, request_id=rid, max_new_tokens=gen.max_new, streaming=True,
                                 eos_token_id=eos, **self._sampling(request))
        return gen

    def execute(self, requests):
        if self.decoupled:
            for request in requests:
                sender = request.get_response_sender()
                try:
                    self._submit(request, sender)
                except Exception as err:
                    sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(err))), flags=FINAL)
            return None
        pending = []
        for request in requests:
            try:
                pending.append(self._submit(request, None))
            except Exception as err:
                pending.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(err))))
        responses = []
        for item in pending:
            if isinstance(item, _Generation):
                item.done.wait()
                item = item.response
            responses.append(item)
        return responses

    # ------------------------------------------------------------------ results
    def _dispatch(self):
        while self.running:
            out = self.manager.get_result(timeout=0.1)
            if out is None:
                self._sweep_cancelled()
                continue
            with self.lock:
                gen = self.active.get(out.request_id)
            if gen is not None:
                try:
                    self._on_output(out.request_id, gen, out)
                except Exception as err:  # report to the client rather than kill the dispatcher
                    self._finish(out.request_id, gen, error=str(err))

    @staticmethod
    def _cancelled(gen):
        try:
            return gen.sender.is_cancelled()
        except Exception:  # a request whose client is gone can fail to answer; treat it as cancelled
            return True

    def _sweep_cancelled(self):
        with self.lock:
            items = list(self.active.items())
        for rid, gen in items:
            if gen.sender is not None and self._cancelled(gen):
                self._finish(rid, gen, cancelled=True)

    def _on_output(self, rid, gen, out):
        if gen.sender is not None and self._cancelled(gen):
            self._finish(rid, gen, cancelled=True)
            return
        if out.error:
            self._finish(rid, gen, error=out.error)
            return
        now = time.time_ns()
        stop = False
        for token in out.generated_tokens[gen.seen:]:
            gen.seen += 1
            if token == gen.end_id and len(gen.tokens) >= gen.min_tokens:
                stop = True
                break
            gen.tokens.append(int(token))
            gen.first_token_ns = gen.first_token_ns or now
            gen.last_token_ns = now
            if len(gen.tokens) >= gen.max_new or any(gen.tokens[-len(s):] == s for s in gen.stops):
                stop = True
                break
        stop = stop or out.is_finished()
        if gen.streaming and (len(gen.tokens) > gen.sent or stop):
            chunk = gen.tokens[gen.sent:]
            gen.sent = len(gen.tokens)
            if chunk:
                gen.sender.send(self._response(gen, chunk), flags=FINAL if stop else 0)
            elif stop:
                gen.sender.send(flags=FINAL)
        if stop:
            self._finish(rid, gen, sent=gen.streaming)

    def _response(self, gen, tokens):
        output = tokens if gen.streaming or gen.exclude_input else gen.prompt + tokens
        n = len(output)
        tensors = [
            pb_utils.Tensor("output_ids", np.array(output, dtype=np.int32).reshape(1, 1, n)),
            pb_utils.Tensor("sequence_length", np.array([[n]], dtype=np.int32)),
            pb_utils.Tensor("cum_log_probs", np.zeros((1, 1), dtype=np.float32)),
            pb_utils.Tensor("output_log_probs", np.zeros((1, 1, n), dtype=np.float32)),
            pb_utils.Tensor("context_logits", np.zeros((1, 1, 1), dtype=np.float32)),
            pb_utils.Tensor("generation_logits", np.zeros((1, 1, 1, 1), dtype=np.float32)),
            pb_utils.Tensor("batch_index", np.zeros((1, 1), dtype=np.int32)),
            pb_utils.Tensor("sequence_index", np.zeros((1, 1), dtype=np.int32)),
        ]
        if gen.want_counts[0]:
            tensors.append(pb_utils.Tensor("num_input_tokens", np.array([[len(gen.prompt)]], dtype=np.int32)))
        if gen.want_counts[1]:
            # Tokens in this response, as the TensorRT-LLM backend counts them: a stream's counts add up.
            tensors.append(pb_utils.Tensor("num_output_tokens", np.array([[len(tokens)]], dtype=np.int32)))
        if gen.want_perf:
            for name, value in (("arrival_time_ns", gen.arrival_ns), ("first_token_time_ns", gen.first_token_ns),
                                ("last_token_time_ns", gen.last_token_ns)):
                tensors.append(pb_utils.Tensor(name, np.array([[value]], dtype=np.int64)))
        return pb_utils.InferenceResponse(output_tensors=tensors)

    def _finish(self, rid, gen, *, sent=False, error=None, cancelled=False):
        with self.lock:
            if self.active.pop(rid, None) is None:
                return
            self.m_active.set(len(self.active))
        self.manager.cancel_request(rid)  # frees the KV blocks at once when we stopped before the manager did
        if cancelled:
            response = None
        elif error is not None:
            response = pb_utils.InferenceResponse(error=pb_utils.TritonError(f"tensorrt_llm (hf): {error}"))
        elif not sent:
            response = self._response(gen, gen.tokens)
        else:
            response = None
        if gen.sender is not None:
            if response is not None:
                gen.sender.send(response, flags=FINAL)
            elif not sent:
                gen.sender.send(flags=FINAL)
        else:
            gen.response = response or pb_utils.InferenceResponse(
                error=pb_utils.TritonError("tensorrt_llm (hf): request cancelled"))
            gen.done.set()

    def finalize(self):
        self.running = False
        self.manager.stop(block=True, timeout=10)
        self.dispatcher.join(timeout=5)
