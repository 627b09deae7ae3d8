"""/v1/completions: one prompt string -> one Triton request; streamed or whole.

`response_format` is not in OpenAI's completions API; it is accepted here as vLLM's server accepts it (an
extension), constraining the completion as on chat, and so is vLLM's `structured_outputs` (regex, grammar, json).
"""

from __future__ import annotations

import time

from fastapi import APIRouter, Depends, Request
from sse_starlette import EventSourceResponse

from tritongen.frontend import service, structured
from tritongen.frontend.routers.auth import require_key
from tritongen.frontend.schemas import Completion, CompletionChoice, CompletionRequest, Usage, chunk_json

router = APIRouter(dependencies=[Depends(require_key)])


@router.post("/v1/completions")
async def create_completion(req: CompletionRequest, request: Request):
    started = time.perf_counter()
    state = request.app.state.frontend
    route = service.route_for(state, req.model)
    guide = structured.output_guide(route, req)
    gen = structured.guided(service.generation(route, req, req.prompt), guide, req)
    echo = req.prompt if req.echo else None
    cid, created = service.new_id("cmpl"), int(time.time())
    if not req.stream:
        out = await structured.named_by(guide, service.complete(state, route, gen, request, started))
        return Completion(id=cid, created=created, model=req.model, usage=out.usage, choices=[
            CompletionChoice(text=(echo or "") + out.text, finish_reason=out.finish_reason)])

    run = await structured.named_by(guide, service.start_stream(state, route, gen, request, started))

    usage = req.include_usage()

    def chunk(text: str | None, finish: str | None, so_far: Usage | None = None) -> str:
        return chunk_json(Completion(id=cid, created=created, model=req.model, usage=so_far, choices=[
            CompletionChoice(text=text or "", finish_reason=finish)]), usage)

    def usage_chunk(total: Usage) -> str:
        return chunk_json(Completion(id=cid, created=created, model=req.model, choices=[], usage=total), usage)

    first = chunk(echo, None, run.usage() if req.continuous_usage() else None) if echo else None
    return EventSourceResponse(service.sse_events(run, chunk, usage_chunk, usage, first, req.continuous_usage()),
                               ping=None, sep="\n")
