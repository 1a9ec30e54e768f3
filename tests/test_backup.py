"""`kalends admin backup --to FILE` and `restore --from FILE`, run as an operator would.

Most tests use a fresh database of their own through DATABASE_URL; the last one is
the default set-up: the embedded database, with `kalends serve` running on it.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import orjson
import pytest
from conftest import migrated_database
from processes import (
    ROOT,
    Service,
    request,
    service_env,
    start,
)
from test_cli import email, no_object, one_object, run_admin

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


def _quiet(proc: subprocess.CompletedProcess[bytes], keys: set[str]) -> dict[str, object]:
    """Success: one JSON object on stdout and nothing at all on stderr."""
    result = one_object(proc, keys)
    assert proc.stderr == b"", proc.stderr.decode()
    return result


def test_round_trip(dsn: str, tmp_path: Path) -> None:
    before = _user(dsn)
    target = tmp_path / "kalends.dump"
    made = _quiet(run_admin(dsn, "backup", "--to", str(target)), BACKUP)
    assert made["backup"] == str(target) and made["bytes"] == target.stat().st_size > 0
    assert made["database"] == urlsplit(dsn).path.lstrip("/")
    assert [p.name for p in tmp_path.iterdir()] == ["kalends.dump"]  # nothing partial left

    after = _user(dsn)
    restored = _quiet(run_admin(dsn, "restore", "--from", str(target)), RESTORE)
    assert restored["restored"] == str(target)
    assert _exists(dsn, before) and not _exists(dsn, after)

    # What the restore replaced was saved first, and brings the later user back.
    previous = Path(str(restored["previous"]))
    assert previous.parent == tmp_path and previous.name.startswith("kalends.dump.replaced-")
    _quiet(run_admin(dsn, "restore", "--from", str(previous)), RESTORE)
    assert _exists(dsn, before) and _exists(dsn, after)


def test_what_is_not_a_backup_is_refused_and_changes_nothing(dsn: str, tmp_path: Path) -> None:
    first, second = _user(dsn), _user(dsn)
    garbage = tmp_path / "notes.txt"
    garbage.write_text("not a backup\n")
    good = tmp_path / "good.dump"
    _quiet(run_admin(dsn, "backup", "--to", str(good)), BACKUP)
    # A backup cut short (its table of contents whole, its data not): it fails while
    # being read, before anything is replaced.
    truncated = tmp_path / "truncated.dump"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size * 3 // 4])
    third = _user(dsn)

    for source in (garbage, truncated, tmp_path / "missing.dump", tmp_path):
        proc = run_admin(dsn, "restore", "--from", str(source))
        no_object(proc)
        error = orjson.loads(proc.stderr)
        assert set(error) == {"error"} and str(source) in error["error"], error
        assert all(_exists(dsn, who) for who in (first, second, third))


def test_a_failed_backup_leaves_no_partial_file_and_keeps_the_old_one(
    dsn: str, tmp_path: Path
) -> None:
    _user(dsn)
    target = tmp_path / "kalends.dump"
    target.write_bytes(b"an earlier, good backup")
    unreachable = urlunsplit(urlsplit(dsn)._replace(path="/kalends_no_such_database"))
    for database, path in ((unreachable, target), (dsn, tmp_path)):  # no server; a directory
        proc = run_admin(database, "backup", "--to", str(path))
        no_object(proc)
        assert set(orjson.loads(proc.stderr)) == {"error"}
    assert target.read_bytes() == b"an earlier, good backup"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kalends.dump"]
    no_object(run_admin(dsn, "backup", "--to", str(tmp_path / "no" / "such" / "dir.dump")))


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
