"""Personal calendars and calendar events through REST: the caller's calendars,
create (shapes, time rules, recurrence), the calendar in the URL, update, delete,
the read-only synced copies, lists, pages and query budgets, and the MCP tools."""

from __future__ import annotations

import asyncio
import secrets
from datetime import UTC, datetime
from typing import Any

import pytest
from conftest import assert_error, assert_refused_unchanged, assert_refused_values, walk
from mcp_clients import list_tools, result_body, sdk_client
from test_events import END_SHOWN, STARTS_PAST_THE_END, TIMED_WITH_END

from domain import accounts, ids

CALENDAR_KEYS = {"id", "name", "description", "color", "is_default", "created_at", "updated_at"}
EVENT_KEYS = {
    "id", "calendar_id", "title", "description", "location", "start_time", "end_time",
    "start_timezone", "end_timezone", "is_all_day", "recurrence_rule", "status", "created_at",
    "updated_at", "transparency",
}
MISSING_CALENDAR = "cal_" + "0" * 32
MISSING_EVENT = "cev_" + "0" * 32
NY = "America/New_York"
PARIS = "Europe/Paris"
TIMED = {"title": "Dentist", "start_time": "2031-05-06T10:00", "start_timezone": NY}


# ---------------------------------------------------------------------------
# Helpers


def events_path(calendar_id: str) -> str:
    return f"/v1/calendars/{calendar_id}/events"


def event_path(calendar_id: str, event_id: str) -> str:
    return f"/v1/calendars/{calendar_id}/events/{event_id}"


async def create(api: Any, user: Any, calendar_id: str | None = None, *,
                 base: dict[str, Any] = TIMED, **fields: Any) -> dict[str, Any]:
    """A calendar event made through REST, in the user's default calendar unless
    told; `fields` go over `base`."""
    body = {**base, **fields}
    status, created, _ = await api.post(events_path(calendar_id or user.calendar_id), user,
                                        json=body)
    assert status == 201, created
    return created  # type: ignore[no-any-return]


async def new_calendar(live_server: Any, user: Any, name: str = "Work") -> str:
    """A further calendar, the way operators add one (`kalends admin create-calendar`)."""
    data = await asyncio.to_thread(live_server.admin, accounts.create_calendar, user.email, name)
    return data["calendar_id"]  # type: ignore[no-any-return]


async def insert_copy(live_server: Any, calendar_id: str, *, status: str = "confirmed",
                      title: str = "Synced concert") -> str:
    """A subscription-synced copy of a profile event, as the sync jobs write it."""
    copy_id = ids.new_id("cev")
    sql = """
        INSERT INTO calendar_events (id, calendar_id, title, start_time, end_time, start_timezone,
                                     end_timezone, status, source_event_id, source_profile_id)
        VALUES ($1, $2, $3, $4, $5, 'Europe/Paris', 'Europe/Paris', $6, $7, $8)
    """
    start = datetime(2031, 6, 1, 18, tzinfo=UTC)
    end = datetime(2031, 6, 1, 20, tzinfo=UTC)
    await asyncio.to_thread(live_server.call, live_server.db.execute(
        sql, copy_id, calendar_id, title, start, end, status, ids.new_id("evt"),
        ids.new_id("prf"),
    ))
    return copy_id


async def event_ids(api: Any, user: Any, calendar_id: str, limit: int = 100) -> list[str]:
    return [e["id"] for e in await walk(api, events_path(calendar_id), user, limit=limit)]


async def get_event(api: Any, user: Any, calendar_id: str, event_id: str) -> dict[str, Any]:
    status, body, _ = await api.get(event_path(calendar_id, event_id), user)
    assert status == 200, body
    return body  # type: ignore[no-any-return]


# ---------------------------------------------------------------------------
# Calendars


async def test_a_new_user_has_exactly_the_default_calendar(api: Any, user: Any) -> None:
    status, page, _ = await api.get("/v1/calendars", user)
    assert status == 200, page
    assert page["has_more"] is False and page["next_cursor"] is None
    [calendar] = page["data"]
    assert set(calendar) == CALENDAR_KEYS
    assert calendar["id"] == user.calendar_id
    assert calendar["is_default"] is True
    assert calendar["name"] == "Personal"
    assert calendar["description"] is None and calendar["color"] is None
    assert calendar["created_at"].endswith("Z") and calendar["updated_at"].endswith("Z")
    status, fetched, _ = await api.get(f"/v1/calendars/{user.calendar_id}", user)
    assert status == 200 and fetched == calendar


async def test_calendars_are_the_callers_own_in_creation_order(
    live_server: Any, api: Any, make_user: Any
) -> None:
    me, other = await make_user(), await make_user()
    work = await new_calendar(live_server, me, "Work")
    family = await new_calendar(live_server, me, "Family")
    await new_calendar(live_server, other, "Not mine")
    calendars = await walk(api, "/v1/calendars", me, limit=1)
    assert [c["id"] for c in calendars] == [me.calendar_id, work, family]
    assert [c["is_default"] for c in calendars] == [True, False, False]
    assert [c["name"] for c in calendars] == ["Personal", "Work", "Family"]


async def test_another_users_calendar_is_404(api: Any, make_user: Any) -> None:
    me, other = await make_user(), await make_user()
    for calendar_id in (other.calendar_id, MISSING_CALENDAR):
        status, body, _ = await api.get(f"/v1/calendars/{calendar_id}", me)
        assert_error(status, body, 404, "resource_not_found", param="calendar_id")


async def test_calendar_ids_are_checked_and_case_insensitive(api: Any, user: Any) -> None:
    status, body, _ = await api.get(f"/v1/calendars/{user.calendar_id.upper()}", user)
    assert status == 200 and body["id"] == user.calendar_id
    for bad in ("evt_" + "0" * 32, "cal_123", "xcal_" + "0" * 32):
        status, body, _ = await api.get(f"/v1/calendars/{bad}", user)
        assert_error(status, body, 400, "invalid_id", param="calendar_id")


async def test_calendar_list_cursor_is_bound_to_its_caller(
    live_server: Any, api: Any, make_user: Any
) -> None:
    me, other = await make_user(), await make_user()
    await new_calendar(live_server, me)
    status, page, _ = await api.get("/v1/calendars", me, params={"limit": "1"})
    assert status == 200 and page["has_more"] is True
    await assert_refused_values(api, "/v1/calendars", other, "cursor", [page["next_cursor"]],
                                "invalid_cursor")
    await assert_refused_values(api, "/v1/calendars", me, "limit", ["0", "101", "x"],
                                "invalid_query_parameter")


async def test_calendar_list_costs_two_queries_whatever_the_page_size(
    live_server: Any, api: Any, user: Any
) -> None:
    for n in range(9):
        await new_calendar(live_server, user, f"Calendar {n}")

    async def queries(limit: int) -> int:
        before = live_server.query_count
        status, page, _ = await api.get("/v1/calendars", user, params={"limit": str(limit)})
        assert status == 200 and len(page["data"]) == limit
        return live_server.query_count - before  # type: ignore[no-any-return]

    # Authentication, then the page.
    assert await queries(1) == 2
    assert await queries(10) == 2


# ---------------------------------------------------------------------------
# Create


async def test_create_a_timed_event(api: Any, user: Any) -> None:
    body = {
        **TIMED, "description": "Check-up", "location": "5th Ave",
        "end_time": "2031-05-06T21:00", "end_timezone": PARIS, "transparency": "transparent",
    }
    status, event, headers = await api.post(events_path(user.calendar_id), user, json=body)
    assert status == 201, event
    assert set(event) == EVENT_KEYS
    assert event["id"].startswith("cev_") and len(event["id"]) == 36
    assert headers["Location"] == f"/v1/calendars/{user.calendar_id}/events/{event['id']}"
    assert event == {
        "id": event["id"], "calendar_id": user.calendar_id, "title": "Dentist",
        "description": "Check-up", "location": "5th Ave",
        # 10:00 in New York (EDT) and 21:00 in Paris (CEST).
        "start_time": "2031-05-06T14:00:00Z", "end_time": "2031-05-06T19:00:00Z",
        "start_timezone": NY, "end_timezone": PARIS, "is_all_day": False,
        "recurrence_rule": None, "status": "confirmed", "created_at": event["created_at"],
        "updated_at": event["updated_at"], "transparency": "transparent",
    }
    assert await get_event(api, user, user.calendar_id, event["id"]) == event


async def test_create_defaults_and_no_end_timezone_fill_in(api: Any, user: Any) -> None:
    event = await create(api, user)
    assert event["start_time"] == "2031-05-06T14:00:00Z"
    # end_timezone is filled from start_timezone for profile events only
    # (docs/api-choices.md, "Calendars and calendar events").
    assert event["end_time"] is None and event["end_timezone"] is None
    assert event["description"] is None and event["location"] is None
    assert event["recurrence_rule"] is None and event["is_all_day"] is False
    assert event["status"] == "confirmed" and event["transparency"] == "opaque"
    assert event["created_at"].endswith("Z")


async def test_create_all_day_events(api: Any, user: Any) -> None:
    one_day = await create(api, user, base={}, title="Holiday", is_all_day=True,
                           start_date="2031-05-06", start_timezone=PARIS)
    # Local midnights in start_timezone, the end exclusive; no date fields in responses.
    assert one_day["is_all_day"] is True
    assert one_day["start_time"] == "2031-05-05T22:00:00Z"
    assert one_day["end_time"] == "2031-05-06T22:00:00Z"
    assert one_day["start_timezone"] == PARIS and one_day["end_timezone"] == PARIS
    assert set(one_day) == EVENT_KEYS
    trip = await create(api, user, base={}, title="Trip", is_all_day=True,
                        start_date="2031-12-30", end_date="2032-01-02", start_timezone=NY)
    assert trip["start_time"] == "2031-12-30T05:00:00Z"
    assert trip["end_time"] == "2032-01-02T05:00:00Z"


async def test_create_a_recurring_event(api: Any, user: Any) -> None:
    event = await create(api, user, title="Standup", recurrence_rule="RRULE:FREQ=WEEKLY;BYDAY=TU,TH")
    assert event["recurrence_rule"] == "RRULE:FREQ=WEEKLY;BYDAY=TU,TH"
    # Stored once, carrying its rule: the list shows one row, not occurrences.
    assert await event_ids(api, user, user.calendar_id) == [event["id"]]


async def test_create_in_another_calendar_of_the_caller(
    live_server: Any, api: Any, user: Any
) -> None:
    work = await new_calendar(live_server, user)
    event = await create(api, user, work, title="Review")
    assert event["calendar_id"] == work
    assert await event_ids(api, user, work) == [event["id"]]
    assert await event_ids(api, user, user.calendar_id) == []


@pytest.mark.parametrize(
    "field",
    ["profile_id", "slug", "image_url", "is_private", "require_rsvp", "require_payment",
     "status", "calendar_id", "id", "cancellation_reason"],
)
async def test_profile_event_fields_are_unknown(api: Any, user: Any, field: str) -> None:
    value: Any = {"profile_id": "prf_" + "0" * 32, "slug": "dentist", "image_url": "https://x.example/a.png",
                  "status": "cancelled", "calendar_id": user.calendar_id, "id": MISSING_EVENT,
                  "cancellation_reason": "no"}.get(field, True)
    status, body, _ = await api.post(events_path(user.calendar_id), user, json={**TIMED, field: value})
    assert_error(status, body, 400, "unknown_field", param=field)
    assert await event_ids(api, user, user.calendar_id) == []


@pytest.mark.parametrize(
    ("body", "code", "param"),
    [
        ({"start_time": "2031-05-06T10:00", "start_timezone": NY}, "missing_field", "title"),
        ({**TIMED, "title": None}, "invalid_field", "title"),
        ({**TIMED, "title": ""}, "invalid_field", "title"),
        ({**TIMED, "transparency": "busy"}, "invalid_field", "transparency"),
        ({**TIMED, "location": 5}, "invalid_field", "location"),
        ({"title": "No time"}, "missing_field", "start_time"),
        ({"title": "No zone", "start_time": "2031-05-06T10:00"}, "field_dependency", "start_timezone"),
        ({**TIMED, "start_timezone": None}, "invalid_field", "start_timezone"),
        ({**TIMED, "end_time": "2031-05-06T11:00"}, "field_dependency", "end_timezone"),
        ({**TIMED, "end_timezone": NY}, "field_dependency", "end_time"),
        ({**TIMED, "start_date": "2031-05-06"}, "field_dependency", "start_date"),
        ({**TIMED, "start_time": "tomorrow at ten"}, "invalid_time_format", "start_time"),
        ({**TIMED, "start_timezone": "Mars/Olympus"}, "invalid_timezone", "start_timezone"),
        ({**TIMED, "start_time": "2026-03-08T02:30"}, "nonexistent_local_time", "start_time"),
        ({**TIMED, "start_time": "2031-05-06T10:00+01:00"}, "timezone_offset_mismatch", "start_time"),
        ({**TIMED, "end_time": "2031-05-06T09:00", "end_timezone": NY}, "invalid_time_range", "end_time"),
        ({"title": "Day", "is_all_day": True, "start_timezone": PARIS}, "missing_field", "start_date"),
        ({"title": "Day", "is_all_day": True, "start_date": "2031-05-06"}, "missing_field", "start_timezone"),
        ({"title": "Day", "is_all_day": True, "start_date": "2031-05-06", "start_timezone": PARIS,
          "end_date": "2031-05-06"}, "invalid_time_range", "end_date"),
        ({"title": "Day", "is_all_day": True, "start_date": "2031-05-06", "start_timezone": PARIS,
          "start_time": "2031-05-06T10:00"}, "field_dependency", "start_time"),
        ({**TIMED, "recurrence_rule": "FREQ=MINUTELY"}, "invalid_recurrence_rule", "recurrence_rule"),
        ({**TIMED, "recurrence_rule": "FREQ=DAILY;COUNT=" + "1" * 8200}, "invalid_recurrence_rule",
         "recurrence_rule"),
        ({**TIMED, "recurrence_rule": "FREQ=DAILY;UNTIL=20300101T000000Z"}, "invalid_recurrence_rule",
         "recurrence_rule"),
    ],
)
async def test_bad_creates_make_nothing(
    api: Any, user: Any, body: dict[str, Any], code: str, param: str
) -> None:
    status, answer, _ = await api.post(events_path(user.calendar_id), user, json=body)
    assert_error(status, answer, 400, code, param=param)
    assert await event_ids(api, user, user.calendar_id) == []


async def test_time_error_details_are_shown(api: Any, user: Any) -> None:
    status, body, _ = await api.post(events_path(user.calendar_id), user,
                                     json={**TIMED, "start_time": "2026-03-08T02:30"})
    details = assert_error(status, body, 400, "nonexistent_local_time")["details"]
    assert details == {"value": "2026-03-08T02:30", "gap_from": "2026-03-08T02:00:00-05:00",
                       "gap_to": "2026-03-08T03:00:00-04:00"}
    status, body, _ = await api.post(events_path(user.calendar_id), user,
                                     json={**TIMED, "start_time": "2031-05-06T10:00+01:00"})
    details = assert_error(status, body, 400, "timezone_offset_mismatch")["details"]
    assert details["expected_offset"] == "-04:00" and details["valid_offsets"] == ["-04:00"]


async def test_create_in_a_calendar_not_the_callers(api: Any, make_user: Any) -> None:
    me, other = await make_user(), await make_user()
    for calendar_id in (other.calendar_id, MISSING_CALENDAR):
        status, body, _ = await api.post(events_path(calendar_id), me, json=TIMED)
        assert_error(status, body, 404, "resource_not_found", param="calendar_id")
    assert await event_ids(api, other, other.calendar_id) == []
    status, body, _ = await api.post(events_path("prf_" + "0" * 32), me, json=TIMED)
    assert_error(status, body, 400, "invalid_id", param="calendar_id")


async def test_idempotency_key_is_validated_not_deduplicated(api: Any, user: Any) -> None:
    key = {"Idempotency-Key": f"cal-create-{secrets.token_hex(8)}"}
    path = events_path(user.calendar_id)
    status, first, _ = await api.post(path, user, json=TIMED, headers=key)
    assert status == 201, first
    status, second, _ = await api.post(path, user, json=TIMED, headers=key)
    assert status == 201 and second["id"] != first["id"]
    status, body, _ = await api.post(path, user, json=TIMED, headers={"Idempotency-Key": "short"})
    assert_error(status, body, 400, "invalid_idempotency_key", param="Idempotency-Key")
    assert await event_ids(api, user, user.calendar_id) == [first["id"], second["id"]]


# ---------------------------------------------------------------------------
# The calendar in the URL, and other users


async def test_an_event_addressed_under_another_calendar_is_404(
    live_server: Any, api: Any, user: Any
) -> None:
    work = await new_calendar(live_server, user)
    event = await create(api, user)
    wrong = event_path(work, event["id"])
    status, body, _ = await api.get(wrong, user)
    assert_error(status, body, 404, "resource_not_found", param="event_id")
    status, body, _ = await api.patch(wrong, user, json={"title": "Moved?"})
    assert_error(status, body, 404, "resource_not_found", param="event_id")
    status, body, _ = await api.delete(wrong, user)
    assert_error(status, body, 404, "resource_not_found", param="event_id")
    assert await get_event(api, user, user.calendar_id, event["id"]) == event


async def test_another_users_events_are_404(api: Any, make_user: Any) -> None:
    me, other = await make_user(), await make_user()
    theirs = await create(api, other)
    mine = await create(api, me)
    cases = [
        # Their event, under their calendar: the calendar is not mine.
        (event_path(other.calendar_id, theirs["id"]), "calendar_id"),
        # Their event under my calendar, and mine under theirs.
        (event_path(me.calendar_id, theirs["id"]), "event_id"),
        (event_path(other.calendar_id, mine["id"]), "calendar_id"),
        (event_path(me.calendar_id, MISSING_EVENT), "event_id"),
    ]
    for path, param in cases:
        status, body, _ = await api.get(path, me)
        assert_error(status, body, 404, "resource_not_found", param=param)
        status, body, _ = await api.patch(path, me, json={"title": "Mine now"})
        assert_error(status, body, 404, "resource_not_found", param=param)
        status, body, _ = await api.delete(path, me)
        assert_error(status, body, 404, "resource_not_found", param=param)
    status, body, _ = await api.get(events_path(other.calendar_id), me)
    assert_error(status, body, 404, "resource_not_found", param="calendar_id")
    assert await get_event(api, other, other.calendar_id, theirs["id"]) == theirs
    assert await get_event(api, me, me.calendar_id, mine["id"]) == mine


async def test_event_ids_are_checked_and_case_insensitive(api: Any, user: Any) -> None:
    event = await create(api, user)
    upper = event_path(user.calendar_id.upper(), event["id"].upper())
    status, body, _ = await api.get(upper, user)
    assert status == 200 and body == event
    status, body, _ = await api.patch(upper, user, json={"title": "Upper"})
    assert status == 200 and body["id"] == event["id"]
    # The path parameter is event_id, and it takes a cev_ ID.
    for bad in ("evt_" + event["id"][4:], "cev_xyz"):
        status, body, _ = await api.get(event_path(user.calendar_id, bad), user)
        assert_error(status, body, 400, "invalid_id", param="event_id")


# ---------------------------------------------------------------------------
# Update


async def test_update_changes_what_is_sent(api: Any, user: Any) -> None:
    event = await create(api, user, description="Old", location="Room 1")
    path = event_path(user.calendar_id, event["id"])
    status, changed, _ = await api.patch(
        path, user, json={"title": "Dentist (moved)", "description": None, "transparency": "transparent"}
    )
    assert status == 200, changed
    assert set(changed) == EVENT_KEYS
    assert changed == {**event, "title": "Dentist (moved)", "description": None,
                       "transparency": "transparent", "updated_at": changed["updated_at"]}
    assert changed["updated_at"] >= event["updated_at"]
    assert await get_event(api, user, user.calendar_id, event["id"]) == changed


@pytest.mark.slow
async def test_an_empty_patch_changes_nothing(api: Any, user: Any) -> None:
    event = await create(api, user)
    await asyncio.sleep(1.1)  # so a touched updated_at would show
    status, same, _ = await api.patch(event_path(user.calendar_id, event["id"]), user, json={})
    assert status == 200 and same == event


async def test_update_times(api: Any, user: Any) -> None:
    event = await create(api, user, end_time="2031-05-06T11:30", end_timezone=NY)
    path = event_path(user.calendar_id, event["id"])
    # The start moves without an end: the end stays.
    status, moved, _ = await api.patch(path, user, json={"start_time": "2031-05-06T16:30",
                                                         "start_timezone": PARIS})
    assert status == 200, moved
    assert (moved["start_time"], moved["end_time"]) == ("2031-05-06T14:30:00Z", "2031-05-06T15:30:00Z")
    assert (moved["start_timezone"], moved["end_timezone"]) == (PARIS, NY)
    assert await get_event(api, user, user.calendar_id, event["id"]) == moved
    # Both ends sent: both move.
    status, both, _ = await api.patch(path, user, json={
        "start_time": "2031-05-07T09:00", "start_timezone": PARIS,
        "end_time": "2031-05-07T10:00", "end_timezone": PARIS})
    assert status == 200, both
    assert (both["start_time"], both["end_time"]) == ("2031-05-07T07:00:00Z", "2031-05-07T08:00:00Z")
    # end_time: null alone makes it a point in time.
    status, point, _ = await api.patch(path, user, json={"end_time": None})
    assert status == 200 and point["end_time"] is None
    assert point["start_time"] == both["start_time"]
    # A point in time stays one when its start moves.
    status, still, _ = await api.patch(path, user, json={"start_time": "2031-06-01T09:00",
                                                         "start_timezone": PARIS})
    assert status == 200, still
    assert (still["start_time"], still["end_time"]) == ("2031-06-01T07:00:00Z", None)


@STARTS_PAST_THE_END
async def test_moving_the_start_past_the_end_changes_nothing(
    api: Any, user: Any, start: str, zone: str, shown_start: str
) -> None:
    event = await create(api, user, base=TIMED_WITH_END)
    error = await assert_refused_unchanged(
        api, user, event_path(user.calendar_id, event["id"]), event, "invalid_time_range",
        "start_time", json={"title": "Moved", "start_time": start, "start_timezone": zone})
    assert error["details"] == {"start": shown_start, "end": END_SHOWN}


async def test_update_recurrence(api: Any, user: Any) -> None:
    event = await create(api, user)
    path = event_path(user.calendar_id, event["id"])
    status, weekly, _ = await api.patch(path, user, json={"recurrence_rule": "FREQ=WEEKLY"})
    assert status == 200 and weekly["recurrence_rule"] == "FREQ=WEEKLY"
    # A move is judged against the rule: UNTIL before the new start is refused.
    status, limited, _ = await api.patch(
        path, user, json={"recurrence_rule": "FREQ=WEEKLY;UNTIL=20310601T000000Z"}
    )
    assert status == 200, limited
    status, body, _ = await api.patch(path, user, json={"start_time": "2031-07-01T10:00",
                                                         "start_timezone": NY})
    assert_error(status, body, 400, "invalid_recurrence_rule", param="recurrence_rule")
    status, cleared, _ = await api.patch(path, user, json={"recurrence_rule": None})
    assert status == 200 and cleared["recurrence_rule"] is None
    assert cleared["start_time"] == event["start_time"]


@pytest.mark.parametrize(
    ("body", "code", "param"),
    [
        ({"title": None}, "invalid_field", "title"),
        ({"status": "cancelled"}, "unknown_field", "status"),
        ({"calendar_id": MISSING_CALENDAR}, "unknown_field", "calendar_id"),
        ({"slug": "x"}, "unknown_field", "slug"),
        ({"is_all_day": None}, "invalid_field", "is_all_day"),
        ({"start_time": "2031-05-06T12:00"}, "field_dependency", "start_timezone"),
        ({"start_timezone": PARIS}, "field_dependency", "start_time"),
        ({"end_time": "2031-05-06T12:00"}, "field_dependency", "end_timezone"),
        ({"end_timezone": None}, "invalid_field", "end_timezone"),
        ({"end_time": "2031-05-06T09:00", "end_timezone": NY}, "invalid_time_range", "end_time"),
        ({"start_time": "2031-05-06 10:00:00-0700", "start_timezone": NY}, "timezone_offset_mismatch",
         "start_time"),
        ({"start_time": "2026-03-08T02:30", "start_timezone": NY}, "nonexistent_local_time", "start_time"),
        ({"start_time": "06/05/2031 10:00", "start_timezone": NY}, "invalid_time_format", "start_time"),
        ({"start_time": "2031-05-06T10:00", "start_timezone": "EST5EDT "}, "invalid_timezone",
         "start_timezone"),
        ({"start_date": "2031-05-06"}, "field_dependency", "start_date"),
        ({"is_all_day": True}, "missing_field", "start_date"),
        ({"recurrence_rule": "FREQ=SECONDLY"}, "invalid_recurrence_rule", "recurrence_rule"),
        ({"recurrence_rule": "FREQ=DAILY;BYMONTH=2;BYMONTHDAY=30"}, "invalid_recurrence_rule",
         "recurrence_rule"),
    ],
)
async def test_bad_updates_change_nothing(
    api: Any, user: Any, body: dict[str, Any], code: str, param: str
) -> None:
    event = await create(api, user)
    path = event_path(user.calendar_id, event["id"])
    status, answer, _ = await api.patch(path, user, json=body)
    assert_error(status, answer, 400, code, param=param)
    assert await get_event(api, user, user.calendar_id, event["id"]) == event


async def test_no_end_made_all_day_and_back(api: Any, user: Any) -> None:
    """The choice: an event with no end (and so no end_timezone) made all-day gets
    its end, the next midnight, in start_timezone; made timed again it keeps that
    end (as any move of the start does), and its end keeps that zone."""
    event = await create(api, user)
    assert (event["end_time"], event["end_timezone"]) == (None, None)
    path = event_path(user.calendar_id, event["id"])
    status, all_day, _ = await api.patch(path, user, json={"is_all_day": True, "start_date": "2031-05-06"})
    assert status == 200, all_day
    assert all_day["is_all_day"] is True
    assert (all_day["start_time"], all_day["end_time"]) == ("2031-05-06T04:00:00Z", "2031-05-07T04:00:00Z")
    assert (all_day["start_timezone"], all_day["end_timezone"]) == (NY, NY)
    status, body, _ = await api.patch(
        path, user, json={"is_all_day": False, "start_time": "2031-05-08T09:00", "start_timezone": PARIS}
    )
    error = assert_error(status, body, 400, "invalid_time_range", param="start_time")
    assert error["details"] == {"start": "2031-05-08T07:00:00Z", "end": "2031-05-07T04:00:00Z"}
    assert await get_event(api, user, user.calendar_id, event["id"]) == all_day
    status, timed, _ = await api.patch(
        path, user, json={"is_all_day": False, "start_time": "2031-05-06T09:00", "start_timezone": PARIS}
    )
    assert status == 200, timed
    assert timed["is_all_day"] is False
    assert (timed["start_time"], timed["end_time"]) == ("2031-05-06T07:00:00Z", "2031-05-07T04:00:00Z")
    assert (timed["start_timezone"], timed["end_timezone"]) == (PARIS, NY)
    # Back to a point in time, when that is what the caller wants.
    status, point, _ = await api.patch(path, user, json={"end_time": None})
    assert status == 200 and point["end_time"] is None


async def test_all_day_start_date_keeps_the_end_date(api: Any, user: Any) -> None:
    event = await create(api, user, base={}, title="Fair", is_all_day=True,
                         start_date="2031-05-06", end_date="2031-05-09", start_timezone=PARIS)
    path = event_path(user.calendar_id, event["id"])
    assert event["end_time"] == "2031-05-08T22:00:00Z"
    # The end_date stays where it is.
    status, moved, _ = await api.patch(path, user, json={"start_date": "2031-05-08"})
    assert status == 200, moved
    assert (moved["start_time"], moved["end_time"]) == ("2031-05-07T22:00:00Z", "2031-05-08T22:00:00Z")
    status, earlier, _ = await api.patch(path, user, json={"start_date": "2031-05-01"})
    assert status == 200, earlier
    assert (earlier["start_time"], earlier["end_time"]) == ("2031-04-30T22:00:00Z", "2031-05-08T22:00:00Z")
    status, body, _ = await api.patch(path, user, json={"start_date": "2031-06-01"})
    error = assert_error(status, body, 400, "invalid_time_range", param="start_date")
    assert error["details"] == {"start": "2031-06-01", "end": "2031-05-09"}
    assert await get_event(api, user, user.calendar_id, event["id"]) == earlier
    status, body, _ = await api.patch(path, user, json={"start_time": "2031-06-01T10:00", "start_timezone": PARIS})
    assert_error(status, body, 400, "field_dependency", param="start_time")


# ---------------------------------------------------------------------------
# Delete


async def test_delete_is_204_and_permanent(api: Any, user: Any) -> None:
    keep = await create(api, user, title="Keep")
    event = await create(api, user)
    path = event_path(user.calendar_id, event["id"])
    status, body, _ = await api.delete(path, user)
    assert (status, body) == (204, None)
    status, body, _ = await api.get(path, user)
    assert_error(status, body, 404, "resource_not_found", param="event_id")
    status, body, _ = await api.delete(path, user)
    assert_error(status, body, 404, "resource_not_found", param="event_id")
    assert await event_ids(api, user, user.calendar_id) == [keep["id"]]


# ---------------------------------------------------------------------------
# Subscription-synced copies


async def test_synced_copies_are_listed_and_read_only(
    live_server: Any, api: Any, make_user: Any
) -> None:
    user, other = await make_user(), await make_user()
    mine = await create(api, user)
    copy_id = await insert_copy(live_server, user.calendar_id)
    cancelled_id = await insert_copy(live_server, user.calendar_id, status="cancelled")
    listed = await walk(api, events_path(user.calendar_id), user)
    assert [e["id"] for e in listed] == [mine["id"], copy_id, cancelled_id]
    copy = await get_event(api, user, user.calendar_id, copy_id)
    assert set(copy) == EVENT_KEYS and copy == listed[1]
    assert copy["status"] == "confirmed" and copy["start_time"] == "2031-06-01T18:00:00Z"
    assert listed[2]["status"] == "cancelled"
    for copy_id_ in (copy_id, cancelled_id):
        path = event_path(user.calendar_id, copy_id_)
        before = await get_event(api, user, user.calendar_id, copy_id_)
        status, body, _ = await api.patch(path, user, json={"title": "Changed here"})
        error = assert_error(status, body, 409, "calendar_event_read_only", param="event_id")
        assert error["type"] == "conflict_error"
        status, body, _ = await api.patch(path, user, json={})
        assert_error(status, body, 409, "calendar_event_read_only", param="event_id")
        status, body, _ = await api.delete(path, user)
        assert_error(status, body, 409, "calendar_event_read_only", param="event_id")
        assert await get_event(api, user, user.calendar_id, copy_id_) == before
    # Another user's copy is theirs alone: 404, not 409.
    status, body, _ = await api.patch(event_path(user.calendar_id, copy_id), other, json={"title": "x"})
    assert_error(status, body, 404, "resource_not_found", param="calendar_id")


# ---------------------------------------------------------------------------
# Lists and pages


async def test_calendar_events_are_in_creation_order_page_by_page(
    live_server: Any, api: Any, user: Any
) -> None:
    made = []
    for n in range(5):
        # Start times run backwards: the order is creation, not start.
        made.append((await create(api, user, title=f"E{n}", start_time=f"2031-05-{20 - n:02d}T10:00"))["id"])
    made.append(await insert_copy(live_server, user.calendar_id))
    for limit in (1, 2, 100):
        assert await event_ids(api, user, user.calendar_id, limit=limit) == made


async def test_calendar_event_cursor_survives_inserts_and_is_bound_to_its_list(
    live_server: Any, api: Any, make_user: Any
) -> None:
    me, other = await make_user(), await make_user()
    work = await new_calendar(live_server, me)
    first = [(await create(api, me, title=f"A{n}"))["id"] for n in range(3)]
    await create(api, me, work)
    status, page, _ = await api.get(events_path(me.calendar_id), me, params={"limit": "2"})
    assert status == 200 and [e["id"] for e in page["data"]] == first[:2]
    later = (await create(api, me, title="Later"))["id"]
    cursor = {"cursor": page["next_cursor"], "limit": "10"}
    status, rest, _ = await api.get(events_path(me.calendar_id), me, params=cursor)
    assert status == 200 and [e["id"] for e in rest["data"]] == [first[2], later]
    assert rest["has_more"] is False and rest["next_cursor"] is None
    # The same cursor on another calendar, or by another caller, or edited.
    status, body, _ = await api.get(events_path(work), me, params=cursor)
    assert_error(status, body, 400, "invalid_cursor", param="cursor")
    status, body, _ = await api.get("/v1/calendars", me, params=cursor)
    assert_error(status, body, 400, "invalid_cursor", param="cursor")
    await create(api, other)
    status, body, _ = await api.get(events_path(other.calendar_id), other, params=cursor)
    assert_error(status, body, 400, "invalid_cursor", param="cursor")
    text = page["next_cursor"]
    edited = {"cursor": text[:5] + ("B" if text[5] == "A" else "A") + text[6:]}
    status, body, _ = await api.get(events_path(me.calendar_id), me, params=edited)
    assert_error(status, body, 400, "invalid_cursor", param="cursor")
    status, body, _ = await api.get(events_path(me.calendar_id), me, params={"limit": "101"})
    assert_error(status, body, 400, "invalid_query_parameter", param="limit")


async def test_calendar_event_list_costs_three_queries_whatever_the_page_size(
    live_server: Any, api: Any, user: Any
) -> None:
    await asyncio.gather(*(create(api, user, title=f"E{n}") for n in range(100)))

    async def queries(limit: int) -> int:
        before = live_server.query_count
        status, page, _ = await api.get(events_path(user.calendar_id), user,
                                        params={"limit": str(limit)})
        assert status == 200 and len(page["data"]) == limit
        return live_server.query_count - before  # type: ignore[no-any-return]

    # Authentication, the calendar (ownership), then the page.
    assert await queries(1) == 3
    assert await queries(100) == 3


# ---------------------------------------------------------------------------
# MCP


async def test_calendar_tools(live_server: Any, user: Any) -> None:
    async with sdk_client(live_server, user) as client:
        tools = await list_tools(client)
        names = ["listCalendars", "getCalendar", "listCalendarEvents", "createCalendarEvent",
                 "getCalendarEvent", "updateCalendarEvent", "deleteCalendarEvent"]
        assert set(names) <= set(tools)
        # Agents are told to reuse exact cal_ IDs and to follow the pages.
        for name in names[1:]:
            assert "exact cal_ ID" in tools[name].description, name
            assert "cal_" in tools[name].input_schema["properties"]["calendar_id"]["description"]
        assert "cal_ IDs" in tools["listCalendars"].description
        for name in ("listCalendars", "listCalendarEvents"):
            assert "next_cursor" in tools[name].description and "has_more" in tools[name].description
        assert tools["deleteCalendarEvent"].annotations.destructive_hint is True
        assert tools["listCalendarEvents"].annotations.read_only_hint is True

        page = result_body(await client.call_tool("listCalendars", {}))
        assert [c["id"] for c in page["data"]] == [user.calendar_id]
        event = result_body(await client.call_tool("createCalendarEvent", {
            "calendar_id": user.calendar_id, **TIMED,
        }))
        assert event["start_time"] == "2031-05-06T14:00:00Z"
        refused = await client.call_tool("createCalendarEvent", {
            "calendar_id": user.calendar_id, **TIMED, "slug": "no",
        })
        assert refused.is_error is True
        assert result_body(refused)["error"]["code"] == "unknown_field"
        done = await client.call_tool("deleteCalendarEvent", {
            "calendar_id": user.calendar_id, "event_id": event["id"],
        })
        assert result_body(done) == {"status": "deleted"}
