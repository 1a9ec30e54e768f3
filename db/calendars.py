"""Personal calendars."""

from __future__ import annotations

from db.database import Database, Tx


async def insert(
    tx: Database | Tx, cal_id: str, user_id: str, name: str, *, is_default: bool = False
) -> None:
    await tx.execute(
        "INSERT INTO calendars (id, user_id, name, is_default) VALUES ($1, $2, $3, $4)",
        cal_id, user_id, name, is_default,
    )
