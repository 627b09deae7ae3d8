"""Test double of Triton's vLLM backend (vllm_backend r26.01 with vLLM 0.13.0), for machines without vLLM: a python-based backend
named `vllm` (tritonserver loads `<backend dir>/vllm/model.py` for a model whose config.pbtxt says backend "vllm").

Written from the facts in tests/fixtures/nvidia/vllm_backend-r26.01.json (`model_py`, `request`,
`sampling_params`, `detokenizer`), not from NVIDIA's code. What it must reproduce exactly is what a client sees:
- configuration: decoupled is required; `1/model.json` holds vLLM engine args, whose keys must be EngineArgs fields
  (AsyncEngineArgs(**model.json) refuses others);
- requests: text_input, stream, sampling_parameters (one JSON string of SamplingParams fields, vLLM's defaults
  and limits), exclude_input_in_output (absent: an unstreamed answer starts with the prompt; false on a stream is
  refused), return_finish_reason / return_num_input_tokens / return_num_output_tokens;
- responses: a streamed text_output is the text new since the previous response, with an incomplete character and
  the last len(longest stop) - 1 characters held back until decided; the finished output's response carries the
  FINAL flag; an unstreamed request gets one FINAL response with the whole text; num_input_tokens on every response,
  num_output_tokens the tokens new in the response; finish_reason "None" until the last;
- errors: one FINAL response with text_output "N/A" and "Error generating stream: ..."; cancellation checked at each
  step: a stream ends with one FINAL "Request was cancelled" (CANCELLED);
- metrics (REPORT_CUSTOM_METRICS "true"): the counters vllm:prompt_tokens_total and vllm:generation_tokens_total.
- an invalid sampling_parameters (bad JSON, an unknown field, a value vLLM's SamplingParams refuses): the backend's
  TritonSamplingParams.from_dict logs vLLM's error and returns None, and the request then fails reading
  `lora_name` of None, so the client sees "Error generating stream: 'NoneType' object has no attribute
  'lora_name'" and never vLLM's reason (the reason goes to the server log only);
- a prompt of max_model_len tokens or more: "Error generating stream: The decoder prompt (length N) is longer than
  the maximum model length of M. ...";
- structured_outputs: a value from_dict cannot splat into StructuredOutputsParams (not a JSON string, an unknown key,
  two constraints) is the same "'NoneType' object has no attribute 'lora_name'"; a constraint vLLM's validation
  refuses (xgrammar, then the guidance fallback of the "auto" backend) is "Error generating stream: Grammar error:
  ..." (the double gives XGrammar's reason where llguidance's would follow).
Each behaviour's upstream file and commit: `double_behaviours` in tests/fixtures/nvidia/vllm_backend-r26.01.json
(the `# facts:` comments below name the entry).
What it does not reproduce: vLLM. It generates with transformers on the CPU (the checkpoint of model.json, one
request at a time per step, up to max_num_seqs requests per step), and it knows fewer SamplingParams fields than
vLLM (SAMPLING: a field vLLM takes and it does not fails like an invalid one).

TRITONGEN_DOUBLE_ITL_MS (environment of tritonserver) adds a pause per step (default 0).
"""

from __future__ import annotations

import json
import math
import os
import re
import threading
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import triton_python_backend_utils as pb_utils

ENGINE_ARGS = {"model", "tokenizer", "dtype", "max_model_len", "max_num_seqs", "tensor_parallel_size",
               "gpu_memory_utilization", "enable_prefix_caching", "trust_remote_code", "enable_lora", "max_lora_rank",
               "max_loras"}
SAMPLING = {"max_tokens": 16, "min_tokens": 0, "temperature": 1.0, "top_p": 1.0, "top_k": 0, "seed": None,
            "stop": None, "presence_penalty": 0.0, "frequency_penalty": 0.0, "structured_outputs": None}
# StructuredOutputsParams (vLLM 0.13.0): at most one constraint, and the options that shape it.
CONSTRAINTS = ("json", "regex", "choice", "grammar", "json_object", "structural_tag")
OPTIONS = ("disable_fallback", "disable_any_whitespace", "disable_additional_properties", "whitespace_pattern")
MIN_TEMPERATURE = 0.01  # vLLM's _MAX_TEMP: a temperature above 0 and below it is raised to it
FLAGS = ("return_finish_reason", "return_num_input_tokens", "return_num_output_tokens")


class LoraError(Exception):
    """A lora_name the backend refuses before the request starts (_verify_loras, answered by respond_error)."""


class RequestError(Exception):
    """A request the backend refuses; the message reaches the client inside "Error generating stream: ..."."""


def _flag(request, name: str):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return None if tensor is None else bool(tensor.as_numpy()[0])


def _triton_sampling_params(text: str) -> dict | None:
    """What TritonSamplingParams.from_dict returns: the parameters, or None when vLLM refuses them (its reason is
    logged, not raised).  # facts: sampling_parameters_invalid"""
    try:
        return _sampling(text)
    except Exception as err:  # noqa: BLE001 - from_dict catches every exception
        pb_utils.Logger.log_error(f"[vllm double] TritonSamplingParams.from_dict returned None: {err}")
        return None


def _sampling(text: str) -> dict:  # facts: sampling_limits
    """SamplingParams from the JSON string, with vLLM's defaults and the checks its constructor makes."""
    given = json.loads(text or "{}")
    given.pop("lora_name", None)  # TritonSamplingParams' own field: _verify_loras checked it
    unknown = sorted(set(given) - set(SAMPLING))
    if unknown:
        raise RequestError(f"this test double takes no SamplingParams field {', '.join(unknown)}")
    p = {**SAMPLING, **given}
    stop = p["stop"]
    p["stop"] = [stop] if isinstance(stop, str) else list(stop or [])
    if p["max_tokens"] is not None and p["max_tokens"] < 1:
        raise RequestError(f"max_tokens must be at least 1, got {p['max_tokens']}.")
    if p["max_tokens"] is not None and not 0 <= p["min_tokens"] <= p["max_tokens"]:
        raise RequestError(f"min_tokens must be less than or equal to max_tokens={p['max_tokens']}, "
                           f"got {p['min_tokens']}.")
    if p["seed"] == -1:
        p["seed"] = None
    if 0 < p["temperature"] < MIN_TEMPERATURE:
        p["temperature"] = MIN_TEMPERATURE
    if p["temperature"] < 0.0:
        raise RequestError(f"temperature must be non-negative, got {p['temperature']}.")
    if not 0.0 < p["top_p"] <= 1.0:
        raise RequestError(f"top_p must be in (0, 1], got {p['top_p']}.")
    if p["top_k"] < -1:
        raise RequestError(f"top_k must be 0 (disable), or at least 1, got {p['top_k']}.")
    for key in ("presence_penalty", "frequency_penalty"):
        if not -2.0 <= p[key] <= 2.0:
            raise RequestError(f"{key} must be in [-2, 2], got {p[key]}.")
    if any(not s for s in p["stop"]):
        raise RequestError("stop cannot contain an empty string.")
    if p["structured_outputs"] is not None:
        p["structured_outputs"] = _structured_outputs(p["structured_outputs"])
    return p


def _structured_outputs(value) -> dict:  # facts: structured_outputs
    """StructuredOutputsParams(**json.loads(value)), as from_dict builds it: the value is a JSON string, its keys the
    class's fields, at most one constraint set (None is "not set"). vLLM checks the constraint later
    (_validate_structured_output)."""
    given = json.loads(value)  # a dict given as such fails here (json.loads of a dict), as upstream
    unknown = sorted(set(given) - set(CONSTRAINTS) - set(OPTIONS))
    if unknown:
        raise TypeError(f"StructuredOutputsParams.__init__() got an unexpected keyword argument {unknown[0]!r}")
    if sum(given.get(k) is not None for k in CONSTRAINTS) > 1:
        raise ValueError("You can only use one kind of structured outputs constraint but multiple are specified: "
                         f"{given}")
    return given


def _validate_structured_outputs(constraint: dict) -> None:  # facts: structured_outputs
    """vLLM's InputProcessor._validate_structured_output with the default backend "auto": its own checks, then
    XGrammar's; a constraint XGrammar refuses goes to guidance, whose refusal is "Grammar error: ..." (the double
    gives XGrammar's reason: llguidance's wording was not read)."""
    import xgrammar

    if isinstance(constraint.get("choice"), list) and not constraint["choice"]:
        raise RequestError(f"Choice '{constraint['choice']}' cannot be an empty list")
    if isinstance(constraint.get("grammar"), str) and constraint["grammar"].strip() == "":
        raise RequestError("structured_outputs.grammar cannot be an empty string")
    if all(constraint.get(k) is None for k in CONSTRAINTS):
        raise RequestError("No valid structured output parameter found")
    try:
        if constraint.get("regex"):
            xgrammar.Grammar.from_regex(constraint["regex"])
        elif constraint.get("choice"):
            xgrammar.Grammar.from_ebnf(_choice_grammar(constraint["choice"]))
        elif constraint.get("json"):
            schema = constraint["json"]
            xgrammar.Grammar.from_json_schema(schema if isinstance(schema, str) else json.dumps(schema))
        elif constraint.get("grammar"):
            xgrammar.Grammar.from_ebnf(constraint["grammar"])
    except Exception as err:  # noqa: BLE001 - any refusal sends the request to the guidance fallback
        raise RequestError(f"Grammar error: {err}") from None


def _choice_grammar(choice: list) -> str:
    """vLLM's choice_as_grammar (vllm/v1/structured_output/utils.py): an EBNF alternation of the escaped strings."""
    escaped = (re.sub(r'(["\\])', r"\\\1", c) for c in choice)
    return "root ::= " + " | ".join(f'"{c}"' for c in escaped)


@dataclass(eq=False)  # identity: a request is one generation
class Generation:
    request: object
    sender: object
    prompt: str
    prompt_ids: list[int]
    stream: bool
    prepend_input: bool
    params: dict
    flags: dict
    generator: object
    generated: list[int] = field(default_factory=list)
    text: str = ""
    """vLLM's output text: it only grows (an incomplete character waits for the token that completes it)."""
    cache: object = None
    finish: str | None = None
    sent_chars: int = 0
    sent_tokens: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    closed: bool = False
    matcher: object = None
    """XGrammar's matcher of a request with structured_outputs (vLLM's default backend)."""
    adapter: str = "__base__"
    """The request's lora_name (PEFT's name for "none": __base__)."""


class TritonPythonModel:
    def initialize(self, args):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.model_config = json.loads(args["model_config"])
        # facts: decoupled_required
        assert pb_utils.using_decoupled_model_transaction_policy(self.model_config), \
            "vLLM Triton backend must be configured to use decoupled model transaction policy"
        path = os.path.join(args["model_repository"], args["model_version"], "model.json")
        if not os.path.isfile(path):
            raise pb_utils.TritonModelException(f"'model.json' containing vllm engine args must be provided in "
                                                f"'{os.path.dirname(path)}'")
        with open(path) as f:
            engine = json.load(f)
        unknown = sorted(set(engine) - ENGINE_ARGS)  # facts: model_json
        if unknown:  # AsyncEngineArgs(**model.json) is a dataclass: unknown keyword arguments fail the load
            raise pb_utils.TritonModelException(f"model.json keys that AsyncEngineArgs does not take: {unknown}")
        self.torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(engine.get("tokenizer") or engine["model"])
        dtype = {"auto": "auto", "float32": torch.float32, "bfloat16": torch.bfloat16,
                 "float16": torch.float16}[engine.get("dtype", "auto")]
        self.model = AutoModelForCausalLM.from_pretrained(engine["model"], dtype=dtype).eval()
        self._setup_lora(engine, os.path.dirname(path))
        self.max_model_len = int(engine.get("max_model_len") or 2048)
        self.max_num_seqs = int(engine.get("max_num_seqs") or 256)
        params = self.model_config.get("parameters", {})
        self.report = params.get("REPORT_CUSTOM_METRICS", {}).get("string_value", "").lower() == "true"
        labels = {"model": args["model_name"], "version": args["model_version"]}
        counter = pb_utils.MetricFamily.COUNTER
        # The families must outlive their metrics.
        self.families = [
            # facts: metrics
            pb_utils.MetricFamily(name="vllm:prompt_tokens_total", description="Number of prefill tokens processed.",
                                  kind=counter),
            pb_utils.MetricFamily(name="vllm:generation_tokens_total",
                                  description="Number of generation tokens processed.", kind=counter),
            pb_utils.MetricFamily(name="tritongen_double_requests", description="requests in the double",
                                  kind=pb_utils.MetricFamily.GAUGE)]
        self.prompt_tokens, self.generation_tokens = (f.Metric(labels=labels) for f in self.families[:2])
        self.gauge = self.families[2].Metric(labels={})  # the double's own: cancelled requests leave the model
        self.itl = float(os.environ.get("TRITONGEN_DOUBLE_ITL_MS", "0")) / 1000.0
        self.compiler = None  # XGrammar's, made for the first request with structured_outputs
        self.lock = threading.Condition()
        self.waiting: deque[Generation] = deque()
        self.active: list[Generation] = []
        self.stopping = False
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _setup_lora(self, engine: dict, folder: str) -> None:  # facts: lora_setup
        """enable_lora (a string or a bool) makes multi_lora.json beside model.json required; its adapters load
        with PEFT here (vLLM loads them on first use), so a request's lora_name changes its tokens."""
        self.loras: list[str] = []
        self.enable_lora = str(engine.get("enable_lora", "")).lower() == "true"
        if not self.enable_lora:
            return
        path = os.path.join(folder, "multi_lora.json")
        try:
            with open(path) as f:
                repository = json.load(f)
        except FileNotFoundError:
            raise FileNotFoundError(f"Triton backend cannot find {path}.") from None
        from peft import PeftModel

        self.loras = list(repository)
        for i, (name, adapter) in enumerate(repository.items()):
            if i == 0:
                self.model = PeftModel.from_pretrained(self.model, adapter, adapter_name=name).eval()
            else:
                self.model.load_adapter(adapter, adapter_name=name)

    def _verify_lora(self, request) -> str:  # facts: lora_verify
        """The request's lora_name ("__base__" without one), or the backend's error for it."""
        tensor = pb_utils.get_input_tensor_by_name(request, "sampling_parameters")
        text = tensor.as_numpy()[0].decode("utf-8") if tensor is not None else request.parameters()
        try:
            name = json.loads(text or "{}").pop("lora_name", None)
        except (ValueError, AttributeError):
            return "__base__"  # the sampling parameters' own error follows
        if name is None:
            return "__base__"
        if not self.enable_lora:
            raise LoraError("LoRA feature is not enabled.")
        if name not in self.loras:
            raise LoraError(f"LoRA {name} is not supported, we currently support {self.loras}")
        return name

    # ------------------------------------------------------------------ requests
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            try:
                adapter = self._verify_lora(request)
            except LoraError as err:  # respond_error: the message as it is, no "Error generating stream"
                sender.send(pb_utils.InferenceResponse(
                    output_tensors=[pb_utils.Tensor("text_output", np.asarray([str(err)], dtype=np.object_))],
                    error=pb_utils.TritonError(str(err))), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                continue
            try:
                gen = self._convert(request, sender)
            except Exception as err:  # noqa: BLE001 - every failure becomes the request's one error response
                self._fail(sender, err)
                continue
            gen.adapter = adapter
            with self.lock:
                self.waiting.append(gen)
                self._count()
                self.lock.notify()
        return None

    def _convert(self, request, sender) -> Generation:  # facts: inputs
        prompt = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy()[0]
        prompt = prompt.decode("utf-8") if isinstance(prompt, bytes) else str(prompt)
        stream = bool(_flag(request, "stream") or False)
        exclude = _flag(request, "exclude_input_in_output")
        prepend_input = (not exclude) if exclude is not None else not stream
        if prepend_input and stream:
            # facts: prompt_in_stream_refused
            raise RequestError("When streaming, `exclude_input_in_output` = False is not allowed.")
        tensor = pb_utils.get_input_tensor_by_name(request, "sampling_parameters")
        params = _triton_sampling_params(tensor.as_numpy()[0].decode("utf-8") if tensor is not None
                                         else request.parameters())
        if params is None:  # GenerateRequest.execute reads sampling_params.lora_name next  # facts: lora_name_of_none
            raise AttributeError("'NoneType' object has no attribute 'lora_name'")
        if params["structured_outputs"] is not None:  # vLLM validates the parameters before the prompt
            _validate_structured_outputs(params["structured_outputs"])
        prompt_ids = self.tokenizer.encode(prompt)
        if len(prompt_ids) > self.max_model_len:  # facts: prompt_too_long
            raise RequestError(f"The decoder prompt (length {len(prompt_ids)}) is longer than the maximum model "
                               f"length of {self.max_model_len}. Make sure that `max_model_len` is no smaller than "
                               "the number of text tokens.")
        generator = self.torch.Generator()
        generator.manual_seed(params["seed"] if params["seed"] is not None else int.from_bytes(os.urandom(4), "big"))
        matcher = self._matcher(params["structured_outputs"]) if params["structured_outputs"] else None
        return Generation(request=request, sender=sender, prompt=prompt, prompt_ids=prompt_ids, stream=stream,
                          prepend_input=prepend_input, params=params,
                          flags={name: bool(_flag(request, name)) for name in FLAGS}, generator=generator,
                          matcher=matcher)

    def _matcher(self, constraint: dict):
        """A matcher for the request's constraint. The double compiles JSON without free whitespace, so that the
        tiny random model's outputs end (vLLM allows whitespace unless disable_any_whitespace)."""
        import xgrammar

        if self.compiler is None:
            vocab = self.model.get_input_embeddings().num_embeddings
            info = xgrammar.TokenizerInfo.from_huggingface(self.tokenizer, vocab_size=vocab,
                                                           stop_token_ids=[self.tokenizer.eos_token_id])
            self.compiler = xgrammar.GrammarCompiler(info, max_threads=1)
        c = self.compiler
        if constraint.get("json") is not None:
            schema = constraint["json"]  # vLLM takes a str or a dict
            grammar = c.compile_json_schema(schema if isinstance(schema, str) else json.dumps(schema),
                                            any_whitespace=False)
        elif constraint.get("json_object"):
            grammar = c.compile_builtin_json_grammar()
        elif constraint.get("regex") is not None:
            grammar = c.compile_regex(constraint["regex"])
        elif constraint.get("choice") is not None:
            grammar = c.compile_grammar(_choice_grammar(constraint["choice"]))
        elif constraint.get("grammar") is not None:
            grammar = c.compile_grammar(constraint["grammar"])
        else:
            raise RequestError("this test double does not take structural_tag")
        return xgrammar.GrammarMatcher(grammar)

    # ------------------------------------------------------------------ generation
    def _loop(self):
        while True:
            with self.lock:
                while not self.stopping and not self.waiting and not self.active:
                    self.lock.wait()
                if self.stopping:
                    return
                while self.waiting and len(self.active) < self.max_num_seqs:
                    self.active.append(self.waiting.popleft())
                batch = list(self.active)
            if self.itl:
                time.sleep(self.itl)
            for gen in batch:
                try:
                    self._step(gen)
                except Exception as err:  # noqa: BLE001 - the request fails, the loop goes on
                    self._close(gen)
                    self._fail(gen.sender, err)

    def _step(self, gen: Generation) -> None:
        if gen.request.is_cancelled():
            self._cancel(gen)
            return
        token = self._next_token(gen)
        if gen.matcher is not None and not gen.matcher.accept_token(token):
            raise RequestError(f"token {token} does not follow the structured outputs grammar")
        gen.generated.append(token)
        p = gen.params
        if self.report:
            if len(gen.generated) == 1:
                self.prompt_tokens.increment(len(gen.prompt_ids))
            self.generation_tokens.increment(1)
        eos = token == self.tokenizer.eos_token_id  # not before min_tokens: _next_token masks it
        full = self.tokenizer.decode(gen.generated, skip_special_tokens=True)
        if not full.endswith("\ufffd") and full.startswith(gen.text):
            gen.text = full  # an incomplete last character never enters the text, finished or not
        stops = [s for s in p["stop"] if s in gen.text]
        if stops:  # the stop string and what follows it are not output
            gen.text, gen.finish = gen.text[:min(gen.text.index(s) for s in stops)], "stop"
        elif eos:
            gen.finish = "stop"
        elif (p["max_tokens"] is not None and len(gen.generated) >= p["max_tokens"]) or \
                len(gen.prompt_ids) + len(gen.generated) >= self.max_model_len:
            gen.finish = "length"
        if gen.finish is not None:
            self._close(gen)
            self._send(gen, final=True)
        elif gen.stream:
            self._send(gen, final=False)

    def _next_token(self, gen: Generation) -> int:
        torch, p = self.torch, gen.params
        with torch.no_grad():
            ids = gen.prompt_ids if gen.cache is None else gen.generated[-1:]
            lora = {"adapter_names": [gen.adapter]} if self.enable_lora else {}
            out = self.model(input_ids=torch.tensor([ids]), past_key_values=gen.cache, use_cache=True, **lora)
        gen.cache = out.past_key_values
        logits = out.logits[0, -1].float()
        if gen.matcher is not None:
            import xgrammar

            mask = xgrammar.allocate_token_bitmask(1, logits.numel())
            gen.matcher.fill_next_token_bitmask(mask)
            xgrammar.apply_token_bitmask_inplace(logits.unsqueeze(0), mask)
        if len(gen.generated) < p["min_tokens"] and self.tokenizer.eos_token_id is not None:
            logits[self.tokenizer.eos_token_id] = -math.inf
        if gen.generated and (p["presence_penalty"] or p["frequency_penalty"]):
            seen = torch.bincount(torch.tensor(gen.generated), minlength=logits.numel())[:logits.numel()].float()
            logits -= p["frequency_penalty"] * seen + p["presence_penalty"] * (seen > 0).float()
        if p["temperature"] < 1e-5:
            return int(torch.argmax(logits))
        logits = logits / p["temperature"]
        if p["top_k"] > 0:
            cut = torch.topk(logits, min(p["top_k"], logits.numel())).values[-1]
            logits[logits < cut] = -math.inf
        probs = torch.softmax(logits, dim=-1)
        if p["top_p"] < 1.0:
            ordered, index = torch.sort(probs, descending=True)
            drop = torch.cumsum(ordered, 0) - ordered > p["top_p"]
            probs[index[drop]] = 0.0
            probs /= probs.sum()
        return int(torch.multinomial(probs, 1, generator=gen.generator))

    # ------------------------------------------------------------------ responses
    def _send(self, gen: Generation, *, final: bool) -> None:  # facts: streamed_delta
        if gen.stream:
            # Held back while unfinished: the characters that may still turn out to start a stop string.
            # facts: stop_holdback
            hold = 0 if final or not gen.params["stop"] else max(len(s) for s in gen.params["stop"]) - 1
            visible = max(gen.sent_chars, len(gen.text) - hold)
            text, gen.sent_chars = gen.text[gen.sent_chars:visible], visible
        else:
            text = (gen.prompt if gen.prepend_input else "") + gen.text
        tokens, gen.sent_tokens = len(gen.generated) - gen.sent_tokens, len(gen.generated)
        tensors = [pb_utils.Tensor("text_output", np.asarray([text.encode("utf-8")], dtype=np.object_))]
        if gen.flags["return_finish_reason"]:
            tensors.append(pb_utils.Tensor("finish_reason", np.asarray([str(gen.finish)], dtype=np.object_)))
        if gen.flags["return_num_input_tokens"]:
            # facts: counts_and_finish_reason
            tensors.append(pb_utils.Tensor("num_input_tokens", np.asarray(len(gen.prompt_ids), dtype=np.uint32)))
        if gen.flags["return_num_output_tokens"]:
            tensors.append(pb_utils.Tensor("num_output_tokens", np.asarray([tokens], dtype=np.uint32)))
        with gen.lock:
            if gen.closed and not final:
                return
            gen.sender.send(pb_utils.InferenceResponse(output_tensors=tensors),
                            flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if final else 0)

    def _close(self, gen: Generation) -> None:
        with self.lock:
            if gen in self.active:
                self.active.remove(gen)
            gen.closed = True
            gen.cache = None
            self._count()

    def _count(self) -> None:
        self.gauge.set(len(self.waiting) + len(self.active))

    def _cancel(self, gen: Generation) -> None:  # facts: cancellation
        self._close(gen)
        if gen.stream:
            gen.sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(
                "Request was cancelled", pb_utils.TritonError.CANCELLED)),
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        else:  # the backend sends what the last output held
            self._send(gen, final=True)

    def _fail(self, sender, err: Exception) -> None:  # facts: error_response
        response = pb_utils.InferenceResponse(
            output_tensors=[pb_utils.Tensor("text_output", np.asarray(["N/A"], dtype=np.object_))],
            error=pb_utils.TritonError(f"Error generating stream: {err}"))
        sender.send(response, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def finalize(self):
        with self.lock:
            self.stopping = True
            self.lock.notify_all()
        self.thread.join(timeout=5)
