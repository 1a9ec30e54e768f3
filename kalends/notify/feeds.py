"""ICS feeds (docs/api-choices.md, "ICS feeds and attendee e-mail"): a public profile's public
events as RFC 5545.

Written by the one iCalendar writer (kalends/notify/ics.py): timed
events keep their own zones, with a VTIMEZONE for each zone used, so a
recurring event stays on its wall clock across DST in every calendar
application, as the agenda expands it. All-day events are dates. A cancelled
event stays in the feed as `STATUS:CANCELLED`, so subscribers' calendars remove
it; `SEQUENCE` is the event's revision (migration 0010), and `UID` is the one
attendee e-mail and pushed copies use too.

The ETag is derived from what the feed depends on (the profile's and its public
events' last changes and their number), so a `304` costs one small query and no
calendar is built; a feed built is kept by its ETag (64 MiB in all), so that
clients without a validator cost no more than one build per change.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import timedelta

import asyncpg
from icalendar import Event, vDuration

from db import events as store
from db.database import Database
from kalends import cpu, ids
from kalends.errors import ApiError
from kalends.notify import ics

REFRESH = timedelta(hours=1)
"""How often subscribers should fetch the feed again (REFRESH-INTERVAL, X-PUBLISHED-TTL)."""
_FORMAT = "2"
"""Raised when the feed's rendering changes, so that ETags change with it."""
_BUILT: dict[tuple[str, str], bytes] = {}
"""Feeds built, by profile and ETag (a new version is a new key), oldest first."""
_KEEP_BYTES = 64 * 1024 * 1024


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
        body = await cpu.run(calendar, profile, rows)
        if len(body) <= _KEEP_BYTES:
            while _BUILT and sum(map(len, _BUILT.values())) + len(body) > _KEEP_BYTES:
                del _BUILT[next(iter(_BUILT))]  # the oldest first
            _BUILT[key] = body
    return body


def calendar(profile: asyncpg.Record, rows: Sequence[asyncpg.Record]) -> bytes:
    return ics.document(
        (vevent(row) for row in rows),
        properties=[
            ("calscale", "GREGORIAN", None),
            ("method", "PUBLISH", None),
            ("name", profile["display_name"], None),  # RFC 7986
            ("x-wr-calname", profile["display_name"], None),
            ("refresh-interval", REFRESH, {"VALUE": "DURATION"}),
            ("x-published-ttl", vDuration(REFRESH), None),  # an X- property: typed by hand
        ])


def vevent(row: asyncpg.Record) -> Event:
    """The event's VEVENT, the same in the feed and in attendee e-mail."""
    return ics.vevent(ics.of_event(row), stamp=row["updated_at"], created=row["created_at"],
                      modified=row["updated_at"])
