"""The /v1 routes, generated from the operation registry."""

from __future__ import annotations

import re
from typing import Any

from aiohttp import web

from core.errors import ApiError
from registry import OPERATIONS, Operation, bind
from registry.calls import call
from web import bodies
from web.guard import require_api_key
from web.responses import json_response
from web.services import IDEMPOTENCY_KEY, OPERATION, REQUEST_ID, SERVICES, VIEWER

_IDEMPOTENCY_KEY = re.compile(r"^[A-Za-z0-9_-]{8,255}$")


def setup(app: web.Application) -> None:
    paths = {op.path for op in OPERATIONS.values()}
    for op in OPERATIONS.values():
        path, handler = _route_path(op.path, paths), _handler(op)
        require_api_key(app, app.router.add_route(op.method, path, handler, name=op.name))
        if op.method == "GET":
            # HEAD is GET without the body (RFC 9110); aiohttp leaves the body out.
            require_api_key(app, app.router.add_route("HEAD", path, handler))


def _route_path(path: str, paths: set[str]) -> str:
    """`path` for aiohttp's router, its parameters unable to take a literal segment of
    another route at the same place (`/rsvps/{rsvp_id}` never matches `/rsvps/stats`).

    aiohttp tries routes in order and takes the first whose path and method fit, so
    without this `PATCH .../rsvps/stats` would reach updateRsvp with the ID "stats"
    (400 invalid_id) instead of getting the 405 that names the methods of `stats`.
    """
    segments = path.split("/")
    out = []
    for i, segment in enumerate(segments):
        if segment.startswith("{"):
            literals = sorted({
                other.split("/")[i] for other in paths
                if len(other.split("/")) > i
                and other.split("/")[:i] == segments[:i]
                and not other.split("/")[i].startswith("{")
            })
            if literals:
                name = segment.strip("{}")
                avoid = "|".join(re.escape(literal) for literal in literals)
                segment = f"{{{name}:(?!(?:{avoid})(?:/|$))[^/]+}}"
        out.append(segment)
    return "/".join(out)


def _handler(op: Operation) -> Any:
    async def handle(request: web.Request) -> web.StreamResponse:
        request[OPERATION] = op.name
        services = request.app[SERVICES]
        viewer = request[VIEWER]
        if op.creates:
            _check_idempotency_key(request)
        body = await bodies.json_object(request, empty={}) if op.body is not None else None
        variables = bind(op, request.match_info, request.query, body)
        result, status = await call(services, viewer, request[REQUEST_ID], op, variables)
        if op.result is None:
            return web.Response(status=status)
        response = json_response(result, status=status)
        if op.location is not None and status == 201:
            response.headers["Location"] = op.location.format(**result)
        return response

    handle.__name__ = op.name
    return handle


def _check_idempotency_key(request: web.Request) -> None:
    # Validated and logged; deduplication is promised only by a future API version.
    key = request.headers.get("Idempotency-Key")
    if key is None:
        return
    if not _IDEMPOTENCY_KEY.match(key):
        raise ApiError(
            "invalid_idempotency_key",
            "Idempotency-Key must be 8 to 255 letters, digits, `_` or `-`.",
            param="Idempotency-Key",
        )
    request[IDEMPOTENCY_KEY] = key
