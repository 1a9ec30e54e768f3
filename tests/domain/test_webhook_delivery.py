"""Webhook delivery (docs/api-choices.md, "Webhooks"): a real receiver on loopback checks every
message with the `standardwebhooks` package, an independent implementation of
the signature scheme.

The service under test has a database of its own, so no other test's worker
takes its jobs, http to loopback allowed, and a retry schedule of fractions of
a second in place of Standard Webhooks' hours.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import pytest
from aiohttp import web
from conftest import Api, LiveServer, User, migrated_database, new_event, new_profile, own_server
from standardwebhooks import Webhook, WebhookVerificationError

from domain import config

ROOT = Path(__file__).resolve().parents[2]
SCHEDULE = (0.0, 0.3, 0.3, 0.3, 0.3)
TIMEOUT = 2.0
SECRET_KEY = "webhook-tests-" + "k" * 40


@dataclass
class Delivery:
    path: str
    headers: dict[str, str]
    body: str
    at: float
    status: int


@dataclass
class Receiver:
    """Answers 200, unless `script` says otherwise for the next requests: a status,
    a (status, headers) pair, ("sleep", seconds) or ("hang", None). `rules` script
    the requests whose body holds a given text (`"title":"..."`), before `script`."""

    url: str = ""
    got: list[Delivery] = field(default_factory=list)
    script: list[Any] = field(default_factory=list)
    rules: dict[str, list[Any]] = field(default_factory=dict)
    hanging: asyncio.Event = field(default_factory=asyncio.Event)

    def _next_step(self, body: str) -> Any:
        for text, steps in self.rules.items():
            if text in body and steps:
                return steps.pop(0)
        return self.script.pop(0) if self.script else 200

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = (await request.read()).decode()
        step = self._next_step(body)
        status, headers = (step if isinstance(step, tuple) and isinstance(step[0], int)
                           else (step, {}))
        if step == ("hang", None):
            self.hanging.set()
            await asyncio.sleep(3600)
        at = time.monotonic()
        if isinstance(step, tuple) and step[0] == "sleep":
            # Recorded as 0: the answer comes after the sender has given up.
            self.got.append(Delivery(request.path, dict(request.headers), body, at, 0))
            await asyncio.sleep(step[1])
            return web.Response(status=200)
        self.got.append(Delivery(request.path, dict(request.headers), body, at, status))
        return web.Response(status=status, headers=headers)

    def ok(self) -> list[Delivery]:
        return [d for d in self.got if d.status == 200]

    async def wait_ok(self, count: int, seconds: float = 30) -> list[Delivery]:
        deadline = time.monotonic() + seconds
        while len(self.ok()) < count:
            if time.monotonic() > deadline:
                pytest.fail(f"{len(self.ok())} of {count} deliveries after {seconds} s: "
                            f"{[(d.status, d.path) for d in self.got]}")
            await asyncio.sleep(0.02)
        return self.ok()


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    rec = Receiver()
    app = web.Application()
    app.router.add_route("POST", "/{tail:.*}", rec.handle)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    rec.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    yield rec
    await runner.cleanup()


def _settings() -> config.Settings:
    return replace(
        config.load(), webhook_allow_http=True, secret_key=SECRET_KEY,
        webhook_retry_schedule=tuple(timedelta(seconds=s) for s in SCHEDULE),
        webhook_timeout=timedelta(seconds=TIMEOUT), job_heartbeat=timedelta(seconds=1),
    )


@pytest.fixture(scope="module")
def hooks(database_url: str) -> Iterator[LiveServer]:
    with own_server(database_url, "kalends_hooks", settings=_settings()) as server:
        yield server


@pytest.fixture
async def hapi(hooks: LiveServer) -> AsyncIterator[Api]:
    async with aiohttp.ClientSession() as session:
        yield Api(session, hooks.url)


async def _endpoint(api: Api, owner: User, profile: dict[str, Any], url: str,
                    **fields: Any) -> dict[str, Any]:
    status, body, _ = await api.post(f"/v1/profiles/{profile['id']}/webhook-endpoints", owner,
                                     json={"url": url, **fields})
    assert status == 201, body
    assert body["secret"].startswith("whsec_")
    return dict(body)


def _verified(secret: str, delivery: Delivery) -> dict[str, Any]:
    payload = Webhook(secret).verify(delivery.body, delivery.headers)
    assert isinstance(payload, dict)
    return payload


async def _setup(api: Api, live: LiveServer, url: str, **fields: Any
                 ) -> tuple[User, dict[str, Any], dict[str, Any]]:
    owner = await asyncio.to_thread(live.create_user)
    profile = await new_profile(api, owner)
    endpoint = await _endpoint(api, owner, profile, url, **fields)
    return owner, profile, endpoint


@pytest.mark.slow
async def test_every_change_arrives_signed_in_order_with_the_resource_as_rest_shows_it(
    hapi: Api, hooks: LiveServer, receiver: Receiver,
) -> None:
    owner, profile, endpoint = await _setup(hapi, hooks, receiver.url + "/hook")
    fan = await asyncio.to_thread(hooks.create_user)
    expected: list[tuple[str, Any]] = []

    created = await new_event(hapi, owner, profile, title="Recital")
    expected.append(("event.created", created))
    event_path = f"/v1/events/{created['id']}"
    status, updated, _ = await hapi.patch(event_path, owner, json={"title": "Piano recital"})
    assert status == 200
    expected.append(("event.updated", updated))
    status, cancelled, _ = await hapi.post(event_path + "/cancel", owner,
                                           json={"reason": "Ill"})
    assert status == 200
    expected.append(("event.cancelled", cancelled))
    status, moved, _ = await hapi.post(event_path + "/reschedule", owner, json={
        "start_time": "2031-06-01T20:00", "start_timezone": "Europe/Paris"})
    assert status == 200
    expected.append(("event.rescheduled", moved))
    status, answer, _ = await hapi.post(event_path + "/rsvps", fan, json={
        "status": "going", "attendee_email": "fan@example.com"})
    assert status == 201
    rsvp = answer
    expected.append(("rsvp.created", rsvp))
    status, changed, _ = await hapi.patch(f"{event_path}/rsvps/{rsvp['id']}", fan,
                                          json={"status": "maybe"})
    assert status == 200
    expected.append(("rsvp.updated", changed))
    status, _, _ = await hapi.delete(f"{event_path}/rsvps/{rsvp['id']}", fan)
    assert status == 204
    expected.append(("rsvp.deleted", changed))
    status, last, _ = await hapi.get(event_path, owner)
    assert status == 200 and last == moved
    status, _, _ = await hapi.delete(event_path, owner)
    assert status == 204
    expected.append(("event.deleted", last))

    got = await receiver.wait_ok(len(expected))
    await asyncio.sleep(0.5)
    assert len(receiver.got) == len(expected), "one attempt each, nothing extra"
    payloads = [_verified(endpoint["secret"], d) for d in got]
    assert [(p["type"], p["data"]) for p in payloads] == expected
    for delivery, payload in zip(got, payloads, strict=True):
        assert delivery.path == "/hook"
        assert delivery.headers["Content-Type"] == "application/json"
        assert delivery.headers["webhook-id"].startswith("msg_")
        assert set(payload) == {"type", "timestamp", "data"}
        assert payload["timestamp"].endswith("Z")
    assert len({d.headers["webhook-id"] for d in got}) == len(expected)
    # A body signed with another secret, or altered, does not verify.
    with pytest.raises(WebhookVerificationError):
        Webhook("whsec_" + "A" * 43 + "=").verify(got[0].body, got[0].headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(endpoint["secret"]).verify(got[0].body.replace("Recital", "Recitak"),
                                           got[0].headers)


async def test_an_endpoint_gets_only_its_types_and_its_profiles_changes(
    hapi: Api, hooks: LiveServer, receiver: Receiver,
) -> None:
    owner, profile, endpoint = await _setup(hapi, hooks, receiver.url + "/rsvps-only",
                                            event_types=["rsvp.created"])
    other = await new_profile(hapi, owner)
    await _endpoint(hapi, owner, other, receiver.url + "/other", event_types=["event.updated"])
    event = await new_event(hapi, owner, profile)
    await hapi.patch(f"/v1/events/{event['id']}", owner, json={"title": "Renamed"})
    status, _, _ = await hapi.post(f"/v1/events/{event['id']}/rsvps", owner,
                                   json={"status": "going"})
    assert status == 201
    [only] = await receiver.wait_ok(1)
    await asyncio.sleep(0.5)
    assert len(receiver.got) == 1
    assert only.path == "/rsvps-only"
    assert _verified(endpoint["secret"], only)["type"] == "rsvp.created"


def _title(text: str) -> str:
    """What a message about an event titled `text` holds (orjson writes no spaces)."""
    return f'"title":"{text}"'


@pytest.mark.slow
async def test_one_events_messages_arrive_in_order_when_one_is_retried(
    hapi: Api, hooks: LiveServer, receiver: Receiver,
) -> None:
    # The event's first message meets 500, a timeout, 503 asking for 2 s, then all well.
    receiver.rules = {_title("Draft 0"): [500, ("sleep", TIMEOUT + 1),
                                          (503, {"Retry-After": "2"})]}
    owner, profile, endpoint = await _setup(hapi, hooks, receiver.url + "/flaky")
    titles = [f"Draft {i}" for i in range(4)]
    event = await new_event(hapi, owner, profile, title=titles[0])
    for title in titles[1:]:
        status, _, _ = await hapi.patch(f"/v1/events/{event['id']}", owner,
                                        json={"title": title})
        assert status == 200

    got = await receiver.wait_ok(4)
    payloads = [_verified(endpoint["secret"], d) for d in got]
    assert [p["data"]["title"] for p in payloads] == titles
    # The first message took four attempts, all with one webhook-id; the event's
    # later ones waited behind it and went once each.
    first_id = got[0].headers["webhook-id"]
    ids = [d.headers["webhook-id"] for d in receiver.got]
    assert ids[:4] == [first_id] * 4
    assert len(ids) == 7 and len(set(ids)) == 4
    assert [d.status for d in receiver.got[:4]] == [500, 0, 503, 200]
    # Retry-After (2 s) outweighed the schedule's 0.3 s.
    assert receiver.got[3].at - receiver.got[2].at >= 1.9
    # The attempt that outlived the timeout counts as failed, and was sent again.
    async with hooks_conn(hooks) as conn:
        row = await conn.fetchrow(
            "SELECT attempts, state FROM webhook_deliveries WHERE message_id = $1", first_id)
    assert (row["attempts"], row["state"]) == (4, "delivered")


@pytest.mark.slow
async def test_a_message_waiting_for_its_retry_holds_back_only_its_own_event(
    hapi: Api, hooks: LiveServer, receiver: Receiver,
) -> None:
    receiver.rules = {_title("Stuck"): [(503, {"Retry-After": "3"})]}
    owner, profile, endpoint = await _setup(hapi, hooks, receiver.url + "/lanes")
    stuck = await new_event(hapi, owner, profile, title="Stuck")
    await _wait_until(lambda: len(receiver.got) == 1)
    # While it waits: a later change of the same event, and another event's changes
    # (its own, and an RSVP's).
    status, _, _ = await hapi.patch(f"/v1/events/{stuck['id']}", owner,
                                    json={"title": "Stuck, then moved"})
    assert status == 200
    free = await new_event(hapi, owner, profile, title="Free")
    status, _, _ = await hapi.patch(f"/v1/events/{free['id']}", owner, json={"title": "Free 2"})
    assert status == 200
    status, _, _ = await hapi.post(f"/v1/events/{free['id']}/rsvps", owner,
                                   json={"status": "going"})
    assert status == 201

    got = await receiver.wait_ok(5)
    seen = [(p["type"], p["data"].get("title")) for p in
            (_verified(endpoint["secret"], d) for d in got)]
    # The other event's messages, in their order, all before the stuck one's retry...
    assert seen[:3] == [("event.created", "Free"), ("event.updated", "Free 2"),
                        ("rsvp.created", None)]
    # ...which went when the receiver asked, followed by its own event's next.
    assert seen[3:] == [("event.created", "Stuck"), ("event.updated", "Stuck, then moved")]
    assert got[3].at - receiver.got[0].at >= 2.9
    assert got[2].at < receiver.got[0].at + 2.5


async def test_delivery_goes_on_while_the_profiles_sync_jobs_wait_for_its_lock(
    hapi: Api, hooks: LiveServer, receiver: Receiver,
) -> None:
    """Each change queues a sync job (subscribers' copies) beside its message. With
    the profile's sync lock held elsewhere, those jobs wait, and more of them than
    the jobs' pool has connections (4) hold none: the messages go meanwhile."""
    from db import sync as sync_store
    from db.database import Tx

    owner, profile, endpoint = await _setup(hapi, hooks, receiver.url + "/busy",
                                            event_types=["event.updated"])
    events = [await new_event(hapi, owner, profile, title=f"Busy {i}") for i in range(8)]
    async with hooks_conn(hooks) as held:
        await held.execute("BEGIN")
        await sync_store.lock_profile(Tx(held, hooks.db), profile["id"])
        for i, event in enumerate(events):
            status, _, _ = await hapi.patch(f"/v1/events/{event['id']}", owner,
                                            json={"title": f"Busy {i} moved"})
            assert status == 200
        got = await receiver.wait_ok(len(events), seconds=10)
        assert {_verified(endpoint["secret"], d)["data"]["title"] for d in got} == {
            f"Busy {i} moved" for i in range(len(events))}
        # The sync jobs still wait for the lock, holding no connection in it.
        assert await held.fetchval(
            "SELECT count(*) FROM pgqueuer WHERE entrypoint = 'sync'") >= len(events)
        assert await held.fetchval(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted") == 0
        await held.execute("ROLLBACK")

    async def synced() -> bool:
        async with hooks_conn(hooks) as conn:
            return not await conn.fetchval(
                "SELECT count(*) FROM pgqueuer WHERE entrypoint = 'sync'")

    deadline = time.monotonic() + 20
    while not await synced():
        assert time.monotonic() < deadline, "the sync jobs did not finish once the lock was free"
        await asyncio.sleep(0.05)


async def _wait_until(check: Any, seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {seconds} s")
        await asyncio.sleep(0.02)


@asynccontextmanager
async def hooks_conn(live: LiveServer) -> AsyncIterator[asyncpg.Connection]:
    assert live.db.dsn is not None
    conn = await asyncpg.connect(live.db.dsn)
    try:
        yield conn
    finally:
        await conn.close()


async def _endpoint_row(live: LiveServer, endpoint_id: str) -> asyncpg.Record:
    async with hooks_conn(live) as conn:
        row = await conn.fetchrow("SELECT * FROM webhook_endpoints WHERE id = $1", endpoint_id)
    assert row is not None
    return row


async def _wait_disabled(api: Api, owner: User, endpoint_id: str, seconds: float = 20
                         ) -> dict[str, Any]:
    deadline = time.monotonic() + seconds
    while True:
        status, body, _ = await api.get(f"/v1/webhook-endpoints/{endpoint_id}", owner)
        assert status == 200
        if not body["is_active"]:
            return dict(body)
        if time.monotonic() > deadline:
            pytest.fail(f"endpoint still active after {seconds} s")
        await asyncio.sleep(0.05)


async def test_410_disables_the_endpoint_and_enabling_it_resumes_the_queue(
    hapi: Api, hooks: LiveServer, receiver: Receiver,
) -> None:
    receiver.script = [410]
    owner, profile, endpoint = await _setup(hapi, hooks, receiver.url + "/gone")
    await new_event(hapi, owner, profile, title="First")
    disabled = await _wait_disabled(hapi, owner, endpoint["id"])
    assert "410" in disabled["disabled_reason"]
    assert len(receiver.got) == 1

    # While disabled, changes are not queued for it; the message that met 410 waits.
    await new_event(hapi, owner, profile, title="Unsent")
    await asyncio.sleep(0.5)
    assert len(receiver.got) == 1

    status, body, _ = await hapi.patch(f"/v1/webhook-endpoints/{endpoint['id']}", owner,
                                       json={"is_active": True})
    assert status == 200 and body["is_active"] and body["disabled_reason"] is None
    [again] = await receiver.wait_ok(1)
    assert _verified(endpoint["secret"], again)["data"]["title"] == "First"
    assert again.headers["webhook-id"] == receiver.got[0].headers["webhook-id"]
    await new_event(hapi, owner, profile, title="Third")
    got = await receiver.wait_ok(2)
    assert _verified(endpoint["secret"], got[1])["data"]["title"] == "Third"


@pytest.mark.slow
async def test_an_endpoint_that_keeps_failing_is_disabled_with_its_reason(
    hapi: Api, hooks: LiveServer, receiver: Receiver,
) -> None:
    receiver.script = [500] * len(SCHEDULE)
    owner, profile, endpoint = await _setup(hapi, hooks, receiver.url + "/down")
    await new_event(hapi, owner, profile, title="Lost?")
    disabled = await _wait_disabled(hapi, owner, endpoint["id"])
    assert len(receiver.got) == len(SCHEDULE)
    reason = disabled["disabled_reason"]
    assert f"{len(SCHEDULE)} attempts" in reason and "HTTP 500" in reason
    # Also visible to an agent, through MCP's view of the same operation.
    status, listed, _ = await hapi.get(f"/v1/profiles/{profile['id']}/webhook-endpoints", owner)
    assert status == 200 and listed["data"][0]["disabled_reason"] == reason

    # Nothing is lost: enabled again, the message is delivered.
    status, _, _ = await hapi.patch(f"/v1/webhook-endpoints/{endpoint['id']}", owner,
                                    json={"is_active": True})
    assert status == 200
    [delivered] = await receiver.wait_ok(1)
    assert _verified(endpoint["secret"], delivered)["data"]["title"] == "Lost?"


async def test_redirects_are_not_followed(
    hapi: Api, hooks: LiveServer, receiver: Receiver,
) -> None:
    receiver.script = [(307, {"Location": receiver.url + "/elsewhere"})]
    owner, profile, _ = await _setup(hapi, hooks, receiver.url + "/moved")
    await new_event(hapi, owner, profile)
    got = await receiver.wait_ok(1)
    assert [d.path for d in receiver.got] == ["/moved", "/moved"]
    assert got[0].path == "/moved"


async def test_a_rotated_secret_signs_beside_the_old_one_for_24_hours(
    hapi: Api, hooks: LiveServer, receiver: Receiver,
) -> None:
    owner, profile, endpoint = await _setup(hapi, hooks, receiver.url + "/rotating")
    old = endpoint["secret"]
    status, rotated, _ = await hapi.post(
        f"/v1/webhook-endpoints/{endpoint['id']}/rotate-secret", owner)
    assert status == 200, rotated
    new = rotated["secret"]
    assert new.startswith("whsec_") and new != old
    assert {k: v for k, v in rotated.items() if k != "secret"} | {"updated_at": None} == {
        k: v for k, v in endpoint.items() if k != "secret"} | {"updated_at": None}
    status, shown, _ = await hapi.get(f"/v1/webhook-endpoints/{endpoint['id']}", owner)
    assert status == 200 and "secret" not in shown

    await new_event(hapi, owner, profile, title="Both")
    [both] = await receiver.wait_ok(1)
    assert len(both.headers["webhook-signature"].split(" ")) == 2
    assert _verified(old, both) == _verified(new, both)
    row = await _endpoint_row(hooks, endpoint["id"])
    overlap = row["previous_secret_expires_at"] - row["updated_at"]
    assert timedelta(hours=23, minutes=59) < overlap <= timedelta(hours=24, seconds=1)

    # Once the 24 hours are over, only the new secret signs.
    async with hooks_conn(hooks) as conn:
        await conn.execute("UPDATE webhook_endpoints SET previous_secret_expires_at = now()"
                           " WHERE id = $1", endpoint["id"])
    await new_event(hapi, owner, profile, title="New only")
    got = await receiver.wait_ok(2)
    assert len(got[1].headers["webhook-signature"].split(" ")) == 1
    assert _verified(new, got[1])["data"]["title"] == "New only"
    with pytest.raises(WebhookVerificationError):
        Webhook(old).verify(got[1].body, got[1].headers)


@pytest.mark.slow
async def test_a_secret_sealed_under_another_key_sends_nothing_and_says_why(
    hapi: Api, hooks: LiveServer, receiver: Receiver,
) -> None:
    from domain.connected.vault import Vault

    owner, profile, endpoint = await _setup(hapi, hooks, receiver.url + "/other-key")
    async with hooks_conn(hooks) as conn:
        await conn.execute("UPDATE webhook_endpoints SET secret = $2 WHERE id = $1",
                           endpoint["id"], Vault("another key " * 4).seal(endpoint["secret"]))
    await new_event(hapi, owner, profile)
    disabled = await _wait_disabled(hapi, owner, endpoint["id"])
    assert "cannot be decrypted" in disabled["disabled_reason"]
    assert receiver.got == []


async def test_a_name_that_resolves_to_a_private_address_is_refused_at_delivery(
    api: Api, live_server: LiveServer, receiver: Receiver,
) -> None:
    """The shared service allows no http and no loopback: an https URL whose
    host name resolves to 127.0.0.1 is refused when resolved, before anything
    is sent."""
    owner = await asyncio.to_thread(live_server.create_user)
    profile = await new_profile(api, owner)
    port = receiver.url.rsplit(":", 1)[1]
    # `localhost` is refused when saved: a row saved before that rule
    # holds it, and delivery refuses it all the same.
    endpoint = await _endpoint(api, owner, profile, "https://hooks.invalid/private")
    async with hooks_conn(live_server) as conn:
        await conn.execute("UPDATE webhook_endpoints SET url = $2 WHERE id = $1",
                           endpoint["id"], f"https://localhost:{port}/private")
    await new_event(api, owner, profile)
    deadline = time.monotonic() + 20
    async with hooks_conn(live_server) as conn:
        while (error := await conn.fetchval(
                "SELECT last_error FROM webhook_deliveries WHERE endpoint_id = $1",
                endpoint["id"])) is None:
            assert time.monotonic() < deadline, "no attempt recorded"
            await asyncio.sleep(0.05)
    assert "public address" in error
    assert receiver.got == []


def _start_worker(dsn: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "DATABASE_URL": dsn, "KALENDS_JOB_HEARTBEAT_SECONDS": "1",
           "KALENDS_SECRET_KEY": SECRET_KEY, "KALENDS_WEBHOOK_ALLOW_HTTP": "on",
           "KALENDS_WEBHOOK_TIMEOUT_SECONDS": "1",
           "KALENDS_WEBHOOK_RETRY_SCHEDULE": ",".join(str(s) for s in SCHEDULE)}
    return subprocess.Popen([sys.executable, "-m", "kalends", "worker"], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


@pytest.fixture(scope="module")
def jobless(database_url: str) -> Iterator[tuple[str, LiveServer]]:
    """A database and a service that runs no jobs: the workers are processes."""
    with migrated_database(database_url, "kalends_hooks_kill") as dsn:
        live = LiveServer(dsn, run_jobs=False, settings=_settings())
        try:
            yield dsn, live
        finally:
            live.close()


async def test_a_run_that_outlived_its_lease_stops_and_leaves_the_next_one_alone(
    jobless: tuple[str, LiveServer], receiver: Receiver,
) -> None:
    """No worker runs here: the lanes are leased by hand, as runs in two processes
    would."""
    from db import webhooks as store

    _, live = jobless
    async with aiohttp.ClientSession() as session:
        api = Api(session, live.url)
        owner, profile, endpoint = await _setup(api, live, receiver.url + "/lease")
        event = await new_event(api, owner, profile)
    endpoint_id, lease = endpoint["id"], timedelta(seconds=30)

    def claim(token: str, most: int = 1, bound: int = 4) -> list[str]:
        found, lanes = live.call(store.claim(live.db, endpoint_id, token, lease,
                                             bound=bound, most=most))
        assert found is not None
        return lanes

    assert claim("first") == [event["id"]]
    assert claim("second") == []
    async with hooks_conn(live) as conn:
        await conn.execute("UPDATE webhook_lanes SET due_at = now() - interval '1 s'"
                           " WHERE endpoint_id = $1", endpoint_id)
        assert claim("second") == [event["id"]]
        head = live.call(store.head(live.db, endpoint_id, event["id"]))
        assert head is not None
        # The first run, back from a long stall, can neither go on nor let go.
        assert live.call(store.attempted(live.db, endpoint_id, event["id"], "first", lease,
                                         head["seq"], "HTTP 500", timedelta(0))) is None
        assert live.call(store.release(live.db, endpoint_id, event["id"], "first")) is False
        assert live.call(store.finish(live.db, endpoint_id, event["id"], "first",
                                      lease)) is None
        held = await conn.fetchrow("SELECT lease_token, due_at > now() AS live"
                                   " FROM webhook_lanes WHERE endpoint_id = $1", endpoint_id)
        assert (held["lease_token"], held["live"]) == ("second", True)
        assert live.call(store.attempted(live.db, endpoint_id, event["id"], "second", lease,
                                         head["seq"], None, None)) is not None
        # Delivered and nothing more: the lane goes, and no other is due.
        assert live.call(store.head(live.db, endpoint_id, event["id"])) is None
        assert live.call(store.finish(live.db, endpoint_id, event["id"], "second",
                                      lease)) is None
        assert await conn.fetchval("SELECT count(*) FROM webhook_lanes WHERE endpoint_id = $1",
                                   endpoint_id) == 0

    # An endpoint's bound holds across runs: six events due, four leased at most.
    async with aiohttp.ClientSession() as session:
        for i in range(6):
            await new_event(Api(session, live.url), owner, profile, title=f"Bound {i}")
    third = claim("third", most=10, bound=4)
    assert len(third) == 4
    assert claim("fourth", most=10, bound=4) == []
    # A sender done with a lane takes the next due one in its place: still four.
    for lane in third:
        head = live.call(store.head(live.db, endpoint_id, lane))
        assert head is not None
        assert live.call(store.attempted(live.db, endpoint_id, lane, "third", lease,
                                         head["seq"], None, None)) is not None
    nxt = live.call(store.finish(live.db, endpoint_id, third[0], "third", lease))
    assert nxt is not None and nxt["resource_id"] not in third
    assert claim("fourth", most=10, bound=4) == []
    async with hooks_conn(live) as conn:
        await conn.execute("DELETE FROM webhook_lanes WHERE endpoint_id = $1", endpoint_id)


@pytest.mark.slow
async def test_a_worker_killed_mid_delivery_loses_nothing(
    jobless: tuple[str, LiveServer], receiver: Receiver,
) -> None:
    """The only worker is a `kalends worker` process, killed while the receiver
    holds its request; the next worker sends that message again, then the rest of
    its event's, in order."""
    dsn, live = jobless
    receiver.script = [("hang", None)]
    first = second = None
    try:
        async with aiohttp.ClientSession() as session:
            api = Api(session, live.url)
            owner, profile, endpoint = await _setup(api, live, receiver.url + "/kill")
            event = await new_event(api, owner, profile, title="One")
            for title in ("Two", "Three"):
                status, _, _ = await api.patch(f"/v1/events/{event['id']}", owner,
                                               json={"title": title})
                assert status == 200
            first = _start_worker(dsn)
            await asyncio.wait_for(receiver.hanging.wait(), 30)
            first.send_signal(signal.SIGKILL)
            first.wait(timeout=10)
            assert receiver.ok() == []

            second = _start_worker(dsn)
            got = await receiver.wait_ok(3, seconds=60)
            titles = [_verified(endpoint["secret"], d)["data"]["title"] for d in got]
            assert titles == ["One", "Two", "Three"]
            assert got[0].headers["webhook-id"] == receiver.got[0].headers["webhook-id"]
            second.send_signal(signal.SIGTERM)
            assert second.wait(timeout=30) == 0
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()


@dataclass
class _Request:
    event_id: str
    title: str | None
    webhook_id: str
    start: float
    end: float = 0.0
    status: int = 0


@pytest.mark.slow
async def test_two_worker_processes_keep_each_events_messages_in_order_and_one_at_a_time(
    jobless: tuple[str, LiveServer],
) -> None:
    """Two `kalends worker` processes share the queue of one endpoint: several
    events, each changed several times, and one message in three refused at its
    first attempt. Each event's messages are accepted in the order of its changes,
    no two requests about one event overlap, and the endpoint never has more
    requests in flight than its bound."""
    from domain.notify.webhook_delivery import PER_ENDPOINT

    dsn, live = jobless
    requests: list[_Request] = []
    seen_ids: list[str] = []
    in_flight = [0, 0]  # now, most

    async def handle(request: web.Request) -> web.Response:
        data = (await request.json())["data"]
        webhook_id = request.headers["webhook-id"]
        entry = _Request(data.get("event_id", data["id"]), data.get("title"), webhook_id,
                         time.monotonic())
        requests.append(entry)
        in_flight[0] += 1
        in_flight[1] = max(in_flight)
        try:
            await asyncio.sleep(0.03)  # long enough for a second request to overlap
            first = webhook_id not in seen_ids
            if first:
                seen_ids.append(webhook_id)
            entry.status = 500 if first and len(seen_ids) % 3 == 0 else 200
            return web.Response(status=entry.status)
        finally:
            in_flight[0] -= 1
            entry.end = time.monotonic()

    app = web.Application()
    app.router.add_post("/two", handle)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}/two"
    workers: list[subprocess.Popen[bytes]] = []
    events, versions = 6, 4
    try:
        async with aiohttp.ClientSession() as session:
            api = Api(session, live.url)
            owner, profile, _ = await _setup(api, live, url, event_types=[
                "event.created", "event.updated"])
            workers = [_start_worker(dsn), _start_worker(dsn)]
            made = [await new_event(api, owner, profile, title=f"E{e} v0")
                    for e in range(events)]
            for v in range(1, versions):
                for e, event in enumerate(made):
                    status, _, _ = await api.patch(f"/v1/events/{event['id']}", owner,
                                                   json={"title": f"E{e} v{v}"})
                    assert status == 200
        await _wait_until(lambda: sum(r.status == 200 for r in requests) == events * versions,
                          seconds=60)
    finally:
        for proc in workers:
            proc.send_signal(signal.SIGTERM)
        for proc in workers:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        await runner.cleanup()

    assert any(r.status == 500 for r in requests)
    for e, event in enumerate(made):
        mine = [r for r in requests if r.event_id == event["id"]]
        for a, b in itertools.pairwise(mine):
            assert a.end <= b.start, f"two requests about {a.title} and {b.title} overlap"
        # No worker dies here, so no message is accepted twice either.
        accepted = [r.title for r in mine if r.status == 200]
        assert accepted == [f"E{e} v{v}" for v in range(versions)], accepted
    assert 2 <= in_flight[1] <= PER_ENDPOINT
