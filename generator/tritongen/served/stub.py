# Shipped by tritongen. What each of tritongen's python models does in tritonserver's python stub.
"""Helpers every served python model shares: reading a config parameter, and leaving with tritonserver.

Render ships this module beside each python model (tritongen.served.SHIPPED); it imports only the standard library.
"""

import os
import sys
import threading
import time


def param(config, key, default=None):
    """A string parameter of the model's config.pbtxt, or `default` where it is empty or an unfilled ${...}."""
    value = config.get("parameters", {}).get(key, {}).get("string_value", "")
    return default if value in ("", None) or value.startswith("${") else value


def exit_with_server(name):
    """Start a daemon thread `name` that exits this stub when tritonserver is gone (its stubs are re-parented): an
    orphaned stub would live on for hours. For models with no watch thread of their own."""

    def watch():
        parent = os.getppid()
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name=name, daemon=True).start()


class Drain:
    """When a stopping server's drain is over, for a python model whose requests outlive `execute` (a decoupled
    model's response sender keeps the model loaded, so Triton waits for them until its exit timeout).

    The server's stop is seen through `is_ready(name)` (pb_utils.is_model_ready of the model itself, asked at most
    every POLL_S): once the model was ready, CONFIRM answers in a row of not ready, or errors ("Server not ready", as
    TRITONSERVER_ServerModelIsReady answers a stopping server), start the drain of TRITONGEN_DRAIN_S seconds (set
    by every generated deployment and `tritongen serve` from the Plan's stop budget; 15 when unset). One failed
    answer of a busy server does not: a drain, once started, ends every request that comes after it."""

    POLL_S = 0.5
    CONFIRM = 3

    def __init__(self, name, is_ready, log):
        self.name, self.is_ready, self.log = name, is_ready, log
        try:
            self.drain_s = max(0.0, float(os.environ.get("TRITONGEN_DRAIN_S") or 15))
        except ValueError:
            self.drain_s = 15.0
        self.was_ready = False
        self.misses = 0
        self.since = None
        self.last_poll = 0.0

    def over(self):
        now = time.monotonic()
        if self.since is None:
            if now - self.last_poll < self.POLL_S:
                return False
            self.last_poll = now
            try:
                ready = bool(self.is_ready(self.name))
            except Exception:  # a stopping server answers with an error
                ready = False
            if ready or not self.was_ready:
                self.was_ready, self.misses = self.was_ready or ready, 0
                return False
            self.misses += 1
            if self.misses < self.CONFIRM:
                return False
            self.since = now
            self.log(f"{self.name}: the server is stopping; streams in flight may finish for {self.drain_s:g} s")
        return now - self.since >= self.drain_s


def leave_without_teardown():
    """End the stub at the end of `finalize`, skipping the embedded interpreter's teardown.

    The python backend's stub answers the server's finalize request before it calls the model's `finalize`
    (python_backend r24.10 src/pb_stub.cc: RunCommand sends PYTHONSTUB_FinalizeResponse, then main calls
    Stub::Finalize and returns, destroying the interpreter); the server then only waits for the process to exit.
    With torch loaded that teardown's garbage collection died by SIGSEGV on every unload (faulthandler:
    "Garbage-collecting", no Python frame), also of an idle model, after `finalize` had released everything. Nothing
    of the model is left to do once `finalize` returns, so the process ends here, with code 0."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # a closed stream has nothing to flush
            pass
    os._exit(0)
