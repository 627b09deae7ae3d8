"""The BLS's incremental detokenizer and text stop sequences, against whole-sequence decoding."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest

from streaming_text import SAMPLES, TEXT, load_detokenizer
from tritongen.demo.model import TOKENIZERS, train_tokenizer

detok = load_detokenizer()


@pytest.fixture(scope="module", params=TOKENIZERS)
def tokenizer(request):
    tok = train_tokenizer(request.param, 512, TEXT)
    tok.held = detok.held_ids(tok)
    assert bool(tok.held) == (request.param == "sentencepiece")
    return tok


def test_training_gives_the_same_tokenizer_in_every_process(tokenizer):
    """The streaming tests rely on a fixed vocabulary; the trainer's own tie order changes per process."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from streaming_text import TEXT; "
            "from tritongen.demo.model import train_tokenizer; "
            "print(train_tokenizer(sys.argv[2], 512, TEXT).backend_tokenizer.to_str())")
    here = str(Path(__file__).parents[1])
    kind = "sentencepiece" if tokenizer.held else "bytelevel"
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", code, here, kind], capture_output=True, text=True, check=True)
        assert out.stdout.strip() == tokenizer.backend_tokenizer.to_str()


def _whole(tokenizer, ids):
    return tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)


def _streamed(tokenizer, ids, rng, max_chunk=3):
    d = detok.IncrementalDetokenizer(tokenizer, True, tokenizer.held)
    chunks, i = [], 0
    while i < len(ids):
        n = rng.randint(1, max_chunk)
        chunks.append(d.add(ids[i:i + n]))
        i += n
    chunks.append(d.finish())
    return chunks


def test_samples_split_characters_and_lose_spaces_when_decoded_token_by_token(tokenizer):
    # The defect being fixed: some sample is wrong when each token is decoded alone.
    broken = [s for s in SAMPLES
              if "".join(_whole(tokenizer, [t]) for t in tokenizer.encode(s, add_special_tokens=False)) != s]
    assert broken


@pytest.mark.parametrize("max_chunk", [1, 2, 5])
def test_streamed_text_equals_whole_text_for_every_script(tokenizer, max_chunk):
    rng = random.Random(max_chunk)
    for text in SAMPLES + TEXT.splitlines(keepends=True):
        ids = tokenizer.encode(text, add_special_tokens=False)
        chunks = _streamed(tokenizer, ids, rng, max_chunk)
        # The rule: the streamed pieces join to exactly the unstreamed text of the same ids.
        assert "".join(chunks) == _whole(tokenizer, ids), (text, chunks)
        # (That text is the sample itself, or, for a SentencePiece tokenizer, without its leading spaces.)
        assert _whole(tokenizer, ids) in (text, text.lstrip(" "))
        assert not any("\ufffd" in c for c in chunks), (text, chunks)


def test_leading_space_after_the_first_token_survives(tokenizer):
    ids = tokenizer.encode("ok  two  spaces", add_special_tokens=False)
    chunks = _streamed(tokenizer, ids, random.Random(0), 1)
    assert "".join(chunks) == "ok  two  spaces"


def test_random_token_sequences_match_including_invalid_utf8(tokenizer):
    rng = random.Random(7)
    invalid = 0
    for _ in range(400):
        ids = [rng.randrange(len(tokenizer)) for _ in range(rng.randint(1, 30))]
        whole = _whole(tokenizer, ids)
        invalid += "\ufffd" in whole
        assert "".join(_streamed(tokenizer, ids, rng)) == whole, ids
    assert invalid  # the sample did include sequences that are not valid UTF-8


def test_held_back_bytes_are_released_by_finish(tokenizer):
    ids = tokenizer.encode("🙂", add_special_tokens=False)
    d = detok.IncrementalDetokenizer(tokenizer, True, tokenizer.held)
    for t in ids[:-1]:
        assert d.add([t]) == ""  # an incomplete character is never sent
    assert d.add(ids[-1:]) + d.finish() == "🙂"
    cut = detok.IncrementalDetokenizer(tokenizer, True, tokenizer.held)
    sent = "".join(cut.add([t]) for t in ids[:-1]) + cut.finish()
    assert sent == _whole(tokenizer, ids[:-1])  # a sequence that ends mid-character ends as it decodes whole


@pytest.mark.parametrize("stops", [["мир"], ["。", "ok"], [" ok."], ["\t"], ["absent"], ["é, ü", "ü"]])
def test_stop_strings_streamed_equal_whole(tokenizer, stops):
    rng = random.Random(3)
    for line in TEXT.splitlines(keepends=True):
        ids = tokenizer.encode(line, add_special_tokens=False)
        whole, stopped = detok.StopStrings(stops).cut(_whole(tokenizer, ids))
        s = detok.StopStrings(stops)
        sent, hit = [], False
        for chunk in _streamed(tokenizer, ids, rng):
            text, hit = s.feed(chunk)
            sent.append(text)
            if hit:
                break
        assert ("".join(sent), hit) == (whole, stopped)
        if stopped:
            assert any(whole.endswith(stop) for stop in stops)


def test_stop_string_spanning_chunks():
    s = detok.StopStrings(["stop here"])
    assert s.feed("please st") == ("please st", False)
    assert s.feed("op he") == ("op he", False)
    assert s.feed("re and more") == ("re", True)
    assert detok.StopStrings(["", "b"]).cut("abc") == ("ab", True)
