"""`tritongen loadtest` and `tritongen up` against the real embedded tritonserver (session `triton` fixture)."""

from __future__ import annotations

import csv
import json
import queue
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tritongen.errors import SpecError

ROOT = Path(__file__).resolve().parents[2]

def tritongen(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tritongen.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, check=False)


def spec_copy(src: Path, dst: Path, **load_and_slo: object) -> Path:
    """The tiny spec with `validation.load` / `validation.slo` fields replaced (keys `load_x` / `slo_x`)."""
    data = yaml.safe_load(src.read_text())
    for key, value in load_and_slo.items():
        section, _, field = key.partition("_")
        data["validation"][section][field] = value
    dst.write_text(yaml.safe_dump(data, sort_keys=False))
    return dst


# --- no server -------------------------------------------------------------------------------------------

def test_sweep_flag_is_parsed_and_checked():
    from tritongen.loadtests.runner import parse_sweep

    assert parse_sweep("8,1,2,2") == (1, 2, 8)
    assert parse_sweep("0.5,2") == (0.5, 2)
    with pytest.raises(SpecError, match=r"^--sweep: 'a,0' is not a comma-separated list of levels > 0"):
        parse_sweep("a,0")


_PROMPTS_PROBE = """
import json, sys
from transformers import AutoTokenizer
from tritongen.loadtests.workload import LocustConfig, PromptSource, load_tokenizer
from tritongen.plan.load import load_profile
from tritongen.spec import LoadSection
tok = AutoTokenizer.from_pretrained(sys.argv[1])
profile = load_profile(LoadSection(input_tokens={"mean": 40}, output_tokens={"mean": 16}), str)
config = LocustConfig(profile=profile, url="x:1", samples_dir="/tmp", tokenizer_dir=sys.argv[1], level=1,
                      add_special_tokens=False)
source = PromptSource(config, load_tokenizer(sys.argv[1]))
prompts = [source.next() for _ in range(20)]
print(json.dumps([[p.text, p.input_tokens, len(tok.encode(p.text, add_special_tokens=False)), p.max_tokens,
                   p.min_tokens] for p in prompts]))
"""


@pytest.mark.slow  # a subprocess that imports locust and gevent
def test_synthetic_prompts_have_the_requested_token_counts(tiny_model):
    # In a subprocess: importing locust (through tritongen.loadtests.users) monkey-patches the whole process for gevent.
    proc = subprocess.run([sys.executable, "-c", _PROMPTS_PROBE, str(tiny_model)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=True)
    prompts = json.loads(proc.stdout.splitlines()[-1])
    for text, recorded, counted, max_tokens, min_tokens in prompts:
        assert recorded == counted
        assert abs(recorded - 40) <= 2  # decode/re-encode may merge a token at either edge
        assert max_tokens == min_tokens == 16
    assert len({p[0] for p in prompts}) > 1


# --- against the session's tritonserver ----------------------------------------------------------------

@pytest.fixture(scope="module")
def impossible_run(tiny_spec_path, triton, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("impossible")
    spec = spec_copy(tiny_spec_path, tmp / "spec.yaml", slo_ttft_p95_ms=0.001)
    out = tmp / "report"
    proc = tritongen("loadtest", str(spec), "--url", triton.grpc_url, "--metrics-url", triton.metrics_url,
                     "-u", "2", "-t", "10", "--out", str(out))
    return proc, out


@pytest.mark.integration
def test_impossible_slo_exits_1_and_names_it(impossible_run):
    proc, out = impossible_run
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "FAIL ttft_p95_ms: measured" in proc.stdout and "> limit 0.001 ms" in proc.stdout
    summary = json.loads((out / "loadtest.json").read_text())
    assert len(summary["levels"]) == 1  # -u on the command line: one level, not the spec's sweep
    failed = [r["name"] for r in summary["levels"][0]["slo"]["results"] if not r["passed"]]
    assert "ttft_p95_ms" in failed  # the impossible one; on a loaded machine an ITL objective may fail beside it
    assert summary["levels"][0]["metrics"]["error_count"] == 0
    assert "capacity: none (the lowest level already fails an objective)" in proc.stdout
    assert (out / "loadtest.html").is_file() and (out / "locust_stats.csv").is_file()
    assert f"report: {out / 'loadtest.html'}" in proc.stdout


@pytest.mark.integration
def test_client_and_server_counts_agree(impossible_run):
    """Acceptance: min_tokens = max_tokens, every request reports exactly the requested output tokens (the
    server's count), and the client's totals equal the server's own counters."""
    from tritongen.loadtests.samples import read_samples

    _, out = impossible_run
    summary = json.loads((out / "loadtest.json").read_text())
    level = summary["levels"][0]
    samples = read_samples(summary["files"]["samples"])
    ok = [s for s in samples if s.ok]
    assert len(ok) >= 2 and len(ok) == len(samples)
    assert {s.output_tokens for s in ok} == {24}  # the tiny example asks for exactly 24
    assert all(s.input_tokens > 0 for s in ok)     # num_input_tokens from the server
    # --stop-timeout lets in-flight requests finish, so nothing the server completed goes unrecorded.
    ensemble = next(m for m in level["server_run"]["models"] if m["model"] == "ensemble")
    assert ensemble["request_success"] == len(ok)
    assert level["tokens"] == {"client_output_tokens": 24 * len(ok), "server_output_tokens": 24 * len(ok),
                               "counted_by": "server", "equal": True}
    assert level["server_active_after"] == 0
    # Locust's own stats saw the requests too (its CSV is written before the requests that finish during
    # --stop-timeout, so it may count a few fewer than the samples).
    rows = list(csv.DictReader((out / "locust_stats.csv").open()))
    aggregated = next(r for r in rows if r["Name"] == "Aggregated")
    assert 0 < int(aggregated["Request Count"]) <= len(samples)
    # The batching proof of the hf runtime passes through to the server view, and the report says what ran.
    assert any(s["name"] == "tritongen_llm_step_requests_max" for s in level["server_run"]["other"])
    meta = summary["metadata"]
    assert meta["runtime"] == "hf" and meta["server"]["name"] == "triton" and meta["server"]["version"]
    assert meta["versions"]["transformers"] and meta["hardware"]["cpu_count"]
    assert level["load_generator"]["processes"][0]["cpu_s"] > 0


@pytest.mark.integration
def test_down_server_exits_3_naming_the_url_before_any_load(tiny_spec_path, tmp_path):
    from tritongen.ports import free_port

    url = f"127.0.0.1:{free_port()}"
    for protocol in ("grpc", "http"):
        start = time.monotonic()
        proc = tritongen("loadtest", str(tiny_spec_path), "--url", url, "--protocol", protocol, "-t", "600",
                         "--metrics-url", f"http://{url}/metrics", "--out", str(tmp_path / protocol))
        assert proc.returncode == 3, proc.stdout + proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and url in lines[0] and "start the deployment" in lines[0], proc.stderr
        assert time.monotonic() - start < 300  # planning, then one refused connection: not the 600 s run
        assert not (tmp_path / protocol / "loadtest.json").exists() and not (tmp_path / protocol / "samples").exists()


@pytest.mark.integration
def test_a_cpu_hog_beside_a_load_test_marks_the_level_as_host_limited(tiny_spec_path, triton, tmp_path):
    import os

    hog = "import time\nend = time.time() + 60\nwhile time.time() < end: pass\n"
    hogs = [subprocess.Popen([sys.executable, "-c", hog]) for _ in range(os.cpu_count() or 2)]
    try:
        out = tmp_path / "report"
        proc = tritongen("loadtest", str(tiny_spec_path), "--url", triton.grpc_url, "--metrics-url",
                         triton.metrics_url, "-u", "1", "-t", "3", "--warmup", "0", "--out", str(out))
    finally:
        for p in hogs:
            p.kill()
            p.wait()
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    host = json.loads((out / "loadtest.json").read_text())["levels"][0]["host"]
    # The hogs are no process of the load test's or the server's: other processes, a loaded host.
    assert host["others_cores"] >= 0.5 and host["warning"].startswith("WARNING: the host, not the server, may be "
                                                                      "the limit: other processes used"), host
    assert host["warning"] in proc.stdout
    assert "the host, not the server, may be the limit" in (out / "loadtest.html").read_text()


SAID_WITHIN_S = 3.0
"""Ctrl-C's message comes at once (the handler runs as the signal arrives); 3 s leaves room for a loaded CI host."""


def _interrupt_when(args: list[str], seen: str, timeout: float = 240) -> tuple[int, list[str], float]:
    """Run `tritongen ARGS`, send it SIGINT once a line containing `seen` appears; (exit code, every line, seconds
    from the signal to the first line that says it was interrupted)."""
    import signal
    import threading

    proc = subprocess.Popen([sys.executable, "-m", "tritongen.cli", *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, bufsize=1)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x.rstrip("\n")) for x in proc.stdout], daemon=True).start()
    got, sent, said = [], None, None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=0.2)
        except queue.Empty:
            if proc.poll() is not None and lines.empty():
                break
            continue
        got.append(line)
        if sent is None and seen in line:
            proc.send_signal(signal.SIGINT)
            sent = time.monotonic()
        if sent is not None and said is None and line.startswith("interrupted (Ctrl-C)"):
            said = time.monotonic() - sent
    proc.wait(timeout=60)
    assert sent is not None, "\n".join(got)
    return proc.returncode, got, -1.0 if said is None else said


@pytest.mark.integration
def test_ctrl_c_in_the_first_level_says_so_at_once_and_exits_130_naming_what_finished(tiny_spec_path, triton,
                                                                                        tmp_path):
    out = tmp_path / "report"
    code, lines, said = _interrupt_when(["loadtest", str(tiny_spec_path), "--url", triton.grpc_url, "-u", "2",
                                         "-t", "60", "--out", str(out)], seen="users 2:")
    text = "\n".join(lines)
    assert code == 130, text
    # A status line as the level starts (a pipe gets a line, not a rewritten one), the message at once.
    assert any(line.startswith("users 2:   0.0 s, 0 requests") for line in lines), text
    assert 0 <= said < SAID_WITHIN_S, text
    assert any(line.startswith("interrupted before the first level finished: no level to report") for line in lines)
    assert not (out / "loadtest.json").exists()


@pytest.mark.integration
def test_ctrl_c_in_a_later_level_writes_the_report_of_the_finished_ones_and_exits_130(tiny_spec_path, triton,
                                                                                      tmp_path):
    out = tmp_path / "report"
    code, lines, said = _interrupt_when(["loadtest", str(tiny_spec_path), "--url", triton.grpc_url, "--sweep", "1,2",
                                         "-t", "4", "--warmup", "1", "--out", str(out)], seen="level 2/2")
    text = "\n".join(lines)
    assert code == 130, text
    assert 0 <= said < SAID_WITHIN_S and "interrupted: writing the report of the finished levels (1)" in text, text
    summary = json.loads((out / "loadtest.json").read_text())
    assert [row["level"] for row in summary["levels"]] == [1]
    assert summary["incomplete"].startswith("interrupted (Ctrl-C) during users 2: the report holds the 1 of 2 levels")
    assert lines[-1].startswith("INCOMPLETE: interrupted (Ctrl-C) during users 2")


@pytest.mark.integration
def test_ctrl_c_while_up_starts_its_server_stops_it_and_exits_130(tiny_spec_path, tmp_path):
    out = tmp_path / "up"
    code, lines, said = _interrupt_when(["up", str(tiny_spec_path), "--out", str(out)], seen="[5/7] serve: starting")
    text = "\n".join(lines)
    assert code == 130, text
    assert 0 <= said < SAID_WITHIN_S, text
    assert "nothing finished before Ctrl-C: no report (the load test had not begun)" in text
    assert lines[-1] == "[7/7] stop: stopping tritonserver"
    assert not (out / "loadtest.json").exists()


@pytest.mark.integration
def test_up_serves_load_tests_and_reports(tiny_spec_path, tmp_path):
    data = yaml.safe_load(tiny_spec_path.read_text())
    # The hf runtime sizes its CPU KV cache from free memory; a second server next to the session's must not
    # claim most of what is left.
    data["serving"]["kv_cache"]["free_gpu_mem_fraction"] = 0.1
    data["validation"]["load"].update(users=2, spawn_rate=2, duration_s=5, warmup_s=1, sweep=[1, 2])
    data["validation"]["slo"]["min_output_tokens_per_s"] = 1  # the gate, not this shared machine's speed
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    out = tmp_path / "up"
    proc = tritongen("up", str(spec), "--out", str(out), timeout=400)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for stage in ("[1/7] validate", "[3/7] render", "[4/7] verify", "[5/7] serve: ready", "[6/7] loadtest",
                  "[7/7] stop", "verdict: PASS", "capacity: "):
        assert stage in proc.stdout, proc.stdout
    summary = json.loads((out / "loadtest.json").read_text())
    assert summary["slo"]["passed"] and [row["level"] for row in summary["levels"]] == [1, 2]
    assert summary["capacity"]["level"] is not None and summary["capacity"]["rule"] == "min_capacity"
    assert all(row["tokens"]["equal"] for row in summary["levels"])
    assert (out / "sweep.png").is_file()
    assert (out / "model_repository" / "ensemble" / "config.pbtxt").is_file()
    assert (out / "loadtest.html").is_file()


@pytest.mark.integration
def test_model_flag_is_checked_before_any_load(tiny_spec_path, tmp_path):
    from tritongen.ports import free_port

    url = f"127.0.0.1:{free_port()}"
    proc = tritongen("loadtest", str(tiny_spec_path), "--url", url, "--protocol", "openai", "--model", "ensemble",
                     "--out", str(tmp_path / "openai"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip().startswith("error: --model: does not apply here") and "drop --model" in proc.stderr
    # An explicit ensemble with cancellations is allowed; the down server then ends the run with exit 3 before any
    # load. With serving.ensemble: triton it warns that they will not stop generation; with the default (the BLS
    # under the name ensemble) a cancellation does, and nothing is said.
    proc = tritongen("loadtest", str(tiny_spec_path), "--url", url, "--protocol", "grpc", "--model", "ensemble",
                     "--cancel-rate", "0.5", "--out", str(tmp_path / "grpc"))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "checks cancellation only between steps" not in proc.stdout
    data = yaml.safe_load(tiny_spec_path.read_text())
    data.setdefault("serving", {})["ensemble"] = "triton"
    scheduler = tmp_path / "scheduler.yaml"
    scheduler.write_text(yaml.safe_dump(data, sort_keys=False))
    proc = tritongen("loadtest", str(scheduler), "--url", url, "--protocol", "grpc", "--model", "ensemble",
                     "--cancel-rate", "0.5", "--out", str(tmp_path / "grpc-scheduler"))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "checks cancellation only between steps" in proc.stdout


def test_a_prompts_file_row_with_min_tokens_above_max_tokens_is_refused_before_sending(tiny_model, tmp_path):
    """Triton's vLLM backend would fail such a request without saying why (its sampling error is swallowed), so
    the load test refuses the row, naming the file, the line and both values."""
    from tritongen.loadtests.workload import LocustConfig, PromptSource, load_tokenizer
    from tritongen.plan.load import load_profile
    from tritongen.spec import LoadSection

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"text_input": "ok", "max_tokens": 4, "min_tokens": 4}\n'
                       '{"text_input": "too few", "max_tokens": 4, "min_tokens": 5}\n')
    profile = load_profile(LoadSection(prompts_file=str(prompts)), str)
    config = LocustConfig(profile=profile, url="x:1", samples_dir=str(tmp_path), tokenizer_dir=str(tiny_model),
                          level=1, add_special_tokens=False)
    with pytest.raises(ValueError) as info:
        PromptSource(config, load_tokenizer(str(tiny_model)))
    assert str(info.value) == (f"{prompts}: line 2: min_tokens (5) is more than max_tokens (4); lower min_tokens or "
                               "raise max_tokens")
    prompts.write_text('{"text_input": "ok", "max_tokens": 4, "min_tokens": 4}\n')
    assert PromptSource(config, load_tokenizer(str(tiny_model))).next().min_tokens == 4
