"""Every API error reaches an agent as an `isError` result with its code, in the
official TypeScript SDK (npm `@modelcontextprotocol/sdk`, which most agent hosts
written in TypeScript build on) and in the Python one, on both MCP routes
(docs/mcp.md, "Error results").

The TypeScript SDK checks `structuredContent` against the tool's `outputSchema`,
error results included: an error result that carried the envelope there made
`callTool` throw `-32602` instead of showing the error. Error results carry the
envelope as their one text block and no `structuredContent`.

The SDK is installed from the npm registry into .cache/mcp-typescript on first
use (tests/npm_cache.py); without npm or node the TypeScript half is skipped.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import Any

import httpx2
import npm_cache
import orjson
import pytest
from conftest import caller_on
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import TextContent

# slow: the npm TypeScript SDK, installed and run (the fast loop, pytest -m 'not slow', leaves it out)
pytestmark = pytest.mark.slow

SDK_PACKAGE = "@modelcontextprotocol/sdk"
SDK_VERSION = "1.32.2"  # the version that threw on error results, newest when pinned
REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".cache" / "mcp-typescript"
SCRIPT = Path(__file__).resolve().parents[1] / "mcp_typescript_client.cjs"
ROUTES = ["/mcp-developer", "/mcp"]
MISSING_EVENT = "evt_" + "0" * 32
ENVELOPE_KEYS = {"type", "code", "message", "param", "request_id", "details"}


def _errors(calendar_id: str) -> list[tuple[str, dict[str, Any], str, str | None]]:
    """Calls that fail, each a different way: (tool, arguments, code, param)."""
    return [
        ("getEvent", {"event_id": MISSING_EVENT}, "resource_not_found", "event_id"),
        ("listEvents", {"fields": ["nope"]}, "invalid_field", "fields"),
        ("getEvent", {"event_id": MISSING_EVENT, "bogus": 1}, "unknown_field", "bogus"),
        ("getEvent", {"event_id": "prf_" + "1" * 32}, "invalid_id", "event_id"),
        ("createCalendarEvent", {
            "calendar_id": calendar_id, "title": "In the gap",
            "start_time": "2026-03-08T02:30", "start_timezone": "America/New_York"},
         "nonexistent_local_time", "start_time"),
    ]


def _envelope(result: dict[str, Any]) -> dict[str, Any]:
    """The error of an isError result as the wire carries it: one text block with the
    envelope, nothing structured."""
    assert result["isError"] is True, result
    assert "structuredContent" not in result, result
    [block] = result["content"]
    assert block["type"] == "text"
    envelope = orjson.loads(block["text"])
    assert set(envelope) == {"error"} and set(envelope["error"]) <= ENVELOPE_KEYS, envelope
    assert envelope["error"]["request_id"]
    return envelope["error"]  # type: ignore[no-any-return]


def install() -> Path:
    return npm_cache.install_pinned(CACHE, SDK_PACKAGE, SDK_VERSION)


@pytest.fixture(scope="module")
def typescript_sdk() -> Path:
    return install()


def _typescript(sdk: Path, url: str, token: str, calls: list[dict[str, Any]]
                ) -> dict[str, Any]:
    done = subprocess.run(
        ["node", str(SCRIPT)], input=json.dumps({"url": url, "token": token, "calls": calls}),
        capture_output=True, text=True, timeout=120, check=False,
        env={"SDK_DIR": str(sdk), "PATH": "/usr/bin:/bin:/usr/local/bin"})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


@pytest.mark.parametrize("route", ROUTES)
async def test_the_typescript_sdk_shows_every_api_error(
        live_server: Any, user: Any, bearer: Any, typescript_sdk: Path, route: str) -> None:
    caller = caller_on(route, user, bearer)
    errors = _errors(user.calendar_id)
    calls = [{"name": "listCalendars", "arguments": {}},
             *({"name": name, "arguments": arguments} for name, arguments, _, _ in errors)]
    out = await _in_thread(_typescript, typescript_sdk, f"{live_server.url}{route}?toolsets=all",
                           caller.api_key, calls)
    first, *failed = out["results"]
    # A success passes the SDK's check of structuredContent against the outputSchema.
    assert "thrown" not in first, first
    assert first["result"]["structuredContent"]["data"][0]["id"] == user.calendar_id
    for (name, _, code, param), got in zip(errors, failed, strict=True):
        assert "thrown" not in got, (name, got)
        error = _envelope(got["result"])
        assert (error["code"], error.get("param")) == (code, param), (name, error)


@pytest.mark.parametrize("route", ROUTES)
async def test_the_python_sdk_shows_every_api_error(
        live_server: Any, user: Any, bearer: Any, route: str) -> None:
    caller = caller_on(route, user, bearer)
    async with (
        httpx2.AsyncClient(headers=caller.headers) as http,
        Client(streamable_http_client(f"{live_server.url}{route}?toolsets=all",
                                      http_client=http), cache=None) as client,
    ):
        await client.list_tools()  # the SDK keeps each outputSchema to check results
        for name, arguments, code, param in _errors(user.calendar_id):
            result = await client.call_tool(name, arguments)
            assert result.is_error is True and result.structured_content is None, name
            [block] = result.content
            assert isinstance(block, TextContent)
            error = orjson.loads(block.text)["error"]
            assert (error["code"], error.get("param")) == (code, param), (name, error)


async def _in_thread(function: Any, *args: Any) -> Any:
    """A blocking call off the test's loop, which the fixtures' clients run on."""
    return await asyncio.to_thread(function, *args)
