"""The raw sample: one record per request, appended as one JSON line.

Metrics are computed from these records, not from Locust's stats, because Locust rounds response times to about
two significant digits. Each Locust process writes its own file (`per_process_path`), so `--processes N` and
distributed workers never interleave writes; `read_samples` merges the files.

Token counts are the server's: every request asks for `return_num_output_tokens` and `return_num_input_tokens`,
and each response's `num_output_tokens` is stored next to its arrival time, so tokens can be placed in time (a
measurement window counts the tokens that arrived inside it). Nothing is re-tokenised, except for a model that
returns no counts (NVIDIA's llmapi model): its samples are `counted_by` client, and the report marks every value
that rests on them client-counted.

The count is per response, and a request's total is the sum over its responses: TensorRT-LLM's C++ backend fills
`num_output_tokens` with the number of token ids in that response's `output_ids` (a streamed response carries only
the new tokens), NVIDIA's BLS forwards each response's value unchanged, and Triton's OpenAI frontend sums them
for `usage` (facts with files and commits: tests/fixtures/nvidia/trtllm-1.2.1.json, `num_output_tokens`).
tritongen's hf and synthetic runtimes count the same way. Two cases the sum does not cover, so the load test
avoids them: with beam_width > 1 a streamed response carries the whole beams (the load test never sends
beam_width), and a non-streamed response with exclude_input_in_output false counts the prompt too (the load test
sends exclude_input_in_output true).

Use from a Locust user::

    sample = Sample.begin(request_id, "grpc", input_tokens=n_in, level=4)
    ...                       # on every streamed response, with that response's server output token count:
    sample.mark_response(tokens=num_output_tokens)
    ...
    sample.finish(output_text=text, error=None)
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


# How a refusal for overload reads in an error message, whichever client saw it.
_REFUSALS = ("exceeds maximum queue size", "resource exhausted", "resource_exhausted", "rate_limit_error",
             "too many requests", "http 429", "status 429")

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
    level: float
    """The load level the request ran under (users in closed loop, requests/s in open loop); a sweep groups
    by it."""
    input_tokens: int
    """Prompt tokens: the server's num_input_tokens when it reported one, else the client's count of the prompt."""
    response_times: list[float] = field(default_factory=list)
    """Seconds after send_time, one per streamed response, in arrival order."""
    response_tokens: list[int | None] = field(default_factory=list)
    """The server's num_output_tokens of each response: the tokens it carried (None where it carried no count)."""
    output_tokens: int | None = None
    """The server's count of generated tokens (the sum of num_output_tokens); None when it reported none."""
    output_text: str = ""
    error: str | None = None
    """None for a successful request, else what went wrong (an error inside a 200 stream counts)."""
    cancelled: bool = False
    """The client cancelled the request on purpose (--cancel-rate); it is neither a success nor an error."""
    adapter: str | None = None
    """The LoRA adapter the request went to (validation.load.adapters; `base` for the base model); None: the load
    named none."""
    schema: str | None = None
    """The name of the JSON schema the request carried (validation.load.structured); None: a plain request."""
    schema_result: str | None = None
    """A structured request that succeeded: `valid` (its whole text parses and validates against the schema),
    `invalid`, or `truncated` (it ended at its max_tokens without a valid text). None otherwise."""
    scheduled_lag_s: float | None = None
    """Open loop: send time - scheduled arrival time (> 0 when the concurrency cap or the client held it)."""
    counted_by: str = "server"
    """`server`: the token counts are the server's. `client`: the model returns none (NVIDIA's llmapi model), so
    they are the deployment's tokenizer's count of the text received (tritongen.runtimes.llmapi.dialect)."""

    @classmethod
    def begin(cls, request_id: str, protocol: str, *, input_tokens: int, level: float) -> Sample:
        """Start timing a request; call right before sending it."""
        return cls(request_id=request_id, protocol=protocol, send_time=time.perf_counter(),
                   send_wall_ns=time.time_ns(), level=level, input_tokens=input_tokens)

    def mark_response(self, now: float | None = None, *, tokens: int | None = None) -> None:
        """Record that a response arrived (now, or at perf_counter time `now`) carrying `tokens` output tokens by
        the server's count (its num_output_tokens)."""
        self.response_times.append((time.perf_counter() if now is None else now) - self.send_time)
        self.response_tokens.append(tokens)
        if tokens is not None:
            self.output_tokens = (self.output_tokens or 0) + tokens

    def finish(self, output_text: str, error: str | None = None) -> Sample:
        """Record the result; returns self so `writer.write(sample.finish(...))` reads naturally."""
        self.output_text = output_text
        self.error = error
        return self

    @property
    def ok(self) -> bool:
        """Succeeded: no error, not cancelled, and at least one response (a stream that ended empty failed)."""
        return self.error is None and not self.cancelled and bool(self.response_times)

    @property
    def failed(self) -> bool:
        return not self.ok and not self.cancelled

    @property
    def refused(self) -> bool:
        """Failed because the deployment refused it for overload (a full queue: Triton's queue policy, gRPC
        RESOURCE_EXHAUSTED, HTTP 429): the deployment protecting itself, not a broken request."""
        return self.failed and self.error is not None and any(m in self.error.lower() for m in _REFUSALS)

    def token_arrivals(self) -> list[tuple[float, int]]:
        """(seconds after send, tokens that arrived with that response) for each response that carried tokens."""
        return [(at, count) for at, count in zip(self.response_times, self.response_tokens) if count]

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

    @property
    def end_s(self) -> float:
        """Seconds after send of the last response (0 when none came)."""
        return self.response_times[-1] if self.response_times else 0.0


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
