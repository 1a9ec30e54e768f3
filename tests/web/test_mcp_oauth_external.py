"""POST /mcp behind a company's identity provider (`KALENDS_OAUTH_ISSUER`, docs/mcp.md,
"MCP clients and OAuth"): a real authorization server, npm oidc-provider 9 under Node 22,
issuing JWT access tokens for /mcp by client credentials (tests/oidc_server.py)."""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import httpx2
import jwt
import orjson
import pytest
from conftest import LiveServer, migrated_database
from cryptography.hazmat.primitives.asymmetric import ec
from mcp import Client
from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider
from mcp.client.streamable_http import streamable_http_client
from mcp_oauth_sdk import MemoryTokenStorage
from oidc_server import OidcProvider

from domain import accounts, config
from registry import OPERATIONS

# slow: an npm OpenID provider started for the module (the fast loop, pytest -m 'not slow', leaves it out)
pytestmark = pytest.mark.slow

MODERN = "2026-07-28"
WRITER = {"client_id": "agent-rw", "client_secret": secrets.token_urlsafe(16),
          "scope": "kalends:read kalends:write"}
READER = {"client_id": "agent-ro", "client_secret": secrets.token_urlsafe(16),
          "scope": "kalends:read"}


@dataclasses.dataclass
class World:
    server: LiveServer
    issuer: OidcProvider


@pytest.fixture(scope="module")
def world(database_url: str) -> Iterator[World]:
    issuer = OidcProvider("pending", clients=[WRITER, READER])
    settings = dataclasses.replace(config.load(), oauth_issuer=issuer.issuer)
    with migrated_database(database_url, "kalends_oauth_ext") as dsn:
        server = LiveServer(dsn, settings=settings)
        try:
            # The issuer learns the resource it issues for: this server's /mcp.
            issuer.resource = server.url + "/mcp"
            issuer.start()
            yield World(server, issuer)
        finally:
            issuer.stop()
            server.close()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def mcp(http: aiohttp.ClientSession, world: World, token: str, method: str = "tools/list",
              params: dict[str, Any] | None = None) -> tuple[int, Any, Any]:
    # Every toolset: these tests call organizations' and profiles' tools.
    headers = {"Content-Type": "application/json", "MCP-Protocol-Version": MODERN,
               "Mcp-Method": method, "Authorization": f"Bearer {token}",
               "X-MCP-Toolsets": "all"}
    if method == "tools/call" and params:
        headers["Mcp-Name"] = params["name"]
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {
        **(params or {}), "_meta": {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {}}}}
    async with http.post(world.server.url + "/mcp", data=orjson.dumps(body),
                         headers=headers) as response:
        return response.status, await response.json(), response.headers


def token(world: World, client: dict[str, str], scope: str | None = None) -> str:
    return world.issuer.token(client["client_id"], client["client_secret"],
                              scope or client["scope"])


def claim(world: World, subject: str) -> str:
    person = world.server.create_user()
    world.server.admin(accounts.claim_consumer, subject, person.email)
    return person.organization_id


async def test_metadata_names_the_external_issuer(world: World,
                                                  http: aiohttp.ClientSession) -> None:
    async with http.get(world.server.url + "/.well-known/oauth-protected-resource/mcp") as r:
        prm = await r.json()
    assert prm["authorization_servers"] == [world.issuer.issuer]
    assert prm["resource"] == world.server.url + "/mcp"
    # Kalends issues nothing itself in this mode.
    for path in ("/.well-known/oauth-authorization-server", "/oauth/token", "/oauth/jwks.json"):
        async with http.get(world.server.url + path) as r:
            assert r.status in (404, 405), path


async def test_the_sdk_with_client_credentials(world: World, http: aiohttp.ClientSession
                                               ) -> None:
    # Until an operator ties the token's subject to a user: consumer_not_claimed.
    status, body, _ = await mcp(http, world, token(world, WRITER))
    assert status == 403 and body["error"]["data"]["code"] == "consumer_not_claimed"
    organization = claim(world, WRITER["client_id"])

    auth = ClientCredentialsOAuthProvider(
        server_url=world.server.url + "/mcp", storage=MemoryTokenStorage(),
        client_id=WRITER["client_id"], client_secret=WRITER["client_secret"],
        scope=WRITER["scope"], issuer=world.issuer.issuer)
    async with (httpx2.AsyncClient(auth=auth, headers={"X-MCP-Toolsets": "all"}) as client_http,
                Client(streamable_http_client(world.server.url + "/mcp",
                                              http_client=client_http),
                       cache=None) as client):
        listed = await client.list_tools()
        assert [tool.name for tool in listed.tools] == list(OPERATIONS)
        orgs = await client.call_tool("listOrganizations", {})
        assert orgs.is_error is False
        assert [o["id"] for o in orgs.structured_content["data"]] == [organization]
        created = await client.call_tool("createProfile", {
            "platform_id": "idp_" + secrets.token_hex(4), "display_name": "Via the IdP"})
        assert created.is_error is False, created.structured_content


async def test_read_only_clients_cannot_write(world: World, http: aiohttp.ClientSession
                                              ) -> None:
    read = token(world, READER)
    status, _, _ = await mcp(http, world, read)  # the subject's first call makes it a consumer
    assert status == 403
    claim(world, READER["client_id"])
    status, body, _ = await mcp(http, world, read, "tools/call",
                                {"name": "listOrganizations", "arguments": {}})
    assert status == 200 and body["result"]["isError"] is False
    status, _, headers = await mcp(http, world, read, "tools/call", {
        "name": "createProfile", "arguments": {"platform_id": "ro_" + secrets.token_hex(4),
                                               "display_name": "No"}})
    assert status == 403
    assert 'error="insufficient_scope"' in headers["WWW-Authenticate"]
    assert 'scope="kalends:write"' in headers["WWW-Authenticate"]


async def test_tokens_of_another_issuer_are_refused(world: World,
                                                   http: aiohttp.ClientSession) -> None:
    stranger = OidcProvider(world.server.url + "/mcp", clients=[WRITER])
    with stranger:
        forged = token(dataclasses.replace(world, issuer=stranger), WRITER)
    status, _, headers = await mcp(http, world, forged)
    assert status == 401 and 'error="invalid_token"' in headers["WWW-Authenticate"]


async def test_a_new_signing_key_at_the_issuer(world: World, http: aiohttp.ClientSession
                                              ) -> None:
    # Passing the token check is what counts here: 200, or 403 while the
    # subject is unclaimed; never 401.
    before = token(world, READER)
    status, _, _ = await mcp(http, world, before)
    assert status != 401
    world.issuer.rotate_keys(keep_previous=False)
    after = token(world, READER)
    assert jwt.get_unverified_header(after)["kid"] != jwt.get_unverified_header(before)["kid"]
    # A forged kid just before makes the resource server fetch the keys (and
    # refuse it); the new key's token, right after, still gets the fetch it needs.
    forged = jwt.encode({"sub": "x"}, ec.generate_private_key(ec.SECP256R1()),
                        algorithm="ES256", headers={"kid": "forged"})
    status, _, _ = await mcp(http, world, forged)
    assert status == 401
    # An unknown kid: the keys are fetched again, and the new one is taken.
    status, body, headers = await mcp(http, world, after)
    assert status != 401, (body, headers)
    # The retired key is gone from the issuer's JWKS: its tokens no longer pass.
    status, _, headers = await mcp(http, world, before)
    assert status == 401 and 'error="invalid_token"' in headers["WWW-Authenticate"]
