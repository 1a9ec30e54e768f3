"""The agenda's reads: the searched calendars, then every stored event that may
show in the window, each in one statement whatever the number of calendars or
events (the domain layer expands recurrence and decides the exact overlap)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, datetime

import asyncpg

from db import visibility
from db.database import Database

# Personal calendars, then connected ones with their account's sync state.
_CALENDARS = """
    SELECT id, name, 'kalends' AS provider, created_at, NULL::timestamptz AS last_success_at,
           NULL::text AS account_status, NULL::timestamptz AS last_attempt_at, user_id
    FROM calendars
    WHERE user_id = ANY($1::text[]) AND ($2::text[] IS NULL OR id = ANY($2::text[]))
    UNION ALL
    SELECT c.id, c.name, c.provider, c.created_at, c.last_success_at, a.status,
           a.last_attempt_at, c.user_id
    FROM external_calendars c JOIN external_accounts a ON a.id = c.account_id
    WHERE c.user_id = ANY($1::text[])
      AND CASE WHEN $3::text[] IS NULL THEN c.selected ELSE c.id = ANY($3::text[]) END
    ORDER BY created_at, id
    """


def _kinds(columns: str, first: int, ids: str | None = None) -> str:
    """`events`' rows with `columns`: calendar ids, start, end, first day and end day
    are parameters `first` to `first` + 4 (the ids, an expression `ids` instead
    when given; the others are then `first` to `first` + 3)."""
    if ids is None:
        ids, first = f"${first}::text[]", first + 1
    start, end, first_day, end_day = (f"${first + k}" for k in range(4))
    # A series is read when its own range meets the window, widened by the most an
    # occurrence moved near its slot can lie outside that range (7 days before, 8
    # after: the bounds of db/occurrences.py's `_FAR`), or when one of its source's
    # occurrences was moved far, into the window (migration 0030's indexes). Those far
    # moves are rare, and found once (an array); each of this reader's calendars is
    # then looked up with each such event, by the index of copies (calendar, source),
    # so no other calendar's copy is read.
    in_range = f"""coalesce(ce.recurrence_end, 'infinity'::timestamptz)
              >= {start}::timestamptz - interval '8 days'
          AND CASE WHEN ce.is_all_day THEN ce.start_date < {end_day}
                   ELSE ce.start_time < {end}::timestamptz + interval '7 days' END"""
    moved_into = f"""
        SELECT o.event_id FROM event_occurrences o
        WHERE o.start_time IS NOT NULL
          AND (o.original_start - o.start_time > interval '7 days'
               OR coalesce(o.end_time, o.start_time) - o.original_start > interval '8 days')
          AND tstzrange(o.start_time, coalesce(o.end_time, o.start_time), '[]')
              && tstzrange({start}, {end}, '[)')
        UNION
        SELECT o.event_id FROM event_occurrences o
        WHERE o.start_date IS NOT NULL
          AND daterange(o.start_date, o.end_date) && daterange({first_day}, {end_day})"""
    chosen = f"""
        SELECT ce.id, ce.calendar_id, {columns}
        FROM calendar_events ce WHERE ce.calendar_id = ANY({ids})
          AND ce.status <> 'cancelled'"""
    return f"""
        {chosen}
          AND ce.recurrence_rule IS NOT NULL AND {in_range}
        UNION ALL
        SELECT ce.id, ce.calendar_id, {columns}
        FROM unnest({ids}) AS reader(calendar_id)
        CROSS JOIN unnest(ARRAY({moved_into})) AS moved(event_id)
        JOIN calendar_events ce ON ce.calendar_id = reader.calendar_id
                               AND ce.source_event_id = moved.event_id
        WHERE ce.status <> 'cancelled'
          AND ce.recurrence_rule IS NOT NULL AND NOT ({in_range})
        UNION ALL
        {chosen}
          AND ce.recurrence_rule IS NULL AND NOT ce.is_all_day
          AND coalesce(ce.end_time, ce.start_time) >= {start} AND ce.start_time < {end}
          AND coalesce(ce.end_time > {start}, ce.start_time >= {start})
        UNION ALL
        {chosen}
          AND ce.recurrence_rule IS NULL AND ce.is_all_day
          AND ce.end_date > {first_day} AND ce.start_date < {end_day}
        """


# The columns of `events` after `id` and `calendar_id`: all, or those that place a row in time.
_BRIEF = """ce.start_time, ce.end_time, ce.start_timezone, ce.end_timezone, ce.is_all_day,
        ce.start_date, ce.end_date, ce.recurrence_rule, ce.transparency, ce.source_event_id"""
_FULL = f"""ce.title, ce.description, ce.location, {_BRIEF},
        ce.source_profile_id, ce.subscription_id"""


async def calendars(db: Database, user_id: str, calendar_ids: Sequence[str] | None,
                    external_ids: Sequence[str] | None) -> list[asyncpg.Record]:
    """In one statement: the user's personal calendars among `calendar_ids` (all
    when None) and connected calendars among `external_ids` (the selected ones
    when None), each connected one with its account's sync state."""
    return await db.fetch(_CALENDARS, [user_id],
                          None if calendar_ids is None else list(calendar_ids),
                          None if external_ids is None else list(external_ids))


async def default_calendars(db: Database, user_ids: Sequence[str]) -> list[asyncpg.Record]:
    """`calendars(db, user_id, None, None)` of every user of `user_ids` at once: each
    user's personal calendars and selected connected ones, oldest first per user,
    each row naming its `user_id`."""
    return await db.fetch(_CALENDARS, list(user_ids), None, None)


async def events(
    db: Database, viewer_id: str, calendar_ids: Sequence[str], start: datetime, end: datetime,
    first_day: date, end_day: date, *, limit: int,
) -> list[asyncpg.Record]:
    """Events of `calendar_ids` that are not cancelled and may meet the window: timed
    ones overlapping [start, end) (a point inside it), all-day ones whose dates meet
    [first_day, end_day), and recurring ones that begin before the window ends and
    whose `recurrence_end` is not before it starts; at most `limit` of them (which
    ones, when there are more, is not said: the caller reports the answer
    incomplete).

    A synced copy carries its source profile's handle and name, and whether the
    viewer may see that profile (db/visibility.py)."""
    # Three kinds, three index ranges, each by where its rows end, so the past is
    # not read: recurring events whose last occurrence ends at or after the window
    # starts (0017's calendar_events_recurring_end; an end not known yet counts as
    # never) and that begin before it ends, then one-off timed and all-day ones that
    # end after it starts and begin before it ends (0009's indexes).
    return await db.fetch(
        f"""
        WITH ev AS (SELECT * FROM ({_kinds(_FULL, 2)}) k LIMIT $7),
        src AS (
            SELECT DISTINCT source_profile_id AS profile_id
            FROM ev WHERE source_profile_id IS NOT NULL
        ),
        prof AS (
            SELECT p.id, p.platform_id::text AS platform_id, p.display_name,
                   {visibility.columns('$1')}
            FROM src {visibility.join_profile('src', '$1')}
        )
        SELECT ev.*, prof.platform_id AS profile_platform_id,
               prof.display_name AS profile_display_name,
               coalesce(prof.profile_visible, false) AS profile_visible
        FROM ev LEFT JOIN prof ON prof.id = ev.source_profile_id
        """,
        viewer_id, list(calendar_ids), start, end, first_day, end_day, limit,
    )


async def brief_events(
    db: Database, owners: Sequence[tuple[str, str]], start: datetime, end: datetime,
    first_day: date, end_day: date, *, limit: int,
) -> list[asyncpg.Record]:
    """`events` of the calendars `owners` names ((calendar id, its user's id) pairs),
    with only what places the rows in time (free/busy's need): `id`, `calendar_id`,
    the time columns, `recurrence_rule`, `transparency` and `source_event_id`, no
    text and no profile; at most `limit` rows per user, read user by user."""
    return await db.fetch(
        f"""
        WITH mine AS (
            SELECT o.user_id, array_agg(o.calendar_id) AS calendars
            FROM unnest($1::text[], $2::text[]) AS o(calendar_id, user_id)
            GROUP BY o.user_id
        )
        SELECT k.* FROM mine CROSS JOIN LATERAL (
            SELECT * FROM ({_kinds(_BRIEF, 3, 'mine.calendars')}) kinds LIMIT $7
        ) k
        """,
        [c for c, _ in owners], [u for _, u in owners], start, end, first_day, end_day, limit,
    )
