"""Tool calls in the model's text: one parser per model family, streamed or whole, with the same answer either way.

A family writes its calls in its own syntax after optional plain text:
- `llama3_json` (Llama 3.x): `<|python_tag|>` or an answer that opens with `{`, then `{"name": .., "parameters"
  (or "arguments"): {..}}` objects, `;`-separated;
- `hermes` (Hermes, Qwen 2.5/3): `<tool_call>{"name": .., "arguments": {..}}</tool_call>` blocks;
- `mistral`: `[TOOL_CALLS]` (or an answer that opens with `[`, the tag being a special token that detokenizing may
  drop), then `[{"name": .., "arguments": {..}}, ..]`;
- `json`: the answer is the call or an array of calls (what `tool_choice: required` constrains it to).
A call's `arguments` is the model's own text of that JSON value (not re-serialized), so the streamed fragments
concatenate to exactly the non-streamed string. The non-streamed answer is made by the streaming parser fed the
whole text, so the two cannot drift apart.

Read for the shapes (not copied): vLLM's tool_parsers (hermes_tool_parser.py, llama_tool_parser.py,
mistral_tool_parser.py) and Triton's python/openai tool_call_parsers (r26.08).
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field

FORMATS = ("llama3_json", "hermes", "mistral")
_ARGUMENT_KEYS = ("arguments", "parameters")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
_STRUCTURAL = re.compile(r'["{}\[\]]')
_IN_STRING = re.compile(r'["\\]')
_SCALAR = re.compile(r'[^\s,\]}]*')
_BETWEEN = " \t\r\n,;[]"
"""Characters between calls: whitespace, an array's brackets and commas, Llama's `;`."""


@dataclass(frozen=True)
class Family:
    name: str
    markers: tuple[str, ...]
    """Tags that open the calls anywhere in the answer (text before them is content)."""
    opens: str
    """Characters that open the calls when they begin the answer (after whitespace)."""
    tags: tuple[str, ...]
    """Tags skipped between calls."""


FAMILIES = {
    "llama3_json": Family("llama3_json", ("<|python_tag|>",), "{", ("<|python_tag|>",)),
    "hermes": Family("hermes", ("<tool_call>",), "", ("<tool_call>", "</tool_call>")),
    "mistral": Family("mistral", ("[TOOL_CALLS]",), "[", ("[TOOL_CALLS]",)),
    "json": Family("json", (), "{[", ()),
}


def detect_format(template: str | None) -> str:
    """The family a chat template writes calls in; `llama3_json` (bare JSON calls, the most general) when the
    template names none."""
    text = template or ""
    if "<tool_call>" in text:
        return "hermes"
    if "[TOOL_CALLS]" in text or "[AVAILABLE_TOOLS]" in text:
        return "mistral"
    return "llama3_json"


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


@dataclass
class Event:
    """One piece of the answer: content text, or a call's first appearance (id and name) or argument text."""

    content: str | None = None
    index: int | None = None
    id: str | None = None
    name: str | None = None
    arguments: str | None = None


class _ValueReader:
    """Finds where a JSON object, array or string that opens at s[i] ends, reading the text as it grows: each call
    of `end` goes on from where the last one stopped, so a long value streamed in small pieces is read once."""

    def __init__(self, s: str, i: int):
        self.pos, self.in_string = i + 1, s[i] == '"'
        self.depth = 0 if self.in_string else 1

    def end(self, s: str) -> int | None:
        """The value's end in `s` (the text so far); None while it goes on."""
        while True:
            m = (_IN_STRING if self.in_string else _STRUCTURAL).search(s, self.pos)
            if m is None:
                self.pos = len(s)
                return None
            char, self.pos = m.group(), m.end()
            if char == "\\":
                if self.pos >= len(s):
                    self.pos -= 1  # the escaped character has not arrived: read the backslash again
                    return None
                self.pos += 1
            elif char == '"':
                self.in_string = not self.in_string
                if self.depth == 0:
                    return self.pos
            else:
                self.depth += 1 if char in "{[" else -1
                if self.depth == 0:
                    return self.pos


def _value_end(s: str, i: int) -> tuple[int | None, _ValueReader | None]:
    """(end of the JSON value at s[i] or None while it goes on, the reader that can go on reading it)."""
    if s[i] in '"{[':
        reader = _ValueReader(s, i)
        return reader.end(s), reader
    end = _SCALAR.match(s, i).end()
    return (end if end < len(s) else None), None  # a number or literal at the end may go on


def _skip_ws(s: str, j: int) -> int:
    while j < len(s) and s[j] in " \t\r\n":
        j += 1
    return j


@dataclass
class _Call:
    """What is known of one call object in the text (offsets into the text)."""

    name: str | None = None
    args: tuple[int, int | None] | None = None
    end: int | None = None
    bad: bool = False
    reader: _ValueReader | None = field(default=None, repr=False)
    """The arguments' reader while the text ends inside them."""


def _scan_call(s: str, i: int) -> _Call:
    """The call object that opens at s[i] (`{`), as far as the text goes."""
    call, j = _Call(), i + 1
    while True:
        j = _skip_ws(s, j)
        if j >= len(s):
            return call
        if s[j] == "}":
            call.end = j + 1
            return call
        if s[j] == ",":
            j += 1
            continue
        key = _STRING.match(s, j) if s[j] == '"' else None
        if key is None:
            call.bad = s[j] != '"'
            return call
        j = _skip_ws(s, key.end())
        if j >= len(s):
            return call
        if s[j] != ":":
            call.bad = True
            return call
        j = _skip_ws(s, j + 1)
        if j >= len(s):
            return call
        end, reader = _value_end(s, j)
        try:
            name = json.loads(key.group())
        except ValueError:
            call.bad = True
            return call
        if name in _ARGUMENT_KEYS and call.args is None:
            call.args = (j, end)
            call.reader = reader if end is None else None
        if end is None:
            return call
        if name == "name":
            try:
                value = json.loads(s[j:end])
            except ValueError:
                value = None
            if not isinstance(value, str):
                call.bad = True
                return call
            call.name = value
        j = end


def _scan(s: str, i: int, tags: tuple[str, ...]) -> list[_Call]:
    """The call objects from s[i] on, up to the end of the text or the first text that is not a call."""
    calls = []
    while True:
        while i < len(s):
            tag = next((t for t in tags if s.startswith(t, i)), None)
            if tag is not None:
                i += len(tag)
            elif s[i] in _BETWEEN:
                i += 1
            else:
                break
        if i >= len(s) or any(t.startswith(s[i:]) for t in tags):
            return calls  # the end, or a tag still arriving
        if s[i] != "{":
            return calls
        call = _scan_call(s, i)
        if call.bad:
            return calls
        calls.append(call)
        if call.end is None:
            return calls
        if call.name is None:
            calls[-1].bad = True  # a complete object without a name is not a call: the calls end before it
            return calls[:-1]
        i = call.end


def _held(text: str, markers: tuple[str, ...]) -> int:
    """How many characters at the end of `text` could begin a marker."""
    hold = 0
    for marker in markers:
        for k in range(min(len(marker) - 1, len(text)), 0, -1):
            if text.endswith(marker[:k]):
                hold = max(hold, k)
                break
    return hold


@dataclass
class _Sent:
    id: str
    name: str
    arguments: int = 0
    """Characters of the arguments' text sent so far."""


class ToolCallParser:
    """Streaming parser of one answer in a family's syntax: `feed` each text delta, then `finish` once.

    Content before the calls streams as it comes, except what could begin a marker and leading whitespace (both
    held until they are known to be content). A call is announced once its name is complete, then its arguments
    stream as they arrive. `parallel` False: only the first call is returned (OpenAI's parallel_tool_calls).
    """

    def __init__(self, family: str, parallel: bool = True):
        self.family = FAMILIES[family]
        self.parallel = parallel
        self.text = ""
        self.start: int | None = None  # where the calls begin in `text`
        self.sent_content = 0
        self.spoken = False  # content other than whitespace has been sent
        self.calls: list[_Sent] = []
        self._open: list[_Call] | None = None  # the last scan, while the text ends inside a call's arguments

    @property
    def called(self) -> bool:
        return bool(self.calls)

    def feed(self, text: str) -> list[Event]:
        self.text += text
        events = self._content()
        if self.start is not None:
            events += self._calls(self._scan(), final=False)
        return events

    def _scan(self) -> list[_Call]:
        """The calls so far. While the text ends inside a call's arguments, only what arrived is read (the text
        before cannot change); once they end, all is scanned again."""
        calls = self._open
        if calls is None or calls[-1].reader.end(self.text) is not None:
            calls = _scan(self.text, self.start, self.family.tags)
        last = calls[-1] if calls else None
        self._open = calls if last is not None and last.reader is not None else None
        return calls

    def finish(self) -> list[Event]:
        if self.start is not None:
            events = self._calls(_scan(self.text, self.start, self.family.tags), final=True)
            self._open = None
            if self.calls:
                return events
            self.start = None  # what looked like calls was content after all
        rest, self.sent_content = self.text[self.sent_content:], len(self.text)
        return [Event(content=rest)] if rest else []

    def _content(self) -> list[Event]:
        if self.start is not None:
            return []
        text, f, sent = self.text, self.family, self.sent_content
        if not self.spoken:
            first = _skip_ws(text, 0)
            if first < len(text) and text[first] in f.opens:
                self.start = first
                return []
        hits = [i for i in (text.find(m, sent) for m in f.markers) if i >= 0]
        end = min(hits) if hits else len(text) - _held(text[sent:], f.markers)
        piece = text[sent:end]
        if not self.spoken and not piece.strip():
            if hits:  # only whitespace before the calls: no content
                self.start = self.sent_content = end
            return []  # leading whitespace is held until it is known to be content
        self.spoken = True
        self.sent_content = end
        if hits:
            self.start = end
        return [Event(content=piece)] if piece else []

    def _calls(self, calls: list[_Call], final: bool) -> list[Event]:
        events = []
        for index, call in enumerate(calls[: None if self.parallel else 1]):
            if call.name is None:
                break
            if index == len(self.calls):
                self.calls.append(_Sent(new_call_id(), call.name))
                events.append(Event(index=index, id=self.calls[index].id, name=call.name, arguments=""))
            sent = self.calls[index]
            if call.args is not None:
                start, end = call.args
                new = self.text[start + sent.arguments:len(self.text) if end is None else end]
                if new:
                    events.append(Event(index=index, arguments=new))
                    sent.arguments += len(new)
            elif final and call.end is not None and sent.arguments == 0:
                events.append(Event(index=index, arguments="{}"))  # a call without arguments takes none
                sent.arguments = 2
        return events


class NamedCallParser:
    """The answer is the arguments of one named function (`tool_choice` naming it constrains decoding so)."""

    def __init__(self, name: str):
        self.name, self.id, self.sent = name, new_call_id(), False

    @property
    def called(self) -> bool:
        return self.sent

    def feed(self, text: str) -> list[Event]:
        if not text:
            return []
        events = [] if self.sent else [Event(index=0, id=self.id, name=self.name, arguments="")]
        self.sent = True
        return events + [Event(index=0, arguments=text)]

    def finish(self) -> list[Event]:
        return [] if self.sent else self.feed("{}")


@dataclass
class Answer:
    """A whole answer: its content (None when there is none) and its calls."""

    content: str | None = None
    calls: list[dict] = field(default_factory=list)


def collect(events: list[Event]) -> Answer:
    """The events of one answer put together (the non-streamed message)."""
    answer, content = Answer(), []
    for event in events:
        if event.content is not None:
            content.append(event.content)
        elif event.id is not None:
            answer.calls.append({"id": event.id, "type": "function",
                                 "function": {"name": event.name, "arguments": event.arguments or ""}})
        else:
            answer.calls[event.index]["function"]["arguments"] += event.arguments
    text = "".join(content)
    answer.content = text if text and (text.strip() or not answer.calls) else None
    return answer


def parse(parser: ToolCallParser | NamedCallParser, text: str) -> Answer:
    """A whole answer parsed by `parser` (fresh)."""
    return collect(parser.feed(text) + parser.finish())
