"""Reading a spec (or inventory) file safely: UTF-8 only, no duplicate keys, bounded nesting, nothing echoed whole.

In the bottom room so that every reader of a YAML file (spec, inventory, tune) shares it without importing the
stage that owns the other files (placement reads an inventory without loading the spec and its runtimes).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tritongen.errors import SpecError, clip, problem, scrub, shown

# A spec is five levels deep at most; anything far deeper is not a spec (and would exhaust the parser's stack).
MAX_DEPTH = 64
MAX_BYTES = 1 << 20


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate mapping keys (PyYAML keeps the last one silently)."""

    def compose_node(self, parent, index):  # type: ignore[override]
        self._depth = getattr(self, "_depth", 0) + 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise SpecError(problem(f"{self.name}: line {mark.line + 1}", f"nests deeper than {MAX_DEPTH} "
                                        "levels", "a spec is a few levels deep; see examples/tiny-cpu.yaml"))
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node, deep=False):  # type: ignore[override]
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
            except TypeError:  # an unhashable key: construct_mapping reports it
                break
            if duplicate:
                raise SpecError(problem(f"{self.name}: line {key_node.start_mark.line + 1}",
                                        f"duplicate key {shown(key)}", "keep one of them"))
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def read_yaml(path: Path) -> Any:
    """The YAML document in `path`, or SpecError naming what is wrong with the file."""
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise SpecError(problem(str(path), f"cannot be read ({err.strerror})", "pass a readable YAML file")) from None
    if len(raw) > MAX_BYTES:
        raise SpecError(problem(str(path), f"is {len(raw):,} bytes; a spec or inventory is a few KB",
                                "pass the deployment spec (or inventory), not a data file"))
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise SpecError(problem(str(path), f"is not UTF-8 text (byte 0x{raw[err.start]:02x} at offset {err.start})",
                                "save the spec as UTF-8")) from None
    loader = _UniqueKeyLoader(text)
    loader.name = str(path)
    try:
        return loader.get_single_data()
    except yaml.YAMLError as err:
        raise SpecError(yaml_problem(path, text, err)) from None
    finally:
        loader.dispose()


def yaml_problem(path: Path, text: str, err: yaml.YAMLError) -> str:
    """A YAML syntax error as tritongen reports it: `FILE: is not valid YAML at line L, column C: what; fix`, then
    the line it points at with a caret under the column (continuation lines: the CLI indents them under the
    error)."""
    mark = getattr(err, "problem_mark", None)
    what = getattr(err, "problem", None) or str(err).splitlines()[0]
    context, context_mark = getattr(err, "context", None), getattr(err, "context_mark", None)
    lines = text.splitlines()
    fix = "fix the YAML syntax there"
    if mark is None:
        return problem(str(path), f"is not valid YAML: {clip(what, 300)}", "fix the YAML syntax")
    at_end = mark.line >= len(lines) or "end of stream" in what or "<stream end>" in what
    if at_end and context_mark is not None:
        # The file ended inside something (a bracket, a quote): point at where that began.
        opened = str(context).removeprefix("while parsing ").removeprefix("while scanning ")
        what, mark, fix = f"{opened} that is never closed ({what})", context_mark, "close it"
    elif context and context_mark is not None and context_mark.line != mark.line:
        what += f" ({context} at line {context_mark.line + 1}, column {context_mark.column + 1})"
    elif context:
        what += f" ({context})"
    if "'\\t'" in what:
        fix = "indent with spaces: YAML does not allow tabs there"
    where = f"{path}: is not valid YAML at line {mark.line + 1}, column {mark.column + 1}"
    if mark.line >= len(lines):
        return f"{where}: {clip(what, 300)} at the end of the file; {fix}"
    number = f"{mark.line + 1} | "
    shown_line = scrub(clip(lines[mark.line].expandtabs(1), 160))
    caret = " " * (len(number) - 2) + "| " + " " * min(mark.column, len(shown_line)) + "^"
    return f"{where}: {clip(what, 300)}; {fix}\n{number}{shown_line}\n{caret}"
