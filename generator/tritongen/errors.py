"""One exception hierarchy for tritongen; the CLI maps each class to an exit code in one place."""

from __future__ import annotations

import re


class TritongenError(Exception):
    """Base class. ``exit_code`` is what the CLI returns when this error reaches it."""

    exit_code = 1

    def __init__(self, problems: str | list[str]):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("\n".join(self.problems))


class SpecError(TritongenError):
    """Bad input: a spec field or a flag. Each problem reads ``dotted.path: what is wrong; what to do``."""

    exit_code = 2


class CheckFailed(TritongenError):
    """The deployment failed a check (verification, consistency against an engine, an SLO)."""

    exit_code = 1


class EnvironmentMissing(TritongenError):
    """Something the command needs is not on this machine (tritonserver, a GPU, TensorRT-LLM, a docker engine)."""

    exit_code = 3


# What the CLI returns for an error that is tritongen's own fault (a bug): neither bad input nor a failed check.
INTERNAL_ERROR_EXIT = 70

# Values that look like credentials: shown as their kind, never echoed (specs get pasted into tickets and logs).
_TOKEN = re.compile(r"^(hf_[A-Za-z0-9]{16,}|sk-[A-Za-z0-9_-]{16,}|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_\w{20,}|"
                    r"AKIA[0-9A-Z]{16}|xox[abpr]-[A-Za-z0-9-]{10,}|nvapi-[A-Za-z0-9_-]{20,}|"
                    r"eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]*)$")
# Anything else key-like: 32-512 characters of a key alphabet mixing upper case, lower case and digits.
_KEYLIKE = re.compile(r"^(?=.*[a-z])(?=.*[A-Z])(?=.*[0-9])[A-Za-z0-9+/_=-]{32,512}$")


_TOKEN_IN_TEXT = re.compile(_TOKEN.pattern.strip("^$").replace("(", "(?<![\\w-])(", 1) + r"(?![\w-])", re.I)


def scrub(text: str) -> str:
    """`text` with every token of a known credential format (hf_, sk-, ghp_, AKIA, xox, nvapi-, JWT) masked."""
    return _TOKEN_IN_TEXT.sub("<a value that looks like a secret; not shown>", text)


def looks_secret(value: object) -> bool:
    """Whether a value has the shape of an API token or key (and must not be echoed)."""
    if not isinstance(value, str) or len(value) > 4096:
        return False
    v = value.strip()
    return bool(_TOKEN.match(v) or (_KEYLIKE.match(v) and not v.startswith("/")))


def shown(value: object, limit: int = 80) -> str:
    """`value` as it may appear in a message: repr, cut to `limit` characters, never a token-like string."""
    if looks_secret(value):
        return f"<a {len(value)}-character value that looks like a secret; not shown>"  # type: ignore[arg-type]
    return clip(repr(value), limit)


def clip(text: str, limit: int = 200) -> str:
    """Plain text cut to `limit` characters (messages never echo a whole 10 MB value)."""
    return text if len(text) <= limit else f"{text[:limit - 20]}...<{len(text):,} characters>"


def problem(path: str, what: str, fix: str) -> str:
    """Format one problem line the way every tritongen error reads."""
    return f"{path}: {what}; {fix}"
