"""Reads from a real streaming replica (docs/scaling.md, "Read replicas"): made by
tests/replica.py with the embedded package's own `pg_basebackup`, attached through
KALENDS_READ_DATABASE_URL.

What a user relies on: reads that only read go to the replica and writes never do; after
their write is answered none of their reads shows an older state, whatever key or
process they use, even through a replica held seconds behind; a replica that stops
costs no request, and is used again once it is back. What an operator sees: one clear log
line per change of a replica's state, and /metrics that never shows a replica in use, or
a lag, that it no longer has.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import asyncpg
import pytest
from conftest import (
    Api,
    LiveServer,
    User,
    data_root,
    migrated_database,
    new_event,
    new_profile,
)
from processes import Service, service_env
from replica import Replica, parse_lsn, replica_of
from test_mcp import _modern, _post
from test_metrics import samples_of, value

from db import embedded, replicas
from db.database import Database
from db.migrate import migrate
from domain import accounts, config

# slow: a streaming replica (pg_basebackup) and serve processes (the fast loop, pytest -m 'not slow', leaves it out)
pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::ResourceWarning")]

DEADLINE = 20.0


@pytest.fixture(scope="module")
def replica(database_url: str) -> Iterator[Replica]:
    with tempfile.TemporaryDirectory(prefix="kalends-replica-", dir=data_root()) as workdir, \
            replica_of(database_url, Path(workdir)) as made:
        yield made


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as made:
        yield made


@pytest.fixture
def dsn(database_url: str) -> Iterator[str]:
    """A fresh database of the session's server (replicated like every other)."""
    with migrated_database(database_url, prefix="kalends_replica") as made:
        yield made


@contextmanager
def servers(dsn: str, replica: Replica, count: int = 1, **settings: Any
            ) -> Iterator[list[LiveServer]]:
    """`count` live servers on the database `dsn`, each reading from `replica`."""
    name = urlsplit(dsn).path.lstrip("/")
    chosen = dataclasses.replace(config.load({}), rate_limit=None,
                                 read_database_urls=(replica.dsn_for(name),), **settings)
    with ExitStack() as stack:
        made = []
        for _ in range(count):
            server = LiveServer(dsn, settings=chosen)
            stack.callback(server.close)
            made.append(server)
        yield made


def _reads(samples: Any, target: str) -> float:
    return value(samples, "kalends_db_reads_total", target=target)


def _replica1(samples: Any, name: str) -> float | None:
    """`kalends_db_replica_<name>{replica="replica1"}`, None when absent."""
    return samples.get((f"kalends_db_replica_{name}", frozenset({("replica", "replica1")})))


async def _replica_state(server: LiveServer | str, **wanted: float | None) -> Any:
    """Until replica1's samples are `wanted` (`in_use=1`; `lag_seconds=None`: absent); the
    samples."""
    deadline = time.monotonic() + DEADLINE
    while True:
        samples = await samples_of(server)
        seen = {name: _replica1(samples, name) for name in wanted}
        if seen == wanted:
            return samples
        assert time.monotonic() < deadline, f"replica1 stays {seen}, not {wanted}"
        await asyncio.sleep(0.05)


async def _replica_used(server: LiveServer | str) -> None:
    """Until the server's check has found the (new or restarted) replica usable."""
    await _replica_state(server, in_use=1)


async def _caught_up(replica: Replica, database_url: str, server: LiveServer | str) -> None:
    """Until the replica has replayed all the primary has written, and `server` reads
    from it."""
    await asyncio.to_thread(replica.wait_caught_up, database_url)
    await _replica_used(server)


async def _event_to_read(api: Api, server: LiveServer) -> tuple[User, User, dict[str, Any]]:
    """An owner's new event, and another user to read it: (owner, reader, event)."""
    owner, reader = server.create_user(), server.create_user()
    profile = await new_profile(api, owner)
    return owner, reader, await new_event(api, owner, profile)


def _replica_log(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "kalends.replicas" and "replica1" in r.getMessage()]


async def _replica_commits(replica: Replica, database: str) -> int:
    conn = await asyncpg.connect(replica.dsn_for(database))
    try:
        return int(await conn.fetchval(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"))
    finally:
        await conn.close()


async def test_reads_go_to_the_replica_and_writes_never(
        database_url: str, dsn: str, replica: Replica, session: aiohttp.ClientSession
) -> None:
    with servers(dsn, replica) as [server]:
        api = Api(session, server.url)
        owner, reader = server.create_user(), server.create_user()
        await _replica_used(server)
        # Writes: each would fail on the replica (read-only), so each 2xx was the primary's.
        profile = await new_profile(api, owner)
        event = await new_event(api, owner, profile)
        status, body, _ = await api.patch(f"/v1/events/{event['id']}", owner,
                                          json={"title": "Renamed"})
        assert status == 200, body
        await asyncio.to_thread(replica.wait_caught_up, database_url)
        name = urlsplit(dsn).path.lstrip("/")
        before_samples = await samples_of(server)
        before_commits = await _replica_commits(replica, name)
        # Reads of someone who has written nothing: the replica's.
        for _ in range(20):
            status, body, _ = await api.get(f"/v1/events/{event['id']}", reader)
            assert status == 200 and body["title"] == "Renamed", body
            status, page, _ = await api.get(f"/v1/profiles/{profile['id']}/events", reader)
            assert status == 200 and [e["id"] for e in page["data"]] == [event["id"]]
        after = await samples_of(server)
        assert _reads(after, "replica1") - _reads(before_samples, "replica1") == 40
        assert _reads(after, "primary") == _reads(before_samples, "primary")
        # Counted on the replica itself (its statistics reach pg_stat_database within
        # a second or so of each transaction).
        deadline = time.monotonic() + DEADLINE
        while await _replica_commits(replica, name) < before_commits + 40:
            assert time.monotonic() < deadline, "the replica did not serve the reads"
            await asyncio.sleep(0.1)


@contextmanager
def serve_processes(dsn: str, replica: Replica, workdir: Path, count: int
                    ) -> Iterator[list[str]]:
    """`count` `kalends serve` processes on the database `dsn`, each reading from
    `replica` (KALENDS_READ_DATABASE_URL, as an operator sets it): their URLs."""
    name = urlsplit(dsn).path.lstrip("/")
    env = service_env(workdir / "data", DATABASE_URL=dsn, KALENDS_JOBS="off",
                      KALENDS_READ_DATABASE_URL=replica.dsn_for(name))
    made = [Service(workdir / "data", workdir / "logs", env=env) for _ in range(count)]
    try:
        for service in made:
            service.wait_ready()
        yield [f"http://127.0.0.1:{service.port}" for service in made]
        for service in made:
            assert service.stop() == 0, service.stderr[-4000:]
    finally:
        for service in made:
            service.cleanup()


async def test_a_user_reads_their_writes_through_a_replica_held_behind(
        database_url: str, dsn: str, replica: Replica, session: aiohttp.ClientSession,
        tmp_path: Path
) -> None:
    db = await Database.connect(dsn, min_size=1, max_size=2)
    try:
        made = await accounts.create_user(db, "writer@example.com", None, None)
        # The same user's second key, used on the second process.
        second_key = (await accounts.create_key(db, made["email"]))["api_key"]
        stranger_key = (await accounts.create_user(db, "reader@example.com", None, None)
                        )["api_key"]
    finally:
        await db.close()
    owner = User(made["email"], made["api_key"], made["organization_id"], made["calendar_id"],
                 made["consumer"])
    same = dataclasses.replace(owner, api_key=second_key)
    stranger = dataclasses.replace(owner, email="reader@example.com", api_key=stranger_key)
    with serve_processes(dsn, replica, tmp_path, count=2) as [first, second]:
        one, other = Api(session, first), Api(session, second)
        profile = await new_profile(one, owner)
        event = await new_event(one, owner, profile)
        await _caught_up(replica, database_url, second)
        await asyncio.to_thread(replica.set_apply_delay, 1500)
        try:
            stale = 0
            before = await samples_of(second)
            for n in range(8):
                title = f"Version {n}"
                status, body, _ = await one.patch(f"/v1/events/{event['id']}", owner,
                                                  json={"title": title})
                assert status == 200, body
                # The writer, by its other key on the other process: never older.
                status, body, _ = await other.get(f"/v1/events/{event['id']}", same)
                assert status == 200 and body["title"] == title, (n, body)
                status, page, _ = await other.get(f"/v1/profiles/{profile['id']}/events", same)
                assert page["data"][0]["title"] == title, (n, page)
                # Someone else may be shown the replica's older state: the replica is
                # really behind, so the writer's answers above were no accident.
                status, seen, _ = await other.get(f"/v1/events/{event['id']}", stranger)
                assert status == 200
                stale += seen["title"] != title
            assert stale > 0
            after = await samples_of(second)
            assert _reads(after, "replica1") > _reads(before, "replica1")
        finally:
            await asyncio.to_thread(replica.set_apply_delay, 0)


async def test_a_replica_that_stops_costs_no_request(
        database_url: str, dsn: str, replica: Replica, session: aiohttp.ClientSession,
        caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="kalends.replicas")
    with servers(dsn, replica) as [server]:
        api = Api(session, server.url)
        _, reader, event = await _event_to_read(api, server)
        await _caught_up(replica, database_url, server)
        assert _replica_log(caplog) == ["read replica replica1 usable"]
        caplog.clear()

        answers: list[int] = []
        stop = asyncio.Event()

        async def read() -> None:
            while not stop.is_set():
                status, _, _ = await api.get(f"/v1/events/{event['id']}", reader)
                answers.append(status)

        readers = [asyncio.create_task(read()) for _ in range(4)]
        try:
            await asyncio.sleep(0.3)
            await asyncio.to_thread(replica.stop)
            await asyncio.sleep(1.0)
            # Nothing fails, and the service stays ready.
            status, _, _ = await api.get("/readyz", None)
            assert status == 200
            # Down, not in use, and no lag left over from before it stopped.
            await _replica_state(server, up=0, in_use=0, lag_seconds=None)
            # Said once, in one line that says what happened (not asyncpg's "cannot
            # switch to state ..." of a connection the server dropped).
            [said] = _replica_log(caplog)
            assert said.startswith("read replica replica1 down (") and "\n" not in said, said
            assert said.endswith("; reading the primary until it is back"), said
            assert "switch to state" not in said and "another operation" not in said, said
            caplog.clear()
        finally:
            stop.set()
            await asyncio.gather(*readers)
            await asyncio.to_thread(replica.start)
        assert answers and set(answers) == {200}, answers
        # Back: used again once a check finds it well, and said once.
        await _caught_up(replica, database_url, server)
        assert _replica_log(caplog) == ["read replica replica1 usable"]
        before = await samples_of(server)
        status, _, _ = await api.get(f"/v1/events/{event['id']}", reader)
        assert status == 200
        assert _reads(await samples_of(server), "replica1") == _reads(before, "replica1") + 1


async def test_a_replica_too_far_behind_is_not_used_and_says_so(
        database_url: str, dsn: str, replica: Replica, session: aiohttp.ClientSession,
        caplog: pytest.LogCaptureFixture
) -> None:
    """Past KALENDS_READ_MAX_LAG_SECONDS a replica is up but not read: /metrics says so
    (`in_use` 0, its lag shown), and the log says it once, and once when it catches up."""
    caplog.set_level(logging.INFO, logger="kalends.replicas")
    with servers(dsn, replica, read_max_lag=0.3) as [server]:
        api = Api(session, server.url)
        owner, reader, event = await _event_to_read(api, server)
        await _caught_up(replica, database_url, server)
        caplog.clear()
        await asyncio.to_thread(replica.set_apply_delay, 30_000)
        try:
            status, body, _ = await api.patch(f"/v1/events/{event['id']}", owner,
                                              json={"title": "Later"})
            assert status == 200, body
            samples = await _replica_state(server, up=1, in_use=0)
            lag = _replica1(samples, "lag_seconds")
            assert lag is not None and lag > 0.3, lag
            # Reads go to the primary meanwhile.
            status, _, _ = await api.get(f"/v1/events/{event['id']}", reader)
            assert status == 200
            after = await samples_of(server)
            assert _reads(after, "primary") == _reads(samples, "primary") + 1
            assert _reads(after, "replica1") == _reads(samples, "replica1")
            await asyncio.sleep(0.3)  # a dozen checks more, each finding it behind
            [said] = _replica_log(caplog)
            assert said.startswith("read replica replica1 is ") and "s behind the primary" \
                in said and "KALENDS_READ_MAX_LAG_SECONDS" in said, said
            caplog.clear()
        finally:
            await asyncio.to_thread(replica.set_apply_delay, 0)
        await _replica_state(server, up=1, in_use=1)
        [said] = _replica_log(caplog)
        assert said.startswith("read replica replica1 caught up ("), said


def test_a_failed_check_is_said_in_a_few_words() -> None:
    """What the down line says (db/replicas.py `_why`), whatever asyncpg raised."""
    said = {
        replicas._why(asyncpg.InternalClientError(
            "cannot switch to state 12; another operation (None) is in progress")),
        replicas._why(asyncpg.ConnectionDoesNotExistError(
            "connection was closed in the middle of operation")),
        replicas._why(ConnectionResetError(104, "Connection reset by peer")),
    }
    assert said == {"connection lost"}
    assert replicas._why(ConnectionRefusedError(111, "Connection refused")) == "connection refused"
    assert replicas._why(TimeoutError()) == "no answer within 2 s"
    assert replicas._why(asyncpg.CannotConnectNowError(
        "the database system is shutting down")) == "the database system is shutting down"
    assert replicas._why(OSError(113, "No route to host")) == "cannot connect: No route to host"


async def test_a_replica_of_another_primary_is_never_read(
        replica: Replica, session: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    """A wrong URL (a replica of some other cluster, whose databases may even bear the
    same names) is refused by its system identifier: reads stay on the primary and show
    its rows, where the other cluster's would answer 500 or another service's data."""
    data = Path(tempfile.mkdtemp(prefix="kalends-other-primary-", dir=data_root()))
    other, server = await asyncio.to_thread(embedded.start, data)
    try:
        await migrate(other)
        with servers(other, replica) as [live]:
            api = Api(session, live.url)
            owner = live.create_user()
            profile = await new_profile(api, owner)
            before = await samples_of(live)
            # Checked a few times over (every 25 ms): never found usable.
            for _ in range(5):
                await asyncio.sleep(0.05)
                status, page, _ = await api.get("/v1/profiles", owner)
                assert status == 200, page
                assert [p["id"] for p in page["data"]] == [profile["id"]]
            after = await samples_of(live)
            assert _reads(after, "primary") - _reads(before, "primary") == 5
            assert _reads(after, "replica1") == _reads(before, "replica1")
        refusals = [r for r in caplog.records if "not a replica of this primary" in r.message]
        assert len(refusals) == 1, [r.message for r in caplog.records]
    finally:
        await asyncio.to_thread(embedded.stop, server)


async def test_only_a_write_that_may_have_changed_something_is_recorded(
        dsn: str, replica: Replica, session: aiohttp.ClientSession
) -> None:
    """A refused write (4xx: bad input changes nothing) costs the primary no record; an
    answered one records where its user's writes end."""
    with servers(dsn, replica) as [server]:
        api = Api(session, server.url)
        owner = server.create_user()
        profile = await new_profile(api, owner)
        event = await new_event(api, owner, profile)

        async def recorded() -> str | None:
            conn = await asyncpg.connect(dsn)
            try:
                return await conn.fetchval(  # type: ignore[no-any-return]
                    "SELECT w.lsn::text FROM write_positions w JOIN users u ON u.id = w.user_id"
                    " WHERE u.email = $1", owner.email)
            finally:
                await conn.close()

        before = await recorded()
        assert before is not None  # the profile and event were written
        for body in ({"title": ""}, {"no_such_field": 1}, {"start_timezone": "Mars/Base"}):
            status, answer, _ = await api.patch(f"/v1/events/{event['id']}", owner, json=body)
            assert 400 <= status < 500, answer
            assert await recorded() == before
        # A write tool called with arguments that are no object: answered 400, not raised.
        call = _modern("tools/call", {"name": "updateEvent", "arguments": []})
        status, answer, _ = await _post(api, owner, call["body"], call["headers"])
        assert status == 400, answer
        assert await recorded() == before
        status, answer, _ = await api.patch(f"/v1/events/{event['id']}", owner,
                                            json={"title": "Renamed"})
        assert status == 200, answer
        after = await recorded()
        assert after is not None and parse_lsn(after) > parse_lsn(before)
