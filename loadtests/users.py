"""Locust users that drive a deployed ensemble the way its clients do, recording one Sample per request.

Configuration comes from one JSON file whose path is in the environment variable `TRITONGEN_LOADTEST_CONFIG`
(`tritongen loadtest` writes it; see `LoadConfig` for the keys). Each Locust process (`--processes N` forks
after the locustfile is imported) opens its own sample file and tokenizer in `on_start`, so nothing made before
the fork is shared: no gRPC channel, no open file.

Every request is recorded twice: as a `Sample` (raw timestamps, the source of every reported metric) and as a
Locust request event (request_type = protocol, name = model, response_time = end-to-end ms, response_length =
output tokens), so Locust's own statistics, CSVs and HTML page stay meaningful.

Users are closed-loop (`wait_time = constant(0)`): one request in flight per user, so `-u` is the concurrency.
"""

from __future__ import annotations

import itertools
import json
import os
import queue
import random
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import grpc.experimental.gevent
from locust import User, constant, task

from tritongen.loadtests.samples import Sample, SampleWriter, per_process_path

# gRPC under gevent: must run before any channel exists (here: before any user starts).
grpc.experimental.gevent.init_gevent()

CONFIG_ENV = "TRITONGEN_LOADTEST_CONFIG"

# Filler text the synthetic prompts are cut from, in tokens of the deployment's own tokenizer.
_FILLER = (
    "In the quiet town by the river the old clockmaker opened his shop every morning at seven. "
    "Travellers stopped to ask for directions, children pressed their faces to the window, and the "
    "baker from across the street brought warm bread while the clocks ticked in a hundred voices. "
    "A model serves requests, streams tokens, batches work in flight and keeps its cache warm. "
)


@dataclass(frozen=True)
class TokenDist:
    mean: int
    stddev: float = 0.0

    def draw(self, rng: random.Random) -> int:
        """gauss(mean, stddev), rounded, at least 1 (stddev 0: always mean)."""
        if self.stddev <= 0:
            return self.mean
        return max(1, round(rng.gauss(self.mean, self.stddev)))


@dataclass(frozen=True)
class LoadConfig:
    """What the locustfile needs; written as JSON by `tritongen loadtest`, read through `CONFIG_ENV`."""

    url: str
    """host:port of the endpoint for `protocol` (gRPC port for grpc, HTTP port otherwise)."""
    protocol: str
    """grpc | http_stream | http | openai."""
    samples_dir: str
    """Folder for the per-process sample files."""
    tokenizer_dir: str
    """The deployment's tokenizer (Plan.tokenizer.dir): builds prompts, counts input and output tokens."""
    concurrency: int
    """The run's user count, stored in every sample (a sweep groups by it)."""
    model: str = "ensemble"
    """Triton model name; for openai, the public model name."""
    api_key_env: str | None = None
    """openai: the environment variable holding the API key, when the frontend requires one."""
    input_tokens: TokenDist = TokenDist(32, 4)
    output_tokens: TokenDist = TokenDist(32, 0)
    prompts_file: str | None = None
    """JSONL of {"text_input", "max_tokens"[, "min_tokens"]}, used instead of synthetic prompts."""
    add_special_tokens: bool = True
    """Count input tokens as the preprocessing model tokenizes them."""
    timeout_s: float = 120.0
    """Per-request limit; a request past it is a failure."""
    seed: int = 0
    dialect: str = "ensemble"
    """`ensemble` (the C++ contract: text_input/max_tokens/stream, streamed text in pieces) or `llmapi` (NVIDIA's
    LLM-API model: text_input/sampling_param_max_tokens/streaming, each streamed text_output is the text so far,
    and no min_tokens input, so output lengths are not forced)."""

    @classmethod
    def from_dict(cls, data: dict) -> LoadConfig:
        data = dict(data)
        for key in ("input_tokens", "output_tokens"):
            if isinstance(data.get(key), dict):
                data[key] = TokenDist(**data[key])
        return cls(**data)

    @classmethod
    def from_env(cls) -> LoadConfig:
        path = os.environ.get(CONFIG_ENV)
        if not path:
            raise RuntimeError(f"{CONFIG_ENV} is not set; run the locustfile through `tritongen loadtest`, "
                               "or point it at a JSON file with the LoadConfig keys")
        return cls.from_dict(json.loads(Path(path).read_text()))


@dataclass(frozen=True)
class Prompt:
    text: str
    input_tokens: int
    max_tokens: int
    min_tokens: int | None


@dataclass
class PromptSource:
    """Synthetic prompts cut from filler text with the deployment's tokenizer, or lines of a JSONL file."""

    config: LoadConfig
    tokenizer: object
    rng: random.Random = field(default_factory=random.Random)
    _filler_ids: list[int] = field(default_factory=list)
    _file_prompts: itertools.cycle | None = None

    def __post_init__(self) -> None:
        # Seeded per process, so processes do not send identical prompt sequences.
        self.rng.seed(f"{self.config.seed}-{os.getpid()}")
        if self.config.prompts_file:
            rows = [json.loads(line) for line in Path(self.config.prompts_file).read_text().splitlines()
                    if line.strip()]
            if not rows:
                raise ValueError(f"{self.config.prompts_file}: no prompts")
            self._file_prompts = itertools.cycle([self._file_prompt(row) for row in rows])
        else:
            self._filler_ids = self.tokenizer.encode(_FILLER, add_special_tokens=False)

    def count(self, text: str, *, special: bool = False) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=special))

    def _file_prompt(self, row: dict) -> Prompt:
        text = row["text_input"]
        max_tokens = int(row.get("max_tokens", self.config.output_tokens.mean))
        return Prompt(text, self.count(text, special=self.config.add_special_tokens), max_tokens,
                      row.get("min_tokens"))

    def next(self) -> Prompt:
        if self._file_prompts is not None:
            return next(self._file_prompts)
        n = self.config.input_tokens.draw(self.rng)
        ids = self._filler_ids
        reps = -(-(n + len(ids)) // len(ids))
        start = self.rng.randrange(len(ids))
        text = self.tokenizer.decode((ids * (reps + 1))[start:start + n], skip_special_tokens=True)
        # Decoding then re-encoding can merge or split a token at the edges: record what the server sees.
        out = self.config.output_tokens.draw(self.rng)
        return Prompt(text, self.count(text, special=self.config.add_special_tokens), out, out)


class _ProcessState:
    """Per-process state. The tokenizer loads once, before Locust starts its clock (`preload`); the prompt
    source (seeded per process) and the sample writer are made per process, after any fork."""

    config: LoadConfig | None = None
    tokenizer: object = None
    pid: int | None = None
    prompts: PromptSource
    writer: SampleWriter

    @classmethod
    def preload(cls) -> LoadConfig:
        if cls.config is None:
            # Importing transformers takes seconds; in on_start it would block every greenlet of the run.
            from transformers import AutoTokenizer

            cls.config = LoadConfig.from_env()
            cls.tokenizer = AutoTokenizer.from_pretrained(cls.config.tokenizer_dir)
        return cls.config

    @classmethod
    def get(cls) -> type[_ProcessState]:
        if cls.pid != os.getpid():
            cls.preload()
            cls.prompts = PromptSource(cls.config, cls.tokenizer)
            cls.writer = SampleWriter(per_process_path(cls.config.samples_dir))
            cls.pid = os.getpid()
        return cls


def preload() -> LoadConfig:
    """Read the configuration and load the tokenizer now (the locustfile calls this at import)."""
    return _ProcessState.preload()


class _RequestFailed(Exception):
    """A request that failed at the server or on the wire; the message becomes the sample's error."""


class LLMUser(User):
    """Base of the protocol users: prompt source, sample recording, Locust events."""

    abstract = True
    wait_time = constant(0)
    protocol = ""

    def on_start(self) -> None:
        state = _ProcessState.get()
        self.config, self.prompts, self.writer = state.config, state.prompts, state.writer

    @task
    def generate(self) -> None:
        prompt = self.prompts.next()
        sample = Sample.begin(uuid.uuid4().hex, self.protocol, input_tokens=prompt.input_tokens,
                              concurrency=self.config.concurrency)
        text, error = "", None
        try:
            text = self.send(prompt, sample)
        except _RequestFailed as err:
            error = str(err) or type(err).__name__
        self.record(sample, text, error)

    def send(self, prompt: Prompt, sample: Sample) -> str:
        """Send one request, call `sample.mark_response()` per response, return the generated text."""
        raise NotImplementedError

    def record(self, sample: Sample, text: str, error: str | None) -> None:
        tokens = self.prompts.count(text) if text else 0
        sample.finish(output_text=text, output_tokens=tokens, error=error)
        if sample.error is None and not sample.response_times:
            sample.error = "no response received"
        self.writer.write(sample)
        elapsed = sample.response_times[-1] if sample.response_times else time.perf_counter() - sample.send_time
        self.environment.events.request.fire(
            request_type=self.protocol, name=self.config.model, response_time=elapsed * 1e3,
            response_length=tokens, exception=None if sample.error is None else _RequestFailed(sample.error),
            context={"request_id": sample.request_id},
        )

    def params(self, prompt: Prompt) -> dict:
        return {} if prompt.min_tokens is None else {"min_tokens": prompt.min_tokens}


class GrpcStreamUser(LLMUser):
    """gRPC ModelStreamInfer through tritonclient: one stream per user, opened in on_start (after any fork)."""

    protocol = "grpc"

    def on_start(self) -> None:
        super().on_start()
        self.client = None
        self._open()

    def on_stop(self) -> None:
        self._close()

    def _open(self) -> None:
        import tritonclient.grpc as grpcclient

        # A queue per stream: responses of a stream closed after an error or timeout never reach the next one.
        responses: queue.Queue = queue.Queue()
        self.responses = responses
        self.client = grpcclient.InferenceServerClient(self.config.url)
        # Timestamp in the callback: the arrival time, not when this greenlet gets to run again.
        self.client.start_stream(callback=lambda result, error: responses.put((time.perf_counter(), result, error)))

    def _close(self) -> None:
        if self.client is not None:
            try:
                self.client.stop_stream(cancel_requests=True)
                self.client.close()
            except Exception:  # noqa: BLE001 - closing a broken stream must not fail the user
                pass
            self.client = None

    def send(self, prompt: Prompt, sample: Sample) -> str:
        from tritongen.client import grpc_inputs

        if self.client is None:
            self._open()
        if self.config.dialect == "llmapi":
            from tritongen.client import llmapi_grpc_inputs

            inputs = llmapi_grpc_inputs(prompt.text, prompt.max_tokens, stream=True)
        else:
            inputs = grpc_inputs(prompt.text, prompt.max_tokens, stream=True, **self.params(prompt))
        sample.send_time, sample.send_wall_ns = time.perf_counter(), time.time_ns()
        self.client.async_stream_infer(self.config.model, inputs, request_id=sample.request_id,
                                       enable_empty_final_response=True)
        parts = []
        deadline = sample.send_time + self.config.timeout_s
        while True:
            try:
                at, result, error = self.responses.get(timeout=max(0.0, deadline - time.perf_counter()))
            except queue.Empty:
                self._close()  # cancels the request and drops anything still queued for it
                raise _RequestFailed(f"no final response within {self.config.timeout_s:g}s") from None
            if error is not None:
                # The stream is broken after an error; the next request opens a new one.
                self._close()
                raise _RequestFailed(f"gRPC: {error}")
            response = result.get_response()
            if response.id != sample.request_id:
                continue  # a late response of an earlier, abandoned request
            final = response.parameters.get("triton_final_response")
            is_final = final is not None and final.bool_param
            out = result.as_numpy("text_output")
            if out is not None:
                value = out.reshape(-1)[0] if out.size else b""
                text = value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)
                parts = [text] if self.config.dialect == "llmapi" else [*parts, text]
            if out is not None or is_final:
                sample.mark_response(at)
            if is_final:
                return "".join(parts)


class _HttpUserBase(LLMUser):
    """One keep-alive geventhttpclient connection per user (Locust's FastHttpUser transport)."""

    abstract = True

    def on_start(self) -> None:
        from geventhttpclient import HTTPClient

        super().on_start()
        host, _, port = self.config.url.rpartition(":")
        self.http = HTTPClient(host, int(port), connection_timeout=10, network_timeout=self.config.timeout_s,
                               concurrency=1)

    def on_stop(self) -> None:
        self.http.close()

    def post(self, endpoint: str, prompt: Prompt, sample: Sample, *, stream: bool):
        from tritongen.client import llmapi_request_body, request_body

        body = json.dumps(llmapi_request_body(prompt.text, prompt.max_tokens, stream=stream)
                          if self.config.dialect == "llmapi" else
                          request_body(prompt.text, prompt.max_tokens, stream=stream, **self.params(prompt)))
        sample.send_time, sample.send_wall_ns = time.perf_counter(), time.time_ns()
        try:
            response = self.http.post(f"/v2/models/{self.config.model}/{endpoint}", body,
                                      headers={"Content-Type": "application/json"})
        except (OSError, TimeoutError) as err:
            raise _RequestFailed(f"HTTP {endpoint}: {type(err).__name__}: {err}") from None
        if response.status_code != 200:
            detail = response.read().decode("utf-8", errors="replace")
            raise _RequestFailed(f"HTTP {endpoint}: {response.status_code} {detail}")
        return response


class HttpStreamUser(_HttpUserBase):
    """HTTP generate_stream (server-sent events): one response per `data:` event."""

    protocol = "http_stream"

    def send(self, prompt: Prompt, sample: Sample) -> str:
        response = self.post("generate_stream", prompt, sample, stream=True)
        parts = []
        try:
            while True:
                line = response.readline(b"\n")
                if not line:
                    return "".join(parts)
                line = line.strip()
                if not line.startswith(b"data:"):
                    continue
                sample.mark_response()
                event = json.loads(line[5:])
                if "error" in event:
                    # The status came from the first response; later errors arrive inside the 200 stream.
                    raise _RequestFailed(f"HTTP generate_stream: {event['error']}")
                text = event.get("text_output", "")
                parts = [text] if self.config.dialect == "llmapi" else [*parts, text]
        except (OSError, TimeoutError) as err:
            raise _RequestFailed(f"HTTP generate_stream: {type(err).__name__}: {err}") from None
        finally:
            response.release()


class HttpUser(_HttpUserBase):
    """HTTP generate: one response with the whole completion (no time to first token).

    Not Locust's own `locust.HttpUser`: this one speaks Triton's generate extension.
    """

    protocol = "http"

    def send(self, prompt: Prompt, sample: Sample) -> str:
        response = self.post("generate", prompt, sample, stream=False)
        try:
            body = response.read()
            sample.mark_response()
            data = json.loads(body)
        except (OSError, TimeoutError, ValueError) as err:
            raise _RequestFailed(f"HTTP generate: {type(err).__name__}: {err}") from None
        finally:
            response.release()
        if "error" in data:
            raise _RequestFailed(f"HTTP generate: {data['error']}")
        return data.get("text_output", "")


USER_CLASSES: dict[str, type[LLMUser]] = {"grpc": GrpcStreamUser, "http_stream": HttpStreamUser, "http": HttpUser}
