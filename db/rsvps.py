"""RSVPs and their per-event counts."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
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


async def page(
    db: Database, event_id: str, after: tuple[datetime, str] | None, limit: int, *,
    only_user: str | None,
) -> list[asyncpg.Record]:
    """An event's RSVPs by (created_at, id); `only_user` narrows them to one attendee's."""
    after_ts, after_id = after if after else (None, None)
    return await db.fetch(
        f"""
        SELECT {_COLUMNS} FROM rsvps r
        WHERE r.event_id = $1 AND ($2::text IS NULL OR r.user_id = $2)
          AND ($3::timestamptz IS NULL OR (r.created_at, r.id) > ($3, $4))
        ORDER BY r.created_at, r.id
        LIMIT $5
        """,
        event_id, only_user, after_ts, after_id, limit,
    )


_OF_EVENT = f"""
    SELECT {_COLUMNS} FROM rsvps r
    WHERE r.event_id = k.parent AND ($5::text IS NULL OR r.user_id = $5)
      AND ($6::text IS NULL OR r.status = $6)
"""
"""Each event's RSVPs as `page` lists them, of one status ($6) when set."""


async def pages_of_events(db: Database, parents: Sequence[nested.Parent], limit: int, *,
                          only_user: str | None, status: str | None
                          ) -> list[list[asyncpg.Record]]:
    return await nested.pages(db, _OF_EVENT, "r.created_at", parents, limit, only_user, status)


async def counts_of_events(db: Database, parents: Sequence[str], cap: int, *,
                           only_user: str | None, status: str | None) -> list[int]:
    return await nested.counts(db, _OF_EVENT, parents, cap, only_user, status)


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


async def by_key(tx: Tx, event_id: str, user_id: str, email: str | None) -> asyncpg.Record | None:
    return await tx.fetchrow(
        f"""
        SELECT {_COLUMNS} FROM rsvps r
        WHERE r.event_id = $1 AND r.user_id = $2
          AND coalesce(lower(r.attendee_email), '') = coalesce(lower($3::text), '')
        """,
        event_id, user_id, email,
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
