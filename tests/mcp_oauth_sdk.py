"""The official MCP Python SDK (mcp==2.3.0) as an OAuth client, for tests.

`connect_and_use` runs what an agent host built on the SDK runs: an
`OAuthClientProvider` as the `auth=` of the httpx2 client under the SDK's
Streamable HTTP transport. On the first 401 from the MCP endpoint the SDK finds
the Protected Resource Metadata (RFC 9728) and the authorization server's
metadata (RFC 8414 / OIDC), registers (RFC 7591), or uses a Client ID Metadata
Document when it is given one and the server supports them, sends the browser
to the authorization endpoint with PKCE (S256), exchanges the code and retries
the request with the token. The test plays the browser and the user: `consent`
receives the authorization URL and returns the URL the browser was redirected
to, and the code, state and iss in it are handed back to the SDK.

A `MemoryTokenStorage` given to several calls is one client's memory: the
registration and the tokens it holds are reused, and so is the SDK's provider,
which is what knows when the access token expires and refreshes it then (the
SDK does not record an expiry in the storage; a new provider over stored tokens
sends the access token until the server refuses it, and then asks for consent
again rather than refreshing). `fresh_provider=True` models that restart.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx2
from mcp import Client
from mcp.client.auth import AuthorizationCodeResult, OAuthClientProvider, OAuthFlowError
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken
from mcp.types import CallToolResult

__all__ = ["Consent", "MemoryTokenStorage", "connect_and_use"]

Consent = Callable[[str], Awaitable[str]]
"""Given the authorization URL, play the user: return the URL the browser was redirected to."""

# The SDK transport's own defaults (mcp.shared._httpx_utils): a response stream may stay open.
_TIMEOUT = httpx2.Timeout(30.0, read=300.0)


class _Browser:
    """The SDK's redirect and callback handlers, turned into one call of the current `consent`.

    The SDK calls `redirect` with the authorization URL and then `callback`
    (mcp/client/auth/oauth2.py:429-431); one instance serves every connection made
    through a provider, so the consent of the current call is set on it each time.
    """

    def __init__(self, redirect_uri: str) -> None:
        self.redirect_uri = redirect_uri
        self.consent: Consent | None = None
        self.authorization_urls: list[str] = []
        self._redirected_to: str | None = None

    async def redirect(self, authorization_url: str) -> None:
        if self.consent is None:  # pragma: no cover - set by connect_and_use
            raise OAuthFlowError("no consent callable for this connection")
        self.authorization_urls.append(authorization_url)
        self._redirected_to = await self.consent(authorization_url)

    async def callback(self) -> AuthorizationCodeResult:
        landed, self._redirected_to = self._redirected_to, None
        if landed is None:  # pragma: no cover - the SDK always redirects first
            raise OAuthFlowError("the SDK asked for the callback before redirecting")
        parts = urlsplit(landed)
        expected = urlsplit(self.redirect_uri)
        if (parts.scheme, parts.netloc, parts.path) != (
            expected.scheme,
            expected.netloc,
            expected.path,
        ):
            raise OAuthFlowError(
                f"the browser was sent to {landed!r}, not to {self.redirect_uri!r}"
            )
        query = parse_qs(parts.query, keep_blank_values=True)

        def one(name: str) -> str | None:
            values = query.get(name)
            if values is None:
                return None
            if len(values) != 1:
                raise OAuthFlowError(f"{name} appears {len(values)} times in {landed!r}")
            return values[0]

        error = one("error")
        if error is not None:
            description = one("error_description")
            raise OAuthFlowError(
                f"authorization error {error!r}"
                + (f": {description}" if description else "")
                + f" (state={one('state')!r}, iss={one('iss')!r})"
            )
        code = one("code")
        if not code:
            raise OAuthFlowError(f"no code in the redirect {landed!r}")
        return AuthorizationCodeResult(code=code, state=one("state"), iss=one("iss"))


@dataclass
class _Held:
    provider: OAuthClientProvider
    browser: _Browser


class MemoryTokenStorage:
    """An in-memory `mcp.client.auth.TokenStorage`, with what was stored kept for assertions.

    Reused across `connect_and_use` calls it also keeps the SDK provider built for
    each configuration, so that later connections are the same client (see the module
    docstring).
    """

    def __init__(
        self,
        tokens: OAuthToken | None = None,
        client_info: OAuthClientInformationFull | None = None,
    ) -> None:
        self.tokens = tokens
        self.client_info = client_info
        # Every value the SDK stored, oldest first (tokens from code exchanges and refreshes).
        self.token_history: list[OAuthToken] = []
        self.client_info_history: list[OAuthClientInformationFull] = []
        self._held: dict[tuple[Any, ...], _Held] = {}

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens
        self.token_history.append(tokens)

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info
        self.client_info_history.append(client_info)

    @property
    def authorization_urls(self) -> list[str]:
        """Every authorization URL the SDK sent the browser to through this storage's providers."""
        return [url for held in self._held.values() for url in held.browser.authorization_urls]

    def expire_access_token(self) -> None:
        """Make the held providers treat their access token as expired.

        The next request then refreshes it first (grant_type=refresh_token) when there
        is a refresh token, as it would once `expires_in` had passed
        (mcp/client/auth/oauth2.py:613-620).
        """
        for held in self._held.values():
            held.provider.context.token_expiry_time = time.time() - 1

    def forget_providers(self) -> None:
        """Drop the held providers: the next connection is a restarted client over this storage."""
        self._held.clear()


def _provider(
    storage: MemoryTokenStorage,
    mcp_url: str,
    *,
    redirect_uri: str,
    client_metadata_url: str | None,
    scope: str | None,
    token_endpoint_auth_method: str | None,
    client_name: str,
    fresh: bool,
) -> _Held:
    key = (
        mcp_url,
        redirect_uri,
        client_metadata_url,
        scope,
        token_endpoint_auth_method,
        client_name,
    )
    held = None if fresh else storage._held.get(key)
    if held is None:
        browser = _Browser(redirect_uri)
        metadata: dict[str, Any] = {
            "client_name": client_name,
            "redirect_uris": [redirect_uri],
            "scope": scope,
            "token_endpoint_auth_method": token_endpoint_auth_method,
        }
        # Unset (None) members are not sent in the registration request (exclude_none).
        client_metadata = OAuthClientMetadata.model_validate(
            {name: value for name, value in metadata.items() if value is not None}
        )
        provider = OAuthClientProvider(
            server_url=mcp_url,
            client_metadata=client_metadata,
            storage=storage,
            redirect_handler=browser.redirect,
            callback_handler=browser.callback,
            client_metadata_url=client_metadata_url,
        )
        held = _Held(provider, browser)
        storage._held[key] = held
    return held


def _single_cause(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    """The one exception inside (nested) task-group wrappers, if there is exactly one."""
    leaves: list[BaseException] = []

    def walk(error: BaseException) -> None:
        if isinstance(error, BaseExceptionGroup):
            for inner in error.exceptions:
                walk(inner)
        else:
            leaves.append(error)

    walk(group)
    return leaves[0] if len(leaves) == 1 else None


async def connect_and_use(
    mcp_url: str,
    consent: Consent,
    *,
    client_metadata_url: str | None = None,
    redirect_uri: str = "http://127.0.0.1:33418/callback",
    scope: str | None = None,
    storage: MemoryTokenStorage | None = None,
    calls: Sequence[tuple[str, dict[str, Any]]] = (),
    mode: str = "auto",
    token_endpoint_auth_method: str | None = None,
    client_name: str = "kalends-tests (mcp python sdk)",
    fresh_provider: bool = False,
) -> tuple[list[str], list[CallToolResult]]:
    """Connect to `mcp_url` with the SDK's OAuth client, list the tools, call `calls` in order.

    Returns the names of all listed tools (every page) and the results of the calls.

    consent: the user and the browser. Given the authorization URL the SDK built
        (response_type, client_id, redirect_uri, state, code_challenge,
        code_challenge_method=S256, resource, scope), return the full URL the
        authorization server redirected to: `redirect_uri` with code, state and iss,
        or with error (raised as `OAuthFlowError`). The URL is returned to the SDK as
        is: the SDK checks state and iss (RFC 9207) itself. Not called when stored
        tokens are accepted.
    client_metadata_url: an https URL with a path, the client's Client ID Metadata
        Document; the SDK uses it as client_id only if the authorization server's
        metadata says client_id_metadata_document_supported: true, and registers
        dynamically otherwise. The document must list `redirect_uri`.
    redirect_uri: the one redirect URI registered and sent (nothing listens on it).
    scope: the client metadata's scope. The SDK replaces it with the scope it
        selects on every 401 (the challenge's scope, else the resource metadata's
        scopes_supported, else the authorization server's), so it is only sent as
        part of a step-up union made by a provider that has not seen a 401.
    storage: registration and tokens, and the SDK provider, kept across calls. A new
        `MemoryTokenStorage` when not given.
    mode: "auto" (server/discover, else initialize), "legacy" (initialize) or a
        modern protocol version, as for `mcp.Client`.
    token_endpoint_auth_method: sent in the registration request; None leaves it
        out, as the SDK does by default (RFC 7591 then means client_secret_basic).
    fresh_provider: build a new SDK provider even if `storage` holds one for this
        configuration (a restarted client: it trusts the stored access token, with
        no expiry known, and answers a 401 with a new authorization, not a refresh).

    Errors of the OAuth flow surface inside the SDK's task groups; when a group
    holds a single exception, that exception is raised instead (chained to it).
    """
    storage = storage if storage is not None else MemoryTokenStorage()
    held = _provider(
        storage,
        mcp_url,
        redirect_uri=redirect_uri,
        client_metadata_url=client_metadata_url,
        scope=scope,
        token_endpoint_auth_method=token_endpoint_auth_method,
        client_name=client_name,
        fresh=fresh_provider,
    )
    held.browser.consent = consent
    names: list[str] = []
    results: list[CallToolResult] = []
    try:
        async with (
            httpx2.AsyncClient(auth=held.provider, timeout=_TIMEOUT) as http,
            Client(
                streamable_http_client(mcp_url, http_client=http), mode=mode, cache=None
            ) as client,
        ):
            cursor: str | None = None
            while True:
                page = await client.list_tools(cursor=cursor)
                names.extend(tool.name for tool in page.tools)
                cursor = page.next_cursor
                if cursor is None:
                    break
            for name, arguments in calls:
                results.append(await client.call_tool(name, arguments))
    except BaseExceptionGroup as group:
        cause = _single_cause(group)
        if isinstance(cause, Exception):
            raise cause from group
        raise
    finally:
        held.browser.consent = None
    return names, results
