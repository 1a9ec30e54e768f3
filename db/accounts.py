"""Users, consumers and API keys."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import asyncpg

from db import ratelimits
from db.database import Database, Tx

# `written`: where the user's last write ended (db/replicas.py), read with the
# credential so that read-your-writes costs no round trip.
_WRITTEN = "(SELECT w.lsn::text FROM write_positions w WHERE w.user_id = c.user_id) AS written"

_OWNER_OF_KEY = f"""
    SELECT c.name AS consumer, c.user_id, u.email, u.timezone, {_WRITTEN}
    FROM api_keys k
    JOIN consumers c ON c.name = k.consumer_name
    LEFT JOIN users u ON u.id = c.user_id
    WHERE k.key_hash = $1 AND k.revoked_at IS NULL
"""

USED_EVERY_SECONDS = 60
"""How stale a key's `last_used_at` may get: it is written at most this often."""

# Part of the lookup's own statement, so that tracking use costs no round trip, and
# only when the stored time is a minute old, so that a busy key costs no write per
# request. SKIP LOCKED: a request never waits for the key's row (locked by a
# revocation or a socket's reservation); a later one writes the time instead.
# (A data-modifying WITH runs even though nothing reads its result, and must be at
# the statement's top level: hence a CTE beside the lookup, not inside it.)
_TOUCH = f"""touched AS (
    UPDATE api_keys t SET last_used_at = now()
    FROM (SELECT id FROM api_keys
          WHERE key_hash = $1 AND revoked_at IS NULL
            AND (last_used_at IS NULL
                 OR last_used_at < now() - interval '{USED_EVERY_SECONDS} seconds')
          FOR NO KEY UPDATE SKIP LOCKED) due
    WHERE t.id = due.id
)"""

_KEY_OWNER = f"WITH {_TOUCH} {_OWNER_OF_KEY}"


def _charged(owner: str, touch: str | None = None) -> str:
    """An owner lookup that also charges the consumer's rate-limit bucket in the
    same statement ($2 interval, $3 window): authentication and the limit cost
    one round trip together. `touch`: a data-modifying CTE to run beside it."""
    return f"""
    WITH {touch + "," if touch else ""} owner AS ({owner}),
    bucket AS ({ratelimits.upsert("SELECT 'consumer:' || consumer, now() + $2::interval, true"
                                  " FROM owner")})
    SELECT owner.*, bucket.allowed, bucket.ahead FROM owner LEFT JOIN bucket ON true
"""


_KEY_OWNER_CHARGED = _charged(_OWNER_OF_KEY, _TOUCH)


def _subject_owner(grant: str) -> str:
    # grant_live: whether the authorization server's grant named by an access
    # token still stands (NULL when the token names none, false when it is gone).
    return f"""
    SELECT c.name AS consumer, c.user_id, u.email, u.timezone, {_WRITTEN},
           CASE WHEN {grant}::text IS NULL THEN NULL
                ELSE coalesce((SELECT revoked_at IS NULL FROM oauth_grants
                               WHERE id = {grant}::text), false) END AS grant_live
    FROM consumers c LEFT JOIN users u ON u.id = c.user_id
    WHERE c.name = $1
"""


_SUBJECT_OWNER_CHARGED = _charged(_subject_owner("$4"))


async def subject_owner(db: Database, name: str, grant_id: str | None,
                        charge: tuple[timedelta, timedelta] | None = None
                        ) -> asyncpg.Record | None:
    """An OAuth token subject's consumer and user, as `key_owner` for a key;
    `grant_live` tells whether the grant the token names (if any) stands."""
    if charge is None:
        return await db.fetchrow(_subject_owner("$2"), name, grant_id)
    return await db.fetchrow(_SUBJECT_OWNER_CHARGED, name, *charge, grant_id)


async def key_owner(db: Database, key_hash: bytes,
                    charge: tuple[timedelta, timedelta] | None = None) -> asyncpg.Record | None:
    """The key's consumer and user; with `charge` (interval, window) also the
    outcome of charging the consumer's bucket (`allowed`, `ahead`)."""
    if charge is None:
        return await db.fetchrow(_KEY_OWNER, key_hash)
    return await db.fetchrow(_KEY_OWNER_CHARGED, key_hash, *charge)


async def insert_user(
    tx: Tx, user_id: str, email: str, display_name: str | None, timezone: str | None
) -> None:
    await tx.execute(
        "INSERT INTO users (id, email, display_name, timezone) VALUES ($1, $2, $3, $4)",
        user_id, email, display_name, timezone,
    )


async def user_by_email(db: Database | Tx, email: str) -> asyncpg.Record | None:
    return await db.fetchrow("SELECT * FROM users WHERE email = $1", email)


async def insert_consumer(tx: Database | Tx, name: str, user_id: str | None) -> None:
    await tx.execute("INSERT INTO consumers (name, user_id) VALUES ($1, $2)", name, user_id)


async def ensure_consumer(db: Database | Tx, name: str) -> None:
    """An unclaimed consumer for a name first seen as an OAuth token's subject."""
    await db.execute("INSERT INTO consumers (name) VALUES ($1) ON CONFLICT DO NOTHING", name)


async def consumer(db: Database | Tx, name: str) -> asyncpg.Record | None:
    return await db.fetchrow("SELECT * FROM consumers WHERE name = $1", name)


async def consumer_of_user(db: Database | Tx, user_id: str) -> asyncpg.Record | None:
    return await db.fetchrow(
        "SELECT * FROM consumers WHERE user_id = $1 ORDER BY created_at, name LIMIT 1", user_id
    )


async def claim_consumer(db: Database | Tx, name: str, user_id: str) -> bool:
    """Claim an unclaimed consumer (or re-claim one already the user's)."""
    status = await db.execute(
        "UPDATE consumers SET user_id = $2 WHERE name = $1 AND (user_id IS NULL OR user_id = $2)",
        name, user_id,
    )
    return status.endswith(" 1")


async def insert_key(db: Database | Tx, key_id: str, consumer_name: str, key_hash: bytes,
                     prefix: str) -> None:
    await db.execute(
        "INSERT INTO api_keys (id, consumer_name, key_hash, prefix) VALUES ($1, $2, $3, $4)",
        key_id, consumer_name, key_hash, prefix,
    )


async def keys_of_user(db: Database | Tx, user_id: str) -> list[asyncpg.Record]:
    """The keys of every consumer the user has claimed, oldest first: what may be
    shown of them (never the hash)."""
    return await db.fetch(
        """
        SELECT k.id AS key_id, k.prefix, k.consumer_name AS consumer, k.created_at,
               k.last_used_at, k.revoked_at
        FROM consumers c JOIN api_keys k ON k.consumer_name = c.name
        WHERE c.user_id = $1
        ORDER BY k.created_at, k.id
        """,
        user_id,
    )


KEYS_CHANNEL = "kalends_keys"
"""Where a revocation is announced, as it commits: the key's hash in hex (never the key)."""

# `{column}`: how $1 names the key (its ID or its hash). `target` is the key's row
# as it is once locked (so a revocation committed meanwhile is seen, and two at once
# agree on the time); `revoked` is empty when the key was revoked already, which
# then changes nothing and announces nothing. The outer query reads `notified`: a
# CTE that modifies no table runs only when read.
_REVOKE = """
    WITH target AS MATERIALIZED (
        SELECT id, revoked_at FROM api_keys WHERE {column} = $1 FOR NO KEY UPDATE
    ),
    revoked AS (
        UPDATE api_keys k SET revoked_at = now() FROM target t
        WHERE k.id = t.id AND t.revoked_at IS NULL RETURNING k.key_hash, k.revoked_at
    ),
    notified AS (SELECT count(pg_notify($2, encode(key_hash, 'hex'))) AS n FROM revoked)
    SELECT t.id AS key_id, coalesce(r.revoked_at, t.revoked_at) AS revoked_at,
           n.n AS notified
    FROM target t CROSS JOIN notified n LEFT JOIN revoked r ON true
"""
_REVOKE_BY_HASH = _REVOKE.format(column="key_hash")
_REVOKE_BY_ID = _REVOKE.format(column="id")


async def revoke_key(db: Database | Tx, key_hash: bytes) -> asyncpg.Record | None:
    """Revoke the key and, in the same statement (so only if and when it commits),
    tell every process: their sockets opened with the key close (graph_bridge/ws.py).
    Its `key_id` and `revoked_at` (as before, if it was revoked already); None if
    there is no such key."""
    return await db.fetchrow(_REVOKE_BY_HASH, key_hash, KEYS_CHANNEL)


async def revoke_key_id(db: Database | Tx, key_id: str) -> asyncpg.Record | None:
    """`revoke_key` for the key with this ID."""
    return await db.fetchrow(_REVOKE_BY_ID, key_id, KEYS_CHANNEL)


# -- live sockets per key (graph_bridge/ws.py, migration 0024) ------------------------------

LIVE_LOCK = 0x4B4C5753
"""The first half of a serve process's advisory lock (the second: its instance)."""

_LIVE_INSTANCE = f"""EXISTS (
    SELECT 1 FROM pg_locks l
    WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND l.classid = {LIVE_LOCK}::oid AND l.objid = {{instance}}::oid)"""
"""Whether the process `instance` is alive: whether a session holds its lock."""

_KEY_LOCKED = """
    SELECT k.id AS key_id, k.consumer_name AS consumer FROM api_keys k
    WHERE k.key_hash = $1 AND k.revoked_at IS NULL FOR NO KEY UPDATE
"""
_KEY_LOCKED_CHARGED = _charged(_KEY_LOCKED)

_RESERVE = f"""
    WITH others AS (
        SELECT coalesce(sum(u.sockets), 0) AS sockets,
               coalesce(sum(u.subscriptions), 0) AS subscriptions
        FROM live_sockets u
        WHERE u.key_id = $1 AND u.instance <> $2::integer
          AND {_LIVE_INSTANCE.format(instance='u.instance')}
    )
    INSERT INTO live_sockets AS u (key_id, instance, sockets, subscriptions)
    SELECT $1, $2, $3::integer, $4::integer FROM others
    WHERE ($5::boolean OR others.sockets + $3::integer <= $6::integer)
      AND ($7::boolean OR others.subscriptions + $4::integer <= $8::integer)
    ON CONFLICT (key_id, instance) DO UPDATE
    SET sockets = excluded.sockets, subscriptions = excluded.subscriptions
    RETURNING true
"""


async def instance(db: Database) -> int:
    """A number of its own for a serve process."""
    return int(await db.fetchval("SELECT nextval('live_instances')"))


async def hold_instance(conn: asyncpg.Connection, instance: int, *, timeout: float) -> None:
    """Take the process's lock on its own connection `conn` (it is alive while
    `conn` is). A session of this process left from before (its connection lost
    unnoticed by the server) is ended first, rather than waited for."""
    await conn.execute(
        f"""
        SELECT pg_terminate_backend(l.pid) FROM pg_locks l
        WHERE l.locktype = 'advisory' AND l.objsubid = 2 AND l.pid <> pg_backend_pid()
          AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
          AND l.classid = {LIVE_LOCK}::oid AND l.objid = $1::integer::oid
        """,
        instance, timeout=timeout,
    )
    await conn.execute(f"SELECT pg_advisory_lock({LIVE_LOCK}, $1::integer)", instance,
                       timeout=timeout)


async def forget_dead_instances(db: Database | asyncpg.Connection, instance: int) -> None:
    """Delete the rows of processes that are gone (they count for nothing already)."""
    await db.execute(
        f"""
        DELETE FROM live_sockets u
        WHERE u.instance <> $1 AND NOT {_LIVE_INSTANCE.format(instance='u.instance')}
        """,
        instance,
    )


async def reserve_live(
    db: Database, key_hash: bytes, instance: int, held: tuple[int, int],
    wanted: tuple[int, int], most: tuple[int, int],
    charge: tuple[timedelta, timedelta] | None = None,
) -> dict[str, Any] | None:
    """Under the key's row lock (so that the key's reservations, on every process,
    and its revocation, come one at a time): check the key still stands, charge its
    consumer with `charge` (interval, window), and, if allowed, make this process's
    row `held` (sockets, subscriptions) plus `wanted`, if the key's live total stays
    within `most` for what grows.

    None: the key is revoked (or gone). Else `key_id`, `allowed` and `ahead` (the
    charge; None without one) and `reserved`."""
    async with db.transaction() as tx:
        if charge is None:
            row = await tx.fetchrow(_KEY_LOCKED, key_hash)
        else:
            row = await tx.fetchrow(_KEY_LOCKED_CHARGED, key_hash, *charge)
        if row is None:
            return None
        result: dict[str, Any] = dict(row)
        result.setdefault("allowed", None)
        result.setdefault("ahead", None)
        reserved = wanted == (0, 0)  # a charge only: nothing to reserve
        if result["allowed"] is not False and not reserved:
            sockets, subscriptions = held[0] + wanted[0], held[1] + wanted[1]
            reserved = bool(await tx.fetchval(
                _RESERVE, row["key_id"], instance, sockets, subscriptions,
                wanted[0] <= 0, most[0], wanted[1] <= 0, most[1]))
        result["reserved"] = reserved
        return result


async def publish_live(db: Database, key_id: str, instance: int, held: tuple[int, int]
                       ) -> None:
    """What this process now holds of the key (after releases, or to restore rows
    forgotten while it seemed gone): no limit is checked."""
    if held == (0, 0):
        await db.execute("DELETE FROM live_sockets WHERE key_id = $1 AND instance = $2",
                         key_id, instance)
        return
    await db.execute(
        """
        INSERT INTO live_sockets AS u (key_id, instance, sockets, subscriptions)
        SELECT $1, $2::integer, $3::integer, $4::integer
        WHERE EXISTS (SELECT 1 FROM api_keys WHERE id = $1)
        ON CONFLICT (key_id, instance) DO UPDATE
        SET sockets = excluded.sockets, subscriptions = excluded.subscriptions
        """,
        key_id, instance, *held,
    )


async def revoked_keys(db: Database | asyncpg.Connection, key_hashes: list[bytes]
                       ) -> list[bytes]:
    """Those of the key hashes that no longer authenticate (revoked, or gone)."""
    rows = await db.fetch(
        """
        SELECT h FROM unnest($1::bytea[]) AS h
        WHERE NOT EXISTS (SELECT 1 FROM api_keys k WHERE k.key_hash = h
                                                   AND k.revoked_at IS NULL)
        """,
        key_hashes,
    )
    return [bytes(r[0]) for r in rows]
