"""The FastAPI application: routers, OpenAI-shaped errors, request counting, the engine's lifetime."""

from __future__ import annotations

import os
import time
from contextlib import asynccontextmanager

from fastapi import FastAPI

from tritongen.client import ids_codec
from tritongen.frontend import errors
from tritongen.frontend.engine import TritonEngine
from tritongen.frontend.ids import TritonIdsEngine
from tritongen.frontend.metrics import FrontendMetrics
from tritongen.frontend.routers import chat, completions, models, observability
from tritongen.frontend.service import FrontendState
from tritongen.frontend.text import ChatTemplate
from tritongen.plan.frontend import FrontendPlan

_ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/models")


class _CountRequests:
    """Pure ASGI middleware (no buffering of streamed bodies): requests by endpoint and status."""

    def __init__(self, app, metrics: FrontendMetrics):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope.get("path", "")
        endpoint = next((e for e in _ENDPOINTS if path.startswith(e)), None)
        if endpoint is None:
            return await self.app(scope, receive, send)

        async def counting_send(message):
            if message["type"] == "http.response.start":
                self.metrics.requests.labels(endpoint, str(message["status"])).inc()
            await send(message)

        return await self.app(scope, receive, counting_send)


PATHS = ("text", "ids")
# What `app_from_env` reads: uvicorn's worker processes build their app from a factory without arguments.
FACTORY_ENV = {"repository": "TRITONGEN_FRONTEND_REPOSITORY", "grpc_url": "TRITONGEN_FRONTEND_TRITON_URL",
               "path": "TRITONGEN_FRONTEND_PATH"}


def create_app(config: FrontendPlan, grpc_url: str, path: str = "text") -> FastAPI:
    """The app for one deployment. Tokenizers load here; the gRPC channel opens when the app starts (in each
    worker process). `path`: `text` calls the route's Triton model (ensemble / tensorrt_llm_bls) with text; `ids`
    calls tensorrt_llm with token ids and detokenizes here (tritongen.frontend.ids)."""
    metrics = FrontendMetrics()
    if path == "ids":
        engine = TritonIdsEngine(grpc_url, _codecs(config, grpc_url))
    elif path == "text":
        engine = TritonEngine(grpc_url)
    else:
        raise ValueError(f"path {path!r}: not one of {', '.join(PATHS)}")
    state = FrontendState(config=config, engine=engine, metrics=metrics,
                          templates={m.name: ChatTemplate(m.tokenizer_dir, m.chat_template) for m in config.models},
                          api_key=config.api_key(), created=int(time.time()))

    @asynccontextmanager
    async def lifespan(_: FastAPI):
        await state.engine.start()
        try:
            yield
        finally:
            await state.engine.close()

    app = FastAPI(title="tritongen OpenAI-compatible API", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.frontend = state
    errors.install(app)
    for module in (models, chat, completions, observability):
        app.include_router(module.router)
    app.add_middleware(_CountRequests, metrics=metrics)
    return app


def _codecs(config: FrontendPlan, grpc_url: str) -> dict:
    """The ids path's codec per route (keyed by its text model): the route's tokenizer with the special-token
    settings the server's preprocessing and tensorrt_llm_bls were rendered with (asked from the server, so Triton
    must answer when the frontend starts)."""
    return {m.triton_model: ids_codec(grpc_url, m.tokenizer_dir) for m in config.models}


def app_from_env() -> FastAPI:
    """The app of one uvicorn worker (`uvicorn --factory --workers N`, tritongen.frontend.server.FrontendWorkers):
    the repository's frontend.json, the Triton gRPC URL and the path, from FACTORY_ENV."""
    return create_app(FrontendPlan.read(os.environ[FACTORY_ENV["repository"]]), os.environ[FACTORY_ENV["grpc_url"]],
                      os.environ.get(FACTORY_ENV["path"], "text"))
