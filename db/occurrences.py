"""Occurrences of recurring events changed or cancelled on their own
(docs/occurrences.md): one row per occurrence that differs from what its event's
rule makes of it, keyed by (event_id, slot). The domain decides what a row
holds (domain/occurrences.py); readers apply rows in domain/expansion.py."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import date, datetime
from typing import Any

import asyncpg
import orjson

from db.database import Database, Tx

COLUMNS = """
    o.event_id, o.slot, o.original_start, o.status, o.cancellation_reason, o.changes,
    o.start_time, o.end_time, o.start_timezone, o.end_timezone, o.start_date, o.end_date,
    o.sequence, o.created_at, o.updated_at
"""

# What readers apply (domain/expansion.py), no more: an agenda reads hundreds.
_APPLIED = """
    o.event_id, o.slot, o.original_start, o.status, o.changes, o.start_time, o.end_time,
    o.start_timezone, o.end_timezone, o.start_date, o.end_date
"""

# The columns a write sets as a whole (`save`): the occurrence as it now differs.
WRITABLE = ("status", "cancellation_reason", "changes", "start_time", "end_time",
            "start_timezone", "end_timezone", "start_date", "end_date")

Rows = dict[str, list[asyncpg.Record]]
"""Rows by event ID, each event's by slot; an event without rows has no key."""


def changed_values(row: Mapping[str, Any]) -> dict[str, str | None]:
    """A row's own title/description/location (a key present: changed, maybe to
    null). `changes` is jsonb, which asyncpg reads as JSON text."""
    changes = row["changes"]
    if isinstance(changes, str):
        loaded: dict[str, str | None] = orjson.loads(changes)
        return loaded
    return dict(changes)


def _grouped(rows: Sequence[asyncpg.Record]) -> Rows:
    found: Rows = {}
    for row in rows:
        found.setdefault(row["event_id"], []).append(row)
    return found


async def for_events(db: Database | Tx, event_ids: Sequence[str]) -> Rows:
    """Every row of each of `event_ids`, by slot, in one statement."""
    return _grouped(await db.fetch(
        f"SELECT {COLUMNS} FROM event_occurrences o WHERE o.event_id = ANY($1::text[])"
        " ORDER BY o.event_id, o.slot",
        list(dict.fromkeys(event_ids)),
    ))


_FAR = """o.start_date IS NOT NULL
       OR o.original_start - o.start_time > interval '7 days'
       OR coalesce(o.end_time, o.start_time) - o.original_start > interval '8 days'"""
"""A row moved far from its slot: migration 0028's partial index, word for word. Any
other row meets a window only if its slot lies within 8 days of it."""
_NEAR = """o.original_start >= least(k.lo, $3::timestamptz - interval '8 days')
           AND o.original_start < $4::timestamptz + interval '8 days'"""


async def in_window(db: Database | Tx, events: Mapping[str, datetime], start: datetime,
                    end: datetime, first_day: date, end_day: date) -> Rows:
    """The rows of the events that may matter to a window, in one statement: those
    whose slot starts from the event's own lower bound (`events`: ID -> the
    window's start less the event's length, where an occurrence that meets the
    window may start) up to a day past `end`, and those moved to where they may
    meet [start, end) (dates: [first_day, end_day)). Each event's rows are read by
    two index ranges that follow the window: those near it, and those moved far
    from their slot. More rows than needed is harmless: the expansion decides
    exactly."""
    return _grouped(await db.fetch(
        f"""
        SELECT {_APPLIED}
        FROM unnest($1::text[], $2::timestamptz[]) AS k(event_id, lo)
        CROSS JOIN LATERAL (
            SELECT * FROM event_occurrences o WHERE o.event_id = k.event_id AND {_NEAR}
            UNION ALL
            SELECT * FROM event_occurrences o
            WHERE o.event_id = k.event_id AND ({_FAR}) AND NOT ({_NEAR})
        ) o
        WHERE (o.original_start >= k.lo
               AND o.original_start < $4::timestamptz + interval '1 day')
           OR (o.start_time < $4 AND coalesce(o.end_time > $3, o.start_time >= $3))
           OR (o.start_date < $6 AND o.end_date > $5)
        ORDER BY o.event_id, o.slot
        """,
        list(events), list(events.values()), start, end, first_day, end_day,
    ))


async def one(db: Database | Tx, event_id: str, slot: str) -> asyncpg.Record | None:
    return await db.fetchrow(
        f"SELECT {COLUMNS} FROM event_occurrences o WHERE o.event_id = $1 AND o.slot = $2",
        event_id, slot)


async def count(tx: Tx, event_id: str) -> int:
    n: int = await tx.fetchval("SELECT count(*) FROM event_occurrences WHERE event_id = $1",
                               event_id)
    return n


async def save(tx: Tx, event_id: str, slot: str, original_start: datetime,
               values: Mapping[str, Any]) -> None:
    """Write the row of occurrence `slot` as `values` say it now is (every column of
    WRITABLE; `changes` a dict): a new row, or a new revision of the row
    (`sequence` + 1)."""
    row = [orjson.dumps(values["changes"]).decode() if c == "changes" else values[c]
           for c in WRITABLE]
    assignments = ", ".join(f"{c} = excluded.{c}" for c in WRITABLE)
    await tx.execute(
        f"""
        INSERT INTO event_occurrences AS o (event_id, slot, original_start, {', '.join(WRITABLE)})
        VALUES ($1, $2, $3, {', '.join(f'${i}' for i in range(4, 4 + len(WRITABLE)))})
        ON CONFLICT (event_id, slot) DO UPDATE
        SET {assignments}, sequence = o.sequence + 1, updated_at = now()
        """,
        event_id, slot, original_start, *row,
    )


async def delete(tx: Tx, event_id: str, slot: str) -> bool:
    """Whether there was a row to delete."""
    done = await tx.execute("DELETE FROM event_occurrences WHERE event_id = $1 AND slot = $2",
                            event_id, slot)
    return done != "DELETE 0"


async def slots(tx: Tx, event_id: str) -> list[str]:
    """The slots of the event's rows, in order."""
    rows = await tx.fetch(
        "SELECT slot FROM event_occurrences WHERE event_id = $1 ORDER BY slot", event_id)
    return [r["slot"] for r in rows]


async def remove(tx: Tx, event_id: str, slots: Sequence[str]) -> None:
    if slots:
        await tx.execute(
            "DELETE FROM event_occurrences WHERE event_id = $1 AND slot = ANY($2::text[])",
            event_id, list(slots))


async def move(tx: Tx, from_event: str, to_event: str, since: datetime) -> None:
    """The rows of `from_event` whose slot starts at or after `since` become
    `to_event`'s (a split: "this and following")."""
    await tx.execute(
        "UPDATE event_occurrences SET event_id = $2, updated_at = now()"
        " WHERE event_id = $1 AND original_start >= $3",
        from_event, to_event, since)
