"""JSON responses, serialized with orjson."""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from core.errors import ApiError

# A database outage lasts at least as long as the embedded server's restart.
_RETRY_AFTER = 2


def json_response(data: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(data), status=status, content_type="application/json")


def _quoted(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def error_response(error: ApiError, request_id: str | None) -> web.Response:
    response = json_response(error.envelope(request_id), status=error.status)
    if error.status == 401 or error.challenge:
        params = {"realm": "kalends", **(error.challenge or {})}
        # RFC 6750 §3: quoted-string values; a quote or backslash in a message is escaped.
        response.headers["WWW-Authenticate"] = "Bearer " + ", ".join(
            f'{k}="{_quoted(v)}"' for k, v in params.items())
    elif error.status in (429, 503):
        response.headers["Retry-After"] = str(error.retry_after or _RETRY_AFTER)
    return response
