"""An agent finds a meeting time over MCP, books it, and finds it gone: the official
SDK against `/mcp-developer`, as an agent host would drive it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import httpx2
import orjson
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult, TextContent

from domain import accounts

ZONE = "America/New_York"


def _body(result: CallToolResult) -> Any:
    """The structured result, checked against its one text block."""
    assert result.is_error is False, result.structured_content
    [block] = result.content
    assert isinstance(block, TextContent)
    assert orjson.loads(block.text) == result.structured_content
    return result.structured_content


@asynccontextmanager
async def _session(url: str, headers: dict[str, str]) -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(headers=headers) as http,
        Client(streamable_http_client(url + "/mcp-developer", http_client=http), mode="auto",
               cache=None) as client,
    ):
        yield client


async def test_an_agent_books_the_first_free_slot_and_it_is_gone(
    live_server: Any, make_user: Any,
) -> None:
    caller = await make_user(timezone=ZONE)
    colleague = await make_user()
    live_server.admin(accounts.add_member, caller.organization_id, colleague.email, "member")
    first = datetime.now(ZoneInfo(ZONE)).date() + timedelta(days=21)
    window = {
        "start": datetime.combine(first, datetime.min.time(), ZoneInfo(ZONE)).isoformat(),
        "end": datetime.combine(first + timedelta(days=7), datetime.min.time(),
                                ZoneInfo(ZONE)).isoformat(),
    }
    search = {**window, "duration_minutes": 45, "emails": [colleague.email, "ghost@example.com"],
              "working_hours": {"start": "10:00", "end": "16:00",
                                "days": ["MO", "TU", "WE", "TH", "FR"]},
              "step_minutes": 15, "limit": 3}

    # What a read-only agenda agent is offered.
    async with _session(live_server.url, {**caller.headers, "X-MCP-Toolsets": "agenda",
                                          "X-MCP-Readonly": "true"}) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools) == {"getAgenda", "getFreeBusy", "findMeetingTimes"}
        for name in ("getFreeBusy", "findMeetingTimes"):
            hints = tools[name].annotations
            assert hints is not None and hints.read_only_hint is True
        assert "createCalendarEvent" in (tools["findMeetingTimes"].description or "")
        found = _body(await client.call_tool("findMeetingTimes", search))

    assert found["time_zone"] == ZONE and found["unavailable"] == ["ghost@example.com"]
    slot = found["data"][0]
    assert slot["local_start"].endswith(("-05:00", "-04:00"))
    assert datetime.fromisoformat(slot["local_start"]) == datetime.fromisoformat(slot["start"])

    async with _session(live_server.url, caller.headers) as client:
        calendars = _body(await client.call_tool("listCalendars", {}))
        calendar_id = next(c["id"] for c in calendars["data"] if c["is_default"])
        booked = _body(await client.call_tool("createCalendarEvent", {
            "calendar_id": calendar_id, "title": "Planning",
            "start_time": slot["local_start"], "start_timezone": found["time_zone"],
            "end_time": slot["local_end"], "end_timezone": found["time_zone"],
        }))
        assert booked["start_time"] == slot["start"] and booked["end_time"] == slot["end"]

        again = _body(await client.call_tool("findMeetingTimes", search))
        starts = [s["start"] for s in again["data"]]
        assert slot["start"] not in starts
        # Nothing overlapping the booking is offered; what came after it still is.
        booked_at = datetime.fromisoformat(slot["start"])
        for s in again["data"]:
            assert (datetime.fromisoformat(s["end"]) <= booked_at
                    or datetime.fromisoformat(s["start"]) >= booked_at + timedelta(minutes=45))
        busy = _body(await client.call_tool("getFreeBusy", {
            **window, "emails": colleague.email}))
        assert busy["people"][0]["busy"] == [
            {"start": slot["start"], "end": slot["end"], "status": "busy"}]
        assert busy["people"][1] == {"email": colleague.email, "busy": [], "error": None}
        assert datetime.fromisoformat(busy["start"]) == datetime.fromisoformat(window["start"])
        assert busy["start"].endswith("Z") and datetime.fromisoformat(busy["end"]).tzinfo == UTC

        refused = await client.call_tool("findMeetingTimes", {**search, "step_minutes": 7})
        assert refused.is_error is True  # the envelope as text only (docs/mcp.md, "Results")
        [block] = refused.content
        assert isinstance(block, TextContent)
        assert orjson.loads(block.text)["error"]["param"] == "step_minutes"
