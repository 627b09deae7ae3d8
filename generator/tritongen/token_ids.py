"""The ids path: tritongen's own clients call `tensorrt_llm` with token ids and turn its token ids into text.

The text path (ensemble -> tensorrt_llm_bls) tokenizes, runs the LLM and detokenizes inside tritonserver, at the
cost of a Python model round trip per streamed response. On the ids path the client does both ends itself with the
deployment's tokenizer: it sends the `tensorrt_llm` inputs of a tritongen.requests.Request (input_ids,
input_lengths, request_output_len, end_id, pad_id and stop_words_list made here as preprocessing makes them; streaming,
sampling, adapter and guide inputs as tensorrt_llm_bls passes them on) and decodes the streamed output_ids with the
detokenizer the BLS ships (tritongen.served.detokenizer), so the text is byte for byte the text path's: the same
tokenizer, loaded with the same arguments, the same prompt ids (preprocessing's encode), the same end and pad ids, the
same incremental decoding and text stop sequences.

Token counts still come from the server: `tensorrt_llm` answers num_input_tokens and num_output_tokens itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from tritongen.requests import COUNTS, Request
from tritongen.served.detokenizer import IncrementalDetokenizer, StopStrings, held_ids

# transformers (about 1.8 s of CPU to import) is imported where a tokenizer is loaded; the CLI and the runner
# import this module for its tensor names.

LLM_MODEL = "tensorrt_llm"
# Outputs the ids path asks tensorrt_llm for: the tokens, how many of them are valid, and the server's counts.
OUTPUTS = ("output_ids", "sequence_length", "num_input_tokens", "num_output_tokens")
# The request inputs that preprocessing turns into tensorrt_llm's (prompt ids, output length, stop word ids, end and
# pad ids): the codec encodes them; tensorrt_llm_bls passes every other input on as it is.
ENCODED = ("text_input", "max_tokens", "stop_words", "end_id", "pad_id")


def load_tokenizer(directory: str):
    """The tokenizer as preprocessing and tensorrt_llm_bls load it (NVIDIA's arguments): `legacy=False` changes
    how a SentencePiece tokenizer encodes, so any other arguments could give other prompt ids."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(directory, legacy=False, padding_side="left", trust_remote_code=True)


@dataclass
class Codec:
    """One deployment's tokenizer on the client: prompt -> tensorrt_llm inputs, output_ids -> text."""

    tokenizer: object
    add_special_tokens: bool = True
    skip_special_tokens: bool = True
    held: frozenset = field(init=False)
    end_id: int = field(init=False)
    pad_id: int = field(init=False)

    def __post_init__(self) -> None:
        self.held = held_ids(self.tokenizer, self.skip_special_tokens)
        # preprocessing's defaults when a request names none
        self.end_id = int(self.tokenizer.eos_token_id)
        pad = self.tokenizer.pad_token_id
        self.pad_id = self.end_id if pad is None else int(pad)

    @classmethod
    def load(cls, directory: str, *, add_special_tokens: bool = True, skip_special_tokens: bool = True) -> Codec:
        return cls(load_tokenizer(directory), add_special_tokens, skip_special_tokens)

    def encode(self, prompt: str) -> list[int]:
        return self.tokenizer.encode(prompt, add_special_tokens=self.add_special_tokens)

    def word_list(self, words: Sequence[str]) -> np.ndarray | None:
        """Stop words in TensorRT-LLM's [1, 2, N] layout (ids, then end offsets padded with -1), as preprocessing
        encodes them; None when no word has tokens."""
        ids, offsets = [], []
        for word in words:
            word_ids = self.tokenizer.encode(word, add_special_tokens=False) if word else []
            if word_ids:
                ids.extend(word_ids)
                offsets.append(len(ids))
        if not ids:
            return None
        out = np.zeros((1, 2, len(ids)), dtype=np.int32)
        out[0, 1, :] = -1
        out[0, 0, :] = ids
        out[0, 1, : len(offsets)] = offsets
        return out

    def inputs(self, request: Request) -> dict[str, np.ndarray]:
        """The tensorrt_llm inputs of one request ([1, ...]: batch 1): what preprocessing would make of its prompt,
        max_tokens, stop words and end and pad ids, then every input tensorrt_llm_bls passes on as it is
        (tritongen.requests.Request.llm_arrays), with the server's token counts asked for and the prompt left out of
        the output (a non-streamed response then counts only the completion)."""
        if request.beam_width is not None:
            # Each response would carry whole beams, which the BLS decodes whole.
            raise ValueError("beam_width: not on the ids path; leave it unset")
        ids = self.encode(request.text_input)
        inputs = request.llm_arrays(encoded=ENCODED)
        inputs.update({
            "input_ids": np.array([ids], dtype=np.int32),
            "input_lengths": np.array([[len(ids)]], dtype=np.int32),
            "request_output_len": np.array([[request.max_tokens]], dtype=np.int32),
            "end_id": np.array([[self.end_id if request.end_id is None else request.end_id]], dtype=np.int32),
            "pad_id": np.array([[self.pad_id if request.pad_id is None else request.pad_id]], dtype=np.int32),
            **{name: np.array([[True]], dtype=np.bool_) for name in COUNTS},
        })
        words = self.word_list(request.stop_words)
        if words is not None:
            inputs["stop_words_list"] = words
        return inputs

    def text(self, max_tokens: int, stop: Sequence[str] = ()) -> SequenceText:
        return SequenceText(IncrementalDetokenizer(self.tokenizer, self.skip_special_tokens, self.held),
                            StopStrings(list(stop)), max_tokens)


@dataclass
class SequenceText:
    """The streamed text of one output sequence, as tensorrt_llm_bls streams it: held-back text is released at
    max_tokens or at the final response, and text ends right after the first stop string (`stopped`)."""

    detok: IncrementalDetokenizer
    stops: StopStrings
    max_tokens: int
    stopped: bool = False
    tokens: int = 0

    def push(self, ids: Sequence[int], final: bool = False) -> str:
        """Text for the next token ids of the sequence (`final`: the request's last response)."""
        if self.stopped:
            return ""
        self.tokens += len(ids)
        delta = self.detok.add(ids)
        if final or self.tokens >= self.max_tokens:
            delta += self.detok.finish()
        delta, self.stopped = self.stops.feed(delta)
        return delta


def response_ids(output_ids: np.ndarray | None, sequence_length: np.ndarray | None) -> list[int]:
    """The valid token ids of one tensorrt_llm response (batch 1, beam 0): output_ids cut at sequence_length."""
    if output_ids is None or output_ids.size == 0:
        return []
    ids = output_ids.reshape(-1, output_ids.shape[-1])[0]
    if sequence_length is not None and sequence_length.size:
        ids = ids[: int(sequence_length.reshape(-1)[0])]
    return [int(t) for t in ids]
