"""A dead stub is named with its signal, likely cause and fix; the log summary drops lines that do not apply."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from tritongen.serve.causes import KV_FIX, exit_status, fatal_cause, stub_death, summary


def _zombie(sig: int | None, code: int = 0) -> subprocess.Popen:
    """A child that died (by `sig`, else exiting with `code`) and is not reaped yet, as a stub is until
    tritonserver collects it."""
    child = subprocess.Popen([sys.executable, "-c", f"import sys, time; time.sleep(60) if {sig is not None} else "
                                                    f"sys.exit({code})"])
    if sig is not None:
        os.kill(child.pid, sig)
    deadline = time.monotonic() + 10
    while exit_status(child.pid) is None:
        assert time.monotonic() < deadline, "the child never became a zombie"
        time.sleep(0.05)
    return child


def test_a_stub_killed_by_sigkill_is_named_with_the_oom_killer_and_the_kv_fix():
    child = _zombie(signal.SIGKILL)
    try:
        line = stub_death("model 'tensorrt_llm'", child.pid, exit_status(child.pid), None, None)
    finally:
        child.wait()
    assert line.startswith(f"the python stub of model 'tensorrt_llm' (pid {child.pid}) was killed by SIGKILL: "
                           "the kernel's OOM killer")
    assert line.endswith(KV_FIX)


def test_other_signals_and_exit_codes_are_named_as_such(tmp_path):
    segv, exited = _zombie(signal.SIGSEGV), _zombie(None, 3)
    try:
        crashed = stub_death("model 'x'", segv.pid, exit_status(segv.pid), None, tmp_path / "t.log")
        ended = stub_death("model 'x'", exited.pid, exit_status(exited.pid), None, tmp_path / "t.log")
    finally:
        segv.wait()
        exited.wait()
    assert "was killed by SIGSEGV; see the full log: " in crashed
    assert "exited with code 3" in ended


def test_summary_drops_cuda_lines_on_a_machine_without_gpu_and_points_at_the_full_log(tmp_path):
    log = tmp_path / "tritonserver.log"
    log.write_text("W1203 cuda_driver.cc] CUDA driver version is insufficient for CUDA runtime version\n"
                   "+----------+--------+\n| Option   | Value  |\n"
                   "E1203 python_be.cc] Stub process 'tensorrt_llm_0_0' is not healthy.\n")
    text = summary(log)
    assert "Stub process 'tensorrt_llm_0_0' is not healthy" in text
    assert text.endswith(f"(the full log: {log})")
    if not os.path.exists("/proc/driver/nvidia/version"):
        assert "CUDA driver version" not in text and "| Option" not in text


def test_the_cause_a_model_gave_for_stopping_the_server_is_read_from_its_log(tmp_path):
    # Lines of a tune trial's log on the H100 host (hf runtime, 4 instances with 82,771 KV tokens each).
    log = tmp_path / "tritonserver.log"
    log.write_text(
        'E1205 17:25:01.868140 819 model_repository_manager.cc:703] "Invalid argument: ensemble ensemble allows '
        'maximum batch size 199, but it contains model tensorrt_llm_bls which only allows maximum batch size to be 31"\n'
        'E1205 17:25:08.871172 819 model.py:503] "tensorrt_llm: the generation loop died: OutOfMemoryError(\'CUDA out '
        'of memory. Tried to allocate 502.00 MiB. GPU 0 has a total capacity of 79.18 GiB of which 196.25 MiB is free.'
        '\'); failing 0 active request(s)"\n'
        'E1205 17:25:08.871387 819 model.py:523] "tensorrt_llm: asking tritonserver (pid 819) to shut down"\n'
        "Signal (15) received.\n")
    cause = fatal_cause(log, width=80)
    assert cause.startswith("the generation loop died: OutOfMemoryError('CUDA out of memory. Tried to allocate "
                            "502.00 MiB.") and cause.endswith("...")
    assert len(cause) == len("the generation loop died: ") + 80
    log.write_text("Signal (15) received.\n")
    assert fatal_cause(log) is None and fatal_cause(tmp_path / "missing.log") is None
