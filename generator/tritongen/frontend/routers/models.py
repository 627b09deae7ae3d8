"""/v1/models: the public model names of the spec, never Triton's internal models."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request

from tritongen.frontend.errors import APIError
from tritongen.frontend.routers.auth import require_key
from tritongen.frontend.schemas import ModelCard, ModelList

router = APIRouter(dependencies=[Depends(require_key)])


@router.get("/v1/models")
async def list_models(request: Request) -> ModelList:
    state = request.app.state.frontend
    return ModelList(data=[ModelCard(id=m.name, created=state.created) for m in state.config.models])


@router.get("/v1/models/{name:path}")
async def get_model(name: str, request: Request) -> ModelCard:
    state = request.app.state.frontend
    if state.config.route(name) is None:
        raise APIError(404, f"The model `{name}` does not exist", param="model", code="model_not_found")
    return ModelCard(id=name, created=state.created)
