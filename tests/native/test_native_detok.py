"""The native BLS's detokeniser (generator/tritongen/native/detok.h) against the tokenizer's own decode.

A small driver compiled from tests/native/detok_cli.cc streams random id sequences through detok.h in random
chunk sizes; the concatenated stream and the whole decode must both equal `tokenizer.decode` byte for byte, for
byte-level BPE and SentencePiece byte-fallback tokenizers, with CJK, emoji, invalid UTF-8 and special tokens.
"""

from __future__ import annotations

import random
import subprocess

import pytest

from cli_driver import build_cli
from tritongen.demo.model import train_tokenizer
from tritongen.served import detok_table

TEXTS = ["Hello world, the quick brown fox.", "日本語のテキスト、漢字とかな。", "emoji 🙂🚀👩‍👩‍👧 mixed",
         " leading space and  double", "Ünïcödé façade — naïve café"]


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    return build_cli(tmp_path_factory, "detok_cli", strict=False, sanitize=True)


@pytest.fixture(scope="module", params=["bytelevel", "sentencepiece"])
def tokenizer(request):
    return train_tokenizer(request.param)


def _run(driver, table_file, cases):
    lines = [" ".join(map(str, chunks)) + " | " + " ".join(map(str, ids)) for chunks, ids in cases]
    done = subprocess.run([str(driver), str(table_file)], input="\n".join(lines) + "\n", capture_output=True,
                          text=True, check=True)
    out = []
    for row in done.stdout.splitlines():
        status, streamed, whole = row.split(" ") if row.count(" ") == 2 else (*row.split(" "), "")
        out.append((status, bytes.fromhex(streamed).decode("utf-8"), bytes.fromhex(whole).decode("utf-8")))
    return out


@pytest.mark.parametrize("skip_special", [True, False])
def test_streamed_and_whole_equal_the_tokenizers_decode(driver, tokenizer, tmp_path, skip_special):
    table = detok_table
    blob = table.build_table(tokenizer, skip_special)
    table.check_table(tokenizer, blob, skip_special)
    path = tmp_path / "table.bin"
    path.write_bytes(blob)
    rng = random.Random(7)
    size = len(tokenizer)
    special = list(tokenizer.all_special_ids)
    byte_ids = [i for i, (kind, _) in enumerate(table.Table(blob).entries) if kind == table.BYTE] or [size - 1]
    cases = []
    for text in TEXTS:
        ids = tokenizer.encode(text, add_special_tokens=False)
        cases += [([1], ids), ([2, 3], ids), ([len(ids)], ids), ([1], special[:1] + ids + special[-1:])]
    for _ in range(400):
        pool = rng.choice([range(size), byte_ids, special + byte_ids])
        ids = [rng.choice(list(pool)) for _ in range(rng.randint(1, 30))]
        cases.append(([rng.randint(1, 4) for _ in range(3)], ids))
    results = _run(driver, path, cases)
    assert len(results) == len(cases)
    for (chunks, ids), (status, streamed, whole) in zip(cases, results):
        expected = tokenizer.decode(ids, skip_special_tokens=skip_special, clean_up_tokenization_spaces=False)
        assert status == "ok"
        assert whole == expected, (ids, whole, expected)
        assert streamed == expected, (ids, chunks, streamed, expected)


def test_a_tokenizer_the_table_cannot_reproduce_is_refused():
    from tokenizers import decoders

    tok = train_tokenizer("bytelevel")
    tok.backend_tokenizer.decoder = decoders.WordPiece()
    table = detok_table
    with pytest.raises(table.NotTableDecodable, match="is not ByteLevel or SentencePiece"):
        table.build_table(tok)


def test_out_of_vocabulary_ids_are_reported_not_decoded(driver, tmp_path):
    tok = train_tokenizer("bytelevel")
    path = tmp_path / "table.bin"
    path.write_bytes(detok_table.build_table(tok))
    [(status, _, _)] = _run(driver, path, [([1], [5, len(tok) + 10])])
    assert status == "bad"

