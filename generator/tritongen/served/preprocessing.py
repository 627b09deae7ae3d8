# Shipped by tritongen. The preprocessing model of the TensorRT-LLM ensemble: text -> token ids.
"""Tokenizer step of the ensemble, with the tensor contract of TensorRT-LLM's `preprocessing` model.

Inputs and outputs carry the batch dimension (max_batch_size > 0). Word lists (stop/bad words) are encoded in
TensorRT-LLM's [2, N] layout: row 0 the concatenated token ids, row 1 the end offset of each word, padded
with 0 and -1.
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils
from transformers import AutoTokenizer

from .detok_table import build_table, check_table
from .error_kinds import BAD_REQUEST, RequestError, wrap
from .stub import exit_with_server, leave_without_teardown, param


def _strings(request, name):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return None
    return [[s.decode("utf-8") if isinstance(s, bytes) else str(s) for s in row]
            for row in np.atleast_2d(tensor.as_numpy())]


def _array(request, name):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return None if tensor is None else tensor.as_numpy()


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        # The arguments NVIDIA's preprocessing loads tokenizers with.
        self.tokenizer = AutoTokenizer.from_pretrained(param(config, "tokenizer_dir"), legacy=False,
                                                       padding_side="left", trust_remote_code=True)
        self.vocab_size = self.tokenizer.vocab_size
        self.add_special_tokens = param(config, "add_special_tokens", "true").lower() in ("true", "1", "yes")
        self.end_id = self.tokenizer.eos_token_id
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.end_id
        self.tables = {}  # skip_special_tokens -> detokenisation table
        # Oversized text is refused before it is tokenized (tens of MB take a minute and GBs): no prompt of at most
        # max_input_tokens tokens is longer than that many of the longest vocabulary entry, doubled for
        # normalisers that shorten text (NFKC). The LLM checks the exact token limit.
        tokens = param(config, "max_input_tokens")
        longest = max((len(t.encode("utf-8")) for t in self.tokenizer.get_vocab()), default=1)
        self.input_cap = (int(tokens) * max(1, longest) * 2, int(tokens), longest) if tokens else None
        exit_with_server("preprocessing-watch")

    def _check_size(self, name, request):
        tensor = pb_utils.get_input_tensor_by_name(request, name)
        if tensor is None or self.input_cap is None:
            return
        limit, tokens, longest = self.input_cap
        for value in tensor.as_numpy().reshape(-1):
            size = len(value) if isinstance(value, bytes) else len(str(value).encode("utf-8"))
            if size > limit:
                raise RequestError(f"{name}: {size} bytes exceed the limit of {limit} bytes (at most {tokens} "
                                   f"prompt tokens of at most {longest} bytes each); shorten the prompt", BAD_REQUEST,
                                   name)

    def _word_list(self, rows, batch):
        """Encode per-request word lists into TensorRT-LLM's [batch, 2, N] layout."""
        encoded = []
        for row in rows if rows is not None else [[] for _ in range(batch)]:
            ids, offsets = [], []
            for word in row:
                if not word:
                    continue
                word_ids = self.tokenizer.encode(word, add_special_tokens=False)
                if not word_ids:
                    continue  # a word with no tokens would repeat the previous offset
                ids.extend(word_ids)
                offsets.append(len(ids))
            encoded.append((ids, offsets))
        width = max(1, max(len(ids) for ids, _ in encoded))
        out = np.zeros((len(encoded), 2, width), dtype=np.int32)
        out[:, 1, :] = -1
        for i, (ids, offsets) in enumerate(encoded):
            out[i, 0, : len(ids)] = ids
            out[i, 1, : len(offsets)] = offsets
        return out

    def _embedding_bias(self, request, batch):
        words = _strings(request, "EMBEDDING_BIAS_WORDS")
        weights = _array(request, "EMBEDDING_BIAS_WEIGHTS")
        if words is None or weights is None:
            return np.zeros((batch, 0), dtype=np.float32)
        out = np.zeros((batch, len(self.tokenizer)), dtype=np.float32)
        for i, (row, wrow) in enumerate(zip(words, np.atleast_2d(weights))):
            for word, weight in zip(row, wrow):
                for token in self.tokenizer.encode(word, add_special_tokens=False):
                    out[i, token] += weight
        return out

    def _ids(self, texts):
        ids = [self.tokenizer.encode(t[0], add_special_tokens=self.add_special_tokens) for t in texts]
        lengths = np.array([[len(x)] for x in ids], dtype=np.int32)
        padded = np.full((len(ids), max(1, int(lengths.max()))), self.pad_id, dtype=np.int32)
        for i, row in enumerate(ids):
            padded[i, : len(row)] = row
        return padded, lengths

    def _table(self, flags):
        """The tokenizer's decoding as a per-token table, for the native tensorrt_llm_bls (built once)."""
        skip = bool(flags & 1)
        if skip not in self.tables:
            blob = build_table(self.tokenizer, skip)
            check_table(self.tokenizer, blob, skip)  # never serve a table that decodes differently
            self.tables[skip] = blob
        return pb_utils.InferenceResponse(output_tensors=[
            pb_utils.Tensor("DETOKENIZER_TABLE", np.array([[self.tables[skip]]], dtype=np.object_))])

    def _one(self, request):
        table_request = _array(request, "DETOKENIZER_TABLE_REQUEST")
        if table_request is not None:
            return self._table(int(table_request.reshape(-1)[0]))
        self._check_size("QUERY", request)
        self._check_size("DECODER_QUERY", request)
        queries = _strings(request, "QUERY")
        batch = len(queries)
        input_ids, input_lengths = self._ids(queries)
        output_len = np.asarray(_array(request, "REQUEST_OUTPUT_LEN"), dtype=np.int32).reshape(batch, 1)
        end_id = _array(request, "END_ID")
        pad_id = _array(request, "PAD_ID")
        end_id = np.full((batch, 1), self.end_id, np.int32) if end_id is None else end_id.astype(np.int32).reshape(batch, 1)
        pad_id = np.full((batch, 1), self.pad_id, np.int32) if pad_id is None else pad_id.astype(np.int32).reshape(batch, 1)
        tensors = [
            pb_utils.Tensor("INPUT_ID", input_ids),
            pb_utils.Tensor("REQUEST_INPUT_LEN", input_lengths),
            pb_utils.Tensor("REQUEST_OUTPUT_LEN", output_len),
            pb_utils.Tensor("BAD_WORDS_IDS", self._word_list(_strings(request, "BAD_WORDS_DICT"), batch)),
            pb_utils.Tensor("STOP_WORDS_IDS", self._word_list(_strings(request, "STOP_WORDS_DICT"), batch)),
            pb_utils.Tensor("EMBEDDING_BIAS", self._embedding_bias(request, batch)),
            pb_utils.Tensor("OUT_END_ID", end_id),
            pb_utils.Tensor("OUT_PAD_ID", pad_id),
        ]
        decoder = _strings(request, "DECODER_QUERY")
        if decoder is not None:
            decoder_ids, decoder_lengths = self._ids(decoder)
            tensors += [pb_utils.Tensor("DECODER_INPUT_ID", decoder_ids),
                        pb_utils.Tensor("REQUEST_DECODER_INPUT_LEN", decoder_lengths)]
        extra = _array(request, "PROMPT_TABLE_EXTRA_ID")
        if extra is not None:
            # The extra id marks prompt-table (virtual) tokens only, ids >= vocab size; 0 elsewhere, as NVIDIA's.
            ids = np.where(input_ids >= self.vocab_size, extra.astype(np.uint64).reshape(batch, 1),
                           np.uint64(0)).astype(np.uint64)
            tensors.append(pb_utils.Tensor("OUT_PROMPT_TABLE_EXTRA_IDS", ids))
        return pb_utils.InferenceResponse(output_tensors=tensors)

    def execute(self, requests):
        responses = []
        for request in requests:
            try:
                responses.append(self._one(request))
            except Exception as err:  # one bad request must not fail the others in the batch
                # A RequestError is tagged (error_kinds); other exceptions keep their raiser's words.
                error = pb_utils.TritonError(wrap("preprocessing", str(err)))
                responses.append(pb_utils.InferenceResponse(error=error))
        return responses

    def finalize(self):
        # Nothing to release; the interpreter's teardown alone took seconds of every unload (stub.py).
        leave_without_teardown()
