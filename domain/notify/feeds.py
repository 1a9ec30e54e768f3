"""ICS feeds (docs/api-choices.md, "ICS feeds and attendee e-mail"): a public profile's public
events as RFC 5545.

Written by the one iCalendar writer (domain/notify/ics.py): timed
events keep their own zones, with a VTIMEZONE for each zone used, so a
recurring event stays on its wall clock across DST in every calendar
application, as the agenda expands it. All-day events are dates. A cancelled
event stays in the feed as `STATUS:CANCELLED`, so subscribers' calendars remove
it; `SEQUENCE` is the event's revision (migration 0010), and `UID` is the one
attendee e-mail and pushed copies use too. An occurrence changed or cancelled on its
own is an override (`RECURRENCE-ID`) or an `EXDATE` of its event (`ics.of_series`),
the rows of every event of the feed read in one statement.

The ETag is derived from what the feed depends on (the profile's and its public
events' last changes and their number, and their occurrence rows' number and last
change), so a `304` costs two small queries and no calendar is built; a feed built
is kept by its ETag (64 MiB in all), so that clients without a validator cost no
more than one build per change.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import asyncpg
from icalendar import Event, vDuration

from core.errors import ApiError
from db import events as store
from db import ical as ical_store
from db import occurrences as occurrence_store
from db.database import Database
from domain import cpu, ids
from domain.connected.provider import Component
from domain.notify import ics

REFRESH = timedelta(hours=1)
"""How often subscribers should fetch the feed again (REFRESH-INTERVAL, X-PUBLISHED-TTL)."""
_FORMAT = "3"
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
    overrides, overrides_changed = await ical_store.feed_occurrences_version(db, key)
    basis = f"{_FORMAT}|{row['id']}|{row['updated_at'].isoformat()}|{row['events']}|" \
            f"{_text(row['changed'])}|{overrides}|{_text(overrides_changed)}"
    return row, '"' + hashlib.sha256(basis.encode()).hexdigest()[:32] + '"'


async def render(db: Database, profile: asyncpg.Record, etag: str) -> bytes:
    """The feed for `etag`: built once per version, on a thread (2,000 events take
    icalendar over a second, which must not stall the event loop), then kept."""
    key = (profile["id"], etag)
    body = _BUILT.get(key)
    if body is None:
        rows = await store.feed(db, profile["id"])
        occurrences = await occurrence_store.for_events(db, [r["id"] for r in rows])
        body = await cpu.run(calendar, profile, rows, occurrences)
        if len(body) <= _KEEP_BYTES:
            while _BUILT and sum(map(len, _BUILT.values())) + len(body) > _KEEP_BYTES:
                del _BUILT[next(iter(_BUILT))]  # the oldest first
            _BUILT[key] = body
    return body


def _text(moment: datetime | None) -> str:
    return moment.isoformat() if moment is not None else ""


def calendar(profile: asyncpg.Record, rows: Sequence[asyncpg.Record],
             occurrences: Mapping[str, Sequence[asyncpg.Record]] | None = None) -> bytes:
    """The feed of `rows`, each with its occurrence rows (`db.occurrences.for_events`)."""
    found = occurrences or {}
    return ics.document(
        (v for row in rows for v in vevents(row, found.get(row["id"], ()))),
        properties=[
            ("calscale", "GREGORIAN", None),
            ("method", "PUBLISH", None),
            ("name", profile["display_name"], None),  # RFC 7986
            ("x-wr-calname", profile["display_name"], None),
            ("refresh-interval", REFRESH, {"VALUE": "DURATION"}),
            ("x-published-ttl", vDuration(REFRESH), None),  # an X- property: typed by hand
        ])


def vevents(row: Mapping[str, Any], occurrences: Sequence[Mapping[str, Any]] = ()
            ) -> list[Event]:
    """The event's VEVENTs, its master and its overrides (`ics.of_series`)."""
    master, *overrides = ics.of_series(row, occurrences)
    by_slot = {ics.original_start(row, o): o for o in occurrences}
    out = [vevent(row, master)]
    for c in overrides:
        assert c.recurrence_id is not None
        out.append(vevent(by_slot[c.recurrence_id], c))
    return out


def vevent(row: Mapping[str, Any], component: Component | None = None) -> Event:
    """The event's VEVENT (or `component`, one of its occurrences, with `row` its
    `events` or `event_occurrences` row), the same in the feed and in attendee e-mail:
    stamped with the row's last change."""
    return ics.vevent(ics.of_event(row) if component is None else component,
                      stamp=row["updated_at"], created=row["created_at"],
                      modified=row["updated_at"])
