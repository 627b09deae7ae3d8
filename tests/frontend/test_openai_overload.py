"""A full Triton queue reaches OpenAI clients as HTTP 429 (RateLimitError), and the deployment recovers.

Its own tritonserver serves the tiny model with max_batch_size 1 and max_queue_size 1: one long stream holds the
only generation slot, and tensorrt_llm_bls (the model the frontend calls) holds at most its share of the batch plus
the queue (1 + 1), so of a burst of requests sent meanwhile exactly one waits (inside tensorrt_llm's blocked
`execute`) and the rest are refused by the BLS with Triton's queue wording, before any reaches tensorrt_llm's queue. No step depends on timing: every check polls a server metric
until it holds (or a generous deadline passes), and the long stream is held open until the rejections are back.
"""

from __future__ import annotations

import re
import threading
import time
import urllib.request

import pytest

from streaming_text import render_repo, start_server

pytestmark = pytest.mark.integration

openai = pytest.importorskip("openai")
MODEL = "tiny-cpu"
BURST = 8  # requests sent while the slot is held; 1 of them can wait (see the module docstring)
DEADLINE_S = 180.0  # generous: a loaded 2-core machine


@pytest.fixture(scope="module")
def overloaded(tiny_model, tmp_path_factory):
    from tritongen.frontend.server import FrontendServer
    from tritongen.plan.frontend import FrontendPlan

    tmp = tmp_path_factory.mktemp("overload")
    repo = render_repo(tiny_model, tmp / "repo", max_batch_size=1, bls_instances=1,
                       dynamic_batching={"max_queue_delay_us": 100, "max_queue_size": 1})
    triton = start_server(repo, tmp / "tritonserver.log")
    try:
        config = FrontendPlan.read(repo).model_copy(update={"port": 0})
        with FrontendServer(config, triton.grpc_url) as frontend:
            yield triton, frontend
    finally:
        triton.stop()


def _metric(url: str, name: str, **labels: str) -> float:
    """Sum of the samples of `name` whose labels include `labels` (0 when none is exported yet)."""
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    total = 0.0
    for line in text.splitlines():
        match = re.match(rf"^{name}(?:\{{([^}}]*)\}})? (\S+)$", line)
        if match and all(f'{k}="{v}"' in (match.group(1) or "") for k, v in labels.items()):
            total += float(match.group(2))
    return total


def _pending(triton, model: str) -> float:
    return _metric(triton.metrics_url, "nv_inference_pending_request_count", model=model)


def _settles_to(read, target: float, deadline_s: float = 60.0) -> float:
    deadline = time.monotonic() + deadline_s
    while (value := read()) != target and time.monotonic() < deadline:
        time.sleep(0.2)
    return value


def _settles_to_zero(read, deadline_s: float = 60.0) -> float:
    return _settles_to(read, 0, deadline_s)


def test_full_queue_is_429_and_the_rest_still_succeed(overloaded):
    triton, frontend = overloaded
    frontend_metrics = f"http://{frontend.url}/metrics"
    client = openai.OpenAI(base_url=frontend.base_url, api_key="unused", max_retries=0, timeout=DEADLINE_S)
    status_429 = {"endpoint": "/v1/completions", "status": "429"}
    rejected_before = _metric(frontend_metrics, "tritongen_openai_requests_total", **status_429)

    # The holder: a stream far longer than the test needs, so the slot stays taken until we close it.
    holder = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=1500, stream=True,
                                       extra_body={"min_tokens": 1500})
    next(iter(holder))  # the holder is generating: it owns the only slot
    assert _settles_to(lambda: _metric(triton.metrics_url, "tritongen_llm_active_requests"), 1) == 1

    outcomes: dict[int, object] = {}
    done = threading.Condition()

    def one(i: int) -> None:
        try:
            if i % 2:  # streamed requests are rejected before the 200 status goes out, like unstreamed ones
                stream = client.completions.create(model=MODEL, prompt=f"Request {i}", max_tokens=4, stream=True)
                result: object = "".join(c.choices[0].text for c in stream if c.choices)
            else:
                result = client.completions.create(model=MODEL, prompt=f"Request {i}", max_tokens=4)
        except Exception as err:  # noqa: BLE001 - the test inspects what each request ended with
            result = err
        with done:
            outcomes[i] = result
            done.notify_all()

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(BURST)]
    try:
        for t in threads:
            t.start()
        # While the slot is held: all but one are answered (refused); that one waits inside tensorrt_llm's blocked
        # `execute`, and nothing waits in tensorrt_llm's queue: the BLS let no excess through.
        with done:
            assert done.wait_for(lambda: len(outcomes) == BURST - 1, timeout=DEADLINE_S), outcomes
        assert _pending(triton, "tensorrt_llm") == 0
        with done:
            early = dict(outcomes)
        assert all(isinstance(r, openai.RateLimitError) for r in early.values()), early
        assert _metric(triton.metrics_url, "tritongen_llm_active_requests") == 1  # the holder still runs
    finally:
        holder.close()  # the client goes away: the frontend cancels the holder's Triton request
    for t in threads:
        t.join(timeout=DEADLINE_S)
    assert len(outcomes) == BURST, outcomes
    rejected = [r for r in outcomes.values() if isinstance(r, openai.RateLimitError)]
    served = [r for r in outcomes.values() if not isinstance(r, Exception)]
    assert len(rejected) + len(served) == BURST, [r for r in outcomes.values() if isinstance(r, Exception)]
    assert (len(rejected), len(served)) == (BURST - 1, 1)  # the one that waited is served once the slot frees
    for err in rejected:
        assert err.status_code == 429
        assert err.body["type"] == "rate_limit_error"
        assert "maximum queue size" in err.body["message"].lower(), err.body
        assert err.response.headers.get("retry-after") == "1"

    # A second source for the count: the frontend's own request counter.
    assert _metric(frontend_metrics, "tritongen_openai_requests_total", **status_429) - rejected_before \
        == len(rejected)
    # Everything settles: no request left in flight at the frontend or in the model.
    assert _settles_to_zero(lambda: _metric(frontend_metrics, "tritongen_openai_active_requests", model=MODEL)) == 0
    assert _settles_to_zero(lambda: _metric(triton.metrics_url, "tritongen_llm_active_requests")) == 0
    # And the deployment serves normally again.
    # The holder's cancellation also sends tensorrt_llm a `stop` request, which takes the one queue slot until
    # the model reads it: serving normally again means once the queue is empty.
    assert _settles_to_zero(lambda: _pending(triton, "tensorrt_llm")) == 0
    after = client.completions.create(model=MODEL, prompt="The quick brown fox", max_tokens=4,
                                      extra_body={"min_tokens": 4})
    assert after.choices[0].finish_reason == "length" and after.usage.completion_tokens == 4
