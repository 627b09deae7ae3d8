"""Clients for a deployed ensemble: gRPC ModelStreamInfer and HTTP generate / generate_stream.

The same request shape serves every runtime, because the ensemble's inputs are the TensorRT-LLM contract's; every
request is a tritongen.requests.Request, as the load test's and the OpenAI frontend's are.
"""

from __future__ import annotations

import contextlib
import json
import queue
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator
from typing import Any

from tritongen.errors import CheckFailed, EnvironmentMissing, problem
from tritongen.requests import Request, grpc_tensors, llm_inputs
from tritongen.token_ids import LLM_MODEL, OUTPUTS, Codec, response_ids

# tritonclient (about 0.5 s of CPU to import: grpc, protobuf, numpy) is imported in the functions that call
# Triton; the OpenAI frontend, the load test's users and `tritongen generate --protocol http` use this module's text
# helpers without it.


def request_body(prompt: str, max_tokens: int, *, stream: bool, **inputs: Any) -> dict[str, Any]:
    """The JSON body of an HTTP generate request (tritongen.requests.Request.of: `stop_words`, `guide` as (guide
    type, guide), any other keyword the ensemble input of its name)."""
    return Request.of(prompt, max_tokens, stream=stream, **inputs).http_body()


def grpc_inputs(prompt: str, max_tokens: int, *, stream: bool, **inputs: Any) -> list:
    """tritonclient InferInputs of one ensemble / tensorrt_llm_bls request (keywords as `request_body`'s)."""
    return grpc_tensors(Request.of(prompt, max_tokens, stream=stream, **inputs).inputs())


def require_server(url: str, protocol: str, timeout: float = 5.0) -> None:
    """EnvironmentMissing (exit 3, one line naming the URL) unless a tritonserver answers at `url`."""
    try:
        if protocol == "grpc":
            import tritonclient.grpc as grpcclient

            client = grpcclient.InferenceServerClient(url)
            try:
                live = client.is_server_live(client_timeout=timeout)
            finally:
                client.close()
        else:
            import tritonclient.http as httpclient

            client = httpclient.InferenceServerClient(url, connection_timeout=timeout, network_timeout=timeout)
            try:
                live = client.is_server_live()
            finally:
                client.close()
    except Exception as err:  # noqa: BLE001 - every way of not answering (refused, DNS, timeout, bad URL)
        reason = str(err).splitlines()[0][:160] if str(err) else type(err).__name__
        raise EnvironmentMissing(problem("--url", f"no tritonserver answers at {protocol} {url} ({reason})",
                                         "start one (`tritongen serve REPO`) or pass --url host:port")) from None
    if not live:
        raise EnvironmentMissing(problem("--url", f"the tritonserver at {protocol} {url} is not live",
                                         "wait for it to start, or check its log"))


class StreamError(CheckFailed):
    """An error event inside a generate_stream response (the HTTP status came from the first response)."""


def sse_events(lines: Iterable[bytes]) -> Iterator[dict]:
    """The JSON events of a generate_stream (server-sent events) body, given its lines; raises StreamError on an
    error event. The one SSE reader: `stream_http` and the Locust users both read through it."""
    for raw in lines:
        line = raw.strip()
        if not line.startswith(b"data:"):
            continue
        event = json.loads(line[5:])
        if "error" in event:
            raise StreamError(f"HTTP generate_stream: {event['error']}")
        yield event


def _text(result) -> str:
    out = result.as_numpy("text_output")
    if out is None:
        return ""
    value = out.reshape(-1)[0] if out.size else b""
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)


def _grpc_results(url: str, model: str, inputs: list, timeout: float,
                  outputs: Iterable[str] | None = None) -> Iterator[tuple[object, bool]]:
    """(InferResult, final) for each response of one ModelStreamInfer request until the final one; `outputs`:
    the output tensors to ask for (None: all)."""
    import tritonclient.grpc as grpcclient

    responses: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(url)
    client.start_stream(callback=lambda result, error: responses.put((result, error)))
    try:
        requested = None if outputs is None else [grpcclient.InferRequestedOutput(n) for n in outputs]
        client.async_stream_infer(model, inputs, outputs=requested, enable_empty_final_response=True)
        while True:
            try:
                result, error = responses.get(timeout=timeout)
            except queue.Empty:
                raise CheckFailed(f"gRPC stream: no response within {timeout:.0f}s") from None
            if error is not None:
                raise CheckFailed(f"gRPC stream: {error}")
            final = result.get_response().parameters.get("triton_final_response")
            is_final = final is not None and final.bool_param
            yield result, is_final
            if is_final:
                return
    finally:
        client.stop_stream(cancel_requests=True)
        client.close()


def stream_grpc(url: str, prompt: str, max_tokens: int, *, model: str = "ensemble", stream: bool = True,
                timeout: float = 120.0, **params: Any) -> Iterator[str]:
    """Yield the text of each response of one ModelStreamInfer request until the final response."""
    inputs = grpc_inputs(prompt, max_tokens, stream=stream, **params)
    # closing: a caller that stops reading cancels the request now, not when the generator is collected.
    with contextlib.closing(_grpc_results(url, model, inputs, timeout)) as results:
        for result, _ in results:
            if result.as_numpy("text_output") is not None:
                yield _text(result)


def ids_codec(url: str, tokenizer_dir: str | None = None):
    """The ids path's codec for the deployment at gRPC `url`: the tokenizer folder and the special-token settings
    its preprocessing and tensorrt_llm_bls models were rendered with (read from their configs on the server), so
    the client encodes and decodes as the text path does. `tokenizer_dir` overrides the folder (a client on
    another host sees the tokenizer elsewhere)."""
    import tritonclient.grpc as grpcclient

    def params(model: str) -> dict[str, str]:
        config = client.get_model_config(model, as_json=True)["config"]
        return {k: v.get("string_value", "") for k, v in config.get("parameters", {}).items()}

    client = grpcclient.InferenceServerClient(url)
    try:
        pre, bls = params("preprocessing"), params("tensorrt_llm_bls")
    except Exception as err:  # noqa: BLE001 - a server without the text models cannot tell us the tokenizer
        raise EnvironmentMissing(problem("--tokenizer", f"the server at {url} does not say which tokenizer it uses "
                                         f"({str(err).splitlines()[0][:160]})", "pass --tokenizer DIR")) from None
    finally:
        client.close()
    directory = tokenizer_dir or pre.get("tokenizer_dir")
    if not directory:
        raise EnvironmentMissing(problem("--tokenizer", f"the server at {url} names no tokenizer_dir",
                                         "pass --tokenizer DIR"))
    flag = lambda value: value.lower() in ("true", "1", "yes", "t")  # noqa: E731 - the models' own parsing
    return Codec.load(directory, add_special_tokens=flag(pre.get("add_special_tokens", "true")),
                      skip_special_tokens=flag(bls.get("skip_special_tokens", "true")))


def stream_ids(url: str, codec, prompt: str, max_tokens: int, *, stream: bool = True,
               stop_words: list[str] | None = None, timeout: float = 120.0, **params: Any) -> Iterator[str]:
    """The ids path (tritongen.token_ids): `tensorrt_llm` called with the prompt's token ids; yields the text of
    each response, decoded here incrementally with `codec` (a token_ids.Codec), the same text the ensemble sends.
    A stop string ends the text (after it) and the request."""
    request = Request.of(prompt, max_tokens, stream=stream, stop_words=stop_words, **params)
    inputs = grpc_tensors(llm_inputs(codec.inputs(request)))
    text = codec.text(max_tokens, stop_words or ())
    with contextlib.closing(_grpc_results(url, LLM_MODEL, inputs, timeout, OUTPUTS)) as results:
        for result, final in results:
            ids = response_ids(result.as_numpy("output_ids"), result.as_numpy("sequence_length"))
            if ids or final:
                yield text.push(ids, final=final)
            if text.stopped:
                return  # leaving cancels the request (stop_stream(cancel_requests=True)): the text has ended


def generate_http(url: str, prompt: str, max_tokens: int, *, model: str = "ensemble", timeout: float = 120.0,
                  **params: Any) -> str:
    """One HTTP generate request (not streamed); returns text_output."""
    body = json.dumps(request_body(prompt, max_tokens, stream=False, **params)).encode()
    req = urllib.request.Request(f"http://{url}/v2/models/{model}/generate", data=body,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())["text_output"]
    except urllib.error.HTTPError as err:
        raise CheckFailed(f"HTTP generate: {err.code} {err.read().decode(errors='replace')}") from None


def stream_http(url: str, prompt: str, max_tokens: int, *, model: str = "ensemble", timeout: float = 120.0,
                **params: Any) -> Iterator[str]:
    """HTTP generate_stream (server-sent events); yields text_output of each event."""
    body = json.dumps(request_body(prompt, max_tokens, stream=True, **params)).encode()
    req = urllib.request.Request(f"http://{url}/v2/models/{model}/generate_stream", data=body,
                                 headers={"Content-Type": "application/json", "Accept": "text/event-stream"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            for event in sse_events(r):
                yield event.get("text_output", "")
    except urllib.error.HTTPError as err:
        raise CheckFailed(f"HTTP generate_stream: {err.code} {err.read().decode(errors='replace')}") from None
