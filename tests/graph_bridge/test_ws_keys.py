"""A socket lives no longer than its key (docs/graphql.md, "Dashboards: `/graphql`"): revocation
closes a key's sockets on every process with 4403, each `subscribe` re-checks the key and is
charged to its rate limit, a key holds a bounded number of sockets and subscriptions across
every process (and a process that is gone stops counting), and a subscription whose
target its user may no longer read ends with the read's error at the next change.

The clients are aiohttp's raw WebSocket client (graphql-transport-ws by hand): the
close codes and the exact messages are the point.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import pytest
from conftest import Api, LiveServer, User, new_event, new_profile, org_with, own_server

from db.accounts import LIVE_LOCK
from domain import accounts
from domain.auth import hash_key
from domain.config import Rate, Settings
from graph_bridge import ws

ROOT = Path(__file__).resolve().parents[2]
TIMED = {"start_time": "2031-05-06T10:00", "start_timezone": "Europe/Paris"}
EVENT_CHANGES = """
subscription changes($profile_id: ID!) {
  event_changes(profile_id: $profile_id) { type event { id title description } }
}
"""
RSVP_STATS = """
subscription stats($event_id: ID!) { rsvp_stats(event_id: $event_id) { event_id going } }
"""
Socket = aiohttp.ClientWebSocketResponse


def ws_url(base: str) -> str:
    return base.replace("http://", "ws://") + "/graphql"


@contextlib.asynccontextmanager
async def sockets() -> AsyncIterator[Callable[..., Any]]:
    """Opens sockets to any server; all are closed at the end."""
    async with aiohttp.ClientSession() as session, contextlib.AsyncExitStack() as stack:

        async def open_socket(base: str) -> Socket:
            return await stack.enter_async_context(
                session.ws_connect(ws_url(base), protocols=(ws.PROTOCOL,)))

        yield open_socket


async def init(socket: Socket, api_key: str) -> None:
    await socket.send_json({"type": "connection_init",
                            "payload": {"Authorization": f"Bearer {api_key}"}})


async def acknowledged(socket: Socket, api_key: str) -> None:
    await init(socket, api_key)
    assert await socket.receive_json(timeout=10) == {"type": "connection_ack"}


async def subscribe(socket: Socket, id_: str, query: str, **variables: Any) -> None:
    await socket.send_json({"id": id_, "type": "subscribe",
                            "payload": {"query": query, "variables": variables}})


async def message(socket: Socket, timeout: float = 10) -> dict[str, Any]:
    received = await socket.receive(timeout=timeout)
    assert received.type is aiohttp.WSMsgType.TEXT, (received.type, received.data,
                                                      received.extra)
    return json.loads(received.data)  # type: ignore[no-any-return]


async def running(socket: Socket, id_: str, event_id: str) -> None:
    """An rsvp_stats subscription, sure to run: its first message came."""
    await subscribe(socket, id_, RSVP_STATS, event_id=event_id)
    first = await message(socket)
    assert first["id"] == id_ and first["type"] == "next", first


async def error_code(socket: Socket, id_: str) -> str:
    answer = await message(socket)
    assert answer["id"] == id_ and answer["type"] == "error", answer
    assert len(answer["payload"]) == 1, answer
    return str(answer["payload"][0]["extensions"]["code"])


async def closed_with(socket: Socket, code: int, within: float = 10) -> float:
    """Waits (messages still arriving are skipped) until the socket closes with
    `code`, at most `within` seconds; returns how long it took."""
    start = time.monotonic()
    deadline = start + within
    while True:
        left = deadline - time.monotonic()
        assert left > 0, f"not closed within {within} s"
        try:
            received = await socket.receive(timeout=left)
        except TimeoutError:
            raise AssertionError(f"not closed within {within} s") from None
        if received.type is aiohttp.WSMsgType.TEXT:
            continue
        assert received.type is aiohttp.WSMsgType.CLOSE, (received.type, received.data)
        assert received.data == code, (received.data, received.extra)
        return time.monotonic() - start


async def still_open(socket: Socket) -> None:
    await socket.send_json({"type": "ping"})
    assert await message(socket) == {"type": "pong"}


async def until(condition: Callable[[], Any], timeout: float = 10, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not await condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what or condition}"
        await asyncio.sleep(0.05)


def run_admin(database_url: str, *args: str) -> dict[str, Any]:
    """`kalends admin ...` in a process of its own, on the test database."""
    proc = subprocess.run(
        [sys.executable, "-m", "kalends", "admin", *args], cwd=ROOT, capture_output=True,
        env={**os.environ, "DATABASE_URL": database_url, "PYTHONUNBUFFERED": "1"},
        timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr.decode()
    return json.loads(proc.stdout)  # type: ignore[no-any-return]


# ---------------------------------------------------------------------------
# Revocation


@pytest.fixture
def second(database_url: str, live_server: LiveServer) -> Iterator[LiveServer]:
    """Another process (app) on the session's database."""
    server = LiveServer(database_url)
    try:
        yield server
    finally:
        server.close()


async def test_revoking_a_key_closes_its_sockets_on_every_process_within_5_seconds(
    live_server: LiveServer, second: LiveServer, database_url: str, api: Api, user: User
) -> None:
    key = live_server.admin(accounts.create_key, user.email)["api_key"]
    profile = await new_profile(api, user)
    event = await new_event(api, user, profile, **TIMED, is_private=True,
                            description="Private plans")
    async with sockets() as open_socket:
        watching = await open_socket(live_server.url)
        await acknowledged(watching, key)
        await subscribe(watching, "changes", EVENT_CHANGES, profile_id=profile["id"])
        elsewhere = await open_socket(second.url)
        await acknowledged(elsewhere, key)
        await running(elsewhere, "stats", event["id"])
        idle = await open_socket(second.url)
        await acknowledged(idle, key)
        other_key = await open_socket(live_server.url)
        await acknowledged(other_key, user.api_key)
        status, _, _ = await api.patch(f"/v1/events/{event['id']}", user,
                                       json={"title": "Seen"})
        assert status == 200
        seen = await message(watching)
        assert seen["payload"]["data"]["event_changes"]["event"]["title"] == "Seen"

        revoked = await asyncio.to_thread(run_admin, database_url, "revoke-key",
                                          "--api-key", key)
        assert set(revoked) == {"key_id", "revoked_at"} and revoked["revoked_at"]
        await asyncio.gather(*(closed_with(s, 4403, within=5)
                               for s in (watching, elsewhere, idle)))
        # A change after the revocation reaches nobody through the key; another key's
        # socket stays.
        status, _, _ = await api.patch(f"/v1/events/{event['id']}", user,
                                       json={"title": "Unseen"})
        assert status == 200
        await still_open(other_key)
        # The key opens no socket any more.
        again = await open_socket(second.url)
        await init(again, key)
        await closed_with(again, 4403)


async def test_a_subscribe_re_checks_the_key(live_server: LiveServer, user: User) -> None:
    """Even a revocation no process heard of (a notification lost) refuses the next
    subscribe: the key is checked again at each."""
    key = live_server.admin(accounts.create_key, user.email)["api_key"]
    async with sockets() as open_socket:
        socket = await open_socket(live_server.url)
        await acknowledged(socket, key)
        await subscribe(socket, "bad", "subscription { nothing }")
        assert (await message(socket))["type"] == "error"
        # Revoked behind the service's back: no notification.
        live_server.call(live_server.db.execute(
            "UPDATE api_keys SET revoked_at = now() WHERE key_hash = $1", hash_key(key)))
        await subscribe(socket, "after", RSVP_STATS, event_id="evt_" + "0" * 32)
        await closed_with(socket, 4403)


# ---------------------------------------------------------------------------
# Limits per socket and per key, across processes

SOCKETS, SUBSCRIPTIONS, PER_SOCKET = 3, 5, 2


@pytest.fixture
def pair(database_url: str, monkeypatch: pytest.MonkeyPatch
         ) -> Iterator[tuple[LiveServer, LiveServer]]:
    """Two processes (apps) on a database of their own, with small limits."""
    monkeypatch.setenv("KALENDS_GRAPHQL_SOCKETS_PER_KEY", str(SOCKETS))
    monkeypatch.setenv("KALENDS_GRAPHQL_SUBSCRIPTIONS_PER_KEY", str(SUBSCRIPTIONS))
    monkeypatch.setenv("KALENDS_GRAPHQL_SUBSCRIPTIONS_PER_SOCKET", str(PER_SOCKET))
    with own_server(database_url, "kalends_wsk", run_jobs=False) as first:
        assert first.db.dsn is not None
        other = LiveServer(first.db.dsn, run_jobs=False)
        try:
            yield first, other
        finally:
            other.close()


def test_the_defaults_and_the_environment() -> None:
    assert ws.Limits.from_environment({}) == ws.Limits(100, 1000, 32)
    assert ws.Limits.from_environment({"KALENDS_GRAPHQL_SOCKETS_PER_KEY": "7"}) \
        == ws.Limits(7, 1000, 32)
    with pytest.raises(ValueError, match="KALENDS_GRAPHQL_SUBSCRIPTIONS_PER_KEY"):
        ws.Limits.from_environment({"KALENDS_GRAPHQL_SUBSCRIPTIONS_PER_KEY": "0"})


async def on(server: LiveServer, coro: Any) -> Any:
    """A coroutine run on the server's loop (its pool lives there)."""
    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, server.loop))


async def _rows(server: LiveServer, key: str) -> list[tuple[int, int, int]]:
    rows = await on(server, server.db.fetch(
        "SELECT u.instance, u.sockets, u.subscriptions FROM live_sockets u "
        "JOIN api_keys k ON k.id = u.key_id WHERE k.key_hash = $1 ORDER BY 1", hash_key(key)))
    return [tuple(r) for r in rows]


async def test_a_key_holds_bounded_sockets_and_subscriptions_across_processes(
    pair: tuple[LiveServer, LiveServer]
) -> None:
    one, two = pair
    user = one.create_user()
    async with aiohttp.ClientSession() as session:
        api = Api(session, one.url)
        profile = await new_profile(api, user)
        event = await new_event(api, user, profile, **TIMED)
    # A process that died left rows behind: they count for nothing.
    dead = 2_000_000_000
    await on(one, one.db.execute(
        "INSERT INTO live_sockets (key_id, instance, sockets, subscriptions) "
        "SELECT id, $2, 100, 1000 FROM api_keys WHERE key_hash = $1",
        hash_key(user.api_key), dead))

    async with sockets() as open_socket:
        a1, a2 = await open_socket(one.url), await open_socket(one.url)
        b1 = await open_socket(two.url)
        for socket in (a1, a2, b1):
            await acknowledged(socket, user.api_key)
        for server in (one, two):  # a fourth socket, on either process
            extra = await open_socket(server.url)
            await init(extra, user.api_key)
            await closed_with(extra, 4429)

        # At most PER_SOCKET on one socket.
        await running(a1, "x", event["id"])
        await running(a1, "y", event["id"])
        await subscribe(a1, "z", RSVP_STATS, event_id=event["id"])
        assert await error_code(a1, "z") == "too_many_subscriptions"
        # At most SUBSCRIPTIONS for the key, across processes.
        await running(a2, "x", event["id"])
        await running(a2, "y", event["id"])
        await running(b1, "x", event["id"])
        await subscribe(b1, "y", RSVP_STATS, event_id=event["id"])
        assert await error_code(b1, "y") == "rate_limit_exceeded"

        # One completed on the first process: room on the second.
        await a1.send_json({"id": "x", "type": "complete"})

        async def room() -> bool:
            await subscribe(b1, "y", RSVP_STATS, event_id=event["id"])
            answer = await message(b1)
            assert answer["id"] == "y", answer
            return answer["type"] == "next"

        await until(room, what="a subscription given back")
        await subscribe(a1, "z", RSVP_STATS, event_id=event["id"])
        assert await error_code(a1, "z") == "rate_limit_exceeded"

        # The second process seems gone (its connection, and its lock, lost): its
        # sockets do not count until it is back, and then they count again.
        registry = two.app[ws.REGISTRY]
        rows = await _rows(two, user.api_key)
        assert (registry.instance, 1, 2) in rows, rows
        assert two.db.dsn is not None
        conn = await asyncpg.connect(two.db.dsn)
        try:
            killed = await conn.fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_locks "
                f"WHERE locktype = 'advisory' AND classid = {LIVE_LOCK} AND objid = $1 "
                "AND objsubid = 2 AND database = (SELECT oid FROM pg_database "
                "WHERE datname = current_database())", registry.instance)
        finally:
            await conn.close()
        assert killed == 1

        async def back() -> bool:
            return registry.connected and (registry.instance, 1, 2) in await _rows(
                two, user.api_key) and dead not in [r[0] for r in await _rows(
                    two, user.api_key)]

        await until(back, what="the second process back, the dead one's rows gone")
        extra = await open_socket(one.url)
        await init(extra, user.api_key)
        await closed_with(extra, 4429)

        # A socket closed on the first process: room for one on the second.
        await a2.close()

        async def socket_room() -> bool:
            socket = await open_socket(two.url)
            await init(socket, user.api_key)
            received = await socket.receive(timeout=10)
            if received.type is aiohttp.WSMsgType.TEXT:
                assert json.loads(received.data) == {"type": "connection_ack"}
                return True
            assert received.data == 4429, (received.type, received.data)
            return False

        await until(socket_room, what="a socket given back")
    # Every socket closed: nothing left counted for the key.

    async def none_left() -> bool:
        rows = await _rows(one, user.api_key)
        return not [r for r in rows if r[1:] != (0, 0)]

    await until(none_left, what="the key's rows gone")


# ---------------------------------------------------------------------------
# Subscribe messages are charged


QUOTA = 12


@pytest.fixture
def limited(database_url: str) -> Iterator[LiveServer]:
    settings = Settings(rate_limit=Rate(QUOTA, 3600), anonymous_rate_limit=None)
    with own_server(database_url, "kalends_wsc", settings=settings, run_jobs=False) as server:
        yield server


async def test_every_subscribe_is_charged_to_the_keys_rate_limit(limited: LiveServer) -> None:
    quota, server = QUOTA, limited
    user = server.create_user()
    async with aiohttp.ClientSession() as session, sockets() as open_socket:
        api = Api(session, server.url)
        profile = await new_profile(api, user)  # charged: 1
        event = await new_event(api, user, profile, **TIMED)  # 2
        socket = await open_socket(server.url)
        await acknowledged(socket, user.api_key)  # 3
        # A subscribe that cannot run is charged too.
        await subscribe(socket, "bad", "subscription { nothing }")  # 4
        answer = await message(socket)
        assert answer["type"] == "error", answer
        accepted = 0
        for index in range(3 * quota):
            id_ = f"s{index}"
            await subscribe(socket, id_, RSVP_STATS, event_id=event["id"])
            answer = await message(socket)
            assert answer["id"] == id_, answer
            if answer["type"] == "error":
                assert answer["payload"][0]["extensions"]["code"] == "rate_limit_exceeded"
                break
            assert answer["type"] == "next", answer
            accepted += 1
            await socket.send_json({"id": id_, "type": "complete"})
        assert accepted == quota - 4
        # The same quota as requests.
        status, body, _ = await api.get(f"/v1/events/{event['id']}", user)
        assert status == 429, body
        await still_open(socket)


# ---------------------------------------------------------------------------
# Access lost: the next change ends the subscription with the read's error


async def test_a_subscription_whose_target_is_no_longer_readable_ends_at_the_next_change(
    live_server: LiveServer, api: Api, make_user: Any
) -> None:
    org, owner, admin, _ = await org_with(live_server, make_user)
    guest = await make_user()
    profile = await new_profile(api, owner, organization_id=org)
    event = await new_event(api, owner, profile, **TIMED)
    async with sockets() as open_socket:
        theirs = await open_socket(live_server.url)
        await acknowledged(theirs, admin.api_key)
        await subscribe(theirs, "changes", EVENT_CHANGES, profile_id=profile["id"])
        guests = await open_socket(live_server.url)
        await acknowledged(guests, guest.api_key)
        await running(guests, "stats", event["id"])
        status, _, _ = await api.patch(f"/v1/events/{event['id']}", owner,
                                       json={"title": "Still theirs"})
        assert status == 200
        assert (await message(theirs))["type"] == "next"

        # Demoted to member: the profile's webhook read now answers 403.
        live_server.admin(accounts.add_member, org, admin.email, "member")
        status, _, _ = await api.patch(f"/v1/events/{event['id']}", owner,
                                       json={"title": "Private now", "is_private": True})
        assert status == 200
        assert await error_code(theirs, "changes") == "forbidden"
        assert await error_code(guests, "stats") == "resource_not_found"
        await still_open(theirs)
        await still_open(guests)
