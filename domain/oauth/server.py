"""The built-in authorization server (docs/mcp.md, "MCP clients and OAuth"): what it accepts and
what it issues, apart from HTTP (oauth_bridge/http.py) and HTML (pages.py).

Codes, refresh tokens and client secrets are 256 random bits, as API keys are,
and are stored as API keys are: a plain hash (`auth.hash_key`), which keeps a
database reader from using them.

- Clients: a Client ID Metadata Document URL (fetched, domain/oauth/
  client_metadata.py) or a `kcl_` id from Dynamic Client Registration.
- Authorization code with PKCE, S256 only; redirect URIs matched exactly;
  `iss` in every authorization response (RFC 9207).
- Access tokens: JWTs for the /mcp audience, minutes long. Refresh tokens:
  opaque, rotated on each use; presenting a used one again
  revokes its whole grant (and the access tokens naming it).
- A code or refresh token is spent only by a request that succeeds: one
  refused (wrong client, verifier, redirect URI, resource or scope) leaves it
  as it was.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode, urlsplit

import asyncpg
import jwt

from db import oauth as store
from db.database import Database, Tx
from domain import ids
from domain.auth import hash_key
from domain.connected.vault import Vault
from domain.oauth import keys
from domain.oauth.client_metadata import (
    ClientMetadataError,
    ClientMetadataFetcher,
    is_metadata_url,
    redirect_uri_problem,
)
from domain.oauth.resource import READ, SCOPES, WRITE

CODE_TTL = timedelta(minutes=1)
REFRESH_TTL = timedelta(days=30)
SCOPE_WORDS = {
    READ: "See your events, calendars, agenda, profiles and subscriptions",
    WRITE: "Create, change and delete events, RSVPs, calendars and subscriptions for you",
}
_PKCE = re.compile(r"^[A-Za-z0-9._~-]{43,128}$")
_CLIENT_ID = re.compile(r"^kcl_[0-9a-f]{32}$")
AUTH_METHODS = ("none", "client_secret_basic", "client_secret_post")
GRANT_TYPES = ("authorization_code", "refresh_token")


class OAuthError(Exception):
    """An OAuth error response: `error` and `error_description` (RFC 6749 §5.2)."""

    def __init__(self, error: str, description: str, *, status: int = 400) -> None:
        super().__init__(description)
        self.error = error
        self.description = description
        self.status = status

    def body(self) -> dict[str, str]:
        return {"error": self.error, "error_description": self.description}


class NotRedirectable(OAuthError):
    """An authorization request whose client or redirect URI cannot be trusted:
    shown to the user, never sent to the redirect URI (RFC 6749 §4.1.2.1)."""


class Redirected(OAuthError):
    """An authorization error sent back to the client's redirect URI."""

    def __init__(self, error: str, description: str, redirect_uri: str, state: str | None,
                 issuer: str) -> None:
        super().__init__(error, description)
        self.location = with_query(redirect_uri, {
            "error": error, "error_description": description, "state": state, "iss": issuer})


@dataclass(frozen=True)
class Client:
    client_id: str
    name: str | None
    redirect_uris: tuple[str, ...]
    grant_types: tuple[str, ...]
    auth_method: str
    secret_hash: bytes | None
    scope: str | None
    metadata_document: bool

    @property
    def host(self) -> str | None:
        """Who vouches for a metadata-document client: its URL's host."""
        return urlsplit(self.client_id).hostname if self.metadata_document else None


@dataclass(frozen=True)
class AuthorizationRequest:
    client: Client
    redirect_uri: str
    state: str | None
    code_challenge: str
    scopes: tuple[str, ...]
    resource: str

    def form(self) -> dict[str, str]:
        """The request as the consent form carries it back (checked again on POST)."""
        out = {"response_type": "code", "client_id": self.client.client_id,
               "redirect_uri": self.redirect_uri, "code_challenge": self.code_challenge,
               "code_challenge_method": "S256", "scope": " ".join(self.scopes),
               "resource": self.resource}
        if self.state is not None:
            out["state"] = self.state
        return out


class AuthorizationServer:
    def __init__(self, db: Database, vault: Vault, fetcher: ClientMetadataFetcher, *,
                 access_ttl: timedelta, allow_loopback: bool = False) -> None:
        self._allow_loopback = allow_loopback
        self._db = db
        self._vault = vault
        self._fetcher = fetcher
        self._access_ttl = access_ttl

    # -- clients --------------------------------------------------------------------

    async def client(self, client_id: str) -> Client:
        if is_metadata_url(client_id, allow_loopback=self._allow_loopback):
            try:
                doc = await self._fetcher.get(client_id)
            except ClientMetadataError as exc:
                raise OAuthError("invalid_client", str(exc)) from None
            return Client(doc.client_id, doc.client_name, doc.redirect_uris, doc.grant_types,
                          "none", None, doc.scope, True)
        found = await store.client(self._db, client_id) if _CLIENT_ID.match(client_id) else None
        if found is None:
            raise OAuthError("invalid_client", f"Unknown client {client_id[:200]!r}.",
                             status=401)
        secret_hash, meta = found
        return Client(client_id, meta.get("client_name"), tuple(meta["redirect_uris"]),
                      tuple(meta["grant_types"]), meta["token_endpoint_auth_method"],
                      secret_hash, meta.get("scope"), False)

    async def register(self, body: Any) -> dict[str, Any]:
        """RFC 7591 registration. Unknown metadata is ignored, as §2 allows."""
        if not isinstance(body, dict):
            raise OAuthError("invalid_client_metadata", "The body must be a JSON object.")
        uris = body.get("redirect_uris")
        if not isinstance(uris, list) or not uris or len(uris) > 10:
            raise OAuthError("invalid_redirect_uri", "redirect_uris: one to ten URIs.")
        for uri in uris:
            problem = redirect_uri_problem(uri)
            if problem is not None:
                raise OAuthError("invalid_redirect_uri",
                                 f"The redirect URI {str(uri)[:200]!r} {problem}.")
        method = body.get("token_endpoint_auth_method", "client_secret_basic")
        if method not in AUTH_METHODS:
            raise OAuthError("invalid_client_metadata", "token_endpoint_auth_method must be "
                             f"one of {', '.join(AUTH_METHODS)}.")
        grant_types = body.get("grant_types", ["authorization_code"])
        if not isinstance(grant_types, list) or not set(grant_types) <= set(GRANT_TYPES) \
                or "authorization_code" not in grant_types:
            raise OAuthError("invalid_client_metadata",
                             "grant_types: authorization_code, optionally refresh_token.")
        if body.get("response_types", ["code"]) != ["code"]:
            raise OAuthError("invalid_client_metadata", "response_types must be [\"code\"].")
        meta: dict[str, Any] = {
            "redirect_uris": uris, "token_endpoint_auth_method": method,
            "grant_types": grant_types, "response_types": ["code"]}
        for name in ("client_name", "client_uri", "scope"):
            value = body.get(name)
            if value is not None:
                if not isinstance(value, str) or len(value) > 500:
                    raise OAuthError("invalid_client_metadata", f"{name}: a string.")
                meta[name] = value
        client_id = ids.new_id("kcl")
        secret = None if method == "none" else secrets.token_urlsafe(32)
        await store.insert_client(self._db, client_id, hash_key(secret) if secret else None, meta)
        out = {"client_id": client_id, "client_id_issued_at": int(time.time()), **meta}
        if secret is not None:
            out.update(client_secret=secret, client_secret_expires_at=0)
        return out

    async def authenticate_client(self, form: Mapping[str, str],
                                  basic: tuple[str, str] | None) -> Client:
        """The client of a token or revocation request, its secret checked when it has one."""
        client_id, secret = basic if basic is not None else (
            form.get("client_id", ""), form.get("client_secret"))
        if not client_id:
            raise OAuthError("invalid_client", "client_id is missing.", status=401)
        client = await self.client(client_id)
        if client.secret_hash is not None and (
                not secret or not hmac.compare_digest(hash_key(secret), client.secret_hash)):
            raise OAuthError("invalid_client", "The client's secret is wrong.", status=401)
        return client

    # -- authorization endpoint -----------------------------------------------------

    async def authorization_request(self, query: Mapping[str, str], *, resource: str,
                                    issuer: str) -> AuthorizationRequest:
        client_id = query.get("client_id", "")
        if not client_id:
            raise NotRedirectable("invalid_request", "The request names no client (client_id).")
        try:
            client = await self.client(client_id)
        except OAuthError as exc:
            raise NotRedirectable(exc.error, exc.description) from None
        redirect_uri = query.get("redirect_uri")
        if redirect_uri is None:
            if len(client.redirect_uris) != 1:
                raise NotRedirectable("invalid_request", "redirect_uri is required.")
            redirect_uri = client.redirect_uris[0]
        elif redirect_uri not in client.redirect_uris:
            # Exact string comparison: one character off is another address.
            raise NotRedirectable(
                "invalid_request",
                "redirect_uri is not one the client registered; nothing is sent to it.")
        state = query.get("state")

        def refuse(error: str, description: str) -> Redirected:
            return Redirected(error, description, redirect_uri, state, issuer)

        if query.get("response_type") != "code":
            raise refuse("unsupported_response_type", "response_type must be code.")
        challenge = query.get("code_challenge", "")
        if not challenge:
            raise refuse("invalid_request", "PKCE is required: send code_challenge (S256).")
        if query.get("code_challenge_method") != "S256":
            raise refuse("invalid_request", "code_challenge_method must be S256.")
        if not _PKCE.match(challenge):
            raise refuse("invalid_request", "code_challenge is not a base64url S256 digest.")
        requested = query.get("scope") or client.scope or " ".join(SCOPES)
        scopes = tuple(s for s in SCOPES if s in requested.split())
        if not scopes:
            raise refuse("invalid_scope", f"Ask for {READ} or {WRITE}.")
        wanted = query.get("resource", resource)
        if wanted != resource:
            raise refuse("invalid_target", f"This server issues tokens for {resource} only.")
        if state is not None and len(state) > 1000:
            raise refuse("invalid_request", "state is too long.")
        return AuthorizationRequest(client, redirect_uri, state, challenge, scopes, resource)

    async def approve(self, request: AuthorizationRequest, consumer: str, issuer: str) -> str:
        """The user said yes: the redirect carrying a one-minute, single-use code."""
        code = secrets.token_urlsafe(32)
        await store.insert_grant(
            self._db, ids.new_id("ogr"), client_id=request.client.client_id,
            consumer=consumer, scope=" ".join(request.scopes), resource=request.resource,
            redirect_uri=request.redirect_uri, code_hash=hash_key(code),
            code_challenge=request.code_challenge, code_ttl=CODE_TTL)
        return with_query(request.redirect_uri,
                          {"code": code, "state": request.state, "iss": issuer})

    # -- token endpoint -------------------------------------------------------------

    async def token(self, form: Mapping[str, str], basic: tuple[str, str] | None, *,
                    issuer: str) -> dict[str, Any]:
        grant_type = form.get("grant_type")
        if grant_type not in GRANT_TYPES:
            raise OAuthError("unsupported_grant_type",
                             "grant_type must be authorization_code or refresh_token.")
        client = await self.authenticate_client(form, basic)
        if grant_type not in client.grant_types:
            raise OAuthError("unauthorized_client", f"This client may not use {grant_type}.")
        if grant_type == "authorization_code":
            return await self._redeem_code(form, client, issuer)
        return await self._refresh(form, client, issuer)

    async def _redeem_code(self, form: Mapping[str, str], client: Client,
                           issuer: str) -> dict[str, Any]:
        def check(grant: asyncpg.Record) -> _Grant:
            if grant["client_id"] != client.client_id:
                raise OAuthError("invalid_grant", "The code was issued to another client.")
            if form.get("redirect_uri", grant["redirect_uri"]) != grant["redirect_uri"]:
                raise OAuthError("invalid_grant",
                                 "redirect_uri differs from the authorization's.")
            verifier = form.get("code_verifier", "")
            if not _PKCE.match(verifier) or not hmac.compare_digest(
                    _s256(verifier), grant["code_challenge"]):
                raise OAuthError("invalid_grant",
                                 "code_verifier does not match the code_challenge.")
            if form.get("resource", grant["resource"]) != grant["resource"]:
                raise OAuthError("invalid_target", f"The grant is for {grant['resource']}.")
            return _Grant(grant["grant_id"], grant["consumer_name"], grant["scope"],
                          grant["resource"])

        return await self._exchange(_CODE, form.get("code", ""), check, client, issuer)

    async def _refresh(self, form: Mapping[str, str], client: Client,
                       issuer: str) -> dict[str, Any]:
        def check(row: asyncpg.Record) -> _Grant:
            if row["client_id"] != client.client_id:
                raise OAuthError("invalid_grant",
                                 "The refresh token was issued to another client.")
            if form.get("resource", row["resource"]) != row["resource"]:
                raise OAuthError("invalid_target", f"The grant is for {row['resource']}.")
            return _Grant(row["grant_id"], row["consumer_name"],
                          _narrowed(row["scope"], form.get("scope")), row["resource"])

        return await self._exchange(_REFRESH_TOKEN, form.get("refresh_token", ""), check,
                                    client, issuer)

    async def _exchange(self, kind: _SingleUse, secret: str,
                        check: Callable[[asyncpg.Record], _Grant], client: Client,
                        issuer: str) -> dict[str, Any]:
        """Present a single-use secret (a code, a refresh token) and issue tokens.

        The request is checked in full (`check`: client, verifier, redirect URI,
        resource, scope) before the secret is spent, and the secret is spent in
        the transaction that stores its successor: a request that is refused or
        fails on the way spends nothing, so a stranger who saw the secret cannot
        use it up, nor can a client's own mistake. One presented after it was
        spent has leaked, or two parties hold it: its whole grant is revoked,
        refresh tokens and access tokens alike, and the rightful client signs in
        again. The row stays locked from the verdict to the commit, so of several
        requests racing with one secret exactly one wins and the others are
        reuse."""
        # Read before the row is locked: on a first start it is made here, in a
        # transaction (and a pool connection) of its own.
        key = await keys.signing_key(self._db, self._vault)
        async with self._db.transaction() as tx:
            outcome, row = await kind.find(tx, hash_key(secret))
            if outcome == "ok" and row is not None:
                grant = check(row)  # raises before anything is written
                await kind.spend(tx, row)
                return await self._issue(tx, key, grant, client, issuer)
            if outcome == "reused" and row is not None:
                await store.revoke_grant(tx, row["grant_id"], f"{kind.what} reused")
        raise OAuthError("invalid_grant", f"The {kind.what} is {outcome}.")

    async def _issue(self, tx: Tx, key: keys.SigningKey, grant: _Grant, client: Client,
                     issuer: str) -> dict[str, Any]:
        now = int(time.time())
        ttl = int(self._access_ttl.total_seconds())
        claims = {"iss": issuer, "sub": grant.consumer, "aud": grant.resource, "iat": now,
                  "nbf": now, "exp": now + ttl, "jti": secrets.token_urlsafe(16),
                  "scope": grant.scope, "client_id": client.client_id,
                  "grant_id": grant.grant_id}
        access = jwt.encode(claims, key.private_key, algorithm=keys.ALGORITHM,
                            headers={"kid": key.kid, "typ": "at+jwt"})
        out: dict[str, Any] = {"access_token": access, "token_type": "Bearer",
                               "expires_in": ttl, "scope": grant.scope}
        if "refresh_token" in client.grant_types:
            refresh = secrets.token_urlsafe(32)
            await store.insert_refresh_token(tx, hash_key(refresh), grant.grant_id,
                                             grant.scope, REFRESH_TTL)
            out["refresh_token"] = refresh
        return out

    # -- revocation -----------------------------------------------------------------

    async def revoke(self, form: Mapping[str, str], basic: tuple[str, str] | None, *,
                     issuer: str) -> None:
        """RFC 7009: revoke the grant behind a refresh or access token. An unknown
        token is no error (§2.2): the answer must not tell tokens apart."""
        client = await self.authenticate_client(form, basic)
        token = form.get("token", "")
        grant_id = await store.grant_of_refresh_token(self._db, hash_key(token))
        if grant_id is None:
            grant_id = await self._grant_of_access_token(token, issuer)
        if grant_id is None:
            return
        if await store.grant_client(self._db, grant_id) == client.client_id:
            await store.revoke_grant(self._db, grant_id, "revoked by the client")

    async def _grant_of_access_token(self, token: str, issuer: str) -> str | None:
        try:
            kid = jwt.get_unverified_header(token).get("kid")
            published = {k["kid"]: k for k in (await keys.jwks(self._db))["keys"]}
            claims = jwt.decode(token, jwt.PyJWK(published[kid]), algorithms=[keys.ALGORITHM],
                                issuer=issuer, options={"verify_aud": False})
        except (jwt.InvalidTokenError, jwt.PyJWKError, KeyError):
            return None
        grant = claims.get("grant_id")
        return grant if isinstance(grant, str) else None


@dataclass(frozen=True)
class _Grant:
    """What an accepted code or refresh token issues tokens for."""

    grant_id: str
    consumer: str
    scope: str
    resource: str


@dataclass(frozen=True)
class _SingleUse:
    """A secret exchanged once: found with its row locked, spent on success."""

    what: str
    find: Callable[[Tx, bytes], Awaitable[tuple[str, asyncpg.Record | None]]]
    spend: Callable[[Tx, asyncpg.Record], Awaitable[None]]


async def _spend_code(tx: Tx, grant: asyncpg.Record) -> None:
    await store.spend_code(tx, grant["grant_id"])


async def _spend_refresh_token(tx: Tx, row: asyncpg.Record) -> None:
    await store.spend_refresh_token(tx, bytes(row["token_hash"]))


_CODE = _SingleUse("authorization code", store.find_code, _spend_code)
_REFRESH_TOKEN = _SingleUse("refresh token", store.find_refresh_token, _spend_refresh_token)


def _narrowed(granted: str, asked: str | None) -> str:
    """The scope a refresh asks for: the grant's, or a part of it, never more."""
    if asked is None:
        return granted
    words = asked.split()
    if not words:
        raise OAuthError("invalid_scope",
                         f"scope is empty: ask for {READ} or {WRITE}, or leave it out.")
    if not set(words) <= set(granted.split()):
        raise OAuthError("invalid_scope", "A refresh cannot widen the grant's scope.")
    return " ".join(s for s in SCOPES if s in words)


def with_query(uri: str, params: Mapping[str, str | None]) -> str:
    query = urlencode({k: v for k, v in params.items() if v is not None})
    return f"{uri}{'&' if '?' in uri else '?'}{query}"


def _s256(verifier: str) -> str:
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
