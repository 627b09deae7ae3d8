"""The ids path (tritongen.token_ids): clients send token ids to tensorrt_llm and detokenize the streamed ids
themselves; the text is byte for byte the text path's (ensemble -> tensorrt_llm_bls).

One real tritonserver per tokenizer kind (byte-level BPE and SentencePiece) serves the tiny Llama that recites
multi-script text (CJK, emoji, accents; tests/streaming_text.py), so characters come out split over tokens.
"""

from __future__ import annotations

import contextlib
import itertools
import re
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from streaming_text import PROMPTS, TEXT, render_repo, start_server
from tritongen import client
from tritongen.demo.model import TOKENIZERS

pytestmark = pytest.mark.integration
N = 20  # tokens per request; min_tokens = N makes every request exactly this long


@pytest.fixture(scope="module", params=TOKENIZERS)
def served(request, tmp_path_factory):
    from tritongen.demo.model import make_demo_model

    tmp = tmp_path_factory.mktemp(f"ids-{request.param}")
    model = make_demo_model(tmp / "model", tokenizer=request.param, recite=TEXT)
    repo = render_repo(model, tmp / "repo")
    server = start_server(repo, tmp / "tritonserver.log")
    server.repo, server.spec_path = repo, repo.parent / f"{repo.name}.yaml"  # render_repo wrote both
    server.kind = request.param
    yield server
    server.stop()


@pytest.fixture(scope="module")
def codec(served):
    return client.ids_codec(served.grpc_url)


@pytest.fixture(scope="module")
def wholes(served):
    """The text path's unstreamed text of every prompt (HTTP generate of the ensemble)."""
    return {p: client.generate_http(served.http_url, p, N, min_tokens=N) for p in PROMPTS}


def _ids_text(served, codec, prompt, stream=True, max_tokens=N, **params):
    chunks = list(client.stream_ids(served.grpc_url, codec, prompt, max_tokens, stream=stream, **params))
    return "".join(chunks), chunks


def test_codec_reads_the_deployments_tokenizer_settings(served, codec):
    assert codec.add_special_tokens is True and codec.skip_special_tokens is True
    assert bool(codec.held) == (served.kind == "sentencepiece")  # byte-fallback tokens exist only there


def test_ids_path_text_equals_the_text_path_byte_for_byte(served, codec, wholes):
    for prompt, whole in wholes.items():
        streamed, chunks = _ids_text(served, codec, prompt, min_tokens=N)
        unstreamed, _ = _ids_text(served, codec, prompt, stream=False, min_tokens=N)
        assert streamed.encode() == unstreamed.encode() == whole.encode(), prompt
        assert len(chunks) >= N // 2, prompt  # streamed per token (held-back bytes join the next chunk)
        assert sum(c.count("\ufffd") for c in chunks) == whole.count("\ufffd"), prompt


def test_many_concurrent_streams_each_get_their_own_text(served, codec, wholes):
    prompts = list(itertools.islice(itertools.cycle(PROMPTS), 24))
    with ThreadPoolExecutor(12) as pool:
        texts = list(pool.map(lambda p: _ids_text(served, codec, p, min_tokens=N)[0], prompts))
    assert [t.encode() for t in texts] == [wholes[p].encode() for p in prompts]


def test_ended_early_streams_equal_the_text_path(served, codec, wholes):
    # max_tokens: a stream that ends mid-character releases the bytes held back, as the BLS does.
    for n in (1, 2, 3, 5):
        for prompt in PROMPTS:
            text_path = "".join(client.stream_grpc(served.grpc_url, prompt, n, min_tokens=n))
            assert _ids_text(served, codec, prompt, max_tokens=n, min_tokens=n)[0] == text_path, (n, prompt)
    # A text stop sequence ends the text right after it (and the request), on both paths.
    prompt = PROMPTS[1]
    whole = wholes[prompt]
    start = next(i for i, ch in enumerate(whole) if i > 2 and ord(ch) > 127 and "\ufffd" not in whole[i:i + 3])
    stop = whole[start:start + 3]
    text_path = "".join(client.stream_grpc(served.grpc_url, prompt, N, min_tokens=N, stop_words=[stop]))
    assert text_path == whole[: whole.index(stop) + len(stop)]
    for stream in (True, False):
        ids_text = _ids_text(served, codec, prompt, stream=stream, min_tokens=N, stop_words=[stop])[0]
        assert ids_text == text_path, stream
    assert _active_requests(served) == 0


def test_a_cancelled_ids_stream_ends_its_request(served, codec, wholes):
    chunks = client.stream_ids(served.grpc_url, codec, PROMPTS[0], 1500, min_tokens=1500)
    received = next(chunks) + next(chunks)
    assert _active_requests(served, timeout=0) == 1
    chunks.close()  # the client stops reading: the stream is cancelled on the server
    assert _active_requests(served, timeout=30) == 0
    assert wholes[PROMPTS[0]].startswith(received)


def test_generate_cli_ids_path_prints_the_text_paths_text(served, wholes, capsys):
    from tritongen.cli import main

    for path in ("text", "ids"):
        assert main(["generate", PROMPTS[2], "--url", served.grpc_url, "--stream", "--max-tokens", str(N),
                     "--min-tokens", str(N), "--path", path]) == 0
        assert capsys.readouterr().out == wholes[PROMPTS[2]] + "\n", path


def _active_requests(server, timeout=20.0):
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.closing(urllib.request.urlopen(server.metrics_url, timeout=10)) as r:
            text = r.read().decode()
        value = float(re.search(r"^tritongen_llm_active_requests{[^}]*} (\S+)$", text, re.MULTILINE).group(1))
        if value == 0 or time.monotonic() > deadline:
            return value
        time.sleep(0.2)


def test_load_test_on_the_ids_path_counts_equal_the_servers(served, tmp_path):
    import json
    import subprocess
    import sys

    import yaml

    from streaming_text import ROOT

    data = yaml.safe_load(served.spec_path.read_text())
    data["validation"]["load"]["output_tokens"] = {"mean": 8, "stddev": 0}  # short requests: several per user
    spec = tmp_path / "short.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    out = tmp_path / "lt"
    proc = subprocess.run([sys.executable, "-m", "tritongen.cli", "loadtest", str(spec), "--url",
                           served.grpc_url, "--metrics-url", served.metrics_url, "--protocol", "grpc", "--path", "ids",
                           "-u", "4", "-r", "4", "-t", "4", "--out", str(out)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, check=False)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    report = json.loads((out / "loadtest.json").read_text())
    level = report["levels"][0]
    assert report["metadata"]["workload"]["path"] == "ids"
    assert report["metadata"]["workload"]["model"] == "tensorrt_llm"
    # Every request counts (not only those inside the measured window: a busy CI machine makes them slow).
    samples = [json.loads(line) for f in (out / "samples").rglob("*.jsonl") for line in f.read_text().splitlines()]
    assert samples and all(s["error"] is None and s["output_text"] and s["output_tokens"] == 8 for s in samples)
    assert level["tokens"]["equal"] is True  # client totals (the server's per-response counts) == server counter


@pytest.fixture(scope="module", params=[("text", 1), ("ids", 2)], ids=lambda p: f"{p[0]}-{p[1]}w")
def frontend(request, served, tmp_path_factory):
    """The OpenAI frontend on `path` with `workers` processes (uvicorn workers sharing the port)."""
    from tritongen.frontend.server import FrontendServer, FrontendWorkers
    from tritongen.plan.frontend import FrontendPlan

    path, workers = request.param
    repo = served.repo
    if workers > 1:
        log = tmp_path_factory.mktemp("frontend") / "frontend.log"
        server = FrontendWorkers(repo, served.grpc_url, workers=workers, port=0, path=path, log_path=log)
    else:
        server = FrontendServer(FrontendPlan.read(repo), served.grpc_url, port=0, path=path)
    server.model = FrontendPlan.read(repo).models[0].name
    with server:
        yield server


def test_frontend_streamed_text_equals_unstreamed_text(served, frontend, wholes):
    import asyncio

    import openai

    async def one(aclient, prompt, stream):
        common = dict(model=frontend.model, prompt=prompt, max_tokens=N, extra_body={"min_tokens": N})
        if not stream:
            answer = await aclient.completions.create(**common)
            return answer.choices[0].text, answer.usage.completion_tokens
        chunks = await aclient.completions.create(**common, stream=True, stream_options={"include_usage": True})
        parts, usage = [], None
        async for chunk in chunks:
            usage = chunk.usage or usage
            parts += [c.text for c in chunk.choices]
        return "".join(parts), usage.completion_tokens

    async def main():
        aclient = openai.AsyncOpenAI(base_url=frontend.base_url, api_key="unused", max_retries=0, timeout=300)
        prompts = list(itertools.islice(itertools.cycle(PROMPTS), 16))  # concurrent: spread over the workers
        try:
            return await asyncio.gather(*(one(aclient, p, s) for p in prompts for s in (True, False))), prompts
        finally:
            await aclient.close()

    before = _completion_tokens(frontend)
    results, prompts = asyncio.run(main())
    expected = [wholes[p] for p in prompts for _ in (True, False)]
    assert [text.encode() for text, _ in results] == [e.encode() for e in expected]
    assert {tokens for _, tokens in results} == {N}  # usage from the server's counts
    # /metrics counts every worker's requests, whichever worker answers the scrape.
    assert _completion_tokens(frontend) - before == N * len(results)


def _completion_tokens(frontend) -> float:
    with contextlib.closing(urllib.request.urlopen(f"http://{frontend.url}/metrics", timeout=10)) as r:
        text = r.read().decode()
    return sum(float(v) for v in re.findall(r"^tritongen_openai_completion_tokens_total{[^}]*} (\S+)$", text,
                                            re.MULTILINE))


def test_frontend_ended_early_streams_equal_the_text_path(served, frontend, wholes):
    import openai

    aclient = openai.OpenAI(base_url=frontend.base_url, api_key="unused", max_retries=0, timeout=300)
    prompt = PROMPTS[1]
    whole = wholes[prompt]
    start = next(i for i, ch in enumerate(whole) if i > 2 and ord(ch) > 127 and "\ufffd" not in whole[i:i + 3])
    stop = whole[start:start + 3]
    cases = [dict(max_tokens=n, extra_body={"min_tokens": n}) for n in (1, 3)]  # may end mid-character
    cases.append(dict(max_tokens=N, stop=[stop], extra_body={"min_tokens": N}))  # OpenAI: text ends before it
    for case in cases:
        n = case["max_tokens"]
        expected = whole[: whole.index(stop)] if "stop" in case else \
            "".join(client.stream_grpc(served.grpc_url, prompt, n, min_tokens=n))
        unstreamed = aclient.completions.create(model=frontend.model, prompt=prompt, **case).choices[0].text
        streamed = "".join(c.text for chunk in aclient.completions.create(model=frontend.model, prompt=prompt,
                                                                           stream=True, **case)
                           for c in chunk.choices)
        assert streamed == unstreamed == expected, case


def test_frontend_client_disconnect_cancels_the_request(served, frontend):
    import http.client
    import json

    # Requests of earlier tests (ended early on the client, their generation being stopped) settle first.
    assert _active_requests(served, timeout=30) == 0
    conn = http.client.HTTPConnection(frontend.host, frontend.port, timeout=60)
    body = {"model": frontend.model, "prompt": PROMPTS[0], "max_tokens": 1500, "min_tokens": 1500, "stream": True}
    conn.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    assert response.status == 200
    events = 0
    while events < 3:
        line = response.fp.readline()
        assert line, "stream ended early"
        events += line.startswith(b"data:")
    assert _active_requests(served, timeout=0) == 1
    conn.sock.close()
    conn.close()
    assert _active_requests(served, timeout=30) == 0
