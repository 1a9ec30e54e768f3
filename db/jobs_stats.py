"""Job-queue figures for /metrics, read from pgqueuer's own queue table."""

from __future__ import annotations

from pgqueuer.domain.settings import db_settings

from db.database import Database


async def counts(db: Database) -> dict[tuple[str, str], int]:
    """Jobs in the queue by (entrypoint, status): `queued`, `picked` (running), and
    `failed`. A job is a row from enqueue until it succeeds; one that failed its last
    attempt stays as `failed`, as domain/jobs.py holds failures (on_failure="hold")."""
    # The table name as pgqueuer itself spells it (PGQUEUER_* variables may change it).
    rows = await db.fetch(
        "SELECT entrypoint, status::text AS status, count(*) AS jobs"
        f" FROM {db_settings().qualified.queue_table} GROUP BY entrypoint, status"
    )
    return {(row["entrypoint"], row["status"]): row["jobs"] for row in rows}
