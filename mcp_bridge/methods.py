"""The MCP methods each era answers, and the fields each era's results carry."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from importlib import metadata
from typing import TYPE_CHECKING, Any

from aiohttp import web

from mcp_bridge import tools
from mcp_bridge.jsonrpc import METHOD_NOT_FOUND, Message, RpcError
from mcp_bridge.protocol import LEGACY_VERSIONS, META_SERVER_INFO, SUPPORTED_VERSIONS

if TYPE_CHECKING:
    from domain.auth import Viewer
    from domain.ratelimit import Decision


def _version() -> str:
    try:
        return metadata.version("kalends")
    except metadata.PackageNotFoundError:
        return "0.0.0"


SERVER_INFO = {"name": "kalends", "title": "Kalends", "version": _version()}
# No listChanged: the tool list changes only with a deploy, which ttlMs covers.
CAPABILITIES: dict[str, Any] = {"tools": {"listChanged": False}}
INSTRUCTIONS = (
    "Kalends is a scheduling API: each tool is one operation, taking one flat object of "
    "path, query and body arguments.",
    "Times: start_time and end_time are UTC; local_start_time and local_end_time are the "
    "same instants in the item's own zone. Send local times with their zone "
    "(start_time 2026-03-08T19:30, start_timezone Europe/Paris).",
    "IDs are prefixed (evt_, cal_, prf_, ...): pass them exactly as given. Lists answer "
    "{data, has_more, next_cursor}: while has_more, call again with cursor=next_cursor. "
    "`fields` and `limit` ask for less; a result holds at most 100,000 characters.",
    "A failed call is an isError result whose text is {\"error\": {code, message, "
    "param}}: act on code and param.",
)
"""The instructions' lines, the toolsets' (toolsets.describe) after them."""
_START = ("Call getContext first: the date and time in the user's zone, their calendars, "
          "profiles and organizations, in one call.")
# caching.mdx: the tool list is the same for every caller; it changes only on deploy.
_CACHE_HINTS: dict[str, Any] = {"ttlMs": 300_000, "cacheScope": "public"}


@dataclass(frozen=True)
class Context:
    app: web.Application
    viewer: Viewer
    request_id: str
    catalogue: tools.Catalogue
    """The request's selection of the tools (toolsets.py)."""
    limit: Decision | None = None
    selected_by_header: bool = False
    """Whether the selection came from headers (X-MCP-Toolsets, X-MCP-Readonly)."""


_Handler = Callable[[Context, dict[str, Any]], Awaitable[dict[str, Any]]]


async def dispatch(ctx: Context, message: Message, *, modern: bool) -> dict[str, Any]:
    handler = (_MODERN if modern else _LEGACY).get(message.method)
    if handler is None:
        raise RpcError(METHOD_NOT_FOUND, f"Method not found: {message.method}")
    result = await handler(ctx, message.params)
    if not modern:
        return result
    # basic/index.mdx: every result carries resultType; servers SHOULD identify
    # themselves in each result's _meta. caching.mdx: cacheable results carry hints.
    if message.method in _CACHEABLE:
        result = {**result, **_CACHE_HINTS}
        if ctx.selected_by_header:
            # A shared cache keys on the URL, not on X-MCP-Toolsets: a list narrowed by
            # header is for this caller's cache alone.
            result["cacheScope"] = "private"
    return {"resultType": "complete", **result, "_meta": {META_SERVER_INFO: SERVER_INFO}}


async def _discover(ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
    return {
        "supportedVersions": list(SUPPORTED_VERSIONS),
        "capabilities": CAPABILITIES,
        "instructions": _instructions(ctx),
    }


async def _initialize(ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
    # Lifecycle: echo the client's version when supported, else offer our latest.
    requested = params.get("protocolVersion")
    version = requested if requested in LEGACY_VERSIONS else LEGACY_VERSIONS[0]
    return {
        "protocolVersion": version,
        "capabilities": CAPABILITIES,
        "serverInfo": SERVER_INFO,
        "instructions": _instructions(ctx),
    }


def _instructions(ctx: Context) -> str:
    # Only a tool this request may call is named.
    start = (_START,) if "getContext" in ctx.catalogue.names else ()
    return "\n".join((INSTRUCTIONS[0], *start, *INSTRUCTIONS[1:], ctx.catalogue.toolsets_note))


async def _ping(ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
    return {}


async def _tools_list(ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
    return tools.list_page(ctx.catalogue, params)


async def _tools_call(ctx: Context, params: dict[str, Any]) -> dict[str, Any]:
    return await tools.call(ctx.app, ctx.viewer, ctx.catalogue, params, ctx.request_id,
                            ctx.limit)


_LEGACY: dict[str, _Handler] = {
    "initialize": _initialize,
    "ping": _ping,
    "tools/list": _tools_list,
    "tools/call": _tools_call,
}
_MODERN: dict[str, _Handler] = {
    "server/discover": _discover,
    "tools/list": _tools_list,
    "tools/call": _tools_call,
}
_CACHEABLE = frozenset({"server/discover", "tools/list"})
