"""The embedded tritonserver: the real server binary shipped in the nvidia-pytriton wheel.

Facts this module relies on (see DESIGN.md): the python backend needs the stub for the running Python version
next to libtriton_python.so; the stub embeds an interpreter that ignores PYTHONPATH but finds `python3` on PATH
and honours the virtual environment it belongs to, and it loads the libpython the loader finds first.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from tritongen.errors import CheckFailed, EnvironmentMissing
from tritongen.readiness import server_ready, wait_until_ready


def _die_with_parent() -> None:
    """Runs in the child before exec: SIGTERM the server when the process that started it dies, so a killed
    test run or CLI never leaves a tritonserver holding ports and cores."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pytriton_root() -> Path:
    try:
        import pytriton
    except ImportError:
        raise EnvironmentMissing("tritonserver: the nvidia-pytriton wheel is not installed; "
                                 "run `pip install nvidia-pytriton` (or `make demo`)") from None
    root = Path(pytriton.__file__).resolve().parent / "tritonserver"
    if not (root / "bin" / "tritonserver").is_file():
        raise EnvironmentMissing(f"tritonserver: {root}/bin/tritonserver is missing; reinstall nvidia-pytriton")
    return root


def backend_dir() -> Path:
    """The wheel's backends folder, with the stub for this Python version copied next to the python backend.

    The stub finds its bundled libraries through a path relative to where the wheel put it, so it is copied
    inside the wheel rather than into a folder of our own.
    """
    root = _pytriton_root()
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = root / "python_backend_stubs" / version / "triton_python_backend_stub"
    if not stub.is_file():
        raise EnvironmentMissing(f"tritonserver: no python backend stub for Python {version} in nvidia-pytriton; "
                                 "use a Python version it ships a stub for (3.8-3.13)")
    target = root / "backends" / "python" / "triton_python_backend_stub"
    if not target.is_file() or target.read_bytes() != stub.read_bytes():
        try:
            tmp = target.with_name(f".stub-{os.getpid()}")
            shutil.copy2(stub, tmp)
            tmp.replace(target)
        except OSError as err:
            raise EnvironmentMissing(f"tritonserver: cannot install the python backend stub into {target} ({err}); "
                                     "make the nvidia-pytriton install writable or use a virtual environment") from None
    return root / "backends"


def server_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment under which the python backend's stub sees this interpreter's packages."""
    env = dict(os.environ if base is None else base)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (libdir, env.get("LD_LIBRARY_PATH", "")) if p)
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    return env


@dataclass
class TritonServer:
    """One tritonserver process on free (or given) ports. Use as a context manager."""

    repository: Path
    http_port: int = 0
    grpc_port: int = 0
    metrics_port: int = 0
    log_path: Path | None = None
    extra_args: list[str] = field(default_factory=list)
    env: dict[str, str] | None = None
    process: subprocess.Popen | None = None

    def __post_init__(self) -> None:
        self.http_port = self.http_port or free_port()
        self.grpc_port = self.grpc_port or free_port()
        self.metrics_port = self.metrics_port or free_port()

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    def command(self) -> list[str]:
        return [
            str(_pytriton_root() / "bin" / "tritonserver"),
            f"--model-repository={Path(self.repository).resolve()}",
            f"--backend-directory={backend_dir()}",
            f"--http-port={self.http_port}", f"--grpc-port={self.grpc_port}",
            f"--metrics-port={self.metrics_port}", "--allow-metrics=true", "--allow-gpu-metrics=false",
            "--disable-auto-complete-config", *self.extra_args,
        ]

    def start(self, timeout: float = 180.0) -> TritonServer:
        if self.log_path is None:
            self.log_path = Path(tempfile.mkstemp(prefix="tritonserver-", suffix=".log")[1])
        log = open(self.log_path, "wb")
        self.process = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                        env=server_env(self.env), start_new_session=True,
                                        preexec_fn=_die_with_parent)
        log.close()
        outcome = wait_until_ready(self.http_url, timeout, stopped=lambda: self.process.poll() is not None)
        if outcome == "stopped":
            raise CheckFailed(f"tritonserver exited with code {self.process.returncode} before it was ready:\n"
                              + self.failure_reasons())
        if outcome == "timeout":
            self.stop()
            raise CheckFailed(f"tritonserver was not ready after {timeout:.0f}s:\n" + self.log_tail())
        return self

    def ready(self) -> bool:
        return server_ready(self.http_url)

    def failure_reasons(self) -> str:
        """The server's error lines (model load failures and their reasons), then the log's tail."""
        if self.log_path is None or not Path(self.log_path).exists():
            return "(no log)"
        text = Path(self.log_path).read_text(errors="replace").splitlines()
        errors = [line for line in text if line.startswith("E") and "CudaDriverHelper" not in line
                  or "failed to load" in line or "Traceback" in line or "Error" in line]
        return "\n".join(errors[-30:] + ["--- log tail ---", *text[-15:]])

    def log_tail(self, lines: int = 40) -> str:
        if self.log_path is None or not Path(self.log_path).exists():
            return "(no log)"
        return "\n".join(Path(self.log_path).read_text(errors="replace").splitlines()[-lines:])

    def stop(self, grace: float = 20.0) -> None:
        """terminate -> wait -> kill, for the server and every python stub it started.

        Stubs can outlive the server in a process group of their own (seen on an H200: an orphaned
        tensorrt_llm stub kept 134 GiB of GPU memory), so they are collected before the server stops and
        killed if still alive afterwards.
        """
        import psutil

        p = self.process
        if p is None or p.poll() is not None:
            return
        try:
            stubs = psutil.Process(p.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            stubs = []
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGTERM)
        try:
            p.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=10)
        _, alive = psutil.wait_procs(stubs, timeout=5)
        for stub in alive:
            with contextlib.suppress(psutil.NoSuchProcess):
                stub.kill()

    def __enter__(self) -> TritonServer:
        return self.start() if self.process is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()
