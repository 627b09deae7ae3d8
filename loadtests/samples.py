"""The raw sample: one record per request, appended as one JSON line.

Metrics are computed from these records, not from Locust's stats, because Locust rounds response times to about
two significant digits. Each Locust process writes its own file (`per_process_path`), so `--processes N` and
distributed workers never interleave writes; `read_samples` merges the files.

Use from a Locust user::

    sample = Sample.begin(request_id, "grpc", input_tokens=n_in, concurrency=self.environment.runner.user_count)
    ...                       # on every streamed response that carries text, and on the final response:
    sample.mark_response()
    ...
    sample.finish(output_text=text, output_tokens=len(tokenizer.encode(text, add_special_tokens=False)))
    writer.write(sample)      # writer = SampleWriter(per_process_path(out_dir)), opened in on_start

Clocks: latencies are differences of `time.perf_counter()` (monotonic, high resolution) and are stored as seconds
after `send_time`. `send_wall_ns` (`time.time_ns()`) places requests from different processes or hosts on one
time axis for the benchmark duration and the throughput-over-time series.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

# Plain `generate` returns the whole completion in one response: it has no first token to time.
NON_STREAMING_PROTOCOLS = frozenset({"http"})


@dataclass
class Sample:
    """One request as the client saw it."""

    request_id: str
    protocol: str
    """`grpc` (ModelStreamInfer), `http_stream` (generate_stream) or `http` (generate)."""
    send_time: float
    """time.perf_counter() when the request was sent (seconds, comparable only within one process)."""
    send_wall_ns: int
    """time.time_ns() when the request was sent."""
    concurrency: int
    """Concurrency level (users) the request ran under; a sweep groups by it."""
    input_tokens: int
    response_times: list[float] = field(default_factory=list)
    """Seconds after send_time, one per streamed response, in arrival order."""
    output_tokens: int = 0
    """Tokenizer count of output_text."""
    output_text: str = ""
    error: str | None = None
    """None for a successful request, else what went wrong (an error inside a 200 stream counts)."""

    @classmethod
    def begin(cls, request_id: str, protocol: str, *, input_tokens: int, concurrency: int) -> Sample:
        """Start timing a request; call right before sending it."""
        return cls(request_id=request_id, protocol=protocol, send_time=time.perf_counter(),
                   send_wall_ns=time.time_ns(), concurrency=concurrency, input_tokens=input_tokens)

    def mark_response(self, now: float | None = None) -> None:
        """Record that a response arrived (now, or at perf_counter time `now`)."""
        self.response_times.append((time.perf_counter() if now is None else now) - self.send_time)

    def finish(self, output_text: str, output_tokens: int, error: str | None = None) -> Sample:
        """Record the result; returns self so `writer.write(sample.finish(...))` reads naturally."""
        self.output_text = output_text
        self.output_tokens = output_tokens
        self.error = error
        return self

    @property
    def ok(self) -> bool:
        """Succeeded: no error and at least one response (a stream that ended empty is a failure)."""
        return self.error is None and bool(self.response_times)

    @property
    def streaming(self) -> bool:
        return self.protocol not in NON_STREAMING_PROTOCOLS

    @property
    def start_wall_s(self) -> float:
        return self.send_wall_ns / 1e9

    @property
    def end_wall_s(self) -> float:
        """Wall time of the last response; the send time when none came."""
        return self.start_wall_s + (self.response_times[-1] if self.response_times else 0.0)

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: dict) -> Sample:
        return cls(**data)


class SampleWriter:
    """Appends samples to a JSONL file, one flushed line per request, so a killed process loses at most one."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("a", encoding="utf-8")

    def write(self, sample: Sample) -> None:
        # One write call per line: greenlets of one process cannot interleave inside a line.
        self._file.write(sample.to_json() + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> SampleWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def per_process_path(directory: str | Path, prefix: str = "samples") -> Path:
    """A file name unique to this process, for Locust `--processes` and distributed workers."""
    return Path(directory) / f"{prefix}-{socket.gethostname()}-{os.getpid()}.jsonl"


def sample_files(directory: str | Path, prefix: str = "samples") -> list[Path]:
    """The sample files `per_process_path` created in `directory`, sorted."""
    return sorted(Path(directory).glob(f"{prefix}-*.jsonl"))


def read_samples(paths: Iterable[str | Path]) -> list[Sample]:
    """Merge sample files, ordered by send time."""
    samples: list[Sample] = []
    for path in paths:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
            except json.JSONDecodeError as err:
                # A process killed mid-write leaves a torn last line; a torn line elsewhere is corruption.
                if number == len(lines):
                    continue
                raise ValueError(f"{path}:{number}: not a sample record ({err})") from None
            try:
                samples.append(Sample.from_dict(data))
            except TypeError as err:
                raise ValueError(f"{path}:{number}: not a sample record ({err})") from None
    samples.sort(key=lambda s: s.send_wall_ns)
    return samples
