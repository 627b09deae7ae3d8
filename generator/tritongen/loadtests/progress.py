"""A status line per load level while it runs: level, elapsed seconds, requests finished, live output tokens/s
(the last few seconds), errors. Read from the level's sample files, which every Locust process appends one flushed
line per finished request to. The first line comes as the level starts, so a run is never silent; on a terminal the
line is rewritten every second, in a log or a pipe a new line comes every LOG_INTERVAL_S seconds."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import deque
from pathlib import Path

from tritongen import console
from tritongen.loadtests.samples import Sample, sample_files

LOG_INTERVAL_S = 10.0
WINDOW_S = 5.0
"""Live tokens/s: the tokens that arrived over the last WINDOW_S seconds of finished requests."""


def wanted(no_progress: bool) -> bool:
    """Status lines per level, unless --no-progress or -q."""
    return not no_progress and not console.quiet()


class Progress:
    """Tails one level's sample files and rewrites one status line every `interval_s` (use as a context manager)."""

    def __init__(self, label: str, samples_dir: Path, *, enabled: bool, interval_s: float | None = None,
                 stream=None):
        self.label, self.samples_dir, self.enabled = label, samples_dir, enabled
        self.stream = stream or sys.stdout
        self.live = bool(getattr(self.stream, "isatty", lambda: False)())
        self.interval_s = interval_s if interval_s is not None else 1.0 if self.live else LOG_INTERVAL_S
        self.requests = self.errors = 0
        self._offsets: dict[Path, int] = {}
        self._arrivals: deque[tuple[float, int]] = deque()
        self._started = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def read(self) -> None:
        """Take in the requests finished since the last read (a torn last line waits for the next read)."""
        for path in sample_files(self.samples_dir):
            with open(path, "rb") as f:
                f.seek(self._offsets.get(path, 0))
                data = f.read()
            complete = data[:data.rfind(b"\n") + 1]
            self._offsets[path] = self._offsets.get(path, 0) + len(complete)
            for line in complete.splitlines():
                if line.strip():
                    self._take(Sample.from_dict(json.loads(line)))

    def _take(self, sample: Sample) -> None:
        self.requests += 1
        self.errors += sample.failed
        for at, count in sample.token_arrivals():
            self._arrivals.append((sample.start_wall_s + at, count))

    def tokens_per_s(self, now: float | None = None) -> float:
        now = time.time() if now is None else now
        while self._arrivals and self._arrivals[0][0] < now - WINDOW_S:
            self._arrivals.popleft()
        span = min(WINDOW_S, max(time.monotonic() - self._started, 1e-3))
        return sum(count for at, count in self._arrivals if at <= now) / span

    def line(self) -> str:
        return (f"{self.label}: {time.monotonic() - self._started:5.1f} s, {self.requests} requests, "
                f"{self.tokens_per_s():.0f} tok/s, {self.errors} errors")

    def _show(self, last: bool = False) -> None:
        if self.live:  # rewritten in place; the level's last line stays
            self.stream.write("\r\033[K" + self.line() + ("\n" if last else ""))
        else:
            self.stream.write(self.line() + "\n")
        self.stream.flush()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.read()
            self._show()

    def __enter__(self) -> Progress:
        self._started = time.monotonic()
        if self.enabled:
            self._show()  # at once: the level has begun
            self._thread = threading.Thread(target=self._run, name="loadtest-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self.read()
            self._show(last=True)
