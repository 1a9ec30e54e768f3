"""Personal calendars. Every read is scoped to the owning user: a calendar
is only ever its owner's."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import asyncpg

from db.database import Database, Tx

_COLUMNS = "c.id, c.name, c.description, c.color, c.is_default, c.created_at, c.updated_at"


async def insert(
    tx: Database | Tx, cal_id: str, user_id: str, name: str, *, is_default: bool = False
) -> None:
    await tx.execute(
        "INSERT INTO calendars (id, user_id, name, is_default) VALUES ($1, $2, $3, $4)",
        cal_id, user_id, name, is_default,
    )


async def by_ids(db: Database | Tx, ids: Sequence[str], user_id: str) -> list[asyncpg.Record]:
    """The calendars among `ids` that belong to `user_id`."""
    return await db.fetch(
        f"SELECT {_COLUMNS} FROM calendars c WHERE c.id = ANY($1::text[]) AND c.user_id = $2",
        list(ids), user_id,
    )


async def page(
    db: Database, user_id: str, after: tuple[datetime, str] | None, limit: int
) -> list[asyncpg.Record]:
    """The user's calendars by (created_at, id)."""
    after_ts, after_id = after if after else (None, None)
    return await db.fetch(
        f"""
        SELECT {_COLUMNS} FROM calendars c
        WHERE c.user_id = $1
          AND ($2::timestamptz IS NULL OR (c.created_at, c.id) > ($2, $3))
        ORDER BY c.created_at, c.id
        LIMIT $4
        """,
        user_id, after_ts, after_id, limit,
    )
