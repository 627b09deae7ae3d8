"""Why a tritonserver or one of its python stubs died, in words an operator can act on, and a log summary without
the lines that do not apply to this machine (the full log stays one path away).

A stub is tritonserver's child, not ours, so its exit status is read from /proc/<pid>/stat while it is a zombie
(field 52, `exit_code`, in waitpid's encoding; Linux >= 3.5) before tritonserver reaps it. The kernel's OOM kills
are counted in the cgroup's memory.events (`oom_kill`, cgroup v2) when that file is readable.
"""

from __future__ import annotations

import contextlib
import re
import signal
from pathlib import Path

# Triton lines that say nothing about a failure on a machine without an NVIDIA driver: the CUDA probes of a
# CPU-only start, and the options table it prints at every start.
_NOT_ON_CPU = re.compile(r"CUDA driver version is insufficient|CudaDriverHelper|cuda[A-Za-z]*\(\) failed|"
                         r"Unable to allocate pinned system memory|pinned memory pool|GPU metrics|"
                         r"no CUDA-capable device|failed to (initialize|enable) (peer access|CUDA)", re.I)
_TABLE = re.compile(r"^[+|]")

KV_FIX = ("lower serving.kv_cache.max_tokens (or serving.max_batch_size) in the spec and render again "
          "(`tritongen plan SPEC` shows kv_sizing, how the KV cache was sized), or give the machine more memory")


def exit_status(pid: int) -> int | None:
    """waitpid's status of a zombie process `pid` (exited, not yet reaped by its parent); None otherwise."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    # fields[0] is field 3 (state); exit_code is field 52.
    if not fields or fields[0] != "Z" or len(fields) < 50:
        return None
    return int(fields[49])


def _cgroup_events() -> Path | None:
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            hierarchy, _, path = line.split(":", 2)
            if hierarchy == "0":
                events = Path("/sys/fs/cgroup") / path.lstrip("/") / "memory.events"
                if events.is_file():
                    return events
    return None


def oom_kills() -> int | None:
    """The kernel's OOM kills in this process's cgroup so far (None when not readable)."""
    events = _cgroup_events()
    if events is None:
        return None
    with contextlib.suppress(OSError, ValueError):
        for line in events.read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
    return None


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def stub_death(what: str, pid: int, status: int | None, oom_before: int | None, log_path: Path | None) -> str:
    """One line: which stub died, how (signal, exit code or unknown), the likely cause and the fix."""
    log = f"the full log: {log_path}" if log_path else "the server log"
    who = f"the python stub of {what} (pid {pid})"
    if status is None:
        return (f"{who} died (its exit status was already collected by tritonserver); Triton would keep reporting it "
                f"ready while its requests hang, so the server was stopped; see {log}")
    if status & 0x7F == 0:
        return f"{who} exited with code {(status >> 8) & 0xFF}; see {log}"
    sig = status & 0x7F
    name = signal_name(sig)
    if sig == signal.SIGKILL:
        after = oom_kills()
        if oom_before is not None and after is not None and after > oom_before:
            cause = f"the kernel's OOM killer (cgroup memory.events oom_kill {oom_before} -> {after})"
        else:
            cause = ("the kernel's OOM killer, likely (`dmesg | grep -i oom` or the cgroup's memory.events, where "
                     "readable, say so), or a `kill -9`")
        return f"{who} was killed by SIGKILL: {cause}; {KV_FIX}"
    return f"{who} was killed by {name}; see {log}"


def applies(line: str, gpu: bool) -> bool:
    """Whether a log line belongs in a failure summary on this machine (`gpu`: an NVIDIA driver is present)."""
    return not _TABLE.match(line) and (gpu or not _NOT_ON_CPU.search(line))


def has_nvidia_driver() -> bool:
    return Path("/proc/driver/nvidia/version").exists()


def summary(log_path: Path | None, tail: int = 15) -> str:
    """The log's error lines (model load failures and their reasons), then its tail, without lines that do not
    apply here; the path of the full log last."""
    if log_path is None or not Path(log_path).exists():
        return "(no log)"
    gpu = has_nvidia_driver()
    lines = [line for line in Path(log_path).read_text(errors="replace").splitlines()
             if line.strip() and applies(line, gpu)]
    errors = [line for line in lines if line.startswith("E") or "failed to load" in line or "Traceback" in line
              or "Error" in line]
    tail_lines = [line for line in lines[-tail:] if line not in errors[-30:]]
    return "\n".join(errors[-30:] + (["--- log tail ---", *tail_lines] if tail_lines else [])
                     + [f"(the full log: {log_path})"])


def fatal_cause(log_path: Path | None, width: int = 160) -> str | None:
    """What a tritongen model said when it stopped the server (its generation loop died, e.g. CUDA out of memory),
    shortened to `width` characters; None when no model said so."""
    if log_path is None or not Path(log_path).exists():
        return None
    for line in Path(log_path).read_text(errors="replace").splitlines():
        _, sep, said = line.partition("the generation loop died: ")
        if sep:
            said = said.rstrip('"')
            return "the generation loop died: " + (said if len(said) <= width else said[:width - 3] + "...")
    return None
