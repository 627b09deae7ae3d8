"""Run the frontend with uvicorn: in the foreground (CLI) or on a background thread (tests, `up`)."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import urllib.error
import urllib.request
from pathlib import Path

from tritongen.errors import CheckFailed
from tritongen.plan.frontend import FrontendPlan
from tritongen.readiness import wait_until_ready
from tritongen.ports import free_port


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://{url}/health", timeout=2) as r:
            return r.status == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


def wait_healthy(url: str, timeout: float, *, alive, stop) -> None:
    """Poll /health until it answers 200 (readiness.wait_until_ready); fail fast when the server is gone."""
    outcome = wait_until_ready(url, timeout, stopped=lambda: not alive(), interval=0.2, probe=_healthy)
    if outcome == "stopped":
        raise CheckFailed(f"the OpenAI frontend on {url} exited while starting (port in use?)")
    if outcome == "timeout":
        stop()
        raise CheckFailed(f"the OpenAI frontend on {url} was not healthy after {timeout:.0f}s (is Triton ready?)")


class FrontendServer:
    """uvicorn serving the app for one Triton endpoint; `start()` returns once /health answers."""

    def __init__(self, config: FrontendPlan, grpc_url: str, *, host: str = "127.0.0.1", port: int | None = None,
                 log_level: str = "warning", path: str = "text"):
        # The app (fastapi, its routers, the tokenizer code) takes about 2 s of CPU to import and uvicorn 0.4 s;
        # `tritongen serve` and `up` import this module also when they start no OpenAI frontend.
        import uvicorn

        from tritongen.frontend.app import create_app

        self.host = host
        self.port = config.port if port is None else port
        self.port = self.port or free_port()  # 0: any free port
        self.app = create_app(config, grpc_url, path)
        self._server = uvicorn.Server(uvicorn.Config(self.app, host=host, port=self.port, log_level=log_level,
                                                     access_log=False, timeout_graceful_shutdown=5))
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    @property
    def url(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout: float = 120.0) -> FrontendServer:
        self._thread = threading.Thread(target=self._serve, name="openai-frontend", daemon=True)
        self._thread.start()
        wait_healthy(self.url, timeout, alive=self._thread.is_alive, stop=self.stop)
        return self

    def _serve(self) -> None:
        try:
            import uvloop
        except ImportError:  # uvloop is optional (not on Windows); asyncio's loop works, a little slower
            asyncio.run(self._server.serve())
        else:
            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                runner.run(self._server.serve())

    def stop(self) -> None:
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=15)
            self._thread = None

    def __enter__(self) -> FrontendServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class FrontendWorkers:
    """The frontend in `workers` processes that share one listening socket (uvicorn's multiprocess mode: the
    supervisor binds the port, the kernel hands each connection to one worker). Each worker builds its own app
    from the repository's frontend.json, with its own gRPC channel, tokenizer and event loop, so the frontend's
    CPU work (JSON, SSE, the ids path's detokenization) spreads over cores. A client that disconnects cancels its
    request in the worker that served it, as with one process."""

    def __init__(self, repository: Path, grpc_url: str, *, workers: int, port: int, host: str = "127.0.0.1",
                 path: str = "text", log_path: Path | None = None):
        self.repository, self.grpc_url, self.workers, self.host, self.path = Path(repository), grpc_url, workers, \
            host, path
        self.port = port or free_port()
        self.log_path = log_path
        self.process: subprocess.Popen | None = None
        self._metrics_dir: str | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    @property
    def url(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout: float = 120.0) -> FrontendWorkers:
        from tritongen.frontend.app import FACTORY_ENV  # the app's import cost: see FrontendServer

        # One folder where every worker's metrics live, so /metrics (answered by any worker) shows them all.
        self._metrics_dir = tempfile.mkdtemp(prefix="tritongen-openai-metrics-")
        env = {**os.environ, FACTORY_ENV["repository"]: str(self.repository.resolve()),
               FACTORY_ENV["grpc_url"]: self.grpc_url, FACTORY_ENV["path"]: self.path,
               "PROMETHEUS_MULTIPROC_DIR": self._metrics_dir}
        cmd = [sys.executable, "-m", "uvicorn", "tritongen.frontend.app:app_from_env", "--factory",
               "--workers", str(self.workers), "--host", self.host, "--port", str(self.port),
               "--log-level", "warning", "--no-access-log", "--timeout-graceful-shutdown", "5"]
        log = open(self.log_path, "ab") if self.log_path else None
        try:
            self.process = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT if log else None,
                                            start_new_session=True)
        finally:
            if log is not None:
                log.close()
        wait_healthy(self.url, timeout, alive=lambda: self.process.poll() is None, stop=self.stop)
        return self

    def stop(self) -> None:
        _terminate(self.process)
        if self._metrics_dir:
            shutil.rmtree(self._metrics_dir, ignore_errors=True)

    def __enter__(self) -> FrontendWorkers:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _terminate(process: subprocess.Popen | None) -> None:
    if process is None or process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=5)


class FrontendProcess:
    """The frontend in a process of its own (`tritongen serve REPO --openai PORT --triton-url URL`), so it
    shares no interpreter lock with the caller: what `up` uses when it load-tests through it."""

    def __init__(self, repository: Path, grpc_url: str, *, port: int, log_path: Path, host: str = "127.0.0.1"):
        self.repository, self.grpc_url, self.host, self.log_path = Path(repository), grpc_url, host, Path(log_path)
        self.port = port or free_port()
        self.process: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    @property
    def url(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout: float = 60.0) -> FrontendProcess:
        cmd = [sys.executable, "-m", "tritongen", "serve", str(self.repository), "--openai", str(self.port),
               "--openai-host", self.host, "--triton-url", self.grpc_url]
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        wait_healthy(self.url, timeout, alive=lambda: self.process.poll() is None, stop=self.stop)
        return self

    def stop(self) -> None:
        _terminate(self.process)
