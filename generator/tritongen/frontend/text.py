"""Prompt and completion text: the chat template (the frontend is its only owner) and stop sequences."""

from __future__ import annotations

from pathlib import Path

# transformers (about 1.8 s of CPU to import) is imported where a tokenizer is loaded, not with the app.


class ChatTemplate:
    """Renders chat messages into one prompt with the model's tokenizer template or a template file.

    Preprocessing only tokenizes what it is given, so applying the template here and nowhere else means the
    prompt is templated exactly once.
    """

    def __init__(self, tokenizer_dir: str, template_file: str | None = None):
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
        self.template = Path(template_file).read_text() if template_file else None
        self.available = self.template is not None or bool(getattr(self.tokenizer, "chat_template", None))

    @property
    def source(self) -> str | None:
        """The template's text (all of a tokenizer's named templates), for what it says about tool calls."""
        template = self.template or getattr(self.tokenizer, "chat_template", None)
        return "\n".join(template.values()) if isinstance(template, dict) else template

    def render(self, messages: list[dict], tools: list[dict] | None = None) -> str:
        """The prompt; `tools` (OpenAI's tool objects) go to the template as transformers passes them (`tools=`)."""
        return self.tokenizer.apply_chat_template(messages, chat_template=self.template, tokenize=False,
                                                  add_generation_prompt=True, tools=tools or None)


class StopMatcher:
    """Finds OpenAI `stop` sequences in streamed text and holds back what could be the start of one.

    The server also receives the stop sequences (as stop_words), but it matches token ids, and its output ends
    with the stop sequence; OpenAI's contract is text that ends before it. So text is matched here too: the
    returned text never contains a stop sequence, and generation is stopped at the first one either side finds.
    """

    def __init__(self, stops: list[str]):
        self.stops = [s for s in stops if s]
        self.pending = ""
        self.stopped = False

    def feed(self, text: str) -> str:
        """Add generated text; return the part that is safe to send now."""
        if self.stopped:
            return ""
        if not self.stops:
            return text
        self.pending += text
        hits = [i for i in (self.pending.find(s) for s in self.stops) if i >= 0]
        if hits:
            out, self.pending, self.stopped = self.pending[: min(hits)], "", True
            return out
        hold = 0
        for stop in self.stops:
            for k in range(min(len(stop) - 1, len(self.pending)), 0, -1):
                if self.pending.endswith(stop[:k]):
                    hold = max(hold, k)
                    break
        out = self.pending[: len(self.pending) - hold]
        self.pending = self.pending[len(out):]
        return out

    def flush(self) -> str:
        """At the end of generation: text held back that turned out not to start a stop sequence."""
        out, self.pending = ("" if self.stopped else self.pending), ""
        return out
