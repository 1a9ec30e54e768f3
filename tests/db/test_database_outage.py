"""When PostgreSQL goes away the service says so (503 service_unavailable, with
Retry-After) rather than 500, and recovers by itself when it returns."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import aiohttp
import asyncpg
import pytest
from conftest import Api, LiveServer, assert_error, new_event, new_profile
from graphql import ExecutionResult, GraphQLError
from processes import Service, create_user, json_lines, postmaster_pid, service_env, start

import registry
from core.errors import ApiError
from db import embedded
from db.database import Database, Tx
from db.migrate import migrate
from domain import jobs
from graph.context import Context
from graph.plan import Plan
from graph.schema import MASKED, is_unexpected, reported


@pytest.mark.slow
async def test_outage_is_503_and_the_service_recovers() -> None:
    data = Path(tempfile.mkdtemp(prefix="kalends-outage-"))
    dsn, server = await asyncio.to_thread(embedded.start, data)
    live = None
    try:
        await migrate(dsn)
        live = await asyncio.to_thread(LiveServer, dsn)
        user = await asyncio.to_thread(live.create_user)
        async with aiohttp.ClientSession() as http:

            async def get(path: str) -> tuple[int, Any, Any]:
                async with http.get(live.url + path, headers=user.headers) as resp:
                    return resp.status, await resp.json(), resp.headers

            assert (await get("/readyz"))[0] == 200
            await asyncio.to_thread(embedded.stop, server)

            for path in ("/readyz", "/v1/profiles", "/v1/organizations"):
                status, body, headers = await get(path)
                error = assert_error(status, body, 503, "service_unavailable")
                assert error["type"] == "service_unavailable"
                assert int(headers["Retry-After"]) >= 1
                assert "asyncpg" not in error["message"]
            assert (await get("/healthz"))[0] == 200  # the process itself is up
            # What needs no database answers, though its rate limit cannot be counted.
            async with http.get(live.url + "/openapi.json") as resp:
                assert resp.status == 200
            status, body, _ = await get("/v1/no-such-route")
            assert_error(status, body, 404, "route_not_found")

            dsn_again, server = await asyncio.to_thread(embedded.start, data)
            assert dsn_again == dsn
            assert (await get("/readyz"))[0] == 200
            assert (await get("/v1/profiles"))[0] == 200
    finally:
        if live is not None:
            await asyncio.to_thread(live.close)
        await asyncio.to_thread(embedded.stop, server)


# ---------------------------------------------------------------------------
# A transaction whose connection is lost: every form the loss takes is 503
# service_unavailable; what the work itself raised (a refusal, a bug) stays itself.


@pytest.fixture
async def db(database_url: str) -> AsyncIterator[Database]:
    database = await Database.connect(database_url, min_size=1, max_size=2)
    try:
        yield database
    finally:
        await database.close()


async def _end_backend(database_url: str, pid: int) -> None:
    """What a dying server does to a session: its backend goes."""
    conn = await asyncpg.connect(database_url)
    try:
        assert await conn.fetchval("SELECT pg_terminate_backend($1)", pid)
    finally:
        await conn.close()


async def _lose_connection(database_url: str, tx: Tx) -> None:
    """End the backend under `tx`, and wait until asyncpg has seen its connection close."""
    await _end_backend(database_url, await tx.fetchval("SELECT pg_backend_pid()"))
    deadline = time.monotonic() + 10
    while not _closed(tx):
        assert time.monotonic() < deadline, "the connection was not seen to close"
        await asyncio.sleep(0.01)


def _closed(tx: Tx) -> bool:
    try:
        return bool(tx.connection.is_closed())
    except asyncpg.exceptions.InterfaceError:  # the pool took it back as it closed
        return True


def _assert_unavailable(raised: pytest.ExceptionInfo[ApiError]) -> None:
    assert raised.value.code == "service_unavailable" and raised.value.status == 503


async def test_a_commit_on_a_lost_connection_is_503(db: Database, database_url: str) -> None:
    # asyncpg's Transaction.__aexit__ refuses a closed connection with an InterfaceError
    # ("the underlying connection is closed"), which was a 500.
    with pytest.raises(ApiError) as raised:
        async with db.transaction() as tx:
            await _lose_connection(database_url, tx)
    _assert_unavailable(raised)


@pytest.mark.parametrize("statement", ["query", "job"])
async def test_a_statement_on_a_lost_connection_is_503(
    db: Database, database_url: str, statement: str
) -> None:
    # The pool takes a connection back as it closes: the statement's InterfaceError
    # says "released back to the pool", under the rollback's "connection is closed".
    with pytest.raises(ApiError) as raised:
        async with db.transaction() as tx:
            await _lose_connection(database_url, tx)
            if statement == "job":  # the job queue (pgqueuer) in the same transaction
                await jobs.enqueue(tx, "outage-test", {})
            else:
                await tx.execute("SELECT 1")
    _assert_unavailable(raised)


async def test_a_statement_in_flight_when_the_backend_goes_is_503(
    db: Database, database_url: str
) -> None:
    # ConnectionDoesNotExistError in the work, under the rollback's InterfaceError.
    with pytest.raises(ApiError) as raised:
        async with db.transaction() as tx:
            pid = await tx.fetchval("SELECT pg_backend_pid()")
            sleeping = asyncio.create_task(tx.execute("SELECT pg_sleep(30)"))
            await asyncio.sleep(0.2)
            await _end_backend(database_url, pid)
            await sleeping
    _assert_unavailable(raised)
    assert isinstance(raised.value.__cause__, asyncpg.exceptions.ConnectionDoesNotExistError)


async def test_a_refusal_or_a_bug_is_not_hidden_by_the_lost_connection(
    db: Database, database_url: str
) -> None:
    # Nothing was to be written: the refusal is the answer (409, not 503 or 500) ...
    with pytest.raises(ApiError) as refused:
        async with db.transaction() as tx:
            await _lose_connection(database_url, tx)
            raise ApiError("capacity_reached", "The event is full.")
    assert refused.value.code == "capacity_reached"
    # ... and a bug is logged as itself (a 500), not as asyncpg's complaint.
    with pytest.raises(ZeroDivisionError):
        async with db.transaction() as tx:
            await _lose_connection(database_url, tx)
            _ = 1 / 0
    # Both transactions rolled back with their sessions; the pool serves again.
    assert await db.fetchval("SELECT 1") == 1


async def test_interface_errors_that_are_bugs_stay_500s(db: Database) -> None:
    # An argument of the wrong type (DataError is an InterfaceError), even one that
    # reads like a lost connection.
    with pytest.raises(asyncpg.exceptions.DataError):
        await db.fetchval("SELECT $1::int", "connection is closed")
    with pytest.raises(asyncpg.exceptions.DataError):
        async with db.transaction() as tx:
            await tx.fetchval("SELECT $1::int", "connection is closed")
    # A nested transaction at another isolation level.
    with pytest.raises(asyncpg.exceptions.InterfaceError, match="isolation level"):
        async with db.transaction() as tx, tx.connection.transaction(isolation="serializable"):
            pass
    assert await db.fetchval("SELECT 1") == 1


@pytest.mark.parametrize("seen", [True, False], ids=["seen-closed", "not-yet-seen"])
async def test_every_statement_of_a_tx_on_a_lost_connection_is_503(
    db: Database, database_url: str, seen: bool
) -> None:
    # The statement itself answers 503, not only the transaction as it ends: code that
    # catches what a statement raised (a webhook payload's GraphQL run) sees an ApiError.
    raised: list[Exception] = []
    with pytest.raises(ApiError) as left:
        async with db.transaction() as tx:
            if seen:  # the pool has taken the connection back: "released back to the pool"
                await _lose_connection(database_url, tx)
            else:  # asyncpg learns of it during the statement
                await _end_backend(database_url, tx.connection.get_server_pid())
            for run in (tx.fetch, tx.fetchrow, tx.fetchval, tx.execute):
                try:
                    await run("SELECT 1")
                except Exception as exc:  # kept, not raised: the rollback would map it
                    raised.append(exc)
    assert len(raised) == 4, raised
    for error in raised:
        assert isinstance(error, ApiError), repr(error)
        assert error.code == "service_unavailable" and error.status == 503
    _assert_unavailable(left)
    assert await db.fetchval("SELECT 1") == 1


async def test_a_tx_kept_after_its_transaction_is_a_bug(db: Database) -> None:
    # "released back to the pool" is a lost connection only while the transaction
    # is open; afterwards it is a Tx kept too long: a 500, as before.
    async with db.transaction() as tx:
        pass
    with pytest.raises(asyncpg.exceptions.InterfaceError, match="released back to the pool"):
        await tx.fetchval("SELECT 1")


async def test_a_lost_connection_in_a_resolver_is_unavailable() -> None:
    # However a resolver meets the loss (a raw connection, the job queue's), GraphQL
    # and the registry answer service_unavailable, not a masked bug or internal_error.
    @dataclass
    class Failing:
        raw: Exception

        async def execute(self, context: Any, variables: Any) -> ExecutionResult:
            return ExecutionResult(None, [GraphQLError("failed", path=["x"],
                                                       original_error=self.raw)])

    context = SimpleNamespace(request_id="test")
    for raw in (asyncpg.exceptions.ConnectionDoesNotExistError("closed in the middle"),
                asyncpg.exceptions.InterfaceError("connection is closed"),
                asyncpg.exceptions.AdminShutdownError("terminating connection"),
                ConnectionResetError()):
        failing = Failing(raw)
        errors = (await failing.execute(context, {})).errors
        assert errors is not None
        [shown] = reported(errors, context)
        assert not is_unexpected(shown), raw
        assert shown.extensions == {"type": "service_unavailable",
                                    "code": "service_unavailable"}, raw
        with pytest.raises(ApiError) as raised:
            await registry.execute(cast(Plan, failing), "x", {}, cast(Context, context))
        _assert_unavailable(raised)
        assert raised.value.__cause__ is raw
    # Anything else is still a bug: masked, and internal_error.
    failing = Failing(ZeroDivisionError())
    errors = (await failing.execute(context, {})).errors
    assert errors is not None
    [shown] = reported(errors, context)
    assert shown.message == MASKED and not shown.extensions
    with pytest.raises(ApiError) as raised:
        await registry.execute(cast(Plan, failing), "x", {}, cast(Context, context))
    assert raised.value.code == "internal_error"


@pytest.mark.parametrize("seen", [True, False], ids=["seen-closed", "not-yet-seen"])
@pytest.mark.parametrize("transport", ["rest", "graphql"])
async def test_a_connection_lost_while_rendering_a_webhook_payload_is_503(
    api: Api, live_server: LiveServer, make_user: Any, db: Database,
    monkeypatch: pytest.MonkeyPatch, seen: bool, transport: str,
) -> None:
    """An RSVP to an event whose profile has a webhook endpoint renders the message's
    `data` inside the RSVP's transaction, by a registry read on the transaction's own
    connection. Its backend is ended as that render starts: the answer is 503
    service_unavailable with Retry-After, and neither the RSVP nor its message is kept."""
    owner, fan = await make_user(), await make_user()
    profile = await new_profile(api, owner)
    status, endpoint, _ = await api.post(
        f"/v1/profiles/{profile['id']}/webhook-endpoints", owner,
        json={"url": "https://hooks.invalid/kalends", "event_types": ["rsvp.created"]})
    assert status == 201, endpoint
    event = await new_event(api, owner, profile)

    run = registry.execute
    ended: list[int] = []

    async def execute(plan: Any, name: str, variables: dict[str, Any], context: Any
                      ) -> dict[str, Any]:
        # On the live server's loop, inside the RSVP's transaction.
        if name == "webhookRsvp" and variables.get("event_id") == event["id"] and not ended:
            tx = context.services.db
            assert isinstance(tx, Tx)
            ended.append(tx.connection.get_server_pid())
            if seen:
                await _lose_connection(live_server.db.dsn or "", tx)
            else:
                await _end_backend(live_server.db.dsn or "", ended[0])
        return await run(plan, name, variables, context)

    monkeypatch.setattr(registry, "execute", execute)
    if transport == "rest":
        status, body, headers = await api.post(f"/v1/events/{event['id']}/rsvps", fan,
                                               json={"status": "going"})
        error = assert_error(status, body, 503, "service_unavailable")
        assert error["type"] == "service_unavailable"
        assert int(headers["Retry-After"]) >= 1
    else:
        status, body, _ = await api.post("/graphql", fan, json={
            "query": "mutation($id: ID!) { create_event_rsvp(event_id: $id, "
                     "input: {status: \"going\"}) { created } }",
            "variables": {"id": event["id"]}})
        assert status == 200, body
        [error] = body["errors"]
        assert error["extensions"] == {"type": "service_unavailable",
                                       "code": "service_unavailable"}, body
    assert ended, "the payload was not rendered"
    assert await db.fetchval("SELECT count(*) FROM rsvps WHERE event_id = $1",
                             event["id"]) == 0
    assert await db.fetchval("SELECT count(*) FROM webhook_messages WHERE profile_id = $1",
                             profile["id"]) == 0
    # The service goes on: the same RSVP is taken once the connection is replaced.
    monkeypatch.undo()
    status, body, _ = await api.post(f"/v1/events/{event['id']}/rsvps", fan,
                                     json={"status": "going"})
    assert status == 201, body
    assert await db.fetchval("SELECT count(*) FROM webhook_messages WHERE profile_id = $1",
                             profile["id"]) == 1


# ---------------------------------------------------------------------------
# The postmaster SIGKILLed under concurrent writers, as operators run the service.

WRITERS = {"profile": 8, "event": 6, "rsvp": 6, "mcp_profile": 2, "mcp_rsvp": 2}  # 24
KILLS = 3
_MCP_VERSION = "2026-07-28"


@dataclass
class Answer:
    at: float
    kind: str
    status: int
    retry_after: str | None
    code: str | None
    """The error code (the envelope's; an MCP tool's `isError` result's), else None."""


@dataclass
class Writers:
    """Writes in loops, each kind through its own route, until stopped."""

    http: aiohttp.ClientSession
    base: str
    key: str
    profile_id: str
    event_ids: list[str]
    answers: list[Answer] = field(default_factory=list)
    stopping: asyncio.Event = field(default_factory=asyncio.Event)

    def request(self, kind: str) -> tuple[str, dict[str, Any], dict[str, str]]:
        headers = {"Authorization": f"Bearer {self.key}"}
        event_id = secrets.choice(self.event_ids)  # few events: writers queue on their lock
        rsvp = {"status": "going", "attendee_email": f"a-{secrets.token_hex(5)}@example.com"}
        profile = {"platform_id": "w-" + secrets.token_hex(6), "display_name": "Written"}
        if kind == "profile":
            return "/v1/profiles", profile, headers
        if kind == "event":
            return (f"/v1/profiles/{self.profile_id}/events",
                    {"title": "Written", "start_time": "2031-05-06T10:00",
                     "start_timezone": "Europe/Paris"}, headers)
        if kind == "rsvp":
            return f"/v1/events/{event_id}/rsvps", rsvp, headers
        tool, arguments = (("createProfile", profile) if kind == "mcp_profile"
                           else ("createEventRsvp", {"event_id": event_id, **rsvp}))
        headers.update({"MCP-Protocol-Version": _MCP_VERSION, "Mcp-Method": "tools/call",
                        "Mcp-Name": tool, "X-MCP-Toolsets": "all"})
        meta = {"io.modelcontextprotocol/protocolVersion": _MCP_VERSION,
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": "outage", "version": "1"}}
        return "/mcp-developer", {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": tool, "arguments": arguments, "_meta": meta}}, headers

    async def write(self, kind: str) -> None:
        while not self.stopping.is_set():
            path, body, headers = self.request(kind)
            try:
                async with self.http.post(self.base + path, json=body, headers=headers) as resp:
                    status, raw = resp.status, await resp.read()
                    retry_after = resp.headers.get("Retry-After")
            except (aiohttp.ClientError, TimeoutError) as exc:
                status, raw, retry_after = 0, repr(exc).encode(), None
            self.answers.append(Answer(time.monotonic(), kind, status, retry_after,
                                       code := _error_code(status, raw)))
            if code is not None:
                await asyncio.sleep(0.1)  # less than Retry-After: to see writes resume

    def written_since(self, since: float) -> int:
        return sum(a.at > since and a.code is None and a.status in (200, 201)
                   for a in self.answers)


def _error_code(status: int, raw: bytes) -> str | None:
    if status == 0:
        return "no answer"
    try:
        answer = json.loads(raw)
    except ValueError:
        return "not json"
    if "jsonrpc" in answer:
        if "error" in answer:  # refused before the tool ran: the envelope's error is its data
            return str(answer["error"].get("data", {}).get("code", "rpc"))
        if answer["result"].get("isError"):  # the envelope, as the one text block
            return str(json.loads(answer["result"]["content"][0]["text"])["error"]["code"])
        return None
    return str(answer["error"]["code"]) if "error" in answer else None


async def _until(condition: Callable[[], bool], deadline: float, what: str) -> None:
    while not condition():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.02)


async def _kill_and_recover(pgdata: Path, writers: Writers, deadline: float, what: str
                            ) -> tuple[float, float]:
    """Once writes flow, SIGKILL the postmaster; wait for the service to start PostgreSQL
    again and for writes to resume. When it killed, and when a write next succeeded."""
    since = time.monotonic()
    await _until(lambda: writers.written_since(since) >= 40, deadline, f"{what}: no writes")
    postmaster = postmaster_pid(pgdata)
    assert postmaster is not None
    killed_at = time.monotonic()
    os.kill(postmaster, signal.SIGKILL)
    await _until(lambda: postmaster_pid(pgdata) not in (None, postmaster), deadline,
                 f"{what}: PostgreSQL was not started again")
    restarted_at = time.monotonic()
    await _until(lambda: writers.written_since(restarted_at) >= 24, deadline,
                 f"{what}: writes did not resume")
    return killed_at, min(a.at for a in writers.answers if a.at > restarted_at and a.code is None)


@pytest.mark.slow
async def test_postmaster_killed_under_writers_answers_only_503(
    data_dir: Path, tmp_path: Path, services: list[Service]
) -> None:
    """24 writers (REST creates and RSVPs, MCP tool calls) while the postmaster is
    SIGKILLed three times and the service starts it again: a write either succeeds
    or is refused 503 service_unavailable with Retry-After; never a 500 or an MCP
    internal_error. Writes resume after each restart."""
    test_deadline = time.monotonic() + 85
    # A rate limit out of the way, counted in the database as by default.
    env = service_env(data_dir, KALENDS_RATE_LIMIT="1000000/60")
    service = await asyncio.to_thread(start, services, data_dir, tmp_path, env=env)
    key = await asyncio.to_thread(create_user, data_dir, env)
    base = f"http://127.0.0.1:{service.port}"
    headers = {"Authorization": f"Bearer {key}"}
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector,
                                     timeout=aiohttp.ClientTimeout(total=15)) as http:
        async with http.post(base + "/v1/profiles", headers=headers, json={
                "platform_id": "host-" + secrets.token_hex(4), "display_name": "Host"}) as resp:
            assert resp.status == 201, await resp.text()
            profile_id = (await resp.json())["id"]
        event_ids = []
        for _ in range(3):
            async with http.post(f"{base}/v1/profiles/{profile_id}/events", headers=headers,
                                 json={"title": "Busy", "start_time": "2031-05-06T10:00",
                                       "start_timezone": "Europe/Paris"}) as resp:
                assert resp.status == 201, await resp.text()
                event_ids.append((await resp.json())["id"])

        writers = Writers(http, base, key, profile_id, event_ids)
        tasks = [asyncio.create_task(writers.write(kind))
                 for kind, count in WRITERS.items() for _ in range(count)]
        kills: list[tuple[float, float]] = []  # (killed at, writing again at)
        try:
            for round_ in range(KILLS):
                kills.append(await _kill_and_recover(service.pgdata, writers, test_deadline,
                                                     f"round {round_}"))
        finally:
            writers.stopping.set()
            await asyncio.gather(*tasks)

    answers = writers.answers
    tally = Counter((a.status, a.code) for a in answers)
    print(f"\n{len(answers)} writes under {KILLS} kills of the postmaster: "
          + ", ".join(f"{status} {code or 'ok'}: {n}" for (status, code), n in tally.most_common())
          + "; writing again after " + ", ".join(f"{r - k:.1f} s" for k, r in kills))
    failed = [a for a in answers if a.code is not None]
    assert failed, "no write saw the outage"
    unexpected = Counter((a.kind, a.status, a.code) for a in failed
                         if a.code != "service_unavailable")
    errors = [f"{e['msg']}: {str(e.get('exc', '')).splitlines()[-1:]}"
              for e in json_lines(service.stderr) if e.get("level") == "error"]
    assert not unexpected, f"{unexpected}; logged: {Counter(errors).most_common(5)}"
    # REST and MCP refused at the HTTP level: 503 with Retry-After; an MCP tool's own
    # refusal is its isError result (HTTP 200), the same envelope.
    for a in failed:
        if a.status == 200:
            assert a.kind.startswith("mcp"), a
        else:
            assert a.status == 503 and a.retry_after is not None, a
            assert int(a.retry_after) >= 1, a
    assert service.stop() == 0, service.stderr[-4000:]
