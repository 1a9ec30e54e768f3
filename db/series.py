"""Series and their membership. Reads carry what visibility and permission
need (see db/visibility.py), as event reads do."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import asyncpg

from db import nested, rows, visibility
from db.database import Database, Tx

_COLUMNS = """
    s.id, s.profile_id, s.name, s.slug::text AS slug, s.description, s.is_private,
    s.created_at, s.updated_at
"""

WRITABLE = ("name", "slug", "description", "is_private")


def _select(viewer: str) -> str:
    return visibility.select(_COLUMNS, "series", "s", viewer)


async def by_ids(db: Database | Tx, ids: Sequence[str], viewer_id: str) -> list[asyncpg.Record]:
    return await db.fetch(
        f"{_select('$2')} WHERE s.id = ANY($1::text[]) AND {visibility.visible('s', '$2')}",
        list(ids), viewer_id,
    )


async def of_events(db: Database, event_ids: Sequence[str], viewer_id: str
                    ) -> list[asyncpg.Record]:
    """Visible series of each event, with `event_id`, in creation order."""
    return await db.fetch(
        f"""
        SELECT se.event_id, {_COLUMNS}, {visibility.columns('$2')}
        FROM series_events se JOIN series s ON s.id = se.series_id
        {visibility.join_profile('s', '$2')}
        WHERE se.event_id = ANY($1::text[]) AND {visibility.visible('s', '$2')}
        ORDER BY s.created_at, s.id
        """,
        list(event_ids), viewer_id,
    )


async def page(
    db: Database, viewer_id: str, after: tuple[datetime, str] | None, limit: int
) -> list[asyncpg.Record]:
    """The live series of every profile the viewer owns or administers, by
    (created_at, id)."""
    after_ts, after_id = after if after else (None, None)
    return await db.fetch(
        f"""
        {_select('$1')}
        WHERE {visibility.administered('$1')}
          AND ($2::timestamptz IS NULL OR (s.created_at, s.id) > ($2, $3))
        ORDER BY s.created_at, s.id
        LIMIT $4
        """,
        viewer_id, after_ts, after_id, limit,
    )


OF_PROFILE = nested.Listing(
    f"{_select('$5')} WHERE s.profile_id = k.parent AND {visibility.visible('s', '$5')}",
    "s.created_at")
"""A profile's visible series by (created_at, id) ($5: the viewer)."""


async def insert(db: Database | Tx, series_id: str, profile_id: str, values: dict[str, Any]
                 ) -> None:
    """Raises asyncpg.UniqueViolationError when the slug is taken in the profile."""
    await rows.insert(db, "series", WRITABLE, {"id": series_id, "profile_id": profile_id}, values)


async def update(db: Database | Tx, series_id: str, values: dict[str, Any]) -> None:
    await rows.update(db, "series", WRITABLE, series_id, values)


_COUNTS = """
    WITH members AS (
        SELECT e.id, e.recurrence_rule IS NOT NULL AS recurring,
               EXISTS (SELECT 1 FROM series_events o
                       WHERE o.event_id = e.id AND o.series_id <> $1) AS shared
        FROM series_events se JOIN events e ON e.id = se.event_id
        WHERE se.series_id = $1
    )
    SELECT count(*) AS member_count,
           count(*) FILTER (WHERE NOT shared) AS exclusive_count,
           count(*) FILTER (WHERE shared) AS shared_count,
           count(*) FILTER (WHERE recurring) AS member_recurring_count,
           count(*) FILTER (WHERE recurring AND NOT shared) AS exclusive_recurring_count,
           count(*) FILTER (WHERE recurring AND shared) AS shared_recurring_count
    FROM members
"""


async def deletion_counts(db: Database | Tx, series_id: str) -> asyncpg.Record:
    row = await db.fetchrow(_COUNTS, series_id)
    assert row is not None
    return row


async def lock(tx: Tx, series_id: str) -> bool:
    """Lock the series row until `tx` ends; False once it is deleted. A change
    decided on it then sees every change that committed before it (docs/api-choices.md, "Events,
    RSVPs and series")."""
    return await tx.fetchval("SELECT true FROM series WHERE id = $1 FOR UPDATE",
                             series_id) is not None


async def lock_for_delete(tx: Tx, series_id: str, *, events: bool) -> int | None:
    """Lock the series and its links, so a concurrent link cannot slip an event
    between the count and the delete; returns the member count, or None when the
    series is gone (deleted by a concurrent request: this one then deletes nothing).

    With `events`, the member events are locked first (for deleting those in no
    other series, `exclusive_events`): a link of one of them into another series
    holds a key-share lock on it until it commits, so this waits for it and then
    (a new statement, a new snapshot) sees the event as shared; a link that comes
    later waits for the delete instead. Events before links, as an event's own
    delete takes them (its row, then its links by cascade), so the two wait for
    each other in turn instead of deadlocking; an event deleted meanwhile is no
    longer a member."""
    if not await lock(tx, series_id):
        return None
    if events:
        await tx.execute(
            """
            SELECT 1 FROM events
            WHERE id IN (SELECT event_id FROM series_events WHERE series_id = $1)
            ORDER BY id FOR UPDATE
            """,
            series_id,
        )
    members: int = await tx.fetchval(
        "SELECT count(*) FROM (SELECT 1 FROM series_events WHERE series_id = $1 FOR UPDATE) l",
        series_id,
    )
    return members


async def exclusive_events(tx: Tx, series_id: str) -> list[str]:
    """The member events in no other series; `lock_for_delete(..., events=True)`
    has locked them."""
    rows = await tx.fetch(
        """
        SELECT se.event_id FROM series_events se
        WHERE se.series_id = $1
          AND NOT EXISTS (SELECT 1 FROM series_events o
                          WHERE o.event_id = se.event_id AND o.series_id <> $1)
        ORDER BY se.event_id
        """,
        series_id,
    )
    return [r["event_id"] for r in rows]


async def delete(tx: Tx, series_id: str, event_ids: list[str]) -> None:
    """Delete the series, and the events `event_ids` with it."""
    await tx.execute("DELETE FROM events WHERE id = ANY($1::text[])", event_ids)
    await tx.execute("DELETE FROM series WHERE id = $1", series_id)


async def link(db: Database | Tx, series_id: str, event_id: str) -> None:
    """Already linked: a no-op."""
    await db.execute(
        "INSERT INTO series_events (series_id, event_id) VALUES ($1, $2) ON CONFLICT DO NOTHING",
        series_id, event_id,
    )


async def unlink(db: Database | Tx, series_id: str, event_id: str) -> bool:
    status = await db.execute(
        "DELETE FROM series_events WHERE series_id = $1 AND event_id = $2", series_id, event_id
    )
    return status != "DELETE 0"


async def copy_membership(tx: Tx, from_event: str, to_event: str) -> None:
    """`to_event` joins every series `from_event` is in (a split event's second part)."""
    await tx.execute(
        "INSERT INTO series_events (series_id, event_id)"
        " SELECT series_id, $2 FROM series_events WHERE event_id = $1",
        from_event, to_event)
