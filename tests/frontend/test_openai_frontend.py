"""The OpenAI-compatible frontend against the real tritonserver, driven by the official `openai` client."""

from __future__ import annotations

import asyncio
import http.client
import json
import re
import time
import urllib.request

import pytest
import yaml

pytestmark = pytest.mark.integration

openai = pytest.importorskip("openai")
MODEL = "tiny-cpu"


def _triton_metric(triton, name: str, **labels: str) -> float:
    text = urllib.request.urlopen(triton.metrics_url, timeout=10).read().decode()
    total, found = 0.0, False
    for line in text.splitlines():
        match = re.match(rf"^{name}\{{([^}}]*)\}} (\S+)$", line)
        if match and all(f'{k}="{v}"' in match.group(1) for k, v in labels.items()):
            total += float(match.group(2))
            found = True
    assert found, f"{name}{labels} not exported by Triton"
    return total


def _frontend_metrics(frontend) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(f"http://{frontend.url}/metrics", timeout=10).read().decode()
    values = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            key = s.name + "".join(f"[{k}={v}]" for k, v in sorted(s.labels.items()) if k != "le")
            if "le" not in s.labels:
                values[key] = values.get(key, 0.0) + s.value
    return values


@pytest.fixture(scope="module")
def frontend(triton, tiny_repo):
    from tritongen.frontend.server import FrontendServer
    from tritongen.plan.frontend import FrontendPlan

    config = FrontendPlan.read(tiny_repo).model_copy(update={"port": 0})
    with FrontendServer(config, triton.grpc_url) as server:
        yield server


@pytest.fixture(scope="module")
def client(frontend):
    return openai.OpenAI(base_url=frontend.base_url, api_key="unused", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model)


def _stream_text(stream) -> tuple[str, list[str], str | None, object]:
    parts, finish, usage = [], None, None
    for chunk in stream:
        if chunk.usage is not None:
            assert chunk.choices == []  # the usage chunk carries no choice
            usage = chunk.usage
        for choice in chunk.choices:
            piece = choice.delta.content if hasattr(choice, "delta") else choice.text
            if piece:
                parts.append(piece)
            finish = choice.finish_reason or finish
    return "".join(parts), parts, finish, usage


def test_models_lists_only_the_public_name(client):
    assert [m.id for m in client.models.list().data] == [MODEL]
    assert client.models.retrieve(MODEL).id == MODEL
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("preprocessing")


def test_completion_usage_is_the_server_count(client, tokenizer, triton):
    prompt = "Once upon a time"
    generated_before = _triton_metric(triton, "tritongen_llm_output_tokens_total")
    out = client.completions.create(model=MODEL, prompt=prompt, max_tokens=6)
    # The model's own counter of the tokens it sent: usage must be that count, not a re-count of the text.
    assert out.usage.completion_tokens == _triton_metric(triton, "tritongen_llm_output_tokens_total") - \
        generated_before
    choice = out.choices[0]
    assert choice.text
    assert out.usage.prompt_tokens == len(tokenizer.encode(prompt))  # preprocessing adds BOS like this
    assert out.usage.total_tokens == out.usage.prompt_tokens + out.usage.completion_tokens
    assert (choice.finish_reason == "length") == (out.usage.completion_tokens == 6)
    assert 1 <= out.usage.completion_tokens <= 6


def test_streamed_completion_counts_equal_unstreamed(client):
    kwargs = {"model": MODEL, "prompt": "The quick brown fox", "max_tokens": 10}
    whole = client.completions.create(**kwargs)
    text, parts, finish, usage = _stream_text(
        client.completions.create(**kwargs, stream=True, stream_options={"include_usage": True}))
    assert usage is not None
    # Greedy decoding: the same tokens either way, so the server's counts must agree.
    assert usage.completion_tokens == whole.usage.completion_tokens
    assert usage.prompt_tokens == whole.usage.prompt_tokens
    assert finish == whole.choices[0].finish_reason
    assert 1 < len(parts) <= usage.completion_tokens
    # Without include_usage no usage chunk is sent.
    assert _stream_text(client.completions.create(**kwargs, stream=True))[3] is None


def _sse(frontend, path: str, body: dict) -> list[dict]:
    """The `data:` payloads of one streamed answer as raw JSON (the openai client hides which keys were sent)."""
    request = urllib.request.Request(f"http://{frontend.url}{path}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        lines = [line.decode()[len("data: "):].strip() for line in response if line.startswith(b"data: ")]
    assert lines[-1] == "[DONE]", lines
    return [json.loads(line) for line in lines[:-1]]


@pytest.mark.parametrize("path, body", [
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Tell me one."}]}),
    ("/v1/completions", {"prompt": "The quick brown fox"}),
])
def test_streamed_chunks_have_openais_shape_and_continuous_usage(frontend, path, body):
    """What AIPerf and OpenAI's own clients read: `finish_reason: null` on each content chunk, `usage: null` on every
    chunk but the last when usage is asked for, and with continuous_usage_stats the counts so far on each chunk;
    ignore_eos runs every request to its token limit."""
    body = {"model": MODEL, "max_tokens": 12, "stream": True, "ignore_eos": True, **body}
    chunks = _sse(frontend, path, {**body, "stream_options": {"include_usage": True}})
    *content, last = chunks
    assert all(c["usage"] is None and len(c["choices"]) == 1 for c in content), content
    assert all(c["choices"][0]["finish_reason"] is None for c in content[:-1]), content
    assert content[-1]["choices"][0]["finish_reason"] == "length"
    assert last["choices"] == [] and last["usage"]["completion_tokens"] == 12, last

    chunks = _sse(frontend, path, {**body, "stream_options": {"include_usage": True, "continuous_usage_stats": True}})
    *content, last = chunks
    so_far = [c["usage"]["completion_tokens"] for c in content]
    assert so_far == sorted(so_far) and 1 <= so_far[-1] == last["usage"]["completion_tokens"] == 12, so_far
    assert {c["usage"]["prompt_tokens"] for c in chunks} == {last["usage"]["prompt_tokens"]}

    plain = _sse(frontend, path, body)
    assert all("usage" not in c and c["choices"][0]["finish_reason"] in (None, "length") for c in plain), plain


def test_chat_applies_the_template_once(client, tokenizer):
    messages = [{"role": "system", "content": "You tell stories."}, {"role": "user", "content": "Tell me one."}]
    out = client.chat.completions.create(model=MODEL, messages=messages, max_completion_tokens=8)
    templated = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert out.usage.prompt_tokens == len(tokenizer.encode(templated))
    assert out.choices[0].message.role == "assistant"
    assert out.choices[0].message.content
    text, parts, finish, usage = _stream_text(client.chat.completions.create(
        model=MODEL, messages=messages, max_tokens=8, stream=True, stream_options={"include_usage": True}))
    assert usage.completion_tokens == out.usage.completion_tokens
    assert usage.prompt_tokens == out.usage.prompt_tokens
    assert finish == out.choices[0].finish_reason
    assert len(parts) > 1


def test_stop_sequence_ends_the_text_before_it(client):
    kwargs = {"model": MODEL, "prompt": "Dynamic batching groups", "max_tokens": 16}
    full = client.completions.create(**kwargs).choices[0].text
    candidates = [m.group(0) for m in re.finditer(r"[A-Za-z]{2,}", full[2:])]
    assert candidates, f"no word to stop on in {full!r}"
    stop = candidates[0]
    cut = full[: full.find(stop)]
    out = client.completions.create(**kwargs, stop=[stop])
    assert out.choices[0].text == cut
    assert out.choices[0].finish_reason == "stop"
    text, _, finish, _ = _stream_text(client.completions.create(**kwargs, stop=stop, stream=True))
    assert text == cut and finish == "stop"


@pytest.mark.parametrize("kwargs, status", [
    ({"n": 2}, 400),
    ({"temperature": 5}, 400),
    ({"presence_penalty": 0.5}, 400),  # the hf runtime rejects penalties; Triton's error becomes a 400
    ({"temperature": 0.7, "seed": 1}, 400),  # no per-request seed when sampling (hf runtime): a 400, not a 500
    ({"temperature": 0.7, "seed": 1, "stream": True}, 400),
    ({"model": "no-such-model"}, 404),
    ({"model": "ensemble"}, 404),  # Triton's model names are not public names
])
def test_errors_are_openai_shaped(client, kwargs, status):
    request = {"model": MODEL, "prompt": "Hello", "max_tokens": 4, **kwargs}
    with pytest.raises(openai.APIStatusError) as info:
        client.completions.create(**request)
    assert info.value.status_code == status
    body = info.value.body
    assert set(body) >= {"message", "type"} and body["message"]


def test_temperature_alone_samples(client):
    # OpenAI samples at temperature > 0 with no top_p; TensorRT-LLM's contract would decode greedily without
    # top_k/top_p, so the frontend sends top_p 1.0. Five samples of 16 tokens from a random tiny model at
    # temperature 1.5 are never all equal when sampling; greedy gives one text five times.
    texts = {client.completions.create(model=MODEL, prompt="Sampling test", max_tokens=16, temperature=1.5)
             .choices[0].text for _ in range(5)}
    assert len(texts) > 1
    greedy = {client.completions.create(model=MODEL, prompt="Sampling test", max_tokens=16, temperature=0)
              .choices[0].text for _ in range(3)}
    assert len(greedy) == 1


def test_client_disconnect_cancels_the_triton_request(frontend, triton):
    before = _frontend_metrics(frontend).get(
        f"tritongen_openai_cancelled_requests_total[model={MODEL}][reason=client_disconnected]", 0.0)
    conn = http.client.HTTPConnection(frontend.host, frontend.port, timeout=60)
    # min_tokens (the frontend's extension): the random demo model may emit its end token after a few tokens, and
    # then the request would be over before the gauge is read.
    body = {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 1800, "min_tokens": 1800, "stream": True}
    conn.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    assert response.status == 200
    events = 0
    while events < 3:
        line = response.fp.readline()
        assert line, "stream ended early"
        events += line.startswith(b"data:")
    if _triton_metric(triton, "tritongen_llm_active_requests") < 1:  # seen once beside a CPU hog; cause not found
        rest = response.fp.read1(65536) if hasattr(response.fp, "read1") else b""
        pytest.fail(f"no request active after 3 events; the stream's next bytes: {rest[-600:]!r}; metrics: "
                    + str([x for x in urllib.request.urlopen(triton.metrics_url, timeout=10).read().decode()
                           .splitlines() if x.startswith("tritongen_llm_") and "model=" in x]))
    conn.sock.close()
    conn.close()
    started = time.monotonic()
    while time.monotonic() - started < 30 and _triton_metric(triton, "tritongen_llm_active_requests") > 0:
        time.sleep(0.1)
    assert _triton_metric(triton, "tritongen_llm_active_requests") == 0
    metrics = _frontend_metrics(frontend)
    assert metrics[f"tritongen_openai_active_requests[model={MODEL}]"] == 0
    assert metrics[f"tritongen_openai_cancelled_requests_total[model={MODEL}][reason=client_disconnected]"] \
        == before + 1


def test_each_call_is_closed_by_triton_after_its_final_response(triton):
    """A finished request's call ends with Triton's OK status, awaited; never cancelled by the collector racing the
    server's own end of the stream (tritonserver 2.51 crashed in such races). A request the caller leaves early is
    cancelled: the counter that says so is live."""
    from tritongen.frontend.engine import Generation, TritonEngine
    from tritongen.requests import Request

    async def run():
        engine = TritonEngine(triton.grpc_url)
        await engine.start()
        try:
            for stream in (False, True, True, False):
                deltas = [d async for d in engine.generate("ensemble", Generation(Request("Once upon", 4, stream)),
                                                            f"close-{stream}")]
                assert deltas[-1].final
            await engine.closed()
            assert dict(engine.calls_ended) == {"ok": 4}
            early = engine.generate("ensemble", Generation(Request("Once upon", 1800, True, min_tokens=1800)), "early")
            await early.__anext__()
            await early.aclose()
            assert dict(engine.calls_ended) == {"ok": 4, "cancelled": 1}
        finally:
            await engine.close()

    asyncio.run(run())


def test_concurrent_streams_share_the_server(frontend, triton):
    steps_before = _triton_metric(triton, "tritongen_llm_steps_total")
    served_before = _triton_metric(triton, "tritongen_llm_step_requests_total")

    async def one(aclient, i: int):
        stream = await aclient.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": f"Request {i} asks for a story"}],
            max_completion_tokens=16, stream=True, stream_options={"include_usage": True})
        parts, usage, finish = [], None, None
        async for chunk in stream:
            usage = chunk.usage or usage
            for choice in chunk.choices:
                parts.append(choice.delta.content or "")
                finish = choice.finish_reason or finish
        return "".join(parts), usage, finish

    async def main():
        aclient = openai.AsyncOpenAI(base_url=frontend.base_url, api_key="unused", max_retries=0, timeout=120)
        try:
            return await asyncio.gather(*(one(aclient, i) for i in range(8)))
        finally:
            await aclient.close()

    results = asyncio.run(main())
    assert len(results) == 8
    for text, usage, finish in results:
        assert text and usage is not None
        assert (finish == "length") == (usage.completion_tokens == 16)
    # The 8 streams shared decode steps in this test's own window (fewer steps than tokens served); the
    # session-wide maximum gauge could come from an earlier test.
    served = _triton_metric(triton, "tritongen_llm_step_requests_total") - served_before
    assert served >= sum(usage.completion_tokens for _, usage, _ in results)
    assert _triton_metric(triton, "tritongen_llm_steps_total") - steps_before < served


def test_metrics_and_health(frontend):
    assert urllib.request.urlopen(f"http://{frontend.url}/health", timeout=10).status == 200
    metrics = _frontend_metrics(frontend)
    assert metrics[f"tritongen_openai_time_to_first_token_seconds_count[model={MODEL}]"] >= 1
    assert metrics[f"tritongen_openai_inter_token_latency_seconds_count[model={MODEL}]"] >= 1
    assert metrics[f"tritongen_openai_completion_tokens_total[model={MODEL}]"] > 0
    assert metrics["tritongen_openai_requests_total[endpoint=/v1/completions][status=200]"] >= 1


def test_api_key_is_required_when_configured(triton, tiny_repo, monkeypatch):
    from tritongen.frontend.server import FrontendServer
    from tritongen.plan.frontend import FrontendPlan

    monkeypatch.setenv("TRITONGEN_TEST_KEY", "s3cret")
    config = FrontendPlan.read(tiny_repo).model_copy(update={"port": 0, "api_key_env": "TRITONGEN_TEST_KEY"})
    with FrontendServer(config, triton.grpc_url) as server:
        assert urllib.request.urlopen(f"http://{server.url}/health", timeout=10).status == 200
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=server.base_url, api_key="wrong", max_retries=0).models.list()
        good = openai.OpenAI(base_url=server.base_url, api_key="s3cret", max_retries=0)
        assert [m.id for m in good.models.list().data] == [MODEL]
    assert "s3cret" not in (tiny_repo / "frontend.json").read_text()


def test_loadtest_through_the_openai_frontend(frontend, triton, tiny_spec_path, tmp_path):
    from tritongen.cli import main

    # Short requests: beside other work a 24-token request took 5 s, and none of them fell inside the window.
    data = yaml.safe_load(tiny_spec_path.read_text())
    data["validation"]["load"].update(output_tokens={"mean": 4, "stddev": 0}, warmup_s=1)
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    out = tmp_path / "lt"
    code = main(["loadtest", str(spec), "--protocol", "openai", "--url", frontend.url, "-u", "2",
                 "-r", "2", "-t", "10", "--metrics-url", triton.metrics_url, "--out", str(out)])
    level = json.loads((out / "loadtest.json").read_text())["levels"][0]
    summary = level["metrics"]
    assert summary["request_count"] >= 2 and summary["error_count"] == 0
    assert summary["ttft_ms"]["p50"] > 0
    # Output tokens are the usage chunks' server counts, checked against Triton's own output-token counter.
    assert summary["requests_without_token_count"] == 0
    assert level["tokens"]["client_output_tokens"] > 0 and level["tokens"]["equal"] is True
    # 1: an objective missed, which on a busy host is the host's speed, not the frontend's correctness.
    assert code in (0, 1)


def test_unstreamed_client_disconnect_stops_generation_quietly(frontend, triton):
    import logging

    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger("uvicorn.error").addHandler(handler)
    steps_before = _triton_metric(triton, "tritongen_llm_steps_total")
    conn = http.client.HTTPConnection(frontend.host, frontend.port, timeout=60)
    body = {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 1800, "min_tokens": 1800}
    try:
        conn.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
        deadline = time.monotonic() + 60
        while _triton_metric(triton, "tritongen_llm_active_requests") < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _triton_metric(triton, "tritongen_llm_active_requests") == 1
        conn.sock.close()  # the client goes away before its only response
        conn.close()
        deadline = time.monotonic() + 30
        while _triton_metric(triton, "tritongen_llm_active_requests") > 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _triton_metric(triton, "tritongen_llm_active_requests") == 0
        # Stopped, not finished: fewer steps than the 1,800 tokens asked for.
        assert _triton_metric(triton, "tritongen_llm_steps_total") - steps_before < 1800
        deadline = time.monotonic() + 10
        while _frontend_metrics(frontend)[f"tritongen_openai_active_requests[model={MODEL}]"] and \
                time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [r for r in records if r.levelno >= logging.ERROR], [r.getMessage() for r in records]
    finally:
        logging.getLogger("uvicorn.error").removeHandler(handler)
