"""JSON APIs behind OAuth 2.0 refresh tokens (Google Calendar, Microsoft Graph):
the access token obtained and renewed, requests sent with it, and the
answers every such provider gives mapped to the provider interface's errors.

A 401 from the API renews the access token once and retries; the token
endpoint refusing the refresh token (`invalid_grant`, 400/401) is
CredentialsRefused. A provider that rotates refresh tokens returns a new one
with each access token: it replaces the old one (`secret`), which the engine
stores. 429 (and whatever else `rate_limited` recognises) is RateLimited
with the provider's `Retry-After`; 5xx and network failures are ProviderError.

Every request, to the API and to the token endpoint alike, goes through the
account's `AccountOrigins` (docs/api-choices.md, "Connected calendars"): a URL or a redirect
that leads anywhere else is OriginRefused, naming the host, and nothing is sent there.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping
from typing import Any

import aiohttp
import orjson

from domain import outbound
from domain.connected.provider import (
    Conflict,
    CredentialsRefused,
    Gone,
    OriginRefused,
    ProviderError,
    RateLimited,
    WriteRefused,
    retry_after,
)

# Renew a little before the provider's expiry, so a token never lapses in flight.
_EARLY = 60.0


class Reply:
    def __init__(self, status: int, body: Any, headers: Mapping[str, str]) -> None:
        self.status = status
        self.body = body
        self.headers = headers

    def error_code(self) -> str:
        """The provider's error code or reason, '' if none."""
        error = self.body.get("error") if isinstance(self.body, dict) else None
        if isinstance(error, dict):
            errors = error.get("errors")
            if isinstance(errors, list) and errors and isinstance(errors[0], dict):
                return str(errors[0].get("reason", error.get("code", "")))
            return str(error.get("code", ""))
        return str(error or "")

    def check(self, *, denied: Collection[str] = ()) -> None:
        """Raise what an error reply means: 403 (or a code in `denied`, for a
        provider that says so otherwise) is WriteRefused, other errors ProviderError."""
        code = self.error_code()
        if self.status == 403 or code in denied:
            raise WriteRefused(f"forbidden: {code}")
        if self.status >= 400:
            raise ProviderError(f"HTTP {self.status}: {code}")

    def check_write(self, key: str, *, denied: Collection[str] = ()) -> None:
        """`check` for a write to one event: gone (404/410) and precondition
        failed (412) are errors of their own."""
        if self.status in (404, 410):
            raise Gone(f"{key} is not there")
        if self.status == 412:
            raise Conflict(f"{key} changed on the provider")
        self.check(denied=denied)


class OAuthClient:
    """Requests with an access token, on `session` (from `outbound.account_session`),
    only where `origins` allow; `origins` must allow `token_url`."""

    def __init__(self, session: aiohttp.ClientSession, origins: outbound.AccountOrigins, *,
                 token_url: str, client_id: str | None, client_secret: str | None,
                 refresh_token: str, scope: str | None, timeout: float,
                 rate_limited: Callable[[Reply], bool] = lambda reply: False) -> None:
        self._session = session
        self._origins = origins
        self._token_url = token_url
        self._client = {k: v for k, v in (("client_id", client_id),
                                          ("client_secret", client_secret)) if v}
        self._scope = scope
        self._refresh_token = refresh_token
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._rate_limited = rate_limited
        self._access: str | None = None
        self._expires = 0.0

    @property
    def refresh_token(self) -> str:
        return self._refresh_token

    async def request(self, method: str, url: str, *, params: Mapping[str, str] | None = None,
                      json: Any = None, headers: Mapping[str, str] | None = None) -> Reply:
        for attempt in (1, 2):
            token = await self._token(renew=attempt == 2)
            reply = await self._send(method, url, params=params, json=json, headers={
                **(headers or {}), "Authorization": f"Bearer {token}"})
            if reply.status != 401:
                break
        if reply.status == 401:
            raise CredentialsRefused(f"{url}: access token refused")
        if reply.status == 429 or self._rate_limited(reply):
            raise RateLimited(f"{url}: rate limited ({reply.status} {reply.error_code()})",
                              retry_after(reply.headers.get("Retry-After")))
        if reply.status >= 500:
            raise ProviderError(f"{url}: HTTP {reply.status}")
        return reply

    async def _token(self, *, renew: bool) -> str:
        if self._access is not None and not renew and time.monotonic() < self._expires:
            return self._access
        form = {"grant_type": "refresh_token", "refresh_token": self._refresh_token,
                **self._client}
        if self._scope:
            form["scope"] = self._scope
        reply = await self._send("POST", self._token_url, data=form)
        if reply.status in (400, 401) and reply.error_code() in ("invalid_grant",
                                                                 "invalid_client",
                                                                 "unauthorized_client"):
            raise CredentialsRefused(f"token endpoint: {reply.error_code()}")
        if reply.status == 429:
            raise RateLimited("token endpoint: rate limited",
                              retry_after(reply.headers.get("Retry-After")))
        if reply.status != 200 or not isinstance(reply.body, dict) \
                or "access_token" not in reply.body:
            raise ProviderError(f"token endpoint: HTTP {reply.status}")
        self._access = str(reply.body["access_token"])
        self._expires = time.monotonic() + float(reply.body.get("expires_in", 3600)) - _EARLY
        if reply.body.get("refresh_token"):
            self._refresh_token = str(reply.body["refresh_token"])
        return self._access

    async def _send(self, method: str, url: str, **kwargs: Any) -> Reply:
        """One request, redirects followed only where the account's origins allow."""
        try:
            answer = await self._origins.request(self._session, method, url,
                                                 timeout=self._timeout, **kwargs)
        except outbound.Refused as exc:
            raise OriginRefused(f"{url}: {exc.reason}") from exc
        except outbound.OutboundError as exc:
            raise ProviderError(f"{url}: {exc.reason}") from exc
        return Reply(answer.status, _parsed(answer.body), answer.headers)


def _parsed(raw: bytes) -> Any:
    """The body as JSON, whatever the content type says; as text if it is not
    JSON (an error page), so that the status still tells what happened."""
    if not raw:
        return None
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw.decode(errors="replace")
