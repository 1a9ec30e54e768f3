"""The official MCP SDK's client on /mcp-developer, for the tests that call tools as an
agent does (tests/mcp_bridge/, and the parts whose rules the tools reach: calendars,
follows): the session, every tool listed, and what a result carries."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import orjson
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult, TextContent


@asynccontextmanager
async def sdk_client(live_server: Any, user: Any, toolsets: str = "all"
                     ) -> AsyncIterator[Client]:
    """The official SDK's client on /mcp-developer, as `user`, listing `toolsets`."""
    url = f"{live_server.url}/mcp-developer?toolsets={toolsets}"
    async with (
        httpx2.AsyncClient(headers=user.headers) as http,
        Client(streamable_http_client(url, http_client=http), cache=None) as client,
    ):
        yield client


async def list_tools(client: Client) -> dict[str, Any]:
    """Every tool, by name, through all the pages of tools/list."""
    tools: dict[str, Any] = {}
    cursor: str | None = None
    while True:
        page = await client.list_tools(cursor=cursor)
        tools.update({t.name: t for t in page.tools})
        cursor = page.next_cursor
        if cursor is None:
            return tools


def result_body(result: CallToolResult) -> Any:
    """What the result carries: structuredContent and its text, or an error's envelope,
    which is text only (docs/mcp.md, "Results")."""
    [block] = result.content
    assert isinstance(block, TextContent)
    if result.is_error:
        assert result.structured_content is None
        return orjson.loads(block.text)
    assert orjson.loads(block.text) == result.structured_content
    return result.structured_content
