"""Test double of NVIDIA's llmapi Triton model (TensorRT-LLM 1.2.1), for machines without TensorRT-LLM.

Written from the facts in facts.json beside this file (which inputs the model reads, their defaults, what it
streams, how it fails and cancels), not from NVIDIA's code. What it must reproduce exactly is what a client sees:
- configuration: decoupled and max_batch_size come from 1/model.yaml's triton_config (auto_complete_config); every
  other key goes to LLM(...), which refuses keys that are not LlmArgs fields;
- text_output is the whole text so far in every streamed response, starting with the prompt unless
  sampling_param_exclude_input_from_output is true; no token counts; the last streamed response carries text and
  the FINAL flag;
- errors: one FINAL response with text_output "N/A" and "Error generating request: ..."; cancellation: a checker
  every cancellation_check_period_ms answers a cancelled request with one FINAL "Request cancelled by client"
  (CANCELLED); a `stop` request cancels the requests that carry its request id;
- stop sequences: sampling_param_stop reaches the tokenizer as bytes, so with a Hugging Face tokenizer every request
  that carries one fails ("Error generating request: " and the tokenizer's error).
Each behaviour's upstream file and commit: `double_behaviours` in facts.json (the `# facts:` comments below name
the entry).
What it does not reproduce: the engine. It recites a fixed multilingual text with the deployment's tokenizer, one
token per request per step (continuous batching up to model.yaml's max_batch_size), and detokenizes the whole
sequence at each step as the LLM API's text does, so a step can end inside a multi-byte character (U+FFFD) that
the next step completes: clients must handle it. Sampling inputs are range-checked and otherwise ignored.

TRITONGEN_DOUBLE_ITL_MS (environment of tritonserver) sets the time per step (default 5 ms).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import triton_python_backend_utils as pb_utils
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
RECITAL = ("Привет, мир! Съешь же ещё этих мягких французских булок. 日本語のテキスト、中文文本和한국어 문장。"
           " Café, naïve, façade, résumé, Ångström. Emoji: 🙂 🚀 👍🏽 🇫🇷 ok.\n  Two leading spaces,\ttabs.\n")
SAMPLING = {  # input -> default: the names and defaults of the release's helpers.py
    "sampling_param_best_of": 1, "sampling_param_temperature": None, "sampling_param_top_k": None,
    "sampling_param_top_p": None, "sampling_param_frequency_penalty": None,
    "sampling_param_presence_penalty": None, "sampling_param_max_tokens": None, "sampling_param_seed": None,
    "sampling_param_exclude_input_from_output": False, "sampling_param_return_perf_metrics": False,
}
OUTPUT_FLAGS = {"return_finish_reason": "finish_reason", "return_stop_reason": "stop_reason",
                "return_cumulative_logprob": "cumulative_logprob"}
MAX_TOKENS_DEFAULT = 32  # the LLM API's SamplingParams default when a request sets none


def _model_yaml() -> dict:
    path = os.path.join(HERE, os.environ.get("LLM_CONFIG_PATH", "model.yaml"))
    with open(path) as f:
        return yaml.safe_load(f)


def _llm_args_keys() -> set[str]:  # facts: llm_args
    with open(os.path.join(HERE, "facts.json")) as f:
        return set(json.load(f)["llm_args"]["TorchLlmArgs"])


class RequestError(Exception):
    """A request the model refuses; the message reaches the client inside "Error generating request: ..."."""


def _scalar(request, name: str):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return None
    array = tensor.as_numpy()
    if array.size != 1:
        raise RequestError(f"Expected a scalar tensor for tensor {name}")  # facts: scalar_inputs
    value = array.reshape(-1)[0]
    return value.item() if hasattr(value, "item") else value


@dataclass(eq=False)  # identity: a request is one generation
class Generation:
    request: object
    sender: object
    request_id: str
    prompt_ids: list[int]
    max_tokens: int
    streaming: bool
    exclude_input: bool
    stops: list[str]
    flags: dict[str, bool]
    recital_at: int
    generated: list[int] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    closed: bool = False


class TritonPythonModel:
    @classmethod
    def auto_complete_config(cls, config):  # facts: triton_config
        triton = _model_yaml()["triton_config"]
        config.set_model_transaction_policy(dict(decoupled=bool(triton["decoupled"])))
        config.set_max_batch_size(int(triton["max_batch_size"]))
        return config

    def initialize(self, args):
        from transformers import AutoTokenizer

        data = _model_yaml()
        triton = data.pop("triton_config")
        unknown = sorted(set(data) - _llm_args_keys())
        if unknown:  # LLM(**kwargs) validates its arguments and forbids extra fields
            raise pb_utils.TritonModelException(f"model.yaml keys that LLM() does not accept: {', '.join(unknown)}")
        self.decoupled = bool(triton["decoupled"])
        self.cancel_period = int(triton.get("cancellation_check_period_ms", 100)) / 1000.0
        self.max_batch = int(data.get("max_batch_size") or 2048)
        self.max_seq_len = data.get("max_seq_len")
        self.tokenizer = AutoTokenizer.from_pretrained(data.get("tokenizer") or data["model"])
        self.recital = self.tokenizer.encode(RECITAL, add_special_tokens=False)
        # Where a recital may start: at a character boundary, so the text holds no orphan continuation byte.
        self.starts = [i for i in range(len(self.recital))
                       if not self.tokenizer.decode(self.recital[i:i + 4]).startswith("\ufffd")]
        self.itl = float(os.environ.get("TRITONGEN_DOUBLE_ITL_MS", "5")) / 1000.0
        self.lock = threading.Condition()
        self.waiting: deque[Generation] = deque()
        self.active: dict[int, Generation] = {}
        self.stopping = False
        # The double's own instrument (NVIDIA's model exports no metric): requests it is generating or holding,
        # so tests can see a cancelled request leave the model.
        self.family = pb_utils.MetricFamily(name="tritongen_double_requests", description="requests in the double",
                                            kind=pb_utils.MetricFamily.GAUGE)  # must outlive its metric
        self.gauge = self.family.Metric(labels={})
        self.threads = [threading.Thread(target=self._loop, daemon=True),
                        threading.Thread(target=self._watch_cancellation, daemon=True)]
        for t in self.threads:
            t.start()

    # ------------------------------------------------------------------ requests
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            try:
                if _scalar(request, "stop"):
                    self._stop(request.request_id(), sender)
                    continue
                gen = self._convert(request, sender)
            except Exception as err:  # noqa: BLE001 - every failure becomes the request's one error response
                self._fail(sender, err)
                continue
            with self.lock:
                self.waiting.append(gen)
                self.gauge.set(len(self.waiting) + len(self.active))
                self.lock.notify()
        return None

    def _convert(self, request, sender) -> Generation:
        text = pb_utils.get_input_tensor_by_name(request, "text_input")
        if text is None:
            raise RequestError("text_input is missing from the request")
        array = text.as_numpy()
        if array.ndim > 1:
            # facts: text_input_1d
            raise RequestError("The current implementation only supports text_input being a 1D tensor.")
        prompt = array[0].decode("utf-8") if isinstance(array[0], bytes) else str(array[0])
        params = {name: _scalar(request, name) for name in SAMPLING}
        params = {k: SAMPLING[k] if v is None else v for k, v in params.items()}
        streaming = bool(_scalar(request, "streaming") or False)
        flags = {name: bool(_scalar(request, name) or False) for name in OUTPUT_FLAGS}
        if streaming and not self.decoupled:
            raise RequestError("Streaming is only supported in decoupled mode.")  # facts: streaming_not_decoupled
        self._check_sampling(params)
        if flags["return_cumulative_logprob"]:
            raise RequestError("return_cumulative_logprob: this test double computes no log probabilities")
        stop = pb_utils.get_input_tensor_by_name(request, "sampling_param_stop")
        # helpers.py hands SamplingParams the tensor as it is (an array of bytes), and SamplingParams._setup
        # tokenizes each element with the model's tokenizer  # facts: stop_as_bytes
        stop = stop.as_numpy() if stop is not None else None
        for s in ([stop] if isinstance(stop, str) else stop if stop is not None else []):
            self._encode(s)
        stops = [s.decode("utf-8") if isinstance(s, bytes) else str(s)
                 for s in (stop.reshape(-1) if stop is not None else [])]
        prompt_ids = self.tokenizer.encode(prompt)
        max_tokens = int(params["sampling_param_max_tokens"] or MAX_TOKENS_DEFAULT)
        if self.max_seq_len is not None and len(prompt_ids) + max_tokens > int(self.max_seq_len):
            # facts: prompt_too_long
            raise RequestError(f"the prompt ({len(prompt_ids)} tokens) and max_tokens ({max_tokens}) exceed "
                               f"max_seq_len ({self.max_seq_len})")
        return Generation(request=request, sender=sender, request_id=request.request_id(), prompt_ids=prompt_ids,
                          max_tokens=max_tokens, streaming=streaming,
                          exclude_input=bool(params["sampling_param_exclude_input_from_output"]), stops=stops,
                          flags=flags, recital_at=self.starts[len(prompt_ids) % len(self.starts)])

    def _encode(self, text):
        """SamplingParams._setup's _encode: the tokenizer's encode, retried without add_special_tokens on a
        TypeError."""
        try:
            return self.tokenizer.encode(text, add_special_tokens=False)
        except TypeError:
            return self.tokenizer.encode(text)

    @staticmethod
    def _check_sampling(p: dict) -> None:  # facts: sampling_checks
        # The LLM API's SamplingParams validates its arguments when it is constructed.
        if p["sampling_param_max_tokens"] is not None and p["sampling_param_max_tokens"] < 1:
            raise RequestError(f"max_tokens ({p['sampling_param_max_tokens']}) must be at least 1")
        if p["sampling_param_best_of"] != 1:
            raise RequestError(f"best_of ({p['sampling_param_best_of']}): this test double returns one sequence")
        if p["sampling_param_temperature"] is not None and p["sampling_param_temperature"] < 0:
            raise RequestError(f"temperature ({p['sampling_param_temperature']}) must be non-negative")
        if p["sampling_param_top_p"] is not None and not 0 <= p["sampling_param_top_p"] <= 1:
            raise RequestError(f"top_p ({p['sampling_param_top_p']}) must be within [0, 1]")
        if p["sampling_param_top_k"] is not None and p["sampling_param_top_k"] < 0:
            raise RequestError(f"top_k ({p['sampling_param_top_k']}) must be non-negative")

    # ------------------------------------------------------------------ generation
    def _loop(self):
        while True:
            with self.lock:
                while not self.stopping and not self.waiting and not self.active:
                    self.lock.wait()
                if self.stopping:
                    return
                while self.waiting and len(self.active) < self.max_batch:
                    gen = self.waiting.popleft()
                    self.active[id(gen)] = gen
                batch = list(self.active.values())
            time.sleep(self.itl)
            for gen in batch:
                self._step(gen)

    def _step(self, gen: Generation) -> None:
        gen.generated.append(self.recital[(gen.recital_at + len(gen.generated)) % len(self.recital)])
        text = self.tokenizer.decode(gen.generated, skip_special_tokens=True)
        finish, stop_reason = None, None
        for s in gen.stops:
            at = text.find(s) if s else -1
            if at >= 0:  # the LLM API leaves the stop string out of the text
                text, finish, stop_reason = text[:at], "stop", s
                break
        if finish is None and len(gen.generated) >= gen.max_tokens:
            finish = "length"
        if not gen.exclude_input:
            text = self.tokenizer.decode(gen.prompt_ids + gen.generated, skip_special_tokens=True) \
                if finish != "stop" else self.tokenizer.decode(gen.prompt_ids, skip_special_tokens=True) + text
        if gen.streaming or finish is not None:
            self._send(gen, self._response(gen, text, finish, stop_reason), final=finish is not None)

    # facts: whole_text_output
    # facts: no_token_counts (the model's outputs carry text and reasons, never counts)
    def _response(self, gen: Generation, text: str, finish: str | None, stop_reason: str | None):
        tensors = [pb_utils.Tensor("text_output", np.array([text.encode("utf-8")], dtype=np.object_))]
        if gen.flags["return_finish_reason"]:
            tensors.append(pb_utils.Tensor("finish_reason", np.array([str(finish).encode()], dtype=np.object_)))
        if gen.flags["return_stop_reason"]:
            tensors.append(pb_utils.Tensor("stop_reason", np.array([str(stop_reason).encode()], dtype=np.object_)))
        return pb_utils.InferenceResponse(output_tensors=tensors)

    def _send(self, gen: Generation, response, *, final: bool) -> None:
        with gen.lock:
            if gen.closed:
                return
            if final:
                gen.closed = True
            gen.sender.send(response, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if final else 0)
        if final:
            with self.lock:
                self.active.pop(id(gen), None)
                self.gauge.set(len(self.waiting) + len(self.active))

    def _fail(self, sender, err: Exception) -> None:  # facts: error_response
        response = pb_utils.InferenceResponse(
            output_tensors=[pb_utils.Tensor("text_output", np.array([b"N/A"], dtype=np.object_))],
            error=pb_utils.TritonError(f"Error generating request: {err}"))
        sender.send(response, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    # ------------------------------------------------------------------ cancellation
    def _cancelled_response(self):
        return pb_utils.InferenceResponse(error=pb_utils.TritonError("Request cancelled by client",
                                                                     pb_utils.TritonError.CANCELLED))

    def _cancel(self, gen: Generation) -> None:  # facts: cancellation
        with self.lock:
            self.active.pop(id(gen), None)
            if gen in self.waiting:
                self.waiting.remove(gen)
            self.gauge.set(len(self.waiting) + len(self.active))
        with gen.lock:
            if gen.closed:
                return
            gen.closed = True
            gen.sender.send(self._cancelled_response(), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def _watch_cancellation(self):
        while not self.stopping:
            time.sleep(self.cancel_period)
            with self.lock:
                items = list(self.active.values()) + list(self.waiting)
            for gen in items:
                with gen.lock:
                    # Only while open: after its FINAL response Triton frees the response factory.
                    cancelled = not gen.closed and gen.request.is_cancelled()
                if cancelled:
                    self._cancel(gen)

    def _stop(self, request_id: str, sender) -> None:  # facts: stop_request
        if not request_id:
            sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(
                "A request id must be provided for request cancellation")),
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            return
        with self.lock:
            targets = [g for g in [*self.active.values(), *self.waiting] if g.request_id == request_id]
        for gen in targets:
            self._cancel(gen)
        sender.send(self._cancelled_response(), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def finalize(self):
        with self.lock:
            self.stopping = True
            self.lock.notify_all()
            left = list(self.active.values()) + list(self.waiting)
        for gen in left:
            self._cancel(gen)
        for t in self.threads:
            t.join(timeout=5)
