"""Streams held open through an entry model (tensorrt_llm_bls, ensemble, or tensorrt_llm directly) while a server
stops: each records how it ended.

Used by tests/native/test_bls_served.py (CPU scale) and bench/native_stop.py (H200 scale).
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field

import numpy as np


@dataclass
class Outcome:
    responses: int = 0
    ending: str = "none"  # final | error | cancelled (by the client) | none (no final response before the deadline)
    message: str = ""


@dataclass
class Streams:
    """`n` gRPC streams of `max_tokens` each, one client connection per stream."""

    url: str
    n: int
    max_tokens: int = 100000
    model: str = "tensorrt_llm_bls"
    cancel_after: int = 0
    """Cancel each stream after this many responses (0: never)."""
    min_tokens: int = 0
    """Sent as `min_tokens` where above 0: a model that samples its end token (hf) runs to max_tokens."""
    outcomes: list[Outcome] = field(default_factory=list)

    def start(self) -> Streams:
        self.outcomes = [Outcome() for _ in range(self.n)]
        self._threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(self.n)]
        self._started = threading.Semaphore(0)
        for t in self._threads:
            t.start()
        return self

    def wait_streaming(self, timeout: float = 120.0) -> None:
        """Until every stream has had a first response."""
        deadline = time.monotonic() + timeout
        while any(o.responses == 0 and o.ending == "none" for o in self.outcomes):
            if time.monotonic() > deadline:
                raise TimeoutError(f"streams without a first response: {self.outcomes}")
            time.sleep(0.05)

    def join(self, timeout: float) -> list[Outcome]:
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        return self.outcomes

    def _run(self, i: int) -> None:
        import tritonclient.grpc as grpcclient

        from streaming_text import grpc_tensor

        out = self.outcomes[i]
        results: queue.Queue = queue.Queue()
        client = grpcclient.InferenceServerClient(self.url)
        try:
            client.start_stream(callback=lambda result, error: results.put((result, error)))
            inputs = _inputs(self.model, self.max_tokens)
            if self.min_tokens:
                inputs["min_tokens"] = np.array([[self.min_tokens]], np.int32)
            client.async_stream_infer(self.model, [grpc_tensor(k, v) for k, v in inputs.items()],
                                      enable_empty_final_response=True)
            while True:
                try:
                    result, error = results.get(timeout=300)
                except queue.Empty:
                    return
                if error is not None:
                    out.ending, out.message = "error", str(error)
                    return
                out.responses += 1
                if self.cancel_after and out.responses >= self.cancel_after:
                    out.ending = "cancelled"
                    return
                final = result.get_response().parameters.get("triton_final_response")
                if final is not None and final.bool_param:
                    out.ending = "final"
                    return
        except Exception as err:  # the connection itself refused or reset: a clean UNAVAILABLE counts
            out.ending, out.message = "error", str(err)
        finally:
            try:
                # Only a stream still running is cancelled (Triton's gRPC handler is left alone otherwise).
                client.stop_stream(cancel_requests=out.ending in ("cancelled", "none"))
                client.close()
            except Exception:
                pass


def _inputs(model: str, max_tokens: int) -> dict:
    if model == "tensorrt_llm":  # the runtime model's token contract
        return {"input_ids": np.array([[20, 21, 22]], np.int32), "input_lengths": np.array([[3]], np.int32),
                "request_output_len": np.array([[max_tokens]], np.int32), "streaming": np.array([[True]])}
    return {"text_input": np.array([[b"hello world"]], np.object_),
            "max_tokens": np.array([[max_tokens]], np.int32), "stream": np.array([[True]])}


def clean(outcome: Outcome) -> bool:
    """A final response, an error saying the server is stopping, or gRPC's own UNAVAILABLE."""
    return outcome.ending == "final" or (outcome.ending == "error" and (
        "the server is stopping" in outcome.message or "StatusCode.UNAVAILABLE" in outcome.message))


def _child(url: str, n: int, model: str, max_tokens: int, ready, results) -> None:
    streams = Streams(url, n, max_tokens=max_tokens, model=model).start()
    streams.wait_streaming(timeout=600)
    ready.put(n)
    outcomes = streams.join(timeout=600)
    results.put([(o.responses, o.ending, o.message) for o in outcomes])


@dataclass
class ProcessStreams:
    """`n` streams spread over `processes` client processes: one python process reads about 4,000 responses/s, so a
    server streaming faster than that to one process builds a backlog in its gRPC frontend (responses queued for a
    client that has not read them), which a stopping server must deliver or drop."""

    url: str
    n: int
    processes: int = 8
    max_tokens: int = 100000
    model: str = "tensorrt_llm_bls"
    models: tuple[str, ...] = ()
    """Entry models taken in turn by the client processes (process i calls models[i % len]); empty: `model`."""

    def start(self) -> ProcessStreams:
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        self._ready, self._results = ctx.Queue(), ctx.Queue()
        sizes = [self.n // self.processes + (i < self.n % self.processes) for i in range(self.processes)]
        models = self.models or (self.model,)
        self._procs = [ctx.Process(target=_child, args=(self.url, k, models[i % len(models)], self.max_tokens,
                                                        self._ready, self._results), daemon=True)
                       for i, k in enumerate(sizes) if k]
        for p in self._procs:
            p.start()
        return self

    def wait_streaming(self, timeout: float = 600.0) -> None:
        for _ in self._procs:
            self._ready.get(timeout=timeout)

    def join(self, timeout: float) -> list[Outcome]:
        outcomes: list[Outcome] = []
        deadline = time.monotonic() + timeout
        for _ in self._procs:
            try:
                rows = self._results.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                break
            outcomes += [Outcome(r, e, m) for r, e, m in rows]
        for p in self._procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
        return outcomes + [Outcome(ending="none") for _ in range(self.n - len(outcomes))]
