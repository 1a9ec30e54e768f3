"""Connected accounts, their calendars, the events synced from them and the
copies pushed to them. Changes from a provider are applied set-wise (one
statement per kind of change, whatever their number), so a 5,000-event
initial sync is a handful of statements."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import Any

import asyncpg
import orjson

from db import visibility
from db.database import Database, Tx

Conn = Database | Tx

_CALENDAR = """c.id, c.account_id, c.remote_id, c.name, c.description, c.color, c.can_edit,
    c.time_zone, c.is_primary, c.created_at, c.selected, c.sync_token, c.last_success_at"""


# -- accounts -----------------------------------------------------------------------


async def insert_account(tx: Tx, account_id: str, user_id: str, provider: str,
                         url: str | None, username: str | None, secret: bytes) -> None:
    await tx.execute(
        """
        INSERT INTO external_accounts (id, user_id, provider, url, username, secret)
        VALUES ($1, $2, $3, $4, $5, $6)
        """,
        account_id, user_id, provider, url, username, secret,
    )


async def account(db: Conn, account_id: str) -> asyncpg.Record | None:
    return await db.fetchrow("SELECT * FROM external_accounts WHERE id = $1", account_id)


async def account_ids(db: Conn) -> list[str]:
    rows = await db.fetch(
        "SELECT id FROM external_accounts WHERE status <> 'disabled' ORDER BY created_at, id")
    return [r[0] for r in rows]


async def delete_account(tx: Tx, account_id: str) -> list[str] | None:
    """Remove the account; its calendars, their events and push mappings go with
    it (ON DELETE CASCADE). The removed calendar ids; None: no such account."""
    row = await tx.fetchrow(
        "SELECT id FROM external_accounts WHERE id = $1 FOR UPDATE", account_id)
    if row is None:
        return None
    calendars = await tx.fetch(
        "SELECT id FROM external_calendars WHERE account_id = $1 ORDER BY created_at, id",
        account_id)
    removed = [r[0] for r in calendars]
    await _untarget(tx, removed)
    await tx.execute("DELETE FROM external_accounts WHERE id = $1", account_id)
    return removed


async def _untarget(tx: Tx, calendar_ids: list[str]) -> None:
    """Subscriptions stop naming calendars that are gone."""
    if not calendar_ids:
        return
    await tx.execute(
        """
        UPDATE subscriptions SET external_calendar_ids = ARRAY(
            SELECT x FROM unnest(external_calendar_ids) x WHERE x <> ALL($1::text[])),
            updated_at = now()
        WHERE external_calendar_ids && $1::text[]
        """,
        calendar_ids,
    )


async def claim_due(tx: Tx, interval: timedelta) -> list[str]:
    """Accounts whose next sync is due, moved on by one interval; a second
    scheduler running at the same moment skips the rows this one holds."""
    rows = await tx.fetch(
        """
        UPDATE external_accounts a SET next_sync_at = now() + $1::interval
        WHERE a.id IN (
            SELECT id FROM external_accounts
            WHERE status <> 'disabled' AND next_sync_at <= now()
            ORDER BY next_sync_at FOR UPDATE SKIP LOCKED)
        RETURNING a.id
        """,
        interval,
    )
    return [r[0] for r in rows]


async def started(db: Conn, account_id: str) -> None:
    await db.execute(
        "UPDATE external_accounts SET last_attempt_at = now() WHERE id = $1", account_id)


async def succeeded(db: Conn, account_id: str, secret: bytes | None) -> None:
    await db.execute(
        """
        UPDATE external_accounts
        SET status = 'ok', last_error = NULL, failures = 0, last_success_at = now(),
            secret = coalesce($2, secret)
        WHERE id = $1 AND status <> 'disabled'
        """,
        account_id, secret,
    )


async def failed(db: Conn, account_id: str, error: str, *, disable: bool,
                 retry_in: timedelta | None) -> None:
    await db.execute(
        """
        UPDATE external_accounts
        SET status = CASE WHEN $3 THEN 'disabled' ELSE 'failed' END,
            last_error = $2, failures = failures + 1,
            next_sync_at = CASE WHEN $4::interval IS NULL THEN next_sync_at
                                ELSE now() + $4::interval END
        WHERE id = $1
        """,
        account_id, error[:1000], disable, retry_in,
    )


@asynccontextmanager
async def account_lock(db: Database, account_id: str, *, wait: bool) -> AsyncIterator[bool]:
    """The account's lock: one sync (or disconnect) of an account at a time,
    across processes. A session advisory lock on a connection of its own, not
    the pool's, so that syncs holding it while they talk to providers never
    starve the pool they query through; a crash closes the connection and
    releases it. Yields whether it was taken (always, with `wait`)."""
    if db.dsn is None:
        raise RuntimeError("account_lock needs a Database made by Database.connect")
    conn = await asyncpg.connect(db.dsn)
    try:
        key = "kalends:xac:" + account_id
        if wait:
            await conn.execute("SELECT pg_advisory_lock(hashtextextended($1, 0))", key)
            yield True
        else:
            yield bool(await conn.fetchval(
                "SELECT pg_try_advisory_lock(hashtextextended($1, 0))", key))
    finally:
        await conn.close()


# -- calendars ----------------------------------------------------------------------


async def put_calendars(tx: Tx, account_id: str, user_id: str, provider: str,
                        found: Sequence[Any], new_ids: Sequence[str]) -> list[str]:
    """Bring the account's calendars in line with `found` (RemoteCalendars);
    `new_ids` name the rows new calendars get. Returns the ids removed."""
    remote_ids = [c.remote_id for c in found]
    gone = await tx.fetch(
        """
        DELETE FROM external_calendars
        WHERE account_id = $1 AND remote_id <> ALL($2::text[]) RETURNING id
        """,
        account_id, remote_ids,
    )
    await _untarget(tx, [r[0] for r in gone])
    await tx.execute(
        """
        INSERT INTO external_calendars AS c (id, user_id, provider, account_id, remote_id, name,
            description, color, can_edit, time_zone, is_primary)
        SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[],
            $6::text[], $7::text[], $8::text[], $9::boolean[], $10::text[], $11::boolean[])
        ON CONFLICT (account_id, remote_id) DO UPDATE
        SET name = EXCLUDED.name, description = EXCLUDED.description, color = EXCLUDED.color,
            can_edit = EXCLUDED.can_edit, time_zone = EXCLUDED.time_zone,
            is_primary = EXCLUDED.is_primary
        WHERE (c.name, c.description, c.color, c.can_edit, c.time_zone, c.is_primary)
              IS DISTINCT FROM (EXCLUDED.name, EXCLUDED.description, EXCLUDED.color,
                                EXCLUDED.can_edit, EXCLUDED.time_zone, EXCLUDED.is_primary)
        """,
        list(new_ids), [user_id] * len(found), [provider] * len(found),
        [account_id] * len(found), remote_ids, [c.name for c in found],
        [c.description for c in found], [c.color for c in found],
        [c.can_edit for c in found], [c.time_zone for c in found],
        [c.is_primary for c in found],
    )
    return [r[0] for r in gone]


async def calendars_of_account(db: Conn, account_id: str) -> list[asyncpg.Record]:
    return await db.fetch(
        f"SELECT {_CALENDAR} FROM external_calendars c WHERE c.account_id = $1 "
        "ORDER BY c.created_at, c.id",
        account_id,
    )


async def page(db: Database, user_id: str, after: tuple[datetime, str] | None, limit: int
               ) -> list[asyncpg.Record]:
    after_ts, after_id = after if after else (None, None)
    return await db.fetch(
        f"""
        SELECT {_CALENDAR} FROM external_calendars c
        WHERE c.user_id = $1
          AND ($2::timestamptz IS NULL OR (c.created_at, c.id) > ($2, $3))
        ORDER BY c.created_at, c.id
        LIMIT $4
        """,
        user_id, after_ts, after_id, limit,
    )


async def select(db: Conn, calendar_id: str, selected: bool) -> bool:
    status = await db.execute(
        "UPDATE external_calendars SET selected = $2 WHERE id = $1", calendar_id, selected)
    return status.endswith(" 1")


async def synced(tx: Tx, calendar_id: str, token: str | None) -> None:
    await tx.execute(
        "UPDATE external_calendars SET sync_token = $2, last_success_at = now() WHERE id = $1",
        calendar_id, token,
    )


# -- events from the provider -------------------------------------------------------


async def lock_calendar(tx: Tx, calendar_id: str) -> bool:
    """Hold the calendar row for this transaction; False when it is gone."""
    return await tx.fetchval(
        "SELECT true FROM external_calendars WHERE id = $1 FOR UPDATE", calendar_id) is not None


async def remove_keys(tx: Tx, calendar_id: str, keys: Sequence[str]) -> None:
    await tx.execute(
        "DELETE FROM external_events WHERE calendar_id = $1 AND remote_key = ANY($2::text[])",
        calendar_id, list(keys),
    )


async def keep_only_keys(tx: Tx, calendar_id: str, keys: Sequence[str]) -> None:
    """After a full sync: what the provider no longer has is deleted."""
    await tx.execute(
        "DELETE FROM external_events WHERE calendar_id = $1 AND remote_key <> ALL($2::text[])",
        calendar_id, list(keys),
    )


async def put_events(tx: Tx, calendar_id: str, rows: Sequence[dict[str, Any]]) -> None:
    """Store components, one row each, keyed by (remote_key, recurrence_key);
    components a resource no longer holds are removed, unchanged rows untouched
    (their xcev_ ids stay)."""
    if not rows:
        return
    columns = ("id", "remote_key", "recurrence_key", "etag", "uid", "title", "description",
               "location", "cancelled", "transparent", "times", "span_start", "span_end")
    values = {c: [r[c] for r in rows] for c in columns}
    values["times"] = [orjson.dumps(t).decode() for t in values["times"]]
    await tx.execute(
        """
        DELETE FROM external_events e
        USING unnest($2::text[]) AS k(remote_key)
        WHERE e.calendar_id = $1 AND e.remote_key = k.remote_key
          AND (e.remote_key, e.recurrence_key) NOT IN (
              SELECT * FROM unnest($2::text[], $3::text[]))
        """,
        calendar_id, values["remote_key"], values["recurrence_key"],
    )
    await tx.execute(
        """
        INSERT INTO external_events AS e (calendar_id, id, remote_key, recurrence_key, etag, uid,
            title, description, location, cancelled, transparent, times, span_start, span_end)
        SELECT $1, * FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
            $7::text[], $8::text[], $9::text[], $10::boolean[], $11::boolean[], $12::jsonb[],
            $13::timestamptz[], $14::timestamptz[])
        ON CONFLICT (calendar_id, remote_key, recurrence_key) DO UPDATE
        SET etag = EXCLUDED.etag, uid = EXCLUDED.uid, title = EXCLUDED.title,
            description = EXCLUDED.description, location = EXCLUDED.location,
            cancelled = EXCLUDED.cancelled, transparent = EXCLUDED.transparent,
            times = EXCLUDED.times, span_start = EXCLUDED.span_start,
            span_end = EXCLUDED.span_end
        WHERE (e.etag, e.uid, e.title, e.description, e.location, e.cancelled, e.transparent,
               e.times, e.span_start, e.span_end)
              IS DISTINCT FROM (EXCLUDED.etag, EXCLUDED.uid, EXCLUDED.title,
                                EXCLUDED.description, EXCLUDED.location, EXCLUDED.cancelled,
                                EXCLUDED.transparent, EXCLUDED.times, EXCLUDED.span_start,
                                EXCLUDED.span_end)
        """,
        calendar_id, *(values[c] for c in columns),
    )


# -- the agenda's reads ---------------------------------------------------------------


# How long a component may last and still be found by its start alone
# (migration 0021: the others are in the partial index external_events_long).
_SHORT = "interval '7 days'"


async def agenda_events(db: Database, calendar_ids: Sequence[str], start: datetime,
                        end: datetime) -> list[asyncpg.Record]:
    """Components of `calendar_ids` that may meet [start, end), and every other
    component of the same events (overrides and masters go together), each
    with the Kalends event it mirrors when it is a copy Kalends pushed."""
    # Two index ranges, each bounded on both sides (migration 0021): components of
    # at most a week by their start, from a week before the window to its end; the
    # rest by their end, from the window's start. Then each event's components by
    # external_events_uid, one event at a time (OFFSET 0 keeps the subquery from
    # being flattened into a join that may hash the whole calendar).
    return await db.fetch(
        f"""
        WITH hit AS (
            SELECT calendar_id, uid FROM external_events
            WHERE calendar_id = ANY($1::text[])
              AND span_end IS NOT NULL AND span_end - span_start <= {_SHORT}
              AND span_start >= $2::timestamptz - {_SHORT} AND span_start < $3
              AND span_end > $2
            UNION
            SELECT calendar_id, uid FROM external_events
            WHERE calendar_id = ANY($1::text[])
              AND (span_end IS NULL OR span_end - span_start > {_SHORT})
              AND coalesce(span_end, 'infinity'::timestamptz) > $2 AND span_start < $3
        )
        SELECT e.id, e.calendar_id, e.uid, e.recurrence_key, e.title, e.description,
               e.location, e.cancelled, e.transparent, e.times, p.event_id AS mirror_of
        FROM hit
        CROSS JOIN LATERAL (
            SELECT * FROM external_events x
            WHERE x.calendar_id = hit.calendar_id AND x.uid = hit.uid OFFSET 0) e
        LEFT JOIN external_pushes p
          ON p.calendar_id = e.calendar_id AND p.remote_key = e.remote_key
        """,
        list(calendar_ids), start, end,
    )


# -- copies pushed to the provider ----------------------------------------------------

# The events the user's live subscriptions send to calendar $1: those of their
# sources the user may see, cancelled ones included (the copy shows it). A
# paused subscription keeps, and updates, the copies it has.
_PUSHED = f"""
SELECT DISTINCT ON (e.id) e.id, e.title, e.description, e.location, e.start_time,
       e.end_time, e.start_timezone, e.end_timezone, e.is_all_day, e.start_date,
       e.end_date, e.recurrence_rule, e.status, e.transparency, e.sequence, e.updated_at
FROM external_calendars xc
JOIN subscriptions s
  ON s.user_id = xc.user_id AND s.cleanup_requested_at IS NULL
 AND xc.id = ANY(s.external_calendar_ids)
JOIN events e
  ON s.profile_id = e.profile_id
  OR s.series_id IN (SELECT se.series_id FROM series_events se WHERE se.event_id = e.id)
{visibility.join_profile('e', 's.user_id')}
WHERE xc.id = $1
  AND {visibility.visible('e', 's.user_id')}
  AND (s.series_id IS NULL OR EXISTS (
        SELECT 1 FROM series sr WHERE sr.id = s.series_id
        AND {visibility.visible('sr', 's.user_id')}))
  AND (s.is_active OR EXISTS (
        SELECT 1 FROM external_pushes xp WHERE xp.calendar_id = xc.id AND xp.event_id = e.id))
ORDER BY e.id
"""


async def wanted_copies(db: Conn, calendar_id: str) -> list[asyncpg.Record]:
    return await db.fetch(_PUSHED, calendar_id)


async def pushes(db: Conn, calendar_id: str) -> list[asyncpg.Record]:
    return await db.fetch(
        "SELECT event_id, remote_key, etag, digest FROM external_pushes WHERE calendar_id = $1",
        calendar_id,
    )


async def pushed(db: Conn, calendar_id: str, event_id: str, remote_key: str,
                 etag: str | None, digest: str) -> None:
    await db.execute(
        """
        INSERT INTO external_pushes (calendar_id, event_id, remote_key, etag, digest)
        VALUES ($1, $2, $3, $4, $5)
        ON CONFLICT (calendar_id, event_id) DO UPDATE
        SET remote_key = $3, etag = $4, digest = $5, pushed_at = now()
        """,
        calendar_id, event_id, remote_key, etag, digest,
    )


async def unpushed(db: Conn, calendar_id: str, event_id: str) -> None:
    await db.execute(
        "DELETE FROM external_pushes WHERE calendar_id = $1 AND event_id = $2",
        calendar_id, event_id,
    )


async def targets_of_events(db: Conn, event_ids: Sequence[str]) -> list[str]:
    """Accounts with a calendar that a subscription covering these events
    targets, or that holds a copy of one of them."""
    rows = await db.fetch(
        """
        SELECT DISTINCT xc.account_id FROM events e
        JOIN subscriptions s ON s.profile_id = e.profile_id
          OR s.series_id IN (SELECT se.series_id FROM series_events se WHERE se.event_id = e.id)
        JOIN external_calendars xc ON xc.id = ANY(s.external_calendar_ids)
        WHERE e.id = ANY($1::text[]) AND s.external_calendar_ids <> '{}'
        UNION
        SELECT xc.account_id FROM external_pushes p
        JOIN external_calendars xc ON xc.id = p.calendar_id
        WHERE p.event_id = ANY($1::text[])
        """,
        list(event_ids),
    )
    return [r[0] for r in rows]


async def accounts_of_user(db: Conn, user_id: str) -> list[str]:
    rows = await db.fetch(
        "SELECT id FROM external_accounts WHERE user_id = $1 AND status <> 'disabled'", user_id)
    return [r[0] for r in rows]
