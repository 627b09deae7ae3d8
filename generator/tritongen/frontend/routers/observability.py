"""/health (Triton and every served model ready) and /metrics (the frontend's own Prometheus metrics)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST

from tritongen.frontend.metrics import exposition

router = APIRouter()


@router.get("/health")
async def health(request: Request) -> Response:
    state = request.app.state.frontend
    ready = await state.engine.ready(sorted({m.triton_model for m in state.config.models}))
    return Response(status_code=200 if ready else 503, content="ok" if ready else "triton not ready",
                    media_type="text/plain")


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    return Response(exposition(request.app.state.frontend.metrics.registry), media_type=CONTENT_TYPE_LATEST)
