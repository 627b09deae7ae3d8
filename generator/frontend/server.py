"""Run the frontend with uvicorn: in the foreground (CLI) or on a background thread (tests, `up`)."""

from __future__ import annotations

import asyncio
import threading
import time
import urllib.error
import urllib.request

from tritongen.errors import CheckFailed
from tritongen.plan.frontend import FrontendPlan


class FrontendServer:
    """uvicorn serving the app for one Triton endpoint; `start()` returns once /health answers."""

    def __init__(self, config: FrontendPlan, grpc_url: str, *, host: str = "127.0.0.1", port: int | None = None,
                 log_level: str = "warning"):
        import uvicorn

        from tritongen.frontend.app import create_app
        from tritongen.serve import free_port

        self.host = host
        self.port = config.port if port is None else port
        self.port = self.port or free_port()  # 0: any free port
        self.app = create_app(config, grpc_url)
        self._server = uvicorn.Server(uvicorn.Config(self.app, host=host, port=self.port, log_level=log_level,
                                                     access_log=False, timeout_graceful_shutdown=5))
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    @property
    def url(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout: float = 60.0) -> FrontendServer:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._server.serve()), name="openai-frontend",
                                        daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self._thread.is_alive():
                raise CheckFailed(f"the OpenAI frontend exited while starting (port {self.port} in use?)")
            try:
                with urllib.request.urlopen(f"http://{self.url}/health", timeout=2) as r:
                    if r.status == 200:
                        return self
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.2)
        self.stop()
        raise CheckFailed(f"the OpenAI frontend was not healthy after {timeout:.0f}s (is Triton ready?)")

    def run(self) -> None:
        """Serve in the foreground until interrupted."""
        self._server.run()

    def stop(self) -> None:
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=15)
            self._thread = None

    def __enter__(self) -> FrontendServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
