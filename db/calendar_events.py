"""Calendar events: personal ones, written through the API, and the read-only
copies that subscription sync jobs keep (`source_event_id` set). Reads carry
the owning user's scope, so permission costs no second query."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import asyncpg

from db import nested, rows
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


OF_CALENDAR = nested.Listing(f"""
    SELECT {_COLUMNS} FROM calendar_events ce
    WHERE ce.calendar_id = k.parent
""", "ce.created_at")
"""A calendar's stored events, personal and synced, by (created_at, id); a
recurring event is its one stored row."""


# Derived by the domain from the written columns, never sent by a client: when a
# recurring event's last occurrence ends (domain.agenda.series_end; None there is
# "never", stored as infinity; NULL here is "not known yet", see migration 0017).
_DERIVED = ("recurrence_end",)
# asyncpg writes the naive datetime.max as timestamptz 'infinity'.
_NEVER = datetime.max


def _stored(values: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(values)
    if "recurrence_end" in out:
        if out.get("recurrence_rule") is None:
            out["recurrence_end"] = None  # no rule: no series to end
        elif out["recurrence_end"] is None:
            out["recurrence_end"] = _NEVER
    return out


async def insert(db: Database | Tx, event_id: str, calendar_id: str, values: dict[str, Any]
                 ) -> None:
    await rows.insert(db, "calendar_events", WRITABLE + _DERIVED,
                      {"id": event_id, "calendar_id": calendar_id}, _stored(values))


async def update(db: Database | Tx, event_id: str, values: dict[str, Any]) -> None:
    """Changes a personal event only; sync owns the copies."""
    await rows.update(db, "calendar_events", WRITABLE + _DERIVED, event_id, _stored(values),
                      condition="source_event_id IS NULL")


async def delete(db: Database | Tx, event_id: str) -> None:
    """Deletes a personal event only: a synced copy is the sync jobs' to remove."""
    await db.execute(
        "DELETE FROM calendar_events WHERE id = $1 AND source_event_id IS NULL", event_id
    )


# What a recurring row's end is computed from, as one value: a settled end is
# written only if these are still what was read.
_INPUTS = """md5(row(ce.recurrence_rule, ce.is_all_day, ce.start_time, ce.end_time,
                 ce.start_timezone, ce.start_date, ce.end_date)::text)"""


async def unsettled(db: Database | Tx, source_event_ids: Sequence[str] | None, limit: int
                    ) -> list[asyncpg.Record]:
    """Up to `limit` recurring calendar events whose end is not known yet (the copies of
    `source_event_ids`, or any), with their time columns and `inputs`."""
    return await db.fetch(
        f"""
        SELECT ce.id, ce.recurrence_rule, ce.is_all_day, ce.start_time, ce.end_time,
               ce.start_timezone, ce.end_timezone, ce.start_date, ce.end_date,
               {_INPUTS} AS inputs
        FROM calendar_events ce
        WHERE ce.recurrence_rule IS NOT NULL AND ce.recurrence_end IS NULL
          AND ($1::text[] IS NULL OR ce.source_event_id = ANY($1::text[]))
        LIMIT $2
        """,
        None if source_event_ids is None else list(source_event_ids), limit,
    )


async def settle(db: Database | Tx, ends: Sequence[tuple[str, str, datetime | None]]) -> int:
    """Stores (id, inputs, end) where the row's `inputs` are still those; an end of
    None is "never". Returns the rows written."""
    if not ends:
        return 0
    status = await db.execute(
        f"""
        UPDATE calendar_events ce SET recurrence_end = coalesce(u.last_end, 'infinity')
        FROM unnest($1::text[], $2::text[], $3::timestamptz[]) AS u(id, inputs, last_end)
        WHERE ce.id = u.id AND ce.recurrence_end IS NULL AND {_INPUTS} = u.inputs
        """,
        [e[0] for e in ends], [e[1] for e in ends], [e[2] for e in ends],
    )
    return int(status.rsplit(" ", 1)[-1])


async def is_copy_of(db: Database | Tx, calendar_event_id: str, event_id: str) -> bool:
    """Whether the calendar event is a subscription copy of the event: what the
    agenda names its occurrences by (docs/occurrences.md, "Occurrence IDs")."""
    found: bool = await db.fetchval(
        "SELECT EXISTS (SELECT FROM calendar_events WHERE id = $1 AND source_event_id = $2)",
        calendar_event_id, event_id)
    return found
