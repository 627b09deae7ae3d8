"""The synthetic engine model: one schedule, in python (tritongen.served.engine_model) and in the native
token source's header (generator/tritongen/native/engine_model.h), checked against each other and against the
formula by hand."""

from __future__ import annotations

import random
import shutil
import subprocess
from pathlib import Path

import pytest

from tritongen.served.engine_model import EngineParams, SimRequest, simulate, step_ms

ROOT = Path(__file__).resolve().parents[2]
NATIVE = ROOT / "generator" / "tritongen" / "native"


def test_a_step_takes_base_plus_per_sequence_plus_per_prefill_token():
    p = EngineParams(step_base_ms=10, per_sequence_ms=1, per_prefill_token_ms=0.1, max_batch=4)
    assert step_ms(p, running=3, prefill_tokens=20) == pytest.approx(10 + 3 + 2)


def test_requests_beyond_max_batch_or_kv_capacity_queue():
    p = EngineParams(step_base_ms=10, per_sequence_ms=1, per_prefill_token_ms=0.1, max_batch=2)
    reqs = [SimRequest(0, 10, 3, []), SimRequest(0, 20, 2, []), SimRequest(5, 5, 2, [])]
    simulate(p, reqs)
    # Step 1 admits the first two (batch 2, 30 prefill tokens); the third waits for a free slot.
    assert reqs[0].times_ms == pytest.approx([15, 27, 39.5])
    assert reqs[1].times_ms == pytest.approx([15, 27])
    assert reqs[2].times_ms == pytest.approx([39.5, 50.5])
    # A KV capacity of 30 tokens holds the first request (13 tokens) but not the first two (35): one at a time.
    kv = EngineParams(step_base_ms=10, per_sequence_ms=1, per_prefill_token_ms=0.0, max_batch=8, kv_tokens=30)
    reqs = [SimRequest(0, 10, 3, []), SimRequest(0, 20, 2, [])]
    simulate(kv, reqs)
    assert reqs[0].times_ms == pytest.approx([11, 22, 33]) and reqs[1].times_ms == pytest.approx([44, 55])


def _workload(seed: int, n: int) -> list[tuple[float, int, int]]:
    rng = random.Random(seed)
    t, rows = 0.0, []
    for _ in range(n):
        t += rng.expovariate(1 / 15)
        rows.append((round(t, 3), rng.randint(1, 300), rng.randint(1, 40)))
    return rows


@pytest.fixture(scope="module")
def driver(tmp_path_factory) -> Path:
    """tests/tune/engine_driver.cc (engine_model.h's EngineCore on a virtual clock), compiled."""
    if shutil.which("g++") is None:
        pytest.skip("needs g++ (the native token source's compiler)")
    exe = tmp_path_factory.mktemp("native") / "engine_driver"
    subprocess.run(["g++", "-std=c++17", "-O1", f"-I{NATIVE}", str(Path(__file__).with_name("engine_driver.cc")),
                    "-o", str(exe)], check=True, capture_output=True, timeout=120)
    return exe


@pytest.mark.parametrize("max_batch, kv_tokens", [(3, 0), (16, 900), (64, 0)])
def test_native_and_python_engine_models_give_every_token_the_same_time(driver, max_batch, kv_tokens):
    exe = driver
    params = EngineParams(step_base_ms=8.5, per_sequence_ms=0.37, per_prefill_token_ms=0.021, max_batch=max_batch,
                          kv_tokens=kv_tokens)
    rows = _workload(max_batch, 120)
    stdin = f"{len(rows)}\n" + "".join(f"{a} {p} {n}\n" for a, p, n in rows)
    native = subprocess.run([str(exe), "8.5", "0.37", "0.021", str(max_batch), str(kv_tokens)], input=stdin,
                            capture_output=True, text=True, check=True, timeout=60).stdout.splitlines()
    reqs = [SimRequest(a, p, n, []) for a, p, n in rows]
    simulate(params, reqs)
    assert len(native) == len(reqs)
    for line, r in zip(native, reqs):
        assert [float(x) for x in line.split()] == pytest.approx(r.times_ms, abs=1e-5)
    # The schedule is not trivial: some requests queued (a first token later than one step after arrival).
    assert any(r.times_ms[0] - r.arrival_ms > 3 * params.step_base_ms for r in reqs)
