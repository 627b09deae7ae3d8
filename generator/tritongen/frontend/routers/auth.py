"""Optional bearer-token check (frontend.api_key_env); /health and /metrics stay open for probes."""

from __future__ import annotations

import hmac

from fastapi import Request

from tritongen.frontend.errors import APIError


async def require_key(request: Request) -> None:
    key = request.app.state.frontend.api_key
    if key is None:
        return
    given = request.headers.get("authorization", "")
    scheme, _, token = given.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), key.encode()):
        raise APIError(401, "Incorrect or missing API key: send `Authorization: Bearer <key>`",
                       code="invalid_api_key")
