"""The `instance_secrets` table: per-deployment secrets, stored sealed
(domain/instance_secrets.py seals and opens them)."""

from __future__ import annotations

import asyncpg

from db.database import Database


async def read(db: Database, name: str) -> asyncpg.Record | None:
    return await db.fetchrow("SELECT value, sealed FROM instance_secrets WHERE name = $1", name)


async def insert_sealed(db: Database, name: str, sealed: bytes) -> None:
    """A new secret, unless another process made it first."""
    await db.execute(
        "INSERT INTO instance_secrets (name, value, sealed) VALUES ($1, $2, true)"
        " ON CONFLICT (name) DO NOTHING", name, sealed)


async def seal_in_place(db: Database, name: str, sealed: bytes) -> None:
    """Replace a secret still in clear by its sealed form (once, whoever races)."""
    await db.execute(
        "UPDATE instance_secrets SET value = $2, sealed = true WHERE name = $1 AND NOT sealed",
        name, sealed)
