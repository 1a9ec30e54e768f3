r"""Backup and restore of the whole database with the embedded server's own
`pg_dump`, `pg_restore` and `psql`, on the embedded server or a `DATABASE_URL`
server of any supported major version (15 and later; the tools are 18).

pg_dump reads every older server. pg_restore, writing a script rather than
talking to the server, starts it with settings of its own version: `SET
transaction_timeout = 0` (PostgreSQL 17), which an older server refuses. A
restore therefore reads which settings the target server has, and drops the
script's opening SETs of any other (they only lift timeouts that server does not
have). The `\restrict` and `\unrestrict` lines of recent releases are psql's
own commands, run by the embedded psql and never sent to the server.

A backup is written beside its target and renamed into place once complete,
so a failed one never leaves a truncated file or replaces a good one. A
restore replaces everything in one transaction: it drops the `public` schema
and loads the archive, and any failure leaves the database as it was. Before
that it saves what it replaces next to the archive, so that nothing is lost
by restoring the wrong file.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from core.errors import AdminError
from db import embedded

# Seconds a tool may take: generous, a backup of a large database is slow.
_TIMEOUT = 3600
# Opens the restore's transaction and empties the schema the archive is loaded
# into, as PostgreSQL creates it. The transaction stays open for the script
# that follows (a BEGIN in a multi-statement string starts a transaction block).
_BEGIN_EMPTY_PUBLIC = (
    "BEGIN;\n"
    "DROP SCHEMA public CASCADE;\n"
    "CREATE SCHEMA public AUTHORIZATION pg_database_owner;\n"
    "GRANT USAGE ON SCHEMA public TO PUBLIC;\n"
)
# What every Kalends database has (`db.migrate`): an archive without it is some
# other database's, and restoring it would wipe this one for nothing.
_KALENDS_TABLE = re.compile(r"^\d+; \d+ \d+ TABLE public schema_migrations ", re.MULTILINE)
# The oldest server supported: what `_BEGIN_EMPTY_PUBLIC` and the migrations use,
# and what the tests run a restore on (tests/pg15.py) beside the embedded 18.
MINIMUM_SERVER = 150000
# The lines pg_restore opens its script with, before the first object: blank
# lines, comments, psql's meta-commands (\restrict), BEGIN, its fixed settings.
_OPENING = re.compile(rb"\s*|--.*|\\.*|BEGIN;\s*|SET .*|SELECT pg_catalog\.set_config\(.*",
                      re.DOTALL)
_SETTING = re.compile(rb"SET (\w+) = ")


def dump(dsn: str, target: Path) -> dict[str, Any]:
    """Write the database to `target` (pg_dump's custom format)."""
    target = target.expanduser().absolute()
    if target.is_dir():  # refused now rather than after a long dump
        raise AdminError(f"{target} is a directory")
    try:
        # mkstemp: readable by this user only, as a backup (key hashes, emails) should be.
        handle, partial = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".partial",
                                           dir=target.parent)
    except OSError as exc:
        raise AdminError(f"cannot write to {target.parent}: {exc.strerror}") from None
    os.close(handle)
    url, env = _client(dsn)
    try:
        _run("pg_dump", "--format=custom", "--file", partial, "--dbname", url, env=env)
        _sync(Path(partial))
        os.replace(partial, target)
        _sync(target.parent)
    except OSError as exc:
        raise AdminError(f"cannot write {target}: {exc.strerror}") from None
    finally:
        Path(partial).unlink(missing_ok=True)  # gone already once renamed
    return {"backup": str(target), "bytes": target.stat().st_size, "database": _name(dsn)}


def restore(dsn: str, source: Path) -> dict[str, Any]:
    """Replace the database's contents with the archive at `source`, at once."""
    source = source.expanduser().absolute()
    if not source.is_file():
        raise AdminError(f"{source} is not a file")
    # Read the archive's table of contents first: a file that is not a Kalends
    # backup is refused before anything is touched.
    contents = _run("pg_restore", "--list", str(source),
                    what=f"{source} is not a Kalends backup")
    if not _KALENDS_TABLE.search(contents):
        raise AdminError(f"{source} is not a Kalends backup: it has no schema_migrations table")
    known = _server_settings(dsn)
    previous = _aside(source)
    dump(dsn, previous)
    _load(dsn, source, known)
    return {"restored": str(source), "previous": str(previous), "database": _name(dsn)}


def _aside(source: Path) -> Path:
    """A new name beside `source` for what a restore replaces; never an earlier one's."""
    stem = f"{source.name}.replaced-{datetime.now(UTC):%Y%m%dT%H%M%SZ}"
    path, n = source.with_name(stem), 1
    while path.exists():  # two restores within a second
        n += 1
        path = source.with_name(f"{stem}-{n}")
    return path


def _server_settings(dsn: str) -> set[str]:
    """The names of the settings the server has; AdminError on a server older than
    Kalends supports, said before anything is touched."""
    url, env = _client(dsn)
    lines = _run("psql", "--no-psqlrc", "--no-align", "--tuples-only", "--command",
                 "SELECT current_setting('server_version_num')", "--command",
                 "SELECT name FROM pg_catalog.pg_settings", "--dbname", url,
                 env=env).splitlines()
    version = int(lines[0])
    if version < MINIMUM_SERVER:
        raise AdminError(f"the server runs PostgreSQL {version // 10000}; Kalends needs "
                         f"{MINIMUM_SERVER // 10000} or later")
    return {line.strip() for line in lines[1:]}


def _load(dsn: str, source: Path, known: set[str]) -> None:
    """pg_restore's SQL relayed to psql, neither held in memory nor on disk.

    psql opens the transaction and empties `public`; the script follows in the same
    transaction, its opening SETs of settings the server lacks (`known` are those it
    has) left out on the way (`_relay`). pg_restore --single-transaction writes its
    COMMIT last, only once it has read the whole archive: if it stops short (a cut
    or damaged file), psql reaches the end of its input with the transaction open,
    and the server rolls it back when psql disconnects. ON_ERROR_STOP makes any
    failing statement do the same. (pg_restore's own BEGIN only draws a warning.)"""
    url, env = _client(dsn)
    with tempfile.TemporaryFile() as read_errors, tempfile.TemporaryFile() as load_errors:
        reader = subprocess.Popen(
            [str(embedded.program("pg_restore")), "--single-transaction", "--no-owner",
             "--no-privileges", "--file", "-", str(source)],
            stdout=subprocess.PIPE, stderr=read_errors, env=env,
        )
        try:
            loader = subprocess.Popen(
                [str(embedded.program("psql")), "--no-psqlrc", "--quiet",
                 "--set", "ON_ERROR_STOP=1", "--command", _BEGIN_EMPTY_PUBLIC,
                 "--file", "-", "--dbname", url],
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=load_errors, env=env,
            )
        except BaseException:
            _end(reader)
            raise
        assert reader.stdout is not None and loader.stdin is not None
        relay = threading.Thread(target=_relay, args=(reader.stdout, loader.stdin, known),
                                 name="restore-relay", daemon=True)
        relay.start()
        try:
            loaded = loader.wait(timeout=_TIMEOUT)
            read = reader.wait(timeout=60)
        except subprocess.TimeoutExpired:
            raise AdminError(f"restoring {source} took too long (over {_TIMEOUT} s)") from None
        finally:
            # Also on an interruption (SIGTERM exits through here): killing psql
            # mid-transaction rolls the transaction back. Either one gone, the
            # relay meets the end of its input or a broken pipe, and ends.
            _end(loader, reader)
            relay.join(timeout=10)
        # psql's error names the statement that failed; pg_restore then only
        # saw its reader go away.
        if loaded != 0:
            raise AdminError(f"{source} cannot be restored: {_reason(load_errors, loaded)}")
        if read != 0:
            raise AdminError(f"{source} cannot be read: {_reason(read_errors, read)}")


def _relay(script: IO[bytes], psql: IO[bytes], known: set[str]) -> None:
    """Copy pg_restore's script to psql, less the opening SETs of settings not
    `known` to the server. The rest goes as it is, in blocks: table data never
    passes the filter. Whichever side stops first, the other sees its pipe close:
    psql the end of its input (and, with no COMMIT, rolls back), pg_restore a
    broken pipe."""
    try:
        for line in script:
            if not _OPENING.fullmatch(line):
                psql.write(line)
                break
            setting = _SETTING.match(line)
            if setting is None or setting[1].decode() in known:
                psql.write(line)
        shutil.copyfileobj(script, psql, 1 << 16)
    except OSError:
        pass  # psql stopped: its own error says why
    finally:
        for pipe in (psql, script):
            with contextlib.suppress(OSError):
                pipe.close()


def _end(*procs: subprocess.Popen[bytes]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _run(program: str, *args: str, what: str | None = None,
         env: dict[str, str] | None = None) -> str:
    try:
        done = subprocess.run(
            [str(embedded.program(program)), *args], capture_output=True, timeout=_TIMEOUT,
            check=False, env=env,
        )
    except subprocess.TimeoutExpired:
        raise AdminError(f"{program} took longer than {_TIMEOUT} s") from None
    if done.returncode != 0:
        reason = _last_error(done.stderr.decode(errors="replace"), done.returncode)
        raise AdminError(f"{what}: {reason}" if what else f"{program} failed: {reason}")
    return done.stdout.decode(errors="replace")


def _reason(stderr: IO[bytes], status: int) -> str:
    stderr.seek(0)
    return _last_error(stderr.read().decode(errors="replace"), status)


def _last_error(stderr: str, status: int) -> str:
    """The line that says what went wrong: the last error, not the DETAIL or
    CONTEXT lines after it, nor a warning."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    failures = [line for line in lines if re.search(r"\b(ERROR|FATAL|error):", line)]
    if failures or lines:
        return (failures or lines)[-1]
    return f"exit status {status}"


def _client(dsn: str) -> tuple[str, dict[str, str]]:
    """The DSN without its password, and an environment carrying it (PGPASSWORD):
    every local user can read a command line (ps), only this user the environment."""
    env = dict(os.environ)
    parts = urlsplit(dsn)
    if parts.scheme not in ("postgres", "postgresql"):
        return dsn, env
    netloc = parts.netloc
    userinfo, at, hosts = netloc.rpartition("@")
    if at and ":" in userinfo:
        user, password = userinfo.split(":", 1)
        netloc = f"{user}@{hosts}"
        if password:
            env["PGPASSWORD"] = unquote(password)
    query = parts.query
    params = parse_qsl(query, keep_blank_values=True)
    if any(key == "password" for key, _ in params):
        env["PGPASSWORD"] = next(value for key, value in params if key == "password")
        query = urlencode([(key, value) for key, value in params if key != "password"])
    return urlunsplit(parts._replace(netloc=netloc, query=query)), env


def _sync(path: Path) -> None:
    """Flush a file, or a directory's entries, to disk."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _name(dsn: str) -> str:
    return unquote(urlsplit(dsn).path.lstrip("/")) or "postgres"
