"""/v1/chat/completions: messages -> the chat template -> one Triton request; streamed or whole."""

from __future__ import annotations

import time

from fastapi import APIRouter, Depends, Request
from sse_starlette import EventSourceResponse

from tritongen.frontend import service
from tritongen.frontend.errors import APIError
from tritongen.frontend.routers.auth import require_key
from tritongen.frontend.schemas import (ChatChoice, ChatChunkChoice, ChatCompletion, ChatCompletionChunk,
                                        ChatCompletionRequest, ChatDelta, ChatResponseMessage, Usage,
                                        chunk_json)

router = APIRouter(dependencies=[Depends(require_key)])


def _prompt(state, route, req: ChatCompletionRequest) -> str:
    template = state.templates[route.name]
    if not template.available:
        raise APIError(400, f"model `{route.name}` has no chat template; use /v1/completions, or set "
                       "frontend.chat_template in the spec", param="messages")
    try:
        messages = [{"role": m.role, "content": m.text()} for m in req.messages]
        return template.render(messages)
    except ValueError as err:
        raise APIError(400, str(err), param="messages") from None
    except Exception as err:  # a template that raises (e.g. roles it does not allow) is the request's problem
        raise APIError(400, f"messages: the chat template rejected them: {err}", param="messages") from None


@router.post("/v1/chat/completions")
async def create_chat_completion(req: ChatCompletionRequest, request: Request):
    started = time.perf_counter()
    state = request.app.state.frontend
    route = service.route_for(state, req.model)
    gen = service.generation(route, req, _prompt(state, route, req))
    cid, created = service.new_id("chatcmpl"), int(time.time())
    if not req.stream:
        out = await service.complete(state, route, gen, request, started)
        return ChatCompletion(id=cid, created=created, model=req.model, usage=out.usage, choices=[
            ChatChoice(message=ChatResponseMessage(content=out.text), finish_reason=out.finish_reason)])

    run = await service.start_stream(state, route, gen, request, started)

    usage = req.include_usage()

    def chunk(text: str | None, finish: str | None, so_far: Usage | None = None) -> str:
        delta = ChatDelta(content=text) if text is not None else ChatDelta()
        return chunk_json(ChatCompletionChunk(id=cid, created=created, model=req.model, usage=so_far, choices=[
            ChatChunkChoice(delta=delta, finish_reason=finish)]), usage)

    def usage_chunk(total: Usage) -> str:
        return chunk_json(ChatCompletionChunk(id=cid, created=created, model=req.model, choices=[], usage=total),
                          usage)

    role = ChatChunkChoice(delta=ChatDelta(role="assistant", content=""))
    first = chunk_json(ChatCompletionChunk(id=cid, created=created, model=req.model, choices=[role],
                                           usage=run.usage() if req.continuous_usage() else None), usage)
    return EventSourceResponse(service.sse_events(run, chunk, usage_chunk, usage, first, req.continuous_usage()),
                               ping=None, sep="\n")
