"""/mcp as an OAuth 2.1 resource server (docs/mcp.md, "MCP clients and OAuth"): which access tokens
it takes, and what each lets its bearer do.

A token is a JWT signed by the issuer's key (found by `kid` in its JWKS,
which is cached and fetched again once when a token names a key it does not
hold), issued by the expected issuer, for the canonical /mcp URL as audience
(RFC 8707), and current (`exp`, `nbf`, with a small leeway for clocks).
Anything else is refused, with the reason in `error_description`.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

import jwt

READ = "kalends:read"
WRITE = "kalends:write"
SCOPES = (READ, WRITE)
# Asymmetric only: a shared-secret (HS*) or unsigned token could be forged by
# anyone who can read the JWKS.
ALGORITHMS = ("ES256", "ES384", "ES512", "RS256", "RS384", "RS512", "PS256", "PS384",
              "PS512", "EdDSA")
LEEWAY_SECONDS = 30
# A token naming an unknown key makes the JWKS be fetched again, at most once
# per this many seconds: a stream of forged `kid`s must not become a stream of fetches.
_REFETCH_SECONDS = 1.0
# An agent sends one token with many calls: its checked claims are kept (never
# past its expiry and leeway, nor longer than this) rather than its signature checked
# again each time, which costs ~0.2 ms, a fifth of a call. Revocation is
# unaffected: the grant is looked up per request.
_REMEMBER_SECONDS = 300.0
_REMEMBERED = 10_000


class TokenRefused(Exception):
    """The token is not one this resource takes; the message says why."""


@dataclass(frozen=True)
class Access:
    subject: str
    scopes: frozenset[str]
    grant_id: str | None
    """The built-in server's grant, checked against revocation per request."""

    def missing(self, read_only: bool) -> str | None:
        """The scope this token lacks for a tool, if any. `kalends:write`
        includes reading (a broader scope implies the narrower)."""
        if WRITE in self.scopes:
            return None
        if read_only:
            return None if READ in self.scopes else READ
        return WRITE


class KeyCache:
    """An issuer's public keys by `kid`, from `fetch` (a JWKS document)."""

    def __init__(self, fetch: Callable[[], Awaitable[dict[str, Any]]]) -> None:
        self._fetch = fetch
        self._keys: dict[str, jwt.PyJWK] = {}
        self._fetched_at = float("-inf")
        self._lock = asyncio.Lock()

    def holds(self, kid: str) -> bool:
        return kid in self._keys

    async def key(self, kid: str) -> jwt.PyJWK | None:
        if kid not in self._keys:
            await self._refresh()
        return self._keys.get(kid)

    async def _refresh(self) -> None:
        asked = time.monotonic()
        async with self._lock:
            # Whoever waited on the lock while another fetched uses that fetch.
            if self._fetched_at >= asked:
                return
            # Fetches are spaced: a key rotated just after a fetch waits for the
            # next one (under a second) rather than being refused.
            wait = self._fetched_at + _REFETCH_SECONDS - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            document = await self._fetch()
            self._keys = dict(_usable(document.get("keys", [])))
            self._fetched_at = time.monotonic()


class Verifier:
    def __init__(self, keys: KeyCache) -> None:
        self._keys = keys
        self._checked: OrderedDict[tuple[str, str, str], tuple[float, str, Access]] = \
            OrderedDict()

    async def verify(self, token: str, *, issuer: str, audience: str) -> Access:
        key = (token, issuer, audience)
        remembered = self._checked.get(key)
        # Its signing key must still be in the issuer's set as last fetched.
        if remembered is not None and time.time() < remembered[0] \
                and self._keys.holds(remembered[1]):
            self._checked.move_to_end(key)
            return remembered[2]
        kid, access, expires = await self._verify(token, issuer=issuer, audience=audience)
        until = min(expires + LEEWAY_SECONDS, time.time() + _REMEMBER_SECONDS)
        self._checked[key] = (until, kid, access)
        if len(self._checked) > _REMEMBERED:
            self._checked.popitem(last=False)
        return access

    async def _verify(self, token: str, *, issuer: str, audience: str
                      ) -> tuple[str, Access, float]:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError as exc:
            raise TokenRefused("The access token is not a JWT.") from exc
        kid, alg = header.get("kid"), header.get("alg")
        if alg not in ALGORITHMS:
            raise TokenRefused(f"Tokens signed with {alg!r} are not accepted.")
        if not isinstance(kid, str):
            raise TokenRefused("The access token names no signing key (kid).")
        key = await self._keys.key(kid)
        if key is None:
            raise TokenRefused(f"The issuer has no signing key {kid!r}.")
        try:
            claims = jwt.decode(
                token, key, algorithms=[alg], audience=audience, issuer=issuer,
                leeway=LEEWAY_SECONDS, options={"require": ["exp", "iss", "aud", "sub"]})
        except jwt.ExpiredSignatureError as exc:
            raise TokenRefused("The access token has expired.") from exc
        except jwt.InvalidAudienceError as exc:
            raise TokenRefused(f"The access token is not for {audience}.") from exc
        except jwt.InvalidIssuerError as exc:
            raise TokenRefused(f"The access token was not issued by {issuer}.") from exc
        except jwt.ImmatureSignatureError as exc:
            raise TokenRefused("The access token is not valid yet.") from exc
        except jwt.InvalidTokenError as exc:
            raise TokenRefused(f"The access token is invalid: {exc}.") from exc
        subject = claims["sub"]
        if not isinstance(subject, str) or not subject:
            raise TokenRefused("The access token has no subject.")
        grant = claims.get("grant_id")
        access = Access(subject, frozenset(_scopes(claims)),
                        grant if isinstance(grant, str) else None)
        return kid, access, float(claims["exp"])


def _usable(keys: Iterable[Any]) -> Iterable[tuple[str, jwt.PyJWK]]:
    for jwk in keys:
        if not isinstance(jwk, dict) or not isinstance(jwk.get("kid"), str):
            continue
        if jwk.get("use", "sig") != "sig":
            continue
        try:
            yield jwk["kid"], jwt.PyJWK(jwk)
        except jwt.PyJWKError:
            continue  # a key type this library cannot use; tokens naming it fail


def _scopes(claims: dict[str, Any]) -> list[str]:
    # `scope` (RFC 9068, a space-separated string) or `scp` (a list, some issuers).
    scope = claims.get("scope")
    if isinstance(scope, str):
        return scope.split()
    scp = claims.get("scp")
    if isinstance(scp, list):
        return [s for s in scp if isinstance(s, str)]
    if isinstance(scp, str):
        return scp.split()
    return []

