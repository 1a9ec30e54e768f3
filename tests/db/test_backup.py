"""`kalends admin backup --to FILE` and `restore --from FILE`, run as an operator would.

Most tests use a fresh database of their own through DATABASE_URL; the last two are
the default set-up, the embedded database in a KALENDS_DATA_DIR: with each command
starting and stopping it, and with `kalends serve` running on it.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import io
import json
import secrets
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import orjson
import pytest
from conftest import LiveServer, migrated_database
from cryptography.hazmat.primitives import serialization
from pg15 import needs_pg15, pg15_server
from processes import (
    ROOT,
    Service,
    request,
    service_env,
    start,
)
from test_cli import email, no_object, one_object, run_admin

import db.migrate
from core.errors import AdminError
from db import backup, embedded
from db.database import Database
from domain import accounts, config, instance_secrets
from domain.connected.vault import Vault
from domain.oauth import keys

# slow: pg_dump and pg_restore runs, a PostgreSQL 15 cluster (the fast loop, pytest -m 'not slow', leaves it out)
pytestmark = pytest.mark.slow

BACKUP = {"backup", "bytes", "database"}
RESTORE = {"restored", "previous", "database"}
USER = {"email", "display_name", "organization_id", "calendar_id", "consumer", "api_key"}


@pytest.fixture
def dsn(database_url: str) -> Iterator[str]:
    with migrated_database(database_url, prefix="kalends_backup") as url:
        yield url


def _user(dsn: str) -> str:
    address = email("backup")
    one_object(run_admin(dsn, "create-user", "--email", address), USER)
    return address


def _exists(dsn: str, address: str) -> bool:
    proc = run_admin(dsn, "create-key", "--email", address)
    return proc.returncode == 0


NO_SERVER = b"kalends: no server is running on the data directory "


def _quiet(proc: subprocess.CompletedProcess[bytes], keys: set[str]) -> dict[str, object]:
    """Success: one JSON object on stdout and nothing on stderr but, with no server
    running on the embedded data directory, the one line that says so."""
    result = one_object(proc, keys)
    others = [line for line in proc.stderr.splitlines()
              if not line.startswith(NO_SERVER)]
    assert others == [], proc.stderr.decode()
    return result


def _refused(proc: subprocess.CompletedProcess[bytes], *mentions: str) -> str:
    """Failure: exit 1, nothing on stdout, one JSON object {"error": ...} on stderr."""
    no_object(proc)
    assert proc.returncode == 1 and proc.stdout == b"", proc.stdout
    [line] = [line for line in proc.stderr.splitlines()
              if not line.startswith(NO_SERVER)]
    error = orjson.loads(line)
    assert set(error) == {"error"} and all(m in error["error"] for m in mentions), error
    return str(error["error"])


Contents = dict[str, tuple[int, str | None]]


async def _contents(dsn: str) -> Contents:
    """Every table of the database: its row count and a digest of all its rows."""
    conn = await asyncpg.connect(dsn)
    try:
        tables = await conn.fetch(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename")
        result: Contents = {}
        for (table,) in tables:
            row = await conn.fetchrow(
                f"SELECT count(*), md5(string_agg(t::text, '|' ORDER BY t::text)) FROM {table} t")
            result[table] = (row[0], row[1])
        return result
    finally:
        await conn.close()


def _everything(dsn: str) -> Contents:
    return asyncio.run(_contents(dsn))


async def _execute(dsn: str, sql: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


def test_round_trip(dsn: str, tmp_path: Path) -> None:
    before = _user(dsn)
    target = tmp_path / "kalends.dump"
    made = _quiet(run_admin(dsn, "backup", "--to", str(target)), BACKUP)
    assert made["backup"] == str(target) and made["bytes"] == target.stat().st_size > 0
    assert made["database"] == urlsplit(dsn).path.lstrip("/")
    assert [p.name for p in tmp_path.iterdir()] == ["kalends.dump"]  # nothing partial left
    at_backup = _everything(dsn)

    after = _user(dsn)
    changed = _everything(dsn)
    restored = _quiet(run_admin(dsn, "restore", "--from", str(target)), RESTORE)
    assert restored["restored"] == str(target)
    assert _everything(dsn) == at_backup  # every table, row for row

    # What the restore replaced was saved first, and brings the later user back.
    previous = Path(str(restored["previous"]))
    assert previous.parent == tmp_path and previous.name.startswith("kalends.dump.replaced-")
    again = _quiet(run_admin(dsn, "restore", "--from", str(previous)), RESTORE)
    assert _everything(dsn) == changed
    assert _exists(dsn, before) and _exists(dsn, after)
    # Each restore saves under a name of its own, even two within the same second.
    assert again["previous"] != restored["previous"]
    assert Path(str(restored["previous"])).exists() and Path(str(again["previous"])).exists()


def test_a_backup_holds_no_secret_in_clear(dsn: str, tmp_path: Path) -> None:
    """Whoever holds a backup, without the service key, holds no secret: not the
    key cursors are signed with, nor the consent page's CSRF key, nor webhook
    secrets, nor the OAuth signing key, in any spelling (bytes, hex as bytea
    dumps, base64). The archive is read both as written and as the SQL that
    pg_restore makes of it, where table data is no longer compressed."""
    settings = dataclasses.replace(config.load(), secret_key=secrets.token_urlsafe(32))
    assert settings.secret_key is not None
    vault = Vault(settings.secret_key)
    live = LiveServer(dsn, settings=settings, run_jobs=False)
    try:
        address = email("backup")
        made = one_object(run_admin(dsn, "create-user", "--email", address), USER)
        api_key = str(made["api_key"])
        webhook_secrets = _webhook_secrets(live, api_key)
        found = {name: live.call(instance_secrets.get(live.db, vault, name))
                 for name in ("cursor", "oauth_csrf")}
        signing = live.call(keys.signing_key(live.db, vault)).private_key
    finally:
        live.close()
    for index, secret in enumerate(webhook_secrets):
        found[f"webhook secret {index}"] = secret.encode()
        found[f"webhook key {index}"] = base64.b64decode(secret.removeprefix("whsec_"))
    found["signing key"] = signing.private_bytes(
        serialization.Encoding.DER, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption())
    found["signing key scalar"] = signing.private_numbers().private_value.to_bytes(32, "big")

    target = tmp_path / "kalends.dump"
    _quiet(run_admin(dsn, "backup", "--to", str(target)), BACKUP)
    archive = target.read_bytes()
    script = subprocess.run([str(embedded.program("pg_restore")), "--file=-", str(target)],
                            capture_output=True, timeout=120, check=True).stdout
    # The reading works: what is no secret is there to be found.
    assert address.encode() in script
    assert all(len(value) >= 16 for value in found.values()), found
    leaked = [name for name, value in found.items()
              if any(s in archive or s in script for s in _spellings(value))]
    assert leaked == []


def _webhook_secrets(live: LiveServer, api_key: str) -> list[str]:
    """A profile's webhook endpoint: its secret, and the one a rotation made
    (the first is kept a day beside it)."""
    headers = {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"}
    port = int(live.url.rsplit(":", 1)[1])
    body = {"platform_id": "b-" + secrets.token_hex(5), "display_name": "Hooks"}
    status, answer, _ = request(port, "POST", "/v1/profiles", headers, orjson.dumps(body))
    assert status == 201, answer
    profile = orjson.loads(answer)["id"]
    status, answer, _ = request(
        port, "POST", f"/v1/profiles/{profile}/webhook-endpoints", headers,
        orjson.dumps({"url": "https://hooks.example.com/kalends", "event_types": ["event.created"]}))
    assert status == 201, answer
    endpoint = orjson.loads(answer)
    status, answer, _ = request(
        port, "POST", f"/v1/webhook-endpoints/{endpoint['id']}/rotate-secret", headers)
    assert status == 200, answer
    return [endpoint["secret"], orjson.loads(answer)["secret"]]


def _spellings(value: bytes) -> set[bytes]:
    """How a secret's bytes may appear in a dump: as they are, as hex (bytea's
    text form), as base64 either alphabet, padded or not."""
    out = {value, value.hex().encode(), value.hex().upper().encode()}
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        out |= {encode(value), encode(value).rstrip(b"=")}
    return out


def test_what_is_not_a_backup_is_refused_and_changes_nothing(dsn: str, tmp_path: Path) -> None:
    _user(dsn)
    # Enough data that the archive is mostly table data after its table of contents.
    asyncio.run(_execute(dsn, "CREATE TABLE padding AS"
                              " SELECT md5(g::text) AS noise FROM generate_series(1, 50000) g"))
    garbage = tmp_path / "notes.txt"
    garbage.write_text("not a backup\n")
    good = tmp_path / "good.dump"
    _quiet(run_admin(dsn, "backup", "--to", str(good)), BACKUP)
    archive = good.read_bytes()
    # Cut in its table of contents: refused before anything is done.
    cut_early = tmp_path / "cut-early.dump"
    cut_early.write_bytes(archive[:2000])
    # Cut in its data: the table of contents reads fine, and the load fails halfway,
    # after `public` was dropped and part of the archive loaded; all rolled back.
    cut_late = tmp_path / "cut-late.dump"
    cut_late.write_bytes(archive[: len(archive) // 2])
    _user(dsn)
    before = _everything(dsn)

    for source in (garbage, cut_early, cut_late, tmp_path / "missing.dump", tmp_path):
        error = _refused(run_admin(dsn, "restore", "--from", str(source)), str(source))
        if source == cut_late:
            assert "cannot be read: pg_restore: error:" in error, error
        assert _everything(dsn) == before, source


def test_a_failed_backup_leaves_no_partial_file_and_keeps_the_old_one(
    dsn: str, tmp_path: Path
) -> None:
    _user(dsn)
    target = tmp_path / "kalends.dump"
    target.write_bytes(b"an earlier, good backup")
    unreachable = urlunsplit(urlsplit(dsn)._replace(path="/kalends_no_such_database"))
    # No such database: refused before anything starts, in one line (exit 2).
    proc = run_admin(unreachable, "backup", "--to", str(target))
    no_object(proc)
    assert proc.returncode == 2 and proc.stderr.startswith(
        b"kalends: cannot connect to the database at "), proc.stderr
    assert proc.stderr.count(b"\n") == 1 and b"kalends_no_such_database" in proc.stderr
    # A directory: the command's own refusal, a JSON object.
    proc = run_admin(dsn, "backup", "--to", str(tmp_path))
    no_object(proc)
    assert set(orjson.loads(proc.stderr)) == {"error"}
    assert target.read_bytes() == b"an earlier, good backup"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kalends.dump"]
    no_object(run_admin(dsn, "backup", "--to", str(tmp_path / "no" / "such" / "dir.dump")))


def test_a_load_that_fails_midway_changes_nothing(dsn: str, tmp_path: Path) -> None:
    # A schema of its own in the backup that still exists at restore time: the load
    # stops at its CREATE SCHEMA, after `public` was already dropped and part reloaded.
    asyncio.run(_execute(dsn, "CREATE SCHEMA extra; CREATE TABLE extra.notes (body text)"))
    _user(dsn)
    target = tmp_path / "kalends.dump"
    _quiet(run_admin(dsn, "backup", "--to", str(target)), BACKUP)
    _user(dsn)
    before = _everything(dsn)

    error = _refused(run_admin(dsn, "restore", "--from", str(target)), str(target))
    assert 'schema "extra" already exists' in error, error
    assert _everything(dsn) == before


def test_a_backup_of_another_database_is_refused(
    database_url: str, dsn: str, tmp_path: Path
) -> None:
    _user(dsn)
    before = _everything(dsn)
    with migrated_database(database_url, prefix="kalends_other") as other:
        asyncio.run(_execute(other, "DROP TABLE schema_migrations"))
        target = tmp_path / "other.dump"
        _quiet(run_admin(other, "backup", "--to", str(target)), BACKUP)
    _refused(run_admin(dsn, "restore", "--from", str(target)), "not a Kalends backup")
    assert _everything(dsn) == before
    assert [p.name for p in tmp_path.iterdir()] == ["other.dump"]  # refused before saving


def test_a_backup_from_an_older_release_is_migrated_on_restore(
    database_url: str, dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    every = db.migrate._migrations()
    monkeypatch.setattr(db.migrate, "_migrations", lambda: every[:-1])
    with migrated_database(database_url, prefix="kalends_older") as older:
        monkeypatch.undo()
        target = tmp_path / "older.dump"
        # `backup` applies no migration: the archive keeps the older schema.
        _quiet(run_admin(older, "backup", "--to", str(target)), BACKUP)
        assert _versions(older) == [version for version, _ in every[:-1]]

    _quiet(run_admin(dsn, "restore", "--from", str(target)), RESTORE)
    assert _versions(dsn) == [version for version, _ in every]
    _user(dsn)  # and the service's commands work on it


def _versions(dsn: str) -> list[str]:
    async def fetch() -> list[str]:
        conn = await asyncpg.connect(dsn)
        try:
            rows = await conn.fetch("SELECT version FROM schema_migrations ORDER BY version")
            return [row[0] for row in rows]
        finally:
            await conn.close()

    return asyncio.run(fetch())


def test_a_password_stays_off_the_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Any local user can read a command line; the password goes in the environment."""
    seen = tmp_path / "seen"
    fake = tmp_path / "pg_dump"
    fake.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" "PGPASSWORD=$PGPASSWORD" > {seen}\n'
                    'echo "pg_dump: error: connection refused" >&2\nexit 1\n')
    fake.chmod(0o755)
    monkeypatch.setattr(embedded, "program", lambda name: tmp_path / name)
    for dsn, password in (
        ("postgresql://kalends:s%40cret@db.example:5433/kalends?sslmode=require", "s@cret"),
        ("postgresql://kalends@db.example:5433/kalends?password=hunter2&sslmode=require",
         "hunter2"),
    ):
        with pytest.raises(AdminError, match=r"^pg_dump failed: pg_dump: error: connection ref"):
            backup.dump(dsn, tmp_path / "kalends.dump")
        *args, env = seen.read_text().splitlines()
        assert env == f"PGPASSWORD={password}"
        assert "postgresql://kalends@db.example:5433/kalends?sslmode=require" in args, args
        assert not any(password in arg or "cret" in arg for arg in args), args
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pg_dump", "seen"]  # nothing partial


@pytest.mark.slow
@needs_pg15
def test_round_trip_on_postgresql_15(tmp_path: Path) -> None:
    """The oldest server supported: the embedded package's pg_dump and pg_restore are
    18, whose script sets what 15 does not know (transaction_timeout, ...)."""
    with pg15_server() as server:
        assert _server_version(server) // 10000 == 15
        with migrated_database(server, prefix="kalends_pg15") as dsn:
            before = _user(dsn)
            target = tmp_path / "kalends.dump"
            _quiet(run_admin(dsn, "backup", "--to", str(target)), BACKUP)
            at_backup = _everything(dsn)
            assert at_backup["users"][0] == 1
            with migrated_database(server, prefix="kalends_pg15_fresh") as fresh:
                _quiet(run_admin(fresh, "restore", "--from", str(target)), RESTORE)
                assert _everything(fresh) == at_backup  # every table, row for row
                assert _exists(fresh, before)
            # And back into the database it was taken from, a user later.
            _user(dsn)
            _quiet(run_admin(dsn, "restore", "--from", str(target)), RESTORE)
            assert _everything(dsn) == at_backup


def test_a_server_older_than_15_is_refused_before_anything_is_touched(
    dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _user(dsn)
    target = tmp_path / "kalends.dump"
    _quiet(run_admin(dsn, "backup", "--to", str(target)), BACKUP)
    before = _everything(dsn)
    # A psql that finds PostgreSQL 14: the version, then the settings' names.
    fake = tmp_path / "psql"
    fake.write_text('#!/bin/sh\nprintf "140011\\nstatement_timeout\\n"\n')
    fake.chmod(0o755)
    real = embedded.program
    monkeypatch.setattr(embedded, "program",
                        lambda name: fake if name == "psql" else real(name))
    with pytest.raises(AdminError, match=r"^the server runs PostgreSQL 14; Kalends needs 15 "):
        backup.restore(dsn, target)
    assert _everything(dsn) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kalends.dump", "psql"]  # none saved


def test_the_opening_settings_a_server_lacks_are_left_out() -> None:
    """Only the SETs before the first object, only of settings the server lacks:
    the same line as table data, later, goes through."""
    opening = (b"--\n-- PostgreSQL database dump\n--\n\n\\restrict k3y\n\n"
               b"-- Dumped by pg_dump version 18.6\n\nBEGIN;\n\n"
               b"SET statement_timeout = 0;\n")
    rest = (b"SET client_encoding = 'UTF8';\n"
            b"SELECT pg_catalog.set_config('search_path', '', false);\n\n"
            b"--\n-- Name: notes; Type: TABLE\n--\n\nCREATE TABLE public.notes (body text);\n"
            b"SET default_tablespace = '';\n\nCOPY public.notes (body) FROM stdin;\n"
            b"SET transaction_timeout = 0;\n\\.\n\nCOMMIT;\n\n\\unrestrict k3y\n")
    script = opening + b"SET transaction_timeout = 0;\n" + rest
    known = {"statement_timeout", "client_encoding", "search_path", "default_tablespace"}
    assert _relayed(script, known) == opening + rest  # PostgreSQL 15 and 16
    assert _relayed(script, {*known, "transaction_timeout"}) == script  # 17 and later


class _Sink(io.BytesIO):
    def close(self) -> None:
        self.written = self.getvalue()
        super().close()


def _relayed(script: bytes, known: set[str]) -> bytes:
    sink = _Sink()
    backup._relay(io.BytesIO(script), sink, known)
    assert sink.closed
    return sink.written


def _server_version(dsn: str) -> int:
    async def fetch() -> int:
        conn = await asyncpg.connect(dsn)
        try:
            return int(await conn.fetchval("SHOW server_version_num"))
        finally:
            await conn.close()

    return asyncio.run(fetch())


def test_default_setup_round_trip(data_dir: Path, tmp_path: Path) -> None:
    """No DATABASE_URL: each command starts the embedded database and stops it again."""

    def admin(*args: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run([sys.executable, "-m", "kalends", "admin", *args], cwd=ROOT,
                              env=service_env(data_dir), capture_output=True, timeout=120,
                              check=False)

    def everything() -> Contents:
        dsn, server = embedded.start(data_dir)
        try:
            return _everything(dsn)
        finally:
            embedded.stop(server)

    def fill(work: Callable[[Database], Awaitable[object]]) -> None:
        """What the commands below back up and restore, written here in one start of
        the embedded database (one command each would only start it more often: the
        admin commands themselves are tests/kalends/test_cli.py's)."""
        dsn, server = embedded.start(data_dir)

        async def run() -> None:
            database = await Database.connect(dsn, min_size=1, max_size=1)
            try:
                await work(database)
            finally:
                await database.close()

        try:
            asyncio.run(run())
        finally:
            embedded.stop(server)

    async def choir(database: Database) -> None:
        await accounts.create_user(database, bob)
        org = await accounts.create_organization(database, "Choir", alice)
        await accounts.add_member(database, org["organization_id"], bob, "member")
        await accounts.create_calendar(database, alice, "Rehearsals")

    alice, bob = email("alice"), email("bob")
    # The first command makes the data directory's database, as on a fresh machine.
    _quiet(admin("create-user", "--email", alice, "--name", "Alice", "--timezone",
                 "Europe/Paris"), USER)
    fill(choir)
    target = tmp_path / "kalends.dump"
    made = _quiet(admin("backup", "--to", str(target)), BACKUP)
    assert made == {"backup": str(target), "bytes": target.stat().st_size,
                    "database": "postgres"}
    assert target.stat().st_mode & 0o077 == 0  # the operator's alone
    at_backup = everything()
    assert at_backup["users"][0] == 2 and at_backup["calendars"][0] == 3

    later = email("later")

    async def tour(database: Database) -> None:
        await accounts.create_user(database, later)
        await accounts.create_calendar(database, alice, "Tours")

    fill(tour)
    changed = everything()
    assert changed != at_backup

    garbage = tmp_path / "garbage.dump"
    garbage.write_bytes(b"PGDMP" + secrets.token_bytes(4000))  # pg_dump's magic, then noise
    _refused(admin("restore", "--from", str(garbage)), str(garbage), "not a Kalends backup")
    assert everything() == changed

    restored = _quiet(admin("restore", "--from", str(target)), RESTORE)
    assert restored["restored"] == str(target) and restored["database"] == "postgres"
    assert everything() == at_backup  # the later user and calendar gone, all else as it was
    _refused(admin("create-key", "--email", later), later)

    _quiet(admin("restore", "--from", str(restored["previous"])), RESTORE)
    assert everything() == changed


def test_restore_under_a_running_service(
    data_dir: Path, tmp_path: Path, services: list[Service]
) -> None:
    service = start(services, data_dir, tmp_path)

    def admin(*args: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run([sys.executable, "-m", "kalends", "admin", *args], cwd=ROOT,
                              env=service_env(data_dir), capture_output=True, timeout=120,
                              check=False)

    def key_works(api_key: str) -> int:
        return request(service.port, "GET", "/v1/organizations",
                       {"Authorization": f"Bearer {api_key}"})[0]

    kept = json.loads(admin("create-user", "--email", email("kept")).stdout)["api_key"]
    target = tmp_path / "served.dump"
    _quiet(admin("backup", "--to", str(target)), BACKUP)
    dropped = json.loads(admin("create-user", "--email", email("dropped")).stdout)["api_key"]
    assert key_works(kept) == key_works(dropped) == 200

    _quiet(admin("restore", "--from", str(target)), RESTORE)
    # The service carries on with the restored data: no restart, no error, reads and
    # writes alike (each of its connections had statements prepared on the old tables).
    for _ in range(12):
        assert key_works(kept) == 200
        assert key_works(dropped) == 401
        body = json.dumps({"platform_id": "b-" + secrets.token_hex(5), "display_name": "After"})
        status, answer, _ = request(service.port, "POST", "/v1/profiles", {
            "Authorization": f"Bearer {kept}", "Content-Type": "application/json"},
            body.encode())
        assert status == 201, answer
    assert request(service.port, "GET", "/readyz")[0] == 200
    assert service.stop() == 0, service.stderr[-4000:]
