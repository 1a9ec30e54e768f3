"""GraphQL subscriptions over WebSocket at `/graphql` (docs/graphql.md, "Dashboards: `/graphql`"):
the graphql-transport-ws protocol, `event_changes` and `rsvp_stats` (and their
deprecated first names, `eventChanges` and `rsvpStats`), who may subscribe,
changes in commit order from every process on the database, cleanup of a lost
client, reconnection of the change feed, and a graceful stop.

The clients are gql's WebsocketsTransport (an independent implementation of the
protocol) and, where the protocol's own close codes are the point, aiohttp's raw
WebSocket client.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import pytest
from conftest import (
    Api,
    LiveServer,
    User,
    assert_error,
    migrated_database,
    new_event,
    new_profile,
    org_profile,
)
from gql import Client, GraphQLRequest
from gql.transport.exceptions import TransportError, TransportQueryError
from gql.transport.websockets import WebsocketsTransport
from processes import ROOT, Service, create_user, request, service_env, start

from db.changes import APPLICATION_NAME
from graph_bridge import ws
from registry.operations.events import EVENT_FIELDS

PROTOCOL = "graphql-transport-ws"
TIMED = {"start_time": "2031-05-06T10:00", "start_timezone": "Europe/Paris"}
EVENT_CHANGES = """
subscription changes($profile_id: ID!) {
  event_changes(profile_id: $profile_id) { type event { ...EventFields } }
}
""" + EVENT_FIELDS
RSVP_STATS = """
subscription stats($event_id: ID!) {
  rsvp_stats(event_id: $event_id) { event_id going maybe not_going waitlist total_attendees }
}
"""


def ws_url(base: str) -> str:
    return base.replace("http://", "ws://") + "/graphql"


def client(base: str, api_key: str | None) -> Client:
    transport = WebsocketsTransport(
        url=ws_url(base), subprotocols=[WebsocketsTransport.GRAPHQLWS_SUBPROTOCOL],
        init_payload={} if api_key is None else {"Authorization": f"Bearer {api_key}"})
    return Client(transport=transport, fetch_schema_from_transport=False)


class Subscriber:
    """One subscription of a connected gql session; what it yields waits in a queue."""

    def __init__(self, session: Any, document: str, variables: dict[str, Any]) -> None:
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._task = asyncio.create_task(self._run(session, document, variables))

    async def _run(self, session: Any, document: str, variables: dict[str, Any]) -> None:
        try:
            request = GraphQLRequest(document, variable_values=variables)
            async for result in session.subscribe(request):
                self._queue.put_nowait(result)
            self._queue.put_nowait(StopAsyncIteration())
        except Exception as exc:
            self._queue.put_nowait(exc)

    async def next(self, timeout: float = 10) -> dict[str, Any]:
        item = await asyncio.wait_for(self._queue.get(), timeout)
        if isinstance(item, BaseException):
            raise item
        return item  # type: ignore[no-any-return]

    async def error(self, timeout: float = 10) -> dict[str, Any]:
        """The one GraphQL error that ended the subscription."""
        with pytest.raises(TransportQueryError) as raised:
            await self.next(timeout)
        assert raised.value.errors is not None and len(raised.value.errors) == 1
        return raised.value.errors[0]  # type: ignore[no-any-return]

    async def nothing(self, seconds: float = 0.5) -> None:
        await asyncio.sleep(seconds)
        assert self._queue.empty(), self._queue.get_nowait()

    async def cancel(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


async def until(condition: Callable[[], bool], timeout: float = 10, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what or condition}"
        await asyncio.sleep(0.02)


def watches(live_server: LiveServer) -> int:
    return live_server.app[ws.FEED].watches


@pytest.fixture(autouse=True)
def _no_watch_left(live_server: LiveServer) -> Iterator[None]:
    """Every test leaves the shared service with no watch open: whatever ended a
    subscription (its client, an error, a lost connection) closed its buffer."""
    yield
    deadline = time.monotonic() + 10
    while watches(live_server) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert watches(live_server) == 0


@contextlib.asynccontextmanager
async def watching(live_server: LiveServer, session: Any, document: str,
                   variables: dict[str, Any]) -> AsyncIterator[Subscriber]:
    """A subscription, yielded once the server watches for its changes (the protocol
    has no acknowledgement of a subscribe)."""
    before = watches(live_server)
    subscriber = Subscriber(session, document, variables)
    await until(lambda: watches(live_server) > before, what="the subscription")
    try:
        yield subscriber
    finally:
        await subscriber.cancel()


@contextlib.asynccontextmanager
async def raw(base: str, *, protocols: tuple[str, ...] = (PROTOCOL,)
              ) -> AsyncIterator[aiohttp.ClientWebSocketResponse]:
    async with aiohttp.ClientSession() as session, \
            session.ws_connect(ws_url(base), protocols=protocols) as socket:
        yield socket


async def closed_with(socket: aiohttp.ClientWebSocketResponse, code: int) -> str:
    message = await socket.receive(timeout=10)
    assert message.type is aiohttp.WSMsgType.CLOSE, message
    assert message.data == code, (message.data, message.extra)
    return str(message.extra)


async def acknowledged(socket: aiohttp.ClientWebSocketResponse, user: User) -> None:
    await socket.send_json({"type": "connection_init",
                            "payload": {"Authorization": f"Bearer {user.api_key}"}})
    assert await socket.receive_json(timeout=10) == {"type": "connection_ack"}


# ---------------------------------------------------------------------------
# The protocol


async def test_protocol_handshake_ping_and_its_close_codes(
    live_server: LiveServer, user: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = live_server.url
    async with raw(base, protocols=("graphql-ws",)) as socket:  # the retired Apollo protocol
        await closed_with(socket, 4406)
    async with raw(base) as socket:
        await socket.send_json({"id": "1", "type": "subscribe", "payload": {"query": "{x}"}})
        await closed_with(socket, 4401)
    async with raw(base) as socket:
        await socket.send_json({"type": "connection_init"})
        assert "API key" in await closed_with(socket, 4403)
    async with raw(base) as socket:
        await socket.send_json({"type": "connection_init",
                                "payload": {"Authorization": "Bearer kal_unknown"}})
        assert "unknown or revoked" in await closed_with(socket, 4403)
    async with raw(base) as socket:
        await acknowledged(socket, user)
        await socket.send_json({"type": "ping", "payload": {"n": 1}})
        assert await socket.receive_json(timeout=10) == {"type": "pong"}
        await socket.send_json({"type": "pong"})  # unanswered
        await socket.send_json({"type": "connection_init"})
        await closed_with(socket, 4429)
    async with raw(base) as socket:
        await acknowledged(socket, user)
        await socket.send_str("not json")
        await closed_with(socket, 4400)
    async with raw(base) as socket:
        await acknowledged(socket, user)
        await socket.send_json({"type": "subscribe", "payload": {"query": "{x}"}})  # no id
        await closed_with(socket, 4400)
    monkeypatch.setattr(ws, "INIT_TIMEOUT", 0.3)
    async with raw(base) as socket:
        await closed_with(socket, 4408)


async def test_gql_with_a_missing_or_unknown_key_is_refused(
    live_server: LiveServer, user: User
) -> None:
    for key in (None, "kal_unknown", user.api_key[:-2]):
        with pytest.raises(TransportError):
            async with client(live_server.url, key) as session:
                await Subscriber(session, RSVP_STATS, {"event_id": "evt_" + "0" * 32}).next()


async def test_only_subscriptions_within_bounds(
    live_server: LiveServer, api: Api, user: User
) -> None:
    profile = await new_profile(api, user)
    async with client(live_server.url, user.api_key) as session:
        error = await Subscriber(session, "query { profiles { has_more } }", {}).error()
        assert "POST /graphql" in error["message"]
        error = await Subscriber(session, "subscription { nothing }", {}).error()
        assert "nothing" in error["message"]
        aliases = " ".join(f"a{i}: __typename" for i in range(20))
        error = await Subscriber(session, f"""subscription {{
            event_changes(profile_id: "{profile['id']}") {{ type {aliases} }} }}""", {}).error()
        assert error["extensions"]["code"] == "query_too_many_aliases"
        error = await Subscriber(session, EVENT_CHANGES, {"profile_id": "evt_x"}).error()
        assert error["extensions"]["code"] == "invalid_id"
        assert error["path"] == ["event_changes"]
    async with raw(live_server.url) as socket:
        await acknowledged(socket, user)
        subscribe = {"id": "a", "type": "subscribe", "payload": {
            "query": EVENT_CHANGES, "variables": {"profile_id": profile["id"]}}}
        for index in range(ws.MAX_SUBSCRIPTIONS):
            await socket.send_json({**subscribe, "id": f"s{index}"})
        await socket.send_json({**subscribe, "id": "one too many"})
        refused = await socket.receive_json(timeout=10)
        assert refused["id"] == "one too many" and refused["type"] == "error"
        assert refused["payload"][0]["extensions"]["code"] == "too_many_subscriptions"
        await socket.send_json({**subscribe, "id": "s0"})
        await closed_with(socket, 4409)


# ---------------------------------------------------------------------------
# event_changes


async def test_a_profile_not_administered_is_refused_as_its_read_is(
    live_server: LiveServer, api: Api, make_user: Any
) -> None:
    profile, _, _, member = await org_profile(live_server, api, make_user)
    stranger = await make_user()
    read = f"/v1/profiles/{profile['id']}/webhook-endpoints"
    for caller, status, code in ((member, 403, "forbidden"),
                                 (stranger, 404, "resource_not_found")):
        assert_error(*(await api.get(read, caller))[:2], status, code)
        async with client(live_server.url, caller.api_key) as session:
            error = await Subscriber(session, EVENT_CHANGES, {"profile_id": profile["id"]}
                                     ).error()
        assert error["extensions"]["code"] == code
        assert error["path"] == ["event_changes"]


async def test_the_owner_sees_each_change_as_get_event_shows_it(
    live_server: LiveServer, api: Api, make_user: Any
) -> None:
    profile, owner, admin, _ = await org_profile(live_server, api, make_user)
    variables = {"profile_id": profile["id"]}
    async with client(live_server.url, owner.api_key) as mine, \
            client(live_server.url, admin.api_key) as theirs, \
            watching(live_server, mine, EVENT_CHANGES, variables) as owner_sees, \
            watching(live_server, theirs, EVENT_CHANGES, variables) as admin_sees:

        async def shown(event_type: str, event: dict[str, Any]) -> None:
            for subscriber in (owner_sees, admin_sees):
                assert (await subscriber.next())["event_changes"] == {
                    "type": event_type, "event": event}

        event = await new_event(api, owner, profile, **TIMED, description="Live")
        await shown("event.created", event)
        path = f"/v1/events/{event['id']}"
        status, event, _ = await api.patch(path, owner, json={"title": "Renamed"})
        assert status == 200, event
        await shown("event.updated", event)
        status, event, _ = await api.post(path + "/cancel", owner, json={"reason": "Rain"})
        assert status == 200, event
        await shown("event.cancelled", event)
        status, event, _ = await api.post(path + "/reschedule", owner, json={
            "start_time": "2031-06-01T10:00", "start_timezone": "Europe/Paris"})
        assert status == 200, event
        await shown("event.rescheduled", event)
        status, before, _ = await api.get(path, owner)
        assert status == 200
        assert (await api.delete(path, owner))[0] == 204
        await shown("event.deleted", before)  # as it was just before
        # RSVPs are not event changes; rsvp_stats follows them.
        other = await new_event(api, owner, profile, **TIMED)
        await shown("event.created", other)
        status, body, _ = await api.post(f"/v1/events/{other['id']}/rsvps", owner,
                                         json={"status": "going"})
        assert status == 201, body
        await owner_sees.nothing()


async def test_changes_arrive_in_commit_order_never_older_than_themselves(
    live_server: LiveServer, api: Api, user: User
) -> None:
    profile = await new_profile(api, user)
    events = [await new_event(api, user, profile, **TIMED) for _ in range(2)]
    async with client(live_server.url, user.api_key) as session, \
            watching(live_server, session, EVENT_CHANGES, {"profile_id": profile["id"]}) as sub:
        made = []
        for index in range(12):  # one after another: commit order is this order
            event = events[index % 2]
            status, body, _ = await api.patch(f"/v1/events/{event['id']}", user,
                                              json={"title": f"t{index:02}"})
            assert status == 200, body
            made.append((event["id"], f"t{index:02}"))
        seen = [(await sub.next())["event_changes"] for _ in made]
    assert [(c["type"], c["event"]["id"]) for c in seen] == [
        ("event.updated", event_id) for event_id, _ in made]
    # Read after its commit: the title is this change's or a later one's.
    assert all(change["event"]["title"] >= title
               for change, (_, title) in zip(seen, made, strict=True))


async def test_a_series_deleted_with_its_events_shows_each_as_it_was(
    live_server: LiveServer, api: Api, user: User
) -> None:
    profile = await new_profile(api, user)
    status, series, _ = await api.post(f"/v1/profiles/{profile['id']}/series", user,
                                       json={"name": "Season", "slug": "season"})
    assert status == 201, series
    # Together more than a notification may carry (8000 bytes).
    large = {"description": "d" * 5000, "location": "l" * 1000,
             "image_url": "https://example.com/" + "i" * 2000}
    events = [await new_event(api, user, profile, **TIMED, **large) for _ in range(2)]
    for event in events:
        status, _, _ = await api.post(f"/v1/series/{series['id']}/events", user,
                                      json={"event_id": event["id"]})
        assert status == 204
    events = [(await api.get(f"/v1/events/{e['id']}", user))[1] for e in events]
    async with client(live_server.url, user.api_key) as session, \
            watching(live_server, session, EVENT_CHANGES, {"profile_id": profile["id"]}) as sub:
        status, body, _ = await api.delete(f"/v1/series/{series['id']}", user,
                                           params={"cascade_exclusive_events": "true"})
        assert status == 200 and body["deleted_event_count"] == 2, body
        seen = [(await sub.next())["event_changes"] for _ in events]
    assert sorted(seen, key=lambda c: c["event"]["id"]) == sorted(
        ({"type": "event.deleted", "event": e} for e in events), key=lambda c: c["event"]["id"])


# ---------------------------------------------------------------------------
# rsvp_stats


async def test_rsvp_stats_follow_rsvps_for_whoever_may_read_them(
    live_server: LiveServer, api: Api, make_user: Any
) -> None:
    owner, guest, stranger = await make_user(), await make_user(), await make_user()
    profile = await new_profile(api, owner)
    event = await new_event(api, owner, profile, **TIMED)
    hidden = await new_event(api, owner, profile, **TIMED, is_private=True)
    stats_path = f"/v1/events/{event['id']}/rsvps/stats"

    async def rest_stats() -> dict[str, Any]:
        status, body, _ = await api.get(stats_path, owner)
        assert status == 200, body
        return dict(body)

    async with client(live_server.url, guest.api_key) as session:
        sub = Subscriber(session, RSVP_STATS, {"event_id": event["id"]})
        assert (await sub.next())["rsvp_stats"] == await rest_stats()  # as they are
        status, rsvp, _ = await api.post(f"/v1/events/{event['id']}/rsvps", guest,
                                         json={"status": "going", "num_guests": 3})
        assert status == 201, rsvp
        assert (await sub.next())["rsvp_stats"] == await rest_stats()
        status, _, _ = await api.post(f"/v1/events/{event['id']}/rsvps", owner,
                                      json={"status": "maybe"})
        assert (await sub.next())["rsvp_stats"] == await rest_stats()
        status, _, _ = await api.patch(f"/v1/events/{event['id']}/rsvps/{rsvp['id']}", guest,
                                       json={"status": "not_going"})
        assert status == 200
        assert (await sub.next())["rsvp_stats"] == await rest_stats()
        # A change that leaves the counts as they were sends nothing.
        status, _, _ = await api.patch(f"/v1/events/{event['id']}", owner,
                                       json={"title": "Same counts"})
        assert status == 200
        await sub.nothing()
        status, _, _ = await api.delete(f"/v1/events/{event['id']}/rsvps/{rsvp['id']}", guest)
        assert status == 204
        assert (await sub.next())["rsvp_stats"] == await rest_stats()
        # The event gone: the error its read now gives.
        assert (await api.delete(f"/v1/events/{event['id']}", owner))[0] == 204
        error = await sub.error()
        assert error["extensions"]["code"] == "resource_not_found"
        assert error["path"] == ["rsvp_stats"]

    hidden_path = f"/v1/events/{hidden['id']}/rsvps/stats"
    assert_error(*(await api.get(hidden_path, stranger))[:2], 404, "resource_not_found")
    async with client(live_server.url, stranger.api_key) as session:
        error = await Subscriber(session, RSVP_STATS, {"event_id": hidden["id"]}).error()
        assert error["extensions"]["code"] == "resource_not_found"
        assert error["extensions"]["param"] == "event_id"
        # Access lost at a change ends the subscription with the read's error.
        sub = Subscriber(session, RSVP_STATS, {"event_id": (shown := await new_event(
            api, owner, profile, **TIMED))["id"]})
        await sub.next()
        assert (await api.patch(f"/v1/events/{shown['id']}", owner,
                                json={"is_private": True}))[0] == 200
        assert (await sub.error())["extensions"]["code"] == "resource_not_found"


# ---------------------------------------------------------------------------
# The first names, camelCase: deprecated, answered alike

FIRST_NAMES = {"event_changes": "eventChanges", "rsvp_stats": "rsvpStats"}
SUBSCRIPTION_FIELDS = """{ __schema { subscriptionType { fields(includeDeprecated: $all) {
  name isDeprecated deprecationReason description
  args { name type { kind name ofType { name } } }
  type { kind ofType { name } } } } } }"""


async def test_the_first_names_are_deprecated_aliases_in_introspection(api: Api,
                                                                       user: User) -> None:
    async def fields(all_: bool) -> dict[str, Any]:
        query = "query Fields($all: Boolean!) " + SUBSCRIPTION_FIELDS
        status, body, _ = await api.post("/graphql", user,
                                         json={"query": query, "variables": {"all": all_}})
        assert status == 200 and "errors" not in body, body
        return {f["name"]: f for f in body["data"]["__schema"]["subscriptionType"]["fields"]}

    assert {name: f["isDeprecated"] for name, f in (await fields(False)).items()} == {
        "event_changes": False, "rsvp_stats": False}
    found = await fields(True)
    assert set(found) == {*FIRST_NAMES, *FIRST_NAMES.values()}
    for name, first in FIRST_NAMES.items():
        assert (found[first]["isDeprecated"], found[first]["deprecationReason"]) == (
            True, f"Use {name}")
        # The same field under another name: arguments, type, description.
        same = {k: v for k, v in found[first].items()
                if k not in ("name", "isDeprecated", "deprecationReason")}
        assert same == {k: v for k, v in found[name].items()
                        if k not in ("name", "isDeprecated", "deprecationReason")}


async def test_the_first_names_still_deliver_the_same_changes(
    live_server: LiveServer, api: Api, user: User
) -> None:
    profile = await new_profile(api, user)
    event = await new_event(api, user, profile, **TIMED)
    first_changes = EVENT_CHANGES.replace("event_changes(", "eventChanges(")
    first_stats = RSVP_STATS.replace("rsvp_stats(", "rsvpStats(")
    async with client(live_server.url, user.api_key) as session, \
            watching(live_server, session, EVENT_CHANGES, {"profile_id": profile["id"]}) as new, \
            watching(live_server, session, first_changes, {"profile_id": profile["id"]}) as old, \
            watching(live_server, session, RSVP_STATS, {"event_id": event["id"]}) as stats, \
            watching(live_server, session, first_stats, {"event_id": event["id"]}) as old_stats:
        assert (await old_stats.next())["rsvpStats"] == (await stats.next())["rsvp_stats"]
        status, changed, _ = await api.patch(f"/v1/events/{event['id']}", user,
                                             json={"title": "Seen twice"})
        assert status == 200, changed
        expected = {"type": "event.updated", "event": changed}
        assert (await new.next()) == {"event_changes": expected}
        assert (await old.next()) == {"eventChanges": expected}
        status, _, _ = await api.post(f"/v1/events/{event['id']}/rsvps", user,
                                      json={"status": "going"})
        assert status == 201
        shown = (await stats.next())["rsvp_stats"]
        assert shown["going"] == 1
        assert (await old_stats.next()) == {"rsvpStats": shown}


# ---------------------------------------------------------------------------
# The change feed's database connection


async def test_the_feed_reconnects_and_ends_subscriptions_that_missed_changes(
    live_server: LiveServer, api: Api, user: User
) -> None:
    profile = await new_profile(api, user)
    variables = {"profile_id": profile["id"]}
    assert live_server.db.dsn is not None
    async with client(live_server.url, user.api_key) as session:
        async with watching(live_server, session, EVENT_CHANGES, variables) as sub:
            conn = await asyncpg.connect(live_server.db.dsn)
            try:
                killed = await conn.fetchval(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE application_name = $1 AND datname = current_database()",
                    APPLICATION_NAME)
            finally:
                await conn.close()
            assert killed >= 1
            error = await sub.error()
            assert error["extensions"]["code"] == "service_unavailable"
        feed = live_server.app[ws.FEED]
        await until(lambda: feed.connected, what="the feed reconnected")
        async with watching(live_server, session, EVENT_CHANGES, variables) as again:
            event = await new_event(api, user, profile, **TIMED)
            assert (await again.next())["event_changes"]["event"]["id"] == event["id"]


# ---------------------------------------------------------------------------
# Two `kalends serve` processes on one database


def _metric(port: int, name: str) -> float:
    status, body, _ = request(port, "GET", "/metrics")
    assert status == 200
    found = re.search(rf"^{name} (\S+)$", body.decode(), re.MULTILINE)
    assert found, name
    return float(found.group(1))


async def _until_metric(port: int, name: str, value: float) -> None:
    await until(lambda: _metric(port, name) == value, timeout=15, what=f"{name} == {value}")


_ABRUPT_CLIENT = """
import asyncio, sys
from gql import Client, GraphQLRequest
from gql.transport.websockets import WebsocketsTransport
async def main():
    transport = WebsocketsTransport(url=sys.argv[1], subprotocols=["graphql-transport-ws"],
                                    init_payload={"Authorization": "Bearer " + sys.argv[2]})
    async with Client(transport=transport) as session:
        request = GraphQLRequest(sys.argv[3], variable_values={"profile_id": sys.argv[4]})
        async for _ in session.subscribe(request):
            pass
asyncio.run(main())
"""


@pytest.mark.slow
def test_two_serve_processes_share_changes_lose_clients_and_stop_gracefully(
    database_url: str, data_dir: Path, tmp_path: Path, services: list[Service]
) -> None:
    with migrated_database(database_url, prefix="kalends_live") as dsn:
        env = service_env(data_dir, DATABASE_URL=dsn)
        writer = start(services, data_dir, tmp_path, env=env)
        reader = start(services, data_dir, tmp_path, env=env)
        api_key = create_user(data_dir, env)
        asyncio.run(_two_processes(writer, reader, User("", api_key, "", "", "")))
        assert writer.stop() == 0


async def _two_processes(writer: Service, reader: Service, user: User) -> None:
    api_key = user.api_key
    async with aiohttp.ClientSession() as http:
        api = Api(http, f"http://127.0.0.1:{writer.port}")
        profile = await new_profile(api, user)
        reader_url = f"http://127.0.0.1:{reader.port}"
        variables = {"profile_id": profile["id"]}
        watches_metric = "kalends_change_feed_watches"

        # A change made through one process reaches a subscriber on the other.
        async with client(reader_url, api_key) as session:
            sub = Subscriber(session, EVENT_CHANGES, variables)
            await _until_metric(reader.port, watches_metric, 1)
            event = await new_event(api, user, profile, **TIMED)
            assert (await sub.next())["event_changes"] == {"type": "event.created",
                                                          "event": event}
            stats = Subscriber(session, RSVP_STATS, {"event_id": event["id"]})
            assert (await stats.next())["rsvp_stats"]["going"] == 0
            assert (await api.post(f"/v1/events/{event['id']}/rsvps", user,
                                   json={"status": "going"}))[0] == 201
            assert (await stats.next())["rsvp_stats"]["going"] == 1
            await sub.cancel()
            await stats.cancel()
        await _until_metric(reader.port, watches_metric, 0)
        assert _metric(reader.port, "kalends_graphql_subscriptions") == 0

        # A subscriber killed without a word is cleaned up on the server.
        lost = subprocess.Popen(
            [sys.executable, "-c", _ABRUPT_CLIENT, ws_url(reader_url), api_key,
             EVENT_CHANGES, profile["id"]], cwd=ROOT, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE)
        try:
            await _until_metric(reader.port, watches_metric, 1)
            assert _metric(reader.port, "kalends_graphql_websockets") == 1
        finally:
            lost.send_signal(signal.SIGKILL)
            lost.wait(timeout=10)
        await _until_metric(reader.port, watches_metric, 0)
        assert _metric(reader.port, "kalends_graphql_subscriptions") == 0
        await _until_metric(reader.port, "kalends_graphql_websockets", 0)

        # Reconnected, a new subscription receives the changes made after it.
        async with client(reader_url, api_key) as session:
            sub = Subscriber(session, EVENT_CHANGES, variables)
            await _until_metric(reader.port, watches_metric, 1)
            status, changed, _ = await api.patch(f"/v1/events/{event['id']}", user,
                                                 json={"title": "Later"})
            assert status == 200
            assert (await sub.next())["event_changes"] == {"type": "event.updated",
                                                          "event": changed}
            await sub.cancel()

        # A graceful stop closes open sockets (1001) instead of waiting for them.
        async with raw(reader_url) as socket:
            await acknowledged(socket, user)
            await socket.send_json({"id": "1", "type": "subscribe", "payload": {
                "query": EVENT_CHANGES, "variables": variables}})
            await _until_metric(reader.port, watches_metric, 1)
            began = time.monotonic()
            reader.proc.send_signal(signal.SIGTERM)
            await closed_with(socket, aiohttp.WSCloseCode.GOING_AWAY)
        assert await asyncio.to_thread(reader.proc.wait, 15) == 0
        assert time.monotonic() - began < 10
