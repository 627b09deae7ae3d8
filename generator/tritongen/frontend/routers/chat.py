"""/v1/chat/completions: messages -> the chat template -> one Triton request; streamed or whole.

With `tools` the answer goes through a tool-call parser (tritongen.frontend.toolcalls); `response_format` and
tool_choice required/named constrain decoding (tritongen.frontend.structured).
"""

from __future__ import annotations

import json
import time

from fastapi import APIRouter, Depends, Request
from sse_starlette import EventSourceResponse

from tritongen.frontend import service, structured
from tritongen.frontend.errors import APIError
from tritongen.frontend.routers.auth import require_key
from tritongen.frontend.schemas import (ChatChoice, ChatChunkChoice, ChatCompletion, ChatCompletionChunk,
                                        ChatCompletionRequest, ChatDelta, ChatMessage, ChatResponseMessage,
                                        FunctionCall, FunctionCallDelta, ToolCall, ToolCallDelta, Usage, chunk_json)
from tritongen.frontend.toolcalls import Event, parse

router = APIRouter(dependencies=[Depends(require_key)])


def _message(m: ChatMessage) -> dict:
    """A message for the template: its text, and the tool calls / results a tool-calling template reads."""
    out = {"role": m.role, "content": m.text()}
    extra = m.model_extra or {}
    if m.name is not None:
        out["name"] = m.name
    if "tool_call_id" in extra:
        out["tool_call_id"] = extra["tool_call_id"]
    if extra.get("tool_calls"):
        calls = []
        for call in extra["tool_calls"]:
            call = json.loads(json.dumps(call))
            fn = call.get("function") or {}
            # Templates write arguments as an object (`| tojson`); OpenAI sends them as JSON text (as vLLM does).
            if isinstance(fn.get("arguments"), str):
                try:
                    fn["arguments"] = json.loads(fn["arguments"])
                except ValueError:
                    raise ValueError("messages: a tool call's function.arguments is not JSON text") from None
            calls.append(call)
        out["tool_calls"] = calls
    return out


def _prompt(state, route, req: ChatCompletionRequest) -> str:
    template = state.templates[route.name]
    if not template.available:
        raise APIError(400, f"model `{route.name}` has no chat template; use /v1/completions, or set "
                       "frontend.chat_template in the spec", param="messages")
    try:
        messages = [_message(m) for m in req.messages]
        # A function without parameters takes none; templates read `function.parameters` regardless.
        tools = [t.model_dump(exclude_none=True) for t in req.tools or ()]
        for tool in tools:
            tool["function"].setdefault("parameters", structured.NO_PARAMETERS)
        return template.render(messages, tools=tools)
    except ValueError as err:
        raise APIError(400, str(err), param="messages") from None
    except Exception as err:  # a template that raises (e.g. roles it does not allow) is the request's problem
        raise APIError(400, f"messages: the chat template rejected them: {err}", param="messages") from None


def _guided(state, route, req: ChatCompletionRequest):
    """(the guide or None, tool plan or None); checks tools and schemas before anything is rendered."""
    tools = structured.tool_plan(route, req, state.templates[route.name].source)
    guide = structured.output_guide(route, req)
    if tools is not None and tools.guide is not None:
        if guide is not None:
            raise APIError(400, f"{guide.param}: cannot go with tool_choice required or a named function (both "
                                "constrain the answer); leave one out", param=guide.param)
        guide = tools.guide
    return guide, tools


def _reason(finish: str, called: bool) -> str:
    return "tool_calls" if called and finish != "length" else finish


def _delta(event: Event) -> ChatDelta:
    if event.content is not None:
        return ChatDelta(content=event.content)
    fn = FunctionCallDelta(name=event.name, arguments=event.arguments)
    call = ToolCallDelta(index=event.index, id=event.id, type="function" if event.id else None, function=fn)
    return ChatDelta(tool_calls=[call])


@router.post("/v1/chat/completions")
async def create_chat_completion(req: ChatCompletionRequest, request: Request):
    started = time.perf_counter()
    state = request.app.state.frontend
    route = service.route_for(state, req.model)
    guide, tools = _guided(state, route, req)
    gen = structured.guided(service.generation(route, req, _prompt(state, route, req)), guide, req)
    cid, created = service.new_id("chatcmpl"), int(time.time())
    if not req.stream:
        out = await structured.named_by(guide, service.complete(state, route, gen, request, started))
        if tools is None:
            message, finish = ChatResponseMessage(content=out.text), out.finish_reason
        else:
            answer = parse(tools.parser(), out.text)
            calls = [ToolCall(id=c["id"], function=FunctionCall(**c["function"])) for c in answer.calls]
            message = ChatResponseMessage(content=answer.content, tool_calls=calls or None)
            finish = _reason(out.finish_reason, bool(calls))
        return ChatCompletion(id=cid, created=created, model=req.model, usage=out.usage, choices=[
            ChatChoice(message=message, finish_reason=finish)])

    run = await structured.named_by(guide, service.start_stream(state, route, gen, request, started))
    parser = tools.parser() if tools is not None else None

    usage = req.include_usage()

    def payload(delta: ChatDelta, finish: str | None, so_far: Usage | None) -> str:
        return chunk_json(ChatCompletionChunk(id=cid, created=created, model=req.model, usage=so_far, choices=[
            ChatChunkChoice(delta=delta, finish_reason=finish)]), usage)

    def chunk(text: str | None, finish: str | None, so_far: Usage | None = None) -> str | list[str]:
        if parser is None:
            return payload(ChatDelta(content=text) if text is not None else ChatDelta(), finish, so_far)
        events = parser.feed(text) if text is not None else parser.finish()
        out = [payload(_delta(e), None, so_far) for e in events]
        if finish is not None:
            out.append(payload(ChatDelta(), _reason(finish, parser.called), so_far))
        return out

    def usage_chunk(total: Usage) -> str:
        return chunk_json(ChatCompletionChunk(id=cid, created=created, model=req.model, choices=[], usage=total),
                          usage)

    role = ChatChunkChoice(delta=ChatDelta(role="assistant", content=""))
    first = chunk_json(ChatCompletionChunk(id=cid, created=created, model=req.model, choices=[role],
                                           usage=run.usage() if req.continuous_usage() else None), usage)
    return EventSourceResponse(service.sse_events(run, chunk, usage_chunk, usage, first, req.continuous_usage()),
                               ping=None, sep="\n")
