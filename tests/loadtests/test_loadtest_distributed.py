"""Distributed load generation: `tritongen loadtest --workers 2` on Locust's master/worker mode against the real
embedded tritonserver (session `triton` fixture)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import yaml
from specs import run_cli

ROOT = Path(__file__).resolve().parents[2]


def _ensemble_success(metrics_url: str) -> float:
    """nv_inference_request_success of the ensemble, read here (not through tritongen.loadtests.prom)."""
    text = urllib.request.urlopen(metrics_url, timeout=10).read().decode()
    found = re.findall(r'^nv_inference_request_success\{[^}]*model="ensemble"[^}]*\} (\S+)$', text, re.M)
    assert len(found) == 1, text[:2000]
    return float(found[0])


def _cli(*args: str, timeout: float = 400) -> subprocess.CompletedProcess:
    return run_cli(*args, timeout=timeout, cwd=ROOT)


@pytest.mark.slow  # three CLI subprocesses
def test_distribution_flags_are_checked(tiny_spec_path, tmp_path):
    proc = _cli("loadtest", str(tiny_spec_path), "--master", "--url", "127.0.0.1:9", "--no-metrics", timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("error: --master: needs --workers N")
    proc = _cli("loadtest", str(tiny_spec_path), "--workers", "2", "--processes", "2", "--url", "127.0.0.1:9",
                "--no-metrics", timeout=120)
    assert proc.returncode == 2 and "--processes: cannot be combined with --workers" in proc.stderr
    proc = _cli("loadtest", str(tiny_spec_path), "--worker", "--url", "127.0.0.1:9", timeout=120)
    assert proc.returncode == 2 and "--worker: needs --master-host" in proc.stderr


@pytest.mark.integration
def test_two_workers_merge_into_one_report(tiny_spec_path, triton, tmp_path):
    data = yaml.safe_load(tiny_spec_path.read_text())
    data["validation"]["load"].update(users=4, spawn_rate=4, duration_s=6, warmup_s=0, sweep=[],
                                      output_tokens={"mean": 8, "stddev": 0})
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    out = tmp_path / "report"
    before = _ensemble_success(triton.metrics_url)
    proc = _cli("loadtest", str(spec), "--url", triton.grpc_url, "--metrics-url", triton.metrics_url,
                "--workers", "2", "--out", str(out))
    after = _ensemble_success(triton.metrics_url)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr

    merged = sorted((out / "samples" / "level-4").glob("samples-*.jsonl"))
    assert len(merged) == 2 and all(p.name.startswith("samples-worker-") for p in merged), merged
    lines = [json.loads(line) for p in merged for line in p.read_text().splitlines()]
    assert all(p.read_text().strip() for p in merged), "each worker ran users and forwarded samples"
    # Every sample a worker recorded reached the master, once.
    local = [line for p in sorted((out / "workers").glob("worker*/samples/samples-*.jsonl"))
             for line in p.read_text().splitlines()]
    assert sorted(json.loads(x)["request_id"] for x in local) == sorted(s["request_id"] for s in lines)
    assert {s["level"] for s in lines} == {4}

    ok = [s for s in lines if s["error"] is None]
    assert len(ok) == len(lines) > 0
    # Merged samples equal the server's own count of completed ensemble requests.
    assert after - before == len(ok)
    summary = json.loads((out / "loadtest.json").read_text())
    level = summary["levels"][0]
    assert level["metrics"]["request_count"] == len(lines)
    ensemble = next(m for m in level["server_run"]["models"] if m["model"] == "ensemble")
    assert ensemble["request_success"] == len(ok)
    assert level["tokens"]["equal"] is True and {s["output_tokens"] for s in ok} == {8}


@pytest.mark.slow  # a master and two workers, each a CLI subprocess
@pytest.mark.integration
def test_workers_started_elsewhere_share_the_masters_open_loop_rate(tiny_spec_path, triton, tmp_path):
    """Workers started from the plan alone (`--worker --master-host`, as the generated compose and Kubernetes load
    tests run them) send the master's rate between them, not each the whole rate."""
    from tritongen.ports import free_port

    rate, duration = 3.0, 6.0
    data = yaml.safe_load(tiny_spec_path.read_text())
    data["validation"]["load"].update(users=8, spawn_rate=8, duration_s=duration, warmup_s=0, sweep=[],
                                      request_rate=rate, arrival="constant", output_tokens={"mean": 4, "stddev": 0})
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    out, port = tmp_path / "report", str(free_port())
    cli = [sys.executable, "-m", "tritongen.cli", "loadtest", str(spec), "--url", triton.grpc_url]
    master = subprocess.Popen([*cli, "--metrics-url", triton.metrics_url, "--master", "--workers", "2",
                               "--master-port", port, "--master-bind-host", "127.0.0.1", "--out", str(out)],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    workers = [subprocess.Popen([*cli, "--worker", "--master-host", "127.0.0.1", "--master-port", port,
                                 "--out", str(tmp_path / f"worker{i}")], cwd=ROOT, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL) for i in range(2)]
    try:
        log, _ = master.communicate(timeout=400)
    finally:
        for w in workers:
            try:
                w.wait(timeout=60)
            except subprocess.TimeoutExpired:
                w.kill()
    assert master.returncode in (0, 1), log
    files = sorted((out / "samples").rglob("samples-worker-*.jsonl"))
    samples = [json.loads(line) for p in files for line in p.read_text().splitlines()]
    per_worker = {p.name: len(p.read_text().splitlines()) for p in files}
    assert len(per_worker) == 2 and all(per_worker.values()), per_worker
    # Constant arrivals: rate x duration in all (18), each worker about half; each sending the whole rate made 36.
    assert rate * duration * 0.6 <= len(samples) <= rate * duration * 1.3, (len(samples), per_worker)
    assert {s["level"] for s in samples} == {rate}
