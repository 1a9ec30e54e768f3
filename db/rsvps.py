"""RSVPs and their per-event counts."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import asyncpg

from db import nested
from db.database import Database, Tx

_COLUMNS = """
    r.id, r.event_id, r.user_id, r.attendee_email, r.attendee_first_name,
    r.attendee_last_name, r.status, r.rsvp_type, r.num_guests, r.created_at, r.updated_at
"""

WRITABLE = (
    "attendee_email", "attendee_first_name", "attendee_last_name", "status", "rsvp_type",
    "num_guests",
)


def of_event(only_user: str | None, status: str | None
             ) -> tuple[nested.Listing, tuple[Any, ...]]:
    """An event's RSVPs by (created_at, id), only one attendee's or of one status
    when set: the listing and its parameters ($5 on)."""
    values = tuple(v for v in (only_user, status) if v is not None)
    return _of_event(only_user is not None, status is not None), values


@functools.cache
def _of_event(one_user: bool, one_status: bool) -> nested.Listing:
    """Only the conditions a request sets: generic plans of optional ones
    (`$n IS NULL OR ...`) are slower."""
    conditions = ["r.event_id = k.parent"]
    params = iter(range(5, 7))
    if one_user:
        conditions.append(f"r.user_id = ${next(params)}")
    if one_status:
        conditions.append(f"r.status = ${next(params)}")
    return nested.Listing(f"SELECT {_COLUMNS} FROM rsvps r WHERE {' AND '.join(conditions)}",
                          "r.created_at")


async def by_id(db: Database | Tx, rsvp_id: str) -> asyncpg.Record | None:
    return await db.fetchrow(f"SELECT {_COLUMNS} FROM rsvps r WHERE r.id = $1", rsvp_id)


async def stats(db: Database, event_ids: Sequence[str]) -> list[asyncpg.Record]:
    """Counts per event; events with no RSVP have no row."""
    return await db.fetch(
        """
        SELECT event_id,
               count(*) FILTER (WHERE status = 'going') AS going,
               count(*) FILTER (WHERE status = 'maybe') AS maybe,
               count(*) FILTER (WHERE status = 'not_going') AS not_going,
               count(*) FILTER (WHERE status = 'waitlist') AS waitlist,
               coalesce(sum(num_guests) FILTER (WHERE status = 'going'), 0) AS total_attendees
        FROM rsvps WHERE event_id = ANY($1::text[])
        GROUP BY event_id
        """,
        list(event_ids),
    )


async def by_keys(tx: Tx, event_id: str, user_id: str, keys: Sequence[str]
                  ) -> list[asyncpg.Record]:
    """The user's RSVPs of the event whose key (lower(attendee_email), '' for none)
    is one of `keys`, oldest first."""
    return await tx.fetch(
        f"""
        SELECT {_COLUMNS} FROM rsvps r
        WHERE r.event_id = $1 AND r.user_id = $2
          AND coalesce(lower(r.attendee_email), '') = ANY($3::text[])
        ORDER BY r.created_at, r.id
        """,
        event_id, user_id, list(keys),
    )


async def attendees_going(tx: Tx, event_id: str, *, excluding: str | None) -> int:
    """Sum of num_guests over going RSVPs, leaving out the one being rewritten."""
    total = await tx.fetchval(
        """
        SELECT coalesce(sum(num_guests), 0) FROM rsvps
        WHERE event_id = $1 AND status = 'going' AND ($2::text IS NULL OR id <> $2)
        """,
        event_id, excluding,
    )
    return int(total)


async def insert(tx: Tx, rsvp_id: str, event_id: str, user_id: str, values: dict[str, Any]
                 ) -> asyncpg.Record:
    cols = [c for c in WRITABLE if c in values]
    placeholders = ", ".join(f"${i}" for i in range(4, 4 + len(cols)))
    row = await tx.fetchrow(
        f"""
        INSERT INTO rsvps AS r (id, event_id, user_id, {', '.join(cols)})
        VALUES ($1, $2, $3, {placeholders})
        RETURNING {_COLUMNS}
        """,
        rsvp_id, event_id, user_id, *(values[c] for c in cols),
    )
    assert row is not None
    return row


async def update(tx: Tx, rsvp_id: str, values: dict[str, Any]) -> asyncpg.Record:
    cols = [c for c in WRITABLE if c in values]
    assignments = "".join(f"{c} = ${i}, " for i, c in enumerate(cols, start=2))
    row = await tx.fetchrow(
        f"UPDATE rsvps AS r SET {assignments}updated_at = now() WHERE r.id = $1"
        f" RETURNING {_COLUMNS}",
        rsvp_id, *(values[c] for c in cols),
    )
    assert row is not None
    return row


async def delete(db: Database | Tx, rsvp_id: str) -> None:
    await db.execute("DELETE FROM rsvps WHERE id = $1", rsvp_id)


async def to_notify(db: Database, event_id: str) -> list[asyncpg.Record]:
    """The RSVPs that hear of a change: an e-mail address, and going, maybe or waitlist."""
    return await db.fetch(
        f"""
        SELECT {_COLUMNS} FROM rsvps r
        WHERE r.event_id = $1 AND r.attendee_email IS NOT NULL
          AND r.status IN ('going', 'maybe', 'waitlist')
        ORDER BY r.created_at, r.id
        """,
        event_id,
    )


async def copy(tx: Tx, from_event: str, to_event: str) -> None:
    """Every RSVP of `from_event`, answered again for `to_event` (a split event's
    second part, docs/occurrences.md, "Split"): new IDs, the same answers and times
    of answering. The counts follow (migration 0023's triggers)."""
    await tx.execute(
        """
        INSERT INTO rsvps (id, event_id, user_id, attendee_email, attendee_first_name,
                           attendee_last_name, status, rsvp_type, num_guests, created_at,
                           updated_at)
        SELECT 'rsvp_' || replace(gen_random_uuid()::text, '-', ''), $2, user_id,
               attendee_email, attendee_first_name, attendee_last_name, status, rsvp_type,
               num_guests, created_at, updated_at
        FROM rsvps WHERE event_id = $1
        ORDER BY created_at, id
        """,
        from_event, to_event,
    )
