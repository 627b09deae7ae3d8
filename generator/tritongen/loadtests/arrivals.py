"""Open-loop arrival schedules: when requests are sent, independent of when earlier ones finish.

Pure functions, no Locust and no clock: a schedule is a sequence of offsets in seconds after the start of the
load. `tritongen.loadtests.users.OpenLoopUser` replays one in a Locust process.

- constant: one request every 1/rate seconds.
- poisson: exponential gaps with mean 1/rate (a Poisson process; the gaps' coefficient of variation is 1).
- gamma: gamma-distributed gaps with shape `burstiness` and mean 1/rate, so the rate is the same and the gaps'
  coefficient of variation is 1/sqrt(burstiness): burstiness < 1 is burstier than Poisson, 1 is Poisson, > 1 is
  smoother (the burstiness knob of vLLM's serving benchmark).
- trace: the timestamps of a JSONL trace (`read_trace`), shifted so the first request is at 0.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Pattern = Literal["constant", "poisson", "gamma"]
PATTERNS: tuple[str, ...] = ("constant", "poisson", "gamma")


def arrival_offsets(pattern: Pattern, rate: float, *, burstiness: float = 1.0, seed: int | str = 0,
                    duration_s: float | None = None, count: int | None = None) -> Iterator[float]:
    """Offsets (seconds after the start) of an arrival process at `rate` requests/s, ascending.

    Stops after `duration_s` seconds or `count` arrivals, whichever comes first; endless when both are None.
    """
    if rate <= 0:
        raise ValueError(f"rate must be > 0 (got {rate})")
    if pattern == "gamma" and burstiness <= 0:
        raise ValueError(f"burstiness must be > 0 (got {burstiness})")
    if pattern not in PATTERNS:
        raise ValueError(f"unknown arrival pattern {pattern!r}; choose one of {', '.join(PATTERNS)}")
    rng = random.Random(seed)
    t, n = 0.0, 0
    while (count is None or n < count) and (duration_s is None or t < duration_s):
        yield t
        n += 1
        if pattern == "constant":
            t = n / rate  # no accumulated rounding drift over long runs
        elif pattern == "poisson":
            t += rng.expovariate(rate)
        else:
            t += rng.gammavariate(burstiness, 1.0 / (rate * burstiness))


@dataclass(frozen=True)
class TraceRow:
    """One request of a trace: when it is sent and how long its prompt and completion are."""

    offset_s: float
    """Seconds after the trace's first request."""
    input_tokens: int | None
    """Prompt length (synthetic prompt of this many tokens); None when the row carries its own text."""
    output_tokens: int
    text_input: str | None = None


def parse_trace(lines: list[str], source: str = "trace") -> list[TraceRow]:
    """Rows of a JSONL trace: `timestamp` (milliseconds, any origin), `input_length` or `text_input`, and
    `output_length` (the keys of Mooncake-style traces that AIPerf replays), sorted by timestamp."""
    raw = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{source}:{number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{where}: not JSON ({err.msg})") from None
        if not isinstance(row, dict):
            raise ValueError(f"{where}: expected an object with timestamp, input_length, output_length")
        missing = [k for k in ("timestamp", "output_length") if k not in row]
        if "input_length" not in row and "text_input" not in row:
            missing.append("input_length")
        if missing:
            raise ValueError(f"{where}: missing {', '.join(missing)}")
        try:
            ts = float(row["timestamp"])
            out = int(row["output_length"])
            n_in = None if "input_length" not in row else int(row["input_length"])
        except (TypeError, ValueError):
            raise ValueError(f"{where}: timestamp, input_length and output_length must be numbers") from None
        if out < 1 or (n_in is not None and n_in < 1) or ts < 0:
            raise ValueError(f"{where}: lengths must be >= 1 and the timestamp >= 0")
        raw.append((ts, n_in, out, row.get("text_input")))
    if not raw:
        raise ValueError(f"{source}: no requests")
    raw.sort(key=lambda r: r[0])
    t0 = raw[0][0]
    return [TraceRow((ts - t0) / 1e3, n_in, out, text) for ts, n_in, out, text in raw]


def read_trace(path: str | Path) -> list[TraceRow]:
    path = Path(path)
    return parse_trace(path.read_text(encoding="utf-8").splitlines(), str(path))


def cancel_decisions(probability: float, seed: int | str = 0) -> Iterator[bool]:
    """Which requests to cancel: each one independently with `probability`."""
    rng = random.Random(f"cancel-{seed}")
    while True:
        yield rng.random() < probability
