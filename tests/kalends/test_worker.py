"""`kalends worker`: background jobs in a process of their own, surviving a kill.

These tests get a database of their own and a service that runs no jobs
itself (`create_app(..., run_jobs=False)`), so the only worker is the
`kalends worker` process under test.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import pytest
from conftest import Api, LiveServer, handle, new_event, new_profile, own_server

from db import sync as sync_store
from db.database import Tx

# slow: kalends worker processes, one killed (the fast loop, pytest -m 'not slow', leaves it out)
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def jobless_server(database_url: str) -> Iterator[LiveServer]:
    with own_server(database_url, "kalends_worker", run_jobs=False) as server:
        yield server


@pytest.fixture
def jobless_dsn(jobless_server: LiveServer) -> str:
    """The database of `jobless_server`, which no other worker takes jobs from."""
    assert jobless_server.db.dsn is not None
    return jobless_server.db.dsn


@pytest.fixture
async def japi(jobless_server: LiveServer) -> AsyncIterator[Api]:
    async with aiohttp.ClientSession() as session:
        yield Api(session, jobless_server.url)


def start_worker(dsn: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "DATABASE_URL": dsn, "KALENDS_JOB_HEARTBEAT_SECONDS": "2"}
    return subprocess.Popen([sys.executable, "-m", "kalends", "worker"], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


async def job_states(conn: asyncpg.Connection) -> list[str]:
    rows = await conn.fetch("SELECT status::text FROM pgqueuer WHERE entrypoint = 'sync'")
    return sorted(r[0] for r in rows)


async def wait_for(conn: asyncpg.Connection, query: str, expected: Any, *args: Any,
                   seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while (value := await conn.fetchval(query, *args)) != expected:
        if time.monotonic() > deadline:
            pytest.fail(f"{query!r} is {value!r}, not {expected!r}, after {seconds} s")
        await asyncio.sleep(0.05)


async def test_a_job_killed_midway_is_finished_by_the_next_worker_without_duplicates(
    japi: Api, jobless_server: LiveServer, jobless_dsn: str
) -> None:
    owner = await asyncio.to_thread(jobless_server.create_user)
    fan = await asyncio.to_thread(jobless_server.create_user)
    profile = await new_profile(japi, owner)
    tag = handle("t")
    for i in range(3):
        await new_event(japi, owner, profile, title=f"{tag} {i}")
    status, sub, _ = await japi.post("/v1/subscriptions", fan, json={
        "subscription_type": "profile", "profile_id": profile["id"]})
    assert status == 201, sub

    conn = await asyncpg.connect(jobless_dsn)
    holder = await asyncpg.connect(jobless_dsn)
    copies = "SELECT count(*) FROM calendar_events WHERE source_profile_id = $1"
    first = second = None
    try:
        # Nobody runs jobs yet: the subscription's sync (and the events') wait, queued.
        assert await conn.fetchval(copies, profile["id"]) == 0
        assert set(await job_states(conn)) == {"queued"}

        # The profile's sync lock, held here, stops the first worker inside its job.
        await holder.execute("BEGIN")
        await sync_store.lock_profile(Tx(holder, jobless_server.db), profile["id"])
        first = start_worker(jobless_dsn)
        await wait_for(conn, "SELECT count(*) > 0 FROM pgqueuer WHERE status = 'picked'", True)
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
        await holder.execute("ROLLBACK")
        assert await conn.fetchval(copies, profile["id"]) == 0

        # The next worker takes the orphaned job once its heartbeat is stale.
        second = start_worker(jobless_dsn)
        await wait_for(conn, copies, 3, profile["id"])
        await wait_for(conn, "SELECT count(*) FROM pgqueuer WHERE entrypoint = 'sync'", 0)
        rows = await conn.fetch(
            "SELECT source_event_id, count(*) AS n FROM calendar_events"
            " WHERE source_profile_id = $1 GROUP BY 1", profile["id"])
        assert len(rows) == 3 and all(r["n"] == 1 for r in rows)
        titles = {r[0] for r in await conn.fetch(
            "SELECT title FROM calendar_events WHERE calendar_id = $1", fan.calendar_id)}
        assert titles == {f"{tag} {i}" for i in range(3)}

        # A worker stops cleanly on SIGTERM.
        second.send_signal(signal.SIGTERM)
        assert second.wait(timeout=30) == 0, second.stderr.read() if second.stderr else ""
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
        await holder.close()
        await conn.close()
