"""The agenda through REST: the window (zones, DST days, bounds), parameters and
their errors, calendar selection and sources, items (timed, points, all-day,
recurring, synced copies), the cap and completeness, the response shape and the
SQL statement budget."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from conftest import assert_error, insert_connected_calendar, new_profile, published

import registry
from domain import accounts, ids, times
from registry import OPERATIONS, Mcp, Operation

NY = "America/New_York"
PARIS = "Europe/Paris"
TOKYO = "Asia/Tokyo"
LA = "America/Los_Angeles"

TOP_KEYS = {"window", "items", "complete", "incomplete_reason", "sources", "warnings"}
ITEM_KEYS = {
    "occurrence_id", "calendar_id", "event_id", "editable", "title", "start", "end",
    "local_start", "local_end", "is_all_day", "location", "busy", "is_recurring", "profile",
    "source",
}


# ---------------------------------------------------------------------------
# Helpers


def today(zone: str = "UTC") -> date:
    return datetime.now(UTC).astimezone(ZoneInfo(zone)).date()


def soon(days: int = 20, zone: str = "UTC") -> date:
    """A day comfortably inside the allowed window."""
    return today(zone) + timedelta(days=days)


async def agenda(api: Any, user: Any, **params: Any) -> dict[str, Any]:
    status, body = await agenda_error(api, user, **params)
    # The published response schema holds every body, optional keys included.
    return published(status, body, "getAgenda", TOP_KEYS)


async def agenda_error(api: Any, user: Any, **params: Any) -> tuple[int, Any]:
    status, body, _ = await api.get("/v1/agenda", user,
                                    params={k: str(v) for k, v in params.items()})
    return status, body


async def cal_event(api: Any, user: Any, calendar_id: str | None = None, **fields: Any
                    ) -> dict[str, Any]:
    body = {"title": "Dentist", **fields}
    status, created, _ = await api.post(
        f"/v1/calendars/{calendar_id or user.calendar_id}/events", user, json=body
    )
    assert status == 201, created
    return created  # type: ignore[no-any-return]


def timed(day: date, start: str, end: str | None = None, zone: str = "UTC",
          **more: Any) -> dict[str, Any]:
    fields = {"start_time": f"{day}T{start}", "start_timezone": zone, **more}
    if end is not None:
        fields.update(end_time=f"{day}T{end}", end_timezone=zone)
    return fields


def all_day(day: date, end: date | None = None, zone: str = "UTC", **more: Any
            ) -> dict[str, Any]:
    fields = {"is_all_day": True, "start_date": str(day), "start_timezone": zone, **more}
    if end is not None:
        fields["end_date"] = str(end)
    return fields


def titles(body: dict[str, Any]) -> list[str]:
    return [i["title"] for i in body["items"]]


def user_id_of(live_server: Any, calendar_id: str) -> str:
    return live_server.call(  # type: ignore[no-any-return]
        live_server.db.fetchval("SELECT user_id FROM calendars WHERE id = $1", calendar_id)
    )


def new_calendar(live_server: Any, user: Any, name: str) -> str:
    return live_server.admin(accounts.create_calendar, user.email, name)["calendar_id"]  # type: ignore[no-any-return]


def insert_copy(live_server: Any, calendar_id: str, profile_id: str, start: datetime,
                end: datetime | None, *, title: str = "Synced", status: str = "confirmed",
                subscription_id: str | None = None, rule: str | None = None) -> str:
    """A subscription-synced copy, written as the sync jobs write them."""
    cev = ids.new_id("cev")
    live_server.call(live_server.db.execute(
        """
        INSERT INTO calendar_events (id, calendar_id, title, start_time, end_time,
            start_timezone, end_timezone, recurrence_rule, status, source_event_id,
            source_profile_id, subscription_id)
        VALUES ($1, $2, $3, $4, $5, 'UTC', 'UTC', $6, $7, $8, $9, $10)
        """,
        cev, calendar_id, title, start, end, rule, status, ids.new_id("evt"), profile_id,
        subscription_id,
    ))
    return cev


def insert_subscription(live_server: Any, user_id: str, profile_id: str) -> str:
    sub = ids.new_id("sub")
    live_server.call(live_server.db.execute(
        "INSERT INTO subscriptions (id, user_id, subscription_type, profile_id, is_active)"
        " VALUES ($1, $2, 'profile', $3, false)",
        sub, user_id, profile_id,
    ))
    return sub


def insert_external(live_server: Any, user_id: str, name: str = "Work (Google)") -> str:
    return insert_connected_calendar(live_server, user_id, name)


def day_length(day: date, zone: str) -> timedelta:
    tz = ZoneInfo(zone)
    return times.local_midnight(day + timedelta(days=1), tz) - times.local_midnight(day, tz)


def dst_day(zone: str, hours: int, *, first: date, last: date) -> date:
    """The first day in [first, last] that is `hours` long in `zone`."""
    day = first
    while day <= last:
        if day_length(day, zone) == timedelta(hours=hours):
            return day
        day += timedelta(days=1)
    raise AssertionError(f"no {hours}-hour day in {zone} between {first} and {last}")


def utc(day: date, clock: str) -> datetime:
    return datetime.fromisoformat(f"{day}T{clock}+00:00")


# ---------------------------------------------------------------------------
# Shape and defaults


async def test_defaults_seven_days_from_today_in_utc_and_every_calendar(
    api: Any, user: Any
) -> None:
    body = await agenda(api, user)
    first = today()
    assert body["window"] == {
        "date": str(first), "end_date": str(first + timedelta(days=7)), "timezone": "UTC",
        "start": f"{first}T00:00:00Z", "end": f"{first + timedelta(days=7)}T00:00:00Z",
    }
    assert body["items"] == []
    assert body["complete"] is True and body["incomplete_reason"] is None
    assert body["sources"] == [{"calendar_id": user.calendar_id, "name": "Personal",
                                "provider": "kalends", "last_sync_at": None, "status": "ok"}]
    assert body["warnings"] == []


async def test_a_timed_item_in_full(api: Any, user: Any) -> None:
    day = soon()
    event = await cal_event(api, user, title="Standup", location="Room 4",
                            **timed(day, "10:00", "10:30", NY))
    body = await agenda(api, user, date=day, days=1, timezone=PARIS)
    [item] = body["items"]
    assert set(item) == ITEM_KEYS  # no start_date, end_date or description keys at all
    start = datetime.fromisoformat(f"{day}T10:00").replace(tzinfo=ZoneInfo(NY)).astimezone(UTC)
    end = start + timedelta(minutes=30)
    assert item == {
        "occurrence_id": f"{event['id']}:{start:%Y%m%dT%H%M%SZ}",
        "calendar_id": user.calendar_id,
        "event_id": event["id"],
        "editable": True,
        "title": "Standup",
        "start": f"{start:%Y-%m-%dT%H:%M:%SZ}",
        "end": f"{end:%Y-%m-%dT%H:%M:%SZ}",
        "local_start": start.astimezone(ZoneInfo(PARIS)).isoformat(),
        "local_end": end.astimezone(ZoneInfo(PARIS)).isoformat(),
        "is_all_day": False,
        "location": "Room 4",
        "busy": True,
        "is_recurring": False,
        "profile": None,
        "source": {"type": "personal", "subscription_id": None},
    }


async def test_detail_full_adds_descriptions_and_summary_leaves_the_key_out(
    api: Any, user: Any
) -> None:
    day = soon()
    await cal_event(api, user, title="With", description="Bring the forms",
                    **timed(day, "09:00", "10:00"))
    await cal_event(api, user, title="Without", **timed(day, "11:00", "12:00"))
    summary = await agenda(api, user, date=day, days=1)
    assert all("description" not in i for i in summary["items"])
    assert summary == await agenda(api, user, date=day, days=1, detail="summary")
    full = await agenda(api, user, date=day, days=1, detail="full")
    assert [(i["title"], i["description"]) for i in full["items"]] == [
        ("With", "Bring the forms"), ("Without", None)
    ]
    assert_error(*await agenda_error(api, user, detail="everything"), 400,
                 "invalid_query_parameter", param="detail")


async def test_transparent_events_are_not_busy(api: Any, user: Any) -> None:
    day = soon()
    await cal_event(api, user, title="Focus", transparency="transparent",
                    **timed(day, "09:00", "10:00"))
    [item] = (await agenda(api, user, date=day, days=1))["items"]
    assert item["busy"] is False


# ---------------------------------------------------------------------------
# The window: zones, DST days, bounds


async def test_the_zone_is_the_parameter_then_the_saved_zone_then_utc(
    api: Any, make_user: Any
) -> None:
    tokyo_user = await make_user(timezone=TOKYO)
    body = await agenda(api, tokyo_user)
    first = today(TOKYO)
    assert body["window"]["timezone"] == TOKYO
    assert body["window"]["date"] == str(first)
    assert body["window"]["start"] == f"{first - timedelta(days=1)}T15:00:00Z"

    body = await agenda(api, tokyo_user, timezone=LA, date=soon(zone=LA))
    assert body["window"]["timezone"] == LA
    expected = times.local_midnight(soon(zone=LA), ZoneInfo(LA))
    assert body["window"]["start"] == f"{expected:%Y-%m-%dT%H:%M:%SZ}"

    plain = await make_user()
    assert (await agenda(api, plain))["window"]["timezone"] == "UTC"

    for bad in ("Mars/Olympus_Mons", "europe/paris", "", "localtime", "+05:00"):
        assert_error(*await agenda_error(api, plain, timezone=bad), 400, "invalid_timezone",
                     param="timezone")


async def test_a_dst_day_is_23_or_25_hours(api: Any, user: Any) -> None:
    first, last = today(NY) - timedelta(days=30), today(NY) + timedelta(days=364)
    for hours in (23, 25):
        day = dst_day(NY, hours, first=first, last=last)
        window = (await agenda(api, user, date=day, days=1, timezone=NY))["window"]
        start = datetime.fromisoformat(window["start"])
        end = datetime.fromisoformat(window["end"])
        assert window["date"] == str(day) and window["end_date"] == str(day + timedelta(days=1))
        assert end - start == timedelta(hours=hours)
        assert start.astimezone(ZoneInfo(NY)).hour == 0
        assert end.astimezone(ZoneInfo(NY)).hour == 0


async def test_date_and_days_are_checked(api: Any, user: Any) -> None:
    for bad in ("2026-02-30", "tomorrow", "", "2026-1-05", "20260105", "\uff12\uff10\uff12\uff16-01-05"):
        error = assert_error(*await agenda_error(api, user, date=bad), 400,
                             "invalid_query_parameter", param="date")
        assert error["details"]["value"] == bad
    for bad in ("0", "32", "-1", "seven", ""):
        assert_error(*await agenda_error(api, user, days=bad), 400, "invalid_query_parameter",
                     param="days")
    for days in (1, 31):
        body = await agenda(api, user, date=soon(), days=days)
        assert body["window"]["end_date"] == str(soon() + timedelta(days=days))
    assert_error(*await agenda_error(api, user, colour="red"), 400, "invalid_query_parameter",
                 param="colour")


async def test_the_window_stays_within_30_days_back_and_365_ahead(api: Any, user: Any) -> None:
    first = today()
    assert (await agenda(api, user, date=first - timedelta(days=30), days=31))["complete"]
    assert (await agenda(api, user, date=first + timedelta(days=364), days=1))["complete"]
    for date_, days in ((first - timedelta(days=31), 1), (first + timedelta(days=335), 31),
                        (first + timedelta(days=365), 1), (date(9999, 12, 31), 31),
                        (date(1, 1, 1), 1)):
        error = assert_error(*await agenda_error(api, user, date=date_, days=days), 400,
                             "agenda_window_out_of_range")
        assert error["details"] == {"start": str(first - timedelta(days=30)),
                                    "end": str(first + timedelta(days=365))}


async def test_the_bounds_are_measured_in_the_resolved_zone(api: Any, user: Any) -> None:
    # UTC+14 and UTC-11 are 25 hours apart: their todays always differ.
    ahead, behind = "Pacific/Kiritimati", "Pacific/Pago_Pago"
    last = today(ahead) + timedelta(days=364)
    assert (await agenda(api, user, date=last, days=1, timezone=ahead))["complete"]
    assert_error(*await agenda_error(api, user, date=last, days=1, timezone=behind), 400,
                 "agenda_window_out_of_range")
    earliest = today(behind) - timedelta(days=30)
    assert (await agenda(api, user, date=earliest, days=1, timezone=behind))["complete"]
    assert_error(*await agenda_error(api, user, date=earliest, days=1, timezone=ahead), 400,
                 "agenda_window_out_of_range")


# ---------------------------------------------------------------------------
# Which items: overlap, points, all-day


async def test_timed_items_overlap_the_window_and_points_lie_inside_it(
    api: Any, user: Any
) -> None:
    day = soon()
    before, after = day - timedelta(days=1), day + timedelta(days=1)
    await cal_event(api, user, title="ends before start", **timed(before, "22:00", "23:59:59"))
    await cal_event(api, user, title="ends exactly at start", start_time=f"{before}T23:00",
                    start_timezone="UTC", end_time=f"{day}T00:00", end_timezone="UTC")
    await cal_event(api, user, title="runs into the window", start_time=f"{before}T23:00",
                    start_timezone="UTC", end_time=f"{day}T01:00", end_timezone="UTC")
    await cal_event(api, user, title="point at start", **timed(day, "00:00"))
    await cal_event(api, user, title="point inside", **timed(day, "12:00"))
    await cal_event(api, user, title="point at end", **timed(after, "00:00"))
    await cal_event(api, user, title="runs out of the window", start_time=f"{day}T23:00",
                    start_timezone="UTC", end_time=f"{after}T02:00", end_timezone="UTC")
    await cal_event(api, user, title="starts at end", **timed(after, "00:00", "01:00"))
    body = await agenda(api, user, date=day, days=1)
    assert titles(body) == ["runs into the window", "point at start", "point inside",
                            "runs out of the window"]
    points = [i for i in body["items"] if i["title"].startswith("point")]
    assert all(i["end"] is None and i["local_end"] is None for i in points)


async def test_all_day_items_are_placed_by_date_in_any_zone(api: Any, user: Any) -> None:
    day = soon()
    # Stored in Tokyo, read in Los Angeles: still the same calendar dates.
    event = await cal_event(api, user, title="Holiday", **all_day(day, zone=TOKYO))
    await cal_event(api, user, title="Trip", **all_day(day - timedelta(days=2),
                                                       day + timedelta(days=2), zone=NY))
    await cal_event(api, user, title="Day before", **all_day(day - timedelta(days=1)))
    await cal_event(api, user, title="Day after", **all_day(day + timedelta(days=1)))
    body = await agenda(api, user, date=day, days=1, timezone=LA)
    assert titles(body) == ["Trip", "Holiday"]
    trip, holiday = body["items"]
    la = ZoneInfo(LA)
    midnight = times.local_midnight(day, la)
    next_midnight = times.local_midnight(day + timedelta(days=1), la)
    assert holiday == {
        "occurrence_id": f"{event['id']}:{day:%Y%m%d}",
        "calendar_id": user.calendar_id, "event_id": event["id"], "editable": True,
        "title": "Holiday",
        "start": f"{midnight:%Y-%m-%dT%H:%M:%SZ}", "end": f"{next_midnight:%Y-%m-%dT%H:%M:%SZ}",
        "local_start": midnight.astimezone(la).isoformat(),
        "local_end": next_midnight.astimezone(la).isoformat(),
        "is_all_day": True, "location": None, "busy": True, "is_recurring": False,
        "profile": None, "source": {"type": "personal", "subscription_id": None},
        "start_date": str(day), "end_date": str(day + timedelta(days=1)),
    }
    assert holiday["local_start"].startswith(f"{day}T00:00:00")
    assert (trip["start_date"], trip["end_date"]) == (str(day - timedelta(days=2)),
                                                      str(day + timedelta(days=2)))
    # end_date is exclusive on both sides.
    body = await agenda(api, user, date=day + timedelta(days=2), days=1)
    assert titles(body) == []
    body = await agenda(api, user, date=day - timedelta(days=3), days=1)
    assert titles(body) == []


async def test_items_sort_by_start_then_occurrence_id(api: Any, user: Any) -> None:
    day = soon()
    made = [await cal_event(api, user, title=f"same {i}", **timed(day, "09:00", "10:00"))
            for i in range(3)]
    await cal_event(api, user, title="earlier", **timed(day, "08:00", "08:30"))
    await cal_event(api, user, title="all day", **all_day(day))
    body = await agenda(api, user, date=day, days=1)
    same = sorted(made, key=lambda e: f"{e['id']}:")
    assert titles(body) == ["all day", "earlier", *[e["title"] for e in same]]
    keys = [(i["start"], i["occurrence_id"]) for i in body["items"]]
    assert keys == sorted(keys)


# ---------------------------------------------------------------------------
# Recurrence


async def test_recurrence_keeps_the_wall_clock_of_its_own_zone_across_dst(
    api: Any, user: Any
) -> None:
    spring = dst_day(NY, 23, first=today(NY) - timedelta(days=23),
                     last=today(NY) + timedelta(days=350))
    first = spring - timedelta(days=7)
    event = await cal_event(api, user, title="Weekly", recurrence_rule="FREQ=WEEKLY",
                            **timed(first, "09:00", "09:45", NY))
    body = await agenda(api, user, date=first, days=14, timezone=NY)
    items = body["items"]
    assert [i["local_start"][:19] for i in items] == [f"{first}T09:00:00", f"{spring}T09:00:00"]
    assert items[0]["local_start"][19:] != items[1]["local_start"][19:]  # offsets differ
    for item in items:
        start = datetime.fromisoformat(item["start"])
        assert datetime.fromisoformat(item["end"]) - start == timedelta(minutes=45)
        assert item["occurrence_id"] == f"{event['id']}:{start:%Y%m%dT%H%M%SZ}"
        assert (item["is_recurring"], item["editable"]) == (True, False)
        assert datetime.fromisoformat(item["local_start"]) == start
    # Shown in another zone: the same instants, an hour apart in Paris's clock.
    paris = await agenda(api, user, date=first, days=14, timezone=PARIS)
    assert [i["start"] for i in paris["items"]] == [i["start"] for i in items]
    hours = [datetime.fromisoformat(i["local_start"]).hour for i in paris["items"]]
    assert hours[0] != hours[1]


async def test_an_occurrence_running_into_the_window_is_included(api: Any, user: Any) -> None:
    day = soon()
    await cal_event(api, user, title="Night shift", recurrence_rule="FREQ=DAILY",
                    start_time=f"{day - timedelta(days=5)}T23:00", start_timezone="UTC",
                    end_time=f"{day - timedelta(days=4)}T01:00", end_timezone="UTC")
    body = await agenda(api, user, date=day, days=1)
    assert [(i["start"], i["end"]) for i in body["items"]] == [
        (f"{day - timedelta(days=1)}T23:00:00Z", f"{day}T01:00:00Z"),
        (f"{day}T23:00:00Z", f"{day + timedelta(days=1)}T01:00:00Z"),
    ]


async def test_recurring_all_day_and_recurring_points(api: Any, user: Any) -> None:
    day = soon()
    weekly = await cal_event(api, user, title="Bins", recurrence_rule="FREQ=WEEKLY",
                             **all_day(day - timedelta(days=14), zone=TOKYO))
    await cal_event(api, user, title="Ping", recurrence_rule="FREQ=DAILY",
                    **timed(day - timedelta(days=3), "00:00"))
    body = await agenda(api, user, date=day, days=8, timezone=LA)
    bins = [i for i in body["items"] if i["title"] == "Bins"]
    assert [(i["start_date"], i["end_date"]) for i in bins] == [
        (str(day), str(day + timedelta(days=1))),
        (str(day + timedelta(days=7)), str(day + timedelta(days=8))),
    ]
    assert bins[0]["occurrence_id"] == f"{weekly['id']}:{day:%Y%m%d}"
    assert bins[0]["local_start"].startswith(f"{day}T00:00:00")
    pings = [i for i in body["items"] if i["title"] == "Ping"]
    # Window in Los Angeles: 8 days of midnights UTC fall inside it.
    assert len(pings) == 8 and all(i["end"] is None for i in pings)
    assert all("start_date" not in i for i in pings)


async def test_more_than_500_occurrences_are_cut_and_reported(api: Any, user: Any) -> None:
    day = soon()
    await cal_event(api, user, title="Hourly", recurrence_rule="FREQ=HOURLY",
                    **timed(day, "00:00", "00:10"))
    body = await agenda(api, user, date=day, days=31)
    assert len(body["items"]) == 500
    assert (body["complete"], body["incomplete_reason"]) == (False, "max_items")
    assert body["items"][0]["start"] == f"{day}T00:00:00Z"
    assert body["items"][-1]["start"] == f"{utc(day, '00:00') + timedelta(hours=499):%Y-%m-%dT%H:%M:%SZ}"
    body = await agenda(api, user, date=day, days=7)
    assert len(body["items"]) == 7 * 24
    assert (body["complete"], body["incomplete_reason"]) == (True, None)


async def test_expansion_that_runs_out_of_work_is_reported(api: Any, user: Any) -> None:
    # COUNT makes the expansion count from 2000; the work allowance runs out first.
    await cal_event(api, user, title="Counted", recurrence_rule="FREQ=HOURLY;COUNT=2000000",
                    **timed(date(2000, 1, 1), "00:00", "00:30"))
    await cal_event(api, user, title="Plain", **timed(soon(), "09:00", "10:00"))
    body = await agenda(api, user, date=soon(), days=1)
    assert (body["complete"], body["incomplete_reason"]) == (False, "expansion_limit")
    assert "Plain" in titles(body)



async def test_an_item_whose_stored_rule_no_longer_expands_is_left_out_and_said(
        api: Any, user: Any, live_server: Any) -> None:
    # Rules are checked when written; a stored one that no longer expands (an
    # older release's, a hand-edited row) is left out, and the answer says so.
    broken = await cal_event(api, user, title="Broken", recurrence_rule="FREQ=DAILY",
                             **timed(soon(), "08:00", "08:30"))
    await cal_event(api, user, title="Plain", **timed(soon(), "09:00", "10:00"))
    live_server.call(live_server.db.execute(
        "UPDATE calendar_events SET recurrence_rule = 'FREQ=DAILY;RRULE:FREQ=WEEKLY'"
        " WHERE id = $1", broken["id"]))
    body = await agenda(api, user, date=soon(), days=1)
    assert titles(body) == ["Plain"]
    assert (body["complete"], body["incomplete_reason"]) == (False, "expansion_limit")


# ---------------------------------------------------------------------------
# Synced copies


async def test_synced_copies_show_their_source_and_cancelled_ones_are_left_out(
    live_server: Any, api: Any, user: Any, make_user: Any
) -> None:
    publisher = await make_user()
    public = await new_profile(api, publisher, display_name="Jazz Club")
    private = await new_profile(api, publisher, is_private=True)
    gone = await new_profile(api, publisher)
    live_server.call(live_server.db.execute(
        "UPDATE profiles SET deleted_at = now() WHERE id = $1", gone["id"]))
    owner_id = user_id_of(live_server, user.calendar_id)
    sub = insert_subscription(live_server, owner_id, public["id"])
    day = soon()
    copy = insert_copy(live_server, user.calendar_id, public["id"], utc(day, "19:00"),
                       utc(day, "21:00"), title="Concert", subscription_id=sub)
    insert_copy(live_server, user.calendar_id, public["id"], utc(day, "12:00"), None,
                title="Called off", status="cancelled", subscription_id=sub)
    insert_copy(live_server, user.calendar_id, private["id"], utc(day, "13:00"), None,
                title="Private source")
    insert_copy(live_server, user.calendar_id, gone["id"], utc(day, "14:00"), None,
                title="Deleted source")
    insert_copy(live_server, user.calendar_id, public["id"], utc(day - timedelta(days=7), "08:00"),
                None, title="Weekly copy", rule="FREQ=WEEKLY")
    body = await agenda(api, user, date=day, days=1)
    assert titles(body) == ["Weekly copy", "Private source", "Deleted source", "Concert"]
    by_title = {i["title"]: i for i in body["items"]}
    concert = by_title["Concert"]
    assert concert["event_id"] == copy
    assert concert["source"] == {"type": "subscription", "subscription_id": sub}
    assert concert["profile"] == {"id": public["id"], "platform_id": public["platform_id"],
                                  "display_name": "Jazz Club"}
    assert concert["editable"] is False
    assert by_title["Private source"]["profile"] is None
    assert by_title["Deleted source"]["profile"] is None
    assert by_title["Private source"]["source"] == {"type": "subscription",
                                                    "subscription_id": None}
    assert (by_title["Weekly copy"]["is_recurring"], by_title["Weekly copy"]["editable"]) == (
        True, False)


# ---------------------------------------------------------------------------
# Calendars and sources


async def test_calendar_ids_select_calendars_and_every_one_is_a_source(
    live_server: Any, api: Any, user: Any
) -> None:
    work = new_calendar(live_server, user, "Work")
    empty = new_calendar(live_server, user, "Empty")
    day = soon()
    await cal_event(api, user, title="Home thing", **timed(day, "09:00", "10:00"))
    await cal_event(api, user, work, title="Work thing", **timed(day, "11:00", "12:00"))

    body = await agenda(api, user, date=day, days=1)
    assert titles(body) == ["Home thing", "Work thing"]
    assert [s["calendar_id"] for s in body["sources"]] == [user.calendar_id, work, empty]
    assert [s["name"] for s in body["sources"]] == ["Personal", "Work", "Empty"]

    body = await agenda(api, user, date=day, days=1, calendar_ids=f"{empty},{work.upper()}")
    assert titles(body) == ["Work thing"]
    assert body["items"][0]["calendar_id"] == work
    assert [s["calendar_id"] for s in body["sources"]] == [empty, work]
    assert all(s["status"] == "ok" and s["provider"] == "kalends" for s in body["sources"])

    # Repeats count once.
    body = await agenda(api, user, date=day, days=1, calendar_ids=f"{work},{work}")
    assert [s["calendar_id"] for s in body["sources"]] == [work]


async def test_calendar_ids_are_checked(api: Any, user: Any, make_user: Any) -> None:
    other = await make_user()
    for bad in ("cal_123", f"{user.calendar_id},", f" {user.calendar_id}",
                "prf_" + "0" * 32, f"{user.calendar_id};{user.calendar_id}"):
        assert_error(*await agenda_error(api, user, calendar_ids=bad), 400, "invalid_id",
                     param="calendar_ids")
    assert_error(*await agenda_error(api, user, calendar_ids=""), 400,
                 "invalid_query_parameter", param="calendar_ids")
    many = ",".join(ids.new_id("cal") for _ in range(101))
    assert_error(*await agenda_error(api, user, calendar_ids=many), 400,
                 "invalid_query_parameter", param="calendar_ids")
    for missing in (other.calendar_id, ids.new_id("cal"), ids.new_id("xcal")):
        assert_error(*await agenda_error(api, user, calendar_ids=f"{user.calendar_id},{missing}"),
                     404, "resource_not_found", param="calendar_ids")


async def test_connected_calendars_are_sources_with_a_sync_warning(
    live_server: Any, api: Any, user: Any, make_user: Any
) -> None:
    owner_id = user_id_of(live_server, user.calendar_id)
    xcal = insert_external(live_server, owner_id)
    day = soon()
    await cal_event(api, user, title="Mine", **timed(day, "09:00", "10:00"))

    # New connected calendars are selected: searched by default, after the older
    # personal calendar; an unselected one only when asked for.
    assert [s["calendar_id"] for s in (await agenda(api, user))["sources"]] == \
        [user.calendar_id, xcal]
    live_server.call(live_server.db.execute(
        "UPDATE external_calendars SET selected = false WHERE id = $1", xcal))
    assert [s["calendar_id"] for s in (await agenda(api, user))["sources"]] == [user.calendar_id]

    body = await agenda(api, user, date=day, days=1, calendar_ids=f"{xcal},{user.calendar_id}")
    assert titles(body) == ["Mine"]
    assert body["sources"] == [
        {"calendar_id": xcal, "name": "Work (Google)", "provider": "google",
         "last_sync_at": None, "status": "warning"},
        {"calendar_id": user.calendar_id, "name": "Personal", "provider": "kalends",
         "last_sync_at": None, "status": "ok"},
    ]
    [warning] = body["warnings"]
    assert warning["calendar_id"] == xcal and warning["code"] == "sync_unknown"
    assert warning["message"]
    assert body["complete"] is True  # all stored data was returned; the warning says the rest

    only = await agenda(api, user, calendar_ids=xcal.upper())
    assert only["items"] == [] and [s["calendar_id"] for s in only["sources"]] == [xcal]

    other = await make_user()
    assert_error(*await agenda_error(api, other, calendar_ids=xcal), 404, "resource_not_found",
                 param="calendar_ids")


# ---------------------------------------------------------------------------
# Cost, auth, the other transports and the response schema


async def test_a_constant_number_of_sql_statements(
    live_server: Any, api: Any, user: Any, make_user: Any
) -> None:
    async def statements(who: Any, **params: Any) -> int:
        before = live_server.query_count
        await agenda(api, who, **params)
        return live_server.query_count - before  # type: ignore[no-any-return]

    day = soon()
    # Authentication, the calendars, then their events.
    assert await statements(user, date=day, days=1) == 3
    publisher = await make_user()
    profile = await new_profile(api, publisher)
    calendars = [user.calendar_id, *(new_calendar(live_server, user, f"C{i}") for i in range(4))]
    for i in range(40):
        cal = calendars[i % len(calendars)]
        rule = "FREQ=DAILY" if i % 4 == 0 else None
        await cal_event(api, user, cal, title=f"E{i}", recurrence_rule=rule,
                        **timed(day, f"{i % 24:02d}:00", f"{i % 24:02d}:30"))
        insert_copy(live_server, cal, profile["id"], utc(day, f"{i % 24:02d}:15"), None)
    body = await agenda(api, user, date=day, days=7)
    assert len(body["items"]) > 100
    assert await statements(user, date=day, days=7) == 3
    xcal = insert_external(live_server, user_id_of(live_server, user.calendar_id))
    # A connected calendar (selected, so searched by default) adds one read.
    assert await statements(user, date=day, days=7) == 4
    # Connected calendars' components are one more read, whatever their number.
    assert await statements(user, date=day, days=7, calendar_ids=",".join([*calendars, xcal])) == 4
    # Only connected calendars: no personal events to read.
    assert await statements(user, date=day, days=7, calendar_ids=xcal) == 3


async def test_needs_an_api_key(api: Any) -> None:
    assert_error(*await agenda_error(api, None), 401, "not_authenticated")


async def test_graphql_applies_the_same_rules(api: Any, user: Any) -> None:
    day = soon()
    await cal_event(api, user, title="Timed", **timed(day, "09:00", "10:00"))
    query = """query($date: String, $days: Int!, $ids: [ID!]) {
      agenda(date: $date, days: $days, calendar_ids: $ids) {
        window { date end_date } items { title start_date description } complete
      } }"""
    status, body, _ = await api.post("/graphql", user, json={
        "query": query, "variables": {"date": str(day), "days": 1, "ids": [user.calendar_id]}})
    assert status == 200 and "errors" not in body, body
    assert body["data"]["agenda"]["items"] == [
        {"title": "Timed", "start_date": None, "description": None}]
    for variables, code, param in (
        ({"days": 0}, "invalid_query_parameter", "days"),
        ({"days": 1, "ids": []}, "invalid_query_parameter", "calendar_ids"),
        ({"days": 1, "ids": ["cal_x"]}, "invalid_id", "calendar_ids"),
    ):
        status, body, _ = await api.post("/graphql", user,
                                         json={"query": query, "variables": variables})
        extensions = body["errors"][0]["extensions"]
        assert (extensions["code"], extensions["param"]) == (code, param), body


def test_mcp_arguments_bind_like_query_parameters() -> None:
    variables = registry.bind_flat(OPERATIONS["getAgenda"], {
        "calendar_ids": "CAL_" + "A" * 32, "detail": "full", "days": 3,
    })
    assert variables == {"date": None, "days": 3, "timezone": None,
                         "calendar_ids": ["CAL_" + "A" * 32], "full": True}
    assert registry.bind_flat(OPERATIONS["getAgenda"], {}) == {
        "date": None, "days": 7, "timezone": None, "calendar_ids": None, "full": False}


# ---------------------------------------------------------------------------
# The registry's omit_null: keys left out rather than null, and so documented


def test_omitted_keys_are_optional_and_never_null_in_the_response_schema(
    live_server: Any
) -> None:
    schema = OPERATIONS["getAgenda"].response_schema
    assert schema is not None
    item = schema["properties"]["items"]["items"]
    for key in ("start_date", "end_date"):
        assert key not in item["required"]
        assert item["properties"][key] == {"type": "string", "format": "date"}
    assert "description" not in item["required"]  # under @include: only with detail=full
    assert item["properties"]["description"]["type"] == ["string", "null"]
    assert item["properties"]["local_start"] == {"type": "string", "format": "date-time"}
    assert set(item["required"]) == ITEM_KEYS


def test_omit_null_drops_only_null_values_at_its_paths() -> None:
    body: dict[str, Any] = {"items": [{"a": None, "b": None}, {"a": 1, "b": None}],
                            "nested": None, "a": None}
    registry._drop_nulls(body, ["items", "a"])
    registry._drop_nulls(body, ["nested", "a"])
    assert body == {"items": [{"b": None}, {"a": 1, "b": None}], "nested": None, "a": None}


def test_an_omit_null_path_outside_the_result_stops_the_start(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    from graph.schema import schema

    op = Operation(
        name="brokenOmit", method="GET", path="/v1/broken", tag="Test", summary="x",
        document="query brokenOmit { organizations { has_more next_cursor } }",
        result="organizations", omit_null=("data.no_such_key",),
        mcp=Mcp(title="x", description="x"),
    )
    monkeypatch.setattr(registry, "OPERATIONS", {op.name: op})
    with pytest.raises(RuntimeError, match=r"brokenOmit: omit_null path data\.no_such_key"):
        registry.prepare(schema._schema)



# ---------------------------------------------------------------------------
# What the agenda's query reads


class _Explained:
    """Stands in for the Database: runs the statement under EXPLAIN ANALYZE, with
    sequential scans off so that the plan shows which index bounds it."""

    def __init__(self, db: Any) -> None:
        self.db = db
        self.plan: Any = None

    async def fetch(self, sql: str, *args: Any) -> list[Any]:
        import json

        async with self.db.pool.acquire() as conn, conn.transaction():
            await conn.execute("SET LOCAL enable_seqscan = off")
            [row] = await conn.fetch("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, *args)
        self.plan = json.loads(row[0])
        return []


def _rows_read(node: dict[str, Any], relation: str) -> int:
    read = 0
    if node.get("Relation Name") == relation:
        read += node["Actual Rows"] * node.get("Actual Loops", 1)
        read += node.get("Rows Removed by Filter", 0) + node.get("Rows Removed by Index Recheck", 0)
    for child in node.get("Plans", ()):
        read += _rows_read(child, relation)
    return read


def _seeded(live_server: Any, user: Any, now: datetime, *inserts: str) -> str:
    """The user's ID, once each of `inserts` (with $1 the user's calendar, $2 `now`) has run
    and calendar_events is analyzed."""

    async def seed() -> str:
        async with live_server.db.pool.acquire() as conn:
            user_id: str = await conn.fetchval(
                "SELECT user_id FROM calendars WHERE id = $1", user.calendar_id)
            for insert in inserts:
                await conn.execute(insert, user.calendar_id, now)
            await conn.execute("ANALYZE calendar_events")
            return user_id

    return live_server.call(seed())  # type: ignore[no-any-return]


def _agenda_rows_read(live_server: Any, user_id: str, user: Any, start: datetime, days: int,
                      limit: int) -> int:
    """The calendar_events rows the agenda's query reads for the user's calendar over
    `days` from `start`."""
    from db import agenda as store

    explained = _Explained(live_server.db)
    live_server.call(store.events(explained, user_id, [user.calendar_id], start,
                                  start + timedelta(days=days), start.date(),
                                  start.date() + timedelta(days=days), limit=limit))
    return _rows_read(explained.plan[0]["Plan"], "calendar_events")


def test_the_agenda_does_not_read_the_past(live_server: Any) -> None:
    user = live_server.create_user()
    now = datetime.now(UTC).replace(microsecond=0)
    # Two years of hour-long history, timed and all-day; then three current items.
    user_id = _seeded(
        live_server, user, now,
        """
        INSERT INTO calendar_events (id, calendar_id, title, start_time, end_time,
                                     start_timezone, is_all_day, start_date, end_date)
        SELECT 'cev_' || md5(random()::text || g), $1, 'Past',
               $2::timestamptz - g * interval '1 day',
               $2::timestamptz - g * interval '1 day' + interval '1 hour', 'UTC', g % 2 = 0,
               CASE WHEN g % 2 = 0 THEN ($2::timestamptz - g * interval '1 day')::date END,
               CASE WHEN g % 2 = 0
                    THEN ($2::timestamptz - g * interval '1 day')::date + 1 END
        FROM generate_series(2, 731) g
        """,
        """
        INSERT INTO calendar_events (id, calendar_id, title, start_time, end_time,
                                     start_timezone, is_all_day, start_date, end_date)
        VALUES ('cev_' || md5(random()::text), $1, 'Now', $2::timestamptz,
                $2::timestamptz + interval '1 hour',
                'UTC', false, NULL, NULL),
               ('cev_' || md5(random()::text), $1, 'Point',
                $2::timestamptz + interval '1 day', NULL, 'UTC', false, NULL, NULL),
               ('cev_' || md5(random()::text), $1, 'Day', $2::timestamptz,
                $2::timestamptz + interval '1 day', 'UTC', true,
                $2::timestamptz::date + 1, $2::timestamptz::date + 2)
        """)
    # The three current items, not the 730 past ones.
    start = now - timedelta(minutes=1)
    assert _agenda_rows_read(live_server, user_id, user, start, 7, limit=10_001) <= 3


def test_a_connected_calendar_is_read_by_the_window_not_by_its_history(
        live_server: Any) -> None:
    from db import connected as store

    user = live_server.create_user()
    db = live_server.db
    user_id = live_server.call(db.fetchval(
        "SELECT user_id FROM calendars WHERE id = $1", user.calendar_id))
    xcal = insert_connected_calendar(live_server, user_id, provider="ios")
    start = datetime.now(UTC).replace(microsecond=0)
    end = start + timedelta(days=31)
    hour, day = timedelta(hours=1), timedelta(days=1)
    # (uid, recurrence_key, span_start, span_end) of the components that meet the
    # window, or belong to an event that does: short, long, open-ended, an override
    # moved into the window with its master ended long ago.
    current = [
        ("now", "", start + hour, start + 2 * hour),
        ("running", "", start - 3 * day, start + hour),
        ("month", "", start - 20 * day, start + 10 * day),
        ("weekly", "", start - 400 * day, None),
        ("weekly", "w1", start + 3 * day, start + 4 * day + hour),
        ("moved", "", start - 900 * day, start - 800 * day),
        ("moved", "m1", start + 5 * day, start + 5 * day + hour),
    ]

    # Others: 6,000 hour-long events every 3 hours back from a week before the
    # window, 100 two-month stretches that ended before it, 1,000 events after it.
    others = [(start - 8 * day - k * 3 * hour, start - 8 * day - k * 3 * hour + hour)
              for k in range(6000)]
    others += [(start - (70 + k) * day, start - (10 + k) * day) for k in range(100)]
    others += [(end + k * 3 * hour, end + k * 3 * hour + hour) for k in range(1000)]

    async def seed() -> None:
        async with db.pool.acquire() as conn:
            await conn.execute(
                """
                INSERT INTO external_events (id, calendar_id, remote_key, recurrence_key, uid,
                                             title, times, span_start, span_end)
                SELECT 'xcev_' || md5(random()::text || uid || key), $1, uid, key, uid,
                       'Event', '{}', s, e
                FROM unnest($2::text[], $3::text[], $4::timestamptz[], $5::timestamptz[])
                     AS t(uid, key, s, e)
                """,
                xcal, [f"other-{k}" for k in range(len(others))] + [c[0] for c in current],
                [""] * len(others) + [c[1] for c in current],
                [o[0] for o in others] + [c[2] for c in current],
                [o[1] for o in others] + [c[3] for c in current])
            await conn.execute("ANALYZE external_events")

    live_server.call(seed())
    # What meets the window by the stored spans, and the rest of those events.
    expected = live_server.call(db.fetch(
        """
        SELECT id FROM external_events WHERE calendar_id = $1 AND uid IN (
            SELECT uid FROM external_events WHERE calendar_id = $1
              AND span_start < $3 AND (span_end IS NULL OR span_end > $2))
        """, xcal, start, end))
    assert len(expected) == len(current)
    found = live_server.call(store.agenda_events(db, [xcal], start, end))
    assert sorted(r["id"] for r in found) == sorted(r["id"] for r in expected)

    explained = _Explained(db)
    live_server.call(store.agenda_events(explained, [xcal], start, end))
    # Each current component found once by its span and once with its event's
    # components: not the 7,100 others.
    assert _rows_read(explained.plan[0]["Plan"], "external_events") <= 2 * len(current)


def test_a_connected_span_reaches_rdates_past_the_rules_until() -> None:
    from domain.connected import components
    from domain.connected.provider import Component

    c = Component(uid="r@x", start=datetime(2027, 1, 4, 9), zone="Europe/Paris",
                  end=datetime(2027, 1, 4, 10), end_zone="Europe/Paris",
                  rrule="FREQ=WEEKLY;UNTIL=20270201T080000Z",
                  rdates=(datetime(2027, 6, 1, 9),))
    first, last = components.span(c)
    assert first == datetime(2027, 1, 4, 8, tzinfo=UTC)
    # The RDATE's occurrence, 09:00 to 10:00 in Paris (UTC+2 in June).
    assert last is not None and last >= datetime(2027, 6, 1, 8, tzinfo=UTC)


@pytest.mark.parametrize(("start", "zone", "end", "rule", "count"), [
    # Across a DST change; into a DST gap; floating, late in the day; UTC in a
    # provider's form; all-day dates.
    (datetime(2027, 3, 1, 9), "Europe/Paris", datetime(2027, 3, 1, 10), "FREQ=WEEKLY;COUNT=6",
     6),
    (datetime(2027, 3, 20, 2, 30), "Europe/Paris", datetime(2027, 3, 20, 3, 30),
     "FREQ=DAILY;COUNT=10", 10),
    (datetime(2027, 1, 4, 23), None, datetime(2027, 1, 5, 1), "FREQ=WEEKLY;BYDAY=MO,FR;COUNT=9",
     9),
    (datetime(2027, 1, 4, 23, tzinfo=UTC), None, datetime(2027, 1, 5, 1, tzinfo=UTC),
     "RRULE:FREQ=MONTHLY;COUNT=4;", 4),
    (date(2027, 1, 30), None, date(2027, 2, 1), "FREQ=MONTHLY;BYMONTHDAY=30;COUNT=5", 5),
])
def test_a_connected_count_series_span_ends_with_its_last_occurrence(
        start: Any, zone: str | None, end: Any, rule: str, count: int) -> None:
    from domain import expansion
    from domain.connected import components
    from domain.connected.provider import Component

    c = Component(uid="c@x", start=start, zone=zone, end=end, end_zone=zone, rrule=rule)
    _, last = components.span(c)
    assert last is not None
    row = {"id": "xcev_1", "calendar_id": "xcal_1", "uid": "c@x", "recurrence_key": "",
           "title": "Series", "description": None, "location": None, "cancelled": False,
           "transparent": False, "times": components.times_json(c), "mirror_of": None}
    # Every occurrence, as agendas in the zones furthest from UTC and in Paris find it,
    # ends by the stored span's end, and the end is no later than needed.
    for name in ("Pacific/Kiritimati", "Pacific/Pago_Pago", "Europe/Paris"):
        tz = ZoneInfo(name)
        first, end_day = date(2026, 12, 1), date(2028, 6, 1)
        bounds = expansion.Bounds(times.local_midnight(first, tz),
                                  times.local_midnight(end_day, tz), first, end_day, tz)
        found, reason = expansion.connected([row], bounds, 10_000, set(),
                                            expansion.request_budget())
        assert reason is None and len(found) == count
        assert all((f.end or f.start) <= last for f in found)
        assert last - max(f.end or f.start for f in found) <= timedelta(days=2)


# ---------------------------------------------------------------------------
# Recurring rows are read by where their series ends (migration 0017)


def _stored_end(live_server: Any, event_id: str) -> datetime | str | None:
    infinite, end = live_server.call(live_server.db.fetchrow(
        "SELECT recurrence_end = 'infinity', CASE WHEN recurrence_end <> 'infinity'"
        " THEN recurrence_end END FROM calendar_events WHERE id = $1", event_id))
    return "infinity" if infinite else end  # type: ignore[no-any-return]


def test_the_agenda_reads_only_recurring_rows_that_reach_the_window(live_server: Any) -> None:
    from db import agenda as store
    from domain import agenda as domain

    user = live_server.create_user()
    now = datetime.now(UTC).replace(microsecond=0)
    db = live_server.db
    # 600 series over long ago, as subscription copies are written (no end stored): weekly,
    # timed and all-day, by UNTIL or COUNT; then three that reach the window: open-ended,
    # COUNT still running, UNTIL ahead.
    user_id = _seeded(
        live_server, user, now,
        """
        INSERT INTO calendar_events (id, calendar_id, title, start_time, end_time,
            start_timezone, end_timezone, is_all_day, start_date, end_date,
            recurrence_rule)
        SELECT 'cev_' || md5(random()::text || g), $1, 'Over',
               $2::timestamptz - interval '3 years' + g * interval '1 hour',
               $2::timestamptz - interval '3 years' + g * interval '1 hour'
                   + interval '1 hour', 'Europe/Paris', 'Europe/Paris', g % 3 = 0,
               CASE WHEN g % 3 = 0 THEN ($2::timestamptz - interval '3 years')::date END,
               CASE WHEN g % 3 = 0
                    THEN ($2::timestamptz - interval '3 years')::date + 2 END,
               CASE WHEN g % 2 = 0 THEN 'FREQ=WEEKLY;COUNT=' || (10 + g % 40)
                    ELSE 'FREQ=WEEKLY;UNTIL='
                         || to_char($2::timestamptz - interval '2 years', 'YYYYMMDD')
               END
        FROM generate_series(1, 600) g
        """,
        """
        INSERT INTO calendar_events (id, calendar_id, title, start_time, end_time,
            start_timezone, end_timezone, recurrence_rule)
        SELECT 'cev_' || md5(random()::text || rule), $1, 'Current',
               $2::timestamptz - interval '2 years',
               $2::timestamptz - interval '2 years' + interval '1 hour', 'UTC', 'UTC',
               rule
        FROM unnest(ARRAY['FREQ=DAILY', 'FREQ=DAILY;COUNT=1000',
                          'FREQ=WEEKLY;UNTIL=' || to_char($2::timestamptz
                              + interval '1 year', 'YYYYMMDD"T"HH24MISS"Z"')]) rule
        """)
    start = now - timedelta(minutes=1)

    def rows_read() -> int:
        return _agenda_rows_read(live_server, user_id, user, start, 31, limit=domain.READ_ROWS)

    # Ends not known yet: every series is read, as if none had ended.
    assert rows_read() >= 603
    # (Other tests' rows, in the same database, are settled too.)
    assert live_server.call(domain.settle_recurrence_ends(db, batch=100)) >= 603
    assert live_server.call(db.fetchval(
        "SELECT count(*) FROM calendar_events WHERE calendar_id = $1"
        " AND recurrence_end IS NULL", user.calendar_id)) == 0
    # The three current series, not the 600 over.
    assert rows_read() <= 3
    found = live_server.call(store.events(db, user_id, [user.calendar_id], start,
                                          start + timedelta(days=31), start.date(),
                                          start.date() + timedelta(days=31),
                                          limit=domain.READ_ROWS))
    assert sorted(r["recurrence_rule"][:17] for r in found) == \
        ["FREQ=DAILY", "FREQ=DAILY;COUNT=", "FREQ=WEEKLY;UNTIL"]


async def test_a_personal_series_stores_where_it_ends(api: Any, user: Any,
                                                     live_server: Any) -> None:
    day = soon(2, PARIS)
    paris = ZoneInfo(PARIS)
    counted = await cal_event(api, user, title="Three", recurrence_rule="FREQ=DAILY;COUNT=3",
                              **timed(day, "09:00", "10:30", zone=PARIS))
    last_end = datetime.combine(day + timedelta(days=2), datetime.min.time().replace(hour=10,
                                minute=30), paris)
    assert _stored_end(live_server, counted["id"]) == last_end
    until = await cal_event(api, user, title="Until", **timed(day, "09:00", zone=NY),
                            recurrence_rule=f"FREQ=WEEKLY;UNTIL={(day + timedelta(days=15)):%Y%m%d}")
    # A point event: its last start, two weeks on (UNTIL's date is a whole local day).
    assert _stored_end(live_server, until["id"]) == datetime.combine(
        day + timedelta(days=14), datetime.min.time().replace(hour=9), ZoneInfo(NY))
    days = await cal_event(api, user, title="Days", recurrence_rule="FREQ=WEEKLY;COUNT=2",
                           **all_day(day, day + timedelta(days=2), zone=TOKYO))
    # Floating dates: the UTC midnight of the last occurrence's end date.
    assert _stored_end(live_server, days["id"]) == datetime.combine(
        day + timedelta(days=9), datetime.min.time(), UTC)
    endless = await cal_event(api, user, title="Endless", recurrence_rule="FREQ=WEEKLY",
                              **timed(day, "09:00", "10:00", zone=PARIS))
    assert _stored_end(live_server, endless["id"]) == "infinity"
    once = await cal_event(api, user, title="Once", **timed(day, "09:00", "10:00"))
    assert _stored_end(live_server, once["id"]) is None

    # Changed times or rule: the end follows.
    path = f"/v1/calendars/{user.calendar_id}/events/{counted['id']}"
    status, body, _ = await api.patch(path, user, json={"recurrence_rule": "FREQ=DAILY"})
    assert status == 200, body
    assert _stored_end(live_server, counted["id"]) == "infinity"
    status, body, _ = await api.patch(path, user, json={"recurrence_rule": "FREQ=DAILY;COUNT=2",
                                                        "start_time": f"{day}T11:00",
                                                        "start_timezone": PARIS,
                                                        "end_time": f"{day}T12:30",
                                                        "end_timezone": PARIS})
    assert status == 200, body
    assert _stored_end(live_server, counted["id"]) == datetime.combine(
        day + timedelta(days=1), datetime.min.time().replace(hour=12, minute=30), paris)
    status, body, _ = await api.patch(path, user, json={"recurrence_rule": None})
    assert status == 200, body
    assert _stored_end(live_server, counted["id"]) is None
    status, body, _ = await api.patch(f"/v1/calendars/{user.calendar_id}/events/{until['id']}",
                                      user, json={"title": "Renamed"})
    assert status == 200, body
    assert _stored_end(live_server, until["id"]) == datetime.combine(
        day + timedelta(days=14), datetime.min.time().replace(hour=9), ZoneInfo(NY))

    # The agenda still shows what it did: the last day of a series, and nothing after.
    body = await agenda(api, user, date=day + timedelta(days=14), days=1, timezone=NY)
    assert sorted(titles(body)) == ["Endless", "Renamed"]
    body = await agenda(api, user, date=day + timedelta(days=15), days=7, timezone=NY)
    assert titles(body) == ["Endless"]


async def test_a_subscription_copy_stores_where_its_series_ends(
    api: Any, make_user: Any, live_server: Any
) -> None:
    import asyncio

    from conftest import new_event

    owner = await make_user()
    profile = await new_profile(api, owner)
    source = await new_event(api, owner, profile, title="Course", start_time="2031-05-06T10:00",
                             end_time="2031-05-06T11:00", start_timezone=PARIS,
                             end_timezone=PARIS,
                             recurrence_rule="FREQ=WEEKLY;COUNT=4")
    fan = await make_user()
    status, body, _ = await api.post("/v1/subscriptions", fan, json={
        "subscription_type": "profile", "profile_id": profile["id"]})
    assert status == 201, body

    async def stored() -> Any:
        return await asyncio.to_thread(live_server.call, live_server.db.fetchrow(
            "SELECT id, recurrence_rule, recurrence_end = 'infinity' AS never, recurrence_end"
            " FROM calendar_events WHERE source_event_id = $1", source["id"]))

    async def until(check: Any) -> Any:
        for _ in range(300):
            row = await stored()
            if row is not None and check(row):
                return row
            await asyncio.sleep(0.05)
        pytest.fail(f"the copy did not settle: {row}")

    # Written by the sync job's set-based statement, settled in the same transaction.
    row = await until(lambda r: r["recurrence_end"] is not None)
    assert row["recurrence_end"] == datetime(2031, 5, 27, 9, 0, tzinfo=UTC)
    status, body, _ = await api.patch(f"/v1/events/{source['id']}", owner,
                                      json={"recurrence_rule": "FREQ=WEEKLY"})
    assert status == 200, body
    row = await until(lambda r: r["recurrence_rule"] == "FREQ=WEEKLY" and r["never"])
    # A write that changes the rule but not the end leaves it unknown, never stale.
    await asyncio.to_thread(live_server.call, live_server.db.execute(
        "UPDATE calendar_events SET recurrence_rule = 'FREQ=WEEKLY;COUNT=2' WHERE id = $1",
        row["id"]))
    assert (await stored())["recurrence_end"] is None
