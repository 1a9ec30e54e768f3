"""Changes announced as they commit (domain/notify/changes.py): the notifications,
the listening connection, and what deleted events were."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import asyncpg

from db import visibility
from db.database import Database, Tx

CHANNEL = "kalends_changes"
APPLICATION_NAME = "kalends change feed"
"""How the listening sessions show in pg_stat_activity."""

Listener = Callable[[str], None]
"""Called with each notification's payload, in commit order."""


async def announce(tx: Tx, payloads: Sequence[str]) -> None:
    """Notify every listener, in order, when (and only if) the transaction commits."""
    # unnest's function scan yields the array in order, and each row notifies as it goes.
    await tx.execute("SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p",
                     CHANNEL, list(payloads))


async def keep_deleted(tx: Tx, event_ids: Sequence[str], keep: timedelta) -> None:
    """Before the events are deleted: what they are, for readers after the commit.
    Rows kept longer than `keep` are forgotten on the way."""
    await tx.execute(
        """
        WITH forgotten AS (
            DELETE FROM deleted_events WHERE deleted_at < now() - $2::interval
        )
        INSERT INTO deleted_events (event_id, snapshot)
        SELECT e.id, to_jsonb(e) - 'search_tsv' FROM events e WHERE e.id = ANY($1::text[])
        ON CONFLICT (event_id) DO UPDATE SET snapshot = EXCLUDED.snapshot, deleted_at = now()
        """,
        list(event_ids), keep,
    )


async def deleted_event(db: Database, event_id: str, viewer_id: str) -> asyncpg.Record | None:
    """A deleted event as it was, in the shape `db.events.by_ids` reads (for the
    viewer, who must have been able to see it), or None."""
    return await db.fetchrow(
        f"""
        SELECT e.*, {visibility.columns('$2')}
        FROM deleted_events d
        CROSS JOIN LATERAL jsonb_populate_record(NULL::events, d.snapshot) e
        {visibility.join_profile('e', '$2')}
        WHERE d.event_id = $1 AND {visibility.visible('e', '$2')}
        """,
        event_id, viewer_id,
    )


async def listen(dsn: str, receive: Listener, lost: Callable[[], None], *, timeout: float
                 ) -> asyncpg.Connection:
    """A connection of its own (LISTEN is session state, so never a pooled one)
    that passes each notification to `receive`, and calls `lost` once when it closes."""
    conn = await asyncpg.connect(dsn, timeout=timeout,
                                 server_settings={"application_name": APPLICATION_NAME})
    try:
        conn.add_termination_listener(lambda _conn: lost())
        await conn.add_listener(CHANNEL, lambda *args: _received(receive, *args))
    except BaseException:
        conn.terminate()
        raise
    return conn


def _received(receive: Listener, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
    receive(payload)


async def alive(conn: asyncpg.Connection, *, timeout: float) -> None:
    """Raises unless the connection still answers."""
    await conn.fetchval("SELECT 1", timeout=timeout)


async def close(conn: asyncpg.Connection) -> None:
    if not conn.is_closed():
        conn.terminate()
