"""Rate-limit buckets (GCRA) shared by every process on one PostgreSQL.

One upsert charges a request: it moves the subject's theoretical arrival time
(`tat`) one interval on, unless that would put it more than a window ahead,
and reports the outcome. Row locks of the upsert serialize requests of one
subject; different subjects never wait for each other.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import asyncpg

from db.database import Database


def upsert(subjects: str) -> str:
    """The charging statement for the subjects that `subjects` yields (a VALUES or
    SELECT of `subject, now() + $2::interval, true`).

    $2: the interval one request costs; $3: the window (the most tat may run
    ahead). In the UPDATE, `r.` names the row as it was, so both assignments see
    the same old tat. `ahead`: how far tat now runs ahead of the clock, seconds.
    """
    return f"""
    INSERT INTO rate_limits AS r (subject, tat, allowed)
    {subjects}
    ON CONFLICT (subject) DO UPDATE SET
        tat = CASE WHEN greatest(r.tat, now()) + $2::interval - now() <= $3::interval
                   THEN greatest(r.tat, now()) + $2::interval ELSE r.tat END,
        allowed = greatest(r.tat, now()) + $2::interval - now() <= $3::interval
    RETURNING r.allowed, extract(epoch FROM r.tat - now())::float8 AS ahead
    """


_CHARGE = upsert("VALUES ($1, now() + $2::interval, true)")


async def charge(db: Database, subject: str, interval: timedelta, window: timedelta
                 ) -> asyncpg.Record:
    """`allowed` and `ahead` for one request of `subject`."""
    row: Any = await db.fetchrow(_CHARGE, subject, interval, window)
    return row


async def forget_idle(db: Database) -> int:
    """Delete buckets that are full again (no different from no row)."""
    status = await db.execute("DELETE FROM rate_limits WHERE tat < now()")
    return int(status.rsplit(" ", 1)[1])
