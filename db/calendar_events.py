"""Calendar events: personal ones, written through the API, and the read-only
copies that subscription sync jobs keep (`source_event_id` set). Reads carry
the owning user's scope, so permission costs no second query."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import asyncpg

from db import rows
from db.database import Database, Tx

_COLUMNS = """
    ce.id, ce.calendar_id, ce.title, ce.description, ce.location, ce.start_time, ce.end_time,
    ce.start_timezone, ce.end_timezone, ce.is_all_day, ce.start_date, ce.end_date,
    ce.recurrence_rule, ce.status, ce.transparency, ce.source_event_id,
    ce.created_at, ce.updated_at
"""

# Columns the API may write; status and the source columns belong to sync.
WRITABLE = (
    "title", "description", "location", "start_time", "end_time", "start_timezone",
    "end_timezone", "is_all_day", "start_date", "end_date", "recurrence_rule", "transparency",
)


async def by_ids(db: Database | Tx, ids: Sequence[str], user_id: str) -> list[asyncpg.Record]:
    """The calendar events among `ids` in calendars of `user_id`."""
    return await db.fetch(
        f"""
        SELECT {_COLUMNS} FROM calendar_events ce JOIN calendars c ON c.id = ce.calendar_id
        WHERE ce.id = ANY($1::text[]) AND c.user_id = $2
        """,
        list(ids), user_id,
    )


async def page(
    db: Database, calendar_id: str, after: tuple[datetime, str] | None, limit: int
) -> list[asyncpg.Record]:
    """A calendar's stored events, personal and synced, by (created_at, id);
    a recurring event is its one stored row."""
    after_ts, after_id = after if after else (None, None)
    return await db.fetch(
        f"""
        SELECT {_COLUMNS} FROM calendar_events ce
        WHERE ce.calendar_id = $1
          AND ($2::timestamptz IS NULL OR (ce.created_at, ce.id) > ($2, $3))
        ORDER BY ce.created_at, ce.id
        LIMIT $4
        """,
        calendar_id, after_ts, after_id, limit,
    )


async def insert(db: Database | Tx, event_id: str, calendar_id: str, values: dict[str, Any]
                 ) -> None:
    await rows.insert(db, "calendar_events", WRITABLE,
                      {"id": event_id, "calendar_id": calendar_id}, values)


async def update(db: Database | Tx, event_id: str, values: dict[str, Any]) -> None:
    """Changes a personal event only; sync owns the copies."""
    await rows.update(db, "calendar_events", WRITABLE, event_id, values,
                      condition="source_event_id IS NULL")


async def delete(db: Database | Tx, event_id: str) -> None:
    """Deletes a personal event only: a synced copy is the sync jobs' to remove."""
    await db.execute(
        "DELETE FROM calendar_events WHERE id = $1 AND source_event_id IS NULL", event_id
    )
