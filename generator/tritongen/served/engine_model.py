"""The synthetic runtime's engine model: an in-flight batching engine reduced to its timing.

One step generates one token for every running request. A step takes

    step_ms = step_base_ms + per_sequence_ms * running + per_prefill_token_ms * prefill_tokens

where `running` counts the requests in the step and `prefill_tokens` the prompt tokens of the requests admitted
into it (their prefill produces their first token). Requests are admitted first come, first served while fewer
than `max_batch` run and their KV reservation (prompt + requested output tokens, reserved whole at admission like
TensorRT-LLM's guaranteed_no_evict policy) fits the KV capacity; the rest queue. A request that alone exceeds the
capacity is admitted when nothing else runs (so it is served, slowly, rather than held forever).

This module is the one definition of the schedule: the python token source (tritongen.served.synthetic,
which render ships with this file beside it) runs `EngineCore` in its step thread, the native source
(generator/tritongen/native/engine_model.h) mirrors it line by line, `simulate` replays it on a virtual clock for
`tritongen tune`'s analytic objective, and tests/tune/test_engine_model.py checks the three agree.
No imports beyond the standard library: the file also runs inside Triton's python backend stub.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True)
class EngineParams:
    step_base_ms: float
    per_sequence_ms: float
    per_prefill_token_ms: float
    max_batch: int
    kv_tokens: int = 0
    """KV capacity in tokens; 0: unlimited."""


def step_ms(p: EngineParams, running: int, prefill_tokens: int) -> float:
    """The duration of one step (the formula the native source shares)."""
    return p.step_base_ms + p.per_sequence_ms * running + p.per_prefill_token_ms * prefill_tokens


class EngineCore:
    """Queue and running batch, without threads or clock: `enqueue`, then per step `admit` -> `step_ms` -> emit a
    token for each of `running` -> `finish` the ended ones."""

    def __init__(self, params: EngineParams):
        self.params = params
        self.waiting: deque = deque()
        self.running: list = []
        self.kv_used = 0
        self._kv: dict[int, int] = {}

    def enqueue(self, item, prompt_len: int, n_out: int) -> None:
        self.waiting.append((item, prompt_len, prompt_len + n_out))

    def admit(self) -> int:
        """Admits what fits; the prefill tokens of the admitted requests."""
        p, prefill = self.params, 0
        while self.waiting and len(self.running) < p.max_batch:
            item, prompt_len, kv = self.waiting[0]
            if p.kv_tokens and self.running and self.kv_used + kv > p.kv_tokens:
                break
            self.waiting.popleft()
            self.running.append(item)
            self._kv[id(item)] = kv
            self.kv_used += kv
            prefill += prompt_len
        return prefill

    def finish(self, ended) -> None:
        """Removes the requests in `ended` from the batch and frees their KV."""
        gone = {id(x) for x in ended}
        if not gone:
            return
        self.running = [x for x in self.running if id(x) not in gone]
        for key in gone:
            self.kv_used -= self._kv.pop(key, 0)

    def drop(self, item) -> None:
        """Removes a waiting request (cancelled before it was admitted)."""
        self.waiting = deque(w for w in self.waiting if w[0] is not item)


@dataclass
class SimRequest:
    """One request of a simulation: when it was sent, and (filled in) when each token came."""

    arrival_ms: float
    prompt_len: int
    n_out: int
    times_ms: list


def simulate(params: EngineParams, requests: list[SimRequest], *, closed_loop: bool = False,
             until_ms: float = float("inf")) -> list[SimRequest]:
    """Runs the engine on a virtual clock. Open loop: each request arrives at its arrival_ms. Closed loop: the
    requests are the users' first requests; a user sends its next one (same lengths) when its last token arrives,
    until `until_ms`. Returns every request that was sent, with its token times filled in."""
    pending = sorted(requests, key=lambda r: r.arrival_ms)
    sent: list[SimRequest] = []
    core = EngineCore(params)
    clock = 0.0
    i = 0
    while True:
        while i < len(pending) and pending[i].arrival_ms <= clock:
            core.enqueue(pending[i], pending[i].prompt_len, pending[i].n_out)
            sent.append(pending[i])
            i += 1
        prefill = core.admit()
        if not core.running:
            if i >= len(pending):
                return sent
            clock = pending[i].arrival_ms
            continue
        clock += step_ms(params, len(core.running), prefill)
        ended = []
        for r in core.running:
            r.times_ms.append(clock)
            if len(r.times_ms) >= r.n_out:
                ended.append(r)
                if closed_loop and clock < until_ms:
                    nxt = SimRequest(clock, r.prompt_len, r.n_out, [])
                    # Keep `pending` ordered by arrival: a next request arrives now, after every earlier one.
                    pending.insert(i + sum(1 for p in pending[i:] if p.arrival_ms <= clock), nxt)
        core.finish(ended)
