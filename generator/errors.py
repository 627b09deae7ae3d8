"""One exception hierarchy for tritongen; the CLI maps each class to an exit code in one place."""

from __future__ import annotations


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


def problem(path: str, what: str, fix: str) -> str:
    """Format one problem line the way every tritongen error reads."""
    return f"{path}: {what}; {fix}"
