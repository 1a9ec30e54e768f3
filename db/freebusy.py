"""Free/busy's own reads: who among the addresses asked about the caller may see,
and the events people answered going or maybe to. Each is one statement whatever
the number of people; calendars and their events are read with db/agenda.py."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, datetime

import asyncpg

from db import visibility
from db.database import Database


async def visible_people(db: Database, viewer_id: str, emails: Sequence[str]
                         ) -> list[asyncpg.Record]:
    """For each address of `emails` that is a user's (compared as the users table
    compares them, case-insensitively) who shares an organization with the viewer:
    its position in `emails` (`ord`, from 1), the user's id and saved zone. Anyone
    else is simply absent."""
    return await db.fetch(
        """
        SELECT q.ord, u.id, u.timezone
        FROM unnest($2::text[]) WITH ORDINALITY AS q(email, ord)
        JOIN users u ON u.email = q.email::citext
        WHERE EXISTS (
            SELECT 1 FROM organization_members mine
            JOIN organization_members theirs ON theirs.organization_id = mine.organization_id
            WHERE mine.user_id = $1 AND theirs.user_id = u.id)
        ORDER BY q.ord
        """,
        viewer_id, list(emails),
    )


async def answered_events(
    db: Database, user_ids: Sequence[str], start: datetime, end: datetime, first_day: date,
    end_day: date, *, limit: int,
) -> list[asyncpg.Record]:
    """The events that `user_ids` answered (their own answer: no attendee address,
    or their own), that each of them may see, and that may meet the window, chosen
    as db/agenda.py's `events` chooses calendar events: those answered `going` or
    `maybe` when opaque and not cancelled, and those answered `not_going` (which
    free their subscription copies). Rows carry the event's time columns,
    `user_id` and the answer (`rsvp_status`); at most `limit` per user."""
    return await db.fetch(
        f"""
        SELECT a.* FROM unnest($1::text[]) AS who(user_id) CROSS JOIN LATERAL (
            SELECT r.user_id, r.status AS rsvp_status, e.id, e.start_time, e.end_time,
                   e.start_timezone, e.end_timezone, e.is_all_day, e.start_date, e.end_date,
                   e.recurrence_rule, e.transparency
            FROM rsvps r
            JOIN users u ON u.id = r.user_id
            JOIN events e ON e.id = r.event_id
            {visibility.join_profile('e', 'r.user_id')}
            WHERE r.user_id = who.user_id
              AND (r.attendee_email IS NULL OR r.attendee_email::citext = u.email)
              AND (r.status = 'not_going' OR r.status IN ('going', 'maybe')
                   AND e.status <> 'cancelled' AND e.transparency = 'opaque')
              AND {visibility.visible('e', 'r.user_id')}
              AND CASE
                    WHEN e.recurrence_rule IS NOT NULL
                      THEN CASE WHEN e.is_all_day THEN e.start_date < $5
                                ELSE e.start_time < $3 END
                    WHEN e.is_all_day THEN e.end_date > $4 AND e.start_date < $5
                    ELSE e.start_time < $3 AND coalesce(e.end_time > $2, e.start_time >= $2)
                  END
            LIMIT $6
        ) a
        """,
        list(user_ids), start, end, first_day, end_day, limit,
    )
