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
