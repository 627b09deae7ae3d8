"""The embedded tritonserver: the real server binary shipped in the nvidia-pytriton wheel.

Facts this module relies on (observed with the wheel's tritonserver 2.51 on Linux x86_64): the python backend needs the stub for the running Python version
next to libtriton_python.so; the stub embeds an interpreter that ignores PYTHONPATH but finds `python3` on PATH
and honours the virtual environment it belongs to, and it loads the libpython the loader finds first.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from tritongen import native as native_backends
from tritongen.errors import CheckFailed, EnvironmentMissing
from tritongen.plan.deploy import StopBudget
from tritongen.ports import free_ports
from tritongen.readiness import server_ready, wait_until_ready
from tritongen.runtimes import completes_own_config
from tritongen.serve.causes import exit_status, oom_kills, signal_name, stub_death, summary


# tritonserver gets SIGTERM when the process that started it dies (even by SIGKILL), so a killed test run or CLI
# never leaves a server holding ports and cores. SIGTERM rather than SIGKILL: only tritonserver's own shutdown stops
# its python stubs (a SIGKILLed server leaves them running, observed), and `--exit-timeout-secs` (the server's grace
# period) bounds how long it waits for requests in flight; the LLM model then ends every active request with an
# error in its finalize, and its stub exits by itself if the server dies.
# PR_SET_PDEATHSIG is set by this exec wrapper, not by a preexec_fn: a preexec_fn runs Python in the forked child of
# a threaded parent, with every os.register_at_fork child hook (gRPC's, once the parent used a gRPC client); in the
# suite such a child printed a gRPC epoll error and never became tritonserver. The setting survives the exec.
_EXEC_DYING_WITH_PARENT = (
    "import ctypes, os, sys\n"
    "ctypes.CDLL(None, use_errno=True).prctl(1, 15)\n"  # PR_SET_PDEATHSIG, SIGTERM
    "if os.getppid() != int(sys.argv[1]):\n"  # the parent died before prctl: nothing would signal this process
    "    os._exit(1)\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n")


def _dying_with_parent(command: list[str]) -> list[str]:
    return [sys.executable, "-I", "-S", "-c", _EXEC_DYING_WITH_PARENT, str(os.getpid()), *command]


# Seconds a stop may take, as a pod's default terminationGracePeriodSeconds; spent as StopBudget says.
GRACE_S = 30.0
# How the python backend names a stub's shared-memory region (an argument of the stub's command line).
SHM_PREFIX = "triton_python_backend_shm_region_"


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


def _python_stub() -> Path:
    root = _pytriton_root()
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = root / "python_backend_stubs" / version / "triton_python_backend_stub"
    if not stub.is_file():
        raise EnvironmentMissing(f"tritonserver: no python backend stub for Python {version} in nvidia-pytriton; "
                                 "use a Python version it ships a stub for (3.8-3.13)")
    return stub


def backend_dir(folder: Path, native: tuple[str, ...] = ()) -> Path:
    """Assemble `folder` as tritonserver's --backend-directory: links to the wheel's backends, the python backend
    with the stub for this Python version beside it, and the native backends `native` (built by build.sh).

    Links only, nothing written into the wheel or a cache: a read-only virtual environment serves. The stub is a
    link too: it finds its bundled libraries relative to its real path (RPATH $ORIGIN), which a link keeps.
    """
    root = _pytriton_root()
    libraries = native_backends.require(native)
    stub = _python_stub()
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for entry in (root / "backends").iterdir():
        if entry.name == "python":
            python = folder / "python"
            python.mkdir(exist_ok=True)
            for item in entry.iterdir():
                if item.name not in ("triton_python_backend_stub", "__pycache__"):
                    (python / item.name).symlink_to(item)
            (python / "triton_python_backend_stub").symlink_to(stub)
        elif entry.name not in libraries:
            (folder / entry.name).symlink_to(entry)
    for name, library in libraries.items():
        (folder / name).mkdir(exist_ok=True)
        (folder / name / library.name).symlink_to(library.resolve())
    return folder


def libpython_dir() -> Path | None:
    """A folder holding only a link to this interpreter's libpython, for the stub's loader.

    Putting the interpreter's LIBDIR itself on LD_LIBRARY_PATH is wrong on GPU machines: there it is a system
    library folder (/usr/lib/x86_64-linux-gnu) whose cuDNN shadowed the one torch ships (measured on an H200:
    cuDNN 9.14 loaded under a torch built for 9.19). None when the interpreter has no shared libpython.
    """
    libdir, soname = sysconfig.get_config_var("LIBDIR"), sysconfig.get_config_var("INSTSONAME")
    if not libdir or not soname or not (Path(libdir) / soname).is_file():
        return None
    target = (Path(libdir) / soname).resolve()
    folder = Path(tempfile.gettempdir()) / f"tritongen-libpython-{os.getuid()}-{hashlib.sha1(str(target).encode()).hexdigest()[:12]}"
    link = folder / soname
    if not (link.is_symlink() and link.resolve() == target):
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{soname}.{os.getpid()}"
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        tmp.symlink_to(target)
        tmp.replace(link)
    return folder


def server_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment under which the python backend's stub sees this interpreter's packages and its libpython."""
    env = dict(os.environ if base is None else base)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    folder = libpython_dir()
    parts = [str(folder) if folder else "", env.get("LD_LIBRARY_PATH", "")]
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in parts if p)
    if not env["LD_LIBRARY_PATH"]:
        del env["LD_LIBRARY_PATH"]
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    return env


def port_in_use(port: int) -> bool:
    """True when something already listens on `port` (tritonserver binds every interface).

    SO_REUSEADDR, as tritonserver binds: without it, connections of a stopped server left in TIME_WAIT made a
    restart on the same ports fail for up to a minute while nothing listened."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return True
    return False


@dataclass
class TritonServer:
    """One tritonserver process on free (or given) ports. Use as a context manager.

    Supervised while it runs (`supervise`): if the server exits on its own or one of its python stubs dies (a
    killed or crashed model instance, which Triton keeps reporting READY while its requests hang), the server is
    stopped and `failure` says why; `tritongen serve` then exits non-zero so an orchestrator restarts it.
    """

    repository: Path
    http_port: int = 0
    grpc_port: int = 0
    metrics_port: int = 0
    log_path: Path | None = None
    extra_args: list[str] = field(default_factory=list)
    env: dict[str, str] | None = None
    supervise: bool = True
    grace_s: float = GRACE_S
    """Seconds a stop may take, spent as `budget` says: streams in flight run on for its drain, then end with an
    UNAVAILABLE "the server is stopping" final response; the clients' lag and the unload fill tritonserver's
    --exit-timeout-secs."""
    budget_for: str = "serve"
    """Whose stop budget (StopBudget.of's target): `serve`, or a deployment's (`compose`, `k8s`) to run the server
    exactly as that deployment's command line and environment do."""
    process: subprocess.Popen | None = None
    failure: str | None = None
    stubs: dict[int, str] = field(default_factory=dict)
    shm_regions: set[str] = field(default_factory=set)
    """The python backend's /dev/shm regions of this server's stubs: a server that dies without its own shutdown
    leaves them behind, so `stop` removes what is left."""
    stop_warnings: list[str] = field(default_factory=list)
    """Stubs that died abnormally (a signal or a non-zero code) during the last `stop`, one line each with the
    cause: the stop itself went on, so these are warnings, not failures."""

    def __post_init__(self) -> None:
        self._explicit_ports = [(name, port) for name, port in (("http", self.http_port), ("grpc", self.grpc_port),
                                                                 ("metrics", self.metrics_port)) if port]
        spare = iter(free_ports(3))
        self.http_port = self.http_port or next(spare)
        self.grpc_port = self.grpc_port or next(spare)
        self.metrics_port = self.metrics_port or next(spare)
        self._stopping = threading.Event()
        self._watcher: threading.Thread | None = None
        self._backends: Path | None = None

    @property
    def budget(self) -> StopBudget:
        return StopBudget.of(self.grace_s, self.budget_for)

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
        if self._backends is None:
            self._backends = Path(tempfile.mkdtemp(prefix="tritongen-backends-"))
        backends = self._backends
        # NVIDIA's llmapi model sets decoupled and max_batch_size from its model.yaml in auto_complete_config;
        # every other model's config.pbtxt is complete, and auto-completion would only hide a mistake in it.
        auto = [] if completes_own_config(self.repository) else ["--disable-auto-complete-config"]
        return [
            str(_pytriton_root() / "bin" / "tritonserver"),
            f"--model-repository={Path(self.repository).resolve()}",
            f"--backend-directory={backends}",
            f"--http-port={self.http_port}", f"--grpc-port={self.grpc_port}",
            f"--metrics-port={self.metrics_port}", "--allow-metrics=true", "--allow-gpu-metrics=false",
            *auto, f"--exit-timeout-secs={self.budget.exit_timeout_s}", *self.extra_args,
        ]

    def start(self, timeout: float = 180.0, *, _retried: bool = False) -> TritonServer:
        # A server already on a port would answer the readiness probe for us: refuse before starting.
        for name, port in (("http", self.http_port), ("grpc", self.grpc_port), ("metrics", self.metrics_port)):
            if port_in_use(port):
                flag = f"--{name}-port"
                raise EnvironmentMissing(f"serve.{name}_port: port {port} is already in use by another process; "
                                         f"stop that process or pick another port with {flag}")
        command = self.command()
        if not (self._backends / "python").exists():
            backend_dir(self._backends, native_backends.used_by(self.repository))
        if self.log_path is None:
            self.log_path = Path(tempfile.mkstemp(prefix="tritonserver-", suffix=".log")[1])
        log = open(self.log_path, "wb")
        env = server_env(self.env)
        # The budget's drain, unless the caller's own `env` sets one (a bench varying the drain alone).
        env.update({k: v for k, v in self.budget.environment().items() if k not in (self.env or {})})
        self.process = subprocess.Popen(_dying_with_parent(command), stdout=log, stderr=subprocess.STDOUT,
                                        env=env, start_new_session=True)
        log.close()
        def stopped() -> bool:
            return self.process.poll() is not None or self._load_failed()

        outcome = wait_until_ready(self.http_url, timeout, stopped=stopped)
        if outcome == "stopped" and self.process.poll() is not None and self._shm_lock_crash() and not _retried:
            # The python backend's shared-memory lock can abort tritonserver while it loads several stubs on a
            # loaded machine (boost::interprocess::lock_exception, signal 6; upstream server#8882): not this
            # repository's fault, so one fresh start, said on stderr.
            print(f"tritonserver aborted while loading (python backend shared-memory lock, upstream server#8882; "
                  f"log {self.log_path}); starting it once more", file=sys.stderr, flush=True)
            self.process = None
            self.log_path = Path(f"{self.log_path}.retry")
            return self.start(timeout, _retried=True)
        if outcome == "stopped":
            if self.process.poll() is not None:
                raise CheckFailed(f"tritonserver exited with code {self.process.returncode} before it was ready:\n"
                                  + self.failure_reasons())
            reasons = self.failure_reasons()
            self.stop(grace=5)
            raise CheckFailed("a model failed to load; tritonserver stopped:\n" + reasons)
        if outcome == "timeout":
            self.stop()
            raise CheckFailed(f"tritonserver was not ready after {timeout:.0f}s:\n" + self.log_tail())
        if not self._listens_on(self.http_port):
            self.stop(grace=5)
            raise EnvironmentMissing(f"serve.http_port: another process answers on port {self.http_port}; "
                                     "stop it or pick another port with --http-port")
        self.stubs = self._stub_processes()
        if self.supervise:
            self._watcher = threading.Thread(target=self._watch, name="tritongen-supervisor", daemon=True)
            self._watcher.start()
        return self

    def _shm_lock_crash(self) -> bool:
        if self.log_path is None or not Path(self.log_path).exists():
            return False
        return "boost::interprocess::lock_exception" in Path(self.log_path).read_text(errors="replace")

    def _load_failed(self) -> bool:
        if self.log_path is None or not Path(self.log_path).exists():
            return False
        text = Path(self.log_path).read_text(errors="replace")
        return "Failed to initialize Python stub" in text or '"failed to load' in text

    def _listens_on(self, port: int) -> bool:
        try:
            procs = [psutil.Process(self.process.pid)]
            for proc in procs:
                for conn in proc.net_connections(kind="tcp"):
                    if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port:
                        return True
        except psutil.Error:
            return False
        return False

    def _stub_processes(self) -> dict[int, str]:
        """{pid: model instance} of the python stubs under the server."""
        out = {}
        try:
            for child in psutil.Process(self.process.pid).children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    cmd = child.cmdline()
                    if cmd and cmd[0].endswith("triton_python_backend_stub"):
                        out[child.pid] = _instance_name(cmd)
                        self.shm_regions.update(a for a in cmd[1:] if a.startswith(SHM_PREFIX))
        except psutil.NoSuchProcess:
            pass
        return out

    def _watch(self) -> None:
        oom_before = oom_kills()
        while not self._stopping.wait(0.2):
            dead = [(pid, name) for pid, name in list(self.stubs.items()) if not _alive(pid)]
            # A dead stub's status is readable only until tritonserver reaps it: read it at once.
            deaths = [stub_death(name, pid, exit_status(pid), oom_before, self.log_path) for pid, name in dead]
            code = self.process.poll()
            if code is not None:
                # A killed stub can take tritonserver down with it before this loop sees the stub gone:
                # name the stub, since it is the cause an operator has to look at.
                how = f"was killed by {signal_name(-code)}" if code < 0 else f"exited on its own with code {code}"
                self.failure = f"tritonserver {how}" + (f"; {deaths[0]}" if deaths else "")
                self._kill_stubs()
                self._remove_shm()
                return
            if deaths and not self._stopping.is_set():
                self.failure = deaths[0]
                self.stop(grace=5)
                return

    def ready(self) -> bool:
        return server_ready(self.http_url)

    def failure_reasons(self) -> str:
        """The server's error lines (model load failures and their reasons), then the log's tail, without the lines
        that do not apply on this machine (CUDA probes without a GPU); the full log's path last."""
        return summary(self.log_path)

    def log_tail(self, lines: int = 40) -> str:
        if self.log_path is None or not Path(self.log_path).exists():
            return "(no log)"
        return "\n".join(Path(self.log_path).read_text(errors="replace").splitlines()[-lines:])

    def stop(self, grace: float | None = None) -> None:
        """terminate -> wait -> kill, for the server and every python stub it started. `grace`: seconds before the
        kill (default: the server's own grace period and a margin for unloading).

        Stubs can outlive the server in a process group of their own (seen on an H200: an orphaned
        tensorrt_llm stub kept 134 GiB of GPU memory), so they are collected before the server stops and
        killed if still alive afterwards.
        """
        self._stopping.set()
        if grace is None:
            grace = self.grace_s + 10
        p = self.process
        if p is None:
            self._remove_backends()
            return
        names = dict(self.stubs)
        with contextlib.suppress(psutil.Error):
            names.update(self._stub_processes())  # stubs of models loaded since start: their regions too
        self.stop_warnings = []
        try:
            stubs = psutil.Process(p.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            stubs = []
        stubs += [proc for pid in self.stubs if (proc := _process(pid)) is not None]
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
            try:
                self._wait_noting_stub_deaths(p, grace, names)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=10)
        _, alive = psutil.wait_procs(stubs, timeout=5)
        for stub in alive:
            with contextlib.suppress(psutil.NoSuchProcess):
                stub.kill()
        psutil.wait_procs(alive, timeout=5)
        self._remove_shm()
        self._remove_backends()
        if self._watcher is not None and self._watcher is not threading.current_thread():
            self._watcher.join(timeout=5)

    def _wait_noting_stub_deaths(self, p: subprocess.Popen, timeout: float, names: dict[int, str]) -> None:
        """Wait for the server to exit; meanwhile read the exit status of each stub that ends (readable only in the
        few milliseconds before tritonserver reaps it) and keep a warning for each that did not end cleanly."""
        deadline = time.monotonic() + timeout
        pending = dict(names)
        while p.poll() is None:
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(p.args, timeout)
            for pid, name in list(pending.items()):
                status = exit_status(pid)
                if status is None and _alive(pid):
                    continue
                del pending[pid]
                if status is not None and status != 0:
                    self.stop_warnings.append(stub_death(name, pid, status, None, self.log_path))
            time.sleep(0.005)

    def _remove_backends(self) -> None:
        """The per-server --backend-directory: links only, removed with the server."""
        if self._backends is not None:
            shutil.rmtree(self._backends, ignore_errors=True)
            self._backends = None

    def _remove_shm(self) -> None:
        """Unlink the stubs' shared-memory regions that a server killed before its own cleanup left behind."""
        for name in self.shm_regions:
            with contextlib.suppress(OSError):
                (Path("/dev/shm") / name).unlink()

    def _kill_stubs(self) -> None:
        procs = [proc for pid in self.stubs if (proc := _process(pid)) is not None]
        for proc in procs:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()
        psutil.wait_procs(procs, timeout=5)

    def __enter__(self) -> TritonServer:
        return self.start() if self.process is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _process(pid: int):
    try:
        return psutil.Process(pid)
    except psutil.NoSuchProcess:
        return None


def _instance_name(cmd: list[str]) -> str:
    """The model instance a stub serves, from its command line (model.py path and instance name)."""
    for arg in cmd[1:]:
        if arg.endswith("/model.py"):
            parts = Path(arg).parts
            if len(parts) >= 3:
                return f"model {parts[-3]!r}"
    return "a model"
