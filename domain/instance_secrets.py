"""Per-deployment secrets: the key cursors are signed with (`cursor`) and the
consent page's CSRF key (`oauth_csrf`), one of each shared by every process.

They are sealed with the service key (`KALENDS_SECRET_KEY`, else
the key file in `KALENDS_DATA_DIR`; domain/connected/vault.py) like every
other secret, so that a backup of the database carries none of them in clear.

Migrations 0001 and 0008 write them in clear (the database never holds the
service key), and releases before 0013 kept them so. `get` seals such a row
the first time it reads it, at service start, keeping its value: cursors and
consent pages issued before still verify. Processes starting at once race
harmlessly: only a row still in clear is sealed, and each reads back the one
stored.

A sealed secret that the service key cannot open stops the start
(`SealedWithAnotherKey`) rather than being replaced. The key was changed or
lost (KALENDS_SECRET_KEY unset, another data directory); every other sealed
secret (webhook secrets, signing keys, connected accounts) is as unreadable,
and new instance secrets would hide that until those fail one by one.
"""

from __future__ import annotations

import secrets

import asyncpg

from db import secrets as store
from db.database import Database
from domain.connected.vault import KEY_FILE, Vault, VaultError

# Bytes of a secret made here (32: as much as the HMAC-SHA256 it keys can use).
_SIZE = 32


class SealedWithAnotherKey(Exception):
    """An instance secret that this service key cannot open."""


async def get(db: Database, vault: Vault, name: str) -> bytes:
    """The secret `name`, sealed first if it is still in clear, made if missing."""
    row = await store.read(db, name)
    if row is not None and row["sealed"]:
        return _open(vault, name, row)
    if row is None:
        # Never so far (migrations made both); a new secret signed nothing yet.
        await store.insert_sealed(db, name, _seal(vault, secrets.token_bytes(_SIZE)))
    else:
        await store.seal_in_place(db, name, _seal(vault, bytes(row["value"])))
    # What this process stored, or what another one starting beside it stored first.
    row = await store.read(db, name)
    assert row is not None and row["sealed"], name
    return _open(vault, name, row)


def _seal(vault: Vault, value: bytes) -> bytes:
    return vault.seal(value.hex())


def _open(vault: Vault, name: str, row: asyncpg.Record) -> bytes:
    try:
        return bytes.fromhex(vault.open(bytes(row["value"])))
    except VaultError:
        raise SealedWithAnotherKey(
            f"the database's secret {name!r} was sealed with another service key: "
            f"KALENDS_SECRET_KEY (else {KEY_FILE} in KALENDS_DATA_DIR) must be the key it was "
            "sealed with, which webhook secrets, OAuth signing keys and connected accounts "
            "need too") from None
