"""The dashboard graph (docs/graphql.md, "The dashboard graph"): connections under each object,
windows, occurrences, counts and the RSVP summary, checked against the REST reads that
list the same things, against an independent recurrence oracle, and for the
number of SQL statements a nested document costs."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from conftest import handle, new_event, new_profile, walk
from dateutil.rrule import rrulestr

Z = ZoneInfo


async def gql(api: Any, user: Any, query: str, **variables: Any) -> dict[str, Any]:
    status, body, _ = await api.post("/graphql", user, json={"query": query,
                                                             "variables": variables})
    assert status == 200, body
    return body  # type: ignore[no-any-return]


async def data(api: Any, user: Any, query: str, **variables: Any) -> dict[str, Any]:
    body = await gql(api, user, query, **variables)
    assert "errors" not in body, body["errors"]
    return body["data"]  # type: ignore[no-any-return]


def iso(instant: datetime) -> str:
    return instant.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


# ---------------------------------------------------------------------------
# An independent oracle: what meets a window, by plain dateutil and zoneinfo


def occurrences_oracle(event: dict[str, Any], start: datetime, end: datetime
                       ) -> list[tuple[datetime, datetime | None]]:
    """(start, end) of every occurrence of a REST event that meets [start, end):
    timed ones on the wall clock of `start_timezone`, all-day ones as midnights
    there."""
    tz = Z(event["start_timezone"])
    first = parse(event["start_time"])
    last = parse(event["end_time"]) if event["end_time"] else None
    length = last - first if last is not None else None
    rule = event["recurrence_rule"]
    if rule is None:
        starts = [first]
    else:
        # Aware, so that a UTC UNTIL compares as RFC 5545 says; dateutil keeps the
        # wall clock and zoneinfo gives each its offset.
        wall = first.astimezone(tz)
        horizon = end + timedelta(days=2)
        starts = []
        for o in rrulestr(rule.removeprefix("RRULE:"), dtstart=wall):
            if o > horizon:
                break
            if event["is_all_day"]:
                starts.append(datetime.combine(o.date(), time(), tz).astimezone(UTC))
            else:
                starts.append(o.astimezone(UTC))
    found = []
    for s in starts:
        e = s + length if length is not None else None
        if event["is_all_day"] and e is not None:  # a whole number of local days
            days = (parse(event["end_time"]).astimezone(tz).date()
                    - first.astimezone(tz).date())
            e = datetime.combine(s.astimezone(tz).date() + days, time(), tz).astimezone(UTC)
        meets = (start <= s < end) if e is None else (s < end and e > start)
        if meets:
            found.append((s, e))
    return found


# ---------------------------------------------------------------------------
# Fixtures: a profile with events of every shape


SHAPES: list[dict[str, Any]] = [
    {"title": "one-off", "start_time": "2027-03-23T10:00", "end_time": "2027-03-23T11:30",
     "start_timezone": "Europe/Paris", "end_timezone": "Europe/Paris"},
    {"title": "point", "start_time": "2027-03-24T09:00", "start_timezone": "America/New_York"},
    {"title": "overnight", "start_time": "2027-03-27T22:00", "end_time": "2027-03-28T04:00",
     "start_timezone": "Europe/Paris", "end_timezone": "Europe/Paris"},
    {"title": "all-day", "is_all_day": True, "start_date": "2027-03-25",
     "start_timezone": "Pacific/Auckland"},
    {"title": "three days", "is_all_day": True, "start_date": "2027-03-29",
     "end_date": "2027-04-01", "start_timezone": "America/Los_Angeles"},
    {"title": "weekly count", "start_time": "2027-03-15T18:00", "end_time": "2027-03-15T19:00",
     "start_timezone": "Europe/Paris", "end_timezone": "Europe/Paris",
     "recurrence_rule": "FREQ=WEEKLY;COUNT=4"},
    {"title": "daily until across DST", "start_time": "2027-03-26T01:30",
     "end_time": "2027-03-26T02:45", "start_timezone": "Europe/Paris",
     "end_timezone": "Europe/Paris", "recurrence_rule": "RRULE:FREQ=DAILY;UNTIL=20270331T000000Z"},
    {"title": "monthly all-day", "is_all_day": True, "start_date": "2027-01-31",
     "start_timezone": "Asia/Tokyo", "recurrence_rule": "FREQ=MONTHLY;BYMONTHDAY=-1"},
    {"title": "mondays", "start_time": "2027-03-01T08:00", "end_time": "2027-03-01T08:30",
     "start_timezone": "America/New_York", "end_timezone": "America/New_York",
     "recurrence_rule": "FREQ=WEEKLY;BYDAY=MO;INTERVAL=2"},
    {"title": "long ago", "start_time": "2026-12-01T10:00", "end_time": "2026-12-01T11:00",
     "start_timezone": "UTC", "end_timezone": "UTC"},
]

WINDOWS = [
    (datetime(2027, 3, 22, tzinfo=UTC), datetime(2027, 3, 29, tzinfo=UTC)),
    (datetime(2027, 3, 23, 9, 30, tzinfo=UTC), datetime(2027, 3, 23, 10, 0, tzinfo=UTC)),
    (datetime(2027, 3, 28, 1, tzinfo=UTC), datetime(2027, 3, 28, 2, tzinfo=UTC)),
    (datetime(2027, 3, 30, tzinfo=UTC), datetime(2027, 4, 2, tzinfo=UTC)),
    (datetime(2027, 3, 16, 12, tzinfo=UTC), datetime(2027, 3, 22, 5, tzinfo=UTC)),
    (datetime(2026, 11, 1, tzinfo=UTC), datetime(2027, 10, 1, tzinfo=UTC)),
    (datetime(2027, 6, 1, tzinfo=UTC), datetime(2027, 6, 2, tzinfo=UTC)),
]


async def shaped_profile(api: Any, user: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    profile = await new_profile(api, user)
    return profile, [await create(api, user, profile, shape) for shape in SHAPES]


async def create(api: Any, user: Any, profile: dict[str, Any], body: dict[str, Any]
                 ) -> dict[str, Any]:
    status, created, _ = await api.post(f"/v1/profiles/{profile['id']}/events", user, json=body)
    assert status == 201, created
    return created  # type: ignore[no-any-return]


PROFILE_EVENTS = """
query($id: ID!, $from: String, $to: String, $cursor: String, $limit: Int!) {
  profile(profile_id: $id) {
    events(from: $from, to: $to, cursor: $cursor, limit: $limit) {
      total_count total_count_is_capped has_more next_cursor data { id title }
    }
  }
}"""


async def window_walk(api: Any, user: Any, profile_id: str, start: datetime | None,
                      end: datetime | None, limit: int) -> tuple[list[str], int]:
    ids, cursor, total = [], None, None
    while True:
        page = (await data(api, user, PROFILE_EVENTS, id=profile_id, limit=limit, cursor=cursor,
                           **{"from": iso(start) if start else None,
                              "to": iso(end) if end else None}))["profile"]["events"]
        assert total is None or page["total_count"] == total
        total = page["total_count"]
        assert page["total_count_is_capped"] is False
        assert (page["next_cursor"] is None) == (not page["has_more"])
        ids += [e["id"] for e in page["data"]]
        if not page["has_more"]:
            assert total is not None
            return ids, total
        cursor = page["next_cursor"]


async def test_profile_events_in_a_window_are_the_rest_list_filtered_by_the_oracle(
        api: Any, user: Any) -> None:
    profile, _ = await shaped_profile(api, user)
    rest = await walk(api, f"/v1/profiles/{profile['id']}/events", user)
    assert len(rest) == len(SHAPES)
    everything, total = await window_walk(api, user, profile["id"], None, None, 3)
    assert everything == [e["id"] for e in rest] and total == len(SHAPES)
    for start, end in WINDOWS:
        expected = [e["id"] for e in rest if occurrences_oracle(e, start, end)]
        for limit in (1, 2, 20):
            got, total = await window_walk(api, user, profile["id"], start, end, limit)
            assert got == expected, (start, end, limit)
            assert total == len(expected)


# ---------------------------------------------------------------------------
# Occurrences: exactly what the agenda shows of the same event


AGENDA = """
query($date: String!, $days: Int!, $tz: String!) {
  agenda(date: $date, days: $days, timezone: $tz) {
    window { start end }
    items { occurrence_id start end local_start local_end start_date end_date is_all_day
            event { id } }
  }
}"""

OCCURRENCES = """
query($id: ID!, $from: String!, $to: String!, $tz: String) {
  event(event_id: $id) {
    occurrences(from: $from, to: $to, timezone: $tz) {
      occurrence_id start end local_start local_end start_date end_date is_all_day
    }
  }
}"""


async def copies_synced(api: Any, user: Any, expected: int) -> None:
    for _ in range(300):
        status, page, _ = await api.get(f"/v1/calendars/{user.calendar_id}/events", user,
                                        params={"limit": "100"})
        assert status == 200, page
        if len(page["data"]) >= expected:
            return
        await asyncio.sleep(0.1)
    raise AssertionError("the subscription's copies never arrived")


@pytest.mark.parametrize("zone", ["America/New_York", "Asia/Kolkata"])
async def test_event_occurrences_are_the_agendas_occurrences_of_its_copy(
        api: Any, user: Any, make_user: Any, zone: str) -> None:
    profile, made = await shaped_profile(api, user)
    fan = await make_user()
    status, body, _ = await api.post("/v1/subscriptions", fan, json={
        "subscription_type": "profile", "profile_id": profile["id"]})
    assert status == 201, body
    await copies_synced(api, fan, len(made))
    agenda = (await data(api, fan, AGENDA, date="2027-03-14", days=21, tz=zone))["agenda"]
    window = agenda["window"]
    by_source: dict[str, list[dict[str, Any]]] = {}
    for item in agenda["items"]:
        assert item["event"] is not None, item  # every copy's source is readable here
        source = item.pop("event")["id"]
        item["occurrence_id"] = item["occurrence_id"].split(":", 1)[1]
        by_source.setdefault(source, []).append(item)
    assert len(by_source) >= 7  # most shapes meet these three weeks
    for event in made:
        found = (await data(api, fan, OCCURRENCES, id=event["id"], tz=zone,
                            **{"from": window["start"], "to": window["end"]}))
        occurrences = found["event"]["occurrences"]
        for o in occurrences:
            prefix, o["occurrence_id"] = o["occurrence_id"].split(":", 1)
            assert prefix == event["id"]
        assert occurrences == by_source.get(event["id"], []), event["title"]


async def test_occurrence_windows_are_checked(api: Any, user: Any) -> None:
    profile = await new_profile(api, user)
    event = await new_event(api, user, profile)
    cases = [
        ({"from": "2031-05-01T00:00:00Z", "to": "2031-08-01T00:00:00Z"}, "invalid_time_range"),
        ({"from": "2031-05-02T00:00:00Z", "to": "2031-05-01T00:00:00Z"}, "invalid_time_range"),
        ({"from": "2031-05-01", "to": "2031-05-02T00:00:00Z"}, "invalid_field"),
    ]
    for window, code in cases:
        body = await gql(api, user, OCCURRENCES, id=event["id"], tz=None, **window)
        assert body["errors"][0]["extensions"]["code"] == code, body
    body = await gql(api, user, OCCURRENCES, id=event["id"], tz="Mars/Olympus",
                     **{"from": "2031-05-01T00:00:00Z", "to": "2031-05-08T00:00:00Z"})
    assert body["errors"][0]["extensions"]["code"] == "invalid_timezone", body


# ---------------------------------------------------------------------------
# RSVP summary: counts made from each event's REST stats


SUMMARY = """
query($id: ID!, $from: String!, $to: String!, $bucket: String!, $tz: String) {
  profile(profile_id: $id) {
    rsvp_summary(from: $from, to: $to, bucket: $bucket, timezone: $tz) {
      start events going maybe not_going waitlist
    }
  }
}"""


def bucket_start(day: date, bucket: str) -> date:
    if bucket == "week":
        return day - timedelta(days=day.weekday())
    if bucket == "month":
        return day.replace(day=1)
    return day


async def test_rsvp_summary_equals_counts_from_each_events_stats(
        api: Any, user: Any, make_user: Any) -> None:
    profile = await new_profile(api, user)
    zone = "Europe/Paris"
    bodies = [
        {"title": "a", "start_time": "2027-03-01T10:00", "start_timezone": zone},
        {"title": "b", "start_time": "2027-03-07T23:30", "start_timezone": zone},
        {"title": "c", "start_time": "2027-03-08T00:30", "start_timezone": zone},
        {"title": "d", "start_time": "2027-03-20T12:00", "end_time": "2027-03-20T13:00",
         "start_timezone": zone, "end_timezone": zone},
        {"title": "weekly", "start_time": "2027-02-22T19:00", "start_timezone": zone,
         "recurrence_rule": "FREQ=WEEKLY;COUNT=6"},
        {"title": "day", "is_all_day": True, "start_date": "2027-03-15", "start_timezone": zone},
        {"title": "later", "start_time": "2027-05-01T10:00", "start_timezone": zone},
    ]
    events = [await create(api, user, profile, b) for b in bodies]
    people = [await make_user() for _ in range(4)]
    statuses = ["going", "maybe", "not_going", "waitlist", "going"]
    for i, event in enumerate(events):
        for j, person in enumerate(people[: 1 + i % 4]):
            status, body, _ = await api.post(f"/v1/events/{event['id']}/rsvps", person,
                                              json={"status": statuses[(i + j) % 5]})
            assert status in (200, 201), body
    # The counts the summary reads follow every later write: an answer replaced by
    # posting again, one changed by PATCH, one withdrawn, an event deleted with its RSVPs.
    status, _, _ = await api.post(f"/v1/events/{events[3]['id']}/rsvps", people[0],
                                  json={"status": "not_going"})
    assert status in (200, 201)
    _, page, _ = await api.get(f"/v1/events/{events[2]['id']}/rsvps", user)
    first, second = page["data"][0], page["data"][1]
    status, body, _ = await api.patch(f"/v1/events/{events[2]['id']}/rsvps/{first['id']}",
                                      user, json={"status": "maybe"})
    assert status == 200, body
    status, body, _ = await api.delete(
        f"/v1/events/{events[2]['id']}/rsvps/{second['id']}", user)
    assert status == 204, body
    status, body, _ = await api.delete(f"/v1/events/{events[0]['id']}", user)
    assert status == 204, body
    start = datetime(2027, 3, 1, tzinfo=Z(zone))
    end = datetime(2027, 4, 1, tzinfo=Z(zone))
    for bucket in ("day", "week", "month"):
        expected: dict[date, Counter[str]] = {}
        for event in await walk(api, f"/v1/profiles/{profile['id']}/events", user):
            _, stats, _ = await api.get(f"/v1/events/{event['id']}/rsvps/stats", user)
            starts = [s for s, _ in occurrences_oracle(event, start, end) if s >= start]
            for n, s in enumerate(starts):
                # An all-day occurrence is its date (a midnight on its own clock).
                day = s.astimezone(Z(event["start_timezone"] if event["is_all_day"]
                                     else zone)).date()
                counts = expected.setdefault(bucket_start(day, bucket), Counter())
                counts["events"] += 1
                if n == 0:
                    for k in ("going", "maybe", "not_going", "waitlist"):
                        counts[k] += stats[k]
        got = (await data(api, user, SUMMARY, id=profile["id"], bucket=bucket, tz=zone,
                          **{"from": start.isoformat(), "to": end.isoformat()})
               )["profile"]["rsvp_summary"]
        first, last = bucket_start(date(2027, 3, 1), bucket), bucket_start(date(2027, 3, 31),
                                                                           bucket)
        assert got[0]["start"] == first.isoformat() and got[-1]["start"] == last.isoformat()
        for b in got:
            want = expected.get(date.fromisoformat(b["start"]), Counter())
            assert {k: b[k] for k in ("events", "going", "maybe", "not_going", "waitlist")} == {
                k: want[k] for k in ("events", "going", "maybe", "not_going", "waitlist")
            }, (bucket, b)
        assert sum(b["events"] for b in got) == 3 + 5 + 1  # weekly: 5 of 6 in March


# ---------------------------------------------------------------------------
# A nested document costs a fixed number of statements, whatever its size


DASHBOARD = """
query($from: String!, $to: String!) {
  organizations { data { id profiles(limit: 20) { total_count data { id
    events(from: $from, to: $to, limit: 20) { total_count data { id
      rsvp_stats { going maybe }
      occurrences(from: $from, to: $to) { start }
    } }
  } } } }
}"""


@pytest.mark.slow
async def test_a_dashboard_costs_the_same_statements_at_2_and_20_profiles(
        live_server: Any, api: Any, make_user: Any) -> None:
    owner = await make_user()
    fan = await make_user()
    now = datetime.now(UTC).replace(microsecond=0)
    window = {"from": iso(now), "to": iso(now + timedelta(days=7))}

    async def add_profiles(n: int) -> None:
        for _ in range(n):
            profile = await new_profile(api, owner)
            for day in (1, 3):
                when = (now + timedelta(days=day)).strftime("%Y-%m-%dT%H:%M")
                event = await create(api, owner, profile, {
                    "title": "t", "start_time": when, "start_timezone": "UTC"})
                await api.post(f"/v1/events/{event['id']}/rsvps", fan, json={"status": "going"})
            await create(api, owner, profile, {
                "title": "weekly", "start_time": (now - timedelta(days=20)).strftime(
                    "%Y-%m-%dT%H:%M"), "start_timezone": "UTC",
                "recurrence_rule": "FREQ=WEEKLY"})

    async def statements() -> tuple[int, dict[str, Any]]:
        before = live_server.query_count
        result = await data(api, owner, DASHBOARD, **window)
        return live_server.query_count - before, result

    await add_profiles(2)
    small, result = await statements()
    [org] = result["organizations"]["data"]
    assert org["profiles"]["total_count"] == 2
    assert all(p["events"]["total_count"] == 3 for p in org["profiles"]["data"])
    await add_profiles(18)
    large, result = await statements()
    [org] = result["organizations"]["data"]
    assert org["profiles"]["total_count"] == 20 and len(org["profiles"]["data"]) == 20
    for p in org["profiles"]["data"]:
        assert p["events"]["total_count"] == 3 and len(p["events"]["data"]) == 3
        assert sum(e["rsvp_stats"]["going"] for e in p["events"]["data"]) == 2
        assert sum(len(e["occurrences"]) for e in p["events"]["data"]) == 3
    # Authentication and rate limit, organizations, their profiles and their count,
    # the profiles' events, their count (one-off events by SQL, recurring ones
    # read for their expansion), the recurring events' changed occurrences
    # (docs/occurrences.md: one read shared by the window's page, count and
    # occurrences), and the events' RSVP stats.
    assert small == large == 9


# ---------------------------------------------------------------------------
# Costs multiply down a path


async def test_costs_multiply_down_nested_connections(api: Any, user: Any) -> None:
    deep = """{ organizations { data { profiles(limit: 100) { data {
        events(limit: 100) { data { rsvps(limit: 100) { data { id } } } } } } } } }"""
    body = await gql(api, user, deep)
    assert body["errors"][0]["extensions"]["code"] == "query_too_costly", body
    # A connection without `limit` counts its default, 20: 20 x 20 x 20.
    defaults = """{ organizations { data { profiles { data {
        events { data { rsvps { data { id } } } } } } } } }"""
    body = await gql(api, user, defaults)
    assert body["errors"][0]["extensions"]["code"] == "query_too_costly", body
    small = """{ organizations { data { profiles(limit: 5) { data {
        events(limit: 5) { data { rsvps(limit: 5) { data { id } } } } } } } } }"""
    assert "organizations" in await data(api, user, small)


# ---------------------------------------------------------------------------
# Visibility: each new field shows each viewer what the REST read shows them


async def rest_ids(api: Any, path: str, who: Any, key: str = "id") -> list[str] | None:
    """The ids a REST list shows `who` (every page), None where it answers 404."""
    status, body, _ = await api.get(path, who, params={"limit": "100"})
    if status == 404:
        return None
    assert status == 200, body
    return [item[key] for item in await walk(api, path, who)]


def page_ids(page: dict[str, Any] | None, key: str = "id") -> list[str] | None:
    return None if page is None else [item[key] for item in page["data"]]


GRAPH = """
query($profile: ID!, $event: ID!, $series: ID!, $from: String!, $to: String!) {
  organizations { data { profiles(limit: 20) { data { id } } } }
  profile(profile_id: $profile) {
    events(limit: 20) { total_count data { id } }
    series(limit: 20) { total_count data { id } }
    followers(limit: 20) { total_count data { follow_id } }
  }
  event(event_id: $event) {
    rsvps(limit: 20) { total_count data { id } }
    occurrences(from: $from, to: $to) { start }
  }
  series(series_id: $series) { events(limit: 20) { total_count data { id } } }
  calendars(limit: 5) { data { id events(limit: 20) { total_count data { id } } } }
}"""


async def test_every_new_field_shows_what_the_rest_read_shows(
        live_server: Any, api: Any, make_user: Any) -> None:
    from domain import accounts

    owner, member, admin, stranger = [await make_user() for _ in range(4)]
    org = live_server.admin(accounts.create_organization, "Hall", owner.email, None)
    org_id = org["organization_id"]
    live_server.admin(accounts.add_member, org_id, member.email, "member")
    live_server.admin(accounts.add_member, org_id, admin.email, "admin")
    window = {"from": "2031-05-01T00:00:00Z", "to": "2031-05-31T00:00:00Z"}
    for private in (False, True):
        profile = await new_profile(api, owner, organization_id=org_id, is_private=private)
        public = await new_event(api, owner, profile, title="open")
        await new_event(api, owner, profile, title="closed", is_private=True)
        status, series, _ = await api.post(f"/v1/profiles/{profile['id']}/series", owner,
                                           json={"name": "S", "slug": handle("s")})
        assert status == 201, series
        await api.post(f"/v1/profiles/{profile['id']}/series", owner,
                       json={"name": "P", "slug": handle("s"), "is_private": True})
        await api.post(f"/v1/series/{series['id']}/events", owner,
                       json={"event_id": public["id"]})
        for who, answer in ((owner, "going"), (member, "maybe"), (stranger, "going")):
            await api.post(f"/v1/events/{public['id']}/rsvps", who, json={"status": answer})
        if not private:
            await api.post("/v1/follows", stranger, json={
                "following_type": "profile", "target_id": profile["id"]})
        for who in (owner, admin, member, stranger):
            body = await gql(api, who, GRAPH, profile=profile["id"], event=public["id"],
                             series=series["id"], **window)
            got = body["data"]
            if got is None:  # the private profile's event, to a stranger: the REST 404s
                assert private and who is stranger
                assert await rest_ids(api, f"/v1/profiles/{profile['id']}/events", who) is None
                continue
            mine = [p["id"] for o in got["organizations"]["data"]
                    for p in o["profiles"]["data"]]
            assert sorted(mine) == sorted(await rest_ids(api, "/v1/profiles", who) or [])
            p = got["profile"]
            assert page_ids(p["events"]) == await rest_ids(
                api, f"/v1/profiles/{profile['id']}/events", who)
            assert p["events"]["total_count"] == len(p["events"]["data"])
            assert page_ids(p["series"]) == await rest_ids(
                api, f"/v1/profiles/{profile['id']}/series", who)
            assert page_ids(p["followers"], "follow_id") == await rest_ids(
                api, f"/v1/profiles/{profile['id']}/followers", who, "follow_id")
            if p["followers"] is None:
                assert any(e["path"] == ["profile", "followers"] and
                           e["extensions"]["code"] == "resource_not_found"
                           for e in body["errors"])
            assert page_ids(got["event"]["rsvps"]) == await rest_ids(
                api, f"/v1/events/{public['id']}/rsvps", who)
            assert len(got["event"]["occurrences"]) == 1
            assert page_ids(got["series"]["events"]) == await rest_ids(
                api, f"/v1/series/{series['id']}/events", who)
            for calendar in got["calendars"]["data"]:
                assert page_ids(calendar["events"]) == await rest_ids(
                    api, f"/v1/calendars/{calendar['id']}/events", who)
            summary = await gql(api, who, SUMMARY, id=profile["id"], bucket="week", tz=None,
                                **window)
            if who in (owner, admin):
                assert sum(b["events"] for b in summary["data"]["profile"]["rsvp_summary"]) == 2
            else:
                assert summary["data"] is None
                assert summary["errors"][0]["extensions"]["code"] == "forbidden"
