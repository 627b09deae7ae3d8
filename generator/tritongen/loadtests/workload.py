"""What a Locust process sends and when: the run's configuration, the prompts, and the arrival pacing.

No Locust import here, so the definitions can be tested (and read) without gevent patching the process.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from tritongen.loadtests.arrivals import TraceRow, arrival_offsets, cancel_decisions, read_trace
from tritongen.plan.load import AdapterShare, LoadProfile
from tritongen.requests import COUNTS, Request
from tritongen.schema_set import NamedSchema, read_schema_set

# tokenizers and transformers (about 1.8 s of CPU to import) are imported where a tokenizer is loaded; the runner
# imports this module for its settings.

CONFIG_ENV = "TRITONGEN_LOADTEST_CONFIG"

# Filler text the synthetic prompts are cut from, in tokens of the deployment's own tokenizer.
_FILLER = (
    "In the quiet town by the river the old clockmaker opened his shop every morning at seven. "
    "Travellers stopped to ask for directions, children pressed their faces to the window, and the "
    "baker from across the street brought warm bread while the clocks ticked in a hundred voices. "
    "A model serves requests, streams tokens, batches work in flight and keeps its cache warm. "
)


class LocustConfig(BaseModel):
    """What a Locust process runs: the Plan's load profile and the facts of one level. `tritongen loadtest` writes
    it as JSON (`<stem>_config.json` next to the report), the locustfile reads it through `CONFIG_ENV`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    profile: LoadProfile
    """Plan.load with the command line's flags applied (a trace's run stretched to its length), otherwise as planned."""
    url: str
    """host:port of the endpoint for `profile.protocol` (gRPC port for grpc, HTTP port otherwise)."""
    level: float
    """The level's load (users, or requests/s in open loop), stored in every sample (a sweep groups by it)."""
    samples_dir: str
    """Folder for the per-process sample files."""
    tokenizer_dir: str
    """The deployment's tokenizer (Plan.tokenizer.dir): builds the synthetic prompts (counts come from the server)."""
    add_special_tokens: bool = True
    """Tokenize as the preprocessing model does: counts input tokens when the server reports none, and the ids path
    encodes prompts with it."""
    skip_special_tokens: bool = True
    """The ids path decodes as tensorrt_llm_bls does (Plan.tokenizer.skip_special_tokens)."""
    model: str = "ensemble"
    """Triton model name; for openai, the public model name."""
    api_key_env: str | None = None
    """openai: the environment variable holding the API key, when the frontend requires one."""
    dialect: str = "ensemble"
    """`ensemble` (the C++ contract: text_input/max_tokens/stream, streamed text in pieces, the server's counts) or
    the key of a runtime's request dialect (tritongen.runtimes.dialect: its own model's tensors, how its text
    arrives, where its token counts come from)."""
    path: Literal["text", "ids"] = "text"
    """`text`: the model (ensemble, tensorrt_llm_bls) tokenizes and detokenizes; `ids`: the users send token ids to
    `tensorrt_llm` and detokenize themselves (tritongen.token_ids), gRPC only."""
    timeout_s: float = Field(120.0, gt=0)
    """Per-request limit; a request past it is a failure."""
    seed: int = 0
    rate_shares: int = Field(1, ge=1)
    """Locust processes that share an open-loop rate, each sending rate / rate_shares: the profile's processes, or
    the workers of a distributed run."""

    @property
    def request_rate(self) -> float | None:
        """Open loop: this level's requests/s over all processes; None in closed loop and trace replay."""
        return self.level if self.profile.mode == "open" else None

    @classmethod
    def from_env(cls) -> LocustConfig:
        path = os.environ.get(CONFIG_ENV)
        if not path:
            raise RuntimeError(f"{CONFIG_ENV} is not set; run the locustfile through `tritongen loadtest`, "
                               "or point it at the JSON file `tritongen loadtest` wrote next to its report")
        return cls.model_validate_json(Path(path).read_text())

    def to_json(self) -> str:
        return self.model_dump_json(indent=2) + "\n"


@dataclass(frozen=True)
class Prompt:
    text: str
    input_tokens: int
    """The client's count; the sample keeps the server's num_input_tokens when it reports one."""
    max_tokens: int
    min_tokens: int | None
    cancel_after_s: float | None = None
    """Cancel the request this long after sending it (--cancel-rate); None: let it finish."""
    adapter: AdapterShare | None = None
    """The LoRA adapter it goes to (validation.load.adapters); None: the base model, unnamed."""
    schema: NamedSchema | None = None
    """The JSON schema its output must follow (validation.load.structured); None: a plain request."""

    def request(self, *, stream: bool) -> Request:
        """The request the ensemble / BLS users and the ids user send for this prompt, with the server's token counts
        asked for: they, not a re-tokenisation of the text, are the counts."""
        guide = None if self.schema is None else ("json_schema", self.schema.text)
        task_id = None if self.adapter is None or not self.adapter.task_id else self.adapter.task_id
        return Request.of(self.text, self.max_tokens, stream=stream, min_tokens=self.min_tokens, guide=guide,
                          lora_task_id=task_id, **COUNTS)


@dataclass
class PromptSource:
    """Synthetic prompts cut from filler text with the deployment's tokenizer, or lines of a JSONL file."""

    config: LocustConfig
    tokenizer: object
    rng: random.Random = field(default_factory=random.Random)
    _filler_ids: list[int] = field(default_factory=list)
    _file_prompts: itertools.cycle | None = None
    _schemas: tuple[NamedSchema, ...] = ()

    def __post_init__(self) -> None:
        # Seeded per process, so processes do not send identical prompt sequences.
        self.rng.seed(f"{self.config.seed}-{os.getpid()}")
        self._filler_ids = self.tokenizer.encode(_FILLER, add_special_tokens=False)
        if self.config.profile.structured.share > 0:
            self._schemas = read_schema_set(self.config.profile.structured.schemas)
        prompts_file = self.config.profile.prompts_file
        if prompts_file:
            rows = [json.loads(line) for line in Path(prompts_file).read_text().splitlines() if line.strip()]
            if not rows:
                raise ValueError(f"{prompts_file}: no prompts")
            self._file_prompts = itertools.cycle([self._file_prompt(row, f"{prompts_file}: line {n}")
                                                  for n, row in enumerate(rows, start=1)])

    def count(self, text: str, *, special: bool = False) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=special))

    def _file_prompt(self, row: dict, where: str) -> Prompt:
        text = row["text_input"]
        max_tokens = int(row.get("max_tokens", self.config.profile.output_tokens.mean))
        min_tokens = row.get("min_tokens")
        # Refused before sending: Triton's vLLM backend would fail such a request without saying why.
        if min_tokens is not None and int(min_tokens) > max_tokens:
            raise ValueError(f"{where}: min_tokens ({min_tokens}) is more than max_tokens ({max_tokens}); lower "
                             "min_tokens or raise max_tokens")
        return Prompt(text, self.count(text, special=self.config.add_special_tokens), max_tokens, min_tokens)

    def sized(self, n_in: int, n_out: int) -> Prompt:
        """A synthetic prompt of about `n_in` tokens asking for exactly `n_out` (min_tokens = max_tokens)."""
        ids = self._filler_ids
        reps = -(-(n_in + len(ids)) // len(ids))
        start = self.rng.randrange(len(ids))
        text = self.tokenizer.decode((ids * (reps + 1))[start:start + n_in], skip_special_tokens=True)
        # Decoding then re-encoding can merge or split a token at the edges: record what the server sees.
        return Prompt(text, self.count(text, special=self.config.add_special_tokens), n_out, n_out)

    def next(self) -> Prompt:
        if self._file_prompts is not None:
            return next(self._file_prompts)
        profile = self.config.profile
        return self.sized(profile.input_tokens.draw(self.rng), profile.output_tokens.draw(self.rng))

    def with_adapter(self, prompt: Prompt) -> Prompt:
        """`prompt` sent to an adapter drawn by the load's weights (validation.load.adapters); as it is without."""
        shares = list(self.config.profile.adapters.values())
        if not shares:
            return prompt
        chosen = self.rng.choices(shares, weights=[a.weight for a in shares])[0]
        return dataclasses.replace(prompt, adapter=chosen)

    def with_structure(self, prompt: Prompt) -> Prompt:
        """`prompt` carrying a schema drawn at random, with the load's structured share (validation.load.structured);
        as it is otherwise. No min_tokens: the request ends where the grammar does."""
        structured = self.config.profile.structured
        if structured.share <= 0 or self.rng.random() >= structured.share:
            return prompt
        return dataclasses.replace(prompt, schema=self.rng.choice(self._schemas), max_tokens=structured.max_tokens,
                                   min_tokens=None)

    def for_trace(self, row: TraceRow) -> Prompt:
        if row.text_input is not None:
            return Prompt(row.text_input, self.count(row.text_input, special=self.config.add_special_tokens),
                          row.output_tokens, row.output_tokens)
        return self.sized(row.input_tokens or 1, row.output_tokens)


class _FastTokenizer:
    """The two calls the load generator makes, on the `tokenizers` library alone: importing transformers costs a
    Locust process ~5 CPU-seconds (~19 s wall on a loaded 2-core machine) before its first request."""

    def __init__(self, path: Path):
        from tokenizers import Tokenizer

        self._tok = Tokenizer.from_file(str(path))

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self._tok.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return self._tok.decode(ids, skip_special_tokens=skip_special_tokens)


def load_tokenizer(directory: str):
    """The deployment's tokenizer for building prompts: its tokenizer.json when there is one, else transformers."""
    path = Path(directory) / "tokenizer.json"
    if path.is_file():
        return _FastTokenizer(path)
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(directory)


class Pacer:
    """When each request of a process is sent.

    Closed loop: at once (each Locust user keeps one request in flight, so users = concurrency).
    Open loop: every user of the process claims the next arrival of one shared schedule when it is free, sleeps
    until that arrival's time and sends; users are concurrency slots, so the user count caps the requests in
    flight, and an arrival that finds every slot busy is sent late (its lag is recorded). Claims are in schedule
    order because gevent runs one greenlet at a time.
    """

    def __init__(self, config: LocustConfig, *, sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.perf_counter, seed: str | int = 0):
        self.config, self.sleep, self.clock = config, sleep, clock
        self.trace: list[TraceRow] | None = None
        self.offsets: Iterator[float] | None = None
        profile = config.profile
        self.duration_s = profile.duration_s
        if profile.trace_file:
            self.trace = read_trace(profile.trace_file)
            self.offsets = iter([row.offset_s for row in self.trace])
        elif config.request_rate is not None:
            self.offsets = arrival_offsets(profile.arrival, config.request_rate / config.rate_shares,
                                           burstiness=profile.burstiness, seed=f"{config.seed}-{seed}")
        self.cancels = cancel_decisions(profile.cancel_rate, seed=f"{config.seed}-{seed}")
        self.origin: float | None = None
        self.claimed = 0

    def wait(self) -> tuple[float | None, TraceRow | None] | None:
        """Block until the next request is due. Returns (lag in seconds or None in closed loop, the trace row or
        None), or None when the schedule is over (a trace has no requests left, or the next arrival falls after
        `duration_s`)."""
        if self.offsets is None:
            return None, None
        try:
            offset = next(self.offsets)
        except StopIteration:
            return None
        row = self.trace[self.claimed] if self.trace is not None else None
        self.claimed += 1
        if self.origin is None:
            self.origin = self.clock()
        if offset >= self.duration_s:
            return None  # past the end of the run: the schedule is over
        due = self.origin + offset
        delay = due - self.clock()
        if delay > 0:
            self.sleep(delay)
        return max(0.0, self.clock() - due), row

    def cancel_after_s(self) -> float | None:
        return self.config.profile.cancel_after_ms / 1e3 if next(self.cancels) else None
