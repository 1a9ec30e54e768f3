"""Subscription-synced copies: the set-based reconciliation behind the sync jobs.

For a set of source events, the copies that should exist are computed from
the current state (which subscriptions cover each event, whether the
subscriber may see it) and the stored copies are brought in line: inserted,
updated where something differs, deleted where nothing covers them any more.
The same statement serves one subscriber or all of them, so a change to a
profile with a thousand subscribers is one INSERT and one DELETE.
"""

from __future__ import annotations

from collections.abc import Sequence

from db import visibility
from db.database import Tx

# Which calendar, event and subscription each wanted copy has. A copy is
# wanted when a live subscription of the calendar's owner covers the event
# (its profile, or a series the event is in and the subscriber may see), the
# subscriber may see the event, and the subscription is active or the copy
# already exists (a paused subscription keeps, and updates, what it has).
# One copy per calendar and event: the active, then oldest, subscription
# carries it. $1: event ids; $2: one subscriber's user id, or NULL for all.
_WANTED = f"""
covering AS (
    SELECT DISTINCT ON (c.id, e.id)
           c.id AS calendar_id, e.id AS event_id, s.id AS subscription_id, s.is_active
    FROM events e
    JOIN subscriptions s
      ON s.cleanup_requested_at IS NULL AND s.include_personal_calendar
     AND ($2::text IS NULL OR s.user_id = $2)
     AND (s.profile_id = e.profile_id
          OR s.series_id IN (SELECT se.series_id FROM series_events se WHERE se.event_id = e.id))
    JOIN calendars c ON c.user_id = s.user_id AND c.is_default
    {visibility.join_profile('e', 's.user_id')}
    WHERE e.id = ANY($1::text[])
      AND {visibility.visible('e', 's.user_id')}
      AND (s.series_id IS NULL OR EXISTS (
            SELECT 1 FROM series sr
            WHERE sr.id = s.series_id AND {visibility.visible('sr', 's.user_id')}))
    ORDER BY c.id, e.id, s.is_active DESC, s.created_at, s.id
),
wanted AS (
    SELECT cv.calendar_id, cv.event_id, cv.subscription_id FROM covering cv
    WHERE cv.is_active OR EXISTS (
        SELECT 1 FROM calendar_events ce
        WHERE ce.calendar_id = cv.calendar_id AND ce.source_event_id = cv.event_id)
)
"""

_COPIED = (
    "title", "description", "location", "start_time", "end_time", "start_timezone",
    "end_timezone", "is_all_day", "start_date", "end_date", "recurrence_rule", "status",
    "transparency",
)

_UPSERT = f"""
WITH {_WANTED}
INSERT INTO calendar_events AS ce (
    id, calendar_id, source_event_id, source_profile_id, subscription_id, {", ".join(_COPIED)}
)
SELECT 'cev_' || replace(gen_random_uuid()::text, '-', ''), w.calendar_id, e.id, e.profile_id,
       w.subscription_id,
       e.title, e.description, e.location, e.start_time, e.end_time, e.start_timezone,
       e.end_timezone, e.is_all_day, e.start_date, e.end_date, e.recurrence_rule,
       CASE WHEN e.status = 'cancelled' THEN 'cancelled' ELSE 'confirmed' END, e.transparency
FROM wanted w JOIN events e ON e.id = w.event_id
ON CONFLICT (calendar_id, source_event_id) WHERE source_event_id IS NOT NULL DO UPDATE
SET subscription_id = EXCLUDED.subscription_id,
    {", ".join(f"{c} = EXCLUDED.{c}" for c in _COPIED)},
    updated_at = now()
WHERE (ce.subscription_id, {", ".join(f"ce.{c}" for c in _COPIED)})
      IS DISTINCT FROM (EXCLUDED.subscription_id, {", ".join(f"EXCLUDED.{c}" for c in _COPIED)})
"""

_DELETE = f"""
WITH {_WANTED}
DELETE FROM calendar_events ce
WHERE ce.source_event_id = ANY($1::text[])
  AND ($2::text IS NULL OR ce.calendar_id IN (SELECT id FROM calendars WHERE user_id = $2))
  AND NOT EXISTS (SELECT 1 FROM wanted w
                  WHERE w.calendar_id = ce.calendar_id AND w.event_id = ce.source_event_id)
"""


async def reconcile(tx: Tx, event_ids: Sequence[str], user_id: str | None) -> tuple[int, int]:
    """Bring the copies of `event_ids` in line; (written, removed) row counts."""
    ids = list(event_ids)
    removed = await tx.execute(_DELETE, ids, user_id)
    written = await tx.execute(_UPSERT, ids, user_id)
    return _count(written), _count(removed)


def _count(status: str) -> int:
    return int(status.rsplit(" ", 1)[-1])


async def try_lock_profiles(tx: Tx, event_ids: Sequence[str]) -> set[str]:
    """Take, until the transaction ends, the sync lock of each profile whose
    reconciliation the events touch (theirs, and their copies' sources) that no
    other transaction holds, without waiting: it serializes the reconciliations of
    one profile's events, so an older view never overwrites a newer one. Returns
    the events not covered: some profile of theirs is locked elsewhere (empty when
    every lock was taken)."""
    ids = list(event_ids)
    touched = await tx.fetch(
        """
        SELECT id, profile_id FROM events WHERE id = ANY($1::text[])
        UNION
        SELECT source_event_id, source_profile_id FROM calendar_events
        WHERE source_event_id = ANY($1::text[])
        """,
        ids,
    )
    if not touched:
        return set()
    # Every row's lock is tried (a filter over a plain scan); trying never waits,
    # so the order does not matter and no two jobs wait on each other.
    busy = {r[0] for r in await tx.fetch(
        "SELECT p FROM unnest($1::text[]) AS p"
        " WHERE NOT pg_try_advisory_xact_lock(hashtextextended('kalends:sync:' || p, 0))",
        sorted({r[1] for r in touched}),
    )}
    return {r[0] for r in touched if r[1] in busy}


async def lock_profile(tx: Tx, profile_id: str) -> None:
    """Wait for the profile's sync lock and hold it until the transaction ends
    (sync jobs of the profile then wait, holding no connection)."""
    await tx.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended('kalends:sync:' || $1, 0))", profile_id
    )


async def events_of_profile(tx: Tx, profile_id: str) -> list[str]:
    rows = await tx.fetch(
        """
        SELECT id FROM events WHERE profile_id = $1
        UNION SELECT source_event_id FROM calendar_events WHERE source_profile_id = $1
        """,
        profile_id,
    )
    return [r[0] for r in rows]


async def events_of_series(tx: Tx, series_id: str) -> list[str]:
    """Its members, and what its subscriptions copied (the series may be gone)."""
    rows = await tx.fetch(
        """
        SELECT event_id FROM series_events WHERE series_id = $1
        UNION
        SELECT ce.source_event_id FROM calendar_events ce
        JOIN subscriptions s ON s.id = ce.subscription_id
        WHERE s.series_id = $1
        """,
        series_id,
    )
    return [r[0] for r in rows]


async def events_of_subscription(tx: Tx, subscription_id: str) -> tuple[list[str], str | None]:
    """Its source's events and what it copied, with its subscriber; ([], None)
    when the subscription is gone."""
    rows = await tx.fetch(
        """
        WITH s AS (SELECT * FROM subscriptions WHERE id = $1)
        SELECT e.id, s.user_id FROM s JOIN events e ON e.profile_id = s.profile_id
        UNION
        SELECT se.event_id, s.user_id FROM s JOIN series_events se ON se.series_id = s.series_id
        UNION
        SELECT ce.source_event_id, s.user_id FROM s
        JOIN calendar_events ce ON ce.subscription_id = s.id
        UNION
        SELECT NULL, s.user_id FROM s
        """,
        subscription_id,
    )
    if not rows:
        return [], None
    return [r[0] for r in rows if r[0] is not None], rows[0][1]
