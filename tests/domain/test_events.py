"""Events through REST: create (both routes), time input wiring, all-day, recurrence,
slugs, visibility, lists and pages, query budgets, expand, update, cancel,
reschedule, delete, IDs and Idempotency-Key."""

from __future__ import annotations

import asyncio
import secrets
from datetime import datetime
from typing import Any

import pytest
from conftest import assert_error, assert_refused_unchanged, new_event, new_profile, walk

from domain import accounts

MISSING_EVENT = "evt_" + "0" * 32

EVENT_KEYS = {
    "id", "profile_id", "title", "description", "location", "start_time", "end_time",
    "start_timezone", "end_timezone", "recurrence_rule", "status", "slug", "image_url",
    "is_all_day", "is_private", "require_rsvp", "require_payment", "cancellation_reason",
    "cancelled_at", "is_rescheduled", "created_at", "updated_at", "transparency",
}
PROFILE_KEYS = {
    "id", "platform_id", "display_name", "description", "profile_image_url", "header_image_url",
    "is_private", "default_event_duration_minutes", "created_at", "updated_at",
}
SERIES_KEYS = {"id", "profile_id", "name", "slug", "description", "is_private", "created_at",
               "updated_at"}
RSVP_SETTINGS_KEYS = {"enable_capacity_limit", "capacity_limit", "allow_waitlist",
                      "allow_multiple_attendees", "allow_notifications"}
RSVP_STATS_KEYS = {"event_id", "going", "maybe", "not_going", "waitlist", "total_attendees"}

NY = "America/New_York"
TIMED = {"title": "Jazz Night", "start_time": "2026-03-08T19:30", "start_timezone": NY}
TIMED_WITH_END = {**TIMED, "end_time": "2026-03-08T21:00", "end_timezone": NY}
END_SHOWN = "2026-03-09T01:00:00Z"
"""TIMED_WITH_END's end as the API shows it."""
STARTS_PAST_THE_END = pytest.mark.parametrize(
    ("start", "zone", "shown_start"),
    [
        ("2026-03-08T21:00", NY, "2026-03-09T01:00:00Z"),  # onto the end
        ("2026-03-10T20:00", NY, "2026-03-11T00:00:00Z"),
        ("2026-03-09T09:00", "Europe/Paris", "2026-03-09T08:00:00Z"),
        # Only the zone changes: 19:30 in Los Angeles is after 21:00 in New York.
        ("2026-03-08T19:30", "America/Los_Angeles", "2026-03-09T02:30:00Z"),
    ],
)
"""A start that would put TIMED_WITH_END past its end (profile and calendar events alike):
(start, zone, the start as the error's details show it)."""


# ---------------------------------------------------------------------------
# Helpers


def timed(**fields: Any) -> dict[str, Any]:
    """The body of TIMED with `fields` over it."""
    return {**TIMED, **fields}


async def setup(api: Any, make_user: Any, **profile_fields: Any) -> tuple[Any, dict[str, Any]]:
    owner = await make_user()
    return owner, await new_profile(api, owner, **profile_fields)


async def profile_event_ids(api: Any, user: Any, profile_id: str) -> list[str]:
    return [e["id"] for e in await walk(api, f"/v1/profiles/{profile_id}/events", user)]


async def global_ids(api: Any, user: Any) -> list[str]:
    return [e["id"] for e in await walk(api, "/v1/events", user)]


async def org_with(live_server: Any, make_user: Any, role: str) -> tuple[Any, Any, str]:
    """An organization: its owner, one more user with `role`, and its ID."""
    owner, other = await make_user(), await make_user()
    org = live_server.admin(accounts.create_organization, "Venue Co", owner.email, None)
    live_server.admin(accounts.add_member, org["organization_id"], other.email, role)
    return owner, other, org["organization_id"]


async def _refused_create(api: Any, owner: Any, profile: dict[str, Any], code: str,
                         param: str | None, **fields: Any) -> dict[str, Any]:
    """Creating TIMED with `fields` over it in `profile` is a 400 `code` (on `param`, when
    given): the error."""
    status, body, _ = await api.post(f"/v1/profiles/{profile['id']}/events", owner,
                                     json={**TIMED, **fields})
    return assert_error(status, body, 400, code, param=param)


async def _start_moved(api: Any, owner: Any, event: dict[str, Any], start_time: str,
                       zone: str) -> dict[str, Any]:
    """The event once a PATCH of its start alone has been taken (200)."""
    status, moved, _ = await api.patch(f"/v1/events/{event['id']}", owner,
                                       json={"start_time": start_time, "start_timezone": zone})
    assert status == 200, moved
    return moved  # type: ignore[no-any-return]


async def _refused_on_a_timed_event(api: Any, make_user: Any, code: str, param: str | None,
                                    **request: Any) -> None:
    """A new TIMED event of a new owner refuses `request` (assert_refused_unchanged's
    `json`, `method`, `action`) with a 400 `code`, and stays as it was."""
    owner, profile = await setup(api, make_user)
    event = await new_event(api, owner, profile, **TIMED)
    await assert_refused_unchanged(api, owner, f"/v1/events/{event['id']}", event, code, param,
                                   **request)


async def _organizations_event(live_server: Any, api: Any, make_user: Any
                               ) -> tuple[Any, Any, Any, dict[str, Any], dict[str, Any]]:
    """A TIMED event of an organization's profile: its owner, a member, a stranger, the
    profile and the event."""
    owner, member, org = await org_with(live_server, make_user, "member")
    stranger = await make_user()
    profile = await new_profile(api, owner, organization_id=org)
    return owner, member, stranger, profile, await new_event(api, owner, profile, **TIMED)


async def _refused_to_others(api: Any, method: str, path: str, stranger: Any, member: Any,
                             **request: Any) -> None:
    """`method` `path` (`request`: its body) is a 404 to a stranger and a 403 to a member
    who does not administer the profile."""
    status, body, _ = await api.request(method, path, stranger, **request)
    assert_error(status, body, 404, "resource_not_found")
    status, body, _ = await api.request(method, path, member, **request)
    assert_error(status, body, 403, "forbidden")


def without_updated_at(event: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in event.items() if k != "updated_at"}


# ---------------------------------------------------------------------------
# Create


async def test_create_on_the_profile_path(api: Any, make_user: Any) -> None:
    owner, profile = await setup(api, make_user)
    body = {
        **TIMED, "description": "Live", "location": "Main hall",
        "end_time": "2026-03-08T22:00", "end_timezone": NY,
        "image_url": "https://img.example/e.png", "is_private": False, "require_rsvp": True,
        "require_payment": True, "transparency": "transparent",
    }
    status, event, headers = await api.post(f"/v1/profiles/{profile['id']}/events", owner, json=body)
    assert status == 201, event
    assert set(event) == EVENT_KEYS
    assert event["id"].startswith("evt_") and len(event["id"]) == 36
    assert headers["Location"] == f"/v1/events/{event['id']}"
    assert event == {
        "id": event["id"], "profile_id": profile["id"], "title": "Jazz Night",
        "description": "Live", "location": "Main hall",
        "start_time": "2026-03-08T23:30:00Z", "end_time": "2026-03-09T02:00:00Z",
        "start_timezone": NY, "end_timezone": NY, "recurrence_rule": None,
        "status": "scheduled", "slug": "jazz-night-2026-03-08",
        "image_url": "https://img.example/e.png", "is_all_day": False, "is_private": False,
        "require_rsvp": True, "require_payment": True, "cancellation_reason": None,
        "cancelled_at": None, "is_rescheduled": False, "created_at": event["created_at"],
        "updated_at": event["updated_at"], "transparency": "transparent",
    }
    assert event["created_at"].endswith("Z")
    status, fetched, _ = await api.get(f"/v1/events/{event['id']}", owner)
    assert status == 200 and fetched == event


@pytest.mark.slow
async def test_the_earliest_times_are_written_with_four_digit_years(api: Any,
                                                                    make_user: Any) -> None:
    # Paris kept local mean time (+00:09:21) then: 00:30 there is 00:20:39 UTC, in year 1.
    owner, profile = await setup(api, make_user, is_private=True)
    status, event, _ = await api.post(f"/v1/profiles/{profile['id']}/events", owner, json={
        "title": "Year one", "start_time": "0001-01-01T00:30", "start_timezone": "Europe/Paris",
        "end_time": "0001-01-01T01:30", "end_timezone": "Europe/Paris"})
    assert status == 201, event
    assert (event["start_time"], event["end_time"]) == (
        "0001-01-01T00:20:39Z", "0001-01-01T01:20:39Z")
    listed = [e for e in await walk(api, "/v1/events", owner) if e["id"] == event["id"]]
    assert listed == [event]
    # A time whose instant would fall before year 1 is refused, not written as year 0.
    status, body, _ = await api.post(f"/v1/profiles/{profile['id']}/events", owner, json={
        "title": "Too early", "start_time": "0001-01-01T00:00", "start_timezone": "Asia/Tokyo"})
    assert_error(status, body, 400, "invalid_field", param="start_time")


async def test_create_on_the_global_route(api: Any, make_user: Any) -> None:
    owner, profile = await setup(api, make_user)
    status, event, headers = await api.post(
        "/v1/events", owner, json={**TIMED, "profile_id": profile["id"].upper()}
    )
    assert status == 201, event
    assert set(event) == EVENT_KEYS
    assert headers["Location"] == f"/v1/events/{event['id']}"
    assert event["profile_id"] == profile["id"]
    # Defaults of the optional fields.
    assert event["description"] is None and event["location"] is None
    assert event["end_time"] is None and event["image_url"] is None
    assert event["is_private"] is False and event["require_rsvp"] is False
    assert event["require_payment"] is False and event["transparency"] == "opaque"
    assert await profile_event_ids(api, owner, profile["id"]) == [event["id"]]


async def test_profile_path_create_refuses_a_body_profile_id(api: Any, make_user: Any) -> None:
    owner, profile = await setup(api, make_user)
    status, body, _ = await api.post(
        f"/v1/profiles/{profile['id']}/events", owner, json={**TIMED, "profile_id": profile["id"]}
    )
    assert_error(status, body, 400, "unknown_field", param="profile_id")
    assert await profile_event_ids(api, owner, profile["id"]) == []


async def test_global_create_needs_a_prf_profile_id(api: Any, make_user: Any) -> None:
    owner, profile = await setup(api, make_user)
    status, body, _ = await api.post("/v1/events", owner, json=TIMED)
    assert_error(status, body, 400, "missing_field", param="profile_id")
    status, body, _ = await api.post(
        "/v1/events", owner, json={**TIMED, "profile_id": profile["platform_id"]}
    )
    assert_error(status, body, 400, "invalid_id", param="profile_id")
    status, body, _ = await api.post(
        "/v1/events", owner, json={**TIMED, "profile_id": "evt_" + "1" * 32}
    )
    assert_error(status, body, 400, "invalid_id", param="profile_id")
    assert await profile_event_ids(api, owner, profile["id"]) == []


async def test_create_on_someone_elses_profile_is_404(api: Any, make_user: Any) -> None:
    owner, profile = await setup(api, make_user)
    stranger = await make_user()
    status, body, _ = await api.post(
        "/v1/events", stranger, json={**TIMED, "profile_id": profile["id"]}
    )
    assert_error(status, body, 404, "resource_not_found", param="profile_id")
    status, body, _ = await api.post(f"/v1/profiles/{profile['id']}/events", stranger, json=TIMED)
    assert_error(status, body, 404, "resource_not_found")
    status, body, _ = await api.post(
        "/v1/events", stranger, json={**TIMED, "profile_id": "prf_" + "0" * 32}
    )
    assert_error(status, body, 404, "resource_not_found", param="profile_id")
    assert await profile_event_ids(api, owner, profile["id"]) == []


async def test_organization_member_may_not_create(live_server: Any, api: Any, make_user: Any) -> None:
    owner, member, org = await org_with(live_server, make_user, "member")
    profile = await new_profile(api, owner, organization_id=org)
    status, body, _ = await api.post(f"/v1/profiles/{profile['id']}/events", member, json=TIMED)
    error = assert_error(status, body, 403, "forbidden")
    assert error["type"] == "permission_error"
    status, body, _ = await api.post(
        "/v1/events", member, json={**TIMED, "profile_id": profile["id"]}
    )
    assert_error(status, body, 403, "forbidden")
    assert await profile_event_ids(api, owner, profile["id"]) == []


async def test_organization_admin_may_create(live_server: Any, api: Any, make_user: Any) -> None:
    owner, admin, org = await org_with(live_server, make_user, "admin")
    profile = await new_profile(api, owner, organization_id=org)
    event = await new_event(api, admin, profile, **TIMED)
    assert event["profile_id"] == profile["id"]


async def test_create_on_a_deleted_profile_is_404(api: Any, make_user: Any) -> None:
    owner, profile = await setup(api, make_user)
    assert (await api.delete(f"/v1/profiles/{profile['id']}", owner))[0] == 204
    status, body, _ = await api.post(f"/v1/profiles/{profile['id']}/events", owner, json=TIMED)
    assert_error(status, body, 404, "resource_not_found")
    status, body, _ = await api.post(
        "/v1/events", owner, json={**TIMED, "profile_id": profile["id"]}
    )
    assert_error(status, body, 404, "resource_not_found", param="profile_id")


# ---------------------------------------------------------------------------
# Time input through REST


@pytest.mark.parametrize(
    ("start_time", "expected"),
    [
        ("2026-03-08T19:30", "2026-03-08T23:30:00Z"),  # naive local, after the DST switch
        ("2026-03-08 19:30:00", "2026-03-08T23:30:00Z"),
        ("2026-01-15T19:30", "2026-01-16T00:30:00Z"),  # winter: -05:00
        ("2026-03-08T19:30-04:00", "2026-03-08T23:30:00Z"),  # explicit matching offset
        ("2026-03-08T19:30:00-0400", "2026-03-08T23:30:00Z"),
        ("2026-11-01T01:30", "2026-11-01T05:30:00Z"),  # fold: the earlier instant
        ("2026-11-01T01:30-05:00", "2026-11-01T06:30:00Z"),  # fold, the later one asked for
    ],
)
async def test_start_time_resolves_to_utc(
    api: Any, make_user: Any, start_time: str, expected: str
) -> None:
    owner, profile = await setup(api, make_user)
    event = await new_event(api, owner, profile, **timed(start_time=start_time))
    assert event["start_time"] == expected
    assert event["start_timezone"] == NY


async def test_offset_that_the_zone_does_not_have(api: Any, make_user: Any) -> None:
    owner, profile = await setup(api, make_user)
    error = await _refused_create(api, owner, profile, "timezone_offset_mismatch", "start_time",
                                  start_time="2026-03-08T19:30+01:00")
    assert error["type"] == "invalid_request_error"
    assert error["details"] == {
        "value": "2026-03-08T19:30+01:00", "expected_offset": "-04:00",
        "valid_offsets": ["-04:00"],
    }
    # In a fold both offsets are valid, and both are listed.
    error = await _refused_create(api, owner, profile, "timezone_offset_mismatch", "start_time",
                                  start_time="2026-11-01T01:30Z")
    assert error["details"]["valid_offsets"] == ["-04:00", "-05:00"]
    # The end is judged in its own zone.
    error = await _refused_create(api, owner, profile, "timezone_offset_mismatch", "end_time",
                                  end_time="2026-03-08T22:00-04:00", end_timezone="Europe/Paris")
    assert error["details"]["expected_offset"] == "+01:00"
    assert await profile_event_ids(api, owner, profile["id"]) == []


async def test_local_time_in_a_dst_gap(api: Any, make_user: Any) -> None:
    owner, profile = await setup(api, make_user)
    error = await _refused_create(api, owner, profile, "nonexistent_local_time", "start_time",
                                  start_time="2026-03-08T02:30")
    assert error["details"] == {
        "value": "2026-03-08T02:30",
        "gap_from": "2026-03-08T02:00:00-05:00",
        "gap_to": "2026-03-08T03:00:00-04:00",
    }
    assert await profile_event_ids(api, owner, profile["id"]) == []


@pytest.mark.parametrize("value", ["2026-03-08 7pm", "08/03/2026 19:30", "2026-03-08", ""])
async def test_time_of_the_wrong_shape(api: Any, make_user: Any, value: str) -> None:
    owner, profile = await setup(api, make_user)
    error = await _refused_create(api, owner, profile, "invalid_time_format", "start_time",
                                  start_time=value)
    assert error["details"]["value"] == value
    shapes = error["details"]["expected_shapes"]
    assert shapes and all(isinstance(s, str) for s in shapes)
    assert "YYYY-MM-DDTHH:MM" in shapes
    assert await profile_event_ids(api, owner, profile["id"]) == []


@pytest.mark.parametrize(("field", "value", "named"), [
    ("start_time", "2027-02-30T10:00", "day 30 of February 2027, which has 28 days"),
    ("end_time", "2027-04-31T10:00", "day 31 of April 2027, which has 30 days"),
])
async def test_a_day_that_does_not_exist(api: Any, make_user: Any, field: str, value: str,
                                         named: str) -> None:
    owner, profile = await setup(api, make_user)
    error = await _refused_create(api, owner, profile, "invalid_field", field, **{
        field: value, **({"end_timezone": NY} if field == "end_time" else {})})
    assert error["details"] == {"value": value}
    assert named in error["message"]
    assert await profile_event_ids(api, owner, profile["id"]) == []


@pytest.mark.parametrize(
    ("fields", "code", "param"),
    [
        ({"start_timezone": "Mars/Olympus_Mons"}, "invalid_timezone", "start_timezone"),
        ({"start_timezone": "america/new_york"}, "invalid_timezone", "start_timezone"),
        ({"end_time": "2026-03-08T22:00", "end_timezone": "Nowhere"}, "invalid_timezone", "end_timezone"),
        ({"start_timezone": None}, "invalid_field", "start_timezone"),
        ({"end_time": "2026-03-08T22:00", "end_timezone": None}, "invalid_field", "end_timezone"),
        ({"start_time": 1772998200}, "invalid_field", "start_time"),
        ({"end_time": "2026-03-08T22:00"}, "field_dependency", "end_timezone"),
        ({"end_timezone": NY}, "field_dependency", "end_time"),
        ({"start_date": "2026-03-08"}, "field_dependency", "start_date"),
        ({"end_date": "2026-03-09"}, "field_dependency", "end_date"),
    ],
)
async def test_bad_time_fields_create_nothing(
    api: Any, make_user: Any, fields: dict[str, Any], code: str, param: str
) -> None:
    owner, profile = await setup(api, make_user)
    await _refused_create(api, owner, profile, code, param, **fields)
    assert await profile_event_ids(api, owner, profile["id"]) == []


async def test_start_time_and_start_timezone_travel_together(api: Any, make_user: Any) -> None:
    owner, profile = await setup(api, make_user)
    path = f"/v1/profiles/{profile['id']}/events"
    status, body, _ = await api.post(path, owner, json={"title": "x", "start_time": "2026-03-08T19:30"})
    assert_error(status, body, 400, "field_dependency", param="start_timezone")
    status, body, _ = await api.post(path, owner, json={"title": "x", "start_timezone": NY})
    assert_error(status, body, 400, "field_dependency", param="start_time")
    status, body, _ = await api.post(path, owner, json={"title": "x"})
    assert_error(status, body, 400, "missing_field", param="start_time")
    status, body, _ = await api.post(path, owner, json={"start_time": "2026-03-08T19:30", "start_timezone": NY})
    assert_error(status, body, 400, "missing_field", param="title")
    assert await profile_event_ids(api, owner, profile["id"]) == []


@pytest.mark.parametrize("end", ["2026-03-08T19:30", "2026-03-08T18:00"])
async def test_end_must_be_after_start(api: Any, make_user: Any, end: str) -> None:
    owner, profile = await setup(api, make_user)
    error = await _refused_create(api, owner, profile, "invalid_time_range", None,
                                  end_time=end, end_timezone=NY)
    hours, minutes = int(end[11:13]) + 4, end[14:16]
    assert error["details"] == {"start": "2026-03-08T23:30:00Z", "end": f"2026-03-08T{hours}:{minutes}:00Z"}
    assert await profile_event_ids(api, owner, profile["id"]) == []


async def test_end_in_another_zone_is_compared_as_an_instant(api: Any, make_user: Any) -> None:
    owner, profile = await setup(api, make_user)
    # 22:00 in London is 18:00 in New York: before the 19:30 start.
    await _refused_create(api, owner, profile, "invalid_time_range", None,
                          end_time="2026-03-08T22:00", end_timezone="Europe/London")
    event = await new_event(
        api, owner, profile, **timed(end_time="2026-03-09T02:00", end_timezone="Europe/London")
    )
    assert event["end_time"] == "2026-03-09T02:00:00Z"
    assert event["end_timezone"] == "Europe/London"


async def test_end_timezone_is_filled_on_create_only(api: Any, make_user: Any) -> None:
    owner, profile = await setup(api, make_user)
    event = await new_event(api, owner, profile, **timed(start_timezone="Europe/Paris"))
    assert event["end_time"] is None  # a point in time
    assert event["end_timezone"] == "Europe/Paris"
    assert event["start_time"] == "2026-03-08T18:30:00Z"

    moved = await _start_moved(api, owner, event, "2026-03-10T09:00", "Asia/Tokyo")
    assert moved["start_timezone"] == "Asia/Tokyo"
    assert moved["start_time"] == "2026-03-10T00:00:00Z"
    assert moved["end_timezone"] == "Europe/Paris"  # no cascade
    assert moved["end_time"] is None


async def test_update_of_start_zone_keeps_a_different_end_zone(api: Any, make_user: Any) -> None:
    owner, profile = await setup(api, make_user)
    event = await new_event(
        api, owner, profile, **timed(end_time="2026-03-09T02:00", end_timezone="Europe/London")
    )
    moved = await _start_moved(api, owner, event, "2026-03-09T09:00", "Asia/Tokyo")
    assert moved["end_timezone"] == "Europe/London"
    # The end stays where it was: only the start was sent.
    assert moved["start_time"] == "2026-03-09T00:00:00Z"
    assert moved["end_time"] == "2026-03-09T02:00:00Z"


# ---------------------------------------------------------------------------
# All-day events


async def test_all_day_event_defaults_to_one_day(api: Any, make_user: Any) -> None:
    owner, profile = await setup(api, make_user)
    status, event, _ = await api.post(
        f"/v1/profiles/{profile['id']}/events", owner,
        json={"title": "Spring fair", "is_all_day": True, "start_date": "2026-03-08", "start_timezone": NY},
    )
    assert status == 201, event
    assert set(event) == EVENT_KEYS
    assert event["is_all_day"] is True
    # Local midnights in start_timezone, as UTC: the day the clocks change is 23 hours long.
    assert event["start_time"] == "2026-03-08T05:00:00Z"
    assert event["end_time"] == "2026-03-09T04:00:00Z"
    assert event["start_timezone"] == NY and event["end_timezone"] == NY
    assert event["slug"] == "spring-fair-2026-03-08"


async def test_multi_day_all_day_event(api: Any, make_user: Any) -> None:
    owner, profile = await setup(api, make_user)
    status, event, _ = await api.post(
        f"/v1/profiles/{profile['id']}/events", owner,
        json={"title": "Festival", "is_all_day": True, "start_date": "2026-07-01",
              "end_date": "2026-07-04", "start_timezone": "Europe/Paris"},
    )
    assert status == 201, event
    assert event["start_time"] == "2026-06-30T22:00:00Z"
    assert event["end_time"] == "2026-07-03T22:00:00Z"


@pytest.mark.parametrize("end_date", ["2026-07-01", "2026-06-30"])
async def test_all_day_end_date_must_be_after_start_date(api: Any, make_user: Any, end_date: str) -> None:
    owner, profile = await setup(api, make_user)
    status, body, _ = await api.post(
        f"/v1/profiles/{profile['id']}/events", owner,
        json={"title": "Festival", "is_all_day": True, "start_date": "2026-07-01",
              "end_date": end_date, "start_timezone": "Europe/Paris"},
    )
    error = assert_error(status, body, 400, "invalid_time_range")
    assert error["details"] == {"start": "2026-07-01", "end": end_date}
    assert await profile_event_ids(api, owner, profile["id"]) == []


@pytest.mark.parametrize(
    ("fields", "code", "param"),
    [
        ({"start_timezone": NY}, "missing_field", "start_date"),
        ({"start_date": "2026-07-01"}, "missing_field", "start_timezone"),
        ({"start_date": "2026-07-01", "start_timezone": NY, "start_time": "2026-07-01T10:00"},
         "field_dependency", "start_time"),
        ({"start_date": "01/07/2026", "start_timezone": NY}, "invalid_time_format", "start_date"),
    ],
)
async def test_bad_all_day_fields(
    api: Any, make_user: Any, fields: dict[str, Any], code: str, param: str
) -> None:
    owner, profile = await setup(api, make_user)
    status, body, _ = await api.post(
        f"/v1/profiles/{profile['id']}/events", owner,
        json={"title": "Fair", "is_all_day": True, **fields},
    )
    assert_error(status, body, 400, code, param=param)
    assert await profile_event_ids(api, owner, profile["id"]) == []


# ---------------------------------------------------------------------------
# Recurrence


async def test_recurrence_rule_is_stored(api: Any, make_user: Any) -> None:
    owner, profile = await setup(api, make_user)
    event = await new_event(api, owner, profile, **timed(recurrence_rule="FREQ=WEEKLY;BYDAY=SU;COUNT=10"))
    assert event["recurrence_rule"] == "FREQ=WEEKLY;BYDAY=SU;COUNT=10"
    prefixed = await new_event(api, owner, profile, **timed(recurrence_rule="RRULE:FREQ=MONTHLY;BYDAY=2TU"))
    assert prefixed["recurrence_rule"] == "RRULE:FREQ=MONTHLY;BYDAY=2TU"
    assert (await api.get(f"/v1/events/{event['id']}", owner))[1]["recurrence_rule"] == (
        "FREQ=WEEKLY;BYDAY=SU;COUNT=10"
    )


@pytest.mark.parametrize(
    "rule",
    [
        "FREQ=SECONDLY",
        "FREQ=MINUTELY;INTERVAL=5",
        "FREQ=DAILY;" + "X" * (8193 - len("FREQ=DAILY;")),
        "not a rule at all",
        "FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=30",
    ],
    ids=["secondly", "minutely", "8193-chars", "garbage", "no-first-occurrence"],
)
async def test_invalid_recurrence_rule_creates_nothing(api: Any, make_user: Any, rule: str) -> None:
    owner, profile = await setup(api, make_user)
    status, body, _ = await api.post(
        f"/v1/profiles/{profile['id']}/events", owner, json={**TIMED, "recurrence_rule": rule}
    )
    error = assert_error(status, body, 400, "invalid_recurrence_rule", param="recurrence_rule")
    assert error["type"] == "invalid_request_error"
    assert await profile_event_ids(api, owner, profile["id"]) == []


async def test_recurrence_rule_update_and_clear(api: Any, make_user: Any) -> None:
    owner, profile = await setup(api, make_user)
    event = await new_event(api, owner, profile, **timed(recurrence_rule="FREQ=DAILY;COUNT=3"))
    path = f"/v1/events/{event['id']}"
    status, body, _ = await api.patch(path, owner, json={"recurrence_rule": "FREQ=MINUTELY"})
    assert_error(status, body, 400, "invalid_recurrence_rule", param="recurrence_rule")
    assert (await api.get(path, owner))[1] == event

    status, changed, _ = await api.patch(path, owner, json={"recurrence_rule": "FREQ=WEEKLY"})
    assert status == 200 and changed["recurrence_rule"] == "FREQ=WEEKLY"
    status, cleared, _ = await api.patch(path, owner, json={"recurrence_rule": None})
    assert status == 200 and cleared["recurrence_rule"] is None
    assert (await api.get(path, owner))[1]["recurrence_rule"] is None


# ---------------------------------------------------------------------------
# Slugs


async def test_slug_uses_the_date_in_the_events_zone(api: Any, make_user: Any) -> None:
    owner, profile = await setup(api, make_user)
    late = await new_event(api, owner, profile, **timed(title="Late Show!", start_time="2026-03-08T23:30"))
    assert late["start_time"] == "2026-03-09T03:30:00Z"
    assert late["slug"] == "late-show-2026-03-08"
    tokyo = await new_event(
        api, owner, profile,
        **timed(title="Early  Bird", start_time="2026-03-09T06:00", start_timezone="Asia/Tokyo"),
    )
    assert tokyo["start_time"] == "2026-03-08T21:00:00Z"
    assert tokyo["slug"] == "early-bird-2026-03-09"


async def test_derived_slugs_take_the_next_free_suffix(api: Any, make_user: Any) -> None:
    owner, profile = await setup(api, make_user)
    slugs = [(await new_event(api, owner, profile, **TIMED))["slug"] for _ in range(3)]
    assert slugs == ["jazz-night-2026-03-08", "jazz-night-2026-03-08-2", "jazz-night-2026-03-08-3"]


async def test_concurrent_creates_derive_distinct_slugs(api: Any, make_user: Any) -> None:
    owner, profile = await setup(api, make_user)
    path = f"/v1/profiles/{profile['id']}/events"
    results = await asyncio.gather(*(api.post(path, owner, json=TIMED) for _ in range(12)))
    assert [status for status, _, _ in results] == [201] * 12, [body for _, body, _ in results]
    base = "jazz-night-2026-03-08"
    assert sorted(body["slug"] for _, body, _ in results) == sorted(
        [base] + [f"{base}-{n}" for n in range(2, 13)]
    )


async def test_explicit_slugs(api: Any, make_user: Any) -> None:
    owner, profile = await setup(api, make_user)
    other_owner, other_profile = await setup(api, make_user)
    event = await new_event(api, owner, profile, **timed(slug="opening_Night-1"))
    assert event["slug"] == "opening_Night-1"
    # Taken in this profile, whatever the case: 409, never silently renamed.
    status, body, _ = await api.post(
        f"/v1/profiles/{profile['id']}/events", owner, json={**TIMED, "slug": "OPENING_NIGHT-1"}
    )
    error = assert_error(status, body, 409, "conflict", param="slug")
    assert error["type"] == "conflict_error"
    assert await profile_event_ids(api, owner, profile["id"]) == [event["id"]]
    # Another profile may use it.
    assert (await new_event(api, other_owner, other_profile, **timed(slug="opening_Night-1")))["slug"] == "opening_Night-1"


async def test_slug_taken_on_update_is_409(api: Any, make_user: Any) -> None:
    owner, profile = await setup(api, make_user)
    first = await new_event(api, owner, profile, **timed(slug="first"))
    second = await new_event(api, owner, profile, **timed(slug="second"))
    status, body, _ = await api.patch(f"/v1/events/{second['id']}", owner, json={"slug": "FIRST"})
    assert_error(status, body, 409, "conflict", param="slug")
    assert (await api.get(f"/v1/events/{second['id']}", owner))[1] == second
    status, same, _ = await api.patch(f"/v1/events/{first['id']}", owner, json={"slug": "first"})
    assert status == 200 and same["slug"] == "first"


@pytest.mark.parametrize("slug", ["history", "previous", "s", "History", "PREVIOUS", "S"])
async def test_reserved_slugs(api: Any, make_user: Any, slug: str) -> None:
    owner, profile = await setup(api, make_user)
    status, body, _ = await api.post(
        f"/v1/profiles/{profile['id']}/events", owner, json={**TIMED, "slug": slug}
    )
    assert_error(status, body, 400, "reserved_slug", param="slug")
    assert await profile_event_ids(api, owner, profile["id"]) == []
    event = await new_event(api, owner, profile, **TIMED)
    status, body, _ = await api.patch(f"/v1/events/{event['id']}", owner, json={"slug": slug})
    assert_error(status, body, 400, "reserved_slug", param="slug")
    assert (await api.get(f"/v1/events/{event['id']}", owner))[1] == event


@pytest.mark.parametrize("slug", ["", "-lead", "has space", "ü", "x" * 129])
async def test_slug_pattern(api: Any, make_user: Any, slug: str) -> None:
    owner, profile = await setup(api, make_user)
    status, body, _ = await api.post(
        f"/v1/profiles/{profile['id']}/events", owner, json={**TIMED, "slug": slug}
    )
    assert_error(status, body, 400, "invalid_field", param="slug")


# ---------------------------------------------------------------------------
# Visibility


@pytest.mark.slow
async def test_stranger_sees_public_events_of_public_profiles_only(api: Any, make_user: Any) -> None:
    owner, public_profile = await setup(api, make_user)
    private_profile = await new_profile(api, owner, is_private=True)
    stranger = await make_user()
    public = await new_event(api, owner, public_profile, **timed(title="Open"))
    private = await new_event(api, owner, public_profile, **timed(title="Hidden", is_private=True))
    on_private = await new_event(api, owner, private_profile, **timed(title="Members"))

    status, seen, _ = await api.get(f"/v1/events/{public['id']}", stranger)
    assert status == 200 and seen == public
    for hidden in (private, on_private):
        status, body, _ = await api.get(f"/v1/events/{hidden['id']}", stranger)
        assert_error(status, body, 404, "resource_not_found")

    assert await profile_event_ids(api, stranger, public_profile["id"]) == [public["id"]]
    status, body, _ = await api.get(f"/v1/profiles/{private_profile['id']}/events", stranger)
    assert_error(status, body, 404, "resource_not_found")
    feed = await global_ids(api, stranger)
    assert public["id"] in feed
    assert private["id"] not in feed and on_private["id"] not in feed

    # The owner sees all three, everywhere.
    assert sorted(await profile_event_ids(api, owner, public_profile["id"])) == sorted([public["id"], private["id"]])
    assert await profile_event_ids(api, owner, private_profile["id"]) == [on_private["id"]]
    feed = await global_ids(api, owner)
    assert {public["id"], private["id"], on_private["id"]} <= set(feed)


@pytest.mark.slow
async def test_organization_members_see_private_events(live_server: Any, api: Any, make_user: Any) -> None:
    owner, member, org = await org_with(live_server, make_user, "member")
    profile = await new_profile(api, owner, organization_id=org, is_private=True)
    private = await new_event(api, owner, profile, **timed(is_private=True))
    status, seen, _ = await api.get(f"/v1/events/{private['id']}", member)
    assert status == 200 and seen == private
    assert await profile_event_ids(api, member, profile["id"]) == [private["id"]]
    assert private["id"] in await global_ids(api, member)


@pytest.mark.slow
async def test_events_of_a_deleted_profile(api: Any, make_user: Any) -> None:
    owner, profile = await setup(api, make_user)
    stranger = await make_user()
    event = await new_event(api, owner, profile, **TIMED)
    assert (await api.get(f"/v1/events/{event['id']}", stranger))[0] == 200
    assert (await api.delete(f"/v1/profiles/{profile['id']}", owner))[0] == 204

    status, body, _ = await api.get(f"/v1/events/{event['id']}", stranger)
    assert_error(status, body, 404, "resource_not_found")
    assert event["id"] not in await global_ids(api, stranger)
    status, seen, _ = await api.get(f"/v1/events/{event['id']}", owner)
    assert status == 200
    assert seen["profile_id"] is None
    assert {k: v for k, v in seen.items() if k != "profile_id"} == {
        k: v for k, v in event.items() if k != "profile_id"
    }
    status, seen, _ = await api.get(f"/v1/events/{event['id']}", owner, params={"expand": "profile"})
    assert status == 200 and seen["profile"] is None


# ---------------------------------------------------------------------------
# Lists and pages


@pytest.mark.slow
async def test_profile_list_is_ordered_by_start_time_then_id(api: Any, make_user: Any) -> None:
    owner, profile = await setup(api, make_user)
    starts = ["2026-05-03T10:00", "2026-05-01T10:00", "2026-05-02T10:00", "2026-05-01T10:00",
              "2026-04-30T23:00"]
    made = [await new_event(api, owner, profile, **timed(start_time=s, start_timezone="UTC"))
            for s in starts]
    expected = [e["id"] for e in sorted(made, key=lambda e: (e["start_time"], e["id"]))]
    assert await profile_event_ids(api, owner, profile["id"]) == expected
    status, page, _ = await api.get(f"/v1/profiles/{profile['id']}/events", owner)
    assert status == 200 and set(page) == {"data", "has_more", "next_cursor"}
    assert page["has_more"] is False and page["next_cursor"] is None
    assert all(set(e) == EVENT_KEYS for e in page["data"])

    # The global feed holds them in the same relative order, and is itself sorted.
    feed = await walk(api, "/v1/events", owner)
    keys = [(e["start_time"], e["id"]) for e in feed]
    assert keys == sorted(keys)
    assert [e["id"] for e in feed if e["id"] in set(expected)] == expected


@pytest.mark.slow
async def test_pages_walk_every_event_once(api: Any, make_user: Any) -> None:
    owner, profile = await setup(api, make_user)
    for day in (7, 3, 5, 1, 6, 2, 4, 3):
        await new_event(api, owner, profile, **timed(start_time=f"2026-06-0{day}T12:00"))
    expected = await profile_event_ids(api, owner, profile["id"])
    assert len(expected) == 8
    paged = [e["id"] for e in await walk(api, f"/v1/profiles/{profile['id']}/events", owner, limit=3)]
    assert paged == expected
    # The global feed, walked in pages of 50, holds each once too.
    feed = [e["id"] for e in await walk(api, "/v1/events", owner, limit=50)]
    assert len(feed) == len(set(feed))
    assert set(expected) <= set(feed)


async def test_inserts_during_a_walk_are_not_skipped_or_repeated(api: Any, make_user: Any) -> None:
    owner, profile = await setup(api, make_user)
    for day in (10, 11, 12, 13):
        await new_event(api, owner, profile, **timed(start_time=f"2026-06-{day}T12:00"))
    path = f"/v1/profiles/{profile['id']}/events"
    status, first, _ = await api.get(path, owner, params={"limit": "2"})
    assert status == 200 and first["has_more"] is True
    late = await new_event(api, owner, profile, **timed(start_time="2026-06-20T12:00"))
    await new_event(api, owner, profile, **timed(start_time="2026-06-01T12:00"))  # before the cursor
    seen = [e["id"] for e in first["data"]]
    cursor = first["next_cursor"]
    while cursor:
        status, page, _ = await api.get(path, owner, params={"limit": "2", "cursor": cursor})
        assert status == 200
        seen += [e["id"] for e in page["data"]]
        cursor = page["next_cursor"]
    assert len(seen) == len(set(seen)) == 5
    assert seen[-1] == late["id"]


async def test_cursors_are_bound_to_their_list_and_tamper_evident(api: Any, make_user: Any) -> None:
    owner, profile = await setup(api, make_user)
    other = await new_profile(api, owner)
    for p in (profile, other):
        for _ in range(2):
            await new_event(api, owner, p, **TIMED)
    status, page, _ = await api.get(f"/v1/profiles/{profile['id']}/events", owner, params={"limit": "1"})
    assert status == 200
    cursor = page["next_cursor"]
    assert cursor
    for path in (f"/v1/profiles/{other['id']}/events", "/v1/events"):
        status, body, _ = await api.get(path, owner, params={"cursor": cursor})
        assert_error(status, body, 400, "invalid_cursor", param="cursor")
    status, feed, _ = await api.get("/v1/events", owner, params={"limit": "1"})
    status, body, _ = await api.get(
        f"/v1/profiles/{profile['id']}/events", owner, params={"cursor": feed["next_cursor"]}
    )
    assert_error(status, body, 400, "invalid_cursor", param="cursor")
    # Another caller's cursor of the same list.
    stranger = await make_user()
    status, body, _ = await api.get(
        f"/v1/profiles/{profile['id']}/events", stranger, params={"cursor": cursor}
    )
    assert_error(status, body, 400, "invalid_cursor", param="cursor")
    flipped = cursor[:-2] + ("A" if cursor[-2] != "A" else "B") + cursor[-1]
    for bad in (flipped, cursor + "x", "garbage", cursor[:-4]):
        status, body, _ = await api.get(
            f"/v1/profiles/{profile['id']}/events", owner, params={"cursor": bad}
        )
        assert_error(status, body, 400, "invalid_cursor", param="cursor")


@pytest.mark.parametrize("limit", ["0", "101", "-1", "ten"])
async def test_limit_bounds(api: Any, make_user: Any, limit: str) -> None:
    owner, profile = await setup(api, make_user)
    for path in ("/v1/events", f"/v1/profiles/{profile['id']}/events"):
        status, body, _ = await api.get(path, owner, params={"limit": limit})
        assert_error(status, body, 400, "invalid_query_parameter", param="limit")


async def test_default_page_size_is_20(api: Any, make_user: Any) -> None:
    owner, profile = await setup(api, make_user)
    await asyncio.gather(*(new_event(api, owner, profile, **TIMED) for _ in range(21)))
    status, page, _ = await api.get(f"/v1/profiles/{profile['id']}/events", owner)
    assert status == 200 and len(page["data"]) == 20 and page["has_more"] is True
    status, page, _ = await api.get(f"/v1/profiles/{profile['id']}/events", owner, params={"limit": "100"})
    assert len(page["data"]) == 21 and page["has_more"] is False


@pytest.mark.slow
async def test_recurring_events_are_listed_once(api: Any, make_user: Any) -> None:
    owner, profile = await setup(api, make_user)
    event = await new_event(api, owner, profile, **timed(recurrence_rule="FREQ=DAILY;COUNT=30"))
    assert await profile_event_ids(api, owner, profile["id"]) == [event["id"]]
    assert (await global_ids(api, owner)).count(event["id"]) == 1
    status, fetched, _ = await api.get(f"/v1/events/{event['id']}", owner)
    assert status == 200 and fetched == event  # the base row, not an occurrence


# ---------------------------------------------------------------------------
# Query budget


async def test_list_pages_cost_a_constant_number_of_queries(
    live_server: Any, api: Any, make_user: Any
) -> None:
    owner, profile = await setup(api, make_user)
    await asyncio.gather(*(new_event(api, owner, profile, **TIMED) for _ in range(100)))

    async def queries(path: str, limit: int) -> int:
        before = live_server.query_count
        status, page, _ = await api.get(path, owner, params={"limit": str(limit)})
        assert status == 200 and len(page["data"]) == limit
        return live_server.query_count - before  # type: ignore[no-any-return]

    # Authentication, then the page.
    assert await queries("/v1/events", 1) == 2
    assert await queries("/v1/events", 100) == 2
    # Authentication, the profile (visibility), then the page.
    profile_path = f"/v1/profiles/{profile['id']}/events"
    assert await queries(profile_path, 1) == 3
    assert await queries(profile_path, 100) == 3


async def test_retrieve_with_expansions_costs_a_constant_number_of_queries(
    live_server: Any, api: Any, make_user: Any
) -> None:
    owner, profile = await setup(api, make_user)
    event = await new_event(api, owner, profile, **TIMED)
    before = live_server.query_count
    assert (await api.get(f"/v1/events/{event['id']}", owner))[0] == 200
    assert live_server.query_count - before == 2
    before = live_server.query_count
    status, body, _ = await api.get(
        f"/v1/events/{event['id']}", owner, params={"expand": "profile,series,rsvp_stats"}
    )
    assert status == 200, body
    # Authentication, the event, then one query per relationship.
    assert live_server.query_count - before == 5


# ---------------------------------------------------------------------------
# expand


async def test_each_expansion_adds_one_key(api: Any, make_user: Any) -> None:
    owner, profile = await setup(api, make_user)
    attendee = await make_user()
    event = await new_event(api, owner, profile, **TIMED)
    status, series, _ = await api.post(
        f"/v1/profiles/{profile['id']}/series", owner, json={"name": "Season", "slug": "season"}
    )
    assert status == 201, series
    assert (await api.post(f"/v1/series/{series['id']}/events", owner, json={"event_id": event["id"]}))[0] == 204
    status, rsvp, _ = await api.post(
        f"/v1/events/{event['id']}/rsvps", attendee, json={"status": "going", "num_guests": 3}
    )
    assert status == 201, rsvp
    path = f"/v1/events/{event['id']}"

    status, plain, _ = await api.get(path, owner)
    assert status == 200 and set(plain) == EVENT_KEYS

    status, body, _ = await api.get(path, owner, params={"expand": "profile"})
    assert status == 200 and set(body) == EVENT_KEYS | {"profile"}
    assert set(body["profile"]) == PROFILE_KEYS
    assert body["profile"]["id"] == profile["id"]
    assert body["profile"]["platform_id"] == profile["platform_id"]

    status, body, _ = await api.get(path, owner, params={"expand": "series"})
    assert status == 200 and set(body) == EVENT_KEYS | {"series"}
    assert [set(s) for s in body["series"]] == [SERIES_KEYS]
    assert body["series"][0]["id"] == series["id"]

    status, body, _ = await api.get(path, owner, params={"expand": "rsvp_settings"})
    assert status == 200 and set(body) == EVENT_KEYS | {"rsvp_settings"}
    assert body["rsvp_settings"] == {
        "enable_capacity_limit": False, "capacity_limit": None, "allow_waitlist": True,
        "allow_multiple_attendees": True, "allow_notifications": True,
    }

    status, body, _ = await api.get(path, owner, params={"expand": "rsvp_stats"})
    assert status == 200 and set(body) == EVENT_KEYS | {"rsvp_stats"}
    assert body["rsvp_stats"] == {
        "event_id": event["id"], "going": 1, "maybe": 0, "not_going": 0, "waitlist": 0,
        "total_attendees": 3,
    }

    status, body, _ = await api.get(path, owner, params={"expand": "rsvp_stats,profile,series"})
    assert status == 200 and set(body) == EVENT_KEYS | {"rsvp_stats", "profile", "series"}
    assert {k: body[k] for k in EVENT_KEYS} == plain


async def test_an_event_in_no_series_expands_to_an_empty_list(api: Any, make_user: Any) -> None:
    owner, profile = await setup(api, make_user)
    event = await new_event(api, owner, profile, **TIMED)
    status, body, _ = await api.get(f"/v1/events/{event['id']}", owner, params={"expand": "series"})
    assert status == 200 and body["series"] == []


@pytest.mark.parametrize(
    "expand",
    ["owner", "profile,rsvps", "profile,series,rsvp_settings,rsvp_stats", "Profile",
     "profile,profile,profile,profile", "profile,"],
)
async def test_bad_expand(api: Any, make_user: Any, expand: str) -> None:
    owner, profile = await setup(api, make_user)
    event = await new_event(api, owner, profile, **TIMED)
    path = f"/v1/events/{event['id']}"
    status, body, _ = await api.get(path, owner, params={"expand": expand})
    assert_error(status, body, 400, "invalid_expand", param="expand")
    status, body, _ = await api.patch(path, owner, params={"expand": expand}, json={"title": "changed"})
    assert_error(status, body, 400, "invalid_expand", param="expand")
    status, body, _ = await api.delete(path, owner, params={"expand": expand})
    assert_error(status, body, 400, "invalid_expand", param="expand")
    # Nothing changed, nothing deleted.
    assert (await api.get(path, owner))[1] == event


async def test_expand_on_update_and_delete(api: Any, make_user: Any) -> None:
    owner, profile = await setup(api, make_user)
    event = await new_event(api, owner, profile, **TIMED)
    path = f"/v1/events/{event['id']}"
    status, body, _ = await api.patch(
        path, owner, params={"expand": "profile,rsvp_stats"}, json={"title": "Renamed"}
    )
    assert status == 200, body
    assert set(body) == EVENT_KEYS | {"profile", "rsvp_stats"}
    assert body["title"] == "Renamed" and body["profile"]["id"] == profile["id"]
    assert body["rsvp_stats"]["going"] == 0
    status, body, _ = await api.delete(path, owner, params={"expand": "profile"})
    assert (status, body) == (204, None)
    assert (await api.get(path, owner))[0] == 404


# ---------------------------------------------------------------------------
# Update


async def test_empty_patch_changes_nothing(api: Any, make_user: Any) -> None:
    owner, profile = await setup(api, make_user)
    event = await new_event(api, owner, profile, **timed(end_time="2026-03-08T21:00", end_timezone=NY,
                                                          description="d", recurrence_rule="FREQ=WEEKLY"))
    status, same, _ = await api.patch(f"/v1/events/{event['id']}", owner, json={})
    assert status == 200
    assert without_updated_at(same) == without_updated_at(event)
    assert without_updated_at((await api.get(f"/v1/events/{event['id']}", owner))[1]) == without_updated_at(event)


async def test_patch_updates_the_fields_sent(api: Any, make_user: Any) -> None:
    owner, profile = await setup(api, make_user)
    event = await new_event(api, owner, profile, **timed(description="old", location="Hall"))
    changes = {
        "title": "New title", "description": None, "image_url": "https://img.example/n.png",
        "is_private": True, "require_rsvp": True, "transparency": "transparent", "slug": "new-slug",
    }
    status, changed, _ = await api.patch(f"/v1/events/{event['id']}", owner, json=changes)
    assert status == 200, changed
    assert changed == {**event, **changes, "updated_at": changed["updated_at"]}
    assert changed["location"] == "Hall"
    assert changed["updated_at"] >= event["updated_at"]
    assert (await api.get(f"/v1/events/{event['id']}", owner))[1] == changed


@pytest.mark.parametrize(
    ("body", "code", "param"),
    [
        ({"require_payment": True}, "unknown_field", "require_payment"),
        ({"status": "cancelled"}, "unknown_field", "status"),
        ({"cancelled_at": "2026-03-08T10:00:00Z"}, "unknown_field", "cancelled_at"),
        ({"cancellation_reason": "rain"}, "unknown_field", "cancellation_reason"),
        ({"is_rescheduled": True}, "unknown_field", "is_rescheduled"),
        ({"profile_id": "prf_" + "1" * 32}, "unknown_field", "profile_id"),
        ({"title": None}, "invalid_field", "title"),
        ({"title": ""}, "invalid_field", "title"),
        ({"title": "x" * 501}, "invalid_field", "title"),
        ({"is_private": None}, "invalid_field", "is_private"),
        ({"start_timezone": None, "start_time": "2026-03-08T10:00"}, "invalid_field", "start_timezone"),
        ({"transparency": "busy"}, "invalid_field", "transparency"),
        ({"image_url": "javascript:alert(1)"}, "invalid_field", "image_url"),
        ({"start_time": "2026-03-09T10:00"}, "field_dependency", "start_timezone"),
        ({"end_time": "2026-03-09T10:00"}, "field_dependency", "end_timezone"),
        ({"end_timezone": NY}, "field_dependency", "end_time"),
        ({"start_date": "2026-03-09"}, "field_dependency", "start_date"),
        ({"end_time": "2026-03-08T18:00", "end_timezone": NY}, "invalid_time_range", None),
    ],
)
async def test_bad_updates_change_nothing(
    api: Any, make_user: Any, body: dict[str, Any], code: str, param: str | None
) -> None:
    await _refused_on_a_timed_event(api, make_user, code, param, json=body)


async def test_patch_by_others(live_server: Any, api: Any, make_user: Any) -> None:
    owner, member, stranger, profile, event = await _organizations_event(
        live_server, api, make_user)
    path = f"/v1/events/{event['id']}"
    await _refused_to_others(api, "PATCH", path, stranger, member, json={"title": "hijacked"})
    private = await new_event(api, owner, profile, **timed(is_private=True))
    status, body, _ = await api.patch(f"/v1/events/{private['id']}", stranger, json={"title": "x"})
    assert_error(status, body, 404, "resource_not_found")
    assert (await api.get(path, owner))[1] == event
    status, body, _ = await api.patch(f"/v1/events/{MISSING_EVENT}", owner, json={"title": "x"})
    assert_error(status, body, 404, "resource_not_found")


async def test_moving_the_start_keeps_the_end(api: Any, make_user: Any) -> None:
    owner, profile = await setup(api, make_user)
    event = await new_event(api, owner, profile, **TIMED_WITH_END)
    path = f"/v1/events/{event['id']}"
    status, later, _ = await api.patch(path, owner, json={"start_time": "2026-03-08T20:00", "start_timezone": NY})
    assert status == 200, later
    assert later["start_time"] == "2026-03-09T00:00:00Z"
    assert later["end_time"] == event["end_time"] == "2026-03-09T01:00:00Z"
    assert later["end_timezone"] == NY
    status, earlier, _ = await api.patch(
        path, owner, json={"start_time": "2026-03-08T19:00", "start_timezone": "Europe/London"})
    assert status == 200, earlier
    assert earlier["start_time"] == "2026-03-08T19:00:00Z"
    assert earlier["end_time"] == event["end_time"]
    assert (earlier["start_timezone"], earlier["end_timezone"]) == ("Europe/London", NY)
    assert (await api.get(path, owner))[1] == earlier
    # end_time null alone makes it a point in time.
    status, point, _ = await api.patch(path, owner, json={"end_time": None})
    assert status == 200 and point["end_time"] is None
    assert point["start_time"] == "2026-03-08T19:00:00Z"


@STARTS_PAST_THE_END
async def test_moving_the_start_past_the_end_changes_nothing(
    api: Any, make_user: Any, start: str, zone: str, shown_start: str
) -> None:
    owner, profile = await setup(api, make_user)
    event = await new_event(api, owner, profile, **TIMED_WITH_END)
    error = await assert_refused_unchanged(
        api, owner, f"/v1/events/{event['id']}", event, "invalid_time_range", "start_time",
        json={"title": "Moved", "start_time": start, "start_timezone": zone})
    assert error["details"] == {"start": shown_start, "end": END_SHOWN}


async def test_moving_the_start_with_an_end_moves_both(api: Any, make_user: Any) -> None:
    owner, profile = await setup(api, make_user)
    event = await new_event(api, owner, profile, **TIMED_WITH_END)
    path = f"/v1/events/{event['id']}"
    status, moved, _ = await api.patch(path, owner, json={
        "start_time": "2026-03-10T20:00", "start_timezone": NY,
        "end_time": "2026-03-10T23:00", "end_timezone": NY})
    assert status == 200, moved
    assert (moved["start_time"], moved["end_time"]) == ("2026-03-11T00:00:00Z", "2026-03-11T03:00:00Z")
    assert (await api.get(path, owner))[1] == moved


async def test_moving_a_point_in_time_keeps_it_a_point(api: Any, make_user: Any) -> None:
    owner, profile = await setup(api, make_user)
    event = await new_event(api, owner, profile, **TIMED)
    assert event["end_time"] is None
    status, moved, _ = await api.patch(
        f"/v1/events/{event['id']}", owner, json={"start_time": "2027-01-01T00:00", "start_timezone": NY})
    assert status == 200, moved
    assert (moved["start_time"], moved["end_time"]) == ("2027-01-01T05:00:00Z", None)
    assert moved["end_timezone"] == event["end_timezone"]


async def test_patch_makes_an_event_all_day(api: Any, make_user: Any) -> None:
    owner, profile = await setup(api, make_user)
    event = await new_event(api, owner, profile, **TIMED)
    path = f"/v1/events/{event['id']}"
    status, body, _ = await api.patch(path, owner, json={"is_all_day": True})
    assert_error(status, body, 400, "missing_field", param="start_date")
    status, day, _ = await api.patch(path, owner, json={"is_all_day": True, "start_date": "2026-03-10"})
    assert status == 200, day
    assert day["is_all_day"] is True
    assert day["start_time"] == "2026-03-10T04:00:00Z" and day["end_time"] == "2026-03-11T04:00:00Z"


# ---------------------------------------------------------------------------
# Cancel


@pytest.mark.parametrize("payload", ["none", "empty", "reason"])
async def test_cancel(api: Any, make_user: Any, payload: str) -> None:
    owner, profile = await setup(api, make_user)
    event = await new_event(api, owner, profile, **TIMED)
    kwargs: dict[str, Any] = {"none": {}, "empty": {"json": {}}, "reason": {"json": {"reason": "Rain"}}}[payload]
    status, cancelled, _ = await api.post(f"/v1/events/{event['id']}/cancel", owner, **kwargs)
    assert status == 200, cancelled
    assert set(cancelled) == EVENT_KEYS
    assert cancelled["status"] == "cancelled"
    assert cancelled["cancelled_at"] and cancelled["cancelled_at"].endswith("Z")
    assert cancelled["cancellation_reason"] == ("Rain" if payload == "reason" else None)
    assert {k: v for k, v in cancelled.items()
            if k not in ("status", "cancelled_at", "cancellation_reason", "updated_at")} == {
        k: v for k, v in event.items()
        if k not in ("status", "cancelled_at", "cancellation_reason", "updated_at")
    }
    assert (await api.get(f"/v1/events/{event['id']}", owner))[1] == cancelled


@pytest.mark.parametrize(
    ("kwargs", "code", "param"),
    [
        ({"json": {"reason": "x", "notify": True}}, "unknown_field", "notify"),
        ({"json": {"reason": 5}}, "invalid_field", "reason"),
        ({"json": {"reason": None}}, "invalid_field", "reason"),
        ({"json": ["reason"]}, "invalid_json", None),
        ({"data": "{not json", "headers": {"Content-Type": "application/json"}}, "invalid_json", None),
    ],
)
async def test_malformed_cancel_does_not_cancel(
    api: Any, make_user: Any, kwargs: dict[str, Any], code: str, param: str | None
) -> None:
    owner, profile = await setup(api, make_user)
    event = await new_event(api, owner, profile, **TIMED)
    status, body, _ = await api.post(f"/v1/events/{event['id']}/cancel", owner, **kwargs)
    assert_error(status, body, 400, code, param=param)
    status, fetched, _ = await api.get(f"/v1/events/{event['id']}", owner)
    assert fetched == event
    assert fetched["status"] == "scheduled" and fetched["cancelled_at"] is None


async def test_a_cancelled_event_is_frozen_until_rescheduled(api: Any, make_user: Any) -> None:
    owner, profile = await setup(api, make_user)
    event = await new_event(api, owner, profile, **TIMED)
    path = f"/v1/events/{event['id']}"
    status, cancelled, _ = await api.post(f"{path}/cancel", owner, json={"reason": "Storm"})
    assert status == 200
    status, body, _ = await api.post(f"{path}/cancel", owner, json={"reason": "again"})
    error = assert_error(status, body, 409, "event_cancelled")
    assert error["type"] == "conflict_error"
    status, body, _ = await api.patch(path, owner, json={"title": "Changed"})
    assert_error(status, body, 409, "event_cancelled")
    status, body, _ = await api.patch(path, owner, json={})
    assert_error(status, body, 409, "event_cancelled")
    assert (await api.get(path, owner))[1] == cancelled


async def test_cancel_keeps_rsvps(api: Any, make_user: Any) -> None:
    owner, profile = await setup(api, make_user)
    attendee = await make_user()
    event = await new_event(api, owner, profile, **TIMED)
    status, rsvp, _ = await api.post(f"/v1/events/{event['id']}/rsvps", attendee, json={"status": "going"})
    assert status == 201, rsvp
    assert (await api.post(f"/v1/events/{event['id']}/cancel", owner))[0] == 200
    status, page, _ = await api.get(f"/v1/events/{event['id']}/rsvps", owner)
    assert status == 200
    assert [r["id"] for r in page["data"]] == [rsvp["id"]]
    assert page["data"][0]["status"] == "going"


async def test_cancel_by_others(live_server: Any, api: Any, make_user: Any) -> None:
    owner, member, stranger, _, event = await _organizations_event(
        live_server, api, make_user)
    path = f"/v1/events/{event['id']}"
    await _refused_to_others(api, "POST", f"{path}/cancel", stranger, member)
    await _refused_to_others(api, "POST", f"{path}/reschedule", stranger, member,
                             json={"start_time": "2026-04-01T10:00", "start_timezone": NY})
    assert (await api.get(path, owner))[1] == event


# ---------------------------------------------------------------------------
# Reschedule


async def test_reschedule(api: Any, make_user: Any) -> None:
    owner, profile = await setup(api, make_user)
    event = await new_event(api, owner, profile, **TIMED_WITH_END)
    status, moved, _ = await api.post(
        f"/v1/events/{event['id']}/reschedule", owner,
        json={"start_time": "2026-04-02T18:00", "start_timezone": "Europe/Paris",
              "end_time": "2026-04-02T20:00", "end_timezone": "Europe/Paris"},
    )
    assert status == 200, moved
    assert set(moved) == EVENT_KEYS
    assert moved["start_time"] == "2026-04-02T16:00:00Z"
    assert moved["end_time"] == "2026-04-02T18:00:00Z"
    assert moved["start_timezone"] == "Europe/Paris" and moved["end_timezone"] == "Europe/Paris"
    assert moved["is_rescheduled"] is True and moved["status"] == "scheduled"
    assert moved["slug"] == event["slug"]  # the slug is an address; it does not move
    assert (await api.get(f"/v1/events/{event['id']}", owner))[1] == moved


async def test_reschedule_without_an_end_keeps_the_duration(api: Any, make_user: Any) -> None:
    owner, profile = await setup(api, make_user)
    event = await new_event(api, owner, profile, **TIMED_WITH_END)
    status, moved, _ = await api.post(
        f"/v1/events/{event['id']}/reschedule", owner,
        json={"start_time": "2026-03-09T10:00", "start_timezone": NY},
    )
    assert status == 200, moved
    assert moved["start_time"] == "2026-03-09T14:00:00Z"
    assert moved["end_time"] == "2026-03-09T15:30:00Z"
    assert moved["end_timezone"] == NY


async def test_reschedule_moves_what_a_patch_may_not(api: Any, make_user: Any) -> None:
    """The same new start: a PATCH keeps the end, and is refused past it; a
    reschedule moves the end too."""
    owner, profile = await setup(api, make_user)
    event = await new_event(api, owner, profile, **TIMED_WITH_END)
    path = f"/v1/events/{event['id']}"
    start = {"start_time": "2026-03-09T10:00", "start_timezone": NY}
    status, body, _ = await api.patch(path, owner, json=start)
    assert_error(status, body, 400, "invalid_time_range", param="start_time")
    status, moved, _ = await api.post(f"{path}/reschedule", owner, json=start)
    assert status == 200, moved
    assert (moved["start_time"], moved["end_time"]) == ("2026-03-09T14:00:00Z", "2026-03-09T15:30:00Z")


async def test_reschedule_reopens_a_cancelled_event(api: Any, make_user: Any) -> None:
    owner, profile = await setup(api, make_user)
    event = await new_event(api, owner, profile, **TIMED)
    path = f"/v1/events/{event['id']}"
    assert (await api.post(f"{path}/cancel", owner, json={"reason": "Storm"}))[0] == 200
    status, reopened, _ = await api.post(
        f"{path}/reschedule", owner, json={"start_time": "2026-03-15T19:30", "start_timezone": NY}
    )
    assert status == 200, reopened
    assert reopened["status"] == "scheduled"
    assert reopened["cancelled_at"] is None
    assert reopened["is_rescheduled"] is True
    assert reopened["start_time"] == "2026-03-15T23:30:00Z"
    # Open again: it can be changed and cancelled.
    status, changed, _ = await api.patch(path, owner, json={"title": "Back on"})
    assert status == 200 and changed["title"] == "Back on"
    assert (await api.post(f"{path}/cancel", owner))[0] == 200


@pytest.mark.parametrize(
    ("body", "code", "param"),
    [
        ({"start_time": "2026-04-01T10:00"}, "missing_field", "start_timezone"),
        ({"start_timezone": NY}, "missing_field", "start_time"),
        ({}, "missing_field", None),
        ({"start_time": "2026-04-01T10:00", "start_timezone": None}, "invalid_field", "start_timezone"),
        ({"start_time": "2026-04-01T10:00", "start_timezone": NY, "end_time": "2026-04-01T12:00"},
         "field_dependency", "end_timezone"),
        ({"start_time": "2026-04-01T10:00", "start_timezone": NY, "end_timezone": NY},
         "field_dependency", "end_time"),
        ({"start_time": "2026-04-01T10:00", "start_timezone": NY, "end_time": "2026-04-01T12:00",
          "end_timezone": None}, "invalid_field", "end_timezone"),
        ({"start_time": "2026-04-01T10:00", "start_timezone": NY, "end_time": "2026-04-01T09:00",
          "end_timezone": NY}, "invalid_time_range", None),
        ({"start_time": "2026-03-08T02:30", "start_timezone": NY}, "nonexistent_local_time", "start_time"),
        ({"start_time": "tomorrow", "start_timezone": NY}, "invalid_time_format", "start_time"),
        ({"start_time": "2026-04-01T10:00", "start_timezone": "Atlantis"}, "invalid_timezone", "start_timezone"),
        ({"start_time": "2026-04-01T10:00", "start_timezone": NY, "title": "x"}, "unknown_field", "title"),
    ],
)
async def test_bad_reschedule_changes_nothing(
    api: Any, make_user: Any, body: dict[str, Any], code: str, param: str | None
) -> None:
    await _refused_on_a_timed_event(api, make_user, code, param, json=body, method="POST",
                                    action="/reschedule")


# ---------------------------------------------------------------------------
# Delete


async def test_delete_removes_the_event_and_its_rsvps(api: Any, make_user: Any) -> None:
    owner, profile = await setup(api, make_user)
    attendee = await make_user()
    event = await new_event(api, owner, profile, **TIMED)
    keep = await new_event(api, owner, profile, **TIMED)
    path = f"/v1/events/{event['id']}"
    assert (await api.post(f"{path}/rsvps", attendee, json={"status": "going"}))[0] == 201
    status, body, headers = await api.delete(path, owner)
    assert (status, body) == (204, None)
    assert headers.get("Content-Length", "0") == "0"
    status, body, _ = await api.get(path, owner)
    assert_error(status, body, 404, "resource_not_found")
    for user in (owner, attendee):
        status, body, _ = await api.get(f"{path}/rsvps", user)
        assert_error(status, body, 404, "resource_not_found")
    status, body, _ = await api.delete(path, owner)
    assert_error(status, body, 404, "resource_not_found")
    assert await profile_event_ids(api, owner, profile["id"]) == [keep["id"]]


async def test_delete_by_others(live_server: Any, api: Any, make_user: Any) -> None:
    owner, member, stranger, _, event = await _organizations_event(
        live_server, api, make_user)
    path = f"/v1/events/{event['id']}"
    await _refused_to_others(api, "DELETE", path, stranger, member)
    assert (await api.get(path, owner))[1] == event


async def test_organization_admin_may_delete(live_server: Any, api: Any, make_user: Any) -> None:
    owner, admin, org = await org_with(live_server, make_user, "admin")
    profile = await new_profile(api, owner, organization_id=org)
    event = await new_event(api, owner, profile, **TIMED)
    assert (await api.delete(f"/v1/events/{event['id']}", admin))[:2] == (204, None)
    assert (await api.get(f"/v1/events/{event['id']}", owner))[0] == 404


# ---------------------------------------------------------------------------
# IDs and Idempotency-Key


async def test_ids_are_case_insensitive(api: Any, make_user: Any) -> None:
    owner, profile = await setup(api, make_user)
    event = await new_event(api, owner, profile, **TIMED)
    upper = event["id"].upper()
    assert upper.startswith("EVT_")
    status, fetched, _ = await api.get(f"/v1/events/{upper}", owner)
    assert status == 200 and fetched == event
    status, changed, _ = await api.patch(f"/v1/events/{upper}", owner, json={"title": "Upper"})
    assert status == 200 and changed["id"] == event["id"]
    status, page, _ = await api.get(f"/v1/profiles/{profile['id'].upper()}/events", owner)
    assert status == 200 and [e["id"] for e in page["data"]] == [event["id"]]


@pytest.mark.parametrize("bad", ["jazz-night", "prf_" + "0" * 32, "evt_" + "0" * 31, "evt_" + "g" * 32])
async def test_malformed_event_ids(api: Any, make_user: Any, bad: str) -> None:
    owner = await make_user()
    for method, kwargs in (
        (api.get, {}), (api.patch, {"json": {}}), (api.delete, {}),
    ):
        status, body, _ = await method(f"/v1/events/{bad}", owner, **kwargs)
        assert_error(status, body, 400, "invalid_id", param="event_id")
    for action, body in (("cancel", {}), ("reschedule", {"start_time": "2026-04-01T10:00", "start_timezone": NY})):
        status, error, _ = await api.post(f"/v1/events/{bad}/{action}", owner, json=body)
        assert_error(status, error, 400, "invalid_id", param="event_id")


async def test_missing_event_is_404(api: Any, make_user: Any) -> None:
    owner = await make_user()
    path = f"/v1/events/{MISSING_EVENT}"
    for method, kwargs in ((api.get, {}), (api.delete, {})):
        status, body, _ = await method(path, owner, **kwargs)
        assert_error(status, body, 404, "resource_not_found")
    status, body, _ = await api.post(f"{path}/cancel", owner)
    assert_error(status, body, 404, "resource_not_found")


async def test_idempotency_key_is_validated_not_deduplicated(api: Any, make_user: Any) -> None:
    owner, profile = await setup(api, make_user)
    path = f"/v1/profiles/{profile['id']}/events"
    key = {"Idempotency-Key": f"create-{secrets.token_hex(8)}"}
    status, first, _ = await api.post(path, owner, json=TIMED, headers=key)
    assert status == 201, first
    status, second, _ = await api.post(path, owner, json=TIMED, headers=key)
    assert status == 201, second
    assert first["id"] != second["id"]
    assert second["slug"] == first["slug"] + "-2"
    status, third, _ = await api.post(
        "/v1/events", owner, json={**TIMED, "profile_id": profile["id"]}, headers=key
    )
    assert status == 201, third
    assert sorted(await profile_event_ids(api, owner, profile["id"])) == sorted(
        [first["id"], second["id"], third["id"]]
    )


@pytest.mark.parametrize("bad", ["short", "x" * 256, "has space key", "semi;colon!!"])
async def test_invalid_idempotency_key(api: Any, make_user: Any, bad: str) -> None:
    owner, profile = await setup(api, make_user)
    status, body, _ = await api.post(
        f"/v1/profiles/{profile['id']}/events", owner, json=TIMED, headers={"Idempotency-Key": bad}
    )
    assert_error(status, body, 400, "invalid_idempotency_key", param="Idempotency-Key")
    status, body, _ = await api.post(
        "/v1/events", owner, json={**TIMED, "profile_id": profile["id"]}, headers={"Idempotency-Key": bad}
    )
    assert_error(status, body, 400, "invalid_idempotency_key", param="Idempotency-Key")
    assert await profile_event_ids(api, owner, profile["id"]) == []


# ---------------------------------------------------------------------------
# More rules around the edges


@pytest.mark.slow
async def test_deleted_profile_events_are_for_its_administrators_only(
    live_server: Any, api: Any, make_user: Any
) -> None:
    owner, admin, org = await org_with(live_server, make_user, "admin")
    member = await make_user()
    live_server.admin(accounts.add_member, org, member.email, "member")
    profile = await new_profile(api, owner, organization_id=org, is_private=True)
    event = await new_event(api, owner, profile, **TIMED)
    assert (await api.get(f"/v1/events/{event['id']}", member))[0] == 200
    assert (await api.delete(f"/v1/profiles/{profile['id']}", owner))[0] == 204
    for administrator in (owner, admin):
        status, seen, _ = await api.get(f"/v1/events/{event['id']}", administrator)
        assert status == 200 and seen["profile_id"] is None
        feed = {e["id"]: e for e in await walk(api, "/v1/events", administrator)}
        assert feed[event["id"]]["profile_id"] is None
    status, body, _ = await api.get(f"/v1/events/{event['id']}", member)
    assert_error(status, body, 404, "resource_not_found")


@pytest.mark.slow
async def test_making_an_event_private_hides_it(api: Any, make_user: Any) -> None:
    owner, profile = await setup(api, make_user)
    stranger = await make_user()
    event = await new_event(api, owner, profile, **TIMED)
    path = f"/v1/events/{event['id']}"
    assert (await api.get(path, stranger))[0] == 200
    assert (await api.patch(path, owner, json={"is_private": True}))[0] == 200
    assert (await api.get(path, stranger))[0] == 404
    assert await profile_event_ids(api, stranger, profile["id"]) == []
    assert (await api.patch(path, owner, json={"is_private": False}))[0] == 200
    assert (await api.get(path, stranger))[0] == 200
    # Making the profile private hides its public events too.
    assert (await api.patch(f"/v1/profiles/{profile['id']}", owner, json={"is_private": True}))[0] == 200
    assert (await api.get(path, stranger))[0] == 404
    assert event["id"] not in await global_ids(api, stranger)


async def test_expand_series_shows_only_series_the_caller_may_see(api: Any, make_user: Any) -> None:
    owner, profile = await setup(api, make_user)
    stranger = await make_user()
    event = await new_event(api, owner, profile, **TIMED)
    made = []
    for slug, private in (("open-season", False), ("insiders", True)):
        status, series, _ = await api.post(
            f"/v1/profiles/{profile['id']}/series", owner,
            json={"name": slug, "slug": slug, "is_private": private},
        )
        assert status == 201, series
        assert (await api.post(f"/v1/series/{series['id']}/events", owner, json={"event_id": event["id"]}))[0] == 204
        made.append(series["id"])
    status, body, _ = await api.get(f"/v1/events/{event['id']}", owner, params={"expand": "series"})
    assert status == 200 and [s["id"] for s in body["series"]] == made
    status, body, _ = await api.get(f"/v1/events/{event['id']}", stranger, params={"expand": "series"})
    assert status == 200 and [s["id"] for s in body["series"]] == made[:1]


async def test_unknown_list_query_parameter(api: Any, make_user: Any) -> None:
    owner, profile = await setup(api, make_user)
    for path in ("/v1/events", f"/v1/profiles/{profile['id']}/events"):
        status, body, _ = await api.get(path, owner, params={"expand": "profile"})
        assert_error(status, body, 400, "invalid_query_parameter", param="expand")
        status, body, _ = await api.get(path, owner, params={"after": "2026-01-01"})
        assert_error(status, body, 400, "invalid_query_parameter", param="after")


async def test_profile_events_of_a_missing_or_malformed_profile(api: Any, make_user: Any) -> None:
    owner = await make_user()
    status, body, _ = await api.get(f"/v1/profiles/prf_{'0' * 32}/events", owner)
    assert_error(status, body, 404, "resource_not_found")
    for bad in ("myhandle", MISSING_EVENT):
        status, body, _ = await api.get(f"/v1/profiles/{bad}/events", owner)
        assert_error(status, body, 400, "invalid_id", param="profile_id")
        status, body, _ = await api.post(f"/v1/profiles/{bad}/events", owner, json=TIMED)
        assert_error(status, body, 400, "invalid_id", param="profile_id")


async def test_bad_idempotency_key_on_cancel_and_reschedule_changes_nothing(
    api: Any, make_user: Any
) -> None:
    owner, profile = await setup(api, make_user)
    event = await new_event(api, owner, profile, **TIMED)
    path = f"/v1/events/{event['id']}"
    bad = {"Idempotency-Key": "bad key"}
    status, body, _ = await api.post(f"{path}/cancel", owner, json={"reason": "x"}, headers=bad)
    assert_error(status, body, 400, "invalid_idempotency_key", param="Idempotency-Key")
    status, body, _ = await api.post(
        f"{path}/reschedule", owner, json={"start_time": "2026-04-01T10:00", "start_timezone": NY},
        headers=bad,
    )
    assert_error(status, body, 400, "invalid_idempotency_key", param="Idempotency-Key")
    assert (await api.get(path, owner))[1] == event
    good = {"Idempotency-Key": "cancel-0001"}
    status, cancelled, _ = await api.post(f"{path}/cancel", owner, headers=good)
    assert status == 200 and cancelled["status"] == "cancelled"


async def test_cancel_reason_is_bounded(api: Any, make_user: Any) -> None:
    owner, profile = await setup(api, make_user)
    event = await new_event(api, owner, profile, **TIMED)
    status, body, _ = await api.post(f"/v1/events/{event['id']}/cancel", owner, json={"reason": "x" * 5001})
    assert_error(status, body, 400, "invalid_field", param="reason")
    assert (await api.get(f"/v1/events/{event['id']}", owner))[1] == event


async def new_festival(api: Any, owner: Any, profile: dict[str, Any]) -> dict[str, Any]:
    """An all-day event from 2026-07-01 to 2026-07-04 (exclusive), in Paris."""
    status, event, _ = await api.post(
        f"/v1/profiles/{profile['id']}/events", owner,
        json={"title": "Festival", "is_all_day": True, "start_date": "2026-07-01",
              "end_date": "2026-07-04", "start_timezone": "Europe/Paris"},
    )
    assert status == 201, event
    assert (event["start_time"], event["end_time"]) == ("2026-06-30T22:00:00Z", "2026-07-03T22:00:00Z")
    return event  # type: ignore[no-any-return]


async def test_all_day_update_keeps_the_end_date(api: Any, make_user: Any) -> None:
    owner, profile = await setup(api, make_user)
    event = await new_festival(api, owner, profile)
    path = f"/v1/events/{event['id']}"
    status, earlier, _ = await api.patch(path, owner, json={"start_date": "2026-06-28"})
    assert status == 200, earlier
    assert earlier["start_time"] == "2026-06-27T22:00:00Z"
    assert earlier["end_time"] == event["end_time"]
    status, moved, _ = await api.patch(path, owner, json={"start_date": "2026-07-03"})
    assert status == 200, moved
    assert moved["start_time"] == "2026-07-02T22:00:00Z"
    assert moved["end_time"] == event["end_time"]
    assert moved["is_all_day"] is True
    assert (await api.get(path, owner))[1] == moved
    status, body, _ = await api.patch(path, owner, json={"end_date": "2026-07-03"})
    error = assert_error(status, body, 400, "invalid_time_range")
    assert error["details"] == {"start": "2026-07-03", "end": "2026-07-03"}
    status, body, _ = await api.patch(path, owner, json={"is_all_day": False})
    assert_error(status, body, 400, "missing_field", param="start_time")
    assert (await api.get(path, owner))[1] == moved


@pytest.mark.parametrize("start_date", ["2026-07-04", "2026-08-10"])
async def test_all_day_start_date_past_the_end_date_changes_nothing(
    api: Any, make_user: Any, start_date: str
) -> None:
    owner, profile = await setup(api, make_user)
    event = await new_festival(api, owner, profile)
    path = f"/v1/events/{event['id']}"
    status, body, _ = await api.patch(path, owner, json={"title": "Moved", "start_date": start_date})
    error = assert_error(status, body, 400, "invalid_time_range", param="start_date")
    assert error["details"] == {"start": start_date, "end": "2026-07-04"}
    assert (await api.get(path, owner))[1] == event


async def test_all_day_made_timed_keeps_its_last_midnight(api: Any, make_user: Any) -> None:
    owner, profile = await setup(api, make_user)
    event = await new_festival(api, owner, profile)
    path = f"/v1/events/{event['id']}"
    status, body, _ = await api.patch(
        path, owner, json={"is_all_day": False, "start_time": "2026-07-04T10:00", "start_timezone": "Europe/Paris"})
    error = assert_error(status, body, 400, "invalid_time_range", param="start_time")
    assert error["details"] == {"start": "2026-07-04T08:00:00Z", "end": "2026-07-03T22:00:00Z"}
    assert (await api.get(path, owner))[1] == event
    status, timed_, _ = await api.patch(
        path, owner, json={"is_all_day": False, "start_time": "2026-07-01T10:00", "start_timezone": "Europe/Paris"})
    assert status == 200, timed_
    assert timed_["is_all_day"] is False
    assert (timed_["start_time"], timed_["end_time"]) == ("2026-07-01T08:00:00Z", event["end_time"])


async def test_rescheduling_an_all_day_event_makes_it_timed(api: Any, make_user: Any) -> None:
    owner, profile = await setup(api, make_user)
    status, event, _ = await api.post(
        f"/v1/profiles/{profile['id']}/events", owner,
        json={"title": "Fair", "is_all_day": True, "start_date": "2026-07-01", "start_timezone": "Europe/Paris"},
    )
    assert status == 201, event
    status, moved, _ = await api.post(
        f"/v1/events/{event['id']}/reschedule", owner,
        json={"start_time": "2026-07-10T10:00", "start_timezone": "Europe/Paris"},
    )
    assert status == 200, moved
    assert moved["is_all_day"] is False
    assert moved["start_time"] == "2026-07-10T08:00:00Z"
    assert moved["end_time"] == "2026-07-11T08:00:00Z"
    assert moved["is_rescheduled"] is True


async def test_title_bounds_and_unicode_slug(api: Any, make_user: Any) -> None:
    owner, profile = await setup(api, make_user)
    event = await new_event(api, owner, profile, **timed(title="x" * 500))
    assert event["title"] == "x" * 500
    assert len(event["slug"]) <= 128
    assert event["slug"].endswith("-2026-03-08")
    unicode = await new_event(api, owner, profile, **timed(title="Café Crème"))
    assert unicode["slug"] == "cafe-creme-2026-03-08"
    kanji = await new_event(api, owner, profile, **timed(title="日本語"))
    assert kanji["slug"] == "event-2026-03-08"
    for bad in ("", "   ", 5):
        status, body, _ = await api.post(
            f"/v1/profiles/{profile['id']}/events", owner, json={**TIMED, "title": bad}
        )
        assert_error(status, body, 400, "invalid_field", param="title")


async def test_pages_keep_sub_second_and_pre_1970_order(api: Any, make_user: Any) -> None:
    owner, profile = await setup(api, make_user)
    starts = ["2026-06-01T12:00:00.750", "1969-12-31T23:59:59.5", "2026-06-01T12:00:00.250",
              "2026-06-01T12:00:00.250", "2026-06-01T12:00:00", "1969-12-31T23:59:59"]
    made = [(s, (await new_event(api, owner, profile, **timed(start_time=s, start_timezone="UTC")))["id"])
            for s in starts]
    assert (await api.get(f"/v1/events/{made[0][1]}", owner))[1]["start_time"] == "2026-06-01T12:00:00Z"
    expected = [event_id for _, event_id in sorted(made, key=lambda m: (datetime.fromisoformat(m[0]), m[1]))]
    paged = [e["id"] for e in await walk(api, f"/v1/profiles/{profile['id']}/events", owner, limit=1)]
    assert paged == expected
