"""The authorization server's rows: signing keys, registered clients, grants
and their refresh tokens. A single-use secret (a code redeemed once, a refresh
token exchanged once) is found with its row locked (`find_code`,
`find_refresh_token`) and spent in the same transaction (`spend_code`,
`spend_refresh_token`) only once the request has been checked, so that two
requests racing with the same secret cannot both win and a refused request
spends nothing."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import asyncpg
import orjson

from db.database import Database, Tx

Conn = Database | Tx


# -- signing keys -------------------------------------------------------------------


async def active_key(db: Conn) -> asyncpg.Record | None:
    return await db.fetchrow("SELECT * FROM oauth_signing_keys WHERE retired_at IS NULL")


async def add_key(tx: Tx, kid: str, private_key: bytes, public_jwk: dict[str, Any], *,
                  retire_active: bool) -> list[str]:
    """Insert a key as the active one; with `retire_active`, the current one
    retires first (returned). Without it, a concurrent first start that already
    added one wins and nothing changes (unique index on the active key)."""
    retired: list[str] = []
    if retire_active:
        rows = await tx.fetch(
            "UPDATE oauth_signing_keys SET retired_at = now() WHERE retired_at IS NULL "
            "RETURNING kid")
        retired = [r["kid"] for r in rows]
    await tx.execute(
        "INSERT INTO oauth_signing_keys (kid, private_key, public_jwk) VALUES ($1, $2, $3) "
        "ON CONFLICT DO NOTHING", kid, private_key, orjson.dumps(public_jwk).decode())
    return retired


async def published_keys(db: Conn, keep_retired: timedelta) -> list[dict[str, Any]]:
    """The public keys of the active key and of those retired within `keep_retired`."""
    rows = await db.fetch(
        "SELECT public_jwk FROM oauth_signing_keys "
        "WHERE retired_at IS NULL OR retired_at > now() - $1::interval "
        "ORDER BY created_at DESC", keep_retired)
    return [_json(r["public_jwk"]) for r in rows]


async def drop_retired(db: Conn, older_than: timedelta) -> None:
    await db.execute(
        "DELETE FROM oauth_signing_keys WHERE retired_at < now() - $1::interval", older_than)


# -- clients ------------------------------------------------------------------------


async def insert_client(db: Conn, client_id: str, secret_hash: bytes | None,
                        metadata: dict[str, Any]) -> None:
    await db.execute(
        "INSERT INTO oauth_clients (client_id, secret_hash, metadata) VALUES ($1, $2, $3)",
        client_id, secret_hash, orjson.dumps(metadata).decode())


async def client(db: Conn, client_id: str) -> tuple[bytes | None, dict[str, Any]] | None:
    row = await db.fetchrow(
        "SELECT secret_hash, metadata FROM oauth_clients WHERE client_id = $1", client_id)
    if row is None:
        return None
    secret = row["secret_hash"]
    return (bytes(secret) if secret is not None else None), _json(row["metadata"])


# -- grants and refresh tokens ------------------------------------------------------


async def insert_grant(db: Conn, grant_id: str, *, client_id: str, consumer: str, scope: str,
                       resource: str, redirect_uri: str, code_hash: bytes,
                       code_challenge: str, code_ttl: timedelta) -> None:
    await db.execute(
        "INSERT INTO oauth_grants (id, client_id, consumer_name, scope, resource, redirect_uri,"
        " code_hash, code_challenge, code_expires_at)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, now() + $9::interval)",
        grant_id, client_id, consumer, scope, resource, redirect_uri, code_hash,
        code_challenge, code_ttl)


async def find_code(tx: Tx, code_hash: bytes) -> tuple[str, asyncpg.Record | None]:
    """The grant of a code, locked until the transaction ends, and what presenting
    the code now is: ("ok", grant), ("reused", grant) for a code redeemed before,
    ("expired"|"revoked", grant), or ("unknown", None). Nothing is spent here."""
    row = await tx.fetchrow(
        "SELECT *, id AS grant_id, code_expires_at < now() AS expired FROM oauth_grants "
        "WHERE code_hash = $1 "
        "FOR UPDATE", code_hash)
    return _verdict(row, "redeemed_at"), row


async def spend_code(tx: Tx, grant_id: str) -> None:
    """Mark the code of a grant found by `find_code` (still locked) redeemed."""
    await tx.execute("UPDATE oauth_grants SET redeemed_at = now() WHERE id = $1", grant_id)


async def revoke_grant(db: Conn, grant_id: str, reason: str) -> None:
    await db.execute(
        "UPDATE oauth_grants SET revoked_at = now(), revoked_reason = $2 "
        "WHERE id = $1 AND revoked_at IS NULL", grant_id, reason)


async def insert_refresh_token(db: Conn, token_hash: bytes, grant_id: str, scope: str,
                               ttl: timedelta) -> None:
    await db.execute(
        "INSERT INTO oauth_refresh_tokens (token_hash, grant_id, scope, expires_at)"
        " VALUES ($1, $2, $3, now() + $4::interval)", token_hash, grant_id, scope, ttl)


async def find_refresh_token(tx: Tx, token_hash: bytes
                             ) -> tuple[str, asyncpg.Record | None]:
    """A refresh token and its grant, both locked until the transaction ends, and
    what presenting the token now is: ("ok", row), ("reused", row) for one
    exchanged before, ("expired"|"revoked", row), or ("unknown", None); the row
    carries the grant's client, consumer, resource and revocation. Nothing is
    spent here."""
    row = await tx.fetchrow(
        "SELECT t.token_hash, t.grant_id, t.scope, t.used_at, t.expires_at < now() AS expired,"
        " g.client_id, g.consumer_name, g.resource, g.revoked_at"
        " FROM oauth_refresh_tokens t JOIN oauth_grants g ON g.id = t.grant_id"
        " WHERE t.token_hash = $1 FOR UPDATE OF t, g", token_hash)
    return _verdict(row, "used_at"), row


async def spend_refresh_token(tx: Tx, token_hash: bytes) -> None:
    """Mark a refresh token found by `find_refresh_token` (still locked) exchanged."""
    await tx.execute(
        "UPDATE oauth_refresh_tokens SET used_at = now() WHERE token_hash = $1", token_hash)


def _verdict(row: asyncpg.Record | None, used: str) -> str:
    """What a single-use secret's row (locked) says of presenting it now."""
    if row is None:
        return "unknown"
    if row["revoked_at"] is not None:
        return "revoked"
    if row[used] is not None:
        return "reused"
    return "expired" if row["expired"] else "ok"


async def grant_of_refresh_token(db: Conn, token_hash: bytes) -> str | None:
    value = await db.fetchval(
        "SELECT grant_id FROM oauth_refresh_tokens WHERE token_hash = $1", token_hash)
    return str(value) if value is not None else None


async def grant_client(db: Conn, grant_id: str) -> str | None:
    value = await db.fetchval("SELECT client_id FROM oauth_grants WHERE id = $1", grant_id)
    return str(value) if value is not None else None


async def forget_expired(db: Conn) -> None:
    """Housekeeping: codes never redeemed and refresh tokens past their expiry."""
    await db.execute("DELETE FROM oauth_refresh_tokens WHERE expires_at < now() - interval '1 day'")
    await db.execute(
        "DELETE FROM oauth_grants g WHERE redeemed_at IS NULL AND code_expires_at < now() - "
        "interval '1 day'")


def _json(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else orjson.loads(value)
