"""Answers an agent can afford (docs/mcp.md): `fields` on the tools that answer a
resource or a page of them, and at most 100,000 characters in any tool result, through
the official MCP SDK (which checks `structuredContent` against each tool's
`outputSchema`)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest
from conftest import Api, LiveServer, User, new_profile
from mcp import Client
from mcp.types import CallToolResult, TextContent
from mcp_clients import list_tools, sdk_client
from test_mcp_events import error_of

from mcp_bridge import tools
from registry import OPERATIONS


@asynccontextmanager
async def _client(live_server: LiveServer, user: User) -> AsyncIterator[Client]:
    """The official SDK's client on /mcp-developer, in the test's own task, once it
    has listed the tools: the SDK keeps each tool's outputSchema to check results."""
    async with sdk_client(live_server, user) as made:
        await list_tools(made)
        yield made


def _sent(result: CallToolResult) -> int:
    """Characters the result holds: its text block and compact structuredContent."""
    [block] = result.content
    assert isinstance(block, TextContent)
    assert orjson.loads(block.text) == result.structured_content
    return len(block.text) + len(json.dumps(result.structured_content, separators=(",", ":"),
                                            ensure_ascii=False))


def _ok(result: CallToolResult) -> Any:
    assert result.is_error is False, result.structured_content
    return result.structured_content


def _event_body(n: int, description: str | None = None) -> dict[str, Any]:
    at = datetime(2031, 3, 1, 9, tzinfo=UTC) + timedelta(hours=n)
    body = {"title": f"Talk {n}", "start_time": at.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "start_timezone": "UTC"}
    if description is not None:
        body["description"] = description
    return body


async def test_fields_narrow_a_list_a_get_and_a_create(
        api: Api, user: User, live_server: LiveServer) -> None:
    async with _client(live_server, user) as client:
        profile = await new_profile(api, user)
        created = _ok(await client.call_tool("createProfileEvent", {
            "profile_id": profile["id"], **_event_body(1, "A long description " * 20),
            "fields": ["title", "start_time"]}))
        assert set(created) == {"id", "title", "start_time"} and created["title"] == "Talk 1"
        for n in range(2, 5):
            _ok(await client.call_tool("createProfileEvent",
                                       {"profile_id": profile["id"], **_event_body(n)}))
        page = _ok(await client.call_tool("listProfileEvents", {
            "profile_id": profile["id"], "fields": ["title", "start_time"]}))
        assert [set(e) for e in page["data"]] == [{"id", "title", "start_time"}] * 4
        assert [e["title"] for e in page["data"]] == ["Talk 1", "Talk 2", "Talk 3", "Talk 4"]
        assert set(page) == {"data", "has_more", "next_cursor"}
        whole = _ok(await client.call_tool("listProfileEvents", {"profile_id": profile["id"]}))
        assert [{k: e[k] for k in ("id", "title", "start_time")} for e in whole["data"]] == \
            page["data"]
        got = _ok(await client.call_tool("getEvent", {"event_id": created["id"],
                                                      "fields": ["description"]}))
        assert got == {"id": created["id"], "description": "A long description " * 20}
        # Nested objects come whole.
        got = _ok(await client.call_tool("getEvent", {"event_id": created["id"],
                                                      "expand": "rsvp_settings",
                                                          "fields": ["rsvp_settings"]}))
        assert set(got) == {"id", "rsvp_settings"} and isinstance(got["rsvp_settings"], dict)
        # A narrowed answer costs a fraction of the whole one.
        small = await client.call_tool("listProfileEvents", {"profile_id": profile["id"],
                                                             "fields": ["title"]})
        large = await client.call_tool("listProfileEvents", {"profile_id": profile["id"]})
        assert _sent(small) * 4 < _sent(large)


async def test_an_unknown_field_names_the_valid_ones(
        api: Api, user: User, live_server: LiveServer) -> None:
    async with _client(live_server, user) as client:
        profile = await new_profile(api, user)
        result = await client.call_tool("listProfileEvents", {"profile_id": profile["id"],
                                                              "fields": ["title", "colour"]})
        error = error_of(result)
        assert (error["code"], error["param"]) == ("invalid_field", "fields")
        assert error["details"] == {"value": "colour"}
        assert "colour" in error["message"] and "start_time" in error["message"]
        # Nothing but names: not a list, an empty list.
        for bad in ("title", [], [1]):
            result = await client.call_tool("getProfile", {"profile_id": profile["id"],
                                                           "fields": bad})
            assert error_of(result)["code"] == "invalid_field"
        # Tools that answer no resource take no `fields`.
        result = await client.call_tool("getAgenda", {"fields": ["items"]})
        assert error_of(result)["code"] == "unknown_field"


async def test_a_page_past_the_bound_ends_early_and_its_cursor_walk_misses_nothing(
        api: Api, user: User, live_server: LiveServer) -> None:
    async with _client(live_server, user) as client:
        profile = await new_profile(api, user)
        made = []
        for n in range(36):
            status, event, _ = await api.post(f"/v1/profiles/{profile['id']}/events", user,
                                              json=_event_body(n, f"{n:03d} " + "é" * 4990))
            assert status == 201, event
            made.append(event["id"])
        seen: list[str] = []
        cursor = None
        pages = 0
        while True:
            arguments: dict[str, Any] = {"profile_id": profile["id"], "limit": 100}
            if cursor is not None:
                arguments["cursor"] = cursor
            result = await client.call_tool("listProfileEvents", arguments)
            page = _ok(result)
            assert _sent(result) <= tools.MAX_RESULT_CHARACTERS
            seen += [e["id"] for e in page["data"]]
            pages += 1
            assert page["data"], page
            if not page["has_more"]:
                break
            cursor = page["next_cursor"]
        assert pages > 1  # the bound cut the pages: 36 such events are ~720,000 characters
        assert seen == made  # every item exactly once, in order
        # Narrowed, the same list fits one page.
        page = _ok(await client.call_tool("listProfileEvents", {
            "profile_id": profile["id"], "limit": 100, "fields": ["title"]}))
        assert len(page["data"]) == 36 and page["has_more"] is False


async def test_a_single_resource_past_the_bound_is_response_too_large(
        api: Api, user: User, live_server: LiveServer, monkeypatch: pytest.MonkeyPatch) -> None:
    async with _client(live_server, user) as client:
        profile = await new_profile(api, user)
        status, event, _ = await api.post(f"/v1/profiles/{profile['id']}/events", user,
                                          json=_event_body(1, "x" * 5000))
        assert status == 201, event
        # An event holds at most ~6,000 characters; a bound below two of them stands in
        # for the 100,000 (the live server runs in this process).
        monkeypatch.setattr(tools, "MAX_RESULT_CHARACTERS", 8000)
        result = await client.call_tool("getEvent", {"event_id": event["id"]})
        error = error_of(result)
        assert (error["code"], error["param"]) == ("response_too_large", "fields")
        assert "`fields`" in error["message"]
        assert _ok(await client.call_tool("getEvent", {"event_id": event["id"],
                                                       "fields": ["title"]}))["title"] == "Talk 1"


def test_every_tool_that_answers_a_resource_takes_fields() -> None:
    narrowable = {name for name, op in OPERATIONS.items() if op.resource is not None}
    assert {"listEvents", "getEvent", "createEvent", "listProfileEvents", "getProfile",
            "listRsvps" if "listRsvps" in OPERATIONS else "listEventRsvps"} <= narrowable
    assert "getAgenda" not in narrowable and "getFreeBusy" not in narrowable
    for name in narrowable:
        op = OPERATIONS[name]
        schema = tools.output_schema(op)
        assert schema is not None and op.resource is not None
        resource = schema["properties"]["data"]["items"] if op.resource.page else schema
        # An occurrence is named by its occurrence_id (docs/occurrences.md).
        assert resource["required"] == [op.resource.key], name
        assert op.resource.key == ("occurrence_id" if "Occurrence" in name else "id"), name
