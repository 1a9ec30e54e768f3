"""Per-deployment secrets, created by the first migration."""

from __future__ import annotations

from db.database import Database


async def get(db: Database, name: str) -> bytes:
    value = await db.fetchval("SELECT value FROM instance_secrets WHERE name = $1", name)
    if value is None:
        raise RuntimeError(f"secret {name!r} is missing; run `kalends migrate`")
    return bytes(value)
