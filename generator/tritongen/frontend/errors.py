"""OpenAI-shaped errors: `{"error": {"message", "type", "param", "code"}}` with the matching HTTP status."""

from __future__ import annotations

import re

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.responses import Response

from tritongen.frontend.engine import EngineError
from tritongen.frontend.schemas import ErrorBody, ErrorResponse


class ClientGone(Exception):
    """The HTTP client disconnected before the answer was ready."""


_TYPES = {400: "invalid_request_error", 401: "invalid_request_error", 404: "invalid_request_error",
          429: "rate_limit_error"}


class APIError(Exception):
    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code


def error_body(status: int, message: str, kind: str | None = None, param: str | None = None,
               code: str | None = None) -> ErrorResponse:
    return ErrorResponse(error=ErrorBody(message=message, type=kind or _TYPES.get(status, "server_error"),
                                         param=param, code=code))


def _reply(status: int, body: ErrorResponse, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(body.model_dump(), status_code=status, headers=headers)


def request_param(request: Request, param: str | None) -> str | None:
    """The field a model error names, in the endpoint's words: a chat request's prompt is its `messages`."""
    if param == "prompt" and request.url.path.startswith("/v1/chat/"):
        return "messages"
    return param


# Errors of the body as a whole (not JSON, not an object): OpenAI names no parameter for them, and their location
# is a character offset, not a field.
_BODY_LEVEL = {"json_invalid", "model_attributes_type", "dict_type", "missing"}


def _validation_message(err: RequestValidationError) -> tuple[str, str | None]:
    lines, param = [], None
    for e in err.errors():
        loc = [str(p) for p in e.get("loc", ()) if p != "body"]
        path = ".".join(loc)
        if e.get("type") in _BODY_LEVEL and not any(isinstance(p, str) and p != "body" for p in e.get("loc", ())):
            lines.append(f"the request body is not a JSON object of the endpoint's fields: {e.get('msg')}")
            continue
        msg = str(e.get("msg", "invalid"))
        # Our own validators already name the field ("n: ..."), from the request as a whole (no loc).
        msg = msg.removeprefix("Value error, ")
        if e.get("type") == "extra_forbidden":
            msg = "unknown field; this deployment does not support it (remove it)"
        named = re.match(r"^([a-z_]+)(?:\.[a-z_]+)*: ", msg)  # `stream_options.include_usage: ...` is stream_options
        field = next((str(p) for p in e.get("loc", ()) if isinstance(p, str) and p != "body"), None)
        param = param or field or (named.group(1) if named else None)
        lines.append(msg if not path else f"{path}: {msg}")
    return "; ".join(lines) or "invalid request body", param


def install(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api_error(_: Request, err: APIError):
        return _reply(err.status, error_body(err.status, err.message, param=err.param, code=err.code))

    @app.exception_handler(EngineError)
    async def _engine_error(request: Request, err: EngineError):
        headers = {"Retry-After": "1"} if err.status in (429, 503) else None
        return _reply(err.status, error_body(err.status, err.message, err.kind, request_param(request, err.param),
                                             err.code), headers)

    @app.exception_handler(ClientGone)
    async def _client_gone(_: Request, __: ClientGone):
        # The Triton request is cancelled already; nobody reads this reply (499: nginx's "client closed request"),
        # but answering keeps an expected event out of the server's error log.
        return Response(status_code=499)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, err: RequestValidationError):
        message, param = _validation_message(err)
        return _reply(400, error_body(400, message, param=param))

    @app.exception_handler(HTTPException)
    async def _http(_: Request, err: HTTPException):
        return _reply(err.status_code, error_body(err.status_code, str(err.detail)))
