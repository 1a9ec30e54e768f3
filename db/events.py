"""Events. Every read carries what visibility and permission need (see
db/visibility.py), so neither costs a second query."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import asyncpg

from db import nested, rows, visibility
from db.database import Database, Tx

_COLUMNS = """
    e.id, e.profile_id, e.title, e.description, e.location, e.start_time, e.end_time,
    e.start_timezone, e.end_timezone, e.is_all_day, e.start_date, e.end_date,
    e.recurrence_rule, e.status, e.slug::text AS slug, e.image_url, e.is_private,
    e.require_rsvp, e.require_payment, e.cancellation_reason, e.cancelled_at,
    e.is_rescheduled, e.transparency, e.enable_capacity_limit, e.capacity_limit,
    e.allow_waitlist, e.allow_multiple_attendees, e.allow_notifications,
    e.created_at, e.updated_at
"""

# Columns the domain layer may write.
WRITABLE = (
    "title", "description", "location", "start_time", "end_time", "start_timezone",
    "end_timezone", "is_all_day", "start_date", "end_date", "recurrence_rule", "slug",
    "image_url", "is_private", "require_rsvp", "require_payment", "transparency", "status",
    "cancellation_reason", "cancelled_at", "is_rescheduled", "enable_capacity_limit",
    "capacity_limit", "allow_waitlist", "allow_multiple_attendees", "allow_notifications",
)


def _select(viewer: str) -> str:
    return visibility.select(_COLUMNS, "events", "e", viewer)


async def by_ids(db: Database | Tx, ids: Sequence[str], viewer_id: str) -> list[asyncpg.Record]:
    """The events among `ids` that the viewer may see."""
    return await db.fetch(
        f"{_select('$2')} WHERE e.id = ANY($1::text[]) AND {visibility.visible('e', '$2')}",
        list(ids), viewer_id,
    )


async def page(
    db: Database, viewer_id: str, after: tuple[datetime, str] | None, limit: int
) -> list[asyncpg.Record]:
    """Every visible event by (start_time, id): the discovery feed."""
    after_ts, after_id = after if after else (None, None)
    return await db.fetch(
        f"""
        {_select('$1')}
        WHERE {visibility.visible('e', '$1')}
          AND ($2::timestamptz IS NULL OR (e.start_time, e.id) > ($2, $3))
        ORDER BY e.start_time, e.id
        LIMIT $4
        """,
        viewer_id, after_ts, after_id, limit,
    )


Scope = Literal["profile", "series", "all"]
_SCOPES: dict[Scope, str] = {
    "profile": "e.profile_id = k.parent",
    "series": "e.id IN (SELECT event_id FROM series_events WHERE series_id = k.parent)",
    "all": "k.parent IS NOT NULL",  # one parent of any name: every visible event
}


@dataclass(frozen=True)
class Filter:
    """What a list of events keeps, beyond visibility (GraphQL's event lists)."""

    profile_ids: tuple[str, ...] | None = None
    status: str | None = None
    start: datetime | None = None
    """With `end`: events that may meet [start, end). A one-off event is kept exactly
    (its span meets it); a recurring one whenever it starts before `end`, since
    only its expansion can tell whether an occurrence meets the window."""
    end: datetime | None = None
    recurring: bool | None = None
    """Only recurring events (True) or only one-off events (False)."""

    def select(self, scope: Scope, viewer_id: str) -> tuple[nested.Listing, tuple[Any, ...]]:
        """The visible events of each parent of `scope` that this filter keeps, by
        (start_time, id): the listing and its parameters ($5 on)."""
        window = self.start is not None and self.end is not None
        listing = _listing(scope, self.profile_ids is not None, self.status is not None,
                           window, self.recurring)
        values: list[Any] = [viewer_id]
        if self.profile_ids is not None:
            values.append(list(self.profile_ids))
        if self.status is not None:
            values.append(self.status)
        if window:
            values += [self.start, self.end]
        return listing, tuple(values)


@functools.cache
def _listing(scope: Scope, profiles: bool, status: bool, window: bool, recurring: bool | None
             ) -> nested.Listing:
    """The statement of one shape of Filter: only the conditions it sets (an
    optional condition written `$n IS NULL OR ...` made generic plans of every
    list, the REST ones included, twice as slow)."""
    conditions = [visibility.visible("e", "$5"), _SCOPES[scope]]
    params = iter(range(6, 11))
    if profiles:
        conditions.append(f"e.profile_id = ANY(${next(params)}::text[])")
    if status:
        conditions.append(f"e.status = ${next(params)}")
    if window:
        start, end = next(params), next(params)
        conditions.append(f"""e.start_time < ${end} AND (e.recurrence_rule IS NOT NULL
            OR CASE WHEN e.end_time IS NULL THEN e.start_time >= ${start}
                    ELSE e.end_time > ${start} END)""")
    if recurring is not None:
        conditions.append(f"e.recurrence_rule IS {'NOT NULL' if recurring else 'NULL'}")
    return nested.Listing(f"{_select('$5')} WHERE {' AND '.join(conditions)}", "e.start_time")


OF_PROFILE = _listing("profile", False, False, False, None)
"""A profile's visible events by (start_time, id) ($5: the viewer)."""
OF_SERIES = _listing("series", False, False, False, None)
"""A series' visible events by (start_time, id) ($5: the viewer)."""


async def summary_one_off(db: Database, profile_id: str, start: datetime, end: datetime,
                          tz: str, bucket: str, status: str | None) -> list[asyncpg.Record]:
    """The profile's one-off events that start in [start, end) (of `status`, None:
    any), with their RSVP counts, grouped by the `bucket` (day, week or month) of
    their start on `tz`'s calendar; an all-day event starts at its date's midnight
    there (as the agenda floats it). One row per bucket that has an event."""
    # A custom plan each time: the rows a window holds vary by orders of magnitude,
    # and a generic plan chosen for a small one (a row-by-row join) took seconds
    # for a year of a busy profile.
    async with db.transaction() as tx:
        await tx.execute("SET LOCAL plan_cache_mode = force_custom_plan")
        return await tx.fetch(
            """
            WITH e AS (
                SELECT e.id, CASE WHEN e.is_all_day THEN e.start_date::timestamp AT TIME ZONE $4
                                  ELSE e.start_time END AS starts
                FROM events e
                WHERE e.profile_id = $1 AND e.recurrence_rule IS NULL
                  AND ($6::text IS NULL OR e.status = $6)
                  -- all-day midnights float with the zone: at most a day either way
                  AND e.start_time >= $2::timestamptz - interval '1 day'
                  AND e.start_time < $3::timestamptz + interval '1 day'
            ), kept AS MATERIALIZED (
                SELECT id, date_trunc($5, starts AT TIME ZONE $4)::date AS bucket
                FROM e WHERE starts >= $2 AND starts < $3
            )
            -- each event's counts are kept by the database (rsvp_counts, migration 0023)
            SELECT kept.bucket, count(*) AS events,
                   coalesce(sum(c.going), 0) AS going, coalesce(sum(c.maybe), 0) AS maybe,
                   coalesce(sum(c.not_going), 0) AS not_going,
                   coalesce(sum(c.waitlist), 0) AS waitlist,
                   coalesce(sum(c.total_attendees), 0) AS total_attendees
            FROM kept LEFT JOIN rsvp_counts c ON c.event_id = kept.id
            GROUP BY kept.bucket
            """,
            profile_id, start, end, tz, bucket, status,
        )


async def summary_recurring(db: Database, profile_id: str, end: datetime, status: str | None,
                            limit: int) -> list[asyncpg.Record]:
    """The profile's recurring events that start before `end` (the first `limit` by
    start), with what their expansion needs and their RSVP counts: of `status`
    (None: any), where a scheduled event with a cancelled occurrence of its own
    (docs/occurrences.md) has cancelled occurrences too."""
    return await db.fetch(
        """
        SELECT e.id, e.start_time, e.end_time, e.start_timezone, e.end_timezone, e.is_all_day,
               e.start_date, e.end_date, e.recurrence_rule, e.status,
               coalesce(c.going, 0) AS going, coalesce(c.maybe, 0) AS maybe,
               coalesce(c.not_going, 0) AS not_going, coalesce(c.waitlist, 0) AS waitlist,
               coalesce(c.total_attendees, 0) AS total_attendees
        FROM (
            SELECT * FROM events
            WHERE profile_id = $1 AND recurrence_rule IS NOT NULL AND start_time < $2
              AND ($4::text IS NULL OR status = $4 OR ($4 = 'cancelled' AND EXISTS (
                  SELECT FROM event_occurrences o
                  WHERE o.event_id = events.id AND o.status = 'cancelled')))
            ORDER BY start_time, id LIMIT $3
        ) e LEFT JOIN rsvp_counts c ON c.event_id = e.id
        ORDER BY e.start_time, e.id
        """,
        profile_id, end, limit, status,
    )


async def insert(tx: Database | Tx, event_id: str, profile_id: str, values: dict[str, Any]) -> None:
    """Raises asyncpg.UniqueViolationError when the slug is taken in the profile."""
    await rows.insert(tx, "events", WRITABLE, {"id": event_id, "profile_id": profile_id}, values)


async def lock_derived_slugs(tx: Tx, profile_id: str, base: str) -> None:
    """Until the transaction ends, no other create derives a slug from `base` in
    this profile: concurrent creates of one title and day then take -2, -3, ...
    in turn instead of racing for the same suffix. Other bases cannot produce
    the same slugs (each ends in its date), so they do not wait."""
    await tx.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended("
        "'kalends:event-slugs:' || $1 || ':' || lower($2), 0))",
        profile_id, base,
    )


async def slugs_with_prefix(db: Database | Tx, profile_id: str, prefix: str) -> set[str]:
    """The profile's slugs equal to `prefix` or starting with `prefix-`, lowered.
    Slugs hold only letters, digits, `_` and `-`, and `.` follows `-` in byte
    order, so [prefix, prefix || '.') is an index range (events_profile_slug_prefix)
    holding exactly these and nothing else a slug can spell."""
    rows = await db.fetch(
        """
        SELECT lower(slug::text) AS slug FROM events
        WHERE profile_id = $1
          AND lower(slug::text) ~>=~ lower($2)
          AND lower(slug::text) ~<~ (lower($2) || '.')
          AND (lower(slug::text) = lower($2) OR starts_with(lower(slug::text), lower($2) || '-'))
        """,
        profile_id, prefix,
    )
    return {r["slug"] for r in rows}


async def update(db: Database | Tx, event_id: str, values: dict[str, Any]) -> None:
    """Raises asyncpg.UniqueViolationError when a new slug is taken in the profile."""
    await rows.update(db, "events", WRITABLE, event_id, values)


async def delete(db: Database | Tx, event_id: str) -> None:
    """Permanent; RSVPs and series links go with it (ON DELETE CASCADE)."""
    await db.execute("DELETE FROM events WHERE id = $1", event_id)


async def lock(tx: Tx, event_id: str) -> asyncpg.Record | None:
    """The event row as it stands, locked until `tx` ends; None once deleted.

    Every change to an existing event (PATCH, cancel, reschedule, delete, its
    RSVP settings) and every RSVP write takes it first and decides on what it
    reads here, not on a row read before the transaction: changes to one event
    run one after another, each seeing the one before it (docs/api-choices.md, "Events, RSVPs
    and series"), and RSVP capacity is checked against a count no one else is changing. A lock
    that waited for a delete finds no row."""
    return await tx.fetchrow(f"SELECT {_COLUMNS} FROM events e WHERE e.id = $1 FOR UPDATE",
                             event_id)


# ---------------------------------------------------------------------------
# ICS feeds: a public profile's public events, read by anyone


async def feed_version(db: Database, profile_id: str) -> asyncpg.Record | None:
    """For a public, live profile: what its feed depends on (the profile's last
    change, and its public events' number and last change); None otherwise."""
    return await db.fetchrow(
        """
        SELECT p.id, p.display_name, p.updated_at, count(e.id) AS events,
               max(e.updated_at) AS changed
        FROM profiles p LEFT JOIN events e ON e.profile_id = p.id AND NOT e.is_private
        WHERE p.id = $1 AND NOT p.is_private AND p.deleted_at IS NULL
        GROUP BY p.id
        """,
        profile_id,
    )


_ICAL = """
    e.id, e.title, e.description, e.location, e.start_time, e.end_time, e.start_timezone,
    e.end_timezone, e.is_all_day, e.start_date, e.end_date, e.recurrence_rule, e.status,
    e.transparency, e.sequence, e.created_at, e.updated_at, e.cancellation_reason,
    e.allow_notifications
"""
"""What an iCalendar VEVENT shows of an event (domain/notify/feeds.py)."""


async def feed(db: Database, profile_id: str) -> list[asyncpg.Record]:
    """The profile's public events, by start."""
    return await db.fetch(
        f"""
        SELECT {_ICAL} FROM events e WHERE e.profile_id = $1 AND NOT e.is_private
        ORDER BY e.start_time, e.id
        """,
        profile_id,
    )


async def for_mail(db: Database, event_id: str) -> asyncpg.Record | None:
    """An event as attendee e-mail shows it, with its profile's name."""
    return await db.fetchrow(
        f"""
        SELECT {_ICAL}, p.display_name AS profile_name
        FROM events e JOIN profiles p ON p.id = e.profile_id WHERE e.id = $1
        """,
        event_id,
    )


async def lock_mail(tx: Tx, event_id: str) -> None:
    """Until `tx` ends, no other attendee-mail job of this event runs: each then
    sees what the one before it recorded as sent."""
    await tx.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended('kalends:attendee-mail:' || $1, 0))",
        event_id)


async def mail_sent(db: Database, event_id: str, sequence: int, method: str
                    ) -> set[str]:
    rows = await db.fetch(
        "SELECT address FROM attendee_mail_sent WHERE event_id = $1 AND sequence = $2"
        " AND method = $3",
        event_id, sequence, method,
    )
    return {r["address"] for r in rows}


async def record_mail(db: Database, event_id: str, sequence: int, method: str,
                      address: str) -> None:
    await db.execute(
        "INSERT INTO attendee_mail_sent (event_id, sequence, method, address)"
        " VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
        event_id, sequence, method, address,
    )
