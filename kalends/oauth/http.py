"""OAuth over HTTP: /mcp's Protected Resource Metadata and access-token check,
and, unless `KALENDS_OAUTH_ISSUER` names another, the built-in authorization
server's endpoints:

  GET  /.well-known/oauth-authorization-server   RFC 8414 metadata
  GET  /oauth/jwks.json                           the signing keys
  GET  /oauth/authorize                           sign-in and consent page
  POST /oauth/authorize                           the user's answer
  POST /oauth/token                               codes and refresh tokens
  POST /oauth/register                            RFC 7591
  POST /oauth/revoke                              RFC 7009
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import aiohttp
import orjson
from aiohttp import web
from yarl import URL

from db import accounts
from db import oauth as oauth_store
from kalends import instance_secrets, outbound
from kalends.accounts import CONSUMER_NAME
from kalends.auth import KEY_PREFIX, Caller, authenticate_key
from kalends.connected import engine as connected
from kalends.errors import ApiError
from kalends.oauth import keys, pages
from kalends.oauth.client_metadata import ClientMetadataFetcher
from kalends.oauth.resource import SCOPES, Access, KeyCache, TokenRefused, Verifier
from kalends.oauth.server import (
    AUTH_METHODS,
    GRANT_TYPES,
    AuthorizationServer,
    NotRedirectable,
    OAuthError,
    Redirected,
)
from kalends.ratelimit import Decision
from kalends.service import housekeeping
from kalends.service.config import Settings
from kalends.service.services import SERVICES, SETTINGS
from kalends.web.responses import json_response

log = logging.getLogger("kalends.oauth")

MCP_PATH = "/mcp"
RESOURCE_METADATA = "/.well-known/oauth-protected-resource"
ACCESS = web.RequestKey("oauth_access", Access)
_CSRF_COOKIE = "kalends_oauth"


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


def setup(app: web.Application, settings: Settings) -> None:
    app.cleanup_ctx.append(_services)
    app.router.add_get(RESOURCE_METADATA, resource_metadata)
    app.router.add_get(RESOURCE_METADATA + MCP_PATH, resource_metadata)
    if settings.oauth_issuer is None:
        app.router.add_get("/.well-known/oauth-authorization-server", server_metadata)
        app.router.add_get("/oauth/jwks.json", jwks)
        app.router.add_get("/oauth/authorize", authorize)
        app.router.add_post("/oauth/authorize", consent)
        app.router.add_post("/oauth/token", token)
        app.router.add_post("/oauth/register", register)
        app.router.add_post("/oauth/revoke", revoke)


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
    return _json({
        "resource": oauth.resource(request),
        "authorization_servers": [oauth.issuer(request)],
        "scopes_supported": list(SCOPES),
        "bearer_methods_supported": ["header"],
        "resource_name": "Kalends",
    })


# -- authorization server -----------------------------------------------------------


async def server_metadata(request: web.Request) -> web.Response:
    oauth = request.app[OAUTH]
    base = oauth.base(request)
    return _json({
        "issuer": oauth.issuer(request),
        "authorization_endpoint": base + "/oauth/authorize",
        "token_endpoint": base + "/oauth/token",
        "registration_endpoint": base + "/oauth/register",
        "revocation_endpoint": base + "/oauth/revoke",
        "jwks_uri": base + "/oauth/jwks.json",
        "scopes_supported": list(SCOPES),
        "response_types_supported": ["code"],
        "response_modes_supported": ["query"],
        "grant_types_supported": list(GRANT_TYPES),
        "code_challenge_methods_supported": ["S256"],
        "token_endpoint_auth_methods_supported": list(AUTH_METHODS),
        "revocation_endpoint_auth_methods_supported": list(AUTH_METHODS),
        "client_id_metadata_document_supported": True,
        "authorization_response_iss_parameter_supported": True,
    })


async def jwks(request: web.Request) -> web.Response:
    return _json(await keys.jwks(request.app[SERVICES].db))


async def authorize(request: web.Request) -> web.StreamResponse:
    oauth = request.app[OAUTH]
    assert oauth.server is not None
    try:
        pending = await oauth.server.authorization_request(
            request.query, resource=oauth.resource(request), issuer=oauth.issuer(request))
    except NotRedirectable as exc:
        return _html(pages.failure(exc.description), 400)
    except Redirected as exc:
        raise web.HTTPFound(exc.location) from None
    nonce = request.cookies.get(_CSRF_COOKIE) or secrets.token_urlsafe(32)
    response = _html(pages.consent(pending, csrf=_csrf(oauth, nonce)))
    response.set_cookie(_CSRF_COOKIE, nonce, path="/oauth", httponly=True, samesite="Strict",
                        secure=request.scheme == "https")
    return response


async def consent(request: web.Request) -> web.StreamResponse:
    oauth = request.app[OAUTH]
    assert oauth.server is not None
    form = {k: v for k, v in (await request.post()).items() if isinstance(v, str)}
    nonce = request.cookies.get(_CSRF_COOKIE, "")
    if not nonce or not hmac.compare_digest(form.get("csrf", ""), _csrf(oauth, nonce)):
        # A form posted from another site, or one whose cookie has gone.
        return _html(pages.failure(
            "The form could not be verified as coming from this page. Go back to the "
            "application and start again."), 403)
    issuer = oauth.issuer(request)
    try:
        pending = await oauth.server.authorization_request(
            form, resource=oauth.resource(request), issuer=issuer)
    except NotRedirectable as exc:
        return _html(pages.failure(exc.description), 400)
    except Redirected as exc:
        raise web.HTTPSeeOther(exc.location) from None
    if form.get("decision") != "allow":
        raise web.HTTPSeeOther(Redirected(
            "access_denied", "The user denied the request.", pending.redirect_uri,
            pending.state, issuer).location)
    try:
        caller = await authenticate_key(request.app[SERVICES].db,
                                        "Bearer " + form.get("api_key", "").strip())
        viewer = caller.claimed()
    except ApiError as exc:
        problem = ("That API key is not valid." if exc.code == "not_authenticated" else
                   "That key's consumer has not been claimed by a user yet.")
        return _html(pages.consent(pending, csrf=_csrf(oauth, nonce), error=problem), 401)
    location = await oauth.server.approve(pending, viewer.consumer, issuer)
    raise web.HTTPSeeOther(location)


def _endpoint(handler: Callable[[web.Request, OAuth, AuthorizationServer],
                                 Awaitable[web.Response]]) -> Callable[[web.Request],
                                                                     Awaitable[web.Response]]:
    """A JSON endpoint of the built-in server: its OAuthErrors as RFC 6749 §5.2 answers."""
    async def endpoint(request: web.Request) -> web.Response:
        oauth = request.app[OAUTH]
        assert oauth.server is not None
        try:
            return await handler(request, oauth, oauth.server)
        except OAuthError as exc:
            response = _json(exc.body(), exc.status)
            if exc.status == 401:
                response.headers["WWW-Authenticate"] = 'Basic realm="kalends"'
            return response

    return endpoint


@_endpoint
async def token(request: web.Request, oauth: OAuth, server: AuthorizationServer
                ) -> web.Response:
    form = await _form(request)
    return _json(await server.token(form, _basic(request), issuer=oauth.issuer(request)))


@_endpoint
async def register(request: web.Request, oauth: OAuth, server: AuthorizationServer
                   ) -> web.Response:
    try:
        body = orjson.loads(await request.read())
    except orjson.JSONDecodeError:
        raise OAuthError("invalid_client_metadata", "The body must be JSON.") from None
    return _json(await server.register(body), 201)


@_endpoint
async def revoke(request: web.Request, oauth: OAuth, server: AuthorizationServer
                 ) -> web.Response:
    form = await _form(request)
    await server.revoke(form, _basic(request), issuer=oauth.issuer(request))
    return _json({})


def _csrf(oauth: OAuth, nonce: str) -> str:
    """The signed double-submit token: a MAC of the cookie's random value, so
    that a form from another site (which cannot read the cookie) fails."""
    return hmac.new(oauth.csrf_secret, nonce.encode(), hashlib.sha256).hexdigest()


async def _form(request: web.Request) -> Mapping[str, str]:
    if request.content_type != "application/x-www-form-urlencoded":
        raise OAuthError("invalid_request", "Send the parameters form-encoded.")
    return {k: v for k, v in (await request.post()).items() if isinstance(v, str)}


def _basic(request: web.Request) -> tuple[str, str] | None:
    scheme, _, value = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        user, _, password = base64.b64decode(value, validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        raise OAuthError("invalid_client", "Malformed Basic credentials.", status=401) from None
    # RFC 6749 §2.3.1: both are form-urlencoded before Basic encoding.
    return unquote(user.replace("+", " ")), unquote(password.replace("+", " "))


def _json(data: Any, status: int = 200) -> web.Response:
    response = json_response(data, status)
    # Tokens and metadata both: never cached by a shared cache (RFC 6749 §5.1).
    response.headers["Cache-Control"] = "no-store"
    return response


def _html(body: str, status: int = 200) -> web.Response:
    return web.Response(text=body, status=status, content_type="text/html", headers={
        "Cache-Control": "no-store",
        "X-Frame-Options": "DENY",
        "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; "
                                   "frame-ancestors 'none'; base-uri 'none'",
        "Referrer-Policy": "no-referrer",
    })
