"""The built-in authorization server's signing keys: ES256 (P-256), made on
first use, kept in the database encrypted with the service key (domain/connected/vault.py), and
rotated by `kalends admin rotate-signing-key`. A retired key stays in the
JWKS for a day, longer than any access token it signed lives."""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from jwt.algorithms import ECAlgorithm

from db import oauth as store
from db.database import Database
from domain.connected.vault import Vault

ALGORITHM = "ES256"
KEEP_RETIRED = timedelta(days=1)


@dataclass(frozen=True)
class SigningKey:
    kid: str
    private_key: ec.EllipticCurvePrivateKey


async def signing_key(db: Database, vault: Vault) -> SigningKey:
    """The active key, made now if there is none yet (concurrent first starts
    agree on one: the database keeps a single active key)."""
    row = await store.active_key(db)
    if row is None:
        await _add(db, vault, retire_active=False)
        row = await store.active_key(db)
        assert row is not None
    pem = vault.open(bytes(row["private_key"])).encode()
    private = serialization.load_pem_private_key(pem, password=None)
    assert isinstance(private, ec.EllipticCurvePrivateKey)
    return SigningKey(row["kid"], private)


async def rotate(db: Database, vault: Vault) -> dict[str, Any]:
    """A new active key; the previous one signs no more but stays published."""
    kid, retired = await _add(db, vault, retire_active=True)
    await store.drop_retired(db, KEEP_RETIRED)
    return {"kid": kid, "retired": retired}


async def jwks(db: Database) -> dict[str, Any]:
    return {"keys": await store.published_keys(db, KEEP_RETIRED)}


async def _add(db: Database, vault: Vault, *, retire_active: bool) -> tuple[str, list[str]]:
    private = ec.generate_private_key(ec.SECP256R1())
    public: dict[str, Any] = ECAlgorithm.to_jwk(private.public_key(), as_dict=True)
    kid = _thumbprint(public)
    public.update(kid=kid, alg=ALGORITHM, use="sig")
    pem = private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
    async with db.transaction() as tx:
        retired = await store.add_key(tx, kid, vault.seal(pem), public,
                                      retire_active=retire_active)
    return kid, retired


def _thumbprint(jwk: dict[str, Any]) -> str:
    """RFC 7638: the SHA-256 of the required members, as the key's id."""
    required = {k: jwk[k] for k in ("crv", "kty", "x", "y")}
    digest = hashlib.sha256(json.dumps(required, separators=(",", ":"),
                                       sort_keys=True).encode()).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
