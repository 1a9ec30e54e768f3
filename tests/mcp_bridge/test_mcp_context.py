"""What an agent reads before its first real call and in every answer (docs/mcp.md,
"getContext" and "Local times"): `getContext` on REST, MCP and GraphQL, and times on
the item's own clock beside the UTC ones in MCP answers and GraphQL, REST unchanged."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from conftest import Api, LiveServer, User, new_profile
from mcp_clients import list_tools, sdk_client

from registry import OPERATIONS
from registry.toolsets import toolsets

CONTEXT_KEYS = {"now", "time_zone", "local_now", "email", "organizations", "profiles",
                "calendars", "toolsets"}


async def _context(api: Api, user: User) -> dict[str, Any]:
    status, body, _ = await api.get("/v1/context", user)
    assert status == 200, body
    return body  # type: ignore[no-any-return]


async def test_get_context_says_who_when_and_where(api: Api, user: User) -> None:
    profile = await new_profile(api, user, display_name="Community talks")
    body = await _context(api, user)
    assert set(body) == CONTEXT_KEYS
    now = datetime.fromisoformat(body["now"].replace("Z", "+00:00"))
    assert body["now"].endswith("Z") and abs(datetime.now(UTC) - now) < timedelta(seconds=30)
    # No saved zone: UTC, and the local time says its offset.
    assert body["time_zone"] == "UTC"
    assert datetime.fromisoformat(body["local_now"]) == now
    assert body["local_now"].endswith("+00:00")
    assert body["email"] == user.email
    assert body["organizations"] == [
        {"id": user.organization_id, "name": body["organizations"][0]["name"], "role": "owner"}]
    assert body["profiles"] == {"data": [{"id": profile["id"], "display_name": "Community talks",
                                          "organization_id": user.organization_id}],
                                "has_more": False}
    [calendar] = body["calendars"]["data"]
    assert calendar["id"] == user.calendar_id and calendar["is_default"] is True
    assert set(calendar) == {"id", "name", "is_default"} and body["calendars"]["has_more"] is False
    assert body["toolsets"] == [{"name": name, "tool_count": len(ops)}
                                for name, ops in toolsets(OPERATIONS.values()).items()]
    assert body["toolsets"][0]["name"] == "core"


async def test_the_saved_zone_gives_the_local_time(api: Api, make_user: Any) -> None:
    person = await make_user(timezone="America/New_York")
    body = await _context(api, person)
    assert body["time_zone"] == "America/New_York"
    local = datetime.fromisoformat(body["local_now"])
    assert local.utcoffset() in (timedelta(hours=-5), timedelta(hours=-4))
    assert local == datetime.fromisoformat(body["now"].replace("Z", "+00:00"))


async def test_at_most_20_profiles_and_a_constant_number_of_statements(
        api: Api, user: User, live_server: LiveServer) -> None:
    async def statements() -> tuple[int, dict[str, Any]]:
        before = live_server.query_count
        body = await _context(api, user)
        return live_server.query_count - before, body

    few, _ = await statements()
    made = [(await new_profile(api, user))["id"] for _ in range(21)]
    many, body = await statements()
    # Authentication, then organizations, profiles and calendars: one statement each.
    assert few == many == 4
    assert [p["id"] for p in body["profiles"]["data"]] == made[:20]
    assert body["profiles"]["has_more"] is True


async def test_get_context_is_a_core_tool_and_a_graphql_field(
        api: Api, user: User, live_server: LiveServer) -> None:
    rest = await _context(api, user)
    async with sdk_client(live_server, user, toolsets="core") as client:
        tools = await list_tools(client)
        assert tools["getContext"].annotations.read_only_hint is True
        result = await client.call_tool("getContext", {})
        assert result.is_error is False
        answer = result.structured_content
        assert {k: v for k, v in answer.items() if k not in ("now", "local_now")} == \
            {k: v for k, v in rest.items() if k not in ("now", "local_now")}
    status, body, _ = await api.post("/graphql", user, json={"query": """
        { context { time_zone local_now email calendars { data { id } has_more }
                    toolsets { name tool_count } } }"""})
    assert status == 200 and "errors" not in body, body
    assert body["data"]["context"]["calendars"]["data"] == [{"id": user.calendar_id}]
    assert body["data"]["context"]["toolsets"] == rest["toolsets"]


# -- local times -------------------------------------------------------------------------

PARIS_WINTER = {"start_time": "2031-11-25T11:00", "start_timezone": "Europe/Paris",
                "end_time": "2031-11-25T12:30", "end_timezone": "Europe/Paris"}


async def test_mcp_answers_carry_local_times(api: Api, user: User, live_server: LiveServer
                                             ) -> None:
    profile = await new_profile(api, user)
    async with sdk_client(live_server, user) as client:
        await list_tools(client)  # the SDK checks each answer against its outputSchema
        booked = await client.call_tool("createCalendarEvent", {
            "calendar_id": user.calendar_id, "title": "Dentist", **PARIS_WINTER})
        assert booked.is_error is False, booked.content
        event = booked.structured_content
        # UTC as REST says it, and the time the user meant.
        assert event["start_time"] == "2031-11-25T10:00:00Z"
        assert event["local_start_time"] == "2031-11-25T11:00:00+01:00"
        assert event["local_end_time"] == "2031-11-25T12:30:00+01:00"
        # Each end on its own zone's clock.
        flight = (await client.call_tool("createProfileEvent", {
            "profile_id": profile["id"], "title": "Flight", "start_time": "2031-07-01T10:00",
            "start_timezone": "Europe/Paris", "end_time": "2031-07-01T12:00",
            "end_timezone": "Europe/London"})).structured_content
        assert flight["local_start_time"] == "2031-07-01T10:00:00+02:00"
        assert flight["local_end_time"] == "2031-07-01T12:00:00+01:00"
        # All-day items carry none: their dates are local.
        holiday = (await client.call_tool("createCalendarEvent", {
            "calendar_id": user.calendar_id, "title": "Holiday", "is_all_day": True,
            "start_date": "2031-12-25", "start_timezone": "Europe/Paris"})).structured_content
        assert holiday["local_start_time"] is None and holiday["local_end_time"] is None
        # Lists and reads carry them, and `fields` names them like any other field.
        page = (await client.call_tool("listProfileEvents", {
            "profile_id": profile["id"]})).structured_content
        assert page["data"][0]["local_start_time"] == "2031-07-01T10:00:00+02:00"
        narrowed = (await client.call_tool("getEvent", {
            "event_id": flight["id"], "fields": ["title", "local_start_time"]}))
        assert narrowed.structured_content == {
            "id": flight["id"], "title": "Flight", "local_start_time": "2031-07-01T10:00:00+02:00"}
        without = (await client.call_tool("getEvent", {
            "event_id": flight["id"], "fields": ["start_time"]})).structured_content
        assert set(without) == {"id", "start_time"}
    # REST bodies are unchanged: no local times (docs/mcp.md, "Local times").
    status, rest, _ = await api.get(f"/v1/events/{flight['id']}", user)
    assert status == 200 and "local_start_time" not in rest and "local_end_time" not in rest
    status, rest, _ = await api.get(
        f"/v1/calendars/{user.calendar_id}/events/{event['id']}", user)
    assert status == 200 and not {"local_start_time", "local_end_time"} & set(rest)


@pytest.mark.parametrize("expand", [None, "rsvp_stats"])
async def test_whole_answers_carry_local_times_with_or_without_expand(
        api: Api, user: User, live_server: LiveServer, expand: str | None) -> None:
    profile = await new_profile(api, user)
    status, event, _ = await api.post(f"/v1/profiles/{profile['id']}/events", user,
                                      json={"title": "Talk", **PARIS_WINTER})
    assert status == 201, event
    arguments = {"event_id": event["id"], **({"expand": expand} if expand else {})}
    async with sdk_client(live_server, user) as client:
        await list_tools(client)
        got = (await client.call_tool("getEvent", arguments)).structured_content
    assert {k: v for k, v in got.items() if not k.startswith("local_")} == (
        {**event, "rsvp_stats": got["rsvp_stats"]} if expand else event)
    assert got["local_start_time"] == "2031-11-25T11:00:00+01:00"


async def test_graphql_types_have_local_times(api: Api, user: User) -> None:
    profile = await new_profile(api, user)
    status, event, _ = await api.post(f"/v1/profiles/{profile['id']}/events", user, json={
        "title": "Weekly", "start_time": "2031-03-25T19:30", "start_timezone": "Europe/Paris",
        "end_time": "2031-03-25T21:00", "end_timezone": "Europe/Paris",
        "recurrence_rule": "FREQ=WEEKLY;COUNT=3"})
    assert status == 201, event
    status, mine, _ = await api.post(f"/v1/calendars/{user.calendar_id}/events", user,
                                     json={"title": "Dentist", **PARIS_WINTER})
    assert status == 201, mine
    status, body, _ = await api.post("/graphql", user, json={"query": """
        query($id: ID!, $cal: ID!) {
          event(event_id: $id) {
            local_start_time local_end_time
            occurrences(from: "2031-03-20T00:00:00Z", to: "2031-04-10T00:00:00Z",
                        timezone: "Asia/Tokyo") { local_start local_start_time local_end_time }
          }
          calendar(calendar_id: $cal) { events { data { local_start_time } } }
        }""", "variables": {"id": event["id"], "cal": user.calendar_id}})
    assert status == 200 and "errors" not in body, body
    found = body["data"]["event"]
    assert found["local_start_time"] == "2031-03-25T19:30:00+01:00"
    assert found["local_end_time"] == "2031-03-25T21:00:00+01:00"
    # Each occurrence on the event's clock, across the change to summer time; local_start
    # stays in the zone asked for.
    assert [o["local_start_time"] for o in found["occurrences"]] == [
        "2031-03-25T19:30:00+01:00", "2031-04-01T19:30:00+02:00", "2031-04-08T19:30:00+02:00"]
    assert found["occurrences"][0]["local_start"].endswith("+09:00")
    assert body["data"]["calendar"]["events"]["data"] == [
        {"local_start_time": "2031-11-25T11:00:00+01:00"}]
