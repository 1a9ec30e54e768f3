"""Users, consumers and API keys."""

from __future__ import annotations

from datetime import timedelta

import asyncpg

from db import ratelimits
from db.database import Database, Tx

_KEY_OWNER = """
    SELECT c.name AS consumer, c.user_id, u.email, u.timezone
    FROM api_keys k
    JOIN consumers c ON c.name = k.consumer_name
    LEFT JOIN users u ON u.id = c.user_id
    WHERE k.key_hash = $1 AND k.revoked_at IS NULL
"""


def _charged(owner: str) -> str:
    """An owner lookup that also charges the consumer's rate-limit bucket in the
    same statement ($2 interval, $3 window): authentication and the limit cost
    one round trip together."""
    return f"""
    WITH owner AS ({owner}),
    bucket AS ({ratelimits.upsert("SELECT 'consumer:' || consumer, now() + $2::interval, true"
                                  " FROM owner")})
    SELECT owner.*, bucket.allowed, bucket.ahead FROM owner LEFT JOIN bucket ON true
"""


_KEY_OWNER_CHARGED = _charged(_KEY_OWNER)


def _subject_owner(grant: str) -> str:
    # grant_live: whether the authorization server's grant named by an access
    # token still stands (NULL when the token names none, false when it is gone).
    return f"""
    SELECT c.name AS consumer, c.user_id, u.email, u.timezone,
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


async def insert_key(db: Database | Tx, key_id: str, consumer_name: str, key_hash: bytes) -> None:
    await db.execute(
        "INSERT INTO api_keys (id, consumer_name, key_hash) VALUES ($1, $2, $3)",
        key_id, consumer_name, key_hash,
    )


async def revoke_key(db: Database | Tx, key_hash: bytes) -> bool:
    status = await db.execute(
        "UPDATE api_keys SET revoked_at = now() WHERE key_hash = $1 AND revoked_at IS NULL",
        key_hash,
    )
    return status.endswith(" 1")
