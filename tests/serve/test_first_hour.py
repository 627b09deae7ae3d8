"""A first hour with a spec written from `validate --explain` defaults (hf on CPU, the tiny model): it serves in
little memory, two serves side by side each get their own load test, Ctrl-C mid-sweep keeps the finished levels,
and a stub killed by SIGKILL is reported with its cause and the fix. One served deployment for the module."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml

pytestmark = pytest.mark.integration

GIB = 1 << 30


def _spec(path: Path, checkpoint: Path, name: str, runtime: str = "hf") -> Path:
    """Only what `validate --explain` marks as required, plus the CPU placement."""
    path.write_text(yaml.safe_dump({"version": 1, "name": name, "runtime": runtime,
                                    "model": {"checkpoint": str(checkpoint)}, "placement": {"device": "cpu"}}))
    return path


class Served:
    def __init__(self, spec: Path, repo: Path, state: Path, log: Path):
        from specs import render_spec
        from tritongen.serve.state import state_path

        render_spec(spec, repo)
        self.spec, self.repo, self.log = spec, repo, log
        self.env = {**os.environ, "TRITONGEN_STATE": str(state)}
        self.proc = subprocess.Popen([sys.executable, "-m", "tritongen", "serve", str(repo)], stdout=log.open("wb"),
                                     stderr=subprocess.STDOUT, start_new_session=True, env=self.env)
        path = Path(str(state_path(repo, self.proc.pid)).replace(str(state_path(repo).parent), str(state)))
        deadline = time.monotonic() + 300
        while not path.exists():
            assert self.proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.5)
        self.urls = json.loads(path.read_text())

    def tree(self) -> list[psutil.Process]:
        """tritonserver and its python stubs."""
        return [p for p in psutil.Process(self.proc.pid).children(recursive=True)]

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


@pytest.fixture(scope="module")
def served(tmp_path_factory, tiny_model):
    base = tmp_path_factory.mktemp("first-hour")
    server = Served(_spec(base / "mine.yaml", tiny_model, "mine"), base / "repo", base / "state", base / "serve.log")
    yield server
    server.stop()


def _loadtest(served: Served, out: Path, *args: str, **popen) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tritongen", "loadtest", str(served.spec), "-o", str(out),
                             "-u", "1", "-t", "1", "--warmup", "0", "--no-progress", *args], env=served.env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


def test_explained_defaults_serve_the_tiny_model_in_under_1_gib(served):
    from tritongen.client import stream_grpc

    assert "".join(stream_grpc(served.urls["grpc"], "hello", 16, stream=True))
    tree = served.tree()
    # PSS: each process's share of the pages it shares (torch's libraries in every stub), so the sum counts them
    # once; plain RSS would count them once per stub.
    pss = sum(p.memory_full_info().pss for p in tree)
    rss = sum(p.memory_info().rss for p in tree)
    print(f"tritonserver + {len(tree) - 1} stubs: PSS {pss / GIB:.2f} GiB, RSS sum {rss / GIB:.2f} GiB")
    assert pss < GIB
    assert max(p.memory_info().rss for p in tree) < GIB / 2  # no stub sized a cache from free host memory


def test_two_serves_side_by_side_loadtest_spec_reaches_its_own(served, tmp_path, tiny_model):
    other = Served(_spec(tmp_path / "other.yaml", tiny_model, "other", "synthetic"), tmp_path / "repo",
                   Path(served.env["TRITONGEN_STATE"]), tmp_path / "serve.log")
    try:  # the newer server is the other one: a single state file would have sent the load there
        run = _loadtest(served, tmp_path / "out")
        _, err = run.communicate(timeout=180)
        assert run.returncode in (0, 1), err
    finally:
        other.stop()
    report = json.loads((tmp_path / "out" / "loadtest.json").read_text())
    assert report["metadata"]["workload"]["url"] == served.urls["grpc"] != other.urls["grpc"]
    assert f"server 'mine' (repository {served.repo.resolve()}" in err


@pytest.mark.serial  # Ctrl-C must land inside the 1 s second level
def test_ctrl_c_mid_sweep_writes_the_finished_levels_marked_incomplete(served, tmp_path):
    run = _loadtest(served, tmp_path / "out", "--sweep", "1,2")
    for line in run.stdout:
        if line.startswith("level 2/2"):
            break
    os.kill(run.pid, signal.SIGINT)
    out, err = run.communicate(timeout=120)
    assert run.returncode == 130, out + err
    report = json.loads((tmp_path / "out" / "loadtest.json").read_text())
    assert [level["level"] for level in report["levels"]] == [1]
    assert report["incomplete"].startswith("interrupted (Ctrl-C) during users 2")
    assert "INCOMPLETE" in out


def test_a_stub_killed_by_sigkill_is_named_in_serve_output_with_the_fix(served):
    [stub] = [p for p in served.tree() if any(a.endswith("tensorrt_llm/1/model.py") for a in p.cmdline())]
    stub.send_signal(signal.SIGKILL)
    assert served.proc.wait(timeout=60) == 1
    text = served.log.read_text()
    assert f"the python stub of model 'tensorrt_llm' (pid {stub.pid}) was killed by SIGKILL" in text
    assert "lower serving.kv_cache.max_tokens" in text
    if not os.path.exists("/proc/driver/nvidia/version"):
        assert "CUDA driver version is insufficient" not in text.split("serve: ", 1)[1]
