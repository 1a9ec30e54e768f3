"""tests/replica.py: real streaming replicas of the session's PostgreSQL.

One replica serves the module (made once, removed at the end); the last test
makes one of its own to see `replica_of` leave nothing behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import asyncpg
import psutil  # type: ignore[import-untyped]
import pytest
from conftest import data_root, migrated_database
from replica import Replica, make_replica, postgres_processes, psql, replica_of

# slow: a streaming replica (pg_basebackup) (the fast loop, pytest -m 'not slow', leaves it out)
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def workdir() -> Iterator[Path]:
    """Outside /root (the replica's user must reach it), as conftest's `data_dir`."""
    path = Path(tempfile.mkdtemp(prefix="kalends-replica-", dir=data_root()))
    try:
        yield path
    finally:
        # Replicas remove themselves; this is for a test that went wrong halfway.
        for directory in path.iterdir():
            for proc in postgres_processes(directory):
                with contextlib.suppress(psutil.Error):
                    proc.kill()
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def primary(database_url: str) -> Iterator[str]:
    """A fresh migrated database on the session's server, for this module."""
    with migrated_database(database_url, prefix="kalends_replica") as dsn:
        psql(dsn, "CREATE TABLE replica_probe (id int PRIMARY KEY, note text)")
        yield dsn


@pytest.fixture(scope="module")
def standby(primary: str, workdir: Path) -> Iterator[Replica]:
    replica = make_replica(primary, workdir)
    try:
        yield replica
    finally:
        replica.remove()


def database_of(dsn: str) -> str:
    return urlsplit(dsn).path.lstrip("/")


async def write(primary: str, row_id: int) -> None:
    conn = await asyncpg.connect(primary)
    try:
        await conn.execute("INSERT INTO replica_probe VALUES ($1, 'written on the primary')",
                           row_id)
    finally:
        await conn.close()


async def test_primary_writes_reach_the_replica(primary: str, standby: Replica) -> None:
    await write(primary, 1)
    await asyncio.to_thread(standby.wait_caught_up, primary, 10)
    conn = await asyncpg.connect(standby.dsn_for(database_of(primary)))
    try:
        assert await conn.fetchval("SELECT pg_is_in_recovery()") is True
        assert await conn.fetchval("SELECT note FROM replica_probe WHERE id = 1") \
            == "written on the primary"
        # The migrations ran on the primary; the replica has their schema too.
        assert await conn.fetchval("SELECT count(*) FROM schema_migrations") > 0
    finally:
        await conn.close()


async def test_replica_refuses_writes(primary: str, standby: Replica) -> None:
    conn = await asyncpg.connect(standby.dsn_for(database_of(primary)))
    try:
        with pytest.raises(asyncpg.ReadOnlySQLTransactionError):
            await conn.execute("INSERT INTO replica_probe VALUES (99, 'on the replica')")
    finally:
        await conn.close()


async def test_apply_delay_holds_back_new_rows(primary: str, standby: Replica) -> None:
    conn = await asyncpg.connect(standby.dsn_for(database_of(primary)))
    await asyncio.to_thread(standby.set_apply_delay, 500)
    try:
        await write(primary, 2)
        committed = time.monotonic()
        seen_early = await conn.fetchval("SELECT count(*) FROM replica_probe WHERE id = 2")
        checked_after = time.monotonic() - committed
        # Not before the delay is over (the check normally takes milliseconds).
        assert seen_early == 0 or checked_after >= 0.5
        await asyncio.to_thread(standby.wait_caught_up, primary, 10)
        assert await conn.fetchval("SELECT count(*) FROM replica_probe WHERE id = 2") == 1
        # Replayed no sooner than the delay after the commit (less the time the
        # commit's acknowledgement took to reach this process).
        assert time.monotonic() - committed >= 0.45
    finally:
        await conn.close()
        await asyncio.to_thread(standby.set_apply_delay, 0)
    assert await asyncio.to_thread(standby.query, "SHOW recovery_min_apply_delay") == "0"


async def test_stopped_replica_starts_and_catches_up(primary: str, standby: Replica) -> None:
    await asyncio.to_thread(standby.stop)
    assert not standby.running()
    with pytest.raises(OSError):
        await asyncpg.connect(standby.dsn, timeout=5)
    await write(primary, 3)  # while the replica is down: the slot keeps its WAL
    await asyncio.to_thread(standby.start)
    await asyncio.to_thread(standby.wait_caught_up, primary, 10)
    conn = await asyncpg.connect(standby.dsn_for(database_of(primary)))
    try:
        assert await conn.fetchval("SELECT count(*) FROM replica_probe WHERE id = 3") == 1
    finally:
        await conn.close()


def test_replica_of_leaves_nothing_behind(primary: str, workdir: Path) -> None:
    with replica_of(primary, workdir, apply_delay_ms=200) as replica:
        assert replica.query("SHOW recovery_min_apply_delay") == "200ms"
        assert replica.running()
        directory, slot = replica.directory, replica.slot
        assert slot is not None
        assert psql(primary, f"SELECT count(*) FROM pg_replication_slots "
                             f"WHERE slot_name = '{slot}'") == "1"
    assert postgres_processes(directory) == []
    assert not directory.exists()
    assert psql(primary, f"SELECT count(*) FROM pg_replication_slots "
                         f"WHERE slot_name = '{slot}'") == "0"
    replica.remove()  # a second time does nothing


def test_replica_of_removes_the_replica_on_failure(primary: str, workdir: Path) -> None:
    marker = secrets.token_hex(4)
    with pytest.raises(RuntimeError, match=marker), replica_of(primary, workdir) as replica:
        directory = replica.directory
        raise RuntimeError(marker)
    assert postgres_processes(directory) == []
    assert not directory.exists()
