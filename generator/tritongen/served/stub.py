# Shipped by tritongen. What each of tritongen's python models does in tritonserver's python stub.
"""Helpers every served python model shares: reading a config parameter, and leaving with tritonserver.

Render ships this module beside each python model (tritongen.served.SHIPPED); it imports only the standard library.
"""

import os
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request


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

    The server's stop is seen through `is_ready(name)` (asked at most every POLL_S; `server_ready_probe` gives the
    one to use): once the model was ready, CONFIRM answers in a row of not ready (False), or errors ("Server not
    ready", as TRITONSERVER_ServerModelIsReady answers a stopping server), start the drain of TRITONGEN_DRAIN_S
    seconds (set by every generated deployment and `tritongen serve` from the Plan's stop budget; 15 when unset).
    An answer of None (no answer in time) counts neither way, and one failed answer of a busy server does not start
    the drain: a drain, once started, ends every request that comes after it."""

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
                ready = self.is_ready(self.name)
            except Exception:  # a stopping server answers with an error
                ready = False
            if ready is None:
                return False
            ready = bool(ready)
            if ready or not self.was_ready:
                self.was_ready, self.misses = self.was_ready or ready, 0
                return False
            self.misses += 1
            if self.misses < self.CONFIRM:
                return False
            self.since = now
            self.log(f"{self.name}: the server is stopping; streams in flight may finish for {self.drain_s:g} s")
        return now - self.since >= self.drain_s


def stderr_log(message):
    """A log line on the stub's stderr, which tritonserver's own output carries, for threads that run while the
    server may be stopping: pb_utils.Logger sends each line to the server over the stub's IPC queue, and a line sent
    while the server finalizes the stub left the model unloading until the exit timeout."""
    sys.stderr.write(f"tritongen {time.strftime('%H:%M:%S')} {message}\n")
    sys.stderr.flush()


def _server_flags(pid):
    """tritonserver's command line flags (--name=value and --name value), from /proc; {} where it cannot be read."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return {}
    flags = {}
    for i, arg in enumerate(args):
        if arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            if not eq and i + 1 < len(args) and not args[i + 1].startswith("--"):
                value = args[i + 1]
            flags[name] = value
    return flags


def server_ready_probe(ipc_is_ready, pid=None):
    """The `is_ready(name)` a Drain should ask: the model's readiness from the HTTP endpoint of the tritonserver
    that started this stub (GET /v2/models/<name>/ready), or `ipc_is_ready` (pb_utils.is_model_ready) where that
    server serves no HTTP health endpoint.

    Why not the stub's own IPC: the python backend answers the server's finalize request before it calls the
    model's `finalize` (python_backend r24.10 src/pb_stub.cc), so a watcher thread still asking
    pb_utils.is_model_ready then talks to a parent that is tearing the stub's shared memory down; seen on 2 cores:
    the stub died by SIGSEGV freeing the answer (rbtree_best_fit::priv_deallocate under IsModelReady) and
    tritonserver aborted with boost::interprocess::lock_exception. An HTTP request touches nothing of the stub's
    shared memory. The probe answers True (200), False (any other status, or the port refusing the connection: a
    server that stopped serving) and None (no answer within a second: a busy server says nothing)."""
    pid = os.getppid() if pid is None else pid
    try:
        with open(f"/proc/{pid}/comm") as f:
            parent = f.read().strip()
    except OSError:
        parent = ""
    if parent != "tritonserver":  # only tritonserver's own command line names its HTTP endpoint
        return ipc_is_ready
    flags = _server_flags(pid)
    if flags.get("allow-http", "true").lower() in ("false", "0", "no", "off"):
        return ipc_is_ready
    if "health" in flags.get("http-restricted-api", ""):
        return ipc_is_ready
    try:
        port = int(flags.get("http-port", "8000"))
    except ValueError:
        return ipc_is_ready
    host = flags.get("http-address", "") or "127.0.0.1"
    if host in ("0.0.0.0", "::", "[::]"):
        host = "127.0.0.1"
    elif ":" in host and not host.startswith("["):
        host = f"[{host}]"
    base = f"http://{host}:{port}/v2/models/"

    def is_ready(name):
        try:
            with urllib.request.urlopen(base + urllib.parse.quote(name, safe="") + "/ready", timeout=1.0) as r:
                return r.status == 200
        except urllib.error.HTTPError:
            return False
        except urllib.error.URLError as err:
            return False if isinstance(err.reason, ConnectionRefusedError) else None
        except OSError:  # a timeout: no answer is no evidence either way
            return None

    return is_ready


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
