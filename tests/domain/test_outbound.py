"""Guarded outbound HTTP (domain.outbound) and client metadata documents
(domain.oauth.client_metadata), against real HTTP servers on loopback.

A refusal must happen before any connection: the tests put a server where a
request would land and check that it saw nothing.
"""

from __future__ import annotations

import asyncio
import gzip
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web
from aiohttp.abc import AbstractResolver, ResolveResult
from fake_dns import Names
from yarl import URL

from domain import outbound
from domain.oauth.client_metadata import (
    ClientMetadata,
    ClientMetadataError,
    ClientMetadataFetcher,
    is_metadata_url,
)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass
class Server:
    host: str
    port: int
    hits: list[str] = field(default_factory=list)
    routes: dict[str, Handler] = field(default_factory=dict)

    def url(self, path: str, scheme: str = "http") -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{scheme}://{host}:{self.port}{path}"


@asynccontextmanager
async def serve(host: str = "127.0.0.1") -> AsyncIterator[Server]:
    server = Server(host, 0)

    async def dispatch(request: web.Request) -> web.StreamResponse:
        server.hits.append(request.path_qs)
        handler = server.routes.get(request.path)
        if handler is None:
            raise web.HTTPNotFound()
        return await handler(request)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", dispatch)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, host, 0).start()
    server.port = runner.addresses[0][1]
    try:
        yield server
    finally:
        await runner.cleanup()


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    async with serve() as s:
        yield s


@pytest.fixture
async def loopback() -> AsyncIterator[aiohttp.ClientSession]:
    async with outbound.guarded_session(allow_loopback=True, timeout=5) as session:
        yield session


@pytest.fixture
async def strict() -> AsyncIterator[aiohttp.ClientSession]:
    async with outbound.guarded_session(timeout=5) as session:
        yield session


def json_handler(doc: Any, *, headers: dict[str, str] | None = None,
                 delay: float = 0.0) -> Handler:
    async def handle(request: web.Request) -> web.StreamResponse:
        if delay:
            await asyncio.sleep(delay)
        return web.json_response(doc, headers=headers)
    return handle


# -- the address policy ---------------------------------------------------------------

@pytest.mark.parametrize(("address", "public", "with_loopback"), [
    ("93.184.216.34", True, True),
    ("2606:4700:4700::1111", True, True),
    ("::ffff:93.184.216.34", True, True),
    ("127.0.0.1", False, True),
    ("127.3.2.1", False, True),
    ("::1", False, True),
    ("::ffff:127.0.0.1", False, True),
    ("[::1]", False, True),
    ("10.0.0.1", False, False),
    ("172.16.5.4", False, False),
    ("192.168.1.1", False, False),
    ("100.64.0.1", False, False),            # CGNAT
    ("169.254.169.254", False, False),       # cloud metadata
    ("fd00:ec2::254", False, False),         # cloud metadata over IPv6 (ULA)
    ("fc00::1", False, False),
    ("fe80::1", False, False),
    ("fe80::1%eth0", False, False),
    ("fec0::1", False, False),               # deprecated site-local
    ("0.0.0.0", False, False),
    ("::", False, False),
    ("224.0.0.1", False, False),
    ("ff02::1", False, False),
    ("240.0.0.1", False, False),
    ("255.255.255.255", False, False),
    ("198.18.0.1", False, False),
    ("192.0.2.1", False, False),
    ("::ffff:10.0.0.1", False, False),
    ("::ffff:169.254.169.254", False, False),
    ("2002:a00:1::", False, False),          # 6to4 of 10.0.0.1
    ("64:ff9b::a9fe:a9fe", False, False),    # NAT64 of 169.254.169.254
    ("64:ff9b::5db8:d822", True, True),      # NAT64 of 93.184.216.34
    ("::127.0.0.1", False, False),           # IPv4-compatible, deprecated
    ("localhost", False, False),             # a name, not an address
    ("2130706433", False, False),
])
def test_address_policy(address: str, public: bool, with_loopback: bool) -> None:
    assert outbound.is_allowed_address(address) is public
    assert outbound.is_allowed_address(address, allow_loopback=True) is with_loopback


class FixedResolver(AbstractResolver):
    """Answers every name with the same addresses, as a hostile DNS server could."""

    def __init__(self, *addresses: str) -> None:
        self.addresses = addresses

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        return [{"hostname": host, "host": a, "port": port,
                 "family": socket.AF_INET6 if ":" in a else socket.AF_INET,
                 "proto": 0, "flags": 0} for a in self.addresses]

    async def close(self) -> None:
        pass


async def test_resolver_keeps_only_public_addresses() -> None:
    mixed = outbound.GuardedResolver(inner=FixedResolver("10.0.0.1", "93.184.216.34", "::1"))
    assert [r["host"] for r in await mixed.resolve("mixed.example", 443)] == ["93.184.216.34"]

    private = outbound.GuardedResolver(inner=FixedResolver("169.254.169.254", "fc00::1"))
    with pytest.raises(outbound.Refused):
        await private.resolve("metadata.example", 80)

    dev = outbound.GuardedResolver(allow_loopback=True, inner=FixedResolver("127.0.0.1", "10.1.1.1"))
    assert [r["host"] for r in await dev.resolve("dev.example", 80)] == ["127.0.0.1"]


# -- refusals before any connection -------------------------------------------------------

@dataclass
class Tripwire:
    """A TCP listener that records every connection, TLS or not, HTTP or not."""

    port: int
    connections: list[Any] = field(default_factory=list)


@asynccontextmanager
async def tripwire(host: str = "127.0.0.1") -> AsyncIterator[Tripwire]:
    wire = Tripwire(0)

    async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        wire.connections.append(writer.get_extra_info("peername"))
        writer.close()

    listener = await asyncio.start_server(accepted, host, 0)
    wire.port = listener.sockets[0].getsockname()[1]
    try:
        yield wire
    finally:
        listener.close()
        await listener.wait_closed()


# (host in the URL, where the tripwire listens, whether an unguarded client reaches it)
_LOCAL_TARGETS = [
    ("127.0.0.1", "127.0.0.1", True),
    ("localhost", "127.0.0.1", True),          # a name that resolves to loopback
    ("[::1]", "::1", True),
    ("[::ffff:127.0.0.1]", "127.0.0.1", True),  # IPv4-mapped IPv6 loopback
    ("[::ffff:7f00:1]", "127.0.0.1", True),
    ("0.0.0.0", "127.0.0.1", True),            # "this host": local listeners on Linux
    ("[::]", "::1", True),
    ("2130706433", "127.0.0.1", False),        # 127.0.0.1 as one number
]


@pytest.mark.parametrize(("host", "listen", "reachable"), _LOCAL_TARGETS)
async def test_unguarded_client_reaches_the_tripwire(host: str, listen: str,
                                                     reachable: bool) -> None:
    # The control for the refusals below: each of these URLs does reach a local
    # listener when nothing stands in the way.
    async with tripwire(listen) as wire, aiohttp.ClientSession() as plain:
        with pytest.raises((aiohttp.ClientError, ValueError)):
            await plain.get(f"http://{host}:{wire.port}/doc")
        await asyncio.sleep(0.05)
        assert bool(wire.connections) is reachable  # (aiohttp retries once: maybe 2)


@pytest.mark.parametrize(("host", "listen", "reachable"), _LOCAL_TARGETS)
async def test_local_addresses_refused_before_connecting(
        strict: aiohttp.ClientSession, host: str, listen: str, reachable: bool) -> None:
    async with tripwire(listen) as wire:
        with pytest.raises(outbound.Refused):
            await outbound.fetch_json(strict, f"https://{host}:{wire.port}/doc", max_bytes=1000)
        with pytest.raises(outbound.OutboundError):
            await outbound.fetch_json(strict, f"http://{host}:{wire.port}/doc", max_bytes=1000,
                                      allow_http=True)
        await asyncio.sleep(0.05)
        assert wire.connections == []


async def test_loopback_names_refused_over_http_too(server: Server,
                                                    strict: aiohttp.ClientSession) -> None:
    server.routes["/doc"] = json_handler({"ok": True})
    for host in ("127.0.0.1", "localhost", "[::ffff:127.0.0.1]"):
        with pytest.raises(outbound.Refused):
            await outbound.fetch_json(strict, f"http://{host}:{server.port}/doc",
                                      max_bytes=1000, allow_http=True)
    assert server.hits == []


@pytest.mark.parametrize(("host", "listen"), [("0.0.0.0", "127.0.0.1"), ("[::]", "::1")])
async def test_unspecified_address_refused_even_with_loopback_allowed(
        loopback: aiohttp.ClientSession, host: str, listen: str) -> None:
    async with tripwire(listen) as wire:
        with pytest.raises(outbound.Refused):
            await outbound.fetch_json(loopback, f"https://{host}:{wire.port}/doc",
                                      max_bytes=1000)
        await asyncio.sleep(0.05)
        assert wire.connections == []


async def test_allowed_loopback_does_connect(loopback: aiohttp.ClientSession) -> None:
    async with tripwire() as wire:
        with pytest.raises(outbound.OutboundError) as raised:
            await outbound.fetch_json(loopback, f"https://127.0.0.1:{wire.port}/doc",
                                      max_bytes=1000)
        assert not isinstance(raised.value, outbound.Refused)
        await asyncio.sleep(0.05)
        assert len(wire.connections) == 1


@pytest.mark.parametrize("url", [
    "https://169.254.169.254/latest/meta-data/",
    "https://[::ffff:169.254.169.254]/latest/meta-data/",
    "https://10.0.0.1/doc",
    "https://192.168.0.1:8443/doc",
    "https://[fd00::1]/doc",
    "https://[fe80::1%25eth0]/doc",
])
async def test_private_addresses_refused(strict: aiohttp.ClientSession,
                                         loopback: aiohttp.ClientSession, url: str) -> None:
    for session in (strict, loopback):
        with pytest.raises(outbound.Refused):
            await outbound.fetch_json(session, url, max_bytes=1000)


async def test_loopback_reached_when_allowed(server: Server,
                                             loopback: aiohttp.ClientSession) -> None:
    # The control for the refusals above: the same request does land when allowed.
    server.routes["/doc"] = json_handler({"ok": True}, headers={"Cache-Control": "max-age=60"})
    doc, headers = await outbound.fetch_json(loopback, server.url("/doc"), max_bytes=1000,
                                             allow_http=True)
    assert doc == {"ok": True}
    assert headers["cache-control"] == "max-age=60"
    assert server.hits == ["/doc"]


async def test_https_only(server: Server, loopback: aiohttp.ClientSession) -> None:
    server.routes["/doc"] = json_handler({"ok": True})
    with pytest.raises(outbound.OutboundError, match="https"):
        await outbound.fetch_json(loopback, server.url("/doc"), max_bytes=1000)
    # allow_http is for loopback hosts only.
    with pytest.raises(outbound.OutboundError, match="https"):
        await outbound.fetch_json(loopback, "http://example.com/doc", max_bytes=1000,
                                  allow_http=True)
    for url in ("ftp://example.com/doc", "file:///etc/passwd", "/relative", "not a url"):
        with pytest.raises(outbound.OutboundError):
            await outbound.fetch_json(loopback, url, max_bytes=1000)
    assert server.hits == []


# -- responses that are refused ------------------------------------------------------------

@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
async def test_redirect_not_followed(server: Server, loopback: aiohttp.ClientSession,
                                     status: int) -> None:
    async with serve() as target:
        target.routes["/doc"] = json_handler({"ok": True})

        async def redirect(request: web.Request) -> web.StreamResponse:
            return web.Response(status=status, headers={"Location": target.url("/doc")})

        server.routes["/doc"] = redirect
        with pytest.raises(outbound.OutboundError, match="redirect"):
            await outbound.fetch_json(loopback, server.url("/doc"), max_bytes=1000,
                                      allow_http=True)
        assert server.hits == ["/doc"]
        assert target.hits == []


async def test_oversized_body_refused(server: Server, loopback: aiohttp.ClientSession) -> None:
    big = {"pad": "x" * 6000}

    async def chunked(request: web.Request) -> web.StreamResponse:
        # No Content-Length: only counting what is read can stop it.
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        await response.write(b'{"pad": "')
        for _ in range(100):
            await response.write(b"x" * 1000)
        await response.write(b'"}')
        await response.write_eof()
        return response

    async def gzip_bomb(request: web.Request) -> web.StreamResponse:
        body = gzip.compress(b'{"pad": "' + b"x" * 1_000_000 + b'"}')
        assert len(body) < 5000
        return web.Response(body=body, headers={"Content-Type": "application/json",
                                                "Content-Encoding": "gzip"})

    server.routes["/big"] = json_handler(big)
    server.routes["/chunked"] = chunked
    server.routes["/bomb"] = gzip_bomb
    for path in ("/big", "/chunked", "/bomb"):
        with pytest.raises(outbound.OutboundError, match="larger than 5000"):
            await outbound.fetch_json(loopback, server.url(path), max_bytes=5000,
                                      allow_http=True)
    # Exactly at the limit is fine.
    exact = b'{"pad": "' + b"x" * (5000 - 11) + b'"}'

    async def at_limit(request: web.Request) -> web.StreamResponse:
        return web.Response(body=exact, content_type="application/json")

    server.routes["/exact"] = at_limit
    doc, _ = await outbound.fetch_json(loopback, server.url("/exact"), max_bytes=len(exact),
                                       allow_http=True)
    assert len(exact) == 5000 and doc == {"pad": "x" * 4989}


async def test_non_json_refused(server: Server, loopback: aiohttp.ClientSession) -> None:
    async def html(request: web.Request) -> web.StreamResponse:
        return web.Response(text='{"looks": "like json"}', content_type="text/html")

    async def broken(request: web.Request) -> web.StreamResponse:
        return web.Response(text="{not json", content_type="application/json")

    async def vendor_json(request: web.Request) -> web.StreamResponse:
        return web.Response(text='{"ok": 1}', content_type="application/vnd.example+json")

    server.routes["/html"] = html
    server.routes["/broken"] = broken
    server.routes["/vendor"] = vendor_json
    with pytest.raises(outbound.OutboundError, match="not JSON"):
        await outbound.fetch_json(loopback, server.url("/html"), max_bytes=1000, allow_http=True)
    with pytest.raises(outbound.OutboundError, match="not valid JSON"):
        await outbound.fetch_json(loopback, server.url("/broken"), max_bytes=1000,
                                  allow_http=True)
    doc, _ = await outbound.fetch_json(loopback, server.url("/vendor"), max_bytes=1000,
                                       allow_http=True)
    assert doc == {"ok": 1}


async def test_failures_are_outbound_errors(server: Server) -> None:
    async def slow(request: web.Request) -> web.StreamResponse:
        await asyncio.sleep(2)
        return web.json_response({})

    server.routes["/slow"] = slow
    async with outbound.guarded_session(allow_loopback=True, timeout=0.3) as session:
        with pytest.raises(outbound.OutboundError, match="timed out"):
            await outbound.fetch_json(session, server.url("/slow"), max_bytes=1000,
                                      allow_http=True)
        with pytest.raises(outbound.OutboundError, match="HTTP 404"):
            await outbound.fetch_json(session, server.url("/missing"), max_bytes=1000,
                                      allow_http=True)
        # A port nobody listens on.
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            closed_port = s.getsockname()[1]
        with pytest.raises(outbound.OutboundError, match="could not connect"):
            await outbound.fetch_json(session, f"http://127.0.0.1:{closed_port}/doc",
                                      max_bytes=1000, allow_http=True)
        with pytest.raises(outbound.OutboundError, match="could not be resolved"):
            await outbound.fetch_json(session, "https://no-such-host.invalid/doc",
                                      max_bytes=1000)


# -- client metadata documents ----------------------------------------------------------

@pytest.mark.parametrize(("client_id", "plain", "with_loopback"), [
    ("https://app.example.com/oauth/client-metadata.json", True, True),
    ("https://app.example.com/client", True, True),
    ("https://app.example.com:8443/client.json?v=2", True, True),
    ("https://[2001:db8::1]/client.json", True, True),
    ("https://app.example.com", False, False),               # no path
    ("https://app.example.com/", False, False),              # root path
    ("https://app.example.com/client.json#frag", False, False),
    ("https://app.example.com/client.json#", False, False),
    ("https://user:pw@app.example.com/client.json", False, False),
    ("https://user@app.example.com/client.json", False, False),
    ("https://app.example.com/a/../client.json", False, False),
    ("https://app.example.com/./client.json", False, False),
    ("https://app.example.com/a/%2e%2e/client.json", False, False),
    ("https://app.example.com/a/..", False, False),
    ("http://app.example.com/client.json", False, False),
    ("http://127.0.0.1:8080/client.json", False, True),
    ("http://localhost:8080/client.json", False, True),
    ("http://[::1]:8080/client.json", False, True),
    ("http://10.0.0.1/client.json", False, False),
    ("HTTPS://app.example.com/client.json", False, False),
    ("https:///client.json", False, False),
    ("https://app.example.com:99999/client.json", False, False),
    ("https://app.example.com/client json", False, False),
    ("https://app.example.com/%zz", False, False),
    ("https://app.example.com/caf\u00e9", False, False),
    ("https://app.example.com\\@evil.example/client.json", False, False),
    ("my-client", False, False),
    ("", False, False),
    ("https://app.example.com/" + "a" * 3000, False, False),
])
def test_is_metadata_url(client_id: str, plain: bool, with_loopback: bool) -> None:
    assert is_metadata_url(client_id) is plain
    assert is_metadata_url(client_id, allow_loopback=True) is with_loopback


@pytest.fixture
async def fetcher(loopback: aiohttp.ClientSession) -> ClientMetadataFetcher:
    return ClientMetadataFetcher(loopback, allow_loopback=True)


def serve_document(server: Server, make: Callable[[str], Any], *, path: str = "/client.json",
                   headers: dict[str, str] | None = None, delay: float = 0.0) -> str:
    client_id = server.url(path)
    server.routes[path] = json_handler(make(client_id), headers=headers, delay=delay)
    return client_id


async def test_minimal_document_gets_defaults(server: Server,
                                              fetcher: ClientMetadataFetcher) -> None:
    client_id = serve_document(server, lambda cid: {
        "client_id": cid, "redirect_uris": ["http://127.0.0.1:3000/callback"]})
    assert await fetcher.get(client_id) == ClientMetadata(
        client_id=client_id, client_name=None, client_uri=None, logo_uri=None,
        redirect_uris=("http://127.0.0.1:3000/callback",),
        grant_types=("authorization_code",), response_types=("code",),
        token_endpoint_auth_method="none", scope=None)


async def test_full_document(server: Server, fetcher: ClientMetadataFetcher) -> None:
    redirects = ["http://127.0.0.1:3000/callback", "http://localhost:3000/callback",
                 "http://[::1]:3000/callback", "https://app.example.com/oauth/callback",
                 "com.example.app:/oauth2redirect", "com.example.app://callback?x=1"]
    client_id = serve_document(server, lambda cid: {
        "client_id": cid, "client_name": "Example MCP Client ✨",
        "client_uri": "https://app.example.com", "logo_uri": "https://app.example.com/logo.png",
        "redirect_uris": redirects, "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"], "token_endpoint_auth_method": "none",
        "scope": "calendars:read events:write", "software_id": "ignored"})
    metadata = await fetcher.get(client_id)
    assert metadata.client_name == "Example MCP Client ✨"
    assert metadata.client_uri == "https://app.example.com"
    assert metadata.logo_uri == "https://app.example.com/logo.png"
    assert metadata.redirect_uris == tuple(redirects)
    assert metadata.grant_types == ("authorization_code", "refresh_token")
    assert metadata.scope == "calendars:read events:write"


def _with(**changes: Any) -> Callable[[str], Any]:
    def make(client_id: str) -> Any:
        doc: dict[str, Any] = {"client_id": client_id, "client_name": "Example",
                               "redirect_uris": ["https://app.example.com/cb"]}
        for key, value in changes.items():
            if value is ...:
                doc.pop(key, None)
            else:
                doc[key] = value
        return doc
    return make


@pytest.mark.parametrize(("make", "message"), [
    (lambda cid: [cid], "not a JSON object"),
    (lambda cid: {"client_id": cid + "/", "redirect_uris": ["https://a.example/cb"]},
     "different client_id"),
    (lambda cid: {"client_id": cid.replace("127.0.0.1", "localhost"),
                  "redirect_uris": ["https://a.example/cb"]}, "different client_id"),
    (_with(client_id=...), "different client_id"),
    (_with(redirect_uris=...), "no redirect_uris"),
    (_with(redirect_uris=[]), "no redirect_uris"),
    (_with(redirect_uris="https://app.example.com/cb"), "no redirect_uris"),
    (_with(redirect_uris=[42]), "not a string"),
    (_with(redirect_uris=["https://app.example.com/cb#x"]), "fragment"),
    (_with(redirect_uris=["http://app.example.com/cb"]), "uses http"),
    (_with(redirect_uris=["http://10.0.0.1/cb"]), "uses http"),
    (_with(redirect_uris=["javascript:alert(1)"]), "neither https nor private-use"),
    (_with(redirect_uris=["data:text/html,hi"]), "neither https nor private-use"),
    (_with(redirect_uris=["/relative/cb"]), "not an absolute URI"),
    (_with(redirect_uris=["https://user@app.example.com/cb"]), "userinfo"),
    (_with(redirect_uris=[f"https://app.example.com/{i}" for i in range(21)]), "more than 20"),
    (_with(token_endpoint_auth_method="client_secret_post"), "shared secret"),
    (_with(token_endpoint_auth_method="client_secret_basic"), "shared secret"),
    (_with(token_endpoint_auth_method="client_secret_jwt"), "shared secret"),
    (_with(token_endpoint_auth_method="private_key_jwt"), "unsupported"),
    (_with(token_endpoint_auth_method=["none"]), "unsupported"),
    (_with(client_secret="s3cret"), "client_secret"),
    (_with(grant_types=["client_credentials"]), "unsupported grant_types"),
    (_with(grant_types=["refresh_token"]), "authorization_code"),
    (_with(grant_types=[]), "invalid grant_types"),
    (_with(response_types=["token"]), "unsupported response_types"),
    (_with(client_name="x" * 201), "invalid client_name"),
    (_with(client_name=["Example"]), "invalid client_name"),
    (_with(client_name="Trusted\u202eppA"), "control characters"),
    (_with(logo_uri="javascript:alert(1)"), "invalid logo_uri"),
    (_with(client_uri="http://app.example.com"), "invalid client_uri"),
    (_with(scope='bad"scope'), "invalid scope"),
])
async def test_invalid_documents_refused(server: Server, fetcher: ClientMetadataFetcher,
                                         make: Callable[[str], Any], message: str) -> None:
    client_id = serve_document(server, make)
    with pytest.raises(ClientMetadataError, match=message) as raised:
        await fetcher.get(client_id)
    assert client_id in str(raised.value)


async def test_fetch_failures_become_client_metadata_errors(
        server: Server, fetcher: ClientMetadataFetcher) -> None:
    big = serve_document(server, _with(client_name="x" * 100, padding="y" * 6000),
                         path="/big.json")
    with pytest.raises(ClientMetadataError, match=r"could not be fetched.*larger than 5120"):
        await fetcher.get(big)
    with pytest.raises(ClientMetadataError, match=r"could not be fetched.*HTTP 404"):
        await fetcher.get(server.url("/missing.json"))


async def test_loopback_client_id_refused_by_default(server: Server,
                                                     strict: aiohttp.ClientSession) -> None:
    fetcher = ClientMetadataFetcher(strict)
    client_id = serve_document(server, _with(), path="/client.json")
    # http on loopback is not even a metadata URL; https is, but is not fetched.
    with pytest.raises(ClientMetadataError, match="not a valid client metadata document URL"):
        await fetcher.get(client_id)
    with pytest.raises(ClientMetadataError, match=r"could not be fetched.*not a public address"):
        await fetcher.get(server.url("/client.json", scheme="https"))
    assert server.hits == []


async def test_not_a_metadata_url_is_not_fetched(server: Server,
                                                 fetcher: ClientMetadataFetcher) -> None:
    server.routes["/"] = json_handler({})
    for client_id in (server.url("/"), server.url("/client.json#x"),
                      server.url("/a/../client.json")):
        with pytest.raises(ClientMetadataError, match="not a valid client metadata document"):
            await fetcher.get(client_id)
    assert server.hits == []


async def test_cache_serves_second_get(server: Server, fetcher: ClientMetadataFetcher) -> None:
    client_id = serve_document(server, _with())
    first = await fetcher.get(client_id)
    assert await fetcher.get(client_id) == first
    assert server.hits == ["/client.json"]


@pytest.mark.parametrize("cache_control", ["no-store", "no-cache", "max-age=0",
                                           "max-age=60, private", "max-age=nonsense"])
async def test_cache_headers_respected(server: Server, fetcher: ClientMetadataFetcher,
                                       cache_control: str) -> None:
    client_id = serve_document(server, _with(), headers={"Cache-Control": cache_control})
    await fetcher.get(client_id)
    await fetcher.get(client_id)
    expected = 1 if cache_control.startswith("max-age=60") else 2
    assert len(server.hits) == expected


async def test_max_age_capped_by_ttl(server: Server, loopback: aiohttp.ClientSession) -> None:
    fetcher = ClientMetadataFetcher(loopback, allow_loopback=True, ttl=0.2)
    client_id = serve_document(server, _with(), headers={"Cache-Control": "max-age=86400"})
    await fetcher.get(client_id)
    await fetcher.get(client_id)
    assert len(server.hits) == 1
    await asyncio.sleep(0.3)
    await fetcher.get(client_id)
    assert len(server.hits) == 2


async def test_failure_cached_briefly(server: Server, fetcher: ClientMetadataFetcher) -> None:
    client_id = server.url("/client.json")
    for _ in range(3):
        with pytest.raises(ClientMetadataError, match="HTTP 404"):
            await fetcher.get(client_id)
    assert len(server.hits) == 1


async def test_cache_is_bounded(server: Server, loopback: aiohttp.ClientSession) -> None:
    fetcher = ClientMetadataFetcher(loopback, allow_loopback=True, max_entries=2)
    ids = [serve_document(server, _with(), path=f"/client-{i}.json") for i in range(3)]
    for client_id in ids:
        await fetcher.get(client_id)
    await fetcher.get(ids[2])
    await fetcher.get(ids[1])
    assert len(server.hits) == 3
    await fetcher.get(ids[0])   # the least recently used, evicted
    assert server.hits == ["/client-0.json", "/client-1.json", "/client-2.json",
                           "/client-0.json"]


async def test_concurrent_gets_share_one_fetch(server: Server,
                                               fetcher: ClientMetadataFetcher) -> None:
    client_id = serve_document(server, _with(), delay=0.2)
    results = await asyncio.gather(*(fetcher.get(client_id) for _ in range(10)))
    assert len(set(results)) == 1
    assert server.hits == ["/client.json"]


async def test_cancelled_caller_does_not_cancel_the_shared_fetch(
        server: Server, fetcher: ClientMetadataFetcher) -> None:
    client_id = serve_document(server, _with(), delay=0.2)
    impatient = asyncio.create_task(fetcher.get(client_id))
    patient = asyncio.create_task(fetcher.get(client_id))
    await asyncio.sleep(0.05)
    impatient.cancel()
    metadata = await patient
    assert metadata.client_id == client_id
    assert impatient.cancelled()
    assert server.hits == ["/client.json"]


# -- hosts that a URL may not name (webhooks, at creation) ------------------------------------

@pytest.mark.parametrize(("host", "refused", "with_loopback"), [
    ("hooks.example.com", False, False),
    ("8.8.8.8", False, False),
    ("[2606:4700:4700::1111]", False, False),
    ("localhost", True, False),
    ("LOCALHOST.", True, False),
    ("sub.localhost", True, False),
    ("a.b.LocalHost.", True, False),
    ("localhost.example.com", False, False),   # a name like any other
    ("notlocalhost", False, False),
    ("127.0.0.1", True, False),
    ("[::1]", True, False),
    # Every other spelling of an address is refused, loopback allowed or not: who
    # reads it decides what it is.
    ("0x7f.0.0.1", True, True),
    ("0X7F.0.0.1", True, True),
    ("0x7f000001", True, True),
    ("0x7f.1", True, True),
    ("127.1", True, True),
    ("127.0.1", True, True),
    ("2130706433", True, True),
    ("0177.0.0.1", True, True),
    ("017700000001", True, True),
    ("127.0.0.1.", True, True),
    ("0x08.8.8.8", True, True),                # 8.8.8.8, but not as written
    ("134744072", True, True),                 # 8.8.8.8 as one number
    ("1.2.3.0x4", True, True),
    ("foo.0x7f", True, True),                  # a URL parser's IPv4, a failed one
    ("foo.127", True, True),
    ("0x", True, True),
])
def test_refused_hosts(host: str, refused: bool, with_loopback: bool) -> None:
    assert outbound.is_refused_host(host) is refused
    assert outbound.is_refused_host(host, allow_loopback=True) is with_loopback


# -- connected accounts: where their traffic may go (docs/api-choices.md, "Connected calendars") --

@pytest.mark.parametrize(("account", "target", "allowed"), [
    ("https://caldav.icloud.com", "https://caldav.icloud.com/123/principal/", True),
    ("https://caldav.icloud.com", "https://caldav.icloud.com:443/x", True),
    ("https://caldav.icloud.com", "https://p42-caldav.icloud.com/123/calendars/", True),
    ("https://caldav.icloud.com", "https://P42-CALDAV.icloud.com:8443/x", True),
    ("https://caldav.icloud.com", "https://icloud.com/x", True),
    ("https://caldav.icloud.com", "http://p42-caldav.icloud.com/x", False),   # https only
    ("https://caldav.icloud.com", "http://caldav.icloud.com/x", False),       # another origin
    ("https://caldav.icloud.com", "https://caldav.icloud.com.evil.example/x", False),
    ("https://caldav.icloud.com", "https://icloud.com.evil.example/x", False),
    ("https://caldav.icloud.com", "https://evil.example/x", False),
    ("https://caldav.icloud.com", "https://17.0.0.1/x", False),
    ("https://caldav.icloud.com", "https://[::1]/x", False),
    ("https://caldav.icloud.com", "ftp://caldav.icloud.com/x", False),
    ("https://caldav.icloud.com", "/relative", False),
    ("https://a.github.io", "https://b.github.io/x", False),    # a public suffix's tenants
    ("https://a.github.io", "https://x.a.github.io/x", True),
    ("https://cal.example.co.uk", "https://p1.example.co.uk/x", True),
    ("https://cal.example.co.uk", "https://other.co.uk/x", False),
    ("http://127.0.0.1:5232", "http://127.0.0.1:5232/user/", True),          # its own origin
    ("http://127.0.0.1:5232", "http://127.0.0.1:5233/user/", False),
    ("http://127.0.0.1:5232", "http://127.0.0.2:5232/user/", False),
    ("http://127.0.0.1:5232", "https://127.0.0.1:5232/user/", False),
    ("http://10.1.2.3", "https://10.1.2.4/x", False),          # IPs have no domain
    ("https://graph.microsoft.com/v1.0", "https://graph.microsoft.com/v1.0/me?$skiptoken=1",
     True),
])
def test_account_origins(account: str, target: str, allowed: bool) -> None:
    origins = outbound.AccountOrigins(account)
    if allowed:
        assert origins.check(target) == URL(target)
    else:
        with pytest.raises(outbound.Refused) as refused:
            origins.check(target)
        host = URL(target).raw_host
        assert host is None or host in refused.value.reason


async def test_account_origin_anywhere_other_hosts_public_only(server: Server) -> None:
    server.routes["/dav"] = json_handler({"ok": True})
    names = Names({"cal.example.test": "127.0.0.1", "p1.example.test": "127.0.0.1"})
    origins = outbound.AccountOrigins(f"http://cal.example.test:{server.port}")
    async with outbound.account_session(resolver=names) as session:
        # The account's own origin, which the operator chose: a loopback address is fine.
        answer = await origins.request(session, "GET", f"http://cal.example.test:{server.port}/dav")
        assert answer.status == 200 and orjson.loads(answer.body) == {"ok": True}
        # Another host of the same site: only at a public address.
        with pytest.raises(outbound.Refused, match=r"p1\.example\.test"):
            await origins.request(session, "GET", f"https://p1.example.test:{server.port}/dav")
        # Outside the trusted block, not even the account's host is reached (a pooled
        # connection included).
        with pytest.raises(outbound.Refused):
            await session.get(f"http://cal.example.test:{server.port}/dav")
        with pytest.raises(outbound.Refused):
            await session.get(server.url("/dav"))
    assert server.hits == ["/dav"]


async def test_pooled_connection_is_checked_again(server: Server) -> None:
    # One session serves every account: a connection opened for an account that
    # trusts its loopback host is not lent to one that does not.
    server.routes["/dav"] = json_handler({"ok": True})
    names = Names({"shared.example.test": "127.0.0.1"})
    mine = outbound.AccountOrigins(f"https://shared.example.test:{server.port}",
                                   f"http://shared.example.test:{server.port}")
    theirs = outbound.AccountOrigins(f"https://cal.example.test:{server.port}")
    url = f"http://shared.example.test:{server.port}/dav"
    async with outbound.account_session(resolver=names) as session:
        assert (await mine.request(session, "GET", url)).status == 200
        with theirs.trusting(session), pytest.raises(outbound.Refused):
            await session.get(url)
    assert server.hits == ["/dav"]


async def test_account_request_needs_the_account_session(server: Server) -> None:
    async with aiohttp.ClientSession() as plain:
        with pytest.raises(TypeError):
            await outbound.AccountOrigins(server.url("/")).request(plain, "GET", server.url("/"))
    assert server.hits == []


async def test_account_redirects(server: Server) -> None:
    seen: list[tuple[str, str, bytes]] = []

    async def record(request: web.Request) -> web.StreamResponse:
        seen.append((request.method, request.path_qs, await request.read()))
        return web.json_response({"at": request.path})

    def redirect(status: int, location: str) -> Handler:
        async def handle(request: web.Request) -> web.StreamResponse:
            seen.append((request.method, request.path_qs, await request.read()))
            return web.Response(status=status, headers={"Location": location})
        return handle

    async with serve() as other, outbound.account_session() as session:
        server.routes.update({
            "/final": record,
            "/307": redirect(307, "/final?kept=1"),
            "/303": redirect(303, server.url("/final")),
            "/loop": redirect(302, "/loop"),
            "/away": redirect(301, other.url("/final")),
            "/away-by-name": redirect(308, f"http://localhost:{other.port}/final"),
        })
        origins = outbound.AccountOrigins(server.url("/"))
        # Followed on the account's origin: method and body kept (307), the query the
        # redirect's own.
        answer = await origins.request(session, "REPORT", server.url("/307"), data=b"<x/>",
                                       params={"q": "first"})
        assert answer.status == 200 and answer.url == URL(server.url("/final?kept=1"))
        assert seen == [("REPORT", "/307?q=first", b"<x/>"), ("REPORT", "/final?kept=1", b"<x/>")]
        seen.clear()
        # 303: a GET without the body.
        await origins.request(session, "POST", server.url("/303"), data=b"form")
        assert seen == [("POST", "/303", b"form"), ("GET", "/final", b"")]
        # Elsewhere (another port, another name for the same host): not followed.
        for path in ("/away", "/away-by-name"):
            with pytest.raises(outbound.Refused, match=r"127\.0\.0\.1|localhost"):
                await origins.request(session, "PROPFIND", server.url(path), data=b"<x/>",
                                      headers={"Authorization": "Basic dTpw"})
        with pytest.raises(outbound.OutboundError, match="redirects"):
            await origins.request(session, "GET", server.url("/loop"))
        assert other.hits == []
