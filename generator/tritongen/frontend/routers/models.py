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
    return ModelList(data=[_card(m, state.created) for m in state.config.models])


def _card(route, created: int) -> ModelCard:
    # vLLM's shape: the base's root is its own id, an adapter's root its folder and its parent the base's id.
    return ModelCard(id=route.name, created=created, root=route.root or route.name, parent=route.parent)


@router.get("/v1/models/{name:path}")
async def get_model(name: str, request: Request) -> ModelCard:
    state = request.app.state.frontend
    route = state.config.route(name)
    if route is None:
        raise APIError(404, f"The model `{name}` does not exist", param="model", code="model_not_found")
    return _card(route, state.created)
