"""The OAuth routes: unless `KALENDS_OAUTH_ISSUER` names another issuer, the built-in
authorization server's endpoints (/mcp's access-token check is the HTTP layer's,
web/oauth.py):

  GET  /.well-known/oauth-authorization-server   RFC 8414 metadata
  GET  /oauth/jwks.json                           the signing keys
  GET  /oauth/authorize                           sign-in and consent page
  POST /oauth/authorize                           the user's answer
  POST /oauth/token                               codes and refresh tokens
  POST /oauth/register                            RFC 7591
  POST /oauth/revoke                              RFC 7009
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import secrets
from collections.abc import Awaitable, Callable, Mapping
from urllib.parse import unquote

import orjson
from aiohttp import web

from core.errors import ApiError
from domain.auth import authenticate_key
from domain.config import Settings
from domain.oauth import keys, pages
from domain.oauth.resource import SCOPES
from domain.oauth.server import (
    AUTH_METHODS,
    GRANT_TYPES,
    AuthorizationServer,
    NotRedirectable,
    OAuthError,
    Redirected,
)
from web.oauth import OAUTH, OAuth
from web.oauth import json_no_store as _json
from web.services import SERVICES

log = logging.getLogger("kalends.oauth")

_CSRF_COOKIE = "kalends_oauth"


def setup(app: web.Application, settings: Settings) -> None:
    """The built-in authorization server's routes, unless another issuer serves /mcp."""
    if settings.oauth_issuer is None:
        app.router.add_get("/.well-known/oauth-authorization-server", server_metadata)
        app.router.add_get("/oauth/jwks.json", jwks)
        app.router.add_get("/oauth/authorize", authorize)
        app.router.add_post("/oauth/authorize", consent)
        app.router.add_post("/oauth/token", token)
        app.router.add_post("/oauth/register", register)
        app.router.add_post("/oauth/revoke", revoke)


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


def _html(body: str, status: int = 200) -> web.Response:
    return web.Response(text=body, status=status, content_type="text/html", headers={
        "Cache-Control": "no-store",
        "X-Frame-Options": "DENY",
        "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; "
                                   "frame-ancestors 'none'; base-uri 'none'",
        "Referrer-Policy": "no-referrer",
    })
