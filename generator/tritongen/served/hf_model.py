# Shipped by tritongen. The `tensorrt_llm` model of the hf runtime (python backend).
"""An LLM model with the tensor contract of TensorRT-LLM's `tensorrt_llm` model, on transformers.

Generation runs on transformers' continuous batching (a paged KV cache and one background loop that admits new
requests at every step), so concurrent requests share decode steps: in-flight batching. Responses are sent with the
request's response sender in both transaction policies: decoupled (streamed requests get a response with the new
tokens once `stream_interval` tokens are waiting and `stream_flush_ms` has passed since the request's previous one;
by default every step, and never more than one per request per step) and not decoupled (one response, then FINAL);
`execute` only admits requests and returns at once.

Serving rules (tests/runtimes/test_faults.py holds the model to them): every request is checked before it enters the batch and a bad one
gets one error naming the input and the limit; every request ends with exactly one FINAL response; at most
`max_batch_size` requests are in flight, further ones wait in Triton's queue, whose `max_queue_size` rejects the
excess; a cancelled request is dropped within `cancellation_check_period_ms` plus one step; if the generation loop
dies, every active and later request gets an error at once and (`exit_on_fatal_error`) the server is told to shut
down so that an orchestrator restarts it. Request checks and responses live in hf_requests.py, shipped beside
this model.
"""

import json
import os
import signal
import threading
import time

import torch
import triton_python_backend_utils as pb_utils
from transformers import AutoModelForCausalLM, GenerationConfig
from transformers.generation.configuration_utils import ContinuousBatchingConfig

from . import hf_adapters
from .error_kinds import BAD_REQUEST, INTERNAL, UNAVAILABLE, RequestError, tagged
from .hf_guided import GUIDE_INPUT, TYPE_INPUT, Guided, GuidedProcessor, Guides, read_guide
from .hf_requests import (
    FINAL, Limits, MinTokensProcessor, error_response, install_processor, parse_request, response_for)
from .stub import Drain, leave_without_teardown, param, server_ready_probe, stderr_log

DTYPES = {"auto": "auto", "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
ATTENTION = ("sdpa_mem_efficient", "sdpa", "eager")


def _stop_requested(request):
    tensor = pb_utils.get_input_tensor_by_name(request, "stop")
    return tensor is not None and bool(tensor.as_numpy().reshape(-1)[:1].any())


def _flag(config, key, default):
    value = param(config, key, None)
    return default if value is None else value.lower() in ("1", "true", "yes", "on")


def _cache_size(cache, cb_config):
    """(tokens per block, blocks, tokens of KV one request can use) across transformers 5.17 (block_size) and later
    releases (page_size, max_tokens_read)."""
    block = getattr(cache, "block_size", None) or getattr(cb_config, "page_size", None) or cb_config.block_size
    blocks = int(cache.num_blocks)
    return int(block), blocks, int(getattr(cache, "max_tokens_read", 0) or block * blocks)


class TritonPythonModel:
    # ------------------------------------------------------------------ start
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.model_name = args["model_name"]
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(config)
        self.exclude_default = _flag(config, "exclude_input_in_output", False)
        gpu = args.get("model_instance_kind") == "GPU"
        device = f"cuda:{args['model_instance_device_id']}" if gpu else "cpu"
        self.max_in_flight = max(1, int(config.get("max_batch_size", 0) or 1))
        self.cancel_period = int(param(config, "cancellation_check_period_ms", 100)) / 1000.0
        self.stream_interval = max(1, int(param(config, "stream_interval", 1)))
        self.stream_flush_s = max(0, int(param(config, "stream_flush_ms", 0))) / 1000.0
        self.exit_on_fatal = _flag(config, "exit_on_fatal_error", True)
        self.sampling = param(config, "sampling", "per_request")
        if self.sampling not in ("per_request", "greedy"):
            raise ValueError(f"parameter sampling: {self.sampling!r} is not per_request or greedy")
        attention = param(config, "attention", "sdpa_mem_efficient" if gpu else "sdpa")
        if attention not in ATTENTION:
            raise ValueError(f"parameter attention: {attention!r} is not one of {', '.join(ATTENTION)}")
        self.attention = self._choose_attention(attention)
        graphs = param(config, "cuda_graphs", "auto")
        use_graphs = gpu if graphs == "auto" else graphs.lower() == "true"
        self.log_probs = _flag(config, "log_probs", True)

        path = param(config, "hf_model_path")
        dtype = DTYPES[param(config, "dtype", "auto")]
        self.model = AutoModelForCausalLM.from_pretrained(
            path, dtype=dtype, attn_implementation="eager" if attention == "eager" else "sdpa").to(device)
        vocab = self.model.get_input_embeddings().num_embeddings
        adapters = hf_adapters.parse(param(config, "lora_adapters"))
        self.adapters = hf_adapters.Adapters(self.model, adapters) if adapters else None
        if self.adapters is not None:
            # The adapters' per-step token mask (hf_adapters.py) is built on the host: not capturable in a CUDA graph.
            use_graphs = False
        end_id = int(param(config, "end_id", self.model.config.eos_token_id))
        pad_id = int(param(config, "pad_id", end_id))
        num_blocks = param(config, "kv_cache_num_blocks")
        max_batch_tokens = param(config, "max_batch_tokens")
        cb_config = ContinuousBatchingConfig(
            per_request_processors=self.sampling == "per_request",
            block_size=int(param(config, "kv_cache_block_size", 32)),
            num_blocks=int(num_blocks) if num_blocks else None,
            max_batch_tokens=int(max_batch_tokens) if max_batch_tokens else None,
            max_memory_percent=float(param(config, "kv_cache_free_gpu_mem_fraction", 0.9)),
            use_cuda_graph=use_graphs,
            # transformers 5.17 hung with async batching on an H200 (no response in 110 s); the plain loop is kept.
            use_async_batching=False,
            return_logprobs=self.log_probs,
        )
        if self.sampling == "per_request":
            # Sampling processors exist only when the generation config enables them; every request then passes
            # its own temperature/top_k/top_p, so these values are placeholders, never defaults.
            generation_config = GenerationConfig(do_sample=True, temperature=0.5, top_k=50, top_p=0.9,
                                                 eos_token_id=end_id, pad_token_id=pad_id, max_new_tokens=16)
        else:
            # Greedy only: no sampling processors and an argmax, the fastest path (no per-request processing).
            generation_config = GenerationConfig(do_sample=False, eos_token_id=end_id, pad_token_id=pad_id,
                                                 max_new_tokens=16)
        self.manager = self.model.init_continuous_batching(generation_config=generation_config,
                                                           continuous_batching_config=cb_config)
        # min_tokens: TensorRT-LLM masks end_id until min_tokens tokens exist; one small processor does the same.
        install_processor(self.manager, MinTokensProcessor())
        # Guided decoding (hf_guided.py): needs the tokenizer (rendered as tokenizer_dir) for XGrammar's vocabulary.
        tokenizer_dir = param(config, "tokenizer_dir")
        self.max_schema_bytes = int(param(config, "max_schema_bytes", 65536))
        self.guides = Guides(tokenizer_dir, vocab, end_id, self.max_schema_bytes) if tokenizer_dir else None
        self.guided = GuidedProcessor(vocab, self.max_in_flight, device, graphs=bool(use_graphs))
        install_processor(self.manager, self.guided)

        self.active = {}
        self.lock = threading.Lock()
        self.room = threading.Condition(self.lock)
        self.stopping = False
        self.fatal = None
        self.next_id = 0
        self._init_metrics()
        self._hook_steps()
        try:
            self._start_manager()
        except BaseException:
            # A started loop is a non-daemon thread: without this the stub never exits and the load hangs.
            self.manager.stop(block=True, timeout=10, hard_stop=True)
            raise
        processor = self.manager.batch_processor
        if self.adapters is not None:
            self.adapters.install(processor)
        block_size, num_blocks, kv_tokens = _cache_size(processor.cache, self.manager.continuous_batching_config)
        max_len = int(getattr(self.model.config, "max_position_embeddings", 0) or 0) or None
        self.limits = Limits(vocab=vocab, end_id=end_id, pad_id=pad_id, block_size=block_size,
                             num_blocks=num_blocks, kv_tokens=kv_tokens, max_position_embeddings=max_len,
                             sampling=self.sampling == "per_request", log_probs=self.log_probs,
                             decoupled=self.decoupled, exclude_default=self.exclude_default,
                             adapters=self.adapters)
        self.settings = self._effective_settings(device, path, processor.cache)
        pb_utils.Logger.log_info(f"{self.model_name}: continuous batching started: "
                                 + ", ".join(f"{k}={v}" for k, v in self.settings.items()))
        self._export_settings()
        self.dispatcher = threading.Thread(target=self._dispatch, name="tritongen-dispatch", daemon=True)
        self.watcher = threading.Thread(target=self._watch_cancellation, name="tritongen-cancel", daemon=True)
        self.dispatcher.start()
        self.watcher.start()

    def _start_manager(self):
        self.manager.start()
        # The manager builds its batch processor (cache, static tensors, CUDA graphs) on its own thread; wait for
        # it so READY means ready and the first request does not pay for the setup.
        deadline = time.monotonic() + 600
        while self.manager.batch_processor is None and self.manager.is_running() and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.manager.batch_processor is None:
            raise RuntimeError("continuous batching did not start; see the log above")

    def _choose_attention(self, attention):
        """Pick the attention kernels on purpose. torch's bundled cuDNN attention builds a plan per new shape
        (60-75 ms per token until shapes repeat, measured on an H200); the memory-efficient kernel needs none."""
        if attention == "sdpa_mem_efficient" and torch.cuda.is_available():
            torch.backends.cuda.enable_cudnn_sdp(False)
            torch.backends.cuda.enable_flash_sdp(False)
            torch.backends.cuda.enable_mem_efficient_sdp(True)
            torch.backends.cuda.enable_math_sdp(True)  # the fallback for shapes the kernel refuses
        return attention

    def _effective_settings(self, device, path, cache):
        cb = self.manager.continuous_batching_config
        graphs = cb.use_cuda_graph if isinstance(cb.use_cuda_graph, tuple) else (cb.use_cuda_graph,) * 2
        try:
            cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
        except Exception as err:  # a cuDNN shadowed by another library folder raises here
            cudnn = f"unusable ({err})"
        return {
            "model": path, "device": device, "dtype": str(self.model.dtype).replace("torch.", ""),
            "attention": self.attention, "attn_implementation": self.model.config._attn_implementation,
            "cudnn": cudnn, "cuda_graph_varlen": bool(graphs[0]), "cuda_graph_decode": bool(graphs[1]),
            "async_batching": bool(cb.use_async_batching), "sampling": self.sampling, "log_probs": self.log_probs,
            "block_size": self.limits.block_size, "num_blocks": self.limits.num_blocks,
            "kv_cache_tokens": self.limits.kv_tokens, "max_batch_tokens": cache.max_batch_tokens,
            "max_requests_per_batch": getattr(cb, "max_requests_per_batch", None),
            "max_in_flight": self.max_in_flight, "cancellation_check_period_ms": int(self.cancel_period * 1000),
            "stream_interval": self.stream_interval, "stream_flush_ms": int(self.stream_flush_s * 1000),
            "max_input_plus_output": self.limits.max_total,
            "lora_adapters": len(self.adapters.names) if self.adapters is not None else 0,
        }

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
            "rejected": pb_utils.MetricFamily("tritongen_llm_rejected_requests_total",
                                              "Requests answered with an error before entering the batch", counter),
            "loop": pb_utils.MetricFamily("tritongen_llm_generation_loop_up",
                                          "1 while the generation loop runs, 0 once it died", gauge),
            "setting": pb_utils.MetricFamily("tritongen_llm_setting",
                                             "Effective continuous-batching settings (numeric, booleans as 0/1)",
                                             gauge),
            # The load test checks its client-side token totals against this counter.
            "output_tokens": pb_utils.MetricFamily("tritongen_llm_output_tokens_total",
                                                   "Output tokens sent in responses", counter),
            # The model's own timings of finished requests: the load report splits a request's time with them.
            "first_us": pb_utils.MetricFamily("tritongen_llm_first_response_us_total",
                                              "Microseconds from arrival at the model to the first response, "
                                              "finished requests", counter),
            "generation_us": pb_utils.MetricFamily("tritongen_llm_generation_us_total",
                                                   "Microseconds from the first to the last response, finished "
                                                   "requests", counter),
            "later_tokens": pb_utils.MetricFamily("tritongen_llm_later_tokens_total",
                                                  "Output tokens after the first, finished requests", counter),
            "finished": pb_utils.MetricFamily("tritongen_llm_finished_requests_total",
                                              "Requests that got their last response with tokens", counter),
        }
        self.labels = labels
        self.m_steps = self.metric_families["steps"].Metric(labels=labels)
        self.m_step_requests = self.metric_families["step_requests"].Metric(labels=labels)
        self.m_step_max = self.metric_families["step_max"].Metric(labels=labels)
        self.m_active = self.metric_families["active"].Metric(labels=labels)
        self.m_rejected = self.metric_families["rejected"].Metric(labels=labels)
        self.m_loop = self.metric_families["loop"].Metric(labels=labels)
        self.m_loop.set(1)
        self.m_output_tokens = self.metric_families["output_tokens"].Metric(labels=labels)
        self.m_timings = [self.metric_families[k].Metric(labels=labels)
                          for k in ("first_us", "generation_us", "later_tokens", "finished")]
        self.step_max = 0

    def _export_settings(self):
        self.m_settings = []
        for key, value in self.settings.items():
            if isinstance(value, bool):
                value = int(value)
            if isinstance(value, (int, float)) and value is not None:
                metric = self.metric_families["setting"].Metric(labels={**self.labels, "setting": key})
                metric.set(value)
                self.m_settings.append(metric)
        for key in ("attention", "attn_implementation", "sampling"):
            metric = self.metric_families["setting"].Metric(
                labels={**self.labels, "setting": key, "value": str(self.settings[key])})
            metric.set(1)
            self.m_settings.append(metric)

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

    # ------------------------------------------------------------------ admission
    def execute(self, requests):
        for request in requests:
            try:
                sender = request.get_response_sender()
            except Exception as err:  # nothing can be sent without a sender; Triton then reports the request
                pb_utils.Logger.log_error(f"{self.model_name}: no response sender: {err}")
                continue
            try:
                if _stop_requested(request):  # the backend's `stop` input: end the request with this request id
                    self._stop(request.request_id())
                    sender.send(flags=FINAL)
                    continue
                self._admit(request, sender)
            except RequestError as err:
                self.m_rejected.increment(1)
                self._send_error(sender, str(err))
            except Exception as err:  # anything else still ends the request with one error
                self.m_rejected.increment(1)
                self._send_error(sender, tagged(INTERNAL, f"internal error while admitting the request: {err!r}"))
        return None

    def _admit(self, request, sender):
        gen = parse_request(request, sender, self.limits)
        gen.triton_id = request.request_id()
        guide = read_guide(request, self.max_schema_bytes)
        if guide is not None:
            gen.guided = self._guided(gen, guide)
        with self.room:
            # Back-pressure: at most max_batch_size requests in flight. Waiting here keeps the rest in Triton's
            # queue, where max_queue_size rejects the excess as Triton's own rejection.
            while len(self.active) >= self.max_in_flight and self.fatal is None and not self.stopping:
                self.room.wait(0.1)
            if self.fatal is not None:
                raise RequestError(f"the generation loop died ({self.fatal}); the server is restarting", INTERNAL)
            if self.stopping:
                raise RequestError("the model is shutting down", UNAVAILABLE)
            rid = f"r{self.next_id}"
            self.next_id += 1
            gen.rid = rid
            if gen.guided is not None:
                self.guided.matchers[rid] = gen.guided  # before add_request: its first step needs the matcher
            self.active[rid] = gen  # before add_request: the first output may arrive before it returns
            if self.adapters is not None:
                self.adapters.assign(rid, gen.adapter)  # before add_request: the next step may schedule it
            # The gauge too: a client holding the first token must see this request counted.
            self.m_active.set(len(self.active))
        try:
            accepted = self.manager.add_request(gen.prompt, request_id=rid, max_new_tokens=gen.max_new,
                                                streaming=True, eos_token_id=gen.stop_id, **gen.kwargs)
        except Exception as err:
            accepted = None
            reason = repr(err)
        else:
            reason = "the generation loop refused it"
        if accepted is None:
            self.guided.matchers.pop(rid, None)
            with self.room:
                self.active.pop(rid, None)
                self.room.notify()
                self.m_active.set(len(self.active))
            if self.adapters is not None:
                self.adapters.release(rid)
            raise RequestError(f"not accepted by continuous batching: {reason}", INTERNAL)

    def _guided(self, gen, guide):
        """The request's matcher; refuses what the grammar cannot honour with its input named."""
        if self.guides is None:
            raise RequestError(f"{TYPE_INPUT}: this model was rendered without a tokenizer_dir parameter, which "
                               "guided decoding needs; re-render the repository", BAD_REQUEST, TYPE_INPUT)
        if gen.end_id != self.limits.end_id:
            raise RequestError(f"end_id: a guided request ends with the model's end id {self.limits.end_id} (where "
                               "its grammar is complete); leave end_id unset", BAD_REQUEST, "end_id")
        if gen.min_tokens:
            raise RequestError(f"min_tokens: cannot be combined with {TYPE_INPUT} (the grammar decides where the "
                               "output ends); leave it unset", BAD_REQUEST, "min_tokens")
        return Guided(self.guides.matcher(*guide))

    def _send_error(self, sender, message):
        try:
            sender.send(error_response(message), flags=FINAL)
        except Exception as err:
            pb_utils.Logger.log_error(f"{self.model_name}: could not send an error response: {err}")

    # ------------------------------------------------------------------ results
    def _dispatch(self):
        """Turn the manager's outputs into responses. Guarded: whatever goes wrong, requests get their FINAL."""
        try:
            while not self.stopping:
                out = self.manager.get_result(timeout=0.1)
                if out is None:
                    if not self.stopping and not self._loop_alive():
                        self._loop_died(self._loop_error())
                        return
                    continue
                for out in self._latest(out):
                    with self.lock:
                        gen = self.active.get(out.request_id)
                    if gen is None:
                        continue
                    try:
                        self._on_output(gen, out)
                    except Exception as err:  # one request's failure must not touch the others
                        self._finish(gen, error=tagged(INTERNAL, f"internal error: {err!r}"))
        except BaseException as err:  # the dispatcher itself failed: nothing would answer any more
            self._loop_died(f"dispatcher failed: {err!r}")

    def _latest(self, first):
        """`first` and every output already queued behind it, reduced to the latest per request. A request's output
        carries all its tokens so far, so when this thread falls behind the steps, one response per request carries
        the tokens of several steps: at most one send per request per step, never a backlog of small responses."""
        latest = {first.request_id: first}
        for _ in range(4 * self.max_in_flight):  # bounded: the steps keep producing while this runs
            out = self.manager.get_result(timeout=0)
            if out is None:
                break
            latest[out.request_id] = out
        return latest.values()

    def _loop_alive(self):
        status = self.manager.background_thread_status
        return self.manager.is_running() and status.fatal_error is None

    def _loop_error(self):
        error = self.manager.background_thread_status.fatal_error
        return repr(error) if error is not None else "the generation thread exited"

    def _on_output(self, gen, out):
        if out.error:  # transformers' own words, untagged: the frontend reads them as it reads Triton's
            self._finish(gen, error=out.error)
            return
        if gen.guided is not None and gen.guided.error is not None:
            self._finish(gen, error=tagged(INTERNAL, f"{GUIDE_INPUT}: {gen.guided.error}"))
            return
        now = time.time_ns()
        stop = False
        new = out.generated_tokens[gen.seen:]
        logprobs = list(out.logprobs[gen.seen:]) if gen.want_log_probs else []
        for i, token in enumerate(new):
            gen.seen += 1
            token = int(token)
            if token == gen.end_id:  # min_tokens masks it until enough tokens exist
                stop = True
                break
            gen.tokens.append(token)
            if gen.want_log_probs:
                gen.logprobs.append(float(logprobs[i]))
            gen.first_token_ns = gen.first_token_ns or now
            gen.last_token_ns = now
            if len(gen.tokens) >= gen.max_new or any(gen.tokens[-len(s):] == s for s in gen.stops):
                stop = True
                break
        stop = stop or out.is_finished()
        if stop:
            self._finish(gen)
        elif gen.streaming and len(gen.tokens) - gen.sent >= self.stream_interval and \
                time.monotonic() - gen.sent_at >= self.stream_flush_s:
            chunk_start, gen.sent = gen.sent, len(gen.tokens)
            with gen.lock:
                if not gen.closed:
                    self._send_tokens(gen, chunk_start, 0)

    def _send_tokens(self, gen, start, flags):
        """Send the completion tokens from `start` (streaming) or all of them, and count them as sent. Counted
        first: a client that scrapes the counter right after its last response must find them there."""
        self.m_output_tokens.increment(len(gen.tokens) - start if gen.streaming else len(gen.tokens))
        gen.sender.send(response_for(gen, start), flags=flags)
        gen.sent_at = time.monotonic()
        gen.last_sent_ns = time.time_ns()
        gen.first_sent_ns = gen.first_sent_ns or gen.last_sent_ns

    def _count_timings(self, gen):
        """A request that ended normally: add its own timings (arrival -> first response -> last response)."""
        if not gen.first_sent_ns:
            return
        first, generation, later, finished = self.m_timings
        first.increment((gen.first_sent_ns - gen.arrival_ns) // 1000)
        generation.increment((gen.last_sent_ns - gen.first_sent_ns) // 1000)
        later.increment(max(0, len(gen.tokens) - 1) if gen.streaming else 0)  # one response: no gap timed
        finished.increment(1)

    def _finish(self, gen, *, error=None, cancelled=False):
        """End a request exactly once: the first caller wins, later ones return."""
        with self.room:
            if self.active.pop(gen.rid, None) is None:
                return
            self.room.notify()
            # Under the lock, as every count of `active` is set: a count read outside it could land after a newer
            # one (a finishing request's 0 after a new request's 1).
            self.m_active.set(len(self.active))
        self.guided.matchers.pop(gen.rid, None)
        if self.adapters is not None:
            self.adapters.release(gen.rid)
        try:
            self.manager.cancel_request(gen.rid)  # frees the KV blocks at once when we stopped before the manager
        except Exception:
            pass
        with gen.lock:
            if gen.closed:
                return
            gen.closed = True
            try:
                if error is not None:
                    gen.sender.send(error_response(error), flags=FINAL)
                elif cancelled:
                    gen.sender.send(flags=FINAL)
                elif gen.streaming:
                    # A stream that sent nothing yet (the first token was the end token) still gets one response
                    # with its (empty) tokens and counts, so clients learn the prompt's size and a usage total.
                    if len(gen.tokens) > gen.sent or gen.sent == 0:
                        start, gen.sent = gen.sent, len(gen.tokens)
                        self._send_tokens(gen, start, FINAL)
                    else:
                        gen.sender.send(flags=FINAL)
                else:
                    self._send_tokens(gen, 0, FINAL)
                if error is None and not cancelled:
                    self._count_timings(gen)
            except Exception as err:
                pb_utils.Logger.log_error(f"{self.model_name}: could not send the final response of {gen.rid}: {err}")

    def _stop(self, triton_id):
        """End the requests in flight with this Triton request id (tensorrt_llm_bls sends this on a stop string)."""
        with self.room:
            found = [gen for gen in self.active.values() if triton_id and gen.triton_id == triton_id]
        for gen in found:
            self._finish(gen, cancelled=True)

    # ------------------------------------------------------------------ cancellation
    def _watch_cancellation(self):
        """Ask Triton every period whether a client gave up (an IPC round trip per request), off the response path;
        end every request once a stopping server's drain is over; and exit when tritonserver is gone, so an
        orphaned stub never keeps the GPU."""
        parent = os.getppid()
        drain = Drain(self.model_name, server_ready_probe(pb_utils.is_model_ready), stderr_log)
        while not self.stopping and self.fatal is None:
            time.sleep(self.cancel_period)
            if os.getppid() != parent:  # tritonserver died (e.g. SIGKILL): nothing can answer; free the device
                os._exit(1)
            if drain.over():
                self._end_all(tagged(UNAVAILABLE, f"{self.model_name}: the server is stopping; retry the request "
                                                  "on another replica"))
            self._check_cancelled()

    def _end_all(self, error):
        with self.lock:
            items = list(self.active.values())
        for gen in items:
            self._finish(gen, error=error)

    def _check_cancelled(self):
        """One pass of the watcher, in its own method so that no request outlives the pass in a local (a loop
        variable held the last request seen, and its response sender, until a later pass saw another)."""
        with self.lock:
            items = list(self.active.values())
        for gen in items:
            # Under the request's lock and only while it is open: once its FINAL response went out, Triton
            # frees the response factory, and is_cancelled() on it crashed tritonserver 2.51 (SIGSEGV in
            # TRITONBACKEND_ResponseFactoryIsCancelled, seen under load in the load-test suite).
            with gen.lock:
                if gen.closed:
                    continue
                try:
                    cancelled = gen.sender.is_cancelled()
                except Exception:  # a request whose client is gone can fail to answer; treat it as cancelled
                    cancelled = True
            if cancelled:
                self._finish(gen, cancelled=True)

    # ------------------------------------------------------------------ failure and shutdown
    def _loop_died(self, reason):
        with self.room:
            if self.fatal is not None:
                return
            self.fatal = reason
            items = list(self.active.values())
            self.room.notify_all()
        self.m_loop.set(0)
        pb_utils.Logger.log_error(f"{self.model_name}: the generation loop died: {reason}; failing "
                                  f"{len(items)} active request(s)")
        for gen in items:
            self._finish(gen, error=tagged(INTERNAL, f"the generation loop died ({reason})"))
        if self.exit_on_fatal and not self.stopping:
            self._stop_server()

    def _stop_server(self):
        """Make the failure visible: SIGTERM the tritonserver that started this stub, so readiness goes away and an
        orchestrator (or `tritongen serve`, which then exits non-zero) restarts it."""
        parent = os.getppid()
        try:
            with open(f"/proc/{parent}/comm") as f:
                name = f.read().strip()
        except OSError:
            name = ""
        if name != "tritonserver":
            pb_utils.Logger.log_error(f"{self.model_name}: parent process {parent} is {name!r}, not tritonserver; "
                                      "not stopping it")
            return
        pb_utils.Logger.log_error(f"{self.model_name}: asking tritonserver (pid {parent}) to shut down")

        def later():
            time.sleep(0.5)  # let the error responses leave first
            os.kill(parent, signal.SIGTERM)

        threading.Thread(target=later, daemon=True).start()

    def finalize(self):
        with self.room:
            self.stopping = True
            items = list(self.active.values())
            self.room.notify_all()
        for gen in items:
            self._finish(gen, error=tagged(UNAVAILABLE, "the model is shutting down"))
        try:
            self.manager.stop(block=True, timeout=10, hard_stop=True)
        except Exception as err:
            pb_utils.Logger.log_error(f"{self.model_name}: stopping continuous batching: {err!r}")
        self.dispatcher.join(timeout=5)
        self.watcher.join(timeout=5)
        leave_without_teardown()
