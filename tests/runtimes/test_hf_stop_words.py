"""The hf runtime's token-level stop_words_list, sent to tensorrt_llm directly (TensorRT-LLM's [batch, 2, N]
layout: row 0 the concatenated ids, row 1 each word's end offset, padded with -1)."""

from __future__ import annotations

import numpy as np
import pytest

from streaming_text import grpc_responses

pytestmark = pytest.mark.integration


def _generate(triton, **extra) -> list[int]:
    inputs = {"input_ids": np.array([[1, 40, 41, 42]], np.int32), "input_lengths": np.array([[4]], np.int32),
              "request_output_len": np.array([[8]], np.int32), "exclude_input_in_output": np.array([[True]]),
              "min_tokens": np.array([[8]], np.int32), **extra}
    responses = grpc_responses(triton.grpc_url, "tensorrt_llm", inputs)
    return [int(t) for r in responses for t in r.as_numpy("output_ids").reshape(-1)]


def test_generation_ends_after_a_stop_word(triton):
    whole = _generate(triton)
    assert len(whole) == 8
    # A two-token word that greedy decoding produces at positions 2-3 (the first occurrence of it).
    word = whole[2:4]
    first = next(i for i in range(len(whole) - 1) if whole[i:i + 2] == word)
    words = np.array([[word, [2, -1]]], np.int32)  # [1, 2, 2]: ids, then end offsets
    assert _generate(triton, stop_words_list=words) == whole[:first + 2]
    # A word that never occurs changes nothing.
    never = np.array([[[max(whole) + 1, max(whole) + 2], [2, -1]]], np.int32)
    assert _generate(triton, stop_words_list=never) == whole
