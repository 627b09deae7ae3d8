# Shipped by tritongen, next to model.py of the hf runtime's `tensorrt_llm` model.
"""Guided decoding for the hf runtime: NVIDIA's guide types compiled by XGrammar, token masks in the batched loop.

A request's `guided_decoding_guide_type` (json, json_schema, regex, ebnf_grammar: TensorRT-LLM's names) and
`guided_decoding_guide` are checked and compiled when the request is admitted; a compiled grammar is kept per
(type, guide) in an LRU cache, so a schema that many requests share is compiled once. Each request gets its own
matcher. At every step the batched loop asks `GuidedProcessor.prepare_tensor_args` for its per-row argument: there
each guided request's matcher accepts the tokens sampled since the previous step and fills its row of a token
bitmask; `__call__` then masks the logits of those rows (a gather and a masked fill on the model's device, with no
host sync, so it is safe inside CUDA graphs). Once the grammar is complete only the end id is allowed, so the
request ends where the grammar ends.

Bad guides are refused before the request enters the batch, with the input named, in bounded time: a guide over
`max_schema_bytes` is refused unread, and compilation runs on a worker with a deadline.
"""

import json
import re
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor, TimeoutError as FutureTimeout

import torch
import triton_python_backend_utils as pb_utils
from transformers.generation.continuous_batching.cb_logits_processors import ContinuousBatchingLogitsProcessor

from .error_kinds import BAD_REQUEST, RequestError

GUIDE_TYPES = ("json", "json_schema", "regex", "ebnf_grammar")
_SOURCE = re.compile(r"^\[[\d:.]+\] \S+:\d+: ")
TYPE_INPUT = "guided_decoding_guide_type"
GUIDE_INPUT = "guided_decoding_guide"


def _refuse(name, problem):
    return RequestError(f"{name}: {problem}", BAD_REQUEST, name)


def _text(request, name):
    """The UTF-8 text of a BYTES input of one element, or None when it is absent or empty."""
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return None
    value = tensor.as_numpy().reshape(-1)
    if value.size == 0:
        return None
    if value.size != 1:
        raise _refuse(name, f"expected one string, got {value.size}")
    item = value[0]
    if isinstance(item, bytes):
        try:
            item = item.decode("utf-8")
        except UnicodeDecodeError:
            raise _refuse(name, "is not UTF-8 text") from None
    return str(item) or None


def read_guide(request, max_bytes):
    """(type, guide) of a request, or None without a guide type; refuses what no runtime could compile."""
    guide_type, guide = _text(request, TYPE_INPUT), _text(request, GUIDE_INPUT)
    if guide_type is None:
        if guide is not None:
            raise _refuse(TYPE_INPUT, f"is missing, but {GUIDE_INPUT} is set; send one of {', '.join(GUIDE_TYPES)}")
        return None
    if guide_type not in GUIDE_TYPES:
        raise _refuse(TYPE_INPUT, f"{guide_type[:40]!r} is not a guide type; send one of {', '.join(GUIDE_TYPES)}")
    size = len(guide.encode("utf-8")) if guide is not None else 0
    if size > max_bytes:
        raise _refuse(GUIDE_INPUT, f"{size} bytes exceed the deployment's limit of {max_bytes} "
                      "(structured_output.max_schema_bytes)")
    if guide is None and guide_type != "json":
        raise _refuse(GUIDE_INPUT, f"is required with guide type {guide_type}")
    return guide_type, guide or ""


def _bounded_strings(schema):
    """`schema` with each string's minLength/maxLength (without a pattern) written as the pattern `^.{min,max}$`.
    XGrammar (0.2.x, mlc-ai/xgrammar issue 800) compiles length-bounded strings to a character class that admits raw
    control characters, so outputs fail to parse as JSON; its pattern path matches JSON string characters only."""
    if isinstance(schema, list):
        return [_bounded_strings(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _bounded_strings(v) if k not in ("enum", "const", "default", "examples") else v
           for k, v in schema.items()}
    bounded = "minLength" in out or "maxLength" in out
    if bounded and "pattern" not in out and "format" not in out and out.get("type") == "string":
        low, high = out.pop("minLength", 0), out.pop("maxLength", "")
        out["pattern"] = f"^.{{{low},{high}}}$"
    return out


class Guides:
    """Compiles guides for one model's vocabulary; compiled grammars cached per (type, guide), least recently used
    evicted; errors cached too, so a bad schema sent again costs nothing."""

    def __init__(self, tokenizer_dir, vocab, end_id, max_bytes, cache_size=256, compile_timeout_s=10.0):
        import xgrammar
        from transformers import AutoTokenizer

        self.xgr = xgrammar
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
        # The model's vocabulary (its logits' width) may be larger than the tokenizer's; the end id is the only
        # token the mask allows once the grammar is complete.
        info = xgrammar.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab, stop_token_ids=[end_id])
        self.compiler = xgrammar.GrammarCompiler(info, max_threads=1, cache_enabled=False)
        self.vocab, self.end_id, self.max_bytes = vocab, end_id, max_bytes
        self.cache_size, self.timeout = cache_size, compile_timeout_s
        self.cache = OrderedDict()
        self.lock = threading.Lock()
        # Compilation runs here so a guide that takes too long is refused at the deadline (the worker finishes it
        # in the background; two workers bound what such guides can take).
        self.pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="tritongen-guide")

    def matcher(self, guide_type, guide):
        """A fresh matcher for (type, guide); RequestError naming the input when it does not compile."""
        compiled = self._compiled(guide_type, guide)
        return self.xgr.GrammarMatcher(compiled)

    def _compiled(self, guide_type, guide):
        key = (guide_type, guide)
        with self.lock:
            hit = self.cache.get(key)
            if hit is not None:
                self.cache.move_to_end(key)
        if hit is None:
            future = self.pool.submit(self._compile, guide_type, guide)
            try:
                hit = future.result(timeout=self.timeout)
            except FutureTimeout:
                raise _refuse(GUIDE_INPUT, f"did not compile within {self.timeout:g} s; simplify it") from None
            with self.lock:
                self.cache[key] = hit
                while len(self.cache) > self.cache_size:
                    self.cache.popitem(last=False)
        if isinstance(hit, RequestError):
            raise hit
        return hit

    def _compile(self, guide_type, guide):
        """The compiled grammar, or the RequestError that refuses it (returned, so that it is cached)."""
        try:
            if guide_type == "json":
                return self.compiler.compile_builtin_json_grammar()
            if guide_type == "json_schema":
                try:
                    schema = json.loads(guide)
                except ValueError as err:
                    return _refuse(GUIDE_INPUT, f"is not JSON ({err}); send a JSON schema")
                if not isinstance(schema, (dict, bool)):
                    return _refuse(GUIDE_INPUT, "a JSON schema is an object (or true/false)")
                # Compact JSON: with any whitespace allowed a model can emit blanks until max_tokens.
                return self.compiler.compile_json_schema(json.dumps(_bounded_strings(schema)), any_whitespace=False)
            if guide_type == "regex":
                return self.compiler.compile_regex(guide)
            return self.compiler.compile_grammar(guide)
        except Exception as err:  # XGrammar reports bad schemas, regexes and grammars as exceptions of its own
            what = {"json_schema": "JSON schema", "regex": "regex", "ebnf_grammar": "EBNF grammar"}.get(guide_type,
                                                                                                      guide_type)
            # Without XGrammar's "[time] source.cc:line: " prefix: the reason is what the user can act on.
            reason = _SOURCE.sub("", " ".join(str(err).split()))[:300] or type(err).__name__
            return _refuse(GUIDE_INPUT, f"XGrammar rejects this {what}: {reason}")


class GuidedProcessor(ContinuousBatchingLogitsProcessor):
    """Masks the logits of guided requests to the tokens their grammar allows. One int per row: the row of this
    processor's token bitmask that holds the request's mask, or -1 for an unguided request."""

    supported_kwargs = {}
    ignored_kwargs = ()

    def __init__(self, vocab, rows, device, graphs):
        import xgrammar

        self.matchers = {}  # continuous batching's request id -> Guided (the model adds and removes them)
        self.apply = xgrammar.apply_token_bitmask_inplace
        self.on_cpu = torch.device(device).type == "cpu"
        self.host = xgrammar.allocate_token_bitmask(rows, vocab)
        # The device copy has a fixed address (a captured CUDA graph reads it); on the CPU it is the same tensor.
        self.device_mask = self.host if self.on_cpu else self.host.to(device)
        self.shifts = torch.arange(32, dtype=torch.int32, device=device)
        # A captured graph replays whatever __call__ did when it was captured, so with graphs the mask is always
        # applied (rows of -1 leave their logits as they are); without, a step with no guided request skips it.
        self.always = graphs
        self.guided_rows = []  # this step's rows that hold a mask (prepare_tensor_args)

    def fill_defaults(self, int32_tensor):
        int32_tensor.fill_(-1)

    def prepare_tensor_args(self, requests_with_new_token):
        rows = []
        for i, future in enumerate(requests_with_new_token):
            state = future.state
            guided = self.matchers.get(state.request_id)
            if guided is not None and i >= self.host.shape[0]:
                guided.error = f"the step holds more than the {self.host.shape[0]} rows of the guide masks"
            if guided is None or not guided.advance(state.generated_tokens):
                rows.append(-1)
                continue
            guided.matcher.fill_next_token_bitmask(self.host, i)
            rows.append(i)
        self.guided_rows = [i for i, r in enumerate(rows) if r >= 0]
        if self.device_mask is not self.host and self.guided_rows:
            self.device_mask[: len(rows)].copy_(self.host[: len(rows)])
        return torch.tensor(rows, dtype=torch.int32, device="cpu")

    def __call__(self, scores, tensor_arg):
        if not (self.always or self.guided_rows):
            return scores
        if self.on_cpu:
            # No graph on the CPU: XGrammar's own CPU kernel masks the guided rows in place (about a third of the
            # time of unpacking the bits with tensor operations at a 128k vocabulary: bench/guided_mask_cost.py).
            if self.guided_rows:
                self.apply(scores, self.host[: scores.size(0)], indices=self.guided_rows)
            return scores
        rows = tensor_arg[: scores.size(0)].to(torch.int64)
        masks = self.device_mask.index_select(0, rows.clamp(min=0))  # [n, words] int32
        bits = (masks.unsqueeze(-1) >> self.shifts) & 1  # [n, words, 32], bit j of word w: token 32 w + j
        allowed = bits.reshape(masks.size(0), -1)[:, : scores.size(-1)].bool() | (rows < 0).unsqueeze(-1)
        return scores.masked_fill(~allowed, float("-inf"))


class Guided:
    """One request's matcher and how many of its tokens it has accepted; `error` once a token broke the grammar
    (the request then ends with that error)."""

    def __init__(self, matcher):
        self.matcher = matcher
        self.accepted = 0
        self.error = None

    def advance(self, tokens):
        """Accept the tokens sampled since the last call; False once the grammar is broken or complete."""
        if self.error is not None:
            return False
        for token in tokens[self.accepted:]:
            self.accepted += 1
            if not self.matcher.accept_token(int(token)):
                self.error = f"token {int(token)} does not follow the grammar"
                return False
        return not self.matcher.is_terminated()
