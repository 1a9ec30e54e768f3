"""The built-in authorization server's flow over plain HTTP, for tests: a
client registering, a browser showing the consent page (cookies kept), the
user answering it with an API key, and the code exchanged for tokens."""

from __future__ import annotations

import base64
import hashlib
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from html.parser import HTMLParser
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import aiohttp
from conftest import LiveServer, migrated_database

from domain import config

REDIRECT_URI = "http://127.0.0.1:33418/callback"
BOTH = "kalends:read kalends:write"


@contextmanager
def serving(database_url: str, prefix: str) -> Iterator[LiveServer]:
    """A server of its own (fresh database, its own secret key) whose built-in
    authorization server takes metadata documents served from loopback."""
    settings = replace(config.load(), oauth_allow_loopback_clients=True,
                       secret_key=secrets.token_urlsafe(32))
    with migrated_database(database_url, prefix) as dsn:
        live = LiveServer(dsn, settings=settings)
        try:
            yield live
        finally:
            live.close()


class _Form(HTMLParser):
    """The consent page's form fields (hidden and named inputs)."""

    def __init__(self) -> None:
        super().__init__()
        self.fields: dict[str, str] = {}
        self.action: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "form":
            self.action = a.get("action")
        if tag == "input" and a.get("type") == "hidden" and a.get("name"):
            self.fields[str(a["name"])] = a.get("value") or ""


def form_of(page: str) -> tuple[str | None, dict[str, str]]:
    parser = _Form()
    parser.feed(page)
    return parser.action, parser.fields


def pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
    return verifier, challenge.rstrip(b"=").decode()


def query_of(location: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(location).query).items()}


class Browser:
    """A user agent: keeps cookies (127.0.0.1 included), follows no redirects."""

    def __init__(self) -> None:
        self.session = aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))

    async def close(self) -> None:
        await self.session.close()

    async def open(self, url: str) -> tuple[int, str, str | None]:
        """GET: (status, page, Location)."""
        async with self.session.get(url, allow_redirects=False) as response:
            return response.status, await response.text(), response.headers.get("Location")

    async def answer(self, base: str, page: str, api_key: str, decision: str = "allow",
                     **changes: str) -> tuple[int, str, str | None]:
        """Submit the consent form as shown, with the key and the decision."""
        action, fields = form_of(page)
        assert action == "/oauth/authorize", page
        data = {**fields, "api_key": api_key, "decision": decision, **changes}
        async with self.session.post(base + action, data=data,
                                     allow_redirects=False) as response:
            return response.status, await response.text(), response.headers.get("Location")

    async def consent(self, authorization_url: str, base: str, api_key: str) -> str:
        """Open the page, allow: the redirect's URL."""
        status, page, location = await self.open(authorization_url)
        assert status == 200, (status, page, location)
        status, page, location = await self.answer(base, page, api_key)
        assert status == 303 and location is not None, (status, page)
        return location


@dataclass
class Flow:
    base: str
    client_id: str
    client_secret: str | None = None
    redirect_uri: str = REDIRECT_URI

    def authorization_url(self, challenge: str | None, *, scope: str = BOTH,
                          state: str = "xyz", method: str | None = "S256",
                          **extra: str) -> str:
        params = {"response_type": "code", "client_id": self.client_id,
                  "redirect_uri": self.redirect_uri, "scope": scope, "state": state,
                  "resource": self.base + "/mcp", **extra}
        if challenge is not None:
            params["code_challenge"] = challenge
        if method is not None:
            params["code_challenge_method"] = method
        return f"{self.base}/oauth/authorize?{urlencode(params)}"

    async def token(self, session: aiohttp.ClientSession, **form: str
                    ) -> tuple[int, dict[str, Any]]:
        data = {"client_id": self.client_id, **form}
        if self.client_secret is not None:
            data["client_secret"] = self.client_secret
        async with session.post(self.base + "/oauth/token", data=data) as response:
            return response.status, await response.json()


async def register(session: aiohttp.ClientSession, base: str, **metadata: Any
                   ) -> tuple[int, dict[str, Any]]:
    body = {"redirect_uris": [REDIRECT_URI], "client_name": "Test agent",
            "grant_types": ["authorization_code", "refresh_token"],
            "token_endpoint_auth_method": "none", **metadata}
    async with session.post(base + "/oauth/register", json=body) as response:
        return response.status, await response.json()


async def tokens_for(base: str, api_key: str, scope: str = BOTH) -> tuple[Flow, dict[str, Any]]:
    """A registered public client, its user's consent and the token response."""
    browser = Browser()
    try:
        status, client = await register(browser.session, base)
        assert status == 201, client
        flow = Flow(base, client["client_id"])
        verifier, challenge = pkce()
        location = await browser.consent(flow.authorization_url(challenge, scope=scope), base,
                                         api_key)
        code = query_of(location)["code"]
        status, tokens = await flow.token(
            browser.session, grant_type="authorization_code", code=code,
            redirect_uri=flow.redirect_uri, code_verifier=verifier,
            resource=base + "/mcp")
        assert status == 200, tokens
        return flow, tokens
    finally:
        await browser.close()
