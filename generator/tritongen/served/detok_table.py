"""A tokenizer's decoding as a table the native BLS can apply token by token, and the same algorithm in Python.

transformers' `decode` runs the tokenizer's decoder over the whole id list. For the two decoder families LLMs
use it is a function of per-token byte strings, so a C++ step can reproduce it exactly without the tokenizer:
- byte-level BPE (GPT-2, Llama-3, Qwen: decoder `ByteLevel`): every token maps to bytes; the text is the
  concatenation decoded as UTF-8 with each invalid maximal subpart replaced by U+FFFD;
- SentencePiece BPE with byte fallback (Llama-2, Mistral: decoder Replace("▁", " ") + ByteFallback + Fuse +
  Strip(" ", 1, 0)): pieces are text with "▁" read as a space; a run of <0xNN> byte tokens is decoded as UTF-8
  when valid, else every byte of the run becomes U+FFFD; the first space of the whole text is dropped.
Special tokens are left out when decoding skips them (they do not break a byte run either: they are filtered
before the decoder runs). `build_table` refuses any other decoder, and `check_table` compares the table's
decoding with the tokenizer's own on every token and on random id sequences, so a table is only used when it
is exact; otherwise the deployment keeps the python BLS (the plan says so).

This file is shipped next to the preprocessing model, which builds the table for the native BLS on request.
"""

from __future__ import annotations

import json
import random
import struct

MAGIC = b"TGDT"
VERSION = 1
BYTELEVEL, SENTENCEPIECE = 0, 1
TEXT, BYTE, SKIP = 0, 1, 2
SPACE_MARK = "\u2581"


class NotTableDecodable(ValueError):
    """The tokenizer's decoder is not one the table reproduces."""


def _byte_decoder() -> dict[str, int]:
    # GPT-2's reversible byte <-> printable character map (the ByteLevel pre-tokenizer's alphabet).
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def _mode(decoder: dict | None) -> tuple[int, int]:
    """(mode, leading spaces stripped) for a tokenizer.json decoder; NotTableDecodable otherwise."""
    if not decoder:
        raise NotTableDecodable("the tokenizer has no decoder")
    if decoder.get("type") == "ByteLevel":
        return BYTELEVEL, 0
    if decoder.get("type") == "Sequence":
        steps = decoder.get("decoders", [])
        kinds = [d.get("type") for d in steps]
        if kinds == ["Replace", "ByteFallback", "Fuse", "Strip"]:
            replace, strip = steps[0], steps[3]
            if (replace.get("pattern", {}).get("String") == SPACE_MARK and replace.get("content") == " "
                    and strip.get("content") == " " and strip.get("stop") == 0 and strip.get("start") in (0, 1)):
                return SENTENCEPIECE, int(strip["start"])
    raise NotTableDecodable(f"decoder {json.dumps(decoder)[:120]} is not ByteLevel or SentencePiece byte fallback")


def build_table(tokenizer, skip_special_tokens: bool = True) -> bytes:
    """The table of `tokenizer` (a transformers fast tokenizer): header, then one entry per id in 0..len-1."""
    decoder = json.loads(tokenizer.backend_tokenizer.to_str()).get("decoder")
    mode, strip = _mode(decoder)
    special = set(tokenizer.all_special_ids) if skip_special_tokens else set()
    byte_decoder = _byte_decoder()
    size = len(tokenizer)
    tokens = tokenizer.convert_ids_to_tokens(list(range(size)))
    out = [MAGIC, struct.pack("<IBBI", VERSION, mode, strip, size)]
    for i, token in enumerate(tokens):
        if i in special or token is None:
            kind, data = SKIP, b""
        elif mode == BYTELEVEL:
            kind = TEXT
            data = bytes(byte_decoder[c] for c in token) if all(c in byte_decoder for c in token) \
                else token.encode("utf-8")
        elif len(token) == 6 and token.startswith("<0x") and token.endswith(">"):
            kind, data = BYTE, bytes([int(token[3:5], 16)])
        else:
            kind, data = TEXT, token.replace(SPACE_MARK, " ").encode("utf-8")
        out.append(struct.pack("<BI", kind, len(data)) + data)
    return b"".join(out)


class Table:
    """A parsed table and its decoding (the reference for the C++ implementation in tritongen_bls.cc)."""

    def __init__(self, blob: bytes):
        if blob[:4] != MAGIC:
            raise ValueError("not a tritongen detokenizer table")
        version, self.mode, self.strip, size = struct.unpack_from("<IBBI", blob, 4)
        if version != VERSION:
            raise ValueError(f"detokenizer table version {version}, expected {VERSION}")
        at = 14
        self.entries: list[tuple[int, bytes]] = []
        for _ in range(size):
            kind, n = struct.unpack_from("<BI", blob, at)
            at += 5
            self.entries.append((kind, blob[at:at + n]))
            at += n

    def decode(self, ids) -> str:
        if self.mode == BYTELEVEL:
            data = b"".join(self.entries[i][1] for i in ids if self.entries[i][0] != SKIP)
            return data.decode("utf-8", "replace")
        parts, run = [], bytearray()

        def flush():
            if run:
                try:
                    parts.append(run.decode("utf-8"))
                except UnicodeDecodeError:
                    parts.append("\ufffd" * len(run))
                run.clear()

        for i in ids:
            kind, data = self.entries[i]
            if kind == BYTE:
                run.extend(data)
            elif kind == TEXT:
                flush()
                parts.append(data.decode("utf-8"))
        flush()
        text = "".join(parts)
        return text[1:] if self.strip and text.startswith(" ") else text


def check_table(tokenizer, blob: bytes, skip_special_tokens: bool = True, samples: int = 300,
                seed: int = 0) -> None:
    """Raise NotTableDecodable unless the table decodes like the tokenizer on every single id and on random
    sequences (special ids and byte tokens over-represented, where decoders differ)."""
    table = Table(blob)

    def expect(ids):
        return tokenizer.decode(ids, skip_special_tokens=skip_special_tokens, clean_up_tokenization_spaces=False)

    size = len(table.entries)
    for i in range(size):
        if table.decode([i]) != expect([i]):
            raise NotTableDecodable(f"token {i} decodes to {expect([i])!r}, the table gives {table.decode([i])!r}")
    rng = random.Random(seed)
    special = list(tokenizer.all_special_ids)
    bytes_ids = [i for i, (kind, _) in enumerate(table.entries) if kind == BYTE]
    pools = [list(range(size)), special or [0], bytes_ids or [0]]
    for _ in range(samples):
        ids = [rng.choice(pools[rng.choice((0, 0, 0, 1, 2))]) for _ in range(rng.randint(1, 24))]
        if table.decode(ids) != expect(ids):
            raise NotTableDecodable(f"ids {ids} decode to {expect(ids)!r}, the table gives {table.decode(ids)!r}")
