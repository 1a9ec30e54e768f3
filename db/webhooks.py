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
        # Lanes in flight finish on their own; every other is due now.
        await tx.execute(
            "UPDATE webhook_lanes SET due_at = now() WHERE endpoint_id = $1"
            " AND lease_token IS NULL",
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


_LANE_LOCK = "hashtextextended('kalends:webhook-lane:' || {e} || ' ' || {r}, 0)"
"""The advisory lock naming one lane (an endpoint and a resource; webhook_finish in
migration 0019 names it alike): writers hold it shared while they queue into the
lane, a sender exclusively to drop it emptied."""


async def add_message(tx: Tx, message_id: str, profile_id: str, event_type: str, body: str,
                      resource_id: str, endpoint_ids: Sequence[str]) -> None:
    """Queue the message for each endpoint, in the lane of `resource_id` (the
    event it is about), which is made if it has none."""
    endpoints = list(endpoint_ids)
    # Shared: writers never wait for each other; held to the commit, so a sender
    # cannot drop a lane this transaction counts on (`finish`).
    await tx.execute(
        f"SELECT pg_advisory_xact_lock_shared({_LANE_LOCK.format(e='e', r='$2')})"
        " FROM unnest($1::text[]) AS e",
        endpoints, resource_id,
    )
    await tx.execute(
        """
        INSERT INTO webhook_lanes (endpoint_id, resource_id)
        SELECT e, $2 FROM unnest($1::text[]) AS e
        ON CONFLICT DO NOTHING
        """,
        endpoints, resource_id,
    )
    await tx.execute(
        "INSERT INTO webhook_messages (id, profile_id, type, body) VALUES ($1, $2, $3, $4)",
        message_id, profile_id, event_type, body,
    )
    await tx.execute(
        """
        INSERT INTO webhook_deliveries (endpoint_id, message_id, resource_id)
        SELECT e, $2, $3 FROM unnest($1::text[]) AS e
        """,
        endpoints, message_id, resource_id,
    )


# ---------------------------------------------------------------------------
# Delivery (domain/notify/webhook_delivery.py)


_ENDPOINT = """
    id, url, secret,
    CASE WHEN previous_secret_expires_at > now() THEN previous_secret END AS previous_secret
"""


async def claim(db: Database, endpoint_id: str, token: str, lease: timedelta, *,
                bound: int, most: int) -> tuple[asyncpg.Record | None, list[str]]:
    """Lease up to `most` of the endpoint's due lanes to `token`, the oldest due
    first, keeping no more than `bound` leased at once across every process
    (webhook_claim, migration 0019). Returns what sending needs (None if the
    endpoint is inactive or gone) and the resources of the lanes leased."""
    row = await db.fetchrow(
        f"""
        SELECT {_ENDPOINT}, ARRAY(SELECT webhook_claim($1, $2, $3, $4, $5)) AS lanes
        FROM webhook_endpoints WHERE id = $1 AND is_active
        """,
        endpoint_id, token, lease, bound, most,
    )
    return row, list(row["lanes"]) if row is not None else []


async def head(db: Database, endpoint_id: str, resource_id: str) -> asyncpg.Record | None:
    """The oldest message of the lane still to deliver."""
    return await db.fetchrow(
        """
        SELECT d.seq, d.message_id, d.attempts, m.body
        FROM webhook_deliveries d JOIN webhook_messages m ON m.id = d.message_id
        WHERE d.endpoint_id = $1 AND d.resource_id = $2 AND d.state = 'pending'
        ORDER BY d.seq LIMIT 1
        """,
        endpoint_id, resource_id,
    )


async def attempted(db: Database, endpoint_id: str, resource_id: str, token: str,
                    lease: timedelta, seq: int, error: str | None, wait: timedelta | None
                    ) -> asyncpg.Record | None:
    """Record an attempt, in one statement: delivered when `error` is None (the
    lane's lease is renewed for its next message), else due again after `wait`
    (the lane is let go until then). Returns the endpoint afresh (a rotation
    changes its secrets) if it is active and the lane was still this run's, with
    the lane's next message as `next_seq`, `next_message_id`, `next_attempts`,
    `next_body` (NULL if none is visible yet: `finish` looks once more)."""
    return await db.fetchrow(
        f"""
        WITH attempt AS (
            UPDATE webhook_deliveries
            SET attempts = attempts + 1, last_error = $6::text,
                state = CASE WHEN $6::text IS NULL THEN 'delivered' ELSE state END,
                delivered_at = CASE WHEN $6::text IS NULL THEN now() END,
                next_attempt_at = coalesce(now() + $7::interval, next_attempt_at)
            WHERE endpoint_id = $1 AND seq = $5
        ), lane AS (
            UPDATE webhook_lanes
            SET due_at = now() + coalesce($7::interval, $4::interval),
                lease_token = CASE WHEN $6::text IS NULL THEN lease_token END
            WHERE endpoint_id = $1 AND resource_id = $2 AND lease_token = $3
            RETURNING 1
        )
        SELECT {_ENDPOINT}, n.seq AS next_seq, n.message_id AS next_message_id,
               n.attempts AS next_attempts, n.body AS next_body
        FROM webhook_endpoints
        LEFT JOIN LATERAL (
            -- This statement does not see its own update: the next is after $5.
            SELECT d.seq, d.message_id, d.attempts, m.body
            FROM webhook_deliveries d JOIN webhook_messages m ON m.id = d.message_id
            WHERE $6::text IS NULL AND d.endpoint_id = $1 AND d.resource_id = $2
              AND d.state = 'pending' AND d.seq > $5
            ORDER BY d.seq LIMIT 1
        ) n ON true
        WHERE id = $1 AND is_active AND EXISTS (SELECT FROM lane)
        """,
        endpoint_id, resource_id, token, lease, seq, error, wait,
    )


async def disable(db: Database, endpoint_id: str, resource_id: str, token: str, seq: int,
                  error: str, reason: str) -> None:
    """Record the attempt that failed, let go of its lane, and stop delivering;
    the queues are kept for when an administrator enables the endpoint again."""
    await db.execute(
        """
        WITH attempt AS (
            UPDATE webhook_deliveries SET attempts = attempts + 1, last_error = $5
            WHERE endpoint_id = $1 AND seq = $4
        ), lane AS (
            UPDATE webhook_lanes SET lease_token = NULL, due_at = now()
            WHERE endpoint_id = $1 AND resource_id = $2 AND lease_token = $3
        )
        UPDATE webhook_endpoints
        SET is_active = false, disabled_reason = $6, updated_at = now()
        WHERE id = $1
        """,
        endpoint_id, resource_id, token, seq, error, reason,
    )


async def release(db: Database, endpoint_id: str, resource_id: str, token: str) -> bool:
    """Let go of this run's lease on the lane, due at once (so enabling the
    endpoint again resumes it); False if the lease was no longer this run's."""
    return await db.fetchval(
        """
        UPDATE webhook_lanes SET lease_token = NULL, due_at = now()
        WHERE endpoint_id = $1 AND resource_id = $2 AND lease_token = $3
        RETURNING true
        """,
        endpoint_id, resource_id, token,
    ) is not None


_RETRY_DROP = timedelta(seconds=1)
"""How soon a lane is looked at again when a writer was adding to it as it emptied."""


async def finish(db: Database, endpoint_id: str, resource_id: str, token: str,
                 lease: timedelta) -> asyncpg.Record | None:
    """The lane has no message left that this run saw: drop it, unless one came
    meanwhile, and lease the endpoint's next due lane in its place (webhook_finish,
    migration 0019). Returns the lane to go on with: `resource_id`, the endpoint
    afresh, and the lane's head as `seq`, `message_id`, `attempts`, `body` (NULL
    when this statement began too early to see it: finish again); or None if
    nothing is due, or this lane is no longer this run's."""
    return await db.fetchrow(
        f"""
        SELECT f.resource_id, {_ENDPOINT}, h.seq, h.message_id, h.attempts, h.body
        FROM webhook_finish($1, $2, $3, $4, $5) AS f(resource_id)
        JOIN webhook_endpoints ON id = $1 AND is_active
        LEFT JOIN LATERAL (
            SELECT d.seq, d.message_id, d.attempts, m.body
            FROM webhook_deliveries d JOIN webhook_messages m ON m.id = d.message_id
            WHERE d.endpoint_id = $1 AND d.resource_id = f.resource_id
              AND d.state = 'pending'
            ORDER BY d.seq LIMIT 1
        ) h ON true
        WHERE f.resource_id IS NOT NULL
        """,
        endpoint_id, resource_id, token, lease, _RETRY_DROP,
    )


async def next_due(db: Database, endpoint_id: str) -> timedelta | None:
    """How long until the endpoint's next lane comes due (a retry, or the end of a
    lease whose sender may have died); None if it is inactive or none waits."""
    left: timedelta | None = await db.fetchval(
        """
        SELECT min(l.due_at) - now() FROM webhook_lanes l
        JOIN webhook_endpoints w ON w.id = l.endpoint_id AND w.is_active
        WHERE l.endpoint_id = $1 AND l.due_at > now()
        """,
        endpoint_id,
    )
    return left


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
