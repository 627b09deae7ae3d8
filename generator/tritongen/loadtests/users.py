"""Locust users that drive a deployed ensemble the way its clients do, recording one Sample per request.

Configuration comes from one JSON file whose path is in the environment variable `TRITONGEN_LOADTEST_CONFIG`
(`tritongen loadtest` writes it; see `tritongen.loadtests.workload.LocustConfig`). Each Locust process
(`--processes N` forks after the locustfile is imported) makes its own prompt source, pacer and sample file on
first use, so nothing made before the fork is shared: no gRPC channel, no open file.

Every request is recorded twice: as a `Sample` (raw timestamps and the server's token counts, the source of every
reported metric) and as a Locust request event (request_type = protocol, name = model, response_time =
end-to-end ms, response_length = output tokens), so Locust's own statistics, CSVs and HTML page stay meaningful.

Load model (`tritongen.loadtests.workload.Pacer`): closed loop, one request in flight per user (`-u` is the
concurrency); or open loop, where users are concurrency slots that send on a shared arrival schedule.

A new protocol (an OpenAI user, say) subclasses `LLMUser` and implements `send`: send the prompt, call
`sample.mark_response(at, tokens=server_count)` per response, honour `prompt.cancel_after_s` by cancelling and
raising `Cancelled`, return the text; raise `RequestFailed` on errors.
"""

from __future__ import annotations

import dataclasses
import json
import os
import queue
import time
import uuid

import gevent
import grpc.experimental.gevent
from geventhttpclient import HTTPClient
from locust import User, constant, task
from locust.exception import StopUser

from tritongen.client import StreamError, sse_events
from tritongen.loadtests.samples import Sample, SampleWriter, per_process_path
from tritongen.schema_set import check_output
from tritongen.loadtests.workload import LocustConfig, Pacer, Prompt, PromptSource, load_tokenizer
from tritongen.requests import grpc_tensors, llm_inputs
from tritongen.runtimes import dialect as dialect_named
from tritongen.runtimes.base import Dialect, RevisedText, TokenCounter
from tritongen.token_ids import OUTPUTS, Codec, response_ids

# tritonclient (about 0.5 s of CPU per locust process) is imported by the gRPC users only; HTTP and OpenAI users
# never load it.

# gRPC under gevent: must run before any channel exists (here: before any user starts).
grpc.experimental.gevent.init_gevent()

STREAM_READER_SPARE = 10  # gevent hub threads beyond one per open gRPC stream (gevent's own default pool size)


class _ProcessState:
    """Per-process state. The tokenizer loads once, before Locust starts its clock (`preload`); the prompt
    source (seeded per process), the pacer and the sample writer are made per process, after any fork."""

    config: LocustConfig | None = None
    tokenizer: object = None
    codec: object = None
    """The ids path's codec (tritongen.token_ids.Codec): the tokenizer as the server's models load it."""
    pid: int | None = None
    prompts: PromptSource
    pacer: Pacer
    writer: SampleWriter

    @classmethod
    def preload(cls) -> LocustConfig:
        if cls.config is None:
            # Loading a tokenizer can take seconds; in on_start it would block every greenlet of the run.
            cls.config = LocustConfig.from_env()
            cls.tokenizer = load_tokenizer(cls.config.tokenizer_dir)
            if cls.config.path == "ids":
                cls.codec = Codec.load(cls.config.tokenizer_dir, add_special_tokens=cls.config.add_special_tokens,
                                       skip_special_tokens=cls.config.skip_special_tokens)
        return cls.config

    @classmethod
    def get(cls) -> type[_ProcessState]:
        if cls.pid != os.getpid():
            cls.preload()
            cls.prompts = PromptSource(cls.config, cls.tokenizer)
            cls.pacer = Pacer(cls.config, sleep=gevent.sleep, seed=os.getpid())
            cls.writer = SampleWriter(per_process_path(cls.config.samples_dir))
            cls.pid = os.getpid()
        return cls


def preload() -> LocustConfig:
    """Read the configuration and load the tokenizer now (the locustfile calls this at import)."""
    return _ProcessState.preload()


def adopt_level(level: float, rate_shares: int) -> LocustConfig:
    """A distributed worker takes the master's level and the number of worker processes sharing an open-loop rate
    (tritongen.loadtests.distributed.LEVEL_MESSAGE); its next user builds the pacer and prompts from them."""
    state = _ProcessState
    state.config = state.preload().model_copy(update={"level": level, "rate_shares": rate_shares})
    state.pid = None
    return state.config


class RequestFailed(Exception):
    """A request that failed at the server or on the wire; the message becomes the sample's error."""


class Cancelled(Exception):
    """The client cancelled the request on purpose (Prompt.cancel_after_s)."""


def _count(value: object) -> int | None:
    """A num_output_tokens / num_input_tokens value from a tensor or JSON field; None when absent."""
    if value is None:
        return None
    if hasattr(value, "reshape"):
        flat = value.reshape(-1)
        return int(flat[0]) if flat.size else None
    if isinstance(value, list):
        return int(value[0]) if value else None
    return int(value)  # type: ignore[arg-type]


class LLMUser(User):
    """Base of the protocol users: pacing, prompts, sample recording, Locust events."""

    abstract = True
    wait_time = constant(0)
    protocol = ""

    def on_start(self) -> None:
        state = _ProcessState.get()
        self.config, self.prompts, self.pacer, self.writer = state.config, state.prompts, state.pacer, state.writer
        # A runtime's own model's request dialect; None: the ensemble's tensors.
        self.dialect = dialect_named(self.config.dialect)

    @task
    def generate(self) -> None:
        due = self.pacer.wait()
        if due is None:
            raise StopUser()  # the schedule is over (a trace's last request, or the run's end)
        lag, row = due
        prompt = self.prompts.with_adapter(self.prompts.next() if row is None else self.prompts.for_trace(row))
        prompt = self.prompts.with_structure(prompt)
        if self.config.profile.cancel_rate > 0:
            prompt = dataclasses.replace(prompt, cancel_after_s=self.pacer.cancel_after_s())
        sample = Sample.begin(uuid.uuid4().hex, self.protocol, input_tokens=prompt.input_tokens,
                              level=self.config.level)
        sample.adapter = None if prompt.adapter is None else prompt.adapter.name
        sample.schema = None if prompt.schema is None else prompt.schema.name
        sample.scheduled_lag_s = lag
        text, error = "", None
        try:
            text = self.send(prompt, sample)
        except RequestFailed as err:
            error = str(err) or type(err).__name__
        except Cancelled:
            sample.cancelled = True
        self.record(sample, text, error)
        if prompt.schema is not None and sample.ok:
            # The whole text, streamed pieces concatenated: only the complete output has to validate.
            sample.schema_result = check_output(text, prompt.schema.schema, hit_limit=(sample.output_tokens or 0)
                                             >= prompt.max_tokens)
        self.writer.write(sample)

    def send(self, prompt: Prompt, sample: Sample) -> str:
        """Send one request, call `sample.mark_response(at, tokens=...)` per response, return the text."""
        raise NotImplementedError

    def record(self, sample: Sample, text: str, error: str | None) -> None:
        """Finish the sample and fire Locust's request event (the caller writes the sample)."""
        sample.finish(output_text=text, error=error)
        if sample.error is None and not sample.cancelled and not sample.response_times:
            sample.error = "no response received"
        if sample.cancelled:
            return  # not a request outcome for Locust's statistics
        elapsed = sample.response_times[-1] if sample.response_times else time.perf_counter() - sample.send_time
        self.environment.events.request.fire(
            request_type=self.protocol, name=self.config.model, response_time=elapsed * 1e3,
            response_length=sample.output_tokens or 0,
            exception=None if sample.error is None else RequestFailed(sample.error),
            context={"request_id": sample.request_id},
        )

    def dialect_reader(self, sample: Sample) -> DialectReader | None:
        return None if self.dialect is None else DialectReader(self.dialect, _ProcessState.tokenizer, sample)

    def dialect_params(self, prompt: Prompt) -> dict:
        """The load's sampling parameters the dialect takes (min_tokens keeps output lengths equal to the load's),
        and the adapter by name (vLLM's lora_name)."""
        take = prompt.min_tokens is not None and "min_tokens" not in self.dialect.unsupported
        params = {"min_tokens": prompt.min_tokens} if take else {}
        if prompt.adapter is not None and prompt.adapter.task_id:
            params["lora_name"] = prompt.adapter.name
        if prompt.schema is not None:
            params["guide"] = ("json_schema", prompt.schema.text)
        return params


class DialectReader:
    """Reads one request's responses from a runtime's own model in its request dialect: each text_output becomes an
    exact delta the dialect's way (a model may send the whole text so far), and the tokens are the server's
    per-response counts or, for a model that returns none, the deployment's tokenizer's count of the text received
    so far (the sample is then labelled client-counted)."""

    def __init__(self, dialect: Dialect, tokenizer, sample: Sample):
        self.reader, self.counted = dialect.text(), 0
        self.counter = TokenCounter(tokenizer) if dialect.count_source == "client" else None
        if self.counter is not None:
            sample.counted_by = "client"

    def feed(self, text: str, final: bool, server_tokens: int | None) -> int | None:
        """Tokens new in this response: the server's count, or the client's where the model returns none."""
        try:
            self.reader.feed(text, final)
        except RevisedText as err:
            raise RequestFailed(str(err)) from None
        return server_tokens if self.counter is None else self._recount()

    def _recount(self) -> int:
        total = self.counter.count(self.reader.sent)
        new, self.counted = total - self.counted, total
        return new

    @property
    def text(self) -> str:
        return self.reader.sent

    def close(self, sample: Sample, last_text: str) -> None:
        """End of a stream whose last event was not marked final: release what the reader held back and count it
        with the last response."""
        try:
            self.reader.end(last_text)
        except RevisedText as err:
            raise RequestFailed(str(err)) from None
        extra = self._recount() if self.counter is not None else 0
        if extra and sample.response_tokens:
            sample.response_tokens[-1] = (sample.response_tokens[-1] or 0) + extra
            sample.output_tokens = (sample.output_tokens or 0) + extra


_open_streams = 0


def _reserve_stream_reader() -> None:
    """Grow gevent's hub threadpool with the open gRPC streams. Under gevent, each tritonclient stream's reader
    blocks in a thread of that pool while it waits for a response; the pool's default 10 threads let only 10 idle
    streams exist: an 11th stream's responses waited until another stream closed (measured: open loop, 64 slots,
    2 requests/s -> every response of the run arrived at once, ~25 s late; closed loop hid it because busy
    streams give their thread back between responses)."""
    global _open_streams
    _open_streams += 1
    pool = gevent.get_hub().threadpool
    if pool.maxsize < _open_streams + STREAM_READER_SPARE:
        pool.maxsize = _open_streams + STREAM_READER_SPARE


def _release_stream_reader() -> None:
    global _open_streams
    _open_streams = max(0, _open_streams - 1)


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
        _reserve_stream_reader()
        self.client = grpcclient.InferenceServerClient(self.config.url)
        # Timestamp in the callback: the arrival time, not when this greenlet gets to run again.
        self.client.start_stream(callback=lambda result, error: responses.put((time.perf_counter(), result, error)))

    def _close(self) -> None:
        if self.client is not None:
            try:
                # cancel_requests=True cancels what is in flight on the server, not only on this side.
                self.client.stop_stream(cancel_requests=True)
                self.client.close()
            except Exception:  # noqa: BLE001 - closing a broken stream must not fail the user
                pass
            self.client = None
            _release_stream_reader()

    def request(self, prompt: Prompt) -> tuple[list, list | None, _TextPieces | _IdsText]:
        """The request's inputs, the outputs to ask for (None: all) and what turns its responses into text."""
        return grpc_tensors(prompt.request(stream=True).inputs()), None, _TextPieces()

    def send(self, prompt: Prompt, sample: Sample) -> str:
        if self.client is None:
            self._open()
        reader = self.dialect_reader(sample)
        if reader is not None:  # a runtime's own model: its inputs, its text and counts read its way
            inputs = self.dialect.grpc_inputs(prompt.text, prompt.max_tokens, stream=True,
                                              **self.dialect_params(prompt))
            outputs, text = None, None
        else:
            inputs, outputs, text = self.request(prompt)
        sample.send_time, sample.send_wall_ns = time.perf_counter(), time.time_ns()
        self.client.async_stream_infer(self.config.model, inputs, request_id=sample.request_id, outputs=outputs,
                                       enable_empty_final_response=True)
        deadline = sample.send_time + self.config.timeout_s
        cancel_at = None if prompt.cancel_after_s is None else sample.send_time + prompt.cancel_after_s
        while True:
            until = deadline if cancel_at is None else min(deadline, cancel_at)
            try:
                at, result, error = self.responses.get(timeout=max(0.0, until - time.perf_counter()))
            except queue.Empty:
                self._close()  # cancels the request and drops anything still queued for it
                if cancel_at is not None and time.perf_counter() >= cancel_at:
                    raise Cancelled() from None
                raise RequestFailed(f"no final response within {self.config.timeout_s:g}s") from None
            if error is not None:
                # The stream is broken after an error; the next request opens a new one.
                self._close()
                raise RequestFailed(f"gRPC: {error}")
            response = result.get_response()
            if response.id != sample.request_id:
                continue  # a late response of an earlier, abandoned request
            final = response.parameters.get("triton_final_response")
            is_final = final is not None and final.bool_param
            tokens = _count(result.as_numpy("num_output_tokens"))
            if reader is not None:
                out = result.as_numpy("text_output")
                carried = out is not None
                if carried:
                    value = out.reshape(-1)[0] if out.size else b""
                    tokens = reader.feed(value.decode("utf-8", errors="replace") if isinstance(value, bytes)
                                         else str(value), is_final, tokens)
            else:
                carried = text.add(result, is_final)
            if carried or tokens is not None or is_final:
                sample.mark_response(at, tokens=tokens)
            n_in = _count(result.as_numpy("num_input_tokens"))
            if n_in is not None:
                sample.input_tokens = n_in
            if is_final:
                return reader.text if reader is not None else text.text


class GrpcIdsUser(GrpcStreamUser):
    """The ids path (tritongen.token_ids): token ids to `tensorrt_llm` over the same gRPC stream, the text decoded
    here with the deployment's tokenizer (exactly the text path's text); counts still come from the server."""

    def request(self, prompt: Prompt) -> tuple[list, list | None, _IdsText]:
        import tritonclient.grpc as grpcclient

        codec = _ProcessState.codec
        inputs = grpc_tensors(llm_inputs(codec.inputs(prompt.request(stream=True))))
        return inputs, [grpcclient.InferRequestedOutput(n) for n in OUTPUTS], _IdsText(codec.text(prompt.max_tokens))


class _TextPieces:
    """The text path: each response's text_output is the next piece (or, `replace`, the whole text so far)."""

    def __init__(self, replace: bool = False):
        self.replace, self.parts = replace, []

    def add(self, result, final: bool) -> bool:
        out = result.as_numpy("text_output")
        if out is None:
            return False
        value = out.reshape(-1)[0] if out.size else b""
        piece = value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)
        self.parts = [piece] if self.replace else [*self.parts, piece]
        return True

    @property
    def text(self) -> str:
        return "".join(self.parts)


class _IdsText:
    """The ids path: each response's output_ids, decoded incrementally (tritongen.token_ids.SequenceText)."""

    def __init__(self, sequence):
        self.sequence, self.parts = sequence, []

    def add(self, result, final: bool) -> bool:
        out = result.as_numpy("output_ids")
        ids = response_ids(out, result.as_numpy("sequence_length"))
        if ids or final:
            self.parts.append(self.sequence.push(ids, final=final))
        return out is not None

    @property
    def text(self) -> str:
        return "".join(self.parts)


class _HttpUserBase(LLMUser):
    """One keep-alive geventhttpclient connection per user (Locust's FastHttpUser transport)."""

    abstract = True

    def on_start(self) -> None:
        super().on_start()
        self._connect()

    def _connect(self) -> None:
        host, _, port = self.config.url.rpartition(":")
        self.http = HTTPClient(host, int(port), connection_timeout=10, network_timeout=self.config.timeout_s,
                               concurrency=1)

    def on_stop(self) -> None:
        self.http.close()

    def post(self, endpoint: str, prompt: Prompt, sample: Sample, *, stream: bool):
        body = json.dumps(prompt.request(stream=stream).http_body() if self.dialect is None else
                          self.dialect.http_body(prompt.text, prompt.max_tokens, stream=stream,
                                                 **self.dialect_params(prompt)))
        sample.send_time, sample.send_wall_ns = time.perf_counter(), time.time_ns()
        try:
            response = self.http.post(f"/v2/models/{self.config.model}/{endpoint}", body,
                                      headers={"Content-Type": "application/json"})
        except (OSError, TimeoutError) as err:
            raise RequestFailed(f"HTTP {endpoint}: {type(err).__name__}: {err}") from None
        if response.status_code != 200:
            detail = response.read().decode("utf-8", errors="replace")
            raise RequestFailed(f"HTTP {endpoint}: {response.status_code} {detail}")
        return response

    def note_counts(self, sample: Sample, event: dict, reader: DialectReader | None = None,
                    final: bool = False) -> None:
        tokens = _count(event.get("num_output_tokens"))
        if reader is not None:  # a runtime's own model: its text read (and maybe counted) its way
            tokens = reader.feed(event.get("text_output", ""), final, tokens)
        sample.mark_response(tokens=tokens)
        n_in = _count(event.get("num_input_tokens"))
        if n_in is not None:
            sample.input_tokens = n_in


class HttpStreamUser(_HttpUserBase):
    """HTTP generate_stream (server-sent events): one response per `data:` event."""

    protocol = "http_stream"

    def send(self, prompt: Prompt, sample: Sample) -> str:
        response = self.post("generate_stream", prompt, sample, stream=True)
        parts = []
        timer = None
        if prompt.cancel_after_s is not None:
            timer = gevent.Timeout(max(0.0, sample.send_time + prompt.cancel_after_s - time.perf_counter()),
                                   Cancelled())
            timer.start()
        try:
            reader = self.dialect_reader(sample)
            text = ""
            for event in sse_events(iter(lambda: response.readline(b"\n"), b"")):
                text = event.get("text_output", "")
                self.note_counts(sample, event, reader)
                if reader is None:
                    parts.append(text)
            if reader is not None:
                reader.close(sample, text)  # an SSE event does not say it is the model's last response
                return reader.text
            return "".join(parts)
        except Cancelled:
            # Closing the connection is how an HTTP client cancels: Triton cancels the request it carried.
            self.http.close()
            self._connect()
            raise
        except StreamError as err:
            raise RequestFailed(str(err)) from None
        except (OSError, TimeoutError) as err:
            raise RequestFailed(f"HTTP generate_stream: {type(err).__name__}: {err}") from None
        finally:
            if timer is not None:
                timer.close()
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
            data = json.loads(body)
        except (OSError, TimeoutError, ValueError) as err:
            raise RequestFailed(f"HTTP generate: {type(err).__name__}: {err}") from None
        finally:
            response.release()
        if "error" in data:
            raise RequestFailed(f"HTTP generate: {data['error']}")
        reader = self.dialect_reader(sample)
        self.note_counts(sample, data, reader, final=True)
        return data.get("text_output", "") if reader is None else reader.text


USER_CLASSES: dict[str, type[LLMUser]] = {"grpc": GrpcStreamUser, "http_stream": HttpStreamUser, "http": HttpUser}
# The ids path has a user of its own per protocol that carries it (gRPC only: tensorrt_llm streams over gRPC).
IDS_USER_CLASSES: dict[str, type[LLMUser]] = {"grpc": GrpcIdsUser}
