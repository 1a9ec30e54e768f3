"""POST /mcp behind Kalends' own authorization server (docs/mcp.md, "MCP clients and
OAuth"; the default):
metadata, the official SDK completing the flow, and each refusal."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import secrets
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from typing import Any

import aiohttp
import jwt
import orjson
import pytest
from aiohttp import web
from conftest import LiveServer, User, migrated_database
from cryptography.hazmat.primitives.asymmetric import ec
from mcp_oauth_sdk import MemoryTokenStorage, connect_and_use
from oauth_flow import (
    BOTH,
    REDIRECT_URI,
    Browser,
    Flow,
    form_of,
    pkce,
    query_of,
    register,
    serving,
    tokens_for,
)

from db import oauth as oauth_store
from domain import accounts, config, ids
from domain.connected import engine
from domain.oauth import keys
from registry import OPERATIONS
from registry.toolsets import in_core
from web.services import SETTINGS

MODERN = "2026-07-28"


@pytest.fixture(scope="module")
def server(database_url: str) -> Iterator[LiveServer]:
    with serving(database_url, "kalends_oauth") as live:
        yield live


@pytest.fixture
def person(server: LiveServer) -> User:
    return server.create_user()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def mcp(http: aiohttp.ClientSession, server: LiveServer, token: str | None,
              method: str = "tools/list", params: dict[str, Any] | None = None,
              ) -> tuple[int, Any, Any]:
    # Every toolset: these tests call organizations' and profiles' tools.
    headers = {"Content-Type": "application/json", "MCP-Protocol-Version": MODERN,
               "Mcp-Method": method, "X-MCP-Toolsets": "all"}
    if method == "tools/call" and params:
        headers["Mcp-Name"] = params["name"]
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    body = {"jsonrpc": "2.0", "id": 1, "method": method,
            "params": {**(params or {}), "_meta": {
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
                "io.modelcontextprotocol/clientCapabilities": {}}}}
    async with http.post(server.url + "/mcp", data=orjson.dumps(body),
                         headers=headers) as response:
        return response.status, await response.json(), response.headers


def challenge(headers: Any) -> dict[str, str]:
    value = headers["WWW-Authenticate"]
    assert value.startswith("Bearer ")
    out = {}
    for part in value.removeprefix("Bearer ").split('", '):
        key, _, v = part.partition('="')
        out[key.strip()] = v.rstrip('"')
    return out


def sign(server: LiveServer, claims: dict[str, Any], *, key: Any = None,
         kid: str | None = None) -> str:
    """A token signed with the server's own active key (or `key`), to test
    what the resource server does with claims a real issuer never writes."""
    active = server.call(keys.signing_key(server.db, _vault(server)))
    base = {"iss": server.url + "/", "aud": server.url + "/mcp", "sub": "nobody",
            "iat": int(time.time()), "exp": int(time.time()) + 300, "scope": BOTH}
    return jwt.encode({**base, **claims}, key or active.private_key, algorithm="ES256",
                      headers={"kid": kid or active.kid})


def _vault(server: LiveServer) -> Any:
    return engine.open_vault(server.app[SETTINGS])


# -- discovery ----------------------------------------------------------------------


async def test_metadata_and_the_challenge(server: LiveServer, http: aiohttp.ClientSession
                                          ) -> None:
    status, body, headers = await mcp(http, server, None)
    assert status == 401 and body["error"]["data"]["code"] == "not_authenticated"
    found = challenge(headers)
    assert found["resource_metadata"] == server.url + "/.well-known/oauth-protected-resource/mcp"
    assert found["scope"] == BOTH
    for path in ("/.well-known/oauth-protected-resource/mcp",
                 "/.well-known/oauth-protected-resource"):
        async with http.get(server.url + path) as response:
            prm = await response.json()
        assert prm == {"resource": server.url + "/mcp",
                       "authorization_servers": [server.url + "/"],
                       "scopes_supported": ["kalends:read", "kalends:write"],
                       "bearer_methods_supported": ["header"], "resource_name": "Kalends"}
    async with http.get(server.url + "/.well-known/oauth-authorization-server") as response:
        meta = await response.json()
    assert meta["issuer"] == server.url + "/"
    assert meta["code_challenge_methods_supported"] == ["S256"]
    assert meta["client_id_metadata_document_supported"] is True
    assert meta["authorization_response_iss_parameter_supported"] is True
    async with http.get(meta["jwks_uri"]) as response:
        published = await response.json()
    assert [k["alg"] for k in published["keys"]] == ["ES256"]
    assert "d" not in published["keys"][0]  # the public half only


# -- the official SDK ---------------------------------------------------------------


async def test_the_sdk_completes_the_flow_and_uses_tools(server: LiveServer, person: User
                                                         ) -> None:
    browser = Browser()
    seen: list[str] = []

    async def consent(url: str) -> str:
        seen.append(url)
        return await browser.consent(url, server.url, person.api_key)

    storage = MemoryTokenStorage()
    try:
        names, results = await connect_and_use(
            server.url + "/mcp", consent, storage=storage,
            calls=[("getContext", {}),
                   ("createCalendarEvent", {"calendar_id": person.calendar_id,
                                            "title": "Via OAuth",
                                            "start_time": "2031-05-06T10:00",
                                            "start_timezone": "Europe/Paris"})])
        # The same tools as /mcp-developer (the core toolset), with the same results.
        assert names == [op.name for op in OPERATIONS.values() if in_core(op)]
        context, created = results
        assert context.is_error is False
        assert [o["id"] for o in context.structured_content["organizations"]] == [
            person.organization_id]
        assert created.is_error is False, created.structured_content
        assert created.structured_content["id"].startswith("cev_")
        # The SDK asked with PKCE S256 for /mcp; a second connection reuses the token.
        query = query_of(seen[0])
        assert query["code_challenge_method"] == "S256"
        assert query["resource"] == server.url + "/mcp"
        await connect_and_use(server.url + "/mcp", consent, storage=storage,
                              calls=[("getContext", {})])
        assert len(seen) == 1
        # Once the access token has expired, the SDK refreshes (a rotated refresh token).
        first_refresh = storage.tokens.refresh_token if storage.tokens else None
        storage.expire_access_token()
        _, [again] = await connect_and_use(server.url + "/mcp", consent, storage=storage,
                                           calls=[("getContext", {})])
        assert again.is_error is False and len(seen) == 1
        assert storage.tokens is not None and storage.tokens.refresh_token != first_refresh
    finally:
        await browser.close()


# -- client identification ----------------------------------------------------------


async def test_a_client_metadata_document_identifies_the_client(
        server: LiveServer, person: User, http: aiohttp.ClientSession) -> None:
    documents = web.RouteTableDef()
    runner: web.AppRunner

    @documents.get("/agent/client.json")
    async def document(request: web.Request) -> web.Response:
        return web.json_response({
            "client_id": f"{request.url.origin()}/agent/client.json",
            "client_name": "Metadata Agent", "redirect_uris": [REDIRECT_URI],
            "grant_types": ["authorization_code", "refresh_token"],
            "token_endpoint_auth_method": "none"})

    app = web.Application()
    app.add_routes(documents)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    client_id = f"http://127.0.0.1:{runner.addresses[0][1]}/agent/client.json"
    browser = Browser()
    try:
        flow = Flow(server.url, client_id)
        verifier, pkce_challenge = pkce()
        status, page, _ = await browser.open(flow.authorization_url(pkce_challenge))
        assert status == 200
        # The page says who asks (the name and the host that vouches for it) and for what.
        assert "Metadata Agent" in page and "127.0.0.1" in page
        assert "kalends:write" in page and REDIRECT_URI in page
        status, _, location = await browser.answer(server.url, page, person.api_key)
        assert status == 303 and location is not None
        answer = query_of(location)
        assert location.startswith(REDIRECT_URI)
        assert answer["iss"] == server.url + "/" and answer["state"] == "xyz"
        status, tokens = await flow.token(http, grant_type="authorization_code",
                                          code=answer["code"], redirect_uri=REDIRECT_URI,
                                          code_verifier=verifier)
        assert status == 200, tokens
        claims = jwt.decode(tokens["access_token"], options={"verify_signature": False})
        assert claims["client_id"] == client_id and claims["sub"] == person.consumer
        status, body, _ = await mcp(http, server, tokens["access_token"])
        assert status == 200 and body["result"]["tools"]
        # A redirect URI the document does not list, by one character: refused on the page.
        flow.redirect_uri = REDIRECT_URI + "x"
        status, page, location = await browser.open(flow.authorization_url(pkce_challenge))
        assert status == 400 and location is None and "redirect_uri" in page
    finally:
        await browser.close()
        await runner.cleanup()


async def test_registration_rules(server: LiveServer, http: aiohttp.ClientSession) -> None:
    status, body = await register(http, server.url, redirect_uris=["http://evil.example/cb"])
    assert status == 400 and body["error"] == "invalid_redirect_uri"
    status, body = await register(http, server.url, redirect_uris=[])
    assert status == 400 and body["error"] == "invalid_redirect_uri"
    status, body = await register(http, server.url, token_endpoint_auth_method="private_key_jwt")
    assert status == 400 and body["error"] == "invalid_client_metadata"
    status, body = await register(http, server.url, token_endpoint_auth_method="client_secret_basic")
    assert status == 201 and body["client_id"].startswith("kcl_") and body["client_secret"]


# -- authorization requests ---------------------------------------------------------


async def test_pkce_and_redirect_uris_are_exact(server: LiveServer, person: User,
                                                http: aiohttp.ClientSession) -> None:
    _, client = await register(http, server.url)
    flow = Flow(server.url, client["client_id"])
    _, pkce_challenge = pkce()
    browser = Browser()
    try:
        # PKCE missing, or `plain`: sent back to the client as invalid_request, with iss.
        for url in (flow.authorization_url(None, method=None),
                    flow.authorization_url(pkce_challenge, method="plain"),
                    flow.authorization_url(pkce_challenge, method=None)):
            status, _, location = await browser.open(url)
            assert status == 302 and location is not None
            answer = query_of(location)
            assert answer["error"] == "invalid_request" and answer["iss"] == server.url + "/"
            assert answer["state"] == "xyz"
        # Another resource than /mcp: invalid_target.
        status, _, location = await browser.open(
            flow.authorization_url(pkce_challenge, resource="https://elsewhere.example/mcp"))
        assert status == 302 and query_of(location or "")["error"] == "invalid_target"
        # A redirect URI off by one character is never redirected to.
        for wrong in (REDIRECT_URI + "/", REDIRECT_URI.replace("33418", "33419"),
                      REDIRECT_URI.upper()):
            off = Flow(server.url, client["client_id"], redirect_uri=wrong)
            status, page, location = await browser.open(off.authorization_url(pkce_challenge))
            assert status == 400 and location is None, wrong
        # The user says no: access_denied, and no code.
        status, page, _ = await browser.open(flow.authorization_url(pkce_challenge))
        status, _, location = await browser.answer(server.url, page, "", decision="deny")
        assert status == 303 and query_of(location or "")["error"] == "access_denied"
        # A wrong key shows the page again; nothing is sent to the client.
        status, page, _ = await browser.open(flow.authorization_url(pkce_challenge))
        status, again, location = await browser.answer(server.url, page, "kal_wrong")
        assert status == 401 and location is None and "not valid" in again
        # A code is bound to its verifier and redeemed once.
        status, page, _ = await browser.open(flow.authorization_url(pkce_challenge))
        _, _, location = await browser.answer(server.url, page, person.api_key)
        code = query_of(location or "")["code"]
        status, body = await flow.token(http, grant_type="authorization_code", code=code,
                                        redirect_uri=REDIRECT_URI, code_verifier=pkce()[0])
        assert status == 400 and body["error"] == "invalid_grant"
    finally:
        await browser.close()


async def _consented(server: LiveServer, person: User, flow: Flow) -> tuple[str, str]:
    """A code the person consented to in the browser for `flow`'s client, and the PKCE
    verifier it is bound to."""
    verifier, pkce_challenge = pkce()
    browser = Browser()
    try:
        location = await browser.consent(flow.authorization_url(pkce_challenge), server.url,
                                         person.api_key)
    finally:
        await browser.close()
    return query_of(location)["code"], verifier


async def test_a_reused_code_revokes_what_it_gave(server: LiveServer, person: User,
                                                 http: aiohttp.ClientSession) -> None:
    _, client = await register(http, server.url)
    flow = Flow(server.url, client["client_id"])
    code, verifier = await _consented(server, person, flow)
    form = {"grant_type": "authorization_code", "code": code,
            "redirect_uri": REDIRECT_URI, "code_verifier": verifier}
    status, tokens = await flow.token(http, **form)
    assert status == 200
    status, body = await flow.token(http, **form)
    assert status == 400 and body["error"] == "invalid_grant"
    status, _, _ = await mcp(http, server, tokens["access_token"])
    assert status == 401


async def test_a_refused_code_is_not_used_up(server: LiveServer, person: User,
                                            http: aiohttp.ClientSession) -> None:
    """Whoever sees a code (a log, a referrer) but lacks what goes with it cannot
    spend it: each refused redemption leaves it to the client, whose request then
    succeeds. Presenting it once more after that still revokes what it gave."""
    _, client = await register(http, server.url)
    _, stranger = await register(http, server.url)
    flow = Flow(server.url, client["client_id"])
    code, verifier = await _consented(server, person, flow)
    honest = {"grant_type": "authorization_code", "code": code,
              "redirect_uri": REDIRECT_URI, "code_verifier": verifier,
              "resource": server.url + "/mcp"}
    refused: list[tuple[Flow, dict[str, str], str]] = [
        (flow, {k: v for k, v in honest.items() if k != "code_verifier"}, "invalid_grant"),
        (flow, {**honest, "code_verifier": pkce()[0]}, "invalid_grant"),
        (flow, {**honest, "code_verifier": "short"}, "invalid_grant"),
        (Flow(server.url, stranger["client_id"]), honest, "invalid_grant"),
        (flow, {**honest, "redirect_uri": REDIRECT_URI + "/"}, "invalid_grant"),
        (flow, {**honest, "resource": server.url + "/mcp-other"}, "invalid_target"),
    ]
    for who, form, error in refused:
        status, body = await who.token(http, **form)
        assert (status, body["error"]) == (400, error), (form, body)
    status, tokens = await flow.token(http, **honest)
    assert status == 200, tokens
    status, _, _ = await mcp(http, server, tokens["access_token"])
    assert status == 200
    # Spent: presented again, the code has leaked, and its grant ends.
    status, body = await flow.token(http, **honest)
    assert status == 400 and body["error"] == "invalid_grant"
    status, _, _ = await mcp(http, server, tokens["access_token"])
    assert status == 401
    status, body = await flow.token(http, grant_type="refresh_token",
                                    refresh_token=tokens["refresh_token"])
    assert status == 400 and body["error"] == "invalid_grant"


async def test_consent_needs_the_page_cookie(server: LiveServer, person: User,
                                             http: aiohttp.ClientSession) -> None:
    _, client = await register(http, server.url)
    flow = Flow(server.url, client["client_id"])
    browser = Browser()
    try:
        status, page, _ = await browser.open(flow.authorization_url(pkce()[1]))
        assert status == 200
        # Another site posting the same form (no cookie of ours): refused, no redirect.
        _, fields = form_of(page)
        async with http.post(server.url + "/oauth/authorize", allow_redirects=False, data={
                **fields, "api_key": person.api_key, "decision": "allow"}) as response:
            assert response.status == 403 and "Location" not in response.headers
    finally:
        await browser.close()


# -- tokens at /mcp -----------------------------------------------------------------


async def test_tokens_that_are_refused(server: LiveServer, person: User,
                                       http: aiohttp.ClientSession) -> None:
    now = int(time.time())
    sub = {"sub": person.consumer}
    cases = {
        "expired": sign(server, {**sub, "exp": now - 120, "iat": now - 600}),
        "not yet valid": sign(server, {**sub, "nbf": now + 600}),
        "another audience": sign(server, {**sub, "aud": server.url + "/mcp-developer"}),
        "another issuer": sign(server, {**sub, "iss": "https://issuer.example/"}),
        "bad signature": sign(server, sub, key=ec.generate_private_key(ec.SECP256R1())),
        "unknown key": sign(server, sub, kid="no-such-key"),
        "not a JWT": "kal_" + secrets.token_hex(8),
    }
    for why, token in cases.items():
        status, body, headers = await mcp(http, server, token)
        assert status == 401, why
        assert body["error"]["data"]["code"] == "not_authenticated", why
        found = challenge(headers)
        assert found["error"] == "invalid_token", why
        assert found["resource_metadata"].endswith("/.well-known/oauth-protected-resource/mcp")
    # The same claims, well signed and current, are taken.
    status, body, _ = await mcp(http, server, sign(server, sub))
    assert status == 200, body
    # HS256 with the public key as secret (the classic confusion) is refused outright.
    forged = jwt.encode({"sub": person.consumer, "aud": server.url + "/mcp",
                         "iss": server.url + "/", "exp": now + 300}, "secret" * 6,
                        algorithm="HS256", headers={"kid": "x"})
    status, _, _ = await mcp(http, server, forged)
    assert status == 401


async def test_read_scope_cannot_write(server: LiveServer, person: User,
                                       http: aiohttp.ClientSession) -> None:
    _, tokens = await tokens_for(server.url, person.api_key, scope="kalends:read")
    token = tokens["access_token"]
    assert tokens["scope"] == "kalends:read"
    status, body, _ = await mcp(http, server, token, "tools/call",
                                {"name": "listOrganizations", "arguments": {}})
    assert status == 200 and body["result"]["isError"] is False
    status, body, headers = await mcp(http, server, token, "tools/call", {
        "name": "createProfile",
        "arguments": {"platform_id": "ro_" + secrets.token_hex(4), "display_name": "No"}})
    assert status == 403, body
    found = challenge(headers)
    assert found["error"] == "insufficient_scope" and found["scope"] == "kalends:write"
    # Nothing was created.
    status, body, _ = await mcp(http, server, token, "tools/call",
                                {"name": "listProfiles", "arguments": {}})
    assert status == 200 and body["result"]["structuredContent"]["data"] == []
    # No kalends scope at all: not even a listing.
    status, _, headers = await mcp(http, server, sign(server, {"sub": person.consumer,
                                                               "scope": "openid"}))
    assert status == 403 and challenge(headers)["scope"] == "kalends:read"


async def test_an_unclaimed_subject_until_claimed(server: LiveServer, person: User,
                                                  http: aiohttp.ClientSession) -> None:
    subject = "agent-" + secrets.token_hex(4)
    token = sign(server, {"sub": subject})
    status, body, _ = await mcp(http, server, token)
    assert status == 403
    assert body["error"]["data"]["code"] == "consumer_not_claimed"
    server.admin(accounts.claim_consumer, subject, person.email)
    status, body, _ = await mcp(http, server, token, "tools/call",
                                {"name": "listOrganizations", "arguments": {}})
    assert status == 200
    assert body["result"]["structuredContent"]["data"][0]["id"] == person.organization_id


async def test_refresh_tokens_rotate_and_a_reuse_revokes_the_family(
        server: LiveServer, person: User, http: aiohttp.ClientSession) -> None:
    flow, first = await tokens_for(server.url, person.api_key)
    status, second = await flow.token(http, grant_type="refresh_token",
                                      refresh_token=first["refresh_token"])
    assert status == 200 and second["refresh_token"] != first["refresh_token"]
    status, body, _ = await mcp(http, server, second["access_token"])
    assert status == 200
    # A narrower scope may be asked for; a wider one may not.
    status, body = await flow.token(http, grant_type="refresh_token",
                                    refresh_token=second["refresh_token"], scope="openid")
    assert status == 400 and body["error"] == "invalid_scope"
    # The first refresh token again: someone else holds it. The whole family ends.
    status, body = await flow.token(http, grant_type="refresh_token",
                                    refresh_token=first["refresh_token"])
    assert status == 400 and body["error"] == "invalid_grant"
    status, body = await flow.token(http, grant_type="refresh_token",
                                    refresh_token=second["refresh_token"])
    assert status == 400 and body["error"] == "invalid_grant"
    for access in (first["access_token"], second["access_token"]):
        status, _, headers = await mcp(http, server, access)
        assert status == 401 and challenge(headers)["error"] == "invalid_token"


async def test_a_refused_refresh_is_not_used_up(server: LiveServer, person: User,
                                               http: aiohttp.ClientSession) -> None:
    """A refresh that asks for more than the grant, or comes from another client
    or for another resource, is refused and spends nothing: the client's next,
    honest refresh is no "reuse" and the grant lives on. Reusing a token that a
    successful refresh spent still ends the family."""
    flow, first = await tokens_for(server.url, person.api_key, scope="kalends:read")
    _, stranger = await register(http, server.url)
    token = first["refresh_token"]
    refused: list[tuple[Flow, dict[str, str], str]] = [
        (flow, {"scope": "kalends:write"}, "invalid_scope"),
        (flow, {"scope": "kalends:read kalends:write"}, "invalid_scope"),
        (flow, {"scope": "kalends:read openid"}, "invalid_scope"),
        (flow, {"scope": ""}, "invalid_scope"),
        (flow, {"resource": server.url + "/mcp-other"}, "invalid_target"),
        (Flow(server.url, stranger["client_id"]), {}, "invalid_grant"),
    ]
    for who, extra, error in refused:
        status, body = await who.token(http, grant_type="refresh_token", refresh_token=token,
                                       **extra)
        assert (status, body["error"]) == (400, error), (extra, body)
    status, second = await flow.token(http, grant_type="refresh_token", refresh_token=token,
                                      scope="kalends:read")
    assert status == 200, second
    assert second["scope"] == "kalends:read"
    status, _, _ = await mcp(http, server, second["access_token"])
    assert status == 200
    # The spent token again: the whole family ends, the newest tokens with it.
    status, body = await flow.token(http, grant_type="refresh_token", refresh_token=token)
    assert status == 400 and body["error"] == "invalid_grant"
    status, body = await flow.token(http, grant_type="refresh_token",
                                    refresh_token=second["refresh_token"])
    assert status == 400 and body["error"] == "invalid_grant"
    status, _, _ = await mcp(http, server, second["access_token"])
    assert status == 401


async def test_revocation(server: LiveServer, person: User, http: aiohttp.ClientSession
                          ) -> None:
    flow, tokens = await tokens_for(server.url, person.api_key)
    async with http.post(server.url + "/oauth/revoke", data={
            "token": tokens["refresh_token"], "client_id": flow.client_id}) as response:
        assert response.status == 200
    status, _, _ = await mcp(http, server, tokens["access_token"])
    assert status == 401
    status, body = await flow.token(http, grant_type="refresh_token",
                                    refresh_token=tokens["refresh_token"])
    assert status == 400 and body["error"] == "invalid_grant"
    # An unknown token is no error (RFC 7009 §2.2).
    async with http.post(server.url + "/oauth/revoke", data={
            "token": "nothing", "client_id": flow.client_id}) as response:
        assert response.status == 200


@pytest.mark.slow
async def test_key_rotation(server: LiveServer, person: User, http: aiohttp.ClientSession
                            ) -> None:
    flow, before = await tokens_for(server.url, person.api_key)
    old_kid = jwt.get_unverified_header(before["access_token"])["kid"]
    status, _, _ = await mcp(http, server, before["access_token"])
    assert status == 200  # the resource server now holds the current keys
    rotated = server.call(keys.rotate(server.db, _vault(server)))
    assert rotated["retired"] == [old_kid]
    await asyncio.sleep(1.1)  # past the minimum interval between two JWKS fetches
    status, after = await flow.token(http, grant_type="refresh_token",
                                     refresh_token=before["refresh_token"])
    assert status == 200
    assert jwt.get_unverified_header(after["access_token"])["kid"] == rotated["kid"]
    # A kid the resource server has not seen: it fetches the keys again, once, and takes it.
    status, _, _ = await mcp(http, server, after["access_token"])
    assert status == 200
    # The old key still verifies the tokens it signed until they expire.
    status, _, _ = await mcp(http, server, sign(server, {"sub": person.consumer},
                                                kid=rotated["kid"]))
    assert status == 200
    async with http.get(server.url + "/oauth/jwks.json") as response:
        kids = [k["kid"] for k in (await response.json())["keys"]]
    assert kids == [rotated["kid"], old_kid]


@pytest.mark.slow
def test_the_cli_rotates_keys(server: LiveServer) -> None:
    assert server.db.dsn is not None
    env = {**os.environ, "DATABASE_URL": server.db.dsn,
           "KALENDS_SECRET_KEY": server.app[SETTINGS].secret_key or ""}
    done = subprocess.run([sys.executable, "-m", "kalends", "admin", "rotate-signing-key"],
                          capture_output=True, env=env, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    out = orjson.loads(done.stdout)
    assert out["kid"] and isinstance(out["retired"], list)
    active = server.call(keys.signing_key(server.db, _vault(server)))
    assert active.kid == out["kid"]



async def test_one_rate_limit_per_consumer_across_credentials(
        server: LiveServer, person: User, http: aiohttp.ClientSession) -> None:
    """A token's subject is charged as its API keys are: one bucket."""
    _, tokens = await tokens_for(server.url, person.api_key)

    def tat(subject: str) -> Any:
        return server.call(server.db.fetchval(
            "SELECT tat FROM rate_limits WHERE subject = $1", subject))

    bucket, address = "consumer:" + person.consumer, "address:127.0.0.1"
    status, _, headers = await mcp(http, server, tokens["access_token"])
    assert status == 200 and headers["RateLimit-Policy"] == '"default";q=6000;w=60'
    before = (tat(bucket), tat(address))
    status, _, _ = await mcp(http, server, tokens["access_token"])
    after_token = (tat(bucket), tat(address))
    async with http.get(server.url + "/v1/organizations",
                        headers={"Authorization": f"Bearer {person.api_key}"}) as response:
        assert response.status == 200
    # Each request moves the consumer's bucket on (GCRA: its theoretical arrival
    # time), whichever credential it carries; the address's is not charged.
    assert after_token[0] > before[0] and tat(bucket) > after_token[0]
    assert after_token[1] == before[1]


async def test_expired_grants_are_forgotten(server: LiveServer, person: User) -> None:
    stale, live = ids.new_id("ogr"), ids.new_id("ogr")
    for grant, ttl in ((stale, timedelta(days=-2)), (live, timedelta(minutes=1))):
        server.call(oauth_store.insert_grant(
            server.db, grant, client_id="kcl_" + "0" * 32, consumer=person.consumer,
            scope=BOTH, resource=server.url + "/mcp", redirect_uri=REDIRECT_URI,
            code_hash=secrets.token_bytes(32), code_challenge="x" * 43, code_ttl=ttl))
    server.call(oauth_store.forget_expired(server.db))
    left = server.call(server.db.fetch("SELECT id FROM oauth_grants WHERE id = ANY($1)",
                                       [stale, live]))
    assert [r["id"] for r in left] == [live]


@pytest.mark.slow
async def test_a_token_checked_before_still_expires(server: LiveServer, person: User,
                                                    http: aiohttp.ClientSession) -> None:
    """Checked claims are remembered between calls, never past the token's expiry
    (and the 30 s leeway for clocks)."""
    token = sign(server, {"sub": person.consumer, "exp": int(time.time()) - 27})
    for _ in range(2):
        status, _, _ = await mcp(http, server, token)
        assert status == 200
    await asyncio.sleep(4)
    status, _, headers = await mcp(http, server, token)
    assert status == 401 and challenge(headers)["error"] == "invalid_token"


async def test_concurrent_uses_of_one_refresh_token(server: LiveServer, person: User,
                                                    http: aiohttp.ClientSession) -> None:
    """Five clients racing with one refresh token: exactly one wins (row locks),
    and the others' attempts count as reuse, so the family ends."""
    flow, tokens = await tokens_for(server.url, person.api_key)
    answers = await asyncio.gather(*(
        flow.token(http, grant_type="refresh_token", refresh_token=tokens["refresh_token"])
        for _ in range(5)))
    winners = [body for status, body in answers if status == 200]
    assert len(winners) == 1, answers
    assert all(body["error"] == "invalid_grant" for status, body in answers if status != 200)
    status, body = await flow.token(http, grant_type="refresh_token",
                                    refresh_token=winners[0]["refresh_token"])
    assert status == 400 and body["error"] == "invalid_grant"


def test_grants_and_keys_outlive_a_restart(database_url: str) -> None:
    """The signing key and the grants live in the database: after the process
    that issued them is gone, another on the same database refreshes the grant
    and signs with the same key."""
    settings = dataclasses.replace(config.load(), secret_key=secrets.token_urlsafe(32))
    with migrated_database(database_url, "kalends_oauth_restart") as dsn:
        first = LiveServer(dsn, settings=settings)
        try:
            user = first.create_user()
            flow, tokens = asyncio.run(tokens_for(first.url, user.api_key))
        finally:
            first.close()
        second = LiveServer(dsn, settings=settings)

        async def refresh() -> tuple[int, dict[str, Any], list[str]]:
            async with aiohttp.ClientSession() as http:
                # The grant is for the first process's URL (another port): refreshed
                # for that resource, through the second process.
                status, body = await Flow(second.url, flow.client_id).token(
                    http, grant_type="refresh_token", refresh_token=tokens["refresh_token"],
                    resource=first.url + "/mcp")
                async with http.get(second.url + "/oauth/jwks.json") as response:
                    published = await response.json()
            return status, body, [k["kid"] for k in published["keys"]]

        try:
            status, body, kids = asyncio.run(refresh())
        finally:
            second.close()
    assert status == 200, body
    kid = jwt.get_unverified_header(tokens["access_token"])["kid"]
    assert jwt.get_unverified_header(body["access_token"])["kid"] == kid
    assert kids == [kid]
