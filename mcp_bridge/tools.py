"""The tool surface: one tool per registry operation, listed in pages, called flat."""

from __future__ import annotations

import base64
import hashlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import web

from kalends import registry
from kalends.errors import ApiError, internal_error
from mcp_bridge.jsonrpc import INVALID_PARAMS, RpcError

if TYPE_CHECKING:
    from kalends.auth import Viewer
    from kalends.ratelimit import Decision
    from kalends.registry import Operation

# The whole catalogue in one page: agent hosts commonly call tools/list once and
# ignore nextCursor (the official SDK's list_tools() returns one page), and would
# never see the tools past the first page. Cursors still work past this size.
PAGE_SIZE = 500

_log = logging.getLogger("kalends.mcp")


@dataclass(frozen=True)
class Catalogue:
    """The listed tools, in registry order, and the cursors that page through them."""

    tools: tuple[dict[str, Any], ...]
    cursors: tuple[str, ...]
    """cursors[n] resumes the listing at page n + 1."""
    page_size: int


def build_catalogue(operations: Mapping[str, Operation], page_size: int = PAGE_SIZE
                    ) -> Catalogue:
    tools = tuple(_tool(op) for op in operations.values())
    # Cursors name the exact catalogue they page through, so one kept across a
    # deploy that changed the tools is refused rather than skipping or repeating.
    stamp = hashlib.sha256(orjson.dumps(tools, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]
    later_pages = range(1, -(-len(tools) // page_size))
    cursors = tuple(
        base64.urlsafe_b64encode(f"{stamp}:{page}".encode()).decode().rstrip("=")
        for page in later_pages
    )
    return Catalogue(tools, cursors, page_size)


def _tool(op: Operation) -> dict[str, Any]:
    tool = {
        "name": op.name,
        "title": op.mcp.title,
        "description": op.mcp.description,
        "inputSchema": op.tool_input_schema(),
        "annotations": dict(op.mcp.annotations),
    }
    output = _output_schema(op)
    if output is not None:
        tool["outputSchema"] = output
    return tool


def _output_schema(op: Operation) -> dict[str, Any] | None:
    """What `structuredContent` holds on success: the REST body, or the no-body status."""
    if op.no_body_status is None:
        # The REST response schema, which the schemathesis suite holds REST bodies to.
        return op.response_schema
    return {
        "type": "object",
        "properties": {"status": {"type": "string", "const": op.no_body_status}},
        "required": ["status"],
        "additionalProperties": False,
    }


def list_page(catalogue: Catalogue, params: Mapping[str, Any]) -> dict[str, Any]:
    """A tools/list result without era-specific fields."""
    cursor = params.get("cursor")
    page = 0
    if cursor is not None:
        if cursor not in catalogue.cursors:
            # pagination.mdx: invalid cursors SHOULD be -32602.
            raise RpcError(
                INVALID_PARAMS,
                "Invalid cursor: pass back a nextCursor exactly as tools/list returned it, "
                "or list again from the start.",
            )
        page = catalogue.cursors.index(cursor) + 1
    start = page * catalogue.page_size
    result: dict[str, Any] = {
        "tools": list(catalogue.tools[start : start + catalogue.page_size])}
    if page < len(catalogue.cursors):
        result["nextCursor"] = catalogue.cursors[page]
    return result


async def call(
    app: web.Application, viewer: Viewer, params: Mapping[str, Any], request_id: str,
    limit: Decision | None = None,
) -> dict[str, Any]:
    """A tools/call result; API errors, the rate limit's included, become `isError`
    results, as tools.mdx asks."""
    name = params.get("name")
    if not isinstance(name, str):
        raise RpcError(INVALID_PARAMS, "tools/call needs params.name, a string.")
    op = registry.OPERATIONS.get(name)
    if op is None:
        raise RpcError(INVALID_PARAMS, f"Unknown tool: {name}")
    arguments = params.get("arguments")
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise RpcError(INVALID_PARAMS, "params.arguments must be an object.")
    try:
        if limit is not None:
            limit.enforce()
        body = await registry.call_flat(app, viewer, op, arguments, request_id)
    except ApiError as exc:
        return _tool_result(exc.envelope(request_id), is_error=True)
    except Exception:
        _log.exception("tool failed", extra={"operation": name, "request_id": request_id})
        return _tool_result(internal_error().envelope(request_id), is_error=True)
    return _tool_result(body if body is not None else {"status": op.no_body_status}, is_error=False)


def _tool_result(structured: dict[str, Any], *, is_error: bool) -> dict[str, Any]:
    return {
        "content": [{"type": "text", "text": orjson.dumps(structured).decode()}],
        "structuredContent": structured,
        "isError": is_error,
    }
