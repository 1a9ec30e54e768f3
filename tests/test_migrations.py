"""`kalends migrate` and `db.migrate`: ordered, once each, all-or-nothing per migration.

Each test gets a database of its own, created empty on the session's server
and dropped afterwards, so migrations run from nothing.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import orjson
import pytest

import db.migrate
from db.migrate import migrate

ROOT = Path(__file__).resolve().parents[1]
VERSIONS = sorted(p.stem for p in (ROOT / "db" / "migrations").glob("*.sql"))
TIMEOUT = 60


def _with_database(dsn: str, name: str) -> str:
    return urlunsplit(urlsplit(dsn)._replace(path="/" + name))


@pytest.fixture
async def fresh_database(database_url: str) -> AsyncIterator[str]:
    """An empty database on the test server; dropped afterwards."""
    name = f"kalends_mig_{secrets.token_hex(4)}"
    server = _with_database(database_url, "postgres")
    conn = await asyncpg.connect(server)
    try:
        await conn.execute(f"CREATE DATABASE {name}")
    finally:
        await conn.close()
    try:
        yield _with_database(database_url, name)
    finally:
        conn = await asyncpg.connect(server)
        try:
            await conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        finally:
            await conn.close()


def migrate_command(dsn: str) -> tuple[list[str], dict[str, str]]:
    env = {**os.environ, "DATABASE_URL": dsn}
    return [sys.executable, "-m", "kalends", "migrate"], env


def run_migrate(dsn: str) -> subprocess.CompletedProcess[bytes]:
    command, env = migrate_command(dsn)
    return subprocess.run(command, env=env, cwd=ROOT, capture_output=True, timeout=TIMEOUT,
                          check=False)


def printed(proc: subprocess.CompletedProcess[bytes]) -> list[str]:
    """Exit 0 and exactly one JSON object, {"applied": [versions]}."""
    assert proc.returncode == 0, proc.stderr.decode()
    lines = [line for line in proc.stdout.decode().splitlines() if line.strip()]
    assert len(lines) == 1, proc.stdout
    obj = orjson.loads(lines[0])
    assert isinstance(obj, dict) and set(obj) == {"applied"}, obj
    assert isinstance(obj["applied"], list), obj
    return obj["applied"]


async def recorded(dsn: str) -> list[tuple[str, int]]:
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT version, count(*) AS n FROM schema_migrations GROUP BY version ORDER BY version"
        )
    finally:
        await conn.close()
    return [(r["version"], r["n"]) for r in rows]


async def fetchval(dsn: str, sql: str, *args: Any) -> Any:
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetchval(sql, *args)
    finally:
        await conn.close()


def test_there_are_migrations() -> None:
    assert VERSIONS, "no db/migrations/*.sql found"
    assert len(set(VERSIONS)) == len(VERSIONS)


async def test_migrate_applies_pending_then_nothing(fresh_database: str) -> None:
    assert printed(run_migrate(fresh_database)) == VERSIONS
    assert await recorded(fresh_database) == [(v, 1) for v in VERSIONS]
    # The schema is really there.
    assert await fetchval(fresh_database, "SELECT to_regclass('public.users') IS NOT NULL")

    assert printed(run_migrate(fresh_database)) == []
    assert await recorded(fresh_database) == [(v, 1) for v in VERSIONS]


async def test_concurrent_migrations_of_a_fresh_database(fresh_database: str) -> None:
    command, env = migrate_command(fresh_database)
    procs = [
        subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
        for _ in range(4)
    ]
    results = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=TIMEOUT)
            results.append(subprocess.CompletedProcess(command, proc.returncode, out, err))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)

    applied = [printed(result) for result in results]
    # Every migration applied by exactly one process, in order, and recorded once.
    assert sorted(v for versions in applied for v in versions) == VERSIONS, applied
    for versions in applied:
        assert versions == sorted(versions)
    assert await recorded(fresh_database) == [(v, 1) for v in VERSIONS]


async def test_migrate_fails_cleanly_when_the_database_is_missing(database_url: str) -> None:
    missing = _with_database(database_url, f"kalends_missing_{secrets.token_hex(4)}")
    proc = run_migrate(missing)
    assert proc.returncode != 0
    assert b"{" not in proc.stdout, proc.stdout


async def test_a_failing_migration_rolls_back_whole(
    fresh_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = db.migrate._migrations()
    good_a = ("9997_probe_a", "CREATE TABLE probe_a (id int); INSERT INTO probe_a VALUES (1);")
    bad_b = (
        "9998_probe_b",
        "CREATE TABLE probe_b (id int);"
        " INSERT INTO probe_b VALUES (1);"
        " ALTER TABLE users ADD COLUMN probe_b int;"
        " UPDATE instance_secrets SET name = 'probe_b';"
        " SELECT 1 / 0;",
    )
    good_c = ("9999_probe_c", "CREATE TABLE probe_c (id int);")
    monkeypatch.setattr(db.migrate, "_migrations", lambda: [*real, good_a, bad_b, good_c])

    with pytest.raises(asyncpg.PostgresError):
        await asyncio.wait_for(migrate(fresh_database), TIMEOUT)

    # Everything before the failure is applied and recorded; nothing of the failed
    # migration or after it is.
    assert await recorded(fresh_database) == [(v, 1) for v in [*VERSIONS, "9997_probe_a"]]
    assert await fetchval(fresh_database, "SELECT count(*) FROM probe_a") == 1
    for table in ("probe_b", "probe_c"):
        assert await fetchval(fresh_database, "SELECT to_regclass($1)", table) is None
    assert not await fetchval(
        fresh_database,
        "SELECT count(*) FROM information_schema.columns"
        " WHERE table_name = 'users' AND column_name = 'probe_b'",
    )
    assert await fetchval(fresh_database, "SELECT count(*) FROM instance_secrets"
                          " WHERE name = 'probe_b'") == 0

    # The advisory lock was released: a fixed migration set applies the rest at once.
    fixed_b = ("9998_probe_b", "CREATE TABLE probe_b (id int);")
    monkeypatch.setattr(db.migrate, "_migrations", lambda: [*real, good_a, fixed_b, good_c])
    assert await asyncio.wait_for(migrate(fresh_database), 10) == ["9998_probe_b", "9999_probe_c"]
    assert await recorded(fresh_database) == [
        (v, 1) for v in [*VERSIONS, "9997_probe_a", "9998_probe_b", "9999_probe_c"]
    ]
    assert await asyncio.wait_for(migrate(fresh_database), 10) == []


async def test_concurrent_migrate_calls_in_one_process(fresh_database: str) -> None:
    results = await asyncio.wait_for(
        asyncio.gather(*(migrate(fresh_database) for _ in range(5))), TIMEOUT
    )
    assert sorted(v for applied in results for v in applied) == VERSIONS, results
    assert await recorded(fresh_database) == [(v, 1) for v in VERSIONS]
