"""Middlewares for every route: request ids, error envelopes, structured access logs."""

from __future__ import annotations

import logging
import re
import secrets
import time
from collections.abc import Awaitable, Callable

from aiohttp import web

from kalends.errors import ApiError, internal_error
from kalends.services import IDEMPOTENCY_KEY, OPERATION, REQUEST_ID
from rest_bridge.responses import error_response

log = logging.getLogger("kalends.access")
_CLIENT_REQUEST_ID = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def request_context(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Outermost: names the request, logs it, and stamps X-Request-Id on any answer."""
    supplied = request.headers.get("X-Request-Id", "")
    request_id = supplied if _CLIENT_REQUEST_ID.match(supplied) else "req_" + secrets.token_hex(12)
    request[REQUEST_ID] = request_id
    started = time.perf_counter()
    response = await handler(request)
    response.headers["X-Request-Id"] = request_id
    log.info(
        "request",
        extra={
            "request_id": request_id, "method": request.method, "path": request.path,
            "status": response.status,
            "duration_ms": round((time.perf_counter() - started) * 1000, 2),
            **({"operation": request[OPERATION]} if OPERATION in request else {}),
            **({"idempotency_key": request[IDEMPOTENCY_KEY]}
               if IDEMPOTENCY_KEY in request else {}),
        },
    )
    return response


@web.middleware
async def error_envelopes(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Turn every failure into the contract's envelope; never leak internals."""
    request_id = request.get(REQUEST_ID)
    try:
        return await handler(request)
    except ApiError as exc:
        return error_response(exc, request_id)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        error = _from_http(exc)
        response = error_response(error, request_id)
        if exc.status == 405 and "Allow" in exc.headers:
            response.headers["Allow"] = exc.headers["Allow"]
        return response
    except Exception:
        log.exception("unhandled error", extra={"request_id": request_id})
        return error_response(internal_error(), request_id)


def _from_http(exc: web.HTTPException) -> ApiError:
    if exc.status == 404:
        return ApiError("route_not_found", "No such route.")
    if exc.status == 405:
        return ApiError("method_not_allowed", "This route does not accept that method.")
    if exc.status == 413:
        return ApiError("payload_too_large", "The request body is larger than 1 MiB.")
    if exc.status == 415:
        return ApiError("unsupported_media_type", "Send the body as application/json.")
    if exc.status < 500:
        return ApiError("invalid_json", exc.reason or "Bad request.")
    return internal_error()
