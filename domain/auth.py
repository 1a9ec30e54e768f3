"""API-key authentication: keys are random, shown once, stored as SHA-256."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from core.errors import ApiError
from db import accounts
from db.replicas import lsn
from domain.config import Rate
from domain.ratelimit import Decision

if TYPE_CHECKING:
    from db.database import Database

KEY_PREFIX = "kal_"


@dataclass(frozen=True)
class Viewer:
    user_id: str
    consumer: str
    email: str
    timezone: str | None
    written: int | None = field(default=None, compare=False)
    """Where the user's last write ended in the primary's WAL, as read with the
    credential (db/replicas.py): a read replica serves them once it is past it."""


def new_key() -> tuple[str, bytes]:
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    return key, hash_key(key)


def hash_key(key: str) -> bytes:
    # Keys carry 256 random bits, so a fast unsalted hash is safe: there is
    # nothing to brute-force, and lookup stays one indexed equality.
    return hashlib.sha256(key.encode()).digest()


def _unauthenticated(message: str) -> ApiError:
    return ApiError("not_authenticated", message)


@dataclass(frozen=True)
class Caller:
    """Who a valid key belongs to, and what the request cost of its rate limit."""

    consumer: str
    viewer: Viewer | None
    """None while the consumer is unclaimed."""
    limit: Decision | None

    @classmethod
    def of(cls, row: Any, limit: Decision | None) -> Caller:
        """From a lookup row (consumer, user_id, email, timezone)."""
        viewer = None
        if row["user_id"] is not None:
            viewer = Viewer(row["user_id"], row["consumer"], row["email"], row["timezone"],
                            lsn(row["written"]))
        return cls(row["consumer"], viewer, limit)

    def claimed(self) -> Viewer:
        if self.viewer is None:
            raise ApiError(
                "consumer_not_claimed",
                f"Consumer `{self.consumer}` has not been claimed by a user yet.",
            )
        return self.viewer


async def authenticate_key(db: Database, authorization: str | None, rate: Rate | None = None
                           ) -> Caller:
    """Look the key up and, with `rate`, charge its consumer: one statement."""
    if not authorization:
        raise _unauthenticated("Send your API key as `Authorization: Bearer <key>`.")
    scheme, _, key = authorization.partition(" ")
    key = key.strip()
    if scheme.lower() != "bearer" or not key or len(key) > 512:
        raise _unauthenticated("The Authorization header must be `Bearer <key>`.")
    charge = None if rate is None else (rate.interval, rate.window)
    row = await accounts.key_owner(db, hash_key(key), charge)
    if row is None:
        raise _unauthenticated("The API key is unknown or revoked.")
    return Caller.of(row, None if rate is None else Decision.from_row(rate, row))
