"""API-key authentication: keys are random, shown once, stored as SHA-256."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING

from db import accounts
from kalends.errors import ApiError

if TYPE_CHECKING:
    from db.database import Database

KEY_PREFIX = "kal_"


@dataclass(frozen=True)
class Viewer:
    user_id: str
    consumer: str
    email: str
    timezone: str | None


def new_key() -> tuple[str, bytes]:
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    return key, hash_key(key)


def hash_key(key: str) -> bytes:
    # Keys carry 256 random bits, so a fast unsalted hash is safe: there is
    # nothing to brute-force, and lookup stays one indexed equality.
    return hashlib.sha256(key.encode()).digest()


def _unauthenticated(message: str) -> ApiError:
    return ApiError("not_authenticated", message)


async def authenticate_key(db: Database, authorization: str | None) -> Viewer:
    if not authorization:
        raise _unauthenticated("Send your API key as `Authorization: Bearer <key>`.")
    scheme, _, key = authorization.partition(" ")
    key = key.strip()
    if scheme.lower() != "bearer" or not key or len(key) > 512:
        raise _unauthenticated("The Authorization header must be `Bearer <key>`.")
    row = await accounts.key_owner(db, hash_key(key))
    if row is None:
        raise _unauthenticated("The API key is unknown or revoked.")
    if row["user_id"] is None:
        raise ApiError(
            "consumer_not_claimed",
            f"Consumer `{row['consumer']}` has not been claimed by a user yet.",
        )
    return Viewer(row["user_id"], row["consumer"], row["email"], row["timezone"])
