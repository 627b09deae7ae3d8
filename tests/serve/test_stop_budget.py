"""A stop under streaming load with the stop budget (plan/deploy.py StopBudget): SIGTERM to tritonserver while
streams run through every entry at once (tensorrt_llm_bls, ensemble, and tensorrt_llm directly). The server must
exit 0 inside its grace period, and every stream end with one final response: the stopping error once the drain
is over. The synthetic runtime on CPU (native token source, native BLS); bench/native_stop.py is the same at
256 streams."""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "native"))

from specs import apply_overrides, render_spec  # noqa: E402
from stopclients import Streams  # noqa: E402

from tritongen.plan.deploy import StopBudget  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.serial]  # the server's exit within its grace period

GRACE_S = 20  # the smallest grace period with the whole allowances (serve): drain 5 s, --exit-timeout-secs=17
ENTRIES = ("tensorrt_llm_bls", "ensemble", "tensorrt_llm")
PER_ENTRY = 6


def _render(tiny_model: Path, out: Path, example: str = "synthetic-cpu", **overrides) -> Path:
    data = yaml.safe_load((ROOT / "examples" / f"{example}.yaml").read_text())
    data["model"]["checkpoint"] = str(tiny_model)
    apply_overrides(data, overrides)
    spec = out.parent / f"{out.name}.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    render_spec(spec, out)
    return out


def _stop_under_load(repo: Path, tmp_path: Path, per_entry: int, max_tokens: int, min_tokens: int = 0) -> None:
    """SIGTERM to tritonserver with `per_entry` streams through each entry; asserts the stop's outcome."""
    from tritongen.serve import TritonServer

    budget = StopBudget.of(GRACE_S, "serve")
    server = TritonServer(repo, log_path=tmp_path / "tritonserver.log", grace_s=GRACE_S, supervise=False).start(300)
    try:
        stubs = list(server._stub_processes())
        streams = {m: Streams(server.grpc_url, per_entry, model=m, max_tokens=max_tokens, min_tokens=min_tokens).start()
                   for m in ENTRIES}
        for s in streams.values():
            s.wait_streaming()
        t0 = time.monotonic()
        os.kill(server.process.pid, signal.SIGTERM)  # as a container runtime stops the pod's main process
        code = server.process.wait(timeout=GRACE_S + 30)
        took = time.monotonic() - t0
        outcomes = {m: s.join(timeout=30) for m, s in streams.items()}
        regions = set(server.shm_regions)
    finally:
        server.stop(grace=5)
    log = (tmp_path / "tritonserver.log").read_text(errors="replace")
    assert code == 0, server.log_tail(60)
    assert "Exit timeout expired" not in log, server.log_tail(60)
    assert re.findall(r"Signal \((\d+)\)", log) == ["15"], server.log_tail(60)  # SIGTERM, no crash signal
    assert "Segmentation fault" not in log
    # The drain ran (streams kept streaming), and the rest of the budget was enough: no exit timeout.
    assert budget.drain_s <= took < budget.exit_timeout_s, (took, budget.describe())
    for model, rows in outcomes.items():
        ended = [(o.ending, o.responses, o.message[:120]) for o in rows if not (o.ending == "error" and
                                                                   "the server is stopping" in o.message)]
        assert ended == [], (model, ended)
    alive = [p for p in stubs if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert alive == [] and [r for r in regions if (Path("/dev/shm") / r).exists()] == []


def test_sigterm_under_load_drains_every_entry_within_the_grace_period(tiny_model, tmp_path):
    """Synthetic runtime: the native BLS and the native token source drain."""
    repo = _render(tiny_model, tmp_path / "repo", **{"synthetic.ttft_ms": 5, "synthetic.itl_ms": 10})
    _stop_under_load(repo, tmp_path, PER_ENTRY, 100000)


def test_sigterm_under_load_drains_every_entry_of_the_hf_runtime(tmp_path):
    """hf runtime: the hf python model drains its own streams (pb_utils.is_model_ready sees the stop), so streams
    sent to it directly end with the stopping error too, and its stub exits 0."""
    from tritongen.demo.model import make_demo_model

    # One stream per entry of 15,000 tokens from a tiny model with 16,384 positions, KV for all three: a stream
    # outlasts the drain (5 s, starting up to ~1.5 s after SIGTERM) unless the hf loop made over 2,000 tokens/s a
    # stream; it makes 100-300 on 2 cores (at 2,048 positions a stream once finished inside the drain).
    model = make_demo_model(tmp_path / "long-llama", max_positions=16384)
    repo = _render(model, tmp_path / "repo", "tiny-cpu", **{"serving.kv_cache.max_tokens": 3 * 16384})
    _stop_under_load(repo, tmp_path, 1, 15000, min_tokens=15000)


def _refused_requests(server) -> list[str]:
    """Requests tritonserver refuses at input validation, each from a client that closes its stream or
    connection afterwards, as tritongen's own clients do (generate, the OpenAI frontend, loadtest's users)."""
    import json
    import queue
    import urllib.error
    import urllib.request

    import numpy as np
    import tritonclient.grpc as grpcclient

    from streaming_text import grpc_tensor

    said = []
    for model in ("ensemble", "tensorrt_llm_bls"):
        results: queue.Queue = queue.Queue()
        client = grpcclient.InferenceServerClient(server.grpc_url)
        client.start_stream(callback=lambda result, error: results.put(error))
        client.async_stream_infer(model, [grpc_tensor("text_input", np.array([[1]], np.int32))])
        said.append(str(results.get(timeout=30)))
        client.stop_stream()
        client.close()
    request = urllib.request.Request(f"http://{server.http_url}/v2/models/tensorrt_llm_bls/generate",
                                     data=json.dumps({"max_tokens": 2}).encode(), method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)
    said.append(refused.value.read().decode())
    return said


def test_idle_hf_server_stops_in_seconds_without_a_crashed_stub_also_after_refused_requests(tiny_repo, tmp_path):
    """The hf model's stub exits 0 on unload (it died by SIGSEGV in the interpreter's teardown on every unload),
    and an idle stop takes seconds, also after requests tritonserver refused. (It also stayed UNLOADING to the exit
    timeout when its drain watcher logged through pb_utils.Logger while the server finalized it: served/stub.py
    stderr_log; 23 clean runs since, 20 in loops and 3 in fresh-clone CI runs.)"""
    from tritongen.serve import TritonServer

    log = tmp_path / "tritonserver.log"
    server = TritonServer(tiny_repo, log_path=log, grace_s=30).start(300)
    try:
        said = _refused_requests(server)
        t0 = time.monotonic()
        server.stop()
        took = time.monotonic() - t0
    finally:
        server.stop(grace=5)
    assert all("text_input" in s for s in said), said
    assert server.process.returncode == 0, server.log_tail(40)
    assert server.stop_warnings == []
    assert "Segmentation fault" not in log.read_text(errors="replace")
    assert took < 5, (took, server.log_tail(30))


def test_the_drain_asks_the_servers_http_endpoint_not_the_stubs_ipc(tiny_repo, tmp_path):
    """served/stub.py server_ready_probe: from tritonserver's own command line, the model's readiness over HTTP
    (True while loaded, False for a model it does not serve and once the server is gone); a parent that is not
    tritonserver keeps the IPC answer it was given."""
    from tritongen.serve import TritonServer
    from tritongen.served.stub import server_ready_probe

    def ipc(name):
        return "ipc"

    assert server_ready_probe(ipc, pid=os.getpid()) is ipc
    server = TritonServer(tiny_repo, log_path=tmp_path / "tritonserver.log", grace_s=10).start(300)
    try:
        probe = server_ready_probe(ipc, pid=server.process.pid)
        assert probe is not ipc
        assert probe("tensorrt_llm") is True and probe("ensemble") is True
        assert probe("no_such_model") is False
    finally:
        server.stop(grace=10)
    assert probe("tensorrt_llm") is False  # the port refuses the connection
