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
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import asyncpg
import orjson
import pytest
from conftest import LiveServer

import db.migrate
from db.database import Database
from db.migrate import migrate
from domain import config, instance_secrets
from domain.connected.vault import Vault
from domain.pagination import Cursors

ROOT = Path(__file__).resolve().parents[2]
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


@pytest.mark.slow
async def test_migrate_applies_pending_then_nothing(fresh_database: str) -> None:
    assert printed(run_migrate(fresh_database)) == VERSIONS
    assert await recorded(fresh_database) == [(v, 1) for v in VERSIONS]
    # The schema is really there.
    assert await fetchval(fresh_database, "SELECT to_regclass('public.users') IS NOT NULL")

    assert printed(run_migrate(fresh_database)) == []
    assert await recorded(fresh_database) == [(v, 1) for v in VERSIONS]


@pytest.mark.slow
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


# -- instance secrets, sealed since 0013 ----------------------------------------------

SEALED_SINCE = "0013_sealed_instance_secrets"


async def _instance_secrets(dsn: str) -> dict[str, asyncpg.Record]:
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch("SELECT * FROM instance_secrets")
    finally:
        await conn.close()
    return {row["name"]: row for row in rows}


async def _left_in_clear(dsn: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, bytes]:
    """A database as the releases before 0013 left it (secrets in clear), then
    migrated by this one: the secrets' values."""
    every = db.migrate._migrations()
    monkeypatch.setattr(db.migrate, "_migrations",
                        lambda: [m for m in every if m[0] < SEALED_SINCE])
    await migrate(dsn)
    monkeypatch.undo()
    clear = {name: bytes(row["value"]) for name, row in (await _instance_secrets(dsn)).items()}
    assert set(clear) == {"cursor", "oauth_csrf"}
    assert SEALED_SINCE in await migrate(dsn)
    return clear


async def test_secrets_left_in_clear_are_sealed_and_keep_their_values(
    fresh_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The service seals them when it starts, with the service key, values
    unchanged: a cursor signed with the key before still verifies, across a
    restart too."""
    clear = await _left_in_clear(fresh_database, monkeypatch)
    settings = replace(config.load(), secret_key=secrets.token_urlsafe(32))
    assert settings.secret_key is not None
    live = LiveServer(fresh_database, settings=settings, run_jobs=False)
    try:
        user = live.create_user()
        async with aiohttp.ClientSession(headers=user.headers) as http:
            for n in range(2):
                async with http.post(live.url + "/v1/profiles", json={
                        "platform_id": f"sealed-{n}-{secrets.token_hex(4)}",
                        "display_name": "Sealed"}) as response:
                    assert response.status == 201
            async with http.get(live.url + "/v1/profiles", params={"limit": "1"}) as response:
                first = await response.json()
    finally:
        live.close()

    stored = await _instance_secrets(fresh_database)
    vault = Vault(settings.secret_key)
    for name, value in clear.items():
        sealed = bytes(stored[name]["value"])
        assert stored[name]["sealed"] is True, name
        assert value not in sealed and value.hex().encode() not in sealed, name
        assert vault.open(sealed) == value.hex(), name
    # The cursor the service signed is the one the key in clear signs.
    user_id = await fetchval(fresh_database, "SELECT user_id FROM consumers WHERE name = $1",
                             user.consumer)
    _, after = Cursors(clear["cursor"]).decode(f"profiles:{user_id}", first["next_cursor"])
    assert after == first["data"][0]["id"]

    again = LiveServer(fresh_database, settings=settings, run_jobs=False)
    try:
        async with aiohttp.ClientSession(headers=user.headers) as http, http.get(
                again.url + "/v1/profiles",
                params={"limit": "1", "cursor": first["next_cursor"]}) as response:
            assert response.status == 200
            second = await response.json()
    finally:
        again.close()
    assert len(second["data"]) == 1 and second["data"][0]["id"] != after
    assert await _instance_secrets(fresh_database) == stored  # sealed once


async def test_sealing_races_safely_and_a_changed_key_is_refused(
    fresh_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Processes starting at once on a database with secrets in clear all read
    the same secret, sealed once. A service key that cannot open it is an error
    that says so, and nothing is replaced: a new secret would void everything
    signed before without a word."""
    clear = await _left_in_clear(fresh_database, monkeypatch)
    vault = Vault(secrets.token_urlsafe(32))
    database = await Database.connect(fresh_database, min_size=6, max_size=6)
    try:
        starts = [instance_secrets.get(database, vault, "cursor") for _ in range(6)]
        assert await asyncio.gather(*starts) == [clear["cursor"]] * 6
        sealed = await _instance_secrets(fresh_database)
        assert sealed["cursor"]["sealed"] is True
        assert vault.open(bytes(sealed["cursor"]["value"])) == clear["cursor"].hex()

        other = Vault(secrets.token_urlsafe(32))
        with pytest.raises(instance_secrets.SealedWithAnotherKey,
                           match=r"^the database's secret 'cursor' was sealed with another "
                                 r"service key: KALENDS_SECRET_KEY \(else secret.key in "
                                 r"KALENDS_DATA_DIR\) must be"):
            await instance_secrets.get(database, other, "cursor")
        assert await _instance_secrets(fresh_database) == sealed

        # A secret that is missing is made, sealed, once, whoever asks first.
        await database.execute("DELETE FROM instance_secrets WHERE name = 'oauth_csrf'")
        made = await asyncio.gather(*(instance_secrets.get(database, vault, "oauth_csrf")
                                      for _ in range(6)))
        assert len(set(made)) == 1 and len(made[0]) == 32 and made[0] != clear["oauth_csrf"]
        row = (await _instance_secrets(fresh_database))["oauth_csrf"]
        assert row["sealed"] is True and vault.open(bytes(row["value"])) == made[0].hex()
    finally:
        await database.close()
