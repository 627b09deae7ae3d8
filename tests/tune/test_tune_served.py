"""`tritongen tune` for real: two trials on one embedded tritonserver, the second applied by reloading the changed
model through explicit model control, each measured by the load test with its token check."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys

import pytest
import yaml

from tritongen.tune import TuneOptions, tune
from tritongen.tune.served import ServedEvaluator

pytestmark = pytest.mark.integration


def _spec(tmp_path, tiny_model):
    spec = {
        "version": 1, "name": "served-tune", "runtime": "synthetic", "model": {"checkpoint": str(tiny_model)},
        "synthetic": {"engine": {"enabled": True, "step_base_ms": 10, "per_sequence_ms": 0.5,
                                 "per_prefill_token_ms": 0.02}},
        "serving": {"max_batch_size": 8, "streaming": True, "max_tokens_default": 8,
                    "kv_cache": {"max_tokens": 4096}},
        "placement": {"device": "cpu"},
        "validation": {"load": {"users": 4, "spawn_rate": 100, "duration_s": 3, "warmup_s": 1, "protocol": "grpc",
                                "input_tokens": {"mean": 8, "stddev": 0}, "output_tokens": {"mean": 8}},
                       "slo": {"ttft_p95_ms": 2000, "itl_p95_ms": 500}},
    }
    path = tmp_path / "served.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def test_a_served_tune_reuses_one_server_and_reloads_what_changed(tmp_path, tiny_model):
    path = _spec(tmp_path, tiny_model)
    # Only the stream interval varies: it is a parameter of the tensorrt_llm model alone, so trial 1 reloads it.
    proc = subprocess.run([sys.executable, "-m", "tritongen.cli", "tune", str(path), "--budget", "2", "--rounds", "1",
                           "--out", str(tmp_path / "out"), "--knob", "serving.max_batch_size=8",
                           "--knob", "serving.kv_cache.max_tokens=4096", "--knob", "serving.stream_interval=1:8",
                           "--confirm", "0"],
                          capture_output=True, text=True, timeout=400, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    progress = [line for line in proc.stdout.splitlines() if line.startswith("[trial ")]
    assert len(progress) == 2
    with open(tmp_path / "out" / "trials.csv") as f:
        rows = list(csv.DictReader(f))
    # Trial 0 is the spec's own settings (stream interval 1); trial 1 the sampler's.
    assert rows[0]["serving.stream_interval"] == "1"
    second = "(reused)" if rows[1]["serving.stream_interval"] == "1" else "(reloaded tensorrt_llm)"
    # The note opens with how the trial was served (a loaded host adds its mark after it).
    assert "(started" in progress[0] and second[:-1] in progress[1], progress
    # Every trial was measured by the real load test: requests served, the client's token total equal to the
    # server's counter, no errors.
    assert [r["tokens_equal"] for r in rows] == ["True", "True"] and all(float(r["goodput"]) > 0 for r in rows)
    assert all(r["errors"] == "0" for r in rows)
    assert len(list((tmp_path / "out" / "trials").glob("*/round-1/loadtest.json"))) == 2
    # Triton's own log counts the loads: every model once at the start, then tensorrt_llm alone for trial 1.
    log = (tmp_path / "out" / "tritonserver.log").read_text()
    loads = {m: log.count(f"successfully loaded '{m}'") for m in ("ensemble", "preprocessing", "postprocessing",
                                                                   "tensorrt_llm_bls", "tensorrt_llm")}
    reloaded = 1 if second == "(reloaded tensorrt_llm)" else 0
    assert loads == {"ensemble": 1, "preprocessing": 1, "postprocessing": 1, "tensorrt_llm_bls": 1,
                     "tensorrt_llm": 1 + reloaded}, loads


class ServerDiesInTrial(ServedEvaluator):
    """The real evaluator, whose server is stopped (SIGTERM, as the hf model does when its generation loop dies)
    just before trial `at`'s load test."""

    def __init__(self, at: int, **kw):
        super().__init__(**kw)
        self.at = at

    def _rounds(self, plan, load, n, report, where):
        if len(self.calls) == self.at + 1:
            os.kill(self.run.server.process.pid, signal.SIGTERM)
            self.run.server.process.wait(timeout=60)
        return super()._rounds(plan, load, n, report, where)


def test_a_trial_whose_server_dies_fails_alone_and_the_next_trial_starts_a_fresh_server(tmp_path, tiny_model):
    spec = _spec(tmp_path, tiny_model)
    out = (tmp_path / "out").resolve()
    evaluator = ServerDiesInTrial(1, spec_dir=tmp_path.resolve(), out=out, rounds=1)
    lines: list[str] = []
    assert tune(TuneOptions(spec=str(spec), budget=3, rounds=1, out=str(out), confirm=0,
                            knobs=["serving.max_batch_size=8", "serving.kv_cache.max_tokens=4096",
                                   "serving.stream_interval=1:8"]), evaluator=evaluator, say=lines.append) == 0
    progress = [line for line in lines if line.startswith("[trial ")]
    assert len(progress) == 3
    assert "failed: tritonserver exited with code 0 during the load test" in progress[1], progress[1]
    assert "(restarted" in progress[2], progress[2]
    assert (out / "trials" / "001" / "tritonserver.log").is_file()
    with open(out / "trials.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["state"] for r in rows] == ["complete", "failed", "complete"]
    assert rows[2]["tokens_equal"] == "True" and float(rows[2]["goodput"]) > 0 and rows[2]["errors"] == "0"
    assert evaluator.run.restarts == 2


def test_a_smaller_batch_keeps_the_tokenizer_models_loaded_and_a_larger_one_reloads_them(tmp_path, tiny_model):
    from tritongen.plan.make import make_plan
    from tritongen.render import render_for
    from tritongen.spec import parse_spec
    from tritongen.orchestrate import _models, keeps

    data = yaml.safe_load(_spec(tmp_path, tiny_model).read_text())

    def models(batch: int) -> dict:
        data["serving"]["max_batch_size"] = batch
        return _models(render_for(make_plan(parse_spec(data), tmp_path)))

    big, small = models(8), models(4)
    changed = sorted(m for m in big if big[m] != small[m])
    assert changed == ["ensemble", "postprocessing", "preprocessing", "tensorrt_llm", "tensorrt_llm_bls"]
    assert [m for m in changed if keeps(m, big[m], small[m])] == ["postprocessing", "preprocessing"]
    assert not [m for m in changed if keeps(m, small[m], big[m])]  # the loaded cap must cover the new one


def test_ctrl_c_while_a_trial_starts_its_server_says_so_and_exits_130(tmp_path, tiny_model):
    import queue
    import threading
    import time

    path, out = _spec(tmp_path, tiny_model), tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "tritongen.cli", "tune", str(path), "--budget", "2", "--out",
                             str(out)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x.rstrip("\n")) for x in proc.stdout], daemon=True).start()
    got = [lines.get(timeout=120)]
    assert got[0].startswith(f"tune {path}"), got
    # Into trial 0, its server starting: the study's store exists by then (a fixed 1 s was too early beside a CPU
    # hog, and the line then rightly had no resume hint).
    from tritongen.tune.study import STORE

    deadline = time.monotonic() + 120
    while not (out / STORE).is_file() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
    assert (out / STORE).is_file(), "tune made no study store"
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    sent = time.monotonic()
    got.append(lines.get(timeout=5))
    said = time.monotonic() - sent
    proc.wait(timeout=120)
    while not lines.empty():
        got.append(lines.get())
    text = "\n".join(got)
    assert proc.returncode == 130, text
    assert got[1] == "interrupted (Ctrl-C): stopping the trial in flight; the table holds the trials that finished"
    assert said < 3.0, text  # at once; 3 s leaves room for a loaded CI host
    assert got[-1] == f"interrupted before the first trial finished: no trial to report; resume with --resume {out}"
