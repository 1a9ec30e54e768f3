"""OAuth access tokens as /mcp's credential (docs/mcp.md, "MCP clients and OAuth"): the
HTTP layer's resource server. It checks a request's bearer token (`authenticate`,
`require_scope`), serves /mcp's Protected Resource Metadata (RFC 9728), and holds
the verifier and, unless `KALENDS_OAUTH_ISSUER` names another issuer, the built-in
authorization server whose routes oauth_bridge/http.py serves.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web
from yarl import URL

from core.errors import ApiError
from db import accounts
from db import oauth as oauth_store
from domain import housekeeping, instance_secrets, outbound
from domain.accounts import CONSUMER_NAME
from domain.auth import KEY_PREFIX, Caller
from domain.config import Settings
from domain.connected import engine as connected
from domain.oauth import keys
from domain.oauth.client_metadata import ClientMetadataFetcher
from domain.oauth.resource import SCOPES, Access, KeyCache, TokenRefused, Verifier
from domain.oauth.server import AuthorizationServer
from domain.ratelimit import Decision
from web.responses import json_response
from web.services import SERVICES, SETTINGS

log = logging.getLogger("kalends.oauth")

MCP_PATH = "/mcp"
RESOURCE_METADATA = "/.well-known/oauth-protected-resource"
ACCESS = web.RequestKey("oauth_access", Access)


@dataclass
class OAuth:
    settings: Settings
    verifier: Verifier
    server: AuthorizationServer | None
    """None when an external issuer serves /mcp."""
    csrf_secret: bytes

    def base(self, request: web.Request) -> str:
        return self.settings.public_url or str(request.url.origin())

    def resource(self, request: web.Request) -> str:
        return self.base(request) + MCP_PATH

    def issuer(self, request: web.Request) -> str:
        # The built-in issuer ends in "/": URL libraries (pydantic's, the MCP SDK's)
        # write an empty path that way, and clients compare issuers as strings.
        return self.settings.oauth_issuer or self.base(request) + "/"

    def challenge(self, request: web.Request, **params: str) -> dict[str, str]:
        return {"resource_metadata": self.base(request) + RESOURCE_METADATA + MCP_PATH,
                "scope": " ".join(SCOPES), **params}


OAUTH = web.AppKey("oauth", OAuth)


def setup(app: web.Application) -> None:
    """/mcp's resource server: the verifier (and the built-in issuer's state) for the
    app's life, and the metadata at both well-known paths."""
    app.cleanup_ctx.append(_services)
    app.router.add_get(RESOURCE_METADATA, resource_metadata)
    app.router.add_get(RESOURCE_METADATA + MCP_PATH, resource_metadata)


async def _services(app: web.Application) -> AsyncIterator[None]:
    settings, db = app[SETTINGS], app[SERVICES].db
    # Two sessions: one for the configured issuer (trusted, perhaps on a private
    # network), one guarded for URLs that clients choose.
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session, \
            outbound.guarded_session(
                allow_loopback=settings.oauth_allow_loopback_clients) as guarded:
        server = None
        vault = connected.open_vault(settings)
        if settings.oauth_issuer is None:
            async def fetch_keys() -> dict[str, Any]:
                return await keys.jwks(db)

            await keys.signing_key(db, vault)  # made on first start, so the JWKS is never empty
            fetcher = ClientMetadataFetcher(
                guarded, allow_loopback=settings.oauth_allow_loopback_clients)
            server = AuthorizationServer(
                db, vault, fetcher, access_ttl=settings.oauth_access_token_ttl,
                allow_loopback=settings.oauth_allow_loopback_clients)
        else:
            fetch_keys = _IssuerKeys(session, settings.oauth_issuer).fetch
        app[OAUTH] = OAuth(settings, Verifier(KeyCache(fetch_keys)), server,
                           await instance_secrets.get(db, vault, "oauth_csrf"))
        sweeper = None if server is None else asyncio.create_task(housekeeping.every(
            3600, "prune expired OAuth grants", lambda: oauth_store.forget_expired(db)))
        yield
        if sweeper is not None:
            sweeper.cancel()


class _IssuerKeys:
    """An external issuer's JWKS, found through its metadata (RFC 8414, else
    OpenID Connect Discovery), whose `issuer` must be the one configured."""

    def __init__(self, session: aiohttp.ClientSession, issuer: str) -> None:
        self._session = session
        self._issuer = issuer
        self._jwks_uri: str | None = None

    async def fetch(self) -> dict[str, Any]:
        try:
            if self._jwks_uri is None:
                self._jwks_uri = await self._discover()
            async with self._session.get(self._jwks_uri) as response:
                response.raise_for_status()
                document = await response.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            log.warning("cannot fetch the issuer's keys: %s", exc)
            raise ApiError("service_unavailable",
                           "The authorization server's keys cannot be fetched now.") from None
        return document if isinstance(document, dict) else {}

    async def _discover(self) -> str:
        url = URL(self._issuer)
        path = url.path.rstrip("/")
        candidates = [
            url.with_path("/.well-known/oauth-authorization-server" + path),
            url.with_path("/.well-known/openid-configuration" + path),
            url.with_path(path + "/.well-known/openid-configuration"),
        ]
        for candidate in candidates:
            async with self._session.get(candidate) as response:
                if response.status != 200:
                    continue
                metadata = await response.json(content_type=None)
            if isinstance(metadata, dict) and metadata.get("issuer") == self._issuer \
                    and isinstance(metadata.get("jwks_uri"), str):
                return str(metadata["jwks_uri"])
        raise ValueError(f"no metadata naming issuer {self._issuer} and a jwks_uri")


# -- resource server ----------------------------------------------------------------

API_KEY_ON_MCP = ("This is a Kalends API key; API keys are accepted on /mcp-developer. "
                  "/mcp takes OAuth access tokens.")


async def authenticate(request: web.Request) -> Caller:
    """/mcp's credential: a bearer access token for its canonical URL. The
    subject is a consumer (docs/mcp.md, "MCP clients and OAuth"), charged as an API key's would
    be."""
    oauth = request.app[OAUTH]
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise ApiError("not_authenticated",
                       "POST /mcp needs an OAuth access token: see the resource_metadata "
                       "of the WWW-Authenticate header.", challenge=oauth.challenge(request))
    if token.strip().startswith(KEY_PREFIX):
        # The first thing most people try: say where the key goes, not only that
        # it is no JWT.
        raise _invalid_token(request, API_KEY_ON_MCP)
    try:
        access = await oauth.verifier.verify(token.strip(), issuer=oauth.issuer(request),
                                             audience=oauth.resource(request))
    except TokenRefused as exc:
        raise _invalid_token(request, str(exc)) from None
    if not CONSUMER_NAME.match(access.subject):
        raise ApiError("consumer_not_claimed",
                       f"The token's subject {access.subject[:200]!r} cannot name a consumer.")
    db, rate = request.app[SERVICES].db, request.app[SETTINGS].rate_limit
    charge = None if rate is None else (rate.interval, rate.window)
    row = await accounts.subject_owner(db, access.subject, access.grant_id, charge)
    if row is None:
        await accounts.ensure_consumer(db, access.subject)  # so that it can be claimed
        row = await accounts.subject_owner(db, access.subject, access.grant_id, charge)
        assert row is not None
    if row["grant_live"] is False:
        raise _invalid_token(request, "The access token's grant has been revoked.")
    request[ACCESS] = access
    return Caller.of(row, None if rate is None else Decision.from_row(rate, row))


def require_scope(request: web.Request, read_only: bool) -> None:
    """403 insufficient_scope, naming the scope needed, for a call beyond the token's."""
    access = request.get(ACCESS)
    if access is None:
        return  # another credential (an API key on /mcp-developer)
    needed = access.missing(read_only)
    if needed is not None:
        oauth = request.app[OAUTH]
        raise ApiError("forbidden", f"This call needs the {needed} scope.",
                       challenge=oauth.challenge(request, error="insufficient_scope",
                                                 scope=needed,
                                                 error_description=f"{needed} required"))


def _invalid_token(request: web.Request, description: str) -> ApiError:
    challenge = request.app[OAUTH].challenge(request, error="invalid_token",
                                             error_description=description)
    return ApiError("not_authenticated", description, challenge=challenge)


async def resource_metadata(request: web.Request) -> web.Response:
    """RFC 9728 for /mcp, at both well-known paths the MCP specification names."""
    oauth = request.app[OAUTH]
    return json_no_store({
        "resource": oauth.resource(request),
        "authorization_servers": [oauth.issuer(request)],
        "scopes_supported": list(SCOPES),
        "bearer_methods_supported": ["header"],
        "resource_name": "Kalends",
    })



def json_no_store(data: Any, status: int = 200) -> web.Response:
    response = json_response(data, status)
    # Tokens and metadata both: never cached by a shared cache (RFC 6749 §5.1).
    response.headers["Cache-Control"] = "no-store"
    return response
