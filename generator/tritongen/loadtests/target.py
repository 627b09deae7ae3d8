"""The target of a load test, checked before any load: is the server up and the model ready, and what is it.

A load test against a server that is down must not run its whole duration and report a thousand failures: the
pre-flight check fails in about a second with one line that names the URL (exit 3, environment missing).
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request

from tritongen.errors import EnvironmentMissing, problem
from tritongen.loadtests.prom import scrape

# tritonclient (about 0.5 s of CPU to import) is imported where the target is checked over gRPC.

PREFLIGHT_TIMEOUT_S = 3.0


def _http_get(url: str, timeout_s: float) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def preflight(url: str, protocol: str, model: str, timeout_s: float = PREFLIGHT_TIMEOUT_S, *,
              api_key_env: str | None = None) -> dict:
    """Check that the server at `url` (host:port of `protocol`) is ready and serves `model`; returns the
    server's metadata (name, version, extensions). Raises EnvironmentMissing naming the URL otherwise."""
    if protocol == "grpc":
        return _preflight_grpc(url, model, timeout_s)
    if protocol == "openai":
        return _preflight_openai(url, model, timeout_s, api_key_env)
    return _preflight_http(url, model, timeout_s)


def _fail(url: str, what: str) -> EnvironmentMissing:
    return EnvironmentMissing(problem(url, what, "start the deployment (`tritongen render SPEC -o DIR`, then "
                                                 "`tritongen serve DIR`) or pass --url host:port of a ready server"))


def _preflight_http(url: str, model: str, timeout_s: float) -> dict:
    base = f"http://{url}"
    try:
        status, _ = _http_get(f"{base}/v2/health/ready", timeout_s)
        if status != 200:
            raise _fail(base, f"server not ready (HTTP {status} from /v2/health/ready)")
        status, _ = _http_get(f"{base}/v2/models/{model}/ready", timeout_s)
        if status != 200:
            raise _fail(base, f"model {model!r} not ready (HTTP {status})")
        status, body = _http_get(f"{base}/v2", timeout_s)
    except (urllib.error.URLError, OSError, TimeoutError) as err:
        reason = getattr(err, "reason", err)
        raise _fail(base, f"no Triton HTTP endpoint answers ({reason})") from None
    try:
        return json.loads(body) if status == 200 else {}
    except ValueError:
        raise _fail(base, "answers, but not as Triton's HTTP API (wrong port?)") from None


def _preflight_openai(url: str, model: str, timeout_s: float, api_key_env: str | None) -> dict:
    """The OpenAI frontend: /health (Triton and the served model ready), then /v1/models/<model> (the public
    name is served; with the API key when the frontend needs one). Triton's own metadata is not reachable here."""
    base = f"http://{url}"
    key = os.environ.get(api_key_env) if api_key_env else None
    try:
        status, _ = _http_get(f"{base}/health", timeout_s)
        if status != 200:
            raise _fail(base, f"OpenAI frontend not ready (HTTP {status} from /health)")
        request = urllib.request.Request(f"{base}/v1/models/{model}",
                                         headers={"Authorization": f"Bearer {key}"} if key else {})
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as r:
                status = r.status
        except urllib.error.HTTPError as err:
            status = err.code
    except (urllib.error.URLError, OSError, TimeoutError) as err:
        reason = getattr(err, "reason", err)
        raise _fail(base, f"no OpenAI frontend answers ({reason})") from None
    if status != 200:
        raise _fail(base, f"model {model!r} not served (HTTP {status} from /v1/models/{model})")
    return {"name": "tritongen OpenAI frontend", "version": None, "extensions": []}


def _preflight_grpc(url: str, model: str, timeout_s: float) -> dict:
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    client = grpcclient.InferenceServerClient(url)
    try:
        if not client.is_server_ready(client_timeout=timeout_s):
            raise _fail(url, "server not ready (gRPC ServerReady is false)")
        if not client.is_model_ready(model, client_timeout=timeout_s):
            raise _fail(url, f"model {model!r} not ready")
        meta = client.get_server_metadata(as_json=True, client_timeout=timeout_s)
    except InferenceServerException as err:
        raise _fail(url, f"no Triton gRPC endpoint answers ({err.message().splitlines()[0] if err.message() else err})"
                    ) from None
    finally:
        client.close()
    return {"name": meta.get("name"), "version": meta.get("version"), "extensions": meta.get("extensions", [])}


# Gauges that count requests a server is working on; all must be back at zero once the load has drained.
ACTIVE_GAUGES = ("tritongen_llm_active_requests", "nv_inference_pending_request_count", "nv_trt_llm_request_metrics")


def active_requests(snapshot) -> float:
    """Requests the server is still working on in one /metrics snapshot (summed over models)."""
    total = 0.0
    for (name, labels), value in snapshot.values.items():
        if name == "nv_trt_llm_request_metrics" and dict(labels).get("request_type") != "active":
            continue
        if name in ACTIVE_GAUGES:
            total += value
    return total


def wait_until_idle(metrics_url: str, timeout_s: float = 10.0, interval_s: float = 0.25) -> tuple[float, float]:
    """Poll /metrics until the server has no active request; returns (active requests at the end, seconds
    waited). Cancelled work must free the server: a count that stays above zero is reported, not hidden."""
    start = time.monotonic()
    while True:
        active = active_requests(scrape(metrics_url))
        waited = time.monotonic() - start
        if active == 0 or waited >= timeout_s:
            return active, waited
        time.sleep(interval_s)
