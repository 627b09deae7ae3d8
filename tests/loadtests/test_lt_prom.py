"""Parsing Triton 2.51 /metrics text and the before/after view per model, against hand-computed deltas."""

from __future__ import annotations

import math
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tritongen.errors import CheckFailed
from tritongen.loadtests.prom import MetricsParseError, PromPoller, parse_metrics, scrape, server_view

FIXTURES = Path(__file__).parents[1] / "fixtures" / "metrics"
BEFORE = (FIXTURES / "triton_2.51_before.txt").read_text()
AFTER = (FIXTURES / "triton_2.51_after.txt").read_text()
GPU = {"gpu_uuid": "GPU-7a3c2f10-52d4-9b1e-0c8a-3f6e1d2b4a90"}


def view(during_text: str | None = None):
    during = [parse_metrics(during_text, taken_at=1005.0)] if during_text else []
    return server_view(parse_metrics(BEFORE, taken_at=1000.0), parse_metrics(AFTER, taken_at=1012.5), during)


def test_fixture_parses_with_types_and_labels():
    snap = parse_metrics(AFTER)
    assert snap.get("nv_inference_request_success", model="ensemble", version="1") == 42
    assert snap.get("nv_inference_request_failure", model="tensorrt_llm", reason="BACKEND", version="1") == 1
    assert snap.get("nv_gpu_memory_total_bytes", **GPU) == 150754820096
    assert snap.get("nv_pinned_memory_pool_total_bytes") == 268435456
    assert snap.types["nv_inference_queue_duration_us"] == "counter"
    assert snap.type_of("nv_inference_first_response_histogram_ms_bucket") == "histogram"
    assert snap.get("nv_inference_first_response_histogram_ms_bucket", model="tensorrt_llm", version="1",
                    le="+Inf") == 42
    assert math.isnan(snap.get("tritongen_step_seconds", quantile="0.5"))


def test_label_escapes():
    snap = parse_metrics(AFTER)
    # In the text: note="slot \"a\"\\b\nc, {x=1}" -> quote, backslash, newline; `,` `{` `=` inside a value.
    assert snap.get("tritongen_batch_occupancy", model="tensorrt_llm", note='slot "a"\\b\nc, {x=1}',
                    version="1") == 2


def test_exposition_format_details():
    snap = parse_metrics(
        'a_total{x="1", y="two",} 3 1700000000000\n'   # spaces, trailing comma, timestamp
        'b{path="C:\\\\models\\q"} +Inf\n'             # \\ is a backslash; \q is kept as written
        "c -1.5e3\n"
        "# a comment that is not HELP or TYPE\n")
    assert snap.get("a_total", x="1", y="two") == 3
    assert snap.get("b", path="C:\\models\\q") == math.inf
    assert snap.get("c") == -1500
    assert snap.type_of("c") == "untyped"


@pytest.mark.parametrize(("text", "message"), [
    ('m{a="unterminated} 1', r"^not Prometheus text format: .*unterminated"),
    ("m one", r"^not Prometheus text format: .*'one'"),
    ("{a=\"x\"} 1", r"^not Prometheus text format: a sample line without a metric name"),
])
def test_malformed_text_is_one_error(text, message):
    with pytest.raises(MetricsParseError, match=message):
        parse_metrics("ok 1\n" + text)


def test_per_model_deltas_and_queue_vs_compute():
    v = view()
    assert v.window_s == pytest.approx(12.5)
    assert [m.model for m in v.models] == ["ensemble", "postprocessing", "preprocessing", "tensorrt_llm"]

    ens = v.model("ensemble")
    # 42 - 2 successes; 3 rejected; request time 40,400,000 - 400,000 = 40,000,000 us.
    assert (ens.request_success, ens.inference_count, ens.exec_count) == (40, 40, 40)
    assert ens.request_failure == {"REJECTED": 3, "CANCELED": 0, "BACKEND": 0, "OTHER": 0}
    assert ens.avg_request_us == pytest.approx(1_000_000)
    assert ens.avg_queue_us == pytest.approx(2_000)            # (82,000 - 2,000) / 40
    assert ens.avg_compute_us == pytest.approx(903_000)        # (40,000 + 36,000,000 + 80,000) / 40

    pre = v.model("preprocessing")
    assert pre.exec_count == 28                                # dynamic batching: 28 executions for 40 requests
    assert pre.avg_queue_us == pytest.approx(1_000)
    assert pre.avg_compute_us == pytest.approx(3_300)          # (4,000 + 120,000 + 8,000) / 40

    llm = v.model("tensorrt_llm")
    assert llm.request_failure["BACKEND"] == 1
    assert llm.queue_duration_us == 400_000
    assert llm.avg_queue_us == pytest.approx(10_000)
    assert llm.avg_compute_us == pytest.approx(600_200)        # (4,000 + 24,000,000 + 4,000) / 40
    assert llm.pending_request_count_max == 1

    post = v.model("postprocessing")
    assert post.request_success == 1280                        # one detokenisation per streamed response
    assert post.avg_queue_us == pytest.approx(10)


def test_other_series_pass_through_by_name():
    during = AFTER.replace(f'nv_gpu_utilization{{gpu_uuid="{GPU["gpu_uuid"]}"}} 0.07',
                           f'nv_gpu_utilization{{gpu_uuid="{GPU["gpu_uuid"]}"}} 0.93')
    during = during.replace('nv_inference_pending_request_count{model="tensorrt_llm",version="1"} 1',
                            'nv_inference_pending_request_count{model="tensorrt_llm",version="1"} 5')
    v = view(during)
    other = {(s.name, tuple(sorted(s.labels.items()))): s for s in v.other}
    assert not any(name.startswith(("nv_inference_request", "nv_inference_queue", "nv_inference_compute"))
                   for name, _ in other)

    util = other[("nv_gpu_utilization", tuple(GPU.items()))]
    assert (util.type, util.before, util.after, util.delta, util.min, util.max) == ("gauge", 0, 0.07, None, 0, 0.93)
    energy = other[("nv_energy_consumption", tuple(GPU.items()))]
    assert (energy.type, energy.delta) == ("counter", 3500)
    tokens = other[("tritongen_generated_tokens_total", (("model", "tensorrt_llm"), ("version", "1")))]
    assert tokens.delta == 1280
    kv = other[("nv_trt_llm_kv_cache_block_metrics",
                (("kv_cache_block_type", "used"), ("model", "tensorrt_llm"), ("version", "1")))]
    assert (kv.before, kv.after) == (0, 96)
    bucket = other[("nv_inference_first_response_histogram_ms_bucket",
                    (("le", "100"), ("model", "tensorrt_llm"), ("version", "1")))]
    assert (bucket.type, bucket.delta) == ("histogram", None)
    assert v.model("tensorrt_llm").pending_request_count_max == 5


def test_counter_reset_counts_from_zero():
    before = parse_metrics('nv_inference_request_success{model="m",version="1"} 500\n'
                           "# TYPE x_total counter\nx_total 9\n", taken_at=0)
    after = parse_metrics('nv_inference_request_success{model="m",version="1"} 30\n'
                          'nv_inference_request_success{model="new",version="1"} 7\n'
                          "# TYPE x_total counter\nx_total 4\n", taken_at=1)
    v = server_view(before, after)
    assert v.model("m").request_success == 30      # server restarted: 30 since the restart
    assert v.model("new").request_success == 7     # model loaded during the run
    assert v.other[0].delta == 4


@pytest.fixture
def metrics_server():
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            body = AFTER.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    server.shutdown()
    server.server_close()


def test_scrape_and_poll(metrics_server):
    assert scrape(metrics_server).get("nv_inference_count", model="ensemble", version="1") == 42
    poller = PromPoller(metrics_server, interval_s=0.05).start()
    threading.Event().wait(0.3)
    snapshots = poller.stop()
    assert len(snapshots) >= 2 and poller.errors == []


def test_scrape_failure_says_what_to_check():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(CheckFailed, match=rf"^http://127.0.0.1:{port}/metrics: cannot scrape metrics .*"
                                          r"--allow-metrics=true"):
        scrape(f"http://127.0.0.1:{port}/metrics", timeout_s=1)
