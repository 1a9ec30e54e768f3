"""Middlewares for every route: request ids, error envelopes, structured access
logs, and the guard that authenticates and rate-limits every request."""

from __future__ import annotations

import logging
import re
import secrets
import time
from collections.abc import Awaitable, Callable

from aiohttp import web

from core.errors import ApiError, internal_error
from db.database import unavailable
from domain import ratelimit, reads
from domain.auth import KEY_PREFIX, Caller, Viewer, authenticate_key
from web import metrics, query
from web.draining import UNCOUNTED_PATHS
from web.responses import error_response
from web.services import (
    DRAIN,
    IDEMPOTENCY_KEY,
    OPERATION,
    RATE_LIMIT,
    REQUEST_ID,
    SERVICES,
    SETTINGS,
    VIEWER,
)

log = logging.getLogger("kalends.access")
_CLIENT_REQUEST_ID = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

ErrorBody = Callable[[web.Request, ApiError], web.Response]
ERROR_BODIES = web.AppKey("error_bodies", dict[web.AbstractRoute, ErrorBody])
"""Routes whose errors take another form than the envelope (MCP: JSON-RPC errors),
or more headers (`GET /graphql`: Vary)."""

API_KEY_ROUTES = web.AppKey("api_key_routes", dict[web.AbstractRoute, bool])
"""Routes that take an API key, each with whether it defers the limit to its handler."""
KeyWanted = Callable[[web.Request], bool]
API_KEY_WHEN = web.AppKey("api_key_when", dict[web.AbstractRoute, KeyWanted])
"""Routes of API_KEY_ROUTES that take the key only for the requests a test picks
(`GET /graphql`: a query does, GraphiQL's page and a WebSocket upgrade do not)."""
Authenticator = Callable[[web.Request], Awaitable[Caller]]
TOKEN_ROUTES = web.AppKey("token_routes", dict[web.AbstractRoute, Authenticator])
"""Routes that take another credential (an OAuth access token on /mcp), each with
the coroutine that checks it; their handlers enforce the limit themselves."""
# Probes and scrapes come from infrastructure and must answer even under a flood.
_UNLIMITED_PATHS = UNCOUNTED_PATHS
CLIENT_CLOSED_REQUEST = 499
"""The status logged and counted for a request whose client closed the connection
before its answer (nginx's convention): nothing was answered, so it is no 5xx,
and it is told apart from every status the server did send."""


def require_credential(app: web.Application, route: web.AbstractRoute,
                       authenticate: Authenticator) -> None:
    """Mark `route` as authenticated by `authenticate` (its limit deferred to the handler)."""
    app.setdefault(TOKEN_ROUTES, {})[route] = authenticate


def require_api_key(app: web.Application, route: web.AbstractRoute, *,
                    defer_limit: bool = False, when: KeyWanted | None = None) -> None:
    """Mark `route` as authenticated by API key. `defer_limit`: its handler calls
    `request[RATE_LIMIT].enforce()` itself (MCP answers a tool call past the limit
    with an isError result, not an HTTP 429). `when`: only the requests it picks;
    the others are charged as on a route that takes no credential."""
    app.setdefault(API_KEY_ROUTES, {})[route] = defer_limit
    if when is not None:
        app.setdefault(API_KEY_WHEN, {})[route] = when


@web.middleware
async def request_context(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Outermost: names the request, logs and measures it, and stamps X-Request-Id
    on any answer (errors too: the inner middleware has made them responses)."""
    supplied = request.headers.get("X-Request-Id", "")
    request_id = supplied if _CLIENT_REQUEST_ID.match(supplied) else "req_" + secrets.token_hex(12)
    request[REQUEST_ID] = request_id
    started = time.perf_counter()
    drain = request.app[DRAIN]
    if request.path in UNCOUNTED_PATHS:
        response = await handler(request)
    else:
        with drain.serving():
            response = await handler(request)
    if drain.draining:
        response.force_close()  # keep-alive clients reconnect, to an instance that stays
    duration = time.perf_counter() - started
    # A client that left before its answer (mid-body, or while it was being worked
    # out) never gets it: 499, whatever the response would have said.
    aborted = _client_left(request) and not response.prepared
    status = CLIENT_CLOSED_REQUEST if aborted else response.status
    metrics.observe_request(request, status, duration)
    response.headers["X-Request-Id"] = request_id
    if RATE_LIMIT in request:
        response.headers.update(request[RATE_LIMIT].headers())
    log.info(
        "request",
        extra={
            "request_id": request_id, "method": request.method, "path": request.path,
            "status": status,
            "duration_ms": round(duration * 1000, 2),
            **({"client_closed": True} if aborted else {}),
            **({"operation": request[OPERATION]} if OPERATION in request else {}),
            # Who made it, once authenticated: the API key's consumer, or the
            # OAuth token's subject (the consumer it names).
            **({"consumer": request[VIEWER].consumer} if VIEWER in request else {}),
            **({"idempotency_key": request[IDEMPOTENCY_KEY]}
               if IDEMPOTENCY_KEY in request else {}),
        },
    )
    return response


def _client_left(request: web.Request) -> bool:
    """Whether the client has closed its connection: no answer can reach it."""
    return request.transport is None or request.transport.is_closing()


@web.middleware
async def error_envelopes(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Turn every failure into the error envelope (docs/http.md, "Errors"); never leak internals."""
    request_id = request.get(REQUEST_ID)
    respond = request.app.get(ERROR_BODIES, {}).get(request.match_info.route)
    if respond is None:
        def respond(_: web.Request, error: ApiError) -> web.Response:
            return error_response(error, request_id)
    try:
        return await handler(request)
    except ApiError as exc:
        return respond(request, exc)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        error = _from_http(exc)
        response = respond(request, error)
        if exc.status == 405 and "Allow" in exc.headers:
            response.headers["Allow"] = exc.headers["Allow"]
        return response
    except Exception as exc:
        if isinstance(exc, ConnectionError) and _client_left(request):
            # aiohttp fails the body read of a client that went away: no answer can
            # reach it, and no fault of ours. request_context logs and counts it.
            return web.Response(status=CLIENT_CLOSED_REQUEST)
        lost = unavailable(exc)  # a loss met outside Database and Tx: still a 503
        if lost is not None:
            return respond(request, lost)
        log.exception("unhandled error", extra={"request_id": request_id})
        return respond(request, internal_error())


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


@web.middleware
async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Authenticate routes that take an API key, charge every request to a
    rate-limit bucket (the key's consumer, else the client address), and refuse
    a query string that is not UTF-8 percent-encoding (web/query.py)."""
    routes = request.app.get(API_KEY_ROUTES, {})
    others = request.app.get(TOKEN_ROUTES, {})
    route = request.match_info.route
    if route in routes and _wants_key(request, route):
        request[VIEWER] = await _authenticate(request, _api_key, defer_limit=routes[route])
    elif route in others:
        request[VIEWER] = await _authenticate(request, others[route], defer_limit=True)
    elif request.path not in _UNLIMITED_PATHS and not await _charge_key(request):
        await _charge_address(request)
    # Here, once, so that no transport reads a parameter aiohttp decoded leniently.
    query.check(request)
    token = reads.begin()
    try:
        response = await handler(request)
        # Read-your-writes (docs/scaling.md, "Read replicas"): the write is answered, so its
        # commit is done.
        services = request.app.get(SERVICES)
        await reads.record(services.reads if services is not None else None,
                           request.get(VIEWER))
        return response
    finally:
        reads.finish(token)


def _wants_key(request: web.Request, route: web.AbstractRoute) -> bool:
    wanted = request.app.get(API_KEY_WHEN, {}).get(route)
    return wanted is None or wanted(request)


async def _api_key(request: web.Request) -> Caller:
    return await authenticate_key(request.app[SERVICES].db, request.headers.get("Authorization"),
                                  request.app[SETTINGS].rate_limit)


async def _authenticate(request: web.Request, authenticate: Authenticator, *,
                        defer_limit: bool) -> Viewer:
    try:
        caller = await authenticate(request)
    except ApiError as exc:
        if exc.code == "not_authenticated":
            await _charge_address(request)  # a flood of bad keys is limited by address
        raise
    if caller.limit is not None:
        request[RATE_LIMIT] = caller.limit
        if not defer_limit:
            caller.limit.enforce()
    return caller.claimed()


async def _charge_key(request: web.Request) -> bool:
    """On a route that takes no credential (the OpenAPI document, an unknown path, a
    method the path lacks such as `DELETE /graphql`), charge a valid API key's consumer,
    as on every authenticated request. False: no valid key, the address pays."""
    scheme, _, key = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not key.strip().startswith(KEY_PREFIX):
        return False  # another kind of bearer (an OAuth token) is never an API key
    try:
        caller = await _api_key(request)
    except ApiError as exc:
        if exc.code not in ("not_authenticated", "service_unavailable"):
            raise
        return False
    if caller.limit is not None:
        request[RATE_LIMIT] = caller.limit
        caller.limit.enforce()
    return True


async def _charge_address(request: web.Request) -> None:
    settings = request.app[SETTINGS]
    try:
        decision = await ratelimit.charge_address(
            request.app[SERVICES].db, request.remote, settings.anonymous_rate_limit)
    except ApiError as exc:
        if exc.code != "service_unavailable":
            raise
        # Open while the database is away: what needs no database (the OpenAPI
        # document, a 404) still answers.
        return
    if decision is not None:
        request[RATE_LIMIT] = decision
        decision.enforce()
