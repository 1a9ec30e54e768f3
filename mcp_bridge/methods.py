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
    from kalends.auth import Viewer
    from kalends.ratelimit import Decision


def _version() -> str:
    try:
        return metadata.version("kalends")
    except metadata.PackageNotFoundError:
        return "0.0.0"


SERVER_INFO = {"name": "kalends", "title": "Kalends", "version": _version()}
# No listChanged: the tool list changes only with a deploy, which ttlMs covers.
CAPABILITIES: dict[str, Any] = {"tools": {"listChanged": False}}
INSTRUCTIONS = (
    "Kalends is a scheduling API. Each tool is one API operation and takes one flat object "
    "of path parameters, query parameters and body fields. IDs are prefixed (prf_, evt_, "
    "ser_, cal_, ...): pass them exactly as a previous result gave them. List tools return "
    "{data, has_more, next_cursor}; while has_more is true, call again with "
    "cursor=next_cursor. A failed call is an isError result whose structuredContent is "
    "{error: {type, code, message, param?, request_id}}: act on code and param. "
    "To spend less context, ask for less: tools that answer a resource or a page of them "
    "take `fields` (e.g. [\"title\", \"start_time\"]: only those and id), and list tools "
    "a smaller `limit`. A result holds at most 100,000 characters: a page past it ends early "
    "(has_more true, next_cursor resumes right after its last item)."
)
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
    return f"{INSTRUCTIONS} {ctx.catalogue.toolsets_note}"


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
