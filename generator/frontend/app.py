"""The FastAPI application: routers, OpenAI-shaped errors, request counting, the engine's lifetime."""

from __future__ import annotations

import time
from contextlib import asynccontextmanager

from fastapi import FastAPI

from tritongen.frontend import errors
from tritongen.plan.frontend import FrontendPlan
from tritongen.frontend.engine import TritonEngine
from tritongen.frontend.metrics import FrontendMetrics
from tritongen.frontend.routers import chat, completions, models, observability
from tritongen.frontend.service import FrontendState
from tritongen.frontend.text import ChatTemplate

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


def create_app(config: FrontendPlan, grpc_url: str) -> FastAPI:
    """The app for one deployment. Tokenizers load here; the gRPC channel opens when the app starts."""
    metrics = FrontendMetrics()
    state = FrontendState(config=config, engine=TritonEngine(grpc_url), metrics=metrics,
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
