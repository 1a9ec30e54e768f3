"""Events, series and RSVPs as MCP tools: the same operations, rules and envelopes as REST."""

from __future__ import annotations

import secrets
from typing import Any

import orjson
from mcp.types import CallToolResult, TextContent
from mcp_clients import list_tools, sdk_client

ISSUE_OPERATIONS = ["listProfileEvents", "createProfileEvent", "listProfileSeries", "createProfileSeries", "listEvents", "createEvent", "getEvent", "updateEvent", "deleteEvent", "cancelEvent", "rescheduleEvent", "listEventRsvps", "createEventRsvp", "updateEventRsvp", "deleteEventRsvp", "getEventRsvpStats", "getEventRsvpSettings", "updateEventRsvpSettings", "listSeries", "getSeries", "updateSeries", "deleteSeries", "previewSeriesDeletion", "listSeriesEvents", "addSeriesEvent", "removeSeriesEvent"]


def _body(result: CallToolResult) -> Any:
    [block] = result.content
    assert isinstance(block, TextContent)
    assert orjson.loads(block.text) == result.structured_content
    return result.structured_content


def _ok(result: CallToolResult) -> Any:
    assert result.is_error is False, result.structured_content
    return _body(result)


def error_of(result: CallToolResult) -> dict[str, Any]:
    """The error an isError result carries: the envelope, as its one text block."""
    assert result.is_error is True, result.structured_content
    assert result.structured_content is None
    [block] = result.content
    assert isinstance(block, TextContent)
    error: dict[str, Any] = orjson.loads(block.text)["error"]
    return error


def _error(result: CallToolResult, code: str, param: str | None = None) -> dict[str, Any]:
    error = error_of(result)
    assert error["code"] == code, error
    if param is not None:
        assert error.get("param") == param, error
    return error


async def test_events_series_and_rsvps_as_tools(live_server: Any, user: Any) -> None:
    async with sdk_client(live_server, user) as client:
        tools = await list_tools(client)
        assert set(ISSUE_OPERATIONS) <= set(tools)
        # Input schemas carry the ID patterns, and the time fields are described for agents.
        create_schema = tools["createEvent"].input_schema
        assert "profile_id" in create_schema["required"]
        assert "prf_" in create_schema["properties"]["profile_id"]["description"]
        assert tools["getEvent"].annotations.read_only_hint is True
        assert tools["deleteEvent"].annotations.destructive_hint is True

        profile = _ok(await client.call_tool(
            "createProfile", {"platform_id": "mcp-ev-" + secrets.token_hex(4),
                              "display_name": "MCP events"}))
        when = {"start_time": "2026-03-08T02:30", "start_timezone": "America/New_York"}
        gap = await client.call_tool(
            "createProfileEvent", {"profile_id": profile["id"], "title": "In the gap", **when})
        details = _error(gap, "nonexistent_local_time", "start_time")["details"]
        assert details["gap_from"] == "2026-03-08T02:00:00-05:00"
        assert details["gap_to"] == "2026-03-08T03:00:00-04:00"

        event = _ok(await client.call_tool("createEvent", {
            "profile_id": profile["id"], "title": "Jazz night",
            "start_time": "2026-03-08T19:30", "start_timezone": "America/New_York",
        }))
        assert event["start_time"] == "2026-03-08T23:30:00Z"
        assert event["slug"] == "jazz-night-2026-03-08"

        expanded = _ok(await client.call_tool(
            "getEvent", {"event_id": event["id"], "expand": "profile,rsvp_stats"}))
        assert expanded["profile"]["id"] == profile["id"]
        assert expanded["rsvp_stats"]["going"] == 0
        assert "series" not in expanded
        _error(await client.call_tool("getEvent", {"event_id": event["id"], "expand": "owner"}),
               "invalid_expand", "expand")

        rsvp = _ok(await client.call_tool(
            "createEventRsvp", {"event_id": event["id"], "status": "going"}))
        assert rsvp["event_id"] == event["id"] and rsvp["status"] == "going"
        again = _ok(await client.call_tool(
            "createEventRsvp", {"event_id": event["id"], "status": "maybe"}))
        assert again["id"] == rsvp["id"] and again["status"] == "maybe"

        series = _ok(await client.call_tool(
            "createProfileSeries", {"profile_id": profile["id"], "name": "Season",
                                    "slug": "season"}))
        linked = _ok(await client.call_tool(
            "addSeriesEvent", {"series_id": series["id"], "event_id": event["id"]}))
        assert linked == {"status": "linked"}
        listed = _ok(await client.call_tool("listSeriesEvents", {"series_id": series["id"]}))
        assert [e["id"] for e in listed["data"]] == [event["id"]]
        removed = _ok(await client.call_tool(
            "removeSeriesEvent", {"series_id": series["id"], "event_id": event["id"]}))
        assert removed == {"status": "removed"}

        cancelled = _ok(await client.call_tool(
            "cancelEvent", {"event_id": event["id"], "reason": "Storm"}))
        assert cancelled["status"] == "cancelled"
        _error(await client.call_tool("updateEvent", {"event_id": event["id"], "title": "x"}),
               "event_cancelled")

        deletion = _ok(await client.call_tool(
            "deleteSeries", {"series_id": series["id"], "cascade_exclusive_events": True}))
        assert deletion == {"member_count": 0, "deleted_event_count": 0,
                            "preserved_event_count": 0}
        assert _ok(await client.call_tool("deleteEvent", {"event_id": event["id"]})) == {
            "status": "deleted"}
        _error(await client.call_tool("getEvent", {"event_id": event["id"]}),
               "resource_not_found")


async def test_update_keeps_the_end_and_reschedule_the_duration(
    live_server: Any, user: Any
) -> None:
    async with sdk_client(live_server, user) as client:
        profile = _ok(await client.call_tool(
            "createProfile", {"platform_id": "mcp-mv-" + secrets.token_hex(4),
                              "display_name": "MCP moves"}))
        ny = "America/New_York"
        event = _ok(await client.call_tool("createEvent", {
            "profile_id": profile["id"], "title": "Jazz night",
            "start_time": "2026-03-08T19:30", "start_timezone": ny,
            "end_time": "2026-03-08T21:00", "end_timezone": ny,
        }))
        assert event["end_time"] == "2026-03-09T01:00:00Z"
        later = _ok(await client.call_tool("updateEvent", {
            "event_id": event["id"], "start_time": "2026-03-08T20:00", "start_timezone": ny}))
        assert (later["start_time"], later["end_time"]) == (
            "2026-03-09T00:00:00Z", "2026-03-09T01:00:00Z")
        past = {"start_time": "2026-03-09T10:00", "start_timezone": ny}
        refused = await client.call_tool("updateEvent", {"event_id": event["id"], **past})
        details = _error(refused, "invalid_time_range", "start_time")["details"]
        assert details == {"start": "2026-03-09T14:00:00Z", "end": "2026-03-09T01:00:00Z"}
        assert _ok(await client.call_tool("getEvent", {"event_id": event["id"]})) == later
        moved = _ok(await client.call_tool("rescheduleEvent", {"event_id": event["id"], **past}))
        assert (moved["start_time"], moved["end_time"]) == (
            "2026-03-09T14:00:00Z", "2026-03-09T15:00:00Z")
