"""Readiness: is a tritonserver ready, what state its models are in, and the one wait-until-ready loop.

Triton is asked through tritonclient's HTTP client (is_server_ready / get_model_repository_index) rather than
hand-built requests; the embedded server (`serve`), `verify --load` and the docker target use it.
`wait_until_ready` also waits for the OpenAI frontend (frontend/server.py passes its /health probe). Polls that wait
for something else stay where they are: a load test's drain (loadtests/target.py waits for /metrics to show no
active request), and the init containers of generated manifests (deploy/clients.py, deploy/tools.py), which run
in a pod, not in tritongen.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal

# tritonclient (about 0.5 s of CPU to import) is imported where a server is polled: the CLI's serve and up import
# this module on their way to tritonserver.


def _client(http_url: str, timeout: float):
    import tritonclient.http as httpclient

    host = http_url.removeprefix("http://").split("/", 1)[0]
    return httpclient.InferenceServerClient(host, connection_timeout=timeout, network_timeout=timeout)


def server_ready(http_url: str, timeout: float = 2.0) -> bool:
    """Whether the server at host:port (or http://host:port) answers /v2/health/ready with 200."""
    host, _, port = http_url.removeprefix("http://").split("/", 1)[0].rpartition(":")
    if not host or not port.isdigit() or " " in host:
        return False
    client = _client(http_url, timeout)
    try:
        return bool(client.is_server_ready())
    except Exception:  # noqa: BLE001 - refused, reset, timed out: all mean "not ready yet"
        return False
    finally:
        client.close()


def wait_until_ready(http_url: str, timeout: float, *, stopped: Callable[[], bool] = lambda: False,
                     interval: float = 0.5, probe: Callable[[str], bool] = server_ready
                     ) -> Literal["ready", "stopped", "timeout"]:
    """Poll until the server is ready, the process behind it has `stopped`, or `timeout` seconds pass."""
    deadline = time.monotonic() + timeout
    while True:
        if stopped():
            return "stopped"
        if probe(http_url):
            return "ready"
        if time.monotonic() >= deadline:
            return "timeout"
        time.sleep(interval)


def model_states(http_url: str, timeout: float = 10.0) -> dict[str, tuple[str, str]]:
    """{model name: (state, reason)} from the server's repository index."""
    client = _client(http_url, timeout)
    try:
        index = client.get_model_repository_index()
    finally:
        client.close()
    return {m["name"]: (m.get("state", ""), m.get("reason", "")) for m in index}
