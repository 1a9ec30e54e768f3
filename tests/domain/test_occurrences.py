"""One occurrence of a recurring event (docs/occurrences.md), through the live server:
the reads and writes of REST, GraphQL and MCP, their errors, and every reader
(agenda, subscription copies, free/busy, meeting times, the dashboard graph's
occurrences and RSVP summary) showing a moved occurrence where it now is and no
cancelled one; pruning, the split, the limit, and webhook messages in order."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import orjson
import pytest
from conftest import Api, LiveServer, User, assert_error, new_event, new_profile
from oauth_flow import tokens_for

from domain import accounts, occurrences

OCCURRENCE_KEYS = {
    "occurrence_id", "event_id", "original_start", "start_time", "end_time", "start_timezone",
    "end_timezone", "start_date", "end_date", "is_all_day", "status", "is_exception", "title",
    "description", "location",
}


def _monday(weeks_ahead: int = 1) -> datetime:
    """A Monday 09:00 UTC some weeks from now."""
    today = datetime.now(UTC).replace(hour=9, minute=0, second=0, microsecond=0)
    return today + timedelta(days=(7 - today.weekday()) % 7 + 7 * weeks_ahead)


def _z(instant: datetime) -> str:
    return instant.strftime("%Y-%m-%dT%H:%M:%SZ")


def _slot(instant: datetime) -> str:
    return instant.strftime("%Y%m%dT%H%M%SZ")


async def _weekly(api: Api, user: User, profile: dict[str, Any], start: datetime,
                  **fields: Any) -> dict[str, Any]:
    """A weekly hour on Mondays from `start` (UTC); `fields` over it."""
    return await new_event(api, user, profile, **{
        "title": "Standup", "start_time": start.strftime("%Y-%m-%dT%H:%M"),
        "start_timezone": "UTC", "end_time": (start + timedelta(hours=1)).strftime(
            "%Y-%m-%dT%H:%M"), "end_timezone": "UTC", "recurrence_rule": "FREQ=WEEKLY",
        **fields})


def _path(event: dict[str, Any], start: datetime | None = None, action: str = "") -> str:
    base = f"/v1/events/{event['id']}/occurrences"
    if start is None:
        return base
    return f"{base}/{event['id']}:{_slot(start)}{action}"


async def _list(api: Api, user: User, event: dict[str, Any], start: datetime, end: datetime,
                **params: Any) -> dict[str, Any]:
    status, body, _ = await api.get(_path(event), user, params={
        "from": _z(start), "to": _z(end), **params})
    assert status == 200, body
    return body  # type: ignore[no-any-return]


@pytest.fixture
async def weekly(api: Api, user: User) -> tuple[dict[str, Any], dict[str, Any], datetime]:
    profile = await new_profile(api, user)
    start = _monday()
    return profile, await _weekly(api, user, profile, start), start


# ---------------------------------------------------------------------------
# REST reads


async def test_list_and_get_as_the_rule_makes_them(api: Api, user: User, weekly: Any) -> None:
    _, event, start = weekly
    body = await _list(api, user, event, start, start + timedelta(weeks=4))
    assert body["has_more"] is False and body["next_cursor"] is None
    assert [o["start_time"] for o in body["data"]] == [
        _z(start + timedelta(weeks=k)) for k in range(4)]
    first = body["data"][0]
    assert set(first) == OCCURRENCE_KEYS
    assert first == {
        "occurrence_id": f"{event['id']}:{_slot(start)}", "event_id": event["id"],
        "original_start": _z(start), "start_time": _z(start),
        "end_time": _z(start + timedelta(hours=1)), "start_timezone": "UTC",
        "end_timezone": "UTC", "start_date": None, "end_date": None, "is_all_day": False,
        "status": "scheduled", "is_exception": False, "title": "Standup",
        "description": None, "location": None,
    }
    status, got, _ = await api.get(_path(event, start), user)
    assert status == 200 and got == first
    # Pages: two at a time, the cursor resuming after the last.
    page = await _list(api, user, event, start, start + timedelta(weeks=4), limit=3)
    assert len(page["data"]) == 3 and page["has_more"] is True
    rest = await _list(api, user, event, start, start + timedelta(weeks=4), limit=3,
                       cursor=page["next_cursor"])
    assert [o["start_time"] for o in page["data"] + rest["data"]] == [
        o["start_time"] for o in body["data"]]


async def test_ids_that_name_no_occurrence_are_not_found(api: Api, user: User,
                                                         weekly: Any) -> None:
    profile, event, start = weekly
    for wrong in (f"{event['id']}:{_slot(start + timedelta(hours=1))}",  # no slot of the rule
                  f"{event['id']}:{_slot(start - timedelta(weeks=1))}",  # before the series
                  f"{event['id']}:{start:%Y%m%d}",  # a date, for a timed event
                  f"{event['id']}:tomorrow", "garbage",
                  f"evt_{'0' * 32}:{_slot(start)}"):  # another event's
        status, body, _ = await api.get(f"{_path(event)}/{wrong}", user)
        assert_error(status, body, 404, "resource_not_found", param="occurrence_id")
    other = await _weekly(api, user, profile, start)
    status, body, _ = await api.get(f"{_path(event)}/{other['id']}:{_slot(start)}", user)
    assert_error(status, body, 404, "resource_not_found", param="occurrence_id")
    status, body, _ = await api.get(_path(event), user, params={
        "from": _z(start), "to": _z(start + timedelta(days=63))})
    assert_error(status, body, 400, "invalid_time_range")


# ---------------------------------------------------------------------------
# REST writes


async def test_update_changes_one_occurrence_which_keeps_its_id(
        api: Api, user: User, weekly: Any) -> None:
    _, event, start = weekly
    second = start + timedelta(weeks=1)
    moved = second + timedelta(days=1, hours=2)  # Tuesday 11:00
    status, body, _ = await api.patch(_path(event, second), user, json={
        "title": "Standup (moved)", "location": "Room 2",
        "start_time": moved.strftime("%Y-%m-%dT%H:%M"), "start_timezone": "UTC",
        "end_time": (moved + timedelta(minutes=30)).strftime("%Y-%m-%dT%H:%M"),
        "end_timezone": "UTC"})
    assert status == 200, body
    assert body["occurrence_id"] == f"{event['id']}:{_slot(second)}"
    assert (body["original_start"], body["start_time"], body["end_time"]) == (
        _z(second), _z(moved), _z(moved + timedelta(minutes=30)))
    assert (body["title"], body["location"], body["is_exception"]) == (
        "Standup (moved)", "Room 2", True)
    # Only that one: the others keep the event's values.
    listed = (await _list(api, user, event, start, start + timedelta(weeks=3)))["data"]
    assert [o["start_time"] for o in listed] == [
        _z(start), _z(moved), _z(start + timedelta(weeks=2))]
    assert [o["title"] for o in listed] == ["Standup", "Standup (moved)", "Standup"]
    # A second change starts from where it is now: the start alone keeps its end.
    later = moved + timedelta(minutes=10)
    status, body, _ = await api.patch(_path(event, second), user, json={
        "start_time": later.strftime("%Y-%m-%dT%H:%M"), "start_timezone": "UTC"})
    assert status == 200, body
    assert (body["start_time"], body["end_time"], body["title"]) == (
        _z(later), _z(moved + timedelta(minutes=30)), "Standup (moved)")
    # Moved back where the rule puts it, with no text of its own: no change is left.
    other = start + timedelta(weeks=2)
    status, back, _ = await api.patch(_path(event, other), user, json={
        "start_time": (other + timedelta(minutes=15)).strftime("%Y-%m-%dT%H:%M"),
        "start_timezone": "UTC"})
    assert status == 200 and back["is_exception"] is True, back
    status, back, _ = await api.patch(_path(event, other), user, json={
        "start_time": other.strftime("%Y-%m-%dT%H:%M"), "start_timezone": "UTC"})
    assert status == 200 and back["is_exception"] is False, back
    # `{}` changes nothing; an occurrence with no change of its own stays so.
    status, same, _ = await api.patch(_path(event, second), user, json={})
    assert status == 200 and same == body
    status, plain, _ = await api.patch(_path(event, start), user, json={})
    assert status == 200 and plain["is_exception"] is False
    # Rules as EventUpdate: a start moved past the end, a date on a timed occurrence.
    status, error, _ = await api.patch(_path(event, start), user, json={
        "start_time": (start + timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M"),
        "start_timezone": "UTC"})
    assert_error(status, error, 400, "invalid_time_range", param="start_time")
    status, error, _ = await api.patch(_path(event, start), user, json={
        "start_date": f"{start:%Y-%m-%d}"})
    assert status == 400, error
    status, error, _ = await api.patch(_path(event, start), user, json={"recurrence_rule": None})
    assert_error(status, error, 400, "unknown_field", param="recurrence_rule")


async def test_cancel_and_restore(api: Api, user: User, weekly: Any) -> None:
    _, event, start = weekly
    third = start + timedelta(weeks=2)
    await api.patch(_path(event, third), user, json={"title": "Retro"})
    status, body, _ = await api.post(_path(event, third, "/cancel"), user,
                                     json={"reason": "Holiday"})
    assert status == 200, body
    assert (body["status"], body["is_exception"], body["title"]) == ("cancelled", True, "Retro")
    status, again, _ = await api.post(_path(event, third, "/cancel"), user, json={})
    assert_error(status, again, 409, "occurrence_cancelled", param="occurrence_id")
    status, again, _ = await api.patch(_path(event, third), user, json={"title": "x"})
    assert_error(status, again, 409, "occurrence_cancelled", param="occurrence_id")
    listed = (await _list(api, user, event, start, start + timedelta(weeks=4)))["data"]
    assert [o["status"] for o in listed] == ["scheduled", "scheduled", "cancelled", "scheduled"]
    # Restored: as the rule makes it, its title with it.
    status, body, _ = await api.post(_path(event, third, "/restore"), user)
    assert status == 200, body
    assert (body["status"], body["is_exception"], body["title"]) == (
        "scheduled", False, "Standup")
    status, body, _ = await api.post(_path(event, third, "/restore"), user)  # nothing to undo
    assert status == 200 and body["is_exception"] is False


async def test_who_may_write_and_when(api: Api, user: User, make_user: Any,
                                      live_server: LiveServer, weekly: Any) -> None:
    profile, event, start = weekly
    stranger, member = await make_user(), await make_user()
    status, body, _ = await api.post(_path(event, start, "/cancel"), stranger, json={})
    assert_error(status, body, 404, "resource_not_found", param="event_id")
    # A member of the owning organization who is no administrator of it: 403.
    live_server.admin(accounts.add_member, user.organization_id, member.email, "member")
    status, body, _ = await api.post(_path(event, start, "/cancel"), member, json={})
    assert_error(status, body, 403, "forbidden")
    status, body, _ = await api.get(_path(event, start), member)
    assert status == 200, body
    private = await _weekly(api, user, profile, start, is_private=True)
    status, body, _ = await api.post(_path(private, start, "/cancel"), stranger, json={})
    assert_error(status, body, 404, "resource_not_found", param="event_id")
    status, body, _ = await api.get(_path(private, start), stranger)
    assert_error(status, body, 404, "resource_not_found", param="event_id")
    one_off = await new_event(api, user, profile)
    status, body, _ = await api.post(
        f"/v1/events/{one_off['id']}/occurrences/{one_off['id']}:"
        f"{_slot(datetime.fromisoformat(one_off['start_time']))}/cancel", user, json={})
    assert_error(status, body, 400, "invalid_field", param="occurrence_id")
    status, body, _ = await api.post(f"/v1/events/{event['id']}/cancel", user, json={})
    assert status == 200, body
    for method, action, body_ in (("POST", "/cancel", {}), ("PATCH", "", {"title": "x"}),
                                  ("POST", "/restore", None)):
        status, body, _ = await api.request(method, _path(event, start, action), user,
                                            json=body_)
        assert_error(status, body, 409, "event_cancelled")
    status, body, _ = await api.post(f"/v1/events/{event['id']}/split", user, json={
        "occurrence_id": f"{event['id']}:{_slot(start + timedelta(weeks=1))}"})
    assert_error(status, body, 409, "event_cancelled")


async def test_at_most_1000_changed_occurrences_per_event(
        api: Api, user: User, live_server: LiveServer, weekly: Any) -> None:
    _, event, start = weekly
    assert live_server.db.dsn is not None
    conn = await asyncpg.connect(live_server.db.dsn)
    try:  # 1,000 rows straight into the table: the limit counts rows
        await conn.executemany(
            "INSERT INTO event_occurrences (event_id, slot, original_start, status)"
            " VALUES ($1, $2, $3, 'cancelled')",
            [(event["id"], _slot(start + timedelta(weeks=k)),
              start + timedelta(weeks=k)) for k in range(10, 10 + occurrences.MAX_EXCEPTIONS)])
    finally:
        await conn.close()
    status, body, _ = await api.post(_path(event, start, "/cancel"), user, json={})
    assert_error(status, body, 409, "too_many_exceptions", param="occurrence_id")
    status, body, _ = await api.patch(_path(event, start), user, json={"title": "x"})
    assert_error(status, body, 409, "too_many_exceptions", param="occurrence_id")
    # An occurrence that has a row already is no new one; restoring frees one.
    ten = start + timedelta(weeks=10)
    status, body, _ = await api.post(_path(event, ten, "/restore"), user)
    assert status == 200, body
    status, body, _ = await api.post(_path(event, start, "/cancel"), user, json={})
    assert status == 200, body


# ---------------------------------------------------------------------------
# Pruning and the split


async def test_a_new_start_or_rule_keeps_only_the_changes_whose_slot_still_occurs(
        api: Api, user: User, weekly: Any) -> None:
    _, event, start = weekly
    weeks = [start + timedelta(weeks=k) for k in range(4)]
    for week in weeks[1:]:
        status, body, _ = await api.patch(_path(event, week), user, json={"title": "own"})
        assert status == 200, body
    # Every other week: weeks 2 and 4 (index 2) stay slots, weeks 1 and 3 do not.
    status, body, _ = await api.patch(f"/v1/events/{event['id']}", user,
                                      json={"recurrence_rule": "FREQ=WEEKLY;INTERVAL=2"})
    assert status == 200, body
    listed = (await _list(api, user, event, start, start + timedelta(weeks=6)))["data"]
    assert [(o["start_time"], o["is_exception"]) for o in listed] == [
        (_z(weeks[0]), False), (_z(weeks[2]), True), (_z(start + timedelta(weeks=4)), False)]
    # A new start moves every slot: no change of its own is left.
    status, body, _ = await api.post(f"/v1/events/{event['id']}/reschedule", user, json={
        "start_time": (start + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M"),
        "start_timezone": "UTC"})
    assert status == 200, body
    listed = (await _list(api, user, event, start, start + timedelta(weeks=6)))["data"]
    assert not any(o["is_exception"] for o in listed)
    assert all(o["title"] == "Standup" for o in listed)


async def test_split_this_and_following(api: Api, user: User, make_user: Any) -> None:
    profile = await new_profile(api, user)
    start = _monday()
    event = await _weekly(api, user, profile, start, recurrence_rule="FREQ=WEEKLY;COUNT=6")
    status, series, _ = await api.post(f"/v1/profiles/{profile['id']}/series", user,
                                       json={"name": "Standups", "slug": "standups"})
    assert status == 201, series
    status, _, _ = await api.post(f"/v1/series/{series['id']}/events", user,
                                  json={"event_id": event["id"]})
    assert status in (200, 201, 204)
    status, _, _ = await api.patch(f"/v1/events/{event['id']}/rsvp-settings", user,
                                   json={"enable_capacity_limit": True, "capacity_limit": 40})
    assert status == 200
    guest = await make_user()
    status, _, _ = await api.post(f"/v1/events/{event['id']}/rsvps", guest,
                                  json={"status": "going", "num_guests": 2})
    assert status == 201
    fifth = start + timedelta(weeks=4)
    await api.patch(_path(event, fifth), user, json={"title": "Fifth"})
    await api.post(_path(event, start + timedelta(weeks=1), "/cancel"), user, json={})

    third = start + timedelta(weeks=2)
    status, new, headers = await api.post(f"/v1/events/{event['id']}/split", user, json={
        "occurrence_id": f"{event['id']}:{_slot(third)}", "title": "Standup v2",
        "location": "Room 9"})
    assert status == 201, new
    assert headers["Location"].endswith(f"/v1/events/{new['id']}")
    assert (new["title"], new["location"], new["start_time"]) == (
        "Standup v2", "Room 9", _z(third))
    assert new["recurrence_rule"] == "FREQ=WEEKLY;COUNT=4"
    status, old, _ = await api.get(f"/v1/events/{event['id']}", user,
                                   params={"expand": "series,rsvp_stats"})
    assert old["recurrence_rule"] == "FREQ=WEEKLY;COUNT=2"
    window = (start, start + timedelta(weeks=8))
    assert [o["start_time"] for o in (await _list(api, user, event, *window))["data"]] == [
        _z(start), _z(start + timedelta(weeks=1))]
    after = (await _list(api, user, new, *window))["data"]
    assert [o["start_time"] for o in after] == [_z(third + timedelta(weeks=k)) for k in range(4)]
    # The fifth occurrence's own change went with it; the second's cancellation stayed.
    assert [o["title"] for o in after] == ["Standup v2", "Standup v2", "Fifth", "Standup v2"]
    assert after[2]["occurrence_id"] == f"{new['id']}:{_slot(fifth)}"
    status, second, _ = await api.get(_path(event, start + timedelta(weeks=1)), user)
    assert second["status"] == "cancelled"
    status, copy, _ = await api.get(f"/v1/events/{new['id']}", user,
                                    params={"expand": "series,rsvp_settings,rsvp_stats"})
    assert [s["id"] for s in copy["series"]] == [series["id"]]
    assert copy["rsvp_settings"]["capacity_limit"] == 40
    assert (copy["rsvp_stats"]["going"], copy["rsvp_stats"]["total_attendees"]) == (1, 2)
    assert old["rsvp_stats"]["going"] == 1  # RSVPs stay per event
    # At the first occurrence: PATCH the event instead.
    status, body, _ = await api.post(f"/v1/events/{new['id']}/split", user, json={
        "occurrence_id": f"{new['id']}:{_slot(third)}"})
    assert_error(status, body, 400, "invalid_field", param="occurrence_id")


async def test_split_of_an_open_series_ends_the_first_part_with_until(
        api: Api, user: User, weekly: Any) -> None:
    _, event, start = weekly
    fourth = start + timedelta(weeks=3)
    status, new, _ = await api.post(f"/v1/events/{event['id']}/split", user, json={
        "occurrence_id": f"{event['id']}:{_slot(fourth)}",
        "start_time": (fourth + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M"),
        "start_timezone": "UTC", "end_time": (fourth + timedelta(hours=2)).strftime(
            "%Y-%m-%dT%H:%M"), "end_timezone": "UTC"})
    assert status == 201, new
    assert new["recurrence_rule"] == "FREQ=WEEKLY"
    assert new["start_time"] == _z(fourth + timedelta(hours=1))
    status, old, _ = await api.get(f"/v1/events/{event['id']}", user)
    assert old["recurrence_rule"] == f"FREQ=WEEKLY;UNTIL={_slot(fourth - timedelta(seconds=1))}"
    both = [o["start_time"] for e in (event, new)
            for o in (await _list(api, user, e, start, start + timedelta(weeks=5)))["data"]]
    assert both == [_z(start + timedelta(weeks=k)) for k in range(3)] + [
        _z(fourth + timedelta(hours=1)), _z(fourth + timedelta(weeks=1, hours=1))]


# ---------------------------------------------------------------------------
# Every reader alike


async def _subscribed(api: Api, user: User, profile: dict[str, Any], start: datetime,
                      expected: int) -> dict[str, Any]:
    """The user subscribes to `profile`; the agenda from `start`'s day for 14 days once its
    copies (a background job) show `expected` items."""
    status, body, _ = await api.post("/v1/subscriptions", user, json={
        "subscription_type": "profile", "profile_id": profile["id"]})
    assert status == 201, body
    deadline = time.monotonic() + 15
    while True:
        agenda = await _agenda(api, user, start)
        if len(agenda["items"]) >= expected:
            return agenda
        assert time.monotonic() < deadline, agenda
        await asyncio.sleep(0.05)


async def _agenda(api: Api, user: User, start: datetime) -> dict[str, Any]:
    status, body, _ = await api.get("/v1/agenda", user, params={
        "date": f"{start:%Y-%m-%d}", "days": "14", "timezone": "UTC", "detail": "full"})
    assert status == 200, body
    return body  # type: ignore[no-any-return]


async def test_agenda_copies_and_free_busy_show_moved_and_no_cancelled(
        api: Api, user: User, weekly: Any) -> None:
    profile, event, start = weekly
    agenda = await _subscribed(api, user, profile, start, 2)
    [first, second] = agenda["items"]
    assert first["source"]["type"] == "subscription" and first["event_id"].startswith("cev_")
    # The agenda's own IDs (the copy's) name the event and its occurrence too.
    moved = start + timedelta(weeks=1, days=3)
    status, body, _ = await api.patch(
        f"/v1/events/{second['event_id']}/occurrences/{second['occurrence_id']}", user, json={
            "title": "Thursday standup", "start_time": moved.strftime("%Y-%m-%dT%H:%M"),
            "start_timezone": "UTC", "end_time": (moved + timedelta(hours=1)).strftime(
                "%Y-%m-%dT%H:%M"), "end_timezone": "UTC"})
    assert status == 200, body
    status, body, _ = await api.post(
        f"/v1/events/{event['id']}/occurrences/{first['occurrence_id']}/cancel", user, json={})
    assert status == 200, body
    agenda = await _agenda(api, user, start)
    assert [(i["occurrence_id"], i["title"], i["start"], i["end"]) for i in agenda["items"]] == [
        (second["occurrence_id"], "Thursday standup", _z(moved), _z(moved + timedelta(hours=1)))]
    # Moved into a window its slot is not in, and out of the one it is.
    status, body, _ = await api.patch(_path(event, start + timedelta(weeks=2)), user, json={
        "start_time": (start + timedelta(weeks=5)).strftime("%Y-%m-%dT%H:%M"),
        "start_timezone": "UTC", "end_time": (start + timedelta(weeks=5, hours=1)).strftime(
            "%Y-%m-%dT%H:%M"), "end_timezone": "UTC"})
    assert status == 200, body
    later = await _agenda(api, user, start + timedelta(weeks=2))
    assert [i["start"] for i in later["items"]] == [_z(start + timedelta(weeks=3))]
    latest = await _agenda(api, user, start + timedelta(weeks=5))
    assert [(i["start"], i["occurrence_id"].split(":")[1]) for i in latest["items"]] == [
        (_z(start + timedelta(weeks=5)), _slot(start + timedelta(weeks=2))),
        (_z(start + timedelta(weeks=5)), _slot(start + timedelta(weeks=5))),
        (_z(start + timedelta(weeks=6)), _slot(start + timedelta(weeks=6)))]
    # Free/busy: busy where the occurrences now are, free where they were.
    status, busy, _ = await api.get("/v1/free-busy", user, params={
        "start": _z(start), "end": _z(start + timedelta(days=14))})
    assert status == 200, busy
    assert busy["people"][0]["busy"] == [
        {"start": _z(moved), "end": _z(moved + timedelta(hours=1)), "status": "busy"}]
    # Meeting times avoid the moved one, not the cancelled one.
    status, slots, _ = await api.post("/v1/meeting-times", user, json={
        "start": _z(start), "end": _z(start + timedelta(days=14)), "duration_minutes": 60,
        "time_zone": "UTC", "limit": 50,
        "working_hours": {"start": "09:00", "end": "10:00", "days": ["MO", "TU", "WE", "TH",
                                                                    "FR"]}})
    assert status == 200, slots
    starts = [s["start"] for s in slots["data"]]
    assert _z(start) in starts and _z(moved) not in starts


async def test_an_occurrence_moved_outside_its_series_range_is_read_where_it_lies(
        api: Api, user: User) -> None:
    """A series of three Mondays whose first occurrence moves to the Friday before it
    starts and whose last moves past its end: windows that meet neither the series'
    first start nor its last end still show them (the agenda reads the series by its
    moved occurrences too), and so does free/busy."""
    profile = await new_profile(api, user)
    start = _monday(2)
    event = await _weekly(api, user, profile, start, recurrence_rule="FREQ=WEEKLY;COUNT=3")
    await _subscribed(api, user, profile, start, 2)  # the third is on the 15th day
    earlier, later = start - timedelta(days=3), start + timedelta(weeks=2, days=10)
    for slot, moved in ((start, earlier), (start + timedelta(weeks=2), later)):
        status, body, _ = await api.patch(_path(event, slot), user, json={
            "start_time": moved.strftime("%Y-%m-%dT%H:%M"), "start_timezone": "UTC",
            "end_time": (moved + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M"),
            "end_timezone": "UTC"})
        assert status == 200, body
    for moved, slot in ((earlier, start), (later, start + timedelta(weeks=2))):
        status, body, _ = await api.get("/v1/agenda", user, params={
            "date": f"{moved:%Y-%m-%d}", "days": "1", "timezone": "UTC"})
        assert status == 200, body
        assert [(i["start"], i["occurrence_id"].split(":")[1]) for i in body["items"]] == [
            (_z(moved), _slot(slot))]
        status, busy, _ = await api.get("/v1/free-busy", user, params={
            "start": _z(moved - timedelta(hours=9)), "end": _z(moved + timedelta(hours=9))})
        assert status == 200, busy
        assert busy["people"][0]["busy"] == [
            {"start": _z(moved), "end": _z(moved + timedelta(hours=1)), "status": "busy"}]


SUMMARY = """query($id: ID!, $from: String!, $to: String!, $status: String) {
  profile(profile_id: $id) {
    rsvp_summary(from: $from, to: $to, bucket: "week", timezone: "UTC", status: $status) {
      start events going } } }"""

OCCURRENCES = """query($id: ID!, $from: String!, $to: String!) {
  event(event_id: $id) { occurrences(from: $from, to: $to, timezone: "UTC") {
    occurrence_id event_id original_start start end start_time status is_exception title
    local_start_time } } }"""


async def _gql(api: Api, user: User, query: str, **variables: Any) -> dict[str, Any]:
    status, body, _ = await api.post("/graphql", user, json={"query": query,
                                                             "variables": variables})
    assert status == 200 and "errors" not in body, body
    return body["data"]  # type: ignore[no-any-return]


async def test_the_dashboard_graph_reads_alike(api: Api, user: User, make_user: Any,
                                              weekly: Any) -> None:
    profile, event, start = weekly
    guest = await make_user()
    status, _, _ = await api.post(f"/v1/events/{event['id']}/rsvps", guest,
                                  json={"status": "going"})
    assert status == 201
    moved = start + timedelta(weeks=1, days=9)  # out of week 2, into week 3
    status, body, _ = await api.patch(_path(event, start + timedelta(weeks=1)), user, json={
        "title": "Moved", "start_time": moved.strftime("%Y-%m-%dT%H:%M"),
        "start_timezone": "UTC", "end_time": (moved + timedelta(hours=1)).strftime(
            "%Y-%m-%dT%H:%M"), "end_timezone": "UTC"})
    assert status == 200, body
    status, body, _ = await api.post(_path(event, start, "/cancel"), user, json={})
    assert status == 200, body
    window = {"from": _z(start), "to": _z(start + timedelta(weeks=3))}
    found = (await _gql(api, user, OCCURRENCES, id=event["id"], **window))["event"]
    assert [(o["start"], o["title"], o["is_exception"]) for o in found["occurrences"]] == [
        (_z(start + timedelta(weeks=2)), "Standup", False), (_z(moved), "Moved", True)]
    assert found["occurrences"][1]["occurrence_id"] == (
        f"{event['id']}:{_slot(start + timedelta(weeks=1))}")
    assert found["occurrences"][1]["original_start"] == _z(start + timedelta(weeks=1))
    weeks = {status: [b["events"] for b in (await _gql(
        api, user, SUMMARY, id=profile["id"], status=status, **window))["profile"][
            "rsvp_summary"]] for status in ("scheduled", "cancelled", None)}
    # Moved out of week 2 into week 3; week 1's is cancelled.
    # (Four buckets: the window ends on a Monday at 09:00.)
    assert weeks == {"scheduled": [0, 0, 2, 0], "cancelled": [1, 0, 0, 0], None: [1, 0, 2, 0]}
    going = (await _gql(api, user, SUMMARY, id=profile["id"], status="scheduled",
                        **window))["profile"]["rsvp_summary"]
    assert [b["going"] for b in going] == [0, 0, 1, 0]  # once, where it first occurs


MUTATIONS = """mutation($event: ID!, $id: String!, $split: String!) {
  update_event_occurrence(event_id: $event, occurrence_id: $id, input: {title: "GraphQL"}) {
    occurrence_id title is_exception }
  cancel_event_occurrence(event_id: $event, occurrence_id: $id, input: {reason: "off"}) {
    status }
  restore_event_occurrence(event_id: $event, occurrence_id: $id) { status title }
  split_event(event_id: $event, input: {occurrence_id: $split, title: "Later"}) {
    id title recurrence_rule } }"""


async def test_graphql_mutations(api: Api, user: User, weekly: Any) -> None:
    _, event, start = weekly
    occurrence_id = f"{event['id']}:{_slot(start)}"
    data = await _gql(api, user, MUTATIONS, event=event["id"], id=occurrence_id,
                      split=f"{event['id']}:{_slot(start + timedelta(weeks=2))}")
    assert data["update_event_occurrence"] == {
        "occurrence_id": occurrence_id, "title": "GraphQL", "is_exception": True}
    assert data["cancel_event_occurrence"] == {"status": "cancelled"}
    assert data["restore_event_occurrence"] == {"status": "scheduled", "title": "Standup"}
    assert data["split_event"]["title"] == "Later"
    assert data["split_event"]["recurrence_rule"] == "FREQ=WEEKLY"


# ---------------------------------------------------------------------------
# MCP, both routes


async def _tool(api: Api, route: str, caller: User, name: str, arguments: dict[str, Any]
                ) -> dict[str, Any]:
    status, body, _ = await api.post(route, caller, data=orjson.dumps({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": name, "arguments": arguments}}), headers={
        "Content-Type": "application/json", "MCP-Protocol-Version": "2025-11-25",
        "Accept": "application/json"})
    assert status == 200, body
    return body["result"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("route", ["/mcp-developer", "/mcp"])
async def test_mcp_tools_take_the_agendas_occurrence_id(
        api: Api, user: User, live_server: LiveServer, route: str, weekly: Any) -> None:
    profile, event, start = weekly
    caller = user
    if route == "/mcp":
        _, tokens = await tokens_for(live_server.url, user.api_key)
        caller = User(user.email, tokens["access_token"], user.organization_id,
                      user.calendar_id, user.consumer)
    agenda = await _subscribed(api, user, profile, start, 2)
    item = agenda["items"][1]
    changed = await _tool(api, route, caller, "updateEventOccurrence", {
        "event_id": item["event_id"], "occurrence_id": item["occurrence_id"],
        "title": "From an agent"})
    assert changed["isError"] is False, changed
    assert changed["structuredContent"]["occurrence_id"] == (
        f"{event['id']}:{_slot(start + timedelta(weeks=1))}")
    cancelled = await _tool(api, route, caller, "cancelEventOccurrence", {
        "event_id": item["event_id"], "occurrence_id": item["occurrence_id"]})
    assert cancelled["structuredContent"]["status"] == "cancelled"
    assert [i["occurrence_id"] for i in (await _agenda(api, user, start))["items"]] == [
        agenda["items"][0]["occurrence_id"]]
    again = await _tool(api, route, caller, "cancelEventOccurrence", {
        "event_id": event["id"], "occurrence_id": item["occurrence_id"]})
    assert again["isError"] is True and "occurrence_cancelled" in again["content"][0]["text"]
    # An occurrence is a resource named by its occurrence_id: `fields` answers less.
    narrowed = await _tool(api, route, caller, "updateEventOccurrence", {
        "event_id": event["id"], "occurrence_id": agenda["items"][0]["occurrence_id"],
        "location": "Room 1", "fields": ["location"]})
    assert narrowed["structuredContent"] == {
        "occurrence_id": f"{event['id']}:{_slot(start)}", "location": "Room 1"}


# ---------------------------------------------------------------------------
# Webhooks and the change feed


async def test_webhook_messages_in_order_with_the_events(
        api: Api, user: User, live_server: LiveServer, weekly: Any) -> None:
    profile, event, start = weekly
    status, endpoint, _ = await api.post(
        f"/v1/profiles/{profile['id']}/webhook-endpoints", user,
        json={"url": "https://hooks.invalid/kalends"})
    assert status == 201, endpoint
    second = start + timedelta(weeks=1)
    await api.patch(_path(event, second), user, json={"title": "Own"})
    await api.patch(f"/v1/events/{event['id']}", user, json={"description": "All"})
    await api.post(_path(event, second, "/cancel"), user, json={"reason": "Off"})
    await api.post(_path(event, second, "/restore"), user)
    assert live_server.db.dsn is not None
    conn = await asyncpg.connect(live_server.db.dsn)
    try:
        rows = await conn.fetch(
            "SELECT m.type, m.body FROM webhook_messages m"
            " JOIN webhook_deliveries d ON d.message_id = m.id"
            " WHERE d.endpoint_id = $1 ORDER BY d.seq", endpoint["id"])
        logged = await conn.fetch(
            "SELECT count(*) AS n FROM event_occurrences WHERE event_id = $1", event["id"])
    finally:
        await conn.close()
    assert [r["type"] for r in rows] == ["occurrence.updated", "event.updated",
                                          "occurrence.cancelled", "occurrence.restored"]
    cancelled = orjson.loads(rows[2]["body"])["data"]
    assert set(cancelled) == OCCURRENCE_KEYS
    assert (cancelled["occurrence_id"], cancelled["status"], cancelled["title"]) == (
        f"{event['id']}:{_slot(second)}", "cancelled", "Own")
    assert orjson.loads(rows[3]["body"])["data"]["is_exception"] is False
    assert logged[0]["n"] == 0


OCCURRENCE_CHANGES = """subscription($profile_id: ID!) { event_changes(profile_id: $profile_id) {
  type event { id } occurrence { occurrence_id status title } } }"""


async def test_event_changes_carry_the_occurrence(api: Api, user: User,
                                                  live_server: LiveServer,
                                                  weekly: Any) -> None:
    from test_graphql_subscriptions import client, watching

    profile, event, start = weekly
    second = start + timedelta(weeks=1)
    async with client(live_server.url, user.api_key) as session, \
            watching(live_server, session, OCCURRENCE_CHANGES,
                     {"profile_id": profile["id"]}) as changes:
        occurrence_id = f"{event['id']}:{_slot(second)}"
        await api.patch(_path(event, second), user, json={"title": "Live"})
        assert (await changes.next())["event_changes"] == {
            "type": "occurrence.updated", "event": {"id": event["id"]},
            "occurrence": {"occurrence_id": occurrence_id, "status": "scheduled",
                           "title": "Live"}}
        await api.post(_path(event, second, "/cancel"), user, json={})
        assert (await changes.next())["event_changes"] == {
            "type": "occurrence.cancelled", "event": {"id": event["id"]},
            "occurrence": {"occurrence_id": occurrence_id, "status": "cancelled",
                           "title": "Live"}}
        await api.patch(f"/v1/events/{event['id']}", user, json={"location": "Hall"})
        assert (await changes.next())["event_changes"] == {
            "type": "event.updated", "event": {"id": event["id"]}, "occurrence": None}


async def test_an_all_day_occurrence_moves_by_its_dates(api: Api, user: User) -> None:
    profile = await new_profile(api, user)
    day = _monday().date()
    status, event, _ = await api.post(f"/v1/profiles/{profile['id']}/events", user, json={
        "title": "Market", "is_all_day": True, "start_date": str(day),
        "start_timezone": "Asia/Tokyo", "recurrence_rule": "FREQ=WEEKLY"})
    assert status == 201, event
    second = day + timedelta(weeks=1)
    path = f"/v1/events/{event['id']}/occurrences/{event['id']}:{second:%Y%m%d}"
    status, body, _ = await api.patch(path, user, json={
        "start_date": str(second + timedelta(days=2)), "end_date": str(second + timedelta(days=4))})
    assert status == 200, body
    assert (body["original_start"], body["start_date"], body["end_date"], body["is_all_day"]) == (
        str(second), str(second + timedelta(days=2)), str(second + timedelta(days=4)), True)
    status, error, _ = await api.patch(path, user, json={
        "start_time": "2030-01-01T10:00", "start_timezone": "UTC"})
    assert status == 400, error
    status, error, _ = await api.get(
        f"/v1/events/{event['id']}/occurrences/{event['id']}:{_slot(_monday())}", user)
    assert_error(status, error, 404, "resource_not_found", param="occurrence_id")
    agenda = await _subscribed(api, user, profile, _monday(), 2)
    assert [(i["start_date"], i["end_date"]) for i in agenda["items"]] == [
        (str(day), str(day + timedelta(days=1))),
        (str(second + timedelta(days=2)), str(second + timedelta(days=4)))]
