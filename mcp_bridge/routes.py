"""The two Streamable HTTP endpoints: POST in, one JSON response out.

Answers are always `application/json`, never SSE: no method here streams.
Every answer is JSON-RPC, HTTP-level refusals (401, 403 consumer_not_claimed,
405, 413, 415, 429, 503) included: MCP clients show a JSON-RPC error's message,
and only a generic "error response" for any other body. The API's envelope
rides along as the error's `data`.
"""

from __future__ import annotations

from aiohttp import web

import registry
from core.errors import ApiError
from domain import origins
from domain.auth import Viewer
from mcp_bridge import jsonrpc, methods, protocol, toolsets
from mcp_bridge.jsonrpc import RpcError
from mcp_bridge.tools import Catalogues
from web.oauth import require_scope
from web.responses import error_response, json_response
from web.services import OPERATION, RATE_LIMIT, REQUEST_ID, VIEWER

CATALOGUES = web.AppKey("mcp_catalogues", Catalogues)
ALLOWED_ORIGINS = web.AppKey("mcp_allowed_origins", frozenset)

# The statuses the 2026-07-28 transport gives protocol errors; handshake-era
# clients get JSON-RPC errors with 200, as those transports sent them.
_MODERN_STATUS = {
    jsonrpc.INVALID_PARAMS: 400,
    protocol.HEADER_MISMATCH: 400,
    protocol.UNSUPPORTED_PROTOCOL_VERSION: 400,
    jsonrpc.METHOD_NOT_FOUND: 404,
}


async def developer(request: web.Request) -> web.StreamResponse:
    refusal = _refusal(request)
    if refusal is not None:
        return refusal
    # The guard middleware has authenticated the key (401, 403 consumer_not_claimed).
    return await _serve(request, request[VIEWER])


async def oauth(request: web.Request) -> web.StreamResponse:
    refusal = _refusal(request)
    if refusal is not None:
        return refusal
    # The guard middleware has checked the access token (401 with the challenge,
    # 403 consumer_not_claimed); each call's scope is checked in _serve.
    return await _serve(request, request[VIEWER])


def error_body(request: web.Request, error: ApiError) -> web.Response:
    """An HTTP-level refusal as a JSON-RPC error (id null: the request was not read),
    its status and headers those of the API's error response."""
    envelope = error_response(error, request.get(REQUEST_ID))
    code = _SERVER_ERROR if error.status >= 500 else (
        _NOT_AUTHORIZED if error.status in (401, 403) else jsonrpc.INVALID_REQUEST)
    refused = RpcError(code, error.message, error.envelope(request.get(REQUEST_ID))["error"])
    response = json_response(jsonrpc.error(None, refused), error.status)
    response.headers.update({k: v for k, v in envelope.headers.items()
                             if k in ("WWW-Authenticate", "Retry-After")})
    return response


# JSON-RPC leaves -32000 to -32099 to implementations.
_NOT_AUTHORIZED = -32001
_SERVER_ERROR = -32603


def _refusal(request: web.Request) -> web.Response | None:
    if not origins.allowed(request.headers.get("Origin"), request.app[ALLOWED_ORIGINS]):
        # streamable-http.mdx "Security": 403, optionally a JSON-RPC error without id.
        forbidden = RpcError(jsonrpc.INVALID_REQUEST, "Forbidden: this Origin may not call MCP.")
        return json_response(jsonrpc.error(None, forbidden), 403)
    if request.method != "POST":
        # No GET stream and no sessions to DELETE (streamable-http.mdx, earlier revisions).
        response = error_body(
            request, ApiError("method_not_allowed", f"{request.path} accepts only POST."))
        response.headers["Allow"] = "POST"
        return response
    return None


async def _serve(request: web.Request, viewer: Viewer) -> web.Response:
    if request.content_type != "application/json":
        raise ApiError("unsupported_media_type", "Send the JSON-RPC message as application/json.")
    body = await request.read()  # past client_max_size: 413 payload_too_large, from the middleware
    try:
        message = jsonrpc.parse(body)
    except RpcError as exc:
        return json_response(jsonrpc.error(None, exc), 400)
    if message.id is None:
        # Nothing a client notifies changes what this stateless server does.
        return web.Response(status=202)
    # The toolsets the request selects (X-MCP-Toolsets, ?toolsets=, ...): what it
    # lists, and the only tools it may call.
    catalogue = request.app[CATALOGUES].select(request.headers, request.query)
    tool = message.params.get("name")
    op = None
    if message.method == "tools/call" and isinstance(tool, str) and tool in catalogue.names:
        request[OPERATION] = tool  # names the operation in the access log, as REST does
        op = registry.OPERATIONS[tool]
    # An OAuth token's scopes: kalends:read for anything, kalends:write for a tool
    # that is not read-only (its registry entry says which); 403 otherwise. A tool
    # outside the selection is unknown, as it is to tools/call, and needs no scope.
    require_scope(request, read_only=op is None or op.mcp.read_only)
    modern = protocol.is_modern(request.headers, message)
    ctx = methods.Context(request.app, viewer, request[REQUEST_ID], catalogue,
                          request.get(RATE_LIMIT), toolsets.by_header(request.headers))
    try:
        if modern:
            protocol.check_modern(request.headers, message)
        result = await methods.dispatch(ctx, message, modern=modern)
    except RpcError as exc:
        status = _MODERN_STATUS.get(exc.code, 200) if modern else 200
        return json_response(jsonrpc.error(message.id, exc), status)
    return json_response(jsonrpc.result(message.id, result))
