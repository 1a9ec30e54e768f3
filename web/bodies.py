"""Request bodies: one JSON object, sent as application/json."""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from core.errors import ApiError


async def json_object(request: web.Request, *, empty: dict[str, Any] | None = None
                      ) -> dict[str, Any]:
    """The body as a JSON object; `empty` answers for a request without a body
    (None: a body is required)."""
    raw = await request.read()  # aiohttp enforces client_max_size: 413 past 1 MiB
    if not raw and empty is not None:
        return empty
    if request.content_type != "application/json":
        raise ApiError("unsupported_media_type", "Send the body as application/json.")
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise ApiError("invalid_json", "The request body is not valid JSON.") from None
    if not isinstance(data, dict):
        raise ApiError("invalid_json", "The request body must be a JSON object.")
    return data
