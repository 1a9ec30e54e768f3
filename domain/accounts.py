"""Operator actions behind `kalends admin`: users, consumers, keys, organizations.

Each user is created with an owned default organization, a default personal
calendar and a claimed consumer, in one transaction.
"""

from __future__ import annotations

import re
import zoneinfo
from datetime import datetime
from typing import Any

import asyncpg

from core.errors import AdminError
from db import accounts, calendars, organizations
from db.database import Database, Tx
from domain import ids, times
from domain.auth import KEY_PREFIX, hash_key, new_key

_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
_HANDLE = re.compile(r"^[A-Za-z0-9_.-]{3,64}$")
CONSUMER_NAME = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
"""A consumer's name (docs/http.md, "Authentication and accounts"); the database checks the same
pattern."""
ROLES = ("owner", "admin", "member")
_SHOWN_KEY_CHARACTERS = len(KEY_PREFIX) + 6
"""How much of a key `list-keys` shows (its `prefix`): enough to tell a user's keys
apart, a small part of its 256 random bits (36); the database checks the shape."""


def _check_email(email: str) -> str:
    if not _EMAIL.match(email) or len(email) > 320:
        raise AdminError(f"not an email address: {email!r}")
    return email


def _check_timezone(tz: str | None) -> str | None:
    if tz is None:
        return None
    try:
        zoneinfo.ZoneInfo(tz)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError) as exc:
        raise AdminError(f"not an IANA time zone: {tz!r}") from exc
    return tz


async def _add_key(db: Database | Tx, consumer: str) -> str:
    """A new key for the consumer: stored as its hash and its first characters, and
    returned, to be shown this once."""
    key, key_hash = new_key()
    await accounts.insert_key(db, ids.new_id("key"), consumer, key_hash,
                              key[:_SHOWN_KEY_CHARACTERS])
    return key


def _consumer_name_for(email: str) -> str:
    local = re.sub(r"[^A-Za-z0-9_-]", "-", email.split("@", 1)[0])[:90]
    return f"{local}-{ids.new_id('usr')[-8:]}"


async def create_user(
    db: Database, email: str, name: str | None = None, timezone: str | None = None
) -> dict[str, Any]:
    email = _check_email(email)
    timezone = _check_timezone(timezone)
    user_id, org_id, cal_id = ids.new_id("usr"), ids.new_id("org"), ids.new_id("cal")
    consumer = _consumer_name_for(email)
    try:
        async with db.transaction() as tx:
            await accounts.insert_user(tx, user_id, email, name, timezone)
            await organizations.insert(tx, org_id, name or email, None)
            await organizations.add_member(tx, org_id, user_id, "owner", is_default=True)
            await calendars.insert(tx, cal_id, user_id, "Personal", is_default=True)
            await accounts.insert_consumer(tx, consumer, user_id)
            key = await _add_key(tx, consumer)
    except asyncpg.UniqueViolationError as exc:
        raise AdminError(f"a user with email {email!r} already exists") from exc
    return {
        "email": email, "display_name": name, "organization_id": org_id,
        "calendar_id": cal_id, "consumer": consumer, "api_key": key,
    }


async def find_user(db: Database, email: str) -> asyncpg.Record:
    """The user with this email, or AdminError."""
    row = await accounts.user_by_email(db, email)
    if row is None:
        raise AdminError(f"no user with email {email!r}")
    return row


async def create_key(db: Database, email: str) -> dict[str, Any]:
    user = await find_user(db, email)
    consumer = await accounts.consumer_of_user(db, user["id"])
    if consumer is None:  # a user whose consumer was removed gets a fresh one
        name = _consumer_name_for(email)
        await accounts.insert_consumer(db, name, user["id"])
    else:
        name = consumer["name"]
    return {"consumer": name, "api_key": await _add_key(db, name)}


async def create_consumer(db: Database, name: str) -> dict[str, Any]:
    if not CONSUMER_NAME.match(name):
        raise AdminError("a consumer name is 1 to 128 letters, digits, '_' or '-'")
    try:
        async with db.transaction() as tx:
            await accounts.insert_consumer(tx, name, None)
            key = await _add_key(tx, name)
    except asyncpg.UniqueViolationError as exc:
        raise AdminError(f"consumer {name!r} already exists") from exc
    return {"consumer": name, "api_key": key}


async def claim_consumer(db: Database, name: str, email: str) -> dict[str, Any]:
    user = await find_user(db, email)
    if await accounts.consumer(db, name) is None:
        raise AdminError(f"no consumer named {name!r} (an OAuth token's subject becomes "
                         "one at its first call to /mcp)")
    if not await accounts.claim_consumer(db, name, user["id"]):
        raise AdminError(f"consumer {name!r} is already claimed by another user")
    return {"consumer": name, "email": user["email"]}


async def create_organization(
    db: Database, name: str, owner_email: str, handle: str | None = None
) -> dict[str, Any]:
    if not name.strip():
        raise AdminError("an organization needs a name")
    if handle is not None and not _HANDLE.match(handle):
        raise AdminError("a handle is 3 to 64 letters, digits, '_', '.' or '-'")
    owner = await find_user(db, owner_email)
    org_id = ids.new_id("org")
    try:
        async with db.transaction() as tx:
            await organizations.insert(tx, org_id, name, handle)
            await organizations.add_member(tx, org_id, owner["id"], "owner")
    except asyncpg.UniqueViolationError as exc:
        raise AdminError(f"organization handle {handle!r} is taken") from exc
    return {"organization_id": org_id}


async def add_member(db: Database, organization: str, email: str, role: str) -> dict[str, Any]:
    if role not in ROLES:
        raise AdminError(f"role must be one of {', '.join(ROLES)}")
    if not ids.is_valid("org", organization):
        raise AdminError(f"not an organization ID: {organization!r}")
    org_id = organization.lower()
    if not await organizations.exists(db, org_id):
        raise AdminError(f"no organization {org_id}")
    user = await find_user(db, email)
    current = await organizations.membership(db, org_id, user["id"])
    if current is not None and current["is_default"] and role != "owner":
        raise AdminError("a user stays the owner of their default organization")
    await organizations.add_member(db, org_id, user["id"], role)
    return {"organization_id": org_id, "email": user["email"], "role": role}


async def create_calendar(db: Database, email: str, name: str) -> dict[str, Any]:
    if not name.strip():
        raise AdminError("a calendar needs a name")
    user = await find_user(db, email)
    cal_id = ids.new_id("cal")
    await calendars.insert(db, cal_id, user["id"], name)
    return {"calendar_id": cal_id}


async def list_keys(db: Database, email: str) -> dict[str, Any]:
    """The keys of the user's consumers, oldest first: what identifies each one,
    never the key or its hash (`prefix`: None for a key made before it was kept)."""
    user = await find_user(db, email)
    return {"keys": [_shown_key(row) for row in await accounts.keys_of_user(db, user["id"])]}


def _shown_key(row: asyncpg.Record) -> dict[str, Any]:
    return {
        "key_id": row["key_id"], "prefix": row["prefix"], "consumer": row["consumer"],
        "created_at": times.utc_text(row["created_at"]),
        "last_used_at": _utc_or_none(row["last_used_at"]),
        "revoked_at": _utc_or_none(row["revoked_at"]),
    }


def _utc_or_none(instant: datetime | None) -> str | None:
    return None if instant is None else times.utc_text(instant)


async def revoke_key(db: Database, key_id: str | None = None, api_key: str | None = None
                     ) -> dict[str, Any]:
    """Revoke the key named by its ID (as `list_keys` shows it) or by the key itself;
    a key revoked already stays as it was, with the time it was revoked. The commit
    also tells every serve process, which closes the key's GraphQL sockets with 4403
    (graph_bridge/ws.py; docs/graphql.md)."""
    if key_id is not None:
        row = await _revoke_by_id(db, key_id)
    else:
        row = await _revoke_by_key(db, api_key)
    return {"key_id": row["key_id"], "revoked_at": times.utc_text(row["revoked_at"])}


async def _revoke_by_id(db: Database, key_id: str) -> asyncpg.Record:
    if not ids.is_valid("key", key_id):
        raise AdminError(f"--key-id {key_id!r} is not a key_ ID")
    row = await accounts.revoke_key_id(db, key_id.lower())
    if row is None:
        raise AdminError(f"no API key {key_id.lower()}")
    return row


async def _revoke_by_key(db: Database, api_key: str | None) -> asyncpg.Record:
    if not api_key:
        raise AdminError("no API key given")
    row = await accounts.revoke_key(db, hash_key(api_key))
    if row is None:
        raise AdminError("no API key matches")
    return row
