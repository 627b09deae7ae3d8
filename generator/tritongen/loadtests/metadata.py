"""What was measured on what: the metadata every load-test report carries, and the load generator's own CPU use.

A load generator that saturates its CPU measures itself, not the server: latencies then include the client's
queueing. Each Locust process records its CPU time over the test (`record_process_cpu`, called from the
locustfile); the report warns loudly when any process used more than `CPU_WARN_FRACTION` of a core.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import socket
import time
from importlib import metadata as importlib_metadata
from pathlib import Path

# pynvml is imported inside the try that handles a host without NVML.

CPU_WARN_FRACTION = 0.8
CPU_FILE_PREFIX = "cpu"


def _version(dist: str) -> str | None:
    try:
        return importlib_metadata.version(dist)
    except importlib_metadata.PackageNotFoundError:
        return None


def hardware() -> dict:
    """GPUs through NVML when there are any, else the CPU model; of the load generator's host."""
    gpus = []
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            for i in range(pynvml.nvmlDeviceGetCount()):
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
                name = pynvml.nvmlDeviceGetName(h)
                gpus.append({"index": i, "name": name.decode() if isinstance(name, bytes) else name,
                             "memory_total_bytes": int(pynvml.nvmlDeviceGetMemoryInfo(h).total)})
            driver = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - no NVML library or no GPU: report the CPU instead
        gpus, driver = [], None
    cpu = platform.processor() or None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"host": socket.gethostname(), "gpus": gpus,
            "gpu_driver": driver.decode() if isinstance(driver, bytes) else driver,
            "cpu_model": cpu, "cpu_count": os.cpu_count()}


def digest(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def run_metadata(plan, server_info: dict | None, workload: dict, spec_path: str | None = None) -> dict:
    """The report's `metadata` object (see docs/loadtest-report.md)."""
    spec_digest = None
    if spec_path and Path(spec_path).is_file():
        spec_digest = digest(Path(spec_path).read_text())
    return {
        "spec_digest": spec_digest,
        "plan_digest": digest(plan.to_json()),
        "runtime": plan.runtime,
        "model": plan.paths.checkpoint,
        "tokenizer": plan.tokenizer.dir,
        "server": {"name": (server_info or {}).get("name"), "version": (server_info or {}).get("version")},
        "versions": {"tritongen": _version("tritongen"), "transformers": _version("transformers"),
                     "torch": _version("torch"), "locust": _version("locust"),
                     "tritonclient": _version("tritonclient"), "python": platform.python_version()},
        "hardware": hardware(),
        "workload": workload,
    }


# --- the load generator's CPU, recorded by each Locust process ---------------------------------------------

class ProcessCPU:
    """CPU seconds of this process between `start` and `stop`, written to `<dir>/cpu-<host>-<pid>.json`."""

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)
        self.t0 = self.c0 = None

    @staticmethod
    def _cpu() -> float:
        t = os.times()
        return t.user + t.system

    def start(self) -> None:
        self.t0, self.c0 = time.monotonic(), self._cpu()

    def stop(self, role: str) -> None:
        if self.t0 is None:
            return
        wall, cpu = time.monotonic() - self.t0, self._cpu() - self.c0
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / f"{CPU_FILE_PREFIX}-{socket.gethostname()}-{os.getpid()}.json"
        path.write_text(json.dumps({"pid": os.getpid(), "role": role, "wall_s": wall, "cpu_s": cpu}) + "\n")
        self.t0 = None


def load_generator_cpu(directory: str | Path) -> dict:
    """The report's `load_generator` object: CPU use per Locust process and the warning, if any."""
    processes = []
    for path in sorted(Path(directory).glob(f"{CPU_FILE_PREFIX}-*.json")):
        try:
            row = json.loads(path.read_text())
        except ValueError:
            continue
        row["cpu_fraction"] = row["cpu_s"] / row["wall_s"] if row["wall_s"] > 0 else None
        processes.append(row)
    busiest = max((p["cpu_fraction"] for p in processes if p["cpu_fraction"] is not None), default=None)
    warning = None
    if busiest is not None and busiest > CPU_WARN_FRACTION:
        warning = (f"WARNING: a Locust process used {busiest:.0%} of a CPU core (> {CPU_WARN_FRACTION:.0%}): the load "
                   "generator, not the server, may be the bottleneck; latencies include client queueing. Use "
                   "--processes N or a bigger load-generator host.")
    return {"processes": processes, "max_cpu_fraction": busiest, "warning": warning}
