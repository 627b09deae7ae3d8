# Shipped by tritongen. Incremental detokenisation and text stop sequences for streamed responses.
"""Streamed text whose concatenation is exactly the text of the whole sequence.

Decoding each streamed chunk on its own breaks text in two ways: a character whose UTF-8 bytes span several
tokens comes out as U+FFFD, and a SentencePiece tokenizer drops the leading space of the first token it
decodes. `IncrementalDetokenizer` keeps the tokens of one sequence and two offsets into them (the idea of vLLM's
detokenizer): each step decodes a short window that starts at the previous chunk (prefix offset), so the leading
space is decided with context, and returns only the text past the read offset. A window whose text ends in
U+FFFD is held back until a later token completes the character; `finish` releases what is left, so an
invalid sequence still yields the same U+FFFD as decoding it whole. SentencePiece byte-fallback tokens (<0xNN>)
are decoded as a run, and an invalid run turns every byte of it into U+FFFD, even a valid ASCII byte before the
bad one; so text is also held while the last token is a byte token (or a special token that decoding skips,
which joins the byte runs on either side).

`StopStrings` finds text-level stop sequences in the streamed text, including ones that span chunks.
"""

REPLACEMENT = "\ufffd"


def held_ids(tokenizer, skip_special_tokens=True):
    """Tokens after which text is held: SentencePiece byte-fallback tokens (<0x00>..<0xFF>), and the special
    tokens when decoding skips them, if there are byte tokens at all (byte-level BPE has none)."""
    byte_tokens = {i for token, i in tokenizer.get_vocab().items()
                   if len(token) == 6 and token.startswith("<0x") and token.endswith(">")}
    if byte_tokens and skip_special_tokens:
        byte_tokens.update(tokenizer.all_special_ids)
    return frozenset(byte_tokens)


class IncrementalDetokenizer:
    """Per-sequence streaming decoder; `add` returns the new text, `finish` the text held back at the end."""

    __slots__ = ("tokenizer", "skip_special_tokens", "held", "tokens", "prefix_offset", "read_offset")

    def __init__(self, tokenizer, skip_special_tokens=True, held=frozenset()):
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self.held = held  # held_ids(tokenizer, skip_special_tokens), computed once per tokenizer
        self.tokens = []
        self.prefix_offset = 0  # start of the context window: the first token of the previous chunk
        self.read_offset = 0  # tokens before this have been turned into text

    def decode(self, ids):
        # No clean-up of tokenization spaces: it rewrites text around punctuation depending on what follows,
        # so a chunked decode and a whole decode would disagree.
        return self.tokenizer.decode(ids, skip_special_tokens=self.skip_special_tokens,
                                     clean_up_tokenization_spaces=False)

    def _window(self):
        prefix = self.decode(self.tokens[self.prefix_offset:self.read_offset])
        text = self.decode(self.tokens[self.prefix_offset:])
        return prefix, text

    def add(self, new_tokens):
        self.tokens.extend(int(t) for t in new_tokens)
        if len(self.tokens) == self.read_offset or self.tokens[-1] in self.held:
            return ""
        prefix, text = self._window()
        if len(text) <= len(prefix) or text.endswith(REPLACEMENT):
            return ""  # nothing new yet, or an incomplete character: wait for the next token
        self.prefix_offset, self.read_offset = self.read_offset, len(self.tokens)
        return text[len(prefix):]

    def finish(self):
        if len(self.tokens) == self.read_offset:
            return ""
        prefix, text = self._window()
        self.prefix_offset = self.read_offset = len(self.tokens)
        return text[len(prefix):]


class StopStrings:
    """Text-level stop sequences over one sequence's streamed text.

    `feed(chunk)` returns (text to send, stopped). The text ends right after the first stop string found, as
    with token-level stop words, whose tokens stay in the output.
    """

    __slots__ = ("stops", "longest", "tail")

    def __init__(self, stops):
        self.stops = [s for s in stops if s]
        self.longest = max((len(s) for s in self.stops), default=0)
        self.tail = ""  # the last characters already sent, where a stop string may have begun

    def feed(self, chunk):
        if not self.stops or not chunk:
            return chunk, False
        window = self.tail + chunk
        ends = [i + len(s) for s in self.stops if (i := window.find(s)) >= 0]
        if ends:
            end = min(ends) - len(self.tail)
            return chunk[:end], True
        self.tail = window[-(self.longest - 1):] if self.longest > 1 else ""
        return chunk, False

    def cut(self, text, start=0):
        """Whole-text form: `text` up to the end of the first stop string at or after `start`."""
        ends = [i + len(s) for s in self.stops if (i := text.find(s, start)) >= 0]
        return (text[:min(ends)], True) if ends else (text, False)
