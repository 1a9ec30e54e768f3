"""ICS feeds (contract §11): a public profile's public events as RFC 5545.

Built with `icalendar`. Timed events keep their own zones: DTSTART and DTEND
carry a TZID and the calendar a VTIMEZONE for each zone used, so a recurring
event stays on its wall clock across DST in every calendar application, as the
agenda expands it. All-day events are dates. A cancelled event stays in the
feed as `STATUS:CANCELLED`, so subscribers' calendars remove it; `SEQUENCE` is
the event's revision (migration 0010), and `UID` is the one attendee e-mail
uses too.

The ETag is derived from what the feed depends on (the profile's and its public
events' last changes and their number), so a `304` costs one small query and no
calendar is built; a feed built is kept by its ETag (64 MiB in all), so that
clients without a validator cost no more than one build per change.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from datetime import datetime, time, timedelta
from zoneinfo import ZoneInfo

import asyncpg
from icalendar import Calendar, Event, vDuration, vRecur

from db import events as store
from db.database import Database
from kalends import ids, recurrence, times
from kalends.errors import ApiError

REFRESH = timedelta(hours=1)
"""How often subscribers should fetch the feed again (REFRESH-INTERVAL, X-PUBLISHED-TTL)."""
_FORMAT = "1"
_BUILT: dict[tuple[str, str], bytes] = {}
"""Feeds built, by profile and ETag (a new version is a new key), oldest first."""
_KEEP_BYTES = 64 * 1024 * 1024
_FIRST_WITHIN = timedelta(days=366 * 30)
"""A rule's first occurrence is looked for this far from the stored start."""
"""Raised when the feed's rendering changes, so that ETags change with it."""


def uid(event_id: str) -> str:
    """An event's iCalendar UID, the same in the feed and in attendee e-mail."""
    return f"{event_id}@kalends"


async def version(db: Database, profile_id: str) -> tuple[asyncpg.Record, str]:
    """The public profile and its feed's ETag; `resource_not_found` for a profile
    that does not exist or is not public (the two are not told apart)."""
    key = ids.parse("prf", profile_id, param="profile_id")
    row = await store.feed_version(db, key)
    if row is None:
        raise ApiError("resource_not_found", f"No such public profile: {profile_id}.",
                       param="profile_id")
    basis = f"{_FORMAT}|{row['id']}|{row['updated_at'].isoformat()}|{row['events']}|" \
            f"{row['changed'].isoformat() if row['changed'] else ''}"
    return row, '"' + hashlib.sha256(basis.encode()).hexdigest()[:32] + '"'


async def render(db: Database, profile: asyncpg.Record, etag: str) -> bytes:
    """The feed for `etag`: built once per version, on a thread (2,000 events take
    icalendar over a second, which must not stall the event loop), then kept."""
    key = (profile["id"], etag)
    body = _BUILT.get(key)
    if body is None:
        rows = await store.feed(db, profile["id"])
        body = await asyncio.to_thread(calendar, profile, rows)
        if len(body) <= _KEEP_BYTES:
            while _BUILT and sum(map(len, _BUILT.values())) + len(body) > _KEEP_BYTES:
                del _BUILT[next(iter(_BUILT))]  # the oldest first
            _BUILT[key] = body
    return body


def calendar(profile: asyncpg.Record, rows: Sequence[asyncpg.Record]) -> bytes:
    cal = Calendar()
    cal.add("prodid", "-//Kalends//Kalends//EN")
    cal.add("version", "2.0")
    cal.add("calscale", "GREGORIAN")
    cal.add("method", "PUBLISH")
    cal.add("name", profile["display_name"])  # RFC 7986
    cal.add("x-wr-calname", profile["display_name"])
    cal.add("refresh-interval", REFRESH, parameters={"VALUE": "DURATION"})
    cal.add("x-published-ttl", vDuration(REFRESH))  # an X- property: typed by hand
    for row in rows:
        cal.add_component(vevent(row))
    cal.add_missing_timezones()
    body: bytes = cal.to_ical()
    return body


def _to_first_occurrence(row: asyncpg.Record) -> timedelta:
    """How far a recurring event's first occurrence is from its stored start.

    A start the rule does not produce (a Sunday start for BYDAY=MO,TH) is no
    occurrence in Kalends (dateutil), but RFC 5545 consumers count DTSTART as the
    first instance: published as stored, calendars would show one more event, and
    one fewer under COUNT, than the agenda does. The feed starts at the first
    occurrence instead, where both readings agree."""
    rule = row["recurrence_rule"]
    if not rule:
        return timedelta()
    t = times.of_row(row)
    zone = ZoneInfo(row["start_timezone"])
    if t.is_all_day:
        local = datetime.combine(row["start_date"], time())
        lower = local.replace(tzinfo=zone)
    else:
        local, lower = t.local_start, row["start_time"]
    first = recurrence.occurrences(rule, local, zone, lower, lower + _FIRST_WITHIN, limit=1)
    if not first.items:
        return timedelta()
    shift: timedelta
    if t.is_all_day:
        shift = first.items[0].original_local.date() - row["start_date"]
    else:
        shift = first.items[0].start - row["start_time"]
    return shift


def vevent(row: asyncpg.Record) -> Event:
    """The event's VEVENT, the same in the feed and in attendee e-mail."""
    event = Event()
    event.add("uid", uid(row["id"]))
    event.add("dtstamp", row["updated_at"])
    event.add("created", row["created_at"])
    event.add("last-modified", row["updated_at"])
    event.add("sequence", row["sequence"])
    event.add("summary", row["title"])
    for name in ("description", "location"):
        if row[name]:
            event.add(name, row[name])
    shift = _to_first_occurrence(row)
    if row["is_all_day"]:
        event.add("dtstart", row["start_date"] + shift)
        event.add("dtend", row["end_date"] + shift)
    else:
        start_zone = ZoneInfo(row["start_timezone"])
        event.add("dtstart", (row["start_time"] + shift).astimezone(start_zone))
        if row["end_time"] is not None:
            end_zone = ZoneInfo(row["end_timezone"] or row["start_timezone"])
            event.add("dtend", (row["end_time"] + shift).astimezone(end_zone))
    if row["recurrence_rule"]:
        event.add("rrule", vRecur.from_ical(row["recurrence_rule"]))
    event.add("status", "CANCELLED" if row["status"] == "cancelled" else "CONFIRMED")
    event.add("transp", "TRANSPARENT" if row["transparency"] == "transparent" else "OPAQUE")
    return event
