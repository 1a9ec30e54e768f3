"""Arguments an agent gets right (docs/mcp.md, "Arguments"): `fields` naming an
expansion brings it, no name is dropped silently, and a list REST takes
comma-separated takes a JSON array of strings too, a wrong shape's error naming both."""

from __future__ import annotations

from datetime import date, timedelta
from typing import Any

from conftest import Api, LiveServer, User, new_event, new_profile
from mcp_clients import list_tools, sdk_client
from test_mcp_events import error_of

import kalends.service.app  # noqa: F401  (registers and prepares every operation)
from mcp_bridge import arguments, tools
from registry import OPERATIONS


def _ok(result: Any) -> Any:
    assert result.is_error is False, result.content
    return result.structured_content


async def test_fields_naming_an_expansion_bring_it(
        api: Api, user: User, live_server: LiveServer) -> None:
    profile = await new_profile(api, user, display_name="Workshops")
    event = await new_event(api, user, profile, title="Saturday workshop")
    async with sdk_client(live_server, user) as client:
        await list_tools(client)
        got = _ok(await client.call_tool("getEvent", {
            "event_id": event["id"], "fields": ["title", "rsvp_stats"]}))
        assert set(got) == {"id", "title", "rsvp_stats"}
        assert got["rsvp_stats"]["going"] == 0
        got = _ok(await client.call_tool("getEvent", {
            "event_id": event["id"], "fields": ["profile", "series"], "expand": "rsvp_settings"}))
        assert got == {"id": event["id"], "profile": got["profile"], "series": []}
        assert got["profile"]["display_name"] == "Workshops"
        # Named with expand as well, as an array: brought once.
        got = _ok(await client.call_tool("getEvent", {
            "event_id": event["id"], "fields": ["rsvp_settings"], "expand": ["rsvp_settings"]}))
        assert set(got) == {"id", "rsvp_settings"}
        updated = _ok(await client.call_tool("updateEvent", {
            "event_id": event["id"], "title": "Saturday workshop (full)",
            "fields": ["title", "rsvp_stats"]}))
        assert set(updated) == {"id", "title", "rsvp_stats"}
        # Where no expansion exists, the name is refused, never dropped.
        refused = await client.call_tool("listEvents", {"fields": ["title", "rsvp_stats"]})
        error = error_of(refused)
        assert (error["code"], error["param"]) == ("invalid_field", "fields")
        assert "rsvp_stats" in error["message"] and "local_start_time" in error["message"]


def test_every_field_only_an_expansion_brings_can_be_expanded() -> None:
    """So that `fields` never names one it cannot bring."""
    for op in OPERATIONS.values():
        found = arguments.resource(op)
        if found is not None and found.conditional:
            assert "expand" in op.query_model.model_fields, op.name


async def test_lists_take_an_array_or_a_comma_separated_string(
        api: Api, user: User, live_server: LiveServer, make_user: Any) -> None:
    colleagues = [(await make_user()).email for _ in range(2)]
    day = date.today() + timedelta(days=3)
    window = {"start": f"{day}T00:00:00Z", "end": f"{day + timedelta(days=1)}T00:00:00Z"}
    async with sdk_client(live_server, user) as client:
        tools_listed = await list_tools(client)
        emails = tools_listed["getFreeBusy"].input_schema["properties"]["emails"]
        assert {"type": "array", "items": {"type": "string"}} in emails["anyOf"]
        joined = _ok(await client.call_tool("getFreeBusy", {
            **window, "emails": ",".join(colleagues)}))
        listed = _ok(await client.call_tool("getFreeBusy", {**window, "emails": colleagues}))
        assert listed == joined
        assert [p["email"] for p in listed["people"]][1:] == colleagues
        agenda = _ok(await client.call_tool("getAgenda", {
            "date": day.isoformat(), "calendar_ids": [user.calendar_id]}))
        assert [s["calendar_id"] for s in agenda["sources"]] == [user.calendar_id]
        found = _ok(await client.call_tool("search", {"q": "nothing-like-this",
                                                      "type": ["event", "series"]}))
        assert found["data"] == []
        for bad in (42, [1, 2], {"a": "b"}, True):
            error = error_of(await client.call_tool("getFreeBusy", {**window, "emails": bad}))
            assert (error["code"], error["param"]) == ("invalid_field", "emails"), bad
            assert "array of strings" in error["message"] and "comma-separated" in \
                error["message"], error
        # Each entry is still checked as REST checks it.
        error = error_of(await client.call_tool("getAgenda", {"calendar_ids": ["cal_nope"]}))
        assert error["param"] == "calendar_ids"


def test_list_arguments_are_the_comma_separated_ones() -> None:
    lists = {(op.name, name) for op in OPERATIONS.values()
             for name in arguments.comma_separated(op)}
    assert {("getFreeBusy", "emails"), ("getFreeBusy", "calendar_ids"),
            ("getAgenda", "calendar_ids"), ("search", "type"), ("getEvent", "expand")} <= lists
    for name, argument in lists:
        schema = tools.input_schema(OPERATIONS[name])["properties"][argument]
        assert {"type": "array", "items": {"type": "string"}} in schema["anyOf"], name
