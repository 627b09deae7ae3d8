"""The JSON summary has exactly the documented keys; the HTML report is one file with the plots in it."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import pytest
from test_lt_metrics import make, set_a
from test_lt_prom import AFTER, BEFORE

import tritongen.loadtests.report
from tritongen.metric_registry import METRICS, STATS_KEYS
from tritongen.loadtests.prom import parse_metrics, server_view
from tritongen.loadtests.report import (SCHEMA_VERSION, LevelServer, LoadInfo, RunInputs, build_summary,
                                        write_report)
from tritongen.plan.slo import resolve_slo
from tritongen.spec import SLOSection


def SLO(**fields):
    """The Plan's SLO of a spec's `validation.slo` with these fields."""
    return resolve_slo(SLOSection(**fields))


DOC = Path(__file__).parents[2] / "docs" / "loadtest-report.md"
# Objects documented as a whole: free-form maps (adapters by name), and the second server view (same keys as
# levels[].server).
LEAVES = ("labels", "metadata.workload", "levels[].server_run", "levels[].adapters")


def documented_in_code() -> set[str]:
    """The keys report.py's docstring lists, and the metric keys the registry documents."""
    return (set(re.findall(r"^- `([^`]+)` \(", tritongen.loadtests.report.__doc__, re.M))
            | {f"levels[].metrics.{m.name}" for m in METRICS})


def documented_in_docs() -> set[str]:
    return set(re.findall(r"^\| `([^`]+)` \|", DOC.read_text(), re.M))


def key_paths(value: object, path: str = "") -> set[str]:
    """Dotted paths of every key; `x[]` for list elements. Stats objects and LEAVES are not walked into."""
    paths = {path} if path and not path.endswith("[]") else set()
    if isinstance(value, dict) and set(value) != set(STATS_KEYS) and not path.endswith(LEAVES):
        for key, child in value.items():
            paths |= key_paths(child, f"{path}.{key}" if path else key)
    elif isinstance(value, list):
        for child in value:
            paths |= key_paths(child, path + "[]")
    return paths


def sweep_samples():
    """set_a at level 2 plus a level 8 with one failed stream and two structured requests (valid, truncated)."""
    level8 = [make(300.0 + i * 0.1, [0.2, 0.5, 0.9], 4, concurrency=8) for i in range(8)]
    level8.append(make(301.0, [0.3], 0, error="StatusCode.CANCELLED: stream closed", concurrency=8))
    for sample, outcome in zip(level8[:2], ("valid", "truncated")):  # a structured share at level 8
        sample.schema, sample.schema_result = "flat_object", outcome
    return set_a() + level8


METADATA = {"spec_digest": "sha256:1", "plan_digest": "sha256:2", "runtime": "hf", "model": "/m", "tokenizer": "/m",
            "server": {"name": "triton", "version": "2.51.0"},
            "versions": {"tritongen": "0.1.0", "transformers": "5", "torch": "2", "locust": "2", "tritonclient": "2",
                         "python": "3.11"},
            "hardware": {"host": "h", "gpus": [{"index": 0, "name": "NVIDIA H200", "memory_total_bytes": 1}],
                         "gpu_driver": "580", "cpu_model": "x", "cpu_count": 2},
            "workload": {"protocol": "grpc"}}
CPU = {"processes": [{"pid": 1, "role": "worker", "wall_s": 10.0, "cpu_s": 9.0, "cpu_fraction": 0.9}],
       "max_cpu_fraction": 0.9, "warning": "WARNING: a Locust process used 90% of a CPU core"}
HOST = {"wall_s": 10.0, "cpus": 2, "busy_cores": 1.9, "ours_cores": 0.6, "others_cores": 1.3, "steal_fraction": 0.0,
        "load_average": 6.1, "warning": "WARNING: the host, not the server, may be the limit: other processes used "
        "1.3 of 2 CPUs. The figures measure a shared host; rerun on a quiet one before acting on them."}


def stage_edges():
    """Two reads of Triton's statistics and the model's own counters at a window's edges."""
    from test_lt_stages_unit import ensemble_path, own, snapshots

    return snapshots(ensemble_path(), own(300_000, 2_000_000, 200, 10))


def full_report(tmp_path, slo=None):
    view = server_view(parse_metrics(BEFORE, taken_at=0), parse_metrics(AFTER, taken_at=10))
    slo = slo or SLO(ttft_p95_ms=300, itl_p95_ms=500, e2e_p99_ms=1000, min_output_tokens_per_s=1,
                     max_error_rate=0.1)
    run = RunInputs(load=LoadInfo(), deployment="tiny-cpu", metadata=METADATA,
                    servers={2: LevelServer(window=view, run=view, active_after=0, edges=stage_edges(),
                                            called_model="ensemble")}, load_generator={8: CPU}, host={2: HOST},
                    sample_files=[tmp_path / "samples-h-1.jsonl"], locust_csv=[tmp_path / "locust_stats.csv"])
    return write_report(tmp_path, sweep_samples(), slo, run)


def test_docs_and_code_list_the_same_keys():
    assert documented_in_code() == documented_in_docs()


def test_json_has_exactly_the_documented_keys(tmp_path):
    report = full_report(tmp_path)
    summary = json.loads(report.json_path.read_text())
    assert summary == report.summary
    assert summary["schema_version"] == SCHEMA_VERSION == 2
    assert key_paths(summary) == documented_in_docs()
    assert key_paths(summary["levels"][0]["server_run"]) == key_paths(summary["levels"][0]["server"])


def test_json_values(tmp_path):
    summary = full_report(tmp_path).summary
    assert [row["level"] for row in summary["levels"]] == [2, 8]
    level2, level8 = (row["metrics"] for row in summary["levels"])
    assert level2["ttft_ms"]["p95"] == pytest.approx(385)
    assert level2["error_rate"] == pytest.approx(0.2)
    assert level8["request_count"] == 9
    assert level8["errors"][0] == {"message": "StatusCode.CANCELLED: stream closed", "count": 1}
    # Level 2 fails only its error rate (0.2 > 0.1); level 8 fails TTFT (200 ms x8 -> p95 200 passes) ...
    verdicts = {row["level"]: row["slo"]["passed"] for row in summary["levels"]}
    assert verdicts == {2: False, 8: False}
    assert "FAIL max_error_rate: measured 0.2000 > limit 0.1" in [r["line"] for r in summary["levels"][0]["slo"]["results"]]
    assert summary["capacity"]["level"] is None and summary["capacity"]["passing_above"] == []
    assert summary["slo"]["exit_code"] == 1 and summary["slo"]["passed"] is False
    assert summary["slo"]["goodput_limits"] == {"ttft_ms": 300, "itl_ms": 500, "e2e_ms": 1000}
    assert summary["files"]["locust_csv"] == [str(tmp_path / "locust_stats.csv")]
    assert summary["files"]["html"] == str(tmp_path / "loadtest.html")
    ens = next(m for m in summary["levels"][0]["server"]["models"] if m["model"] == "ensemble")
    assert ens["avg_queue_us"] == pytest.approx(2_000)
    assert {"reason": "REJECTED", "count": 3} in ens["request_failure"]
    # The summary quantile is NaN in the scrape; JSON carries null instead.
    step = next(s for s in summary["levels"][0]["server"]["other"] if s["name"] == "tritongen_step_seconds")
    assert step["after"] is None
    assert summary["levels"][1]["load_generator"]["warning"].startswith("WARNING")


def test_capacity_line_of_a_sweep(tmp_path):
    # Without an error-rate objective level 2 passes and level 8 (one failed stream of nine) too.
    summary = full_report(tmp_path, SLO(ttft_p95_ms=300, max_error_rate=None, min_capacity=8)).summary
    assert [row["slo"]["passed"] for row in summary["levels"]] == [False, True]  # level 2: TTFT p95 385 > 300
    cap = summary["capacity"]
    assert (cap["level"], cap["passing_above"], cap["rule"], cap["passed"]) == (None, [8], "min_capacity", False)
    summary = full_report(tmp_path, SLO(ttft_p95_ms=400, max_error_rate=None, min_capacity=8)).summary
    assert (summary["capacity"]["level"], summary["slo"]["exit_code"]) == (8, 0)
    assert summary["capacity"]["line"] == ("capacity: 8 users (highest level at which every SLO holds); "
                                           "required >= 8 users -> PASS")


HF_COUNTER = "tritongen_llm_output_tokens_total"


def test_token_totals_are_compared_only_when_every_request_ended_normally(tmp_path):
    after = AFTER + '# TYPE tritongen_llm_output_tokens_total counter\n' \
                    'tritongen_llm_output_tokens_total{model="tensorrt_llm",version="1"} 32\n'
    view = server_view(parse_metrics(BEFORE, taken_at=0), parse_metrics(after, taken_at=10))
    ok = [make(1.0 + i, [0.1, 0.2], 4, concurrency=1) for i in range(8)]
    run = RunInputs(servers={1: LevelServer(window=view, run=view), 2: LevelServer(window=view, run=view)},
                    output_token_counter=HF_COUNTER)
    rows = build_summary(ok + set_a(), SLO(), run)["levels"]
    assert rows[0]["tokens"] == {"client_output_tokens": 32, "server_output_tokens": 32, "counted_by": "server",
                                 "equal": True}
    assert rows[1]["tokens"]["equal"] is None  # set_a has a failed request


def test_a_token_mismatch_fails_the_level(tmp_path):
    # The server counted 20 tokens where the clients summed 32 (e.g. a repository rendered with another count
    # convention): every token figure is then wrong, so the level fails even with every objective met.
    after = AFTER + '# TYPE tritongen_llm_output_tokens_total counter\n' \
                    'tritongen_llm_output_tokens_total{model="tensorrt_llm",version="1"} 20\n'
    view = server_view(parse_metrics(BEFORE, taken_at=0), parse_metrics(after, taken_at=10))
    ok = [make(1.0 + i, [0.1, 0.2], 4, concurrency=1) for i in range(8)]
    summary = build_summary(ok, SLO(), RunInputs(servers={1: LevelServer(window=view, run=view)},
                                                 output_token_counter=HF_COUNTER))
    level = summary["levels"][0]
    assert level["tokens"]["equal"] is False and level["slo"]["passed"] is False
    check = level["slo"]["results"][-1]
    assert check["line"] == "FAIL client_tokens_equal_server: measured 32.0 tokens != limit 20 tokens"
    assert summary["slo"]["exit_code"] == 1


def test_minimal_summary_uses_only_documented_keys():
    summary = build_summary([make(1.0, [0.1, 0.2], 2)], SLO())
    assert key_paths(summary) <= documented_in_docs()
    assert summary["levels"][0]["server"] is None and summary["slo"]["exit_code"] == 0


def embedded_pngs(page: str) -> dict[str, bytes]:
    found = re.findall(r'<img alt="([^"]+)" src="data:image/png;base64,([A-Za-z0-9+/=]+)">', page)
    return {alt: base64.b64decode(data) for alt, data in found}


def test_html_embeds_all_plots_for_a_sweep(tmp_path):
    report = full_report(tmp_path)
    page = report.html_path.read_text()
    pngs = embedded_pngs(page)
    assert set(pngs) == {"Latency and throughput vs users", "Where the time goes", *(
        f"{kind} (users {n})" for n in (2, 8) for kind in ("TTFT distribution", "ITL distribution",
                                                         "Throughput over time"))}
    assert "dominant stage: <b>per-token</b>" in page
    assert all(png.startswith(b"\x89PNG\r\n\x1a\n") for png in pngs.values())
    # Level 2 TTFTs 100..400 -> p95 385.
    assert "FAIL ttft_p95_ms: measured 385.0 ms &gt; limit 300 ms" in page
    assert "capacity: none" in page and "WARNING: a Locust process used 90%" in page
    assert "NVIDIA H200" in page and "triton 2.51.0" in page
    assert "locust_stats.csv" in page and "tensorrt_llm" in page
    assert not list(tmp_path.glob("*.tmp"))


def test_html_single_level_has_no_sweep_plot(tmp_path):
    report = write_report(tmp_path, set_a(), SLO(max_error_rate=None))
    assert set(embedded_pngs(report.html_path.read_text())) == {
        "TTFT distribution", "ITL distribution", "Throughput over time"}
    assert report.exit_code == 0


def test_html_escapes_error_text(tmp_path):
    samples = [make(1.0, [0.1, 0.2], 2), make(1.1, [], 0, error="<script>alert(1)</script>")]
    page = write_report(tmp_path, samples, SLO()).html_path.read_text()
    assert "<script>" not in page and "&lt;script&gt;" in page


def test_metadata_names_the_runtime_and_the_checkpoint_folder(tiny_spec_path):
    from tritongen.loadtests.metadata import run_metadata
    from tritongen.plan import plan_from_file

    plan = plan_from_file(tiny_spec_path)[1]
    meta = run_metadata(plan, None, {})
    assert meta["runtime"] == "hf" and meta["model"] == plan.paths.checkpoint


def test_the_token_check_reads_the_runtimes_own_counter():
    """Each runtime names the counter its server counts generated tokens in: the vLLM backend's is compared, another
    series of the same value is not, and a runtime with none (NVIDIA's models) gets no check."""
    from tritongen.runtimes import clients

    assert clients("hf").output_token_counter == HF_COUNTER == clients("synthetic").output_token_counter
    assert clients("tensorrtllm").output_token_counter is None and clients("trtllm").output_token_counter is None
    vllm = clients("vllm").output_token_counter
    after = AFTER + f'# TYPE {vllm} counter\n{vllm}{{model="tensorrt_llm",version="1"}} 32\n' \
                    f'# TYPE {HF_COUNTER} counter\n{HF_COUNTER}{{model="tensorrt_llm",version="1"}} 5\n'
    view = server_view(parse_metrics(BEFORE, taken_at=0), parse_metrics(after, taken_at=10))
    ok = [make(1.0 + i, [0.1, 0.2], 4, concurrency=1) for i in range(8)]
    for counter, counted, equal in ((vllm, 32, True), (HF_COUNTER, 5, False), (None, None, None)):
        run = RunInputs(servers={1: LevelServer(window=view, run=view)}, output_token_counter=counter)
        tokens = build_summary(ok, SLO(), run)["levels"][0]["tokens"]
        assert (tokens["server_output_tokens"], tokens["equal"]) == (counted, equal), counter


def test_every_figure_carries_its_n_and_an_interval_in_json_console_and_html(tmp_path, capsys):
    from tritongen.loadtests import console

    report = full_report(tmp_path)
    level2 = report.summary["levels"][0]
    conf = level2["confidence"]
    assert [f["name"] for f in conf["figures"]] == [
        "request_throughput", "output_token_throughput", "goodput", "ttft_ms.p50", "ttft_ms.p95", "itl_ms.p50",
        "itl_ms.p95", "e2e_ms.p50", "e2e_ms.p99"]
    ttft95 = next(f for f in conf["figures"] if f["name"] == "ttft_ms.p95")
    # The four successful requests' TTFTs (100..400 ms): n 4, an interval around the p95 of 385 ms within them.
    assert ttft95["n"] == 4 and ttft95["value"] == pytest.approx(385)
    assert 100 <= ttft95["low"] <= 385 <= ttft95["high"] <= 400
    rate = next(f for f in conf["figures"] if f["name"] == "request_throughput")
    assert rate["n"] == level2["metrics"]["completed_count"]
    assert conf["warning"].startswith("only 4 request(s) completed inside the window (< 30)")
    console.print_report(report.summary, tmp_path, report.html_path, report.json_path)
    out = capsys.readouterr().out
    assert "how sure (95% interval, n): req/s " in out and "TTFT p95 [" in out and "(n 4)" in out
    assert "WARNING: only 4 request(s) completed inside the window" in out
    page = report.html_path.read_text()
    assert "How sure (confidence intervals)" in page and "only 4 request(s) completed" in page


def test_a_level_whose_host_was_loaded_is_marked_in_json_console_and_html(tmp_path, capsys):
    from tritongen.loadtests import console

    report = full_report(tmp_path)
    assert report.summary["levels"][0]["host"] == HOST and report.summary["levels"][1]["host"] is None
    console.print_report(report.summary, tmp_path, report.html_path, report.json_path)
    out = capsys.readouterr().out
    assert ("host: 1.9 of 2 CPUs busy (0.6 the server and load generator, 1.3 other processes), steal 0%, load "
            "average 6.1") in out
    assert "WARNING: the host, not the server, may be the limit: other processes used 1.3 of 2 CPUs" in out
    assert "the host, not the server, may be the limit" in report.html_path.read_text()


def test_each_adapter_is_measured_over_the_levels_window_and_shown_in_console_and_html(tmp_path, capsys):
    """Per-adapter figures use the level's window, not one that starts at the adapter's own first request: an adapter
    first called 0.8 s into the level would otherwise count requests sent during the level's warm-up."""
    from tritongen.loadtests import console

    # base: sent at 0.0, 0.5, 1.0 ... 4.5 s; legal: first sent at 0.8 s (inside the 1 s warm-up), then 1.3 ... 4.8 s.
    samples = [make(500.0 + 0.5 * i, [0.1, 0.2], 2, rid=f"b{i}") for i in range(10)]
    samples += [make(500.8 + 0.5 * i, [0.1, 0.3], 3, rid=f"l{i}") for i in range(9)]
    for s in samples:
        s.adapter = "base" if s.request_id.startswith("b") else "legal"
    run = RunInputs(load=LoadInfo(warmup_s=1.0, duration_s=5.0), deployment="tiny-cpu", metadata=METADATA)
    report = write_report(tmp_path, samples, SLO(max_error_rate=0.0), run)
    level = report.summary["levels"][0]
    adapters = level["adapters"]
    # Window [1, 5) s: base sends 1.0 ... 4.5 (8), legal 1.3 ... 4.8 (8; its 0.8 s request is warm-up).
    assert adapters["base"]["request_count"] == 8 and adapters["legal"]["request_count"] == 8
    for key in ("request_count", "completed_count", "error_count"):
        assert sum(a[key] for a in adapters.values()) == level["metrics"][key], key
    console.print_report(report.summary, tmp_path, report.html_path, report.json_path)
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("per adapter (client-side): "))
    assert "base 8 sent (0 errors)" in line and "legal 8 sent (0 errors)" in line
    page = report.html_path.read_text()
    assert "Per LoRA adapter" in page and "<td>legal</td><td>8</td>" in page
