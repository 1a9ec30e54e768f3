"""JSON responses, serialized with orjson."""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from kalends.errors import ApiError

# A database outage lasts at least as long as the embedded server's restart.
_RETRY_AFTER = 2


def json_response(data: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(data), status=status, content_type="application/json")


def error_response(error: ApiError, request_id: str | None) -> web.Response:
    response = json_response(error.envelope(request_id), status=error.status)
    if error.status == 401:
        response.headers["WWW-Authenticate"] = 'Bearer realm="kalends"'
    elif error.status in (429, 503):
        response.headers["Retry-After"] = str(error.retry_after or _RETRY_AFTER)
    return response
