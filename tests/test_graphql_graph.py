"""The dashboard graph (contract §15): connections under each object, windows,
occurrences, counts and the RSVP summary, checked against the REST reads that
list the same things, against an independent recurrence oracle, and for the
number of SQL statements a nested document costs."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from conftest import new_profile, walk
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
