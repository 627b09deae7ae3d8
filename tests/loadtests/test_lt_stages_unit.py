"""The stage breakdown from two reads of Triton's statistics and the model's own counters, against hand-computed
values: stages per request of the called model, a wrapped counter dropped and said so, a model without own
timings (NVIDIA's llmapi model) shown as what Triton reports."""

from __future__ import annotations

import dataclasses

import pytest

from tritongen.loadtests.model_stats import ModelStats, parse_http, window
from tritongen.loadtests.prom import parse_metrics
from tritongen.loadtests.stages import breakdown, line

MS = 1_000_000  # ns per ms


def stats(name, n, queue_ms, infer_ms, request_ms, *, input_ms=0.0, output_ms=0.0):
    return ModelStats(name, success_count=n, success_ns=round(request_ms * MS * n), queue_count=n,
                      queue_ns=round(queue_ms * MS * n), compute_input_count=n, compute_input_ns=round(input_ms * MS * n),
                      compute_infer_count=n, compute_infer_ns=round(infer_ms * MS * n), compute_output_count=n,
                      compute_output_ns=round(output_ms * MS * n))


def own(first_us, generation_us, later, finished):
    return (f"tritongen_llm_first_response_us_total{{model=\"tensorrt_llm\",version=\"1\"}} {first_us}\n"
            f"tritongen_llm_generation_us_total{{model=\"tensorrt_llm\",version=\"1\"}} {generation_us}\n"
            f"tritongen_llm_later_tokens_total{{model=\"tensorrt_llm\",version=\"1\"}} {later}\n"
            f"tritongen_llm_finished_requests_total{{model=\"tensorrt_llm\",version=\"1\"}} {finished}\n")


def snapshots(models_after, text_after, models_before=None, text_before=None):
    """Two reads: everything zero before, the given totals after (10 s later)."""
    before = dataclasses.replace(parse_metrics(text_before or own(0, 0, 0, 0), taken_at=0.0),
                                 models=models_before or {})
    after = dataclasses.replace(parse_metrics(text_after, taken_at=10.0), models=models_after)
    return before, after


def ensemble_path(n=10, bls_queue=0.5, pre_ms=2.0, llm_queue=0.25, ensemble_ms=240.0):
    """n requests through ensemble -> tensorrt_llm_bls -> preprocessing + tensorrt_llm."""
    return {"ensemble": stats("ensemble", n, 0.01, 3.0, ensemble_ms),
            "tensorrt_llm_bls": stats("tensorrt_llm_bls", n, bls_queue, 1.5, 2.0),
            "preprocessing": stats("preprocessing", n, 0.2, pre_ms, pre_ms + 0.2),
            "tensorrt_llm": stats("tensorrt_llm", n, llm_queue, 0.1, 0.2)}


def test_stages_per_request_of_the_ensemble():
    # 10 requests: first response 30 ms each, 200 ms from first to last over 20 later tokens each (10 ms/token).
    before, after = snapshots(ensemble_path(), own(300_000, 2_000_000, 200, 10))
    result = breakdown(before, after, 250.0, called="ensemble")
    by = {s["name"]: s["ms"] for s in result["stages"]}
    assert result["called_model"] == "ensemble" and result["requests"] == 10
    assert by["queue"] == pytest.approx(0.01 + 0.5 + 0.2 + 0.25)
    assert by["preprocessing"] == pytest.approx(2.0)
    assert by["first token"] == pytest.approx(30.0) and by["per-token"] == pytest.approx(200.0)
    assert result["per_token_ms"] == pytest.approx(10.0)
    assert by["detokenizer"] is None  # tritongen's BLS detokenises itself: no postprocessing on the path
    assert by["ensemble/BLS"] == pytest.approx(240.0 - (0.96 + 2.0 + 30.0 + 200.0))
    assert result["sum_ms"] == pytest.approx(240.0) and result["sum_over_client_e2e"] == pytest.approx(0.96)
    assert result["dominant"] == "per-token"
    assert "dominant: per-token" in line(result) and "= 240.0 of client e2e 250.0 (96%)" in line(result)
    assert result["coverage"] == "" and result["unaccounted_ms"] == pytest.approx(10.0)  # within 10%: adds up


def test_what_the_stages_do_not_add_up_to_is_named_with_why():
    before, after = snapshots(ensemble_path(), own(300_000, 2_000_000, 200, 10))
    # The ensemble called: everything inside Triton is a stage, so the rest is outside it.
    outside = breakdown(before, after, 320.0, called="ensemble")
    assert outside["coverage"] == (
        "25% (80.0 ms) of the client's mean e2e is not measured: outside Triton's request time: the network, "
        "Triton's gRPC/HTTP frontend and the client's own scheduling (large when the load generator's host is "
        "loaded; see the host line)")
    assert outside["coverage"] in line(outside)
    over = breakdown(before, after, 200.0, called="ensemble")
    assert over["coverage"].startswith("the stages exceed the client's mean e2e by 20% (40.0 ms): they are averages")
    # A model called directly without own timings: the stages it cannot time are named with their reasons.
    before, after = snapshots({"tensorrt_llm": stats("tensorrt_llm", 8, 1.5, 0.3, 0.4)}, "", text_before="")
    direct = breakdown(before, after, 500.0, called="tensorrt_llm")
    assert direct["coverage"].startswith("100% (498.5 ms) of the client's mean e2e is not measured: in stages the "
                                         "server does not time: first token (the model exports no own timings")
    assert "ensemble/BLS (tensorrt_llm is called directly" in direct["coverage"]


def test_without_own_timings_the_ensembles_rest_says_it_holds_them():
    before, after = snapshots(ensemble_path(), "", text_before="")
    result = breakdown(before, after, 245.0, called="ensemble")
    rest = next(s for s in result["stages"] if s["name"] == "ensemble/BLS")
    assert rest["note"].endswith("it holds the first-token and per-token time, which the model does not report")
    assert result["sum_ms"] == pytest.approx(240.0) and result["coverage"] == ""


def test_the_client_mean_is_over_the_requests_completed_between_the_servers_reads():
    from types import SimpleNamespace

    from test_lt_metrics import make
    from tritongen.loadtests.report import _client_e2e_between

    # Sent at 100.0 (done 100.2), 101.0 (done 101.4) and 102.0 (done 103.0); the reads at 100.5 and 102.5.
    samples = [make(100.0, [0.1, 0.2], 2), make(101.0, [0.1, 0.4], 2), make(102.0, [0.1, 1.0], 2)]
    edges = (SimpleNamespace(taken_at=100.5), SimpleNamespace(taken_at=102.5))
    assert _client_e2e_between(samples, edges, 9.9) == pytest.approx(400.0)
    assert _client_e2e_between(samples, (object(), object()), 9.9) == 9.9


def test_a_wrapped_counter_is_dropped_and_named():
    models = ensemble_path()
    # The BLS's compute_infer went "below zero" once per request: an unsigned wrap, 2^64 ns each.
    wrapped = dataclasses.replace(models["tensorrt_llm_bls"], compute_infer_ns=10 * 2**64)
    before, after = snapshots({**models, "tensorrt_llm_bls": wrapped}, own(300_000, 2_000_000, 200, 10))
    result = breakdown(before, after, 250.0, called="ensemble")
    bls = next(m for m in result["models"] if m["model"] == "tensorrt_llm_bls")
    assert bls["plausible"] is False and bls["compute_infer_ms"] is None
    assert "18,446,744,073,709" in bls["note"] and "tensorrt_llm_bls" in result["note"]
    by = {s["name"]: s["ms"] for s in result["stages"]}
    assert by["queue"] is None  # the BLS's queue time is not trusted either
    assert by["first token"] == pytest.approx(30.0)
    assert "implausible" in line(result)


def test_a_model_without_own_timings_shows_what_triton_reports():
    # NVIDIA's llmapi model called directly: a decoupled python model, no tritongen_llm_* counters.
    before, after = snapshots({"tensorrt_llm": stats("tensorrt_llm", 8, 1.5, 0.3, 0.4)}, "", text_before="")
    result = breakdown(before, after, 500.0, called="tensorrt_llm")
    by = {s["name"]: s for s in result["stages"]}
    assert by["queue"]["ms"] == pytest.approx(1.5)
    assert by["first token"]["ms"] is None and "no own timings" in by["first token"]["note"]
    assert by["ensemble/BLS"]["ms"] is None and "called directly" in by["ensemble/BLS"]["note"]
    assert result["models"][0]["compute_infer_ms"] == pytest.approx(0.3)


def test_no_statistics_no_breakdown():
    before, after = snapshots({}, own(0, 0, 0, 0))
    assert breakdown(dataclasses.replace(before, models=None), after, 1.0) is None


def test_http_statistics_document_and_window():
    doc = {"model_stats": [
        {"name": "m", "version": "1", "inference_stats": {"success": {"count": 4, "ns": 8_000_000},
                                                          "queue": {"count": 4, "ns": 400_000}}},
        {"name": "m", "version": "2", "inference_stats": {"success": {"count": 1, "ns": 2_000_000}}}]}
    after = parse_http(doc)
    assert after["m"].success_count == 5 and after["m"].success_ns == 10_000_000
    m = window({"m": ModelStats("m", success_count=1, success_ns=1_000_000)}, after)["m"]
    assert m.requests == 4 and m.request_ms == pytest.approx(2.25) and m.queue_ms == pytest.approx(0.1)
