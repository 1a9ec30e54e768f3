"""The HTTP layer under every transport: query strings that are not UTF-8
percent-encoding (web/query.py), and clients that never finish a
request head (web/protocol.py)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import orjson
import pytest
from conftest import LiveServer, User, assert_error, own_server

from graph_bridge import ws
from web import protocol

# -- query strings ---------------------------------------------------------------------


@contextlib.asynccontextmanager
async def _connection(base: str) -> AsyncIterator[tuple[asyncio.StreamReader,
                                                        asyncio.StreamWriter]]:
    url = urlsplit(base)
    reader, writer = await asyncio.open_connection(url.hostname, url.port)
    try:
        yield reader, writer
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


async def _request(base: str, target: str, user: User | None = None, *, method: str = "GET",
                   body: bytes = b"") -> tuple[int, dict[str, str], Any]:
    """`target` sent exactly as written (an HTTP client would re-encode `%zz`), the
    answer read to the end (`Connection: close`)."""
    head = [f"{method} {target} HTTP/1.1", "Host: kalends", "Connection: close",
            "Accept: application/json, text/event-stream",
            "Content-Type: application/json", f"Content-Length: {len(body)}"]
    if user is not None:
        head.append(f"Authorization: Bearer {user.api_key}")
    async with _connection(base) as (reader, writer):
        writer.write("\r\n".join(head).encode() + b"\r\n\r\n" + body)
        answer = await asyncio.wait_for(reader.read(), 30)
    return _parsed(answer)


def _parsed(answer: bytes) -> tuple[int, dict[str, str], Any]:
    head, _, body = answer.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines)}
    return int(status_line.split()[1]), headers, orjson.loads(body) if body else None


@pytest.mark.parametrize(("target", "param", "value"), [
    ("/v1/search?q=%ff%fe", "q", "q=%ff%fe"),
    ("/v1/search?q=%zz", "q", "q=%zz"),
    ("/v1/search?q=caf%c3", "q", "q=caf%c3"),  # a UTF-8 sequence cut short
    ("/v1/search?q=50%", "q", "q=50%"),
    ("/v1/search?q=a%2", "q", "q=a%2"),
    ("/v1/search?q=ok&ty%70e=%ed%a0%80", "type", "ty%70e=%ed%a0%80"),  # a surrogate's bytes
    ("/v1/search?q=ok&%ff=1", "%ff", "%ff=1"),  # the name itself: shown as sent
    ("/v1/search?q=ok&da%zzys", "da%zzys", "da%zzys"),
    ("/v1/profiles?limit=10&cursor=%c0%af", "cursor", "cursor=%c0%af"),  # overlong "/"
    ("/v1/agenda?days=%f0%28%8c%bc", "days", "days=%f0%28%8c%bc"),
], ids=["not UTF-8", "not an escape", "cut short", "bare percent", "one hex digit",
        "decoded name", "undecodable name", "name not an escape", "overlong", "4-byte broken"])
async def test_a_bad_escape_is_400_naming_its_parameter(live_server: LiveServer, user: User,
                                                         target: str, param: str,
                                                         value: str) -> None:
    status, headers, body = await _request(live_server.url, target, user)
    error = assert_error(status, body, 400, "invalid_query_parameter", param)
    assert error["type"] == "invalid_request_error"
    assert error["details"] == {"value": value}
    assert "UTF-8" in error["message"]
    assert headers["x-request-id"] == error["request_id"]


async def test_good_escapes_pass(live_server: LiveServer, user: User) -> None:
    for target in ("/v1/search?q=caf%C3%A9", "/v1/search?q=caf%c3%a9+cr%C3%A8me",
                   "/v1/search?q=%F0%9F%93%85&type=event%2Cseries", "/v1/search?q=100%25",
                   "/v1/search?q=plain&type=event", "/v1/search?%71=%61"):
        status, _, body = await _request(live_server.url, target, user)
        assert status == 200, (target, body)


async def test_every_transport_refuses_a_bad_escape(live_server: LiveServer, user: User) -> None:
    # GET /graphql: the envelope, with its Vary.
    status, headers, body = await _request(
        live_server.url, "/graphql?query=%7B__typename%7D&variables=%ff", user)
    assert_error(status, body, 400, "invalid_query_parameter", "variables")
    assert "Authorization" in headers["vary"]
    # MCP: a JSON-RPC error whose data is the envelope's error.
    rpc = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    status, _, body = await _request(live_server.url, "/mcp-developer?toolsets=%zz", user,
                                     method="POST", body=rpc)
    assert status == 400 and body["id"] is None, body
    assert (body["error"]["data"]["code"], body["error"]["data"]["param"]) == (
        "invalid_query_parameter", "toolsets")
    # OAuth's authorization endpoint, and a route that takes no credential.
    for target, param in (("/oauth/authorize?client_id=%ff&response_type=code", "client_id"),
                          ("/openapi.json?x=%e2%28%a1", "x"),
                          ("/healthz?probe=%", "probe")):
        status, _, body = await _request(live_server.url, target)
        assert_error(status, body, 400, "invalid_query_parameter", param)


async def test_a_path_no_route_reads_stays_404(live_server: LiveServer, user: User) -> None:
    status, _, body = await _request(live_server.url, "/v1/nothing-here?q=%ff", user)
    assert_error(status, body, 404, "route_not_found")
    # A `%` in the path alone is not the query string's business.
    status, _, body = await _request(live_server.url, "/v1/profiles/prf_%7A?expand=x", user)
    assert body["error"]["code"] == "invalid_id", (status, body)


async def test_credentials_are_checked_first(live_server: LiveServer) -> None:
    status, _, body = await _request(live_server.url, "/v1/search?q=%ff")
    assert_error(status, body, 401, "not_authenticated")


# -- request heads that never finish ---------------------------------------------------

LIMIT = 1.0
"""The test server's HEAD_TIMEOUT (10 s in service)."""
_MARGIN = 1.5
"""What the close may take past the limit on a loaded machine."""
_HALF_HEAD = b"GET /healthz HTTP/1.1\r\nHost: kalends\r\nX-Slow: "


@pytest.fixture(scope="module")
def quick(database_url: str) -> Iterator[LiveServer]:
    """A server whose clients have LIMIT seconds for each request head."""
    with contextlib.ExitStack() as stack:
        # Read when the application is made: the patch need not outlive that.
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(protocol, "HEAD_TIMEOUT", LIMIT)
            server = stack.enter_context(own_server(database_url, "kalends_heads",
                                                    run_jobs=False))
        yield server


async def _closed_after(reader: asyncio.StreamReader, within: float) -> float:
    """Seconds until the server closes the connection (nothing answered first)."""
    started = time.monotonic()
    try:
        rest = await asyncio.wait_for(reader.read(), within)
    except TimeoutError:
        raise AssertionError(f"still open after {within} s") from None
    except ConnectionResetError:
        rest = b""
    assert rest == b"", rest
    return time.monotonic() - started


@pytest.mark.slow
async def test_half_sent_heads_are_closed_within_the_limit(quick: LiveServer) -> None:
    async with contextlib.AsyncExitStack() as stack:
        started = time.monotonic()
        connections = [await stack.enter_async_context(_connection(quick.url))
                       for _ in range(50)]
        for i, (_, writer) in enumerate(connections):
            # Half a head, or nothing at all (a connection opened and left silent).
            if i % 5:
                writer.write(_HALF_HEAD[:10 + i])
                await writer.drain()
        waited = await asyncio.gather(*(_closed_after(reader, LIMIT + _MARGIN)
                                        for reader, _ in connections))
    assert max(waited) <= LIMIT + _MARGIN
    # The limit itself, not something sooner, closed them.
    assert time.monotonic() - started >= LIMIT * 0.9


async def _answer(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    lines = head.decode("latin-1").split("\r\n")
    length = next(int(line.split(":", 1)[1]) for line in lines
                  if line.lower().startswith("content-length:"))
    return int(lines[0].split()[1]), await reader.readexactly(length)


async def test_a_slow_head_under_the_limit_is_answered(quick: LiveServer) -> None:
    async with _connection(quick.url) as (reader, writer):
        whole = _HALF_HEAD + b"yes\r\n\r\n"
        pieces = [whole[i:i + 12] for i in range(0, len(whole), 12)]
        for piece in pieces:
            writer.write(piece)
            await writer.drain()
            await asyncio.sleep(LIMIT * 0.5 / len(pieces))
        assert (await _answer(reader))[0] == 200


@pytest.mark.slow
async def test_kept_alive_connections_idle_longer_and_each_head_has_the_limit(
        quick: LiveServer) -> None:
    async with _connection(quick.url) as (reader, writer):
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: kalends\r\n\r\n")
        assert (await _answer(reader))[0] == 200
        # Idle between requests: the keep-alive timeout's business, not the head's.
        await asyncio.sleep(LIMIT * 1.5)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: kalends\r\n\r\n")
        assert (await _answer(reader))[0] == 200
        # The next head begun and left: the limit runs from its first byte.
        writer.write(_HALF_HEAD)
        assert await _closed_after(reader, LIMIT + _MARGIN) >= LIMIT * 0.9


@pytest.mark.slow
async def test_a_half_head_pipelined_behind_a_request_is_closed(quick: LiveServer) -> None:
    async with _connection(quick.url) as (reader, writer):
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: kalends\r\n\r\n" + _HALF_HEAD)
        assert (await _answer(reader))[0] == 200
        await _closed_after(reader, LIMIT + _MARGIN)


@pytest.mark.slow
async def test_a_slow_body_is_no_slow_head(quick: LiveServer) -> None:
    user = await asyncio.to_thread(quick.create_user)
    body = orjson.dumps({"query": "{ __typename }"})
    async with _connection(quick.url) as (reader, writer):
        writer.write(b"POST /graphql HTTP/1.1\r\nHost: kalends\r\n"
                     b"Content-Type: application/json\r\n"
                     + f"Authorization: Bearer {user.api_key}\r\n"
                       f"Content-Length: {len(body)}\r\n\r\n".encode() + body[:5])
        await asyncio.sleep(LIMIT * 1.5)
        writer.write(body[5:])
        status, answer = await _answer(reader)
    assert (status, orjson.loads(answer)) == (200, {"data": {"__typename": "Query"}})


@pytest.mark.slow
async def test_a_websocket_outlives_the_limit(quick: LiveServer) -> None:
    user = await asyncio.to_thread(quick.create_user)
    url = quick.url.replace("http://", "ws://") + "/graphql"
    async with aiohttp.ClientSession() as session, \
            session.ws_connect(url, protocols=(ws.PROTOCOL,)) as socket:
        await socket.send_json({"type": "connection_init",
                                "payload": {"Authorization": f"Bearer {user.api_key}"}})
        assert await socket.receive_json(timeout=10) == {"type": "connection_ack"}
        for _ in range(3):  # frames keep coming after the head, past the limit
            await asyncio.sleep(LIMIT * 0.6)
            await socket.send_json({"type": "ping"})
            assert await socket.receive_json(timeout=10) == {"type": "pong"}


def test_the_service_allows_ten_seconds() -> None:
    assert protocol.HEAD_TIMEOUT == 10.0
    assert protocol.handler_args()["head_timeout"] == protocol.HEAD_TIMEOUT
