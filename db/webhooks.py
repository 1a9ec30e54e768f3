"""Webhook endpoints, the outbox of messages, and each endpoint's delivery queue."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import asyncpg

from db import rows
from db.database import Database, Tx

_COLUMNS = """
    w.id, w.profile_id, w.url, w.event_types, w.is_active, w.disabled_reason,
    w.created_at, w.updated_at
"""
WRITABLE = ("url", "event_types", "is_active")


async def insert(db: Database | Tx, endpoint_id: str, profile_id: str, values: dict[str, Any],
                 secret: bytes) -> None:
    await rows.insert(db, "webhook_endpoints", WRITABLE,
                      {"id": endpoint_id, "profile_id": profile_id, "secret": secret}, values)


async def by_id(db: Database | Tx, endpoint_id: str) -> asyncpg.Record | None:
    return await db.fetchrow(
        f"SELECT {_COLUMNS} FROM webhook_endpoints w WHERE w.id = $1", endpoint_id)


async def page(db: Database, profile_id: str, after: tuple[datetime, str] | None, limit: int
               ) -> list[asyncpg.Record]:
    after_ts, after_id = after if after else (None, None)
    return await db.fetch(
        f"""
        SELECT {_COLUMNS} FROM webhook_endpoints w
        WHERE w.profile_id = $1
          AND ($2::timestamptz IS NULL OR (w.created_at, w.id) > ($2, $3))
        ORDER BY w.created_at, w.id
        LIMIT $4
        """,
        profile_id, after_ts, after_id, limit,
    )


async def update(tx: Tx, endpoint_id: str, values: dict[str, Any], *, resume: bool) -> None:
    await rows.update(tx, "webhook_endpoints", WRITABLE, endpoint_id, values)
    if resume:
        # Enabled again: the reason it was disabled no longer holds, and what
        # waited in its queue starts a fresh retry schedule, in order.
        await tx.execute(
            "UPDATE webhook_endpoints SET disabled_reason = NULL WHERE id = $1", endpoint_id)
        await tx.execute(
            """
            UPDATE webhook_deliveries SET attempts = 0, next_attempt_at = now()
            WHERE endpoint_id = $1 AND state = 'pending'
            """,
            endpoint_id,
        )


async def delete(db: Database | Tx, endpoint_id: str) -> None:
    """Its queue goes with it (ON DELETE CASCADE)."""
    await db.execute("DELETE FROM webhook_endpoints WHERE id = $1", endpoint_id)


async def rotate(db: Database | Tx, endpoint_id: str, secret: bytes, overlap: timedelta) -> None:
    """The new secret signs from now on; the current one still does for `overlap`."""
    await db.execute(
        """
        UPDATE webhook_endpoints
        SET previous_secret = secret, previous_secret_expires_at = now() + $3,
            secret = $2, updated_at = now()
        WHERE id = $1
        """,
        endpoint_id, secret, overlap,
    )


# ---------------------------------------------------------------------------
# The outbox


async def subscribed(tx: Tx, profile_id: str, event_type: str) -> list[asyncpg.Record]:
    """The active endpoints of the profile that want `event_type`, with the
    profile's owner (payloads show resources as the owner sees them)."""
    return await tx.fetch(
        """
        SELECT w.id, p.owner_user_id FROM webhook_endpoints w
        JOIN profiles p ON p.id = w.profile_id
        WHERE w.profile_id = $1 AND w.is_active AND $2 = ANY(w.event_types)
        ORDER BY w.id
        """,
        profile_id, event_type,
    )


async def add_message(tx: Tx, message_id: str, profile_id: str, event_type: str, body: str,
                      endpoint_ids: Sequence[str]) -> None:
    await tx.execute(
        "INSERT INTO webhook_messages (id, profile_id, type, body) VALUES ($1, $2, $3, $4)",
        message_id, profile_id, event_type, body,
    )
    await tx.execute(
        """
        INSERT INTO webhook_deliveries (endpoint_id, message_id)
        SELECT e, $2 FROM unnest($1::text[]) AS e
        """,
        list(endpoint_ids), message_id,
    )


# ---------------------------------------------------------------------------
# Delivery (kalends/notify/webhook_delivery.py)


_ENDPOINT = """
    id, url, secret,
    CASE WHEN previous_secret_expires_at > now() THEN previous_secret END AS previous_secret
"""


async def claim(db: Database, endpoint_id: str, token: str, lease: timedelta
                ) -> asyncpg.Record | None:
    """Take the endpoint's delivery lease, under `token`, if it is active and no
    one else holds it; returns what delivering needs, or None."""
    return await db.fetchrow(
        f"""
        UPDATE webhook_endpoints SET lease_until = now() + $3, lease_token = $2
        WHERE id = $1 AND is_active AND (lease_until IS NULL OR lease_until < now())
        RETURNING {_ENDPOINT}
        """,
        endpoint_id, token, lease,
    )


async def attempted(db: Database, endpoint_id: str, token: str, lease: timedelta, seq: int,
                    error: str | None, wait: timedelta | None) -> asyncpg.Record | None:
    """Record an attempt (delivered when `error` is None, else due again after
    `wait`) and renew the lease, in one statement. Returns the endpoint afresh
    (a rotation changes its secrets), or None if it was disabled or deleted, or
    the lease is no longer this run's."""
    return await db.fetchrow(
        f"""
        WITH attempt AS (
            UPDATE webhook_deliveries
            SET attempts = attempts + 1, last_error = $5::text,
                state = CASE WHEN $5::text IS NULL THEN 'delivered' ELSE state END,
                delivered_at = CASE WHEN $5::text IS NULL THEN now() END,
                next_attempt_at = coalesce(now() + $6::interval, next_attempt_at)
            WHERE endpoint_id = $1 AND seq = $4
        )
        UPDATE webhook_endpoints SET lease_until = now() + $3
        WHERE id = $1 AND is_active AND lease_token = $2
        RETURNING {_ENDPOINT}
        """,
        endpoint_id, token, lease, seq, error, wait,
    )


async def disable(db: Database, endpoint_id: str, seq: int, error: str, reason: str) -> None:
    """Record the attempt that failed, and stop delivering; the queue is kept for
    when an administrator enables the endpoint again."""
    await db.execute(
        """
        WITH attempt AS (
            UPDATE webhook_deliveries SET attempts = attempts + 1, last_error = $3
            WHERE endpoint_id = $1 AND seq = $2
        )
        UPDATE webhook_endpoints
        SET is_active = false, disabled_reason = $4, lease_until = NULL, updated_at = now()
        WHERE id = $1
        """,
        endpoint_id, seq, error, reason,
    )


async def release(db: Database, endpoint_id: str, token: str) -> bool:
    """Let go of this run's lease. True if the endpoint is active and the head of
    its queue is due: a message queued meanwhile, whose own job saw the lease
    held and left it to this run (claim again). A job that finds the lease taken
    either ran before this statement, and this sees its message, or waited on
    this row and then takes the lease itself."""
    return bool(await db.fetchval(
        """
        WITH released AS (
            UPDATE webhook_endpoints SET lease_until = NULL
            WHERE id = $1 AND lease_token = $2
            RETURNING is_active
        )
        SELECT (SELECT is_active FROM released)
           AND (SELECT d.next_attempt_at <= now() FROM webhook_deliveries d
                WHERE d.endpoint_id = $1 AND d.state = 'pending'
                ORDER BY d.seq LIMIT 1)
        """,
        endpoint_id, token,
    ))


async def lease_left(db: Database, endpoint_id: str) -> timedelta | None:
    """How long another run's lease still holds; None if the endpoint is inactive,
    gone, or free."""
    left: timedelta | None = await db.fetchval(
        """
        SELECT greatest(lease_until - now(), interval '0') FROM webhook_endpoints
        WHERE id = $1 AND is_active AND lease_until > now()
        """,
        endpoint_id,
    )
    return left


async def head(db: Database, endpoint_id: str) -> asyncpg.Record | None:
    """The oldest message still to deliver to the endpoint."""
    return await db.fetchrow(
        """
        SELECT d.seq, d.message_id, d.attempts, m.body,
               greatest(d.next_attempt_at - now(), interval '0') AS wait
        FROM webhook_deliveries d JOIN webhook_messages m ON m.id = d.message_id
        WHERE d.endpoint_id = $1 AND d.state = 'pending'
        ORDER BY d.seq LIMIT 1
        """,
        endpoint_id,
    )


async def schedule_wake(tx: Tx, endpoint_id: str, wait: timedelta) -> bool:
    """Note that a job will look at the endpoint after `wait`; False if one
    already will, no later than that (then no job need be queued)."""
    return await tx.fetchval(
        """
        UPDATE webhook_endpoints SET wake_at = now() + $2
        WHERE id = $1 AND (wake_at IS NULL OR wake_at <= now() OR wake_at > now() + $2)
        RETURNING true
        """,
        endpoint_id, wait,
    ) is not None


async def prune(db: Database, older_than: timedelta) -> None:
    """Forget deliveries made more than `older_than` ago, and messages left with
    none (delivered everywhere, or their endpoints deleted); pending ones stay."""
    await db.execute(
        """
        DELETE FROM webhook_deliveries
        WHERE state = 'delivered' AND delivered_at < now() - $1::interval
        """,
        older_than,
    )
    await db.execute(
        """
        DELETE FROM webhook_messages m WHERE m.created_at < now() - $1::interval
          AND NOT EXISTS (SELECT FROM webhook_deliveries d WHERE d.message_id = m.id)
        """,
        older_than,
    )
