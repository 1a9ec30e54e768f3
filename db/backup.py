"""Backup and restore of the whole database with the embedded server's own
`pg_dump`, `pg_restore` and `psql` (they also serve a `DATABASE_URL` server of
the same or an older major version).

A backup is written beside its target and renamed into place once complete,
so a failed one never leaves a truncated file or replaces a good one. A
restore replaces everything in one transaction: it drops the `public` schema
and loads the archive, and any failure leaves the database as it was. Before
that it saves what it replaces next to the archive, so that nothing is lost
by restoring the wrong file.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from db import embedded
from kalends.accounts import AdminError

# Seconds a tool may take: generous, a backup of a large database is slow.
_TIMEOUT = 3600
# What the archive's objects are loaded into: the schema as PostgreSQL creates it.
_EMPTY_PUBLIC = (
    "DROP SCHEMA public CASCADE;\n"
    "CREATE SCHEMA public AUTHORIZATION pg_database_owner;\n"
    "GRANT USAGE ON SCHEMA public TO PUBLIC;\n"
)


def dump(dsn: str, target: Path) -> dict[str, Any]:
    """Write the database to `target` (pg_dump's custom format)."""
    target = target.expanduser().absolute()
    try:
        handle, partial = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".partial",
                                           dir=target.parent)
    except OSError as exc:
        raise AdminError(f"cannot write to {target.parent}: {exc.strerror}") from None
    os.close(handle)
    try:
        _run("pg_dump", "--format=custom", "--file", partial, "--dbname", dsn)
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
    # Read the archive's table of contents first: a file that is not a pg_dump
    # archive is refused before anything is touched.
    _run("pg_restore", "--list", str(source), what=f"{source} is not a Kalends backup")
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    previous = source.with_name(f"{source.name}.replaced-{stamp}")
    dump(dsn, previous)
    script = _run("pg_restore", "--no-owner", "--no-privileges", "--file", "-", str(source),
                  what=f"{source} cannot be read")
    # psql -1: the schema's removal and the whole load in one transaction, and
    # ON_ERROR_STOP turns any failure into a rollback.
    _run("psql", "--no-psqlrc", "--quiet", "--single-transaction", "--set", "ON_ERROR_STOP=1",
         "--command", _EMPTY_PUBLIC, "--file", "-", "--dbname", dsn, input=script)
    return {"restored": str(source), "previous": str(previous), "database": _name(dsn)}


def _run(program: str, *args: str, what: str | None = None, input: str | None = None) -> str:
    try:
        done = subprocess.run(
            [str(embedded.program(program)), *args], input=input, capture_output=True,
            text=True, timeout=_TIMEOUT, check=False,
        )
    except subprocess.TimeoutExpired:
        raise AdminError(f"{program} took longer than {_TIMEOUT} s") from None
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        reason = lines[-1] if lines else f"exit status {done.returncode}"
        raise AdminError(f"{what}: {reason}" if what else f"{program} failed: {reason}")
    return done.stdout


def _sync(path: Path) -> None:
    """Flush a file, or a directory's entries, to disk."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _name(dsn: str) -> str:
    return urlsplit(dsn).path.lstrip("/") or "postgres"
