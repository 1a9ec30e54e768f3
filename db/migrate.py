"""Ordered SQL migrations, each in one transaction, serialized by an advisory lock.

Several processes may start at once (`serve --workers N`, a worker fleet): the
lock makes the second wait and then find nothing left to apply.
"""

from __future__ import annotations

from importlib import resources

import asyncpg
from pgqueuer import Queries

# An arbitrary constant naming "kalends migrations" in pg_advisory_lock's key space.
_LOCK_KEY = 0x6B616C656E6473


def _migrations() -> list[tuple[str, str]]:
    folder = resources.files("db.migrations")
    files = sorted((f for f in folder.iterdir() if f.name.endswith(".sql")), key=lambda f: f.name)
    return [(f.name.removesuffix(".sql"), f.read_text()) for f in files]


async def migrate(dsn: str) -> list[str]:
    """Apply pending migrations; return the versions applied by this call."""
    conn = await asyncpg.connect(dsn)
    applied: list[str] = []
    try:
        await conn.execute("SELECT pg_advisory_lock($1)", _LOCK_KEY)
        try:
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                " version text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
            )
            done = {r["version"] for r in await conn.fetch("SELECT version FROM schema_migrations")}
            for version, sql in _migrations():
                if version in done:
                    continue
                async with conn.transaction():
                    await conn.execute(sql)
                    await conn.execute(
                        "INSERT INTO schema_migrations (version) VALUES ($1)", version
                    )
                applied.append(version)
            await _job_queue(conn)
        finally:
            await conn.execute("SELECT pg_advisory_unlock($1)", _LOCK_KEY)
    finally:
        await conn.close()
    return applied


async def _job_queue(conn: asyncpg.Connection) -> None:
    """pgqueuer's own tables, installed and upgraded by the library itself."""
    queries = Queries.from_asyncpg_connection(conn)
    if await queries.schema_is_installed():
        await queries.upgrade()
    else:
        await queries.install()
