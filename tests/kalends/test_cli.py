"""`kalends admin` (docs/operations.md, "Operator commands, backup and restore") as operators run
it: a real process, one JSON object on stdout.

Every command runs as `python -m kalends admin ...` against the session's test
database (`DATABASE_URL`), and its effect is checked through the live service
with the key it printed, or in the database. Bad input must exit non-zero,
print no JSON object on stdout and leave every account table as it was.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import os
import re
import secrets
import socket
import subprocess
import sys
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import orjson
import pytest
from conftest import User, assert_error
from processes import free_port

from domain.auth import hash_key

ROOT = Path(__file__).resolve().parents[2]
ID = re.compile(r"^(?P<prefix>[a-z]+)_[0-9a-f]{32}$")
CLI_TIMEOUT = 60

# The tables `kalends admin` writes; a failed command must leave all of them untouched.
ACCOUNT_TABLES = (
    "users", "consumers", "api_keys", "organizations", "organization_members", "calendars",
)


def _env(database_url: str) -> dict[str, str]:
    return {**os.environ, "DATABASE_URL": database_url, "PYTHONUNBUFFERED": "1"}


def _command(args: Sequence[str]) -> list[str]:
    return [sys.executable, "-m", "kalends", "admin", *args]


def run_admin(database_url: str, *args: str, stdin: bytes | None = None
              ) -> subprocess.CompletedProcess[bytes]:
    """`stdin`: what the command reads on standard input (default: the test's own)."""
    # cwd=ROOT: the repository's own packages, as `python -m kalends` finds them there.
    return subprocess.run(
        _command(args), env=_env(database_url), cwd=ROOT, capture_output=True,
        timeout=CLI_TIMEOUT, check=False, input=stdin,
    )


def run_many(database_url: str, commands: Sequence[Sequence[str]]
             ) -> list[subprocess.CompletedProcess[bytes]]:
    """Independent commands, run side by side to keep the file fast."""
    return finish([
        subprocess.Popen(_command(args), env=_env(database_url), cwd=ROOT,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for args in commands
    ])


def finish(procs: Sequence[subprocess.Popen[bytes]]) -> list[subprocess.CompletedProcess[bytes]]:
    """Wait for `procs`, killing any left when one fails or times out."""
    results = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=CLI_TIMEOUT)
            results.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
    return results


def one_object(proc: subprocess.CompletedProcess[bytes], keys: set[str]) -> dict[str, Any]:
    """Exit 0 and exactly one JSON object on stdout, with exactly `keys`."""
    assert proc.returncode == 0, (proc.args, proc.returncode, proc.stderr.decode())
    lines = [line for line in proc.stdout.decode().splitlines() if line.strip()]
    assert len(lines) == 1, proc.stdout
    obj = orjson.loads(lines[0])
    assert isinstance(obj, dict), obj
    assert set(obj) == keys, obj
    return obj


def no_object(proc: subprocess.CompletedProcess[bytes]) -> None:
    """Non-zero exit, nothing like a JSON object on stdout, and a reason (not a crash) on stderr."""
    assert proc.returncode != 0, (proc.args, proc.stdout)
    assert b"{" not in proc.stdout, (proc.args, proc.stdout)
    assert proc.stderr.strip(), proc.args
    assert b"Traceback" not in proc.stderr, (proc.args, proc.stderr.decode())


def is_id(value: Any, prefix: str) -> bool:
    match = ID.match(value) if isinstance(value, str) else None
    return match is not None and match["prefix"] == prefix


def email(tag: str = "cli") -> str:
    return f"{tag}-{secrets.token_hex(6)}@example.com"


def as_user(created: dict[str, Any], api_key: str | None = None) -> User:
    return User(created["email"], api_key or created["api_key"], created["organization_id"],
                created["calendar_id"], created["consumer"])


async def snapshot(database_url: str) -> dict[str, tuple[int, str | None]]:
    """Row count and a digest of every row, per account table."""
    conn = await asyncpg.connect(database_url)
    try:
        result = {}
        for table in ACCOUNT_TABLES:
            row = await conn.fetchrow(
                f"SELECT count(*) AS n, md5(string_agg(t::text, '|' ORDER BY t::text)) AS digest"
                f" FROM {table} t"
            )
            result[table] = (row["n"], row["digest"])
        return result
    finally:
        await conn.close()


async def organizations_of(api: Any, user: User) -> dict[str, dict[str, Any]]:
    status, body, _ = await api.get("/v1/organizations", user)
    assert status == 200, body
    assert body["has_more"] is False and body["next_cursor"] is None, body
    return {org["id"]: org for org in body["data"]}


CREATE_USER_KEYS = {"email", "display_name", "organization_id", "calendar_id", "consumer", "api_key"}
KEY_KEYS = {"consumer", "api_key"}


@pytest.fixture(scope="module")
def cli_user(database_url: str) -> dict[str, Any]:
    """A user made by `kalends admin create-user`, with every option given (made once)."""
    address = email("alice")
    created = one_object(
        run_admin(database_url, "create-user", "--email", address, "--name", "Alice Admin",
                  "--timezone", "Europe/Berlin"),
        CREATE_USER_KEYS,
    )
    return created


async def test_create_user_makes_default_organization_and_calendar(
    database_url: str, live_server: Any, api: Any, cli_user: dict[str, Any]
) -> None:
    created = cli_user
    assert created["display_name"] == "Alice Admin"
    assert is_id(created["organization_id"], "org"), created
    assert is_id(created["calendar_id"], "cal"), created
    assert re.fullmatch(r"[A-Za-z0-9_-]{1,128}", created["consumer"]), created
    assert isinstance(created["api_key"], str) and len(created["api_key"]) >= 32

    user = as_user(created)
    orgs = await organizations_of(api, user)
    assert [o["id"] for o in orgs.values() if o["is_default"]] == [created["organization_id"]]
    default = orgs[created["organization_id"]]
    assert default["is_default"] is True and default["role"] == "owner", default

    conn = await asyncpg.connect(database_url)
    try:
        row = await conn.fetchrow(
            "SELECT u.email, u.display_name, u.timezone, c.is_default"
            " FROM calendars c JOIN users u ON u.id = c.user_id WHERE c.id = $1",
            created["calendar_id"],
        )
        calendars = await conn.fetchval(
            "SELECT count(*) FROM calendars c JOIN users u ON u.id = c.user_id"
            " WHERE u.email = $1 AND c.is_default", created["email"],
        )
        keys = await conn.fetchval(
            "SELECT count(*) FROM api_keys WHERE consumer_name = $1", created["consumer"]
        )
        plaintext = await conn.fetchval(
            "SELECT count(*) FROM api_keys t WHERE strpos(t::text, $1) > 0"
            " OR strpos(encode(t.key_hash, 'escape'), $1) > 0", created["api_key"],
        )
    finally:
        await conn.close()
    assert row is not None, "the default calendar is missing"
    assert (row["email"], row["display_name"], row["timezone"], row["is_default"]) == (
        created["email"], "Alice Admin", "Europe/Berlin", True)
    assert calendars == 1
    # Shown once, stored only as a hash (docs/http.md, "Authentication and accounts").
    assert keys >= 1 and plaintext == 0


async def test_create_user_without_options(database_url: str, api: Any) -> None:
    created = one_object(
        run_admin(database_url, "create-user", "--email", email("plain")), CREATE_USER_KEYS
    )
    assert created["display_name"] is None
    orgs = await organizations_of(api, as_user(created))
    assert [(o["id"], o["is_default"], o["role"]) for o in orgs.values()] == [
        (created["organization_id"], True, "owner")]


async def test_create_key_gives_a_second_working_key(
    database_url: str, api: Any, cli_user: dict[str, Any]
) -> None:
    made = one_object(run_admin(database_url, "create-key", "--email", cli_user["email"]), KEY_KEYS)
    assert made["consumer"] == cli_user["consumer"]
    assert made["api_key"] != cli_user["api_key"]
    first, second = as_user(cli_user), as_user(cli_user, made["api_key"])
    assert await organizations_of(api, second) == await organizations_of(api, first)
    status, body, _ = await api.get("/v1/profiles", second)
    assert status == 200, body


@pytest.mark.slow
async def test_consumer_is_unusable_until_claimed(
    database_url: str, api: Any, cli_user: dict[str, Any]
) -> None:
    name = "svc_" + secrets.token_hex(5)
    made = one_object(run_admin(database_url, "create-consumer", "--name", name), KEY_KEYS)
    assert made["consumer"] == name
    auth = {"Authorization": "Bearer " + made["api_key"]}

    status, body, _ = await api.get("/v1/profiles", headers=auth)
    error = assert_error(status, body, 403, "consumer_not_claimed")
    assert error["type"] == "permission_error"

    claimed = one_object(
        run_admin(database_url, "claim-consumer", "--name", name, "--email", cli_user["email"]),
        {"consumer", "email"},
    )
    assert claimed == {"consumer": name, "email": cli_user["email"]}
    status, body, _ = await api.get("/v1/profiles", headers=auth)
    assert status == 200, body
    status, body, _ = await api.get("/v1/organizations", headers=auth)
    assert status == 200, body
    assert [o["id"] for o in body["data"] if o["is_default"]] == [cli_user["organization_id"]]


@pytest.mark.slow
async def test_organization_and_members_with_each_role(
    database_url: str, live_server: Any, api: Any, cli_user: dict[str, Any]
) -> None:
    handle = "club-" + secrets.token_hex(4)
    made = one_object(
        run_admin(database_url, "create-organization", "--name", "Jazz Club",
                  "--owner", cli_user["email"], "--handle", handle),
        {"organization_id"},
    )
    org_id = made["organization_id"]
    assert is_id(org_id, "org"), made

    owner_view = (await organizations_of(api, as_user(cli_user)))[org_id]
    assert owner_view == {"id": org_id, "name": "Jazz Club", "handle": handle, "role": "owner",
                          "is_default": False}

    members = {role: live_server.create_user() for role in ("owner", "admin", "member")}
    # One ID given in upper case: IDs are matched case-insensitively (docs/http.md, "HTTP
    # conventions").
    given = {"owner": org_id, "admin": org_id, "member": org_id.upper()}
    results = run_many(database_url, [
        ("add-member", "--organization", given[role], "--email", member.email, "--role", role)
        for role, member in members.items()
    ])
    for (role, member), proc in zip(members.items(), results, strict=True):
        out = one_object(proc, {"organization_id", "email", "role"})
        assert out == {"organization_id": org_id, "email": member.email, "role": role}
        orgs = await organizations_of(api, member)
        assert orgs[org_id]["role"] == role, orgs
        assert orgs[org_id]["is_default"] is False
        assert orgs[member.organization_id]["is_default"] is True  # their own stays default
        assert sum(o["is_default"] for o in orgs.values()) == 1

    # add-member again changes the role.
    member = members["member"]
    out = one_object(
        run_admin(database_url, "add-member", "--organization", org_id, "--email", member.email,
                  "--role", "admin"),
        {"organization_id", "email", "role"},
    )
    assert out["role"] == "admin"
    assert (await organizations_of(api, member))[org_id]["role"] == "admin"


async def test_create_calendar(database_url: str, cli_user: dict[str, Any]) -> None:
    made = one_object(
        run_admin(database_url, "create-calendar", "--email", cli_user["email"], "--name", "Work"),
        {"calendar_id"},
    )
    assert is_id(made["calendar_id"], "cal"), made
    assert made["calendar_id"] != cli_user["calendar_id"]
    conn = await asyncpg.connect(database_url)
    try:
        row = await conn.fetchrow(
            "SELECT u.email, c.name, c.is_default FROM calendars c JOIN users u ON u.id = c.user_id"
            " WHERE c.id = $1", made["calendar_id"],
        )
        defaults = await conn.fetchval(
            "SELECT count(*) FROM calendars c JOIN users u ON u.id = c.user_id"
            " WHERE u.email = $1 AND c.is_default", cli_user["email"],
        )
    finally:
        await conn.close()
    assert row is not None
    assert (row["email"], row["name"], row["is_default"]) == (cli_user["email"], "Work", False)
    assert defaults == 1  # still exactly one default calendar


@pytest.mark.slow
async def test_bad_input_exits_non_zero_and_changes_nothing(
    database_url: str, live_server: Any, api: Any, cli_user: dict[str, Any]
) -> None:
    other = live_server.create_user()
    taken = "taken_" + secrets.token_hex(4)
    live_server.admin(_claimed_consumer, taken, other.email)
    handle = "taken-" + secrets.token_hex(4)
    org = one_object(
        run_admin(database_url, "create-organization", "--name", "Taken", "--owner", other.email,
                  "--handle", handle),
        {"organization_id"},
    )["organization_id"]
    unknown = email("nobody")
    me = cli_user["email"]

    cases: list[tuple[str, ...]] = [
        # The same address again, in another case: emails are case-insensitive.
        ("create-user", "--email", me),
        ("create-user", "--email", me.upper(), "--name", "Impostor"),
        ("create-user", "--email", email("tz"), "--timezone", "Mars/Olympus_Mons"),
        ("create-user", "--email", "not-an-email"),
        ("create-key", "--email", unknown),
        ("create-consumer", "--name", "has spaces"),
        ("create-consumer", "--name", taken),
        ("claim-consumer", "--name", "missing_" + secrets.token_hex(4), "--email", me),
        ("claim-consumer", "--name", taken, "--email", me),  # another user's consumer
        ("claim-consumer", "--name", taken, "--email", unknown),
        ("create-organization", "--name", "Orphan", "--owner", unknown),
        ("create-organization", "--name", "Copycat", "--owner", me, "--handle", handle),
        ("add-member", "--organization", org, "--email", me, "--role", "superuser"),
        ("add-member", "--organization", org, "--email", unknown, "--role", "member"),
        ("add-member", "--organization", "org_" + "0" * 32, "--email", me, "--role", "member"),
        ("add-member", "--organization", "not-an-org", "--email", me, "--role", "member"),
        # A user stays the owner of their own default organization.
        ("add-member", "--organization", cli_user["organization_id"], "--email", me,
         "--role", "member"),
        ("create-calendar", "--email", unknown, "--name", "Ghost"),
        ("create-calendar", "--email", me, "--name", "   "),
        ("list-keys", "--email", unknown),
        ("revoke-key", "--key-id", "key_" + "0" * 32),  # no such key
        ("revoke-key", "--key-id", "not-a-key-id"),
        ("revoke-key", "--api-key", "kal_" + secrets.token_urlsafe(32)),  # no such key
        ("revoke-key",),  # which key?
        ("revoke-key", "--key-id", "key_" + "0" * 32, "--api-key", cli_user["api_key"]),
    ]
    before = await snapshot(database_url)
    results = run_many(database_url, cases)
    after = await snapshot(database_url)

    for proc in results:
        no_object(proc)
    assert after == before

    # The duplicate create-user left exactly one user, and only the first key works for it.
    conn = await asyncpg.connect(database_url)
    try:
        assert await conn.fetchval("SELECT count(*) FROM users WHERE email = $1", me) == 1
    finally:
        await conn.close()
    orgs = await organizations_of(api, as_user(cli_user))
    assert [o["id"] for o in orgs.values() if o["is_default"]] == [cli_user["organization_id"]]
    assert orgs[cli_user["organization_id"]]["role"] == "owner"
    assert org not in orgs  # no membership was added by the failed calls


# ---------------------------------------------------------------------------
# API keys: listed, and revoked, without the key on the command line.

LISTED_KEY = {"key_id", "prefix", "consumer", "created_at", "last_used_at", "revoked_at"}
REVOKED = {"key_id", "revoked_at"}
UTC_TEXT = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")


def listed_keys(database_url: str, address: str) -> list[dict[str, Any]]:
    """`list-keys --email`: each key's fields, its ID and its timestamps as RFC 3339 UTC."""
    proc = run_admin(database_url, "list-keys", "--email", address)
    keys: list[dict[str, Any]] = one_object(proc, {"keys"})["keys"]
    for key in keys:
        assert set(key) == LISTED_KEY, key
        assert is_id(key["key_id"], "key"), key
        assert UTC_TEXT.match(key["created_at"]), key
        for field in ("last_used_at", "revoked_at"):
            assert key[field] is None or UTC_TEXT.match(key[field]), key
    return keys


def at(text: str) -> datetime:
    return datetime.fromisoformat(text)


async def set_last_used(database_url: str, key: str, ago: timedelta) -> datetime:
    """Make the key last used `ago` before now (whole seconds, as listed)."""
    conn = await asyncpg.connect(database_url)
    try:
        value: datetime = await conn.fetchval(
            "UPDATE api_keys SET last_used_at = date_trunc('second', now() - $2::interval)"
            " WHERE key_hash = $1 RETURNING last_used_at", hash_key(key), ago)
    finally:
        await conn.close()
    return value


def last_used(database_url: str, address: str) -> str | None:
    [key] = listed_keys(database_url, address)
    used: str | None = key["last_used_at"]
    return used


@pytest.mark.slow
async def test_list_keys_shows_every_key_of_the_user_and_no_secret(database_url: str) -> None:
    address = email("keys")
    created = one_object(run_admin(database_url, "create-user", "--email", address),
                         CREATE_USER_KEYS)
    made = [created["api_key"]]
    for _ in range(2):  # one after the other: their order is their creation's
        made.append(one_object(run_admin(database_url, "create-key", "--email", address),
                               KEY_KEYS)["api_key"])
    # A consumer of the user's own, claimed: its keys are theirs too.
    service = "svc_" + secrets.token_hex(5)
    made.append(one_object(run_admin(database_url, "create-consumer", "--name", service),
                           KEY_KEYS)["api_key"])
    one_object(run_admin(database_url, "claim-consumer", "--name", service, "--email", address),
               {"consumer", "email"})

    proc = run_admin(database_url, "list-keys", "--email", address.upper())
    keys = listed_keys(database_url, address)
    assert orjson.loads(proc.stdout)["keys"] == keys
    assert [k["consumer"] for k in keys] == [created["consumer"]] * 3 + [service]
    assert len({k["key_id"] for k in keys}) == 4
    # The first characters of each key, never more: never the key, never its hash.
    for key, shown in zip(made, keys, strict=True):
        assert shown["prefix"].startswith("kal_") and 8 <= len(shown["prefix"]) <= 12, shown
        assert key.startswith(shown["prefix"]), (key, shown)
        assert key.encode() not in proc.stdout
        assert hash_key(key).hex().encode() not in proc.stdout
    created_at = [at(k["created_at"]) for k in keys]
    assert created_at == sorted(created_at)
    assert all(k["last_used_at"] is None and k["revoked_at"] is None for k in keys), keys


@pytest.mark.slow
async def test_last_used_at_is_written_at_most_once_a_minute(
    database_url: str, live_server: Any, api: Any
) -> None:
    from db import accounts as store

    address = email("used")
    created = one_object(run_admin(database_url, "create-user", "--email", address),
                         CREATE_USER_KEYS)
    user = as_user(created)
    assert last_used(database_url, address) is None

    before = datetime.now(UTC).replace(microsecond=0)
    status, body, _ = await api.get("/v1/profiles", user)
    assert status == 200, body
    first = last_used(database_url, address)
    assert first is not None and before <= at(first) <= datetime.now(UTC), first

    # Used again within the minute: not written again.
    recent = await set_last_used(database_url, user.api_key, timedelta(seconds=30))
    assert (await api.get("/v1/profiles", user))[0] == 200
    assert at(last_used(database_url, address) or "") == recent
    # A minute later it is.
    stale = await set_last_used(database_url, user.api_key, timedelta(minutes=2))
    assert (await api.get("/v1/profiles", user))[0] == 200
    assert at(last_used(database_url, address) or "") > stale
    # The lookup without a rate-limit charge (KALENDS_RATE_LIMIT=off) writes it too.
    stale = await set_last_used(database_url, user.api_key, timedelta(minutes=2))
    assert live_server.call(store.key_owner(live_server.db, hash_key(user.api_key)))
    assert at(last_used(database_url, address) or "") > stale

    # The key's row locked by someone else (a revocation, a GraphQL socket's reservation):
    # the request does not wait for it, and the write is left for a later one.
    stale = await set_last_used(database_url, user.api_key, timedelta(minutes=2))
    conn = await asyncpg.connect(database_url)
    try:
        async with conn.transaction():
            await conn.execute("SELECT 1 FROM api_keys WHERE key_hash = $1 FOR NO KEY UPDATE",
                               hash_key(user.api_key))
            status, body, _ = await asyncio.wait_for(api.get("/v1/profiles", user), 10)
            assert status == 200, body
    finally:
        await conn.close()
    assert at(last_used(database_url, address) or "") == stale


@pytest.mark.slow
async def test_revoke_key_by_id_or_from_stdin(database_url: str, api: Any) -> None:
    address = email("revoke")
    created = one_object(run_admin(database_url, "create-user", "--email", address),
                         CREATE_USER_KEYS)
    made = [created["api_key"]] + [
        one_object(run_admin(database_url, "create-key", "--email", address),
                   KEY_KEYS)["api_key"] for _ in range(2)]
    first, by_id, by_stdin = made
    ids = [k["key_id"] for k in listed_keys(database_url, address)]

    # By ID (matched case-insensitively), as list-keys shows it.
    revoked = one_object(run_admin(database_url, "revoke-key", "--key-id", ids[1].upper()),
                         REVOKED)
    assert revoked["key_id"] == ids[1] and UTC_TEXT.match(revoked["revoked_at"]), revoked
    status, body, _ = await api.get("/v1/profiles", as_user(created, by_id))
    assert_error(status, body, 401, "not_authenticated")
    assert (await api.get("/v1/profiles", as_user(created, first)))[0] == 200
    # Again: nothing changes, and it says when it was revoked.
    assert one_object(run_admin(database_url, "revoke-key", "--key-id", ids[1]),
                      REVOKED) == revoked

    # The key itself, read from standard input.
    from_stdin = one_object(run_admin(database_url, "revoke-key", "--api-key", "-",
                                      stdin=by_stdin.encode() + b"\n"), REVOKED)
    assert from_stdin["key_id"] == ids[2], from_stdin
    status, body, _ = await api.get("/v1/profiles", as_user(created, by_stdin))
    assert_error(status, body, 401, "not_authenticated")
    assert one_object(run_admin(database_url, "revoke-key", "--api-key", "-",
                                stdin=by_stdin.encode()), REVOKED) == from_stdin
    # And still on the command line, for scripts written before.
    on_line = one_object(run_admin(database_url, "revoke-key", "--api-key", first), REVOKED)
    assert on_line["key_id"] == ids[0], on_line
    status, body, _ = await api.get("/v1/profiles", as_user(created, first))
    assert_error(status, body, 401, "not_authenticated")

    keys = listed_keys(database_url, address)
    assert [k["revoked_at"] for k in keys] == [
        on_line["revoked_at"], revoked["revoked_at"], from_stdin["revoked_at"]]


@pytest.mark.slow
def test_revoke_key_refusals_are_json_errors(database_url: str) -> None:
    unknown = "key_" + secrets.token_hex(16)
    cases = {
        (("revoke-key", "--key-id", unknown), None): unknown,
        (("revoke-key", "--key-id", "nope"), None): "--key-id",
        (("revoke-key", "--api-key", "-"), b""): "standard input",
        (("revoke-key", "--api-key", "-"), b"kal_unknown\n"): "no API key",
        (("list-keys", "--email", email("nobody")), None): "no user",
    }
    for (args, stdin), words in cases.items():
        proc = run_admin(database_url, *args, stdin=stdin)
        no_object(proc)
        assert proc.returncode == 1, (args, proc.stderr)
        error = orjson.loads(proc.stderr)
        assert set(error) == {"error"} and words in error["error"], (args, error)


async def _claimed_consumer(db: Any, name: str, owner_email: str) -> dict[str, Any]:
    from domain import accounts

    await accounts.create_consumer(db, name)
    return await accounts.claim_consumer(db, name, owner_email)


# ---------------------------------------------------------------------------
# First-hour mistakes: each stops the command with one line naming the problem, exit 2.

PASSWORD = "pw-" + secrets.token_hex(4)
"""In every DATABASE_URL below: it must never reach the output."""


def run_kalends(args: Sequence[str], env: dict[str, str], **options: Any
                ) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "kalends", *args], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **options)


def one_line(proc: subprocess.CompletedProcess[bytes], *names: str) -> str:
    """Exit 2, nothing on stdout, and exactly one line on stderr naming `names`: no
    traceback, no "serving" log line first."""
    stderr = proc.stderr.decode()
    assert proc.returncode == 2, (proc.args, proc.returncode, stderr)
    assert proc.stdout == b"", (proc.args, proc.stdout)
    [line] = stderr.splitlines() or [""]
    assert line.startswith("kalends: "), (proc.args, stderr)
    for name in names:
        assert name in line, (proc.args, name, line)
    assert PASSWORD not in line, line
    return line


COMMANDS = ("serve", "migrate", "admin")


def command(name: str) -> tuple[str, ...]:
    """The arguments of one run of `name`; each serve its own port, since they run side by side."""
    if name == "serve":
        return ("serve", "--port", str(free_port()))
    if name == "migrate":
        return ("migrate",)
    return ("admin", "create-user", "--email", "first-hour@example.com")


@pytest.mark.slow
def test_database_url_unreachable_or_malformed(database_url: str, tmp_path: Path) -> None:
    refused = free_port()
    missing = "kalends_missing_" + secrets.token_hex(4)
    cases: dict[str, tuple[str, tuple[str, ...]]] = {
        "refused": (f"postgresql://kalends:{PASSWORD}@127.0.0.1:{refused}/kalends",
                    ("DATABASE_URL", f"127.0.0.1:{refused}", "Connection refused")),
        "unresolvable": (f"postgresql://kalends:{PASSWORD}@db.kalends.invalid/kalends",
                         ("DATABASE_URL", "db.kalends.invalid", "does not resolve")),
        # The server answers, and refuses.
        "no such database": (urlunsplit(urlsplit(database_url)._replace(path="/" + missing)),
                             ("DATABASE_URL", f'database "{missing}" does not exist')),
        "port": (f"postgresql://kalends:{PASSWORD}@127.0.0.1:fivefourthreetwo/kalends",
                 ("DATABASE_URL is not valid", "port")),
        "sslmode": (f"postgresql://kalends:{PASSWORD}@127.0.0.1/kalends?sslmode=always",
                    ("DATABASE_URL is not valid", "sslmode")),
        # Unencoded, the driver reads part of the password as the host name.
        "@ in password": (f"postgresql://kalends:{PASSWORD}@x@127.0.0.1/kalends",
                          ("DATABASE_URL is not valid", "percent-encoded")),
        "/ in password": (f"postgresql://kalends:{PASSWORD}/x@127.0.0.1/kalends",
                          ("DATABASE_URL is not valid", "percent-encoded")),
        # The driver's message and its hint (no ~/.postgresql/root.crt), on one line.
        "certificate": (f"postgresql://kalends:{PASSWORD}@127.0.0.1/kalends?sslmode=verify-full",
                        ("DATABASE_URL is not valid", "root.crt", "HINT")),
        "certificate file": (f"postgresql://kalends:{PASSWORD}@127.0.0.1/kalends?"
                             f"sslmode=verify-full&sslrootcert={tmp_path}/missing.crt",
                             ("DATABASE_URL", f"{tmp_path}/missing.crt", "No such file")),
        "scheme": (f"mysql://kalends:{PASSWORD}@127.0.0.1/kalends",
                   ("DATABASE_URL is not valid",)),
    }
    # Each command on the first three; the rest are read by the same code.
    runs = [(case, name) for i, case in enumerate(cases)
            for name in (COMMANDS if i < 3 else ("migrate",))]
    procs = [
        run_kalends(command(name), {**_env(cases[case][0]), "HOME": str(tmp_path / "home"),
                                    "KALENDS_DATA_DIR": str(tmp_path / "data")})
        for case, name in runs
    ]
    for (case, _), proc in zip(runs, finish(procs), strict=True):
        one_line(proc, *cases[case][1])


@pytest.mark.slow
def test_port_in_use_or_host_unresolvable(tmp_path: Path) -> None:
    """Refused before the embedded database starts: nothing to wait for, nothing to undo."""
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update(KALENDS_DATA_DIR=str(tmp_path / "data"), PYTHONUNBUFFERED="1")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        results = finish([
            run_kalends(("serve", "--port", port), env),
            run_kalends(("serve", "--port", port, "--workers", "2"), env),
            run_kalends(("serve", "--host", "kalends.invalid", "--port", port), env),
        ])
    one_line(results[0], f"127.0.0.1:{port}", "Address already in use")
    one_line(results[1], f"127.0.0.1:{port}", "Address already in use")
    one_line(results[2], "kalends.invalid", "--host", "does not resolve")
    assert not (tmp_path / "data").exists()


@pytest.mark.slow
def test_unusable_data_dir(database_url: str, data_dir: Path) -> None:
    a_file = data_dir / "a-file"
    a_file.write_text("not a directory\n")
    cases: list[tuple[Path, tuple[str, ...]]] = [
        (a_file, ("is a file",)),
        (a_file / "data", ("cannot be created", "Not a directory")),
    ]
    if Path("/proc/1").is_dir():
        # Not writable even by root (who writes anywhere else).
        cases.append((Path("/proc/1"), ("is not writable",)))
    if os.geteuid() != 0:
        read_only = data_dir / "read-only"
        read_only.mkdir(mode=0o555)
        cases += [(read_only, ("is not writable",)),
                  (read_only / "data", ("cannot be created", "Permission denied"))]
    base = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    runs = [(case, name) for case in range(len(cases)) for name in COMMANDS]
    procs = [run_kalends(command(name), {**base, "KALENDS_DATA_DIR": str(cases[case][0])})
             for case, name in runs]
    # With DATABASE_URL too, serve keeps its key file (connected accounts' secrets) there.
    with_database = {**_env(database_url), "KALENDS_DATA_DIR": str(a_file)}
    with_database.pop("KALENDS_SECRET_KEY", None)
    procs.append(run_kalends(command("serve"), with_database))
    *results, served = finish(procs)
    for (case, _), proc in zip(runs, results, strict=True):
        path, names = cases[case]
        one_line(proc, f"data directory {path} (KALENDS_DATA_DIR)", *names)
    one_line(served, f"data directory {a_file} (KALENDS_DATA_DIR)", "is a file")
    assert a_file.read_text() == "not a directory\n"


# ---------------------------------------------------------------------------
# Help and version


def _subcommands(parser: Any) -> dict[str, Any]:
    """The parser's own subcommands, by name (argparse keeps no public list)."""
    [action] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def _listed(help_text: str) -> dict[str, str]:
    """Each subcommand a -h lists, with its description: `    name  text`, or a long name
    alone on its line with the text on the next, indented further."""
    lines = help_text.splitlines()
    listed: dict[str, str] = {}
    for i, line in enumerate(lines):
        match = re.match(r"^    (\S+)(?: +(\S.*))?$", line)
        if match:
            following = lines[i + 1] if i + 1 < len(lines) else ""
            listed[match[1]] = match[2] or (following.strip() if following.startswith(" " * 6)
                                            else "")
    return listed


def test_help_describes_every_command_and_option() -> None:
    from kalends.service.cli import _parser

    parser = _parser()
    commands = _subcommands(parser)
    admin = _subcommands(commands["admin"])
    assert len(admin) >= 15, sorted(admin)
    results = finish([run_kalends(("-h",), dict(os.environ)),
                      run_kalends(("admin", "-h"), dict(os.environ))])
    for proc, expected in zip(results, (commands, admin), strict=True):
        assert proc.returncode == 0, proc.stderr.decode()
        listed = _listed(proc.stdout.decode())
        assert set(listed) == set(expected), proc.stdout.decode()
        undescribed = [name for name, text in listed.items() if len(text) < 10]
        assert not undescribed, proc.stdout.decode()

    # Every option of every command says what it is, and, when it may be left out,
    # what it is then.
    for name, sub in [*commands.items(), *(("admin " + n, c) for n, c in admin.items())]:
        assert sub.description, name
        entries = _options(sub.format_help())
        for action in sub._actions:
            if action.dest == "help" or action.help == argparse.SUPPRESS \
                    or not action.option_strings:
                continue
            assert action.help and len(action.help) >= 8, (name, action.option_strings)
            entry = entries[action.option_strings[0]]
            if not action.required:
                assert "(default:" in entry, (name, action.option_strings, entry)
    serve = _options(commands["serve"].format_help())
    assert serve["--host"].endswith("(default: 127.0.0.1)"), serve
    assert serve["--port"].endswith("(default: 8080)"), serve
    assert serve["--workers"].endswith("(default: 1)"), serve


def _options(help_text: str) -> dict[str, str]:
    """Each option's help in a -h, by its first spelling, on one line."""
    entries: dict[str, list[str]] = {}
    current: list[str] = []
    for line in help_text.splitlines():
        match = re.match(r"^  (-[^\s,]+)[^ ]*(?: [A-Z_]+)?(.*)$", line)
        if match:
            current = entries.setdefault(match[1], [])
            current.append(match[2])
        elif line.startswith("   ") and current:
            current.append(line)
        else:
            current = []
    return {option: " ".join(" ".join(parts).split()) for option, parts in entries.items()}


def test_version() -> None:
    [proc] = finish([run_kalends(("--version",), dict(os.environ))])
    assert proc.returncode == 0, proc.stderr.decode()
    assert proc.stdout.decode() == f"kalends {importlib.metadata.version('kalends')}\n"
