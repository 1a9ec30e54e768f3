"""The `kalends` command (docs/operations.md, "Operator commands, backup and restore")."""

from __future__ import annotations

import argparse
import asyncio
import atexit
import errno
import gc
import getpass
import importlib.metadata
import logging
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import asyncpg
import orjson

from core.errors import AdminError
from db import backup, embedded
from db.database import Database
from db.migrate import migrate
from domain import accounts, config, instance_secrets
from domain.connected import admin as connected_admin
from domain.connected import engine as connected_engine
from domain.connected.provider import PROVIDERS
from domain.oauth import keys as oauth_keys
from kalends.service import logs


class _CannotStart(Exception):
    """What stops a command before it does anything (a database it cannot reach, a
    port it cannot listen on): one line for the operator, and exit status 2."""


@contextmanager
def _database(url: str | None, *, keep: bool = False) -> Iterator[str]:
    """`url` (DATABASE_URL) when set, once it answers; else the embedded server,
    stopped on the way out unless another process (a running `serve`) still holds
    it. `keep`: this process owns the server while it runs, and starts it again if
    it stops."""
    if url:
        asyncio.run(_reach(url))
        yield url
        return
    base = embedded.usable_data_dir()
    if keep:
        embedded.become_subreaper()
    elif not embedded.running(base):
        # Most often a different KALENDS_DATA_DIR from the running server's: the
        # command would quietly work on a database no server reads.
        sys.stderr.write(
            f"kalends: no server is running on the data directory {base} "
            "(KALENDS_DATA_DIR); this command started its database on its own, and a "
            "`kalends serve` using another data directory will not see the change.\n")
    dsn, server = embedded.start(base)
    try:
        if keep:
            with embedded.Keeper(server, on_restart=_count_restart):
                yield dsn
        else:
            yield dsn
    finally:
        embedded.stop(server)


# Seconds DATABASE_URL gets to answer before a command gives up on it.
_CONNECT_TIMEOUT = 15
MIN_SERVER = 15
"""The oldest PostgreSQL major version Kalends runs on (and restores backups to)."""


async def _reach(url: str) -> None:
    """Connect once to DATABASE_URL, so that a database that is not there (or a URL
    the driver cannot read) stops the command with one line, not a traceback from
    deep inside migrations or the first request."""
    try:
        connection = await asyncpg.connect(url, timeout=_CONNECT_TIMEOUT)
    except asyncpg.ClientConfigurationError as exc:
        # Its messages name a parameter (sslmode, a certificate file, ...); the
        # password was kept out of them by config's check.
        raise _CannotStart("invalid configuration: DATABASE_URL is not valid: "
                           + " ".join(str(exc).split())) from None  # its HINT on the same line
    except (OSError, asyncpg.PostgresError) as exc:
        # OSError: refused, unreachable, unresolvable, timed out, TLS refused or not
        # verified (a ValueError too, hence first); PostgresError: the server's
        # refusal (password, role, database, pg_hba.conf).
        raise _CannotStart(f"cannot connect to the database at {_where(url)} "
                           f"(DATABASE_URL): {_why(exc, url)}") from None
    except ValueError:
        # int() of a port: its message would quote the text (perhaps a piece of a
        # password), not name the problem.
        raise _CannotStart("invalid configuration: DATABASE_URL is not valid: a port in it "
                           "(or in PGPORT) is not a number") from None
    version = connection.get_server_version()
    await connection.close()
    if version.major < MIN_SERVER:  # docs/operations.md: the servers Kalends supports
        raise _CannotStart(f"the database at {_where(url)} (DATABASE_URL) runs PostgreSQL "
                           f"{version.major}; Kalends needs {MIN_SERVER} or later")


def _where(url: str) -> str:
    """The host(s) and port(s) of a database URL, never its user name or password."""
    parts = urlsplit(url)
    hosts = parts.netloc.rpartition("@")[2] or dict(parse_qsl(parts.query)).get("host")
    return hosts or "localhost"


def _why(exc: BaseException, url: str) -> str:
    if isinstance(exc, TimeoutError):
        return f"no answer within {_CONNECT_TIMEOUT} seconds"
    if isinstance(exc, socket.gaierror):
        return f"the host name does not resolve ({exc.strerror})"
    if isinstance(exc, ssl.SSLError):  # its errno is OpenSSL's, not the system's
        return str(exc)
    if isinstance(exc, (FileNotFoundError, PermissionError)):
        # The driver reads the files the URL names without saying which one failed.
        files = [f"{name}={value}" for name, value in parse_qsl(urlsplit(url).query)
                 if name in ("sslrootcert", "sslcert", "sslkey", "sslcrl", "passfile")]
        if files:
            return f"{exc.strerror} ({', '.join(files)})"
    if isinstance(exc, OSError) and exc.errno and exc.errno > 0:
        # asyncio's own text ("Connect call failed ...") hides the reason.
        return os.strerror(exc.errno)
    return str(exc) or type(exc).__name__


def _count_restart() -> None:
    from web import metrics

    metrics.embedded_db_restarted()


def _exit_on_sigterm() -> None:
    # Python runs no exit handler on SIGTERM by default; exiting normally lets
    # the embedded database's cleanup run.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))


_stop_requested = False
# Seconds in-flight requests get to finish, once while draining, once after.
_SHUTDOWN_TIMEOUT = 30


class _Stop:
    """The stop signals this process has received, for its log: a line for each
    (written at the next safe point, never from inside a signal handler, where a
    write to stderr could interrupt another), and one once the service has
    stopped, timed from the first signal."""

    def __init__(self) -> None:
        self.first: tuple[str, float] | None = None
        self.exiting = False
        """GracefulExit has been raised: run_app is stopping, and must not be
        interrupted by another (it would escape its shutdown)."""
        self._pending: list[str] = []
        self._logged = 0

    def received(self, signum: int) -> None:
        """Note a signal; safe inside a signal handler (no I/O)."""
        name = signal.Signals(signum).name
        if self.first is None:
            self.first = (name, time.monotonic())
        self._pending.append(name)

    def log(self) -> None:
        """A line for each signal noted since the last call."""
        while self._pending:
            extra: dict[str, Any] = {"signal": self._pending.pop(0), "pid": os.getpid()}
            if self._logged:
                extra["again"] = True
            _LOG.info("stop signal received", extra=extra)
            self._logged += 1

    def stopped(self) -> None:
        self.log()
        extra: dict[str, Any] = {"pid": os.getpid()}
        if self.first is not None:
            extra["signal"] = self.first[0]
            extra["seconds"] = round(time.monotonic() - self.first[1], 3)
        _LOG.info("stopped", extra=extra)


_LOG = logging.getLogger("kalends")
_STOP = _Stop()


def _defer_stop_signals(*, ignore_sigint: bool = False) -> None:
    """While `serve` starts, remember a SIGTERM/SIGINT instead of raising in the
    middle of library code (file locks, pg_ctl, asyncio teardown); it is acted
    on at the next safe point. `ignore_sigint`: a `--workers` child, which its
    supervisor stops with SIGTERM (Ctrl-C reaches the whole process group, and
    each process must be told once)."""

    def request_stop(signum: int, _frame: Any) -> None:
        global _stop_requested
        _stop_requested = True
        _STOP.received(signum)

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN if ignore_sigint else request_stop)


def _serve(args: argparse.Namespace) -> int:
    code = _serve_until_stopped(args)
    # After the database too: the process has nothing left to stop.
    _STOP.stopped()
    return code


def _serve_until_stopped(args: argparse.Namespace) -> int:
    from aiohttp import web

    _defer_stop_signals(ignore_sigint=args.child)
    logs.configure()
    if args.workers > 1 and not args.child:
        _share_metrics()
    settings = _settings()
    # Bound before anything starts: a port in use or a host that does not resolve
    # stops serve at once, with nothing to undo. Not yet listening: until the
    # service is up, a connection is refused rather than left waiting.
    sockets = _bind(args.host, args.port, reuse_port=args.child)
    if args.workers > 1:
        for sock in sockets:  # each worker binds the port itself (SO_REUSEPORT)
            sock.close()
    _vault_settings(settings)
    with _database(settings.database_url, keep=True) as dsn:
        if not args.child:
            asyncio.run(migrate(dsn))
        if _stop_requested:
            _STOP.log()
            return 0
        if args.workers > 1:
            return _supervise(args, dsn)
        from kalends.service.app import create_app

        app = create_app(dsn, settings=settings)
        url = f"http://{args.host}:{args.port}"

        async def start(app: web.Application) -> None:
            # run_app has installed its own handlers by now; a stop requested
            # before that is honoured here, before the port opens.
            if _stop_requested:
                _STOP.log()
                raise web.GracefulExit
            # SIGTERM (an orchestrator's stop) and SIGINT (Ctrl-C) drain first; a
            # second one stops at once. A `--workers` child leaves SIGINT to its
            # supervisor, which stops it with one SIGTERM.
            loop = asyncio.get_running_loop()
            loop.add_signal_handler(signal.SIGTERM, _stop_signal, app, signal.SIGTERM)
            if args.child:
                loop.add_signal_handler(signal.SIGINT, lambda: None)
            else:
                loop.add_signal_handler(signal.SIGINT, _stop_signal, app, signal.SIGINT)
            # What start-up built (modules, the schema, compiled plans) lives as long as
            # the process: left out of the cyclic collector's full passes, which a
            # request allocating hundreds of objects (an agenda) otherwise triggers.
            gc.freeze()
            logging.getLogger("kalends").info("serving", extra={"url": url, "pid": os.getpid()})

        app.on_startup.append(start)
        _listen(sockets, args.host, args.port)
        web.run_app(
            app, sock=sockets, access_log=None, shutdown_timeout=_SHUTDOWN_TIMEOUT, print=None,
        )
        # run_app restored the default handlers; a second SIGTERM must not cut
        # short the database's shutdown below.
        _defer_stop_signals(ignore_sigint=args.child)
        _STOP.log()
    return 0


def _bind(host: str, port: int, *, reuse_port: bool) -> list[socket.socket]:
    """Sockets bound to every address `host` resolves to, as aiohttp's own binding
    (asyncio's `create_server`) makes them; or `_CannotStart` naming the problem."""
    try:
        addresses = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                       flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise _CannotStart(f"cannot listen on {host}:{port} (--host): the host name does not "
                           f"resolve ({exc.strerror})") from None
    sockets: list[socket.socket] = []
    refusals: list[OSError] = []
    for family, kind, proto, _, address in dict.fromkeys(addresses):
        try:
            sock = socket.socket(family, kind, proto)
        except OSError:
            continue  # a family this machine lacks (IPv6 disabled): skipped, as asyncio does
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if reuse_port:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
        except OSError as exc:
            sock.close()
            refusals.append(exc)
            continue
        sockets.append(sock)
    # As asyncio: an address that cannot be assigned (its family not enabled) is
    # skipped when another one binds; any other refusal stops the start.
    fatal = [exc for exc in refusals if exc.errno != errno.EADDRNOTAVAIL or not sockets]
    if fatal or not sockets:
        for sock in sockets:
            sock.close()
        reason = fatal[0].strerror if fatal else "no usable address"
        raise _CannotStart(f"cannot listen on {host}:{port} (--host, --port): {reason}")
    return sockets


# As aiohttp's default.
_BACKLOG = 128


def _listen(sockets: list[socket.socket], host: str, port: int) -> None:
    try:
        for sock in sockets:
            sock.listen(_BACKLOG)
    except OSError as exc:
        # Bound, yet taken since: another process listens on it already (both of
        # us asked for SO_REUSEADDR, which lets two binds through but one listen).
        raise _CannotStart(f"cannot listen on {host}:{port} (--host, --port): "
                           f"{exc.strerror}") from None


def _stop_signal(app: Any, signum: int) -> None:
    """SIGTERM or SIGINT while serving: the first drains, then stops; the second
    stops at once; any later one is only logged."""
    first = _STOP.first is None
    _STOP.received(signum)
    _STOP.log()
    if first:
        _drain_then_exit(app)
    else:
        _exit_now()


def _exit_now() -> None:
    """Out of the event loop, into run_app's shutdown, once: a second GracefulExit
    would escape that shutdown."""
    from aiohttp import web

    if _STOP.exiting:
        return
    _STOP.exiting = True
    raise web.GracefulExit


def _drain_then_exit(app: Any) -> None:
    from web.services import DRAIN, SETTINGS

    _LOG.info("draining", extra={"pid": os.getpid()})
    drained = asyncio.ensure_future(
        app[DRAIN].drain(app[SETTINGS].drain_seconds, timeout=_SHUTDOWN_TIMEOUT))
    # Cancelled: run_app is already stopping (a second signal).
    drained.add_done_callback(lambda task: None if task.cancelled() else _exit_now())


def _share_metrics() -> None:
    """With `--workers N` every process (this supervisor, which counts embedded
    database restarts, and its children) writes its metrics to one directory, and
    any child's /metrics adds them all up. Set before prometheus_client is first
    imported; fresh each start, since files left by an earlier run would count again."""
    metrics_dir = tempfile.mkdtemp(prefix="kalends-metrics-")
    atexit.register(shutil.rmtree, metrics_dir, ignore_errors=True)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir


def _supervise(args: argparse.Namespace, dsn: str) -> int:
    """N single-process servers sharing the port through SO_REUSEPORT."""
    env = {**os.environ, "DATABASE_URL": dsn}
    command = [sys.executable, "-m", "kalends", "serve", "--host", args.host,
               "--port", str(args.port), "--child"]
    children = [subprocess.Popen(command, env=env) for _ in range(args.workers)]
    stopping = False

    def stop_all() -> None:
        # SIGTERM, also for a Ctrl-C: the children ignore SIGINT, which a terminal
        # sends to the whole process group, so that each is told to stop once.
        nonlocal stopping
        stopping = True
        for child in children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)

    def forward(signum: int, _frame: Any = None) -> None:
        _STOP.received(signum)
        stop_all()

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    if _stop_requested:
        stop_all()
    # A worker that dies on its own takes the others down, and the exit status
    # tells whoever runs the supervisor (systemd, a container) to restart it.
    worker_died = False
    while any(child.poll() is None for child in children):
        _STOP.log()
        if not stopping and any(child.poll() is not None for child in children):
            worker_died = True
            stop_all()
        time.sleep(0.2)
    clean = all(child.returncode == 0 for child in children)
    return 0 if clean and not worker_died else 1


def _settings() -> config.Settings:
    """The configuration, or exit 2 with one line naming what is wrong."""
    try:
        return config.load()
    except config.ConfigError as exc:
        sys.stderr.write(f"kalends: invalid configuration: {exc}\n")
        sys.exit(2)


def _database_url() -> str | None:
    """DATABASE_URL for the commands that read no other setting, or exit 2 as `_settings`."""
    try:
        return config.database_url()
    except config.ConfigError as exc:
        sys.stderr.write(f"kalends: invalid configuration: {exc}\n")
        sys.exit(2)


def _vault_settings(settings: config.Settings | None = None) -> config.Settings:
    """The configuration (by default read now), for a command that opens the vault: its
    key file lies in the data directory unless KALENDS_SECRET_KEY is set."""
    settings = settings or _settings()
    if settings.secret_key is None:
        embedded.usable_data_dir()
    return settings


def _worker(args: argparse.Namespace) -> int:
    """Background jobs only: run as many as you like, on any machine."""
    logs.configure()
    settings = _vault_settings()
    with _database(settings.database_url) as dsn:
        asyncio.run(_run_worker(dsn, settings))
    return 0


async def _run_worker(dsn: str, settings: config.Settings) -> None:
    from domain import jobs
    from kalends.service import job_handlers

    await migrate(dsn)
    db = await Database.connect(dsn, min_size=1, max_size=20)
    try:
        async with job_handlers.opened(dsn, settings, db) as handlers:
            worker = jobs.Worker(db, dsn, handlers, settings.job_heartbeat)
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(signum, worker.stop)
            logging.getLogger("kalends").info("worker started", extra={"pid": os.getpid()})
            await worker.run()
    finally:
        await db.close()


def _migrate(args: argparse.Namespace) -> int:
    with _database(_database_url()) as dsn:
        applied = asyncio.run(migrate(dsn))
    _print({"applied": applied})
    return 0


def _admin(action: Callable[[Database, argparse.Namespace], Awaitable[dict[str, Any]]]
           ) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        async def go(dsn: str) -> dict[str, Any]:
            await migrate(dsn)
            db = await Database.connect(dsn, min_size=1, max_size=2)
            try:
                return await action(db, args)
            finally:
                await db.close()

        return _operate(lambda dsn: asyncio.run(go(dsn)))

    return run


def _operate(produce: Callable[[str], dict[str, Any]]) -> int:
    """Run an admin command on the database: its result on stdout, or an operator's
    mistake as one JSON object on stderr and exit status 1."""
    with _database(_database_url()) as dsn:
        try:
            result = produce(dsn)
        except AdminError as exc:
            sys.stderr.buffer.write(orjson.dumps({"error": str(exc)}) + b"\n")
            return 1
    _print(result)
    return 0


def _backup(args: argparse.Namespace) -> int:
    return _operate(lambda dsn: backup.dump(dsn, Path(args.to)))


def _restore(args: argparse.Namespace) -> int:
    def restore(dsn: str) -> dict[str, Any]:
        result = backup.restore(dsn, Path(args.source))
        asyncio.run(migrate(dsn))  # a backup from an older release is brought up to date
        return result

    return _operate(restore)


def _print(obj: dict[str, Any]) -> None:
    sys.stdout.buffer.write(orjson.dumps(obj) + b"\n")
    sys.stdout.flush()


def _bounded(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = low - 1
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"expected a whole number from {low} to {high}")
        return value

    parse.__name__ = "number"
    return parse


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Adds "(default: ...)" to an option's help, except where there is no value to
    show (a required option, a flag) or the help says in words what happens."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.required or action.default is None or action.default is False \
                or "(default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


def _command(sub: Any, name: str, summary: str) -> argparse.ArgumentParser:
    """A subcommand, its one line in the parent's -h and the head of its own."""
    parser: argparse.ArgumentParser = sub.add_parser(
        name, help=summary, description=summary, formatter_class=_HelpFormatter)
    return parser


def _version() -> str:
    try:
        return importlib.metadata.version("kalends")
    except importlib.metadata.PackageNotFoundError:  # run from a checkout never installed
        return "unknown (not installed)"


_EMAIL = "the user's e-mail address (matched case-insensitively)"
_SERVE_DATA = (
    "Where the data is kept: without DATABASE_URL, in an embedded PostgreSQL that serve "
    "starts and stops itself, in the data directory KALENDS_DATA_DIR (default: "
    "/var/lib/kalends as root, else ~/.local/share/kalends, or $XDG_DATA_HOME/kalends when "
    "XDG_DATA_HOME is set; never under /root). Set DATABASE_URL (postgresql://...) to use "
    "an existing PostgreSQL instead. Other settings are environment variables too (see the "
    "README)."
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kalends", description="Kalends scheduling service",
                                     formatter_class=_HelpFormatter)
    parser.add_argument("--version", action="version", version=f"kalends {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = _command(sub, "serve", "run the service (REST, GraphQL and MCP over HTTP)")
    serve.add_argument("--host", default="127.0.0.1",
                       help="address or host name to listen on (0.0.0.0: every interface)")
    serve.add_argument("--port", type=_bounded(1, 65535), default=8080, help="TCP port")
    serve.add_argument("--workers", type=_bounded(1, 64), default=1,
                       help="server processes sharing the port (1 to 64)")
    serve.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    serve.epilog = _SERVE_DATA
    serve.set_defaults(func=_serve)

    _command(sub, "worker", "run background jobs (subscription and calendar sync, attendee "
             "e-mail, webhooks)").set_defaults(func=_worker)

    _command(sub, "migrate", "apply pending migrations").set_defaults(func=_migrate)

    admin = _command(sub, "admin", "operator commands; each prints one JSON object")
    asub = admin.add_subparsers(dest="admin_command", required=True, metavar="COMMAND")

    p = _command(asub, "create-user", "create a user with a default organization, a default "
                 "calendar, a claimed consumer and an API key (shown once)")
    p.add_argument("--email", required=True, help="the new user's e-mail address")
    p.add_argument("--name", help="display name (default: none; the default organization is "
                   "then named after the e-mail address)")
    p.add_argument("--timezone", help="IANA time zone, such as Europe/Berlin, of the user's "
                   "agenda when a request names none (default: none, meaning UTC)")
    p.set_defaults(func=_admin(lambda db, a: accounts.create_user(db, a.email, a.name, a.timezone)))

    p = _command(asub, "create-key", "create another API key for a user's consumer "
                 "(shown once)")
    p.add_argument("--email", required=True, help=_EMAIL)
    p.set_defaults(func=_admin(lambda db, a: accounts.create_key(db, a.email)))

    p = _command(asub, "list-keys", "list a user's API keys, oldest first: ID, first "
                 "characters, consumer, created, last used, revoked (never the key)")
    p.add_argument("--email", required=True, help=_EMAIL)
    p.set_defaults(func=_admin(lambda db, a: accounts.list_keys(db, a.email)))

    p = _command(asub, "revoke-key", "revoke an API key: requests with it are refused from "
                 "now on (one revoked already stays as it was)")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--key-id", metavar="KEY_ID", help="the key's ID, key_... as "
                       "list-keys shows it (default: none; give this or --api-key)")
    which.add_argument("--api-key", metavar="KEY", help="the key itself; '-' reads it from "
                       "stdin, keeping it off the command line, where other users' `ps` "
                       "shows it (default: none; give this or --key-id)")
    p.set_defaults(func=_admin(lambda db, a: accounts.revoke_key(
        db, key_id=a.key_id, api_key=_key_given(a.api_key))))

    p = _command(asub, "create-consumer", "create an unclaimed consumer and its API key "
                 "(unusable until claimed)")
    p.add_argument("--name", required=True,
                   help="consumer name: 1 to 128 letters, digits, '_' or '-'")
    p.set_defaults(func=_admin(lambda db, a: accounts.create_consumer(db, a.name)))

    p = _command(asub, "claim-consumer", "give a consumer (or an OAuth token's subject) to "
                 "a user: its calls act as that user")
    p.add_argument("--name", required=True, help="the consumer's name")
    p.add_argument("--email", required=True, help=_EMAIL)
    p.set_defaults(func=_admin(lambda db, a: accounts.claim_consumer(db, a.name, a.email)))

    p = _command(asub, "create-organization", "create an organization owned by a user")
    p.add_argument("--name", required=True, help="the organization's name")
    p.add_argument("--owner", required=True, metavar="EMAIL", help="its owner's e-mail address")
    p.add_argument("--handle", help="unique handle: 3 to 64 letters, digits, '_', '.' or '-' "
                   "(default: none)")
    p.set_defaults(func=_admin(
        lambda db, a: accounts.create_organization(db, a.name, a.owner, a.handle)))

    p = _command(asub, "add-member", "add a user to an organization, or change their role")
    p.add_argument("--organization", required=True, metavar="ORG_ID",
                   help="the organization's ID (org_...)")
    p.add_argument("--email", required=True, help=_EMAIL)
    p.add_argument("--role", required=True, choices=accounts.ROLES,
                   help="owners and admins administer the organization's profiles")
    p.set_defaults(func=_admin(
        lambda db, a: accounts.add_member(db, a.organization, a.email, a.role)))

    p = _command(asub, "backup", "write the whole database to FILE (pg_dump)")
    p.add_argument("--to", required=True, metavar="FILE",
                   help="the backup file, replaced if it exists; readable by this user only")
    p.set_defaults(func=_backup)

    p = _command(asub, "restore", "replace the whole database with a backup, at once "
                 "(the current contents are saved beside it first)")
    p.add_argument("--from", required=True, metavar="FILE", dest="source",
                   help="a file written by `kalends admin backup`")
    p.set_defaults(func=_restore)

    p = _command(asub, "create-calendar", "create another calendar for a user")
    p.add_argument("--email", required=True, help=_EMAIL)
    p.add_argument("--name", required=True, help="the calendar's name")
    p.set_defaults(func=_admin(lambda db, a: accounts.create_calendar(db, a.email, a.name)))

    p = _command(asub, "connect-calendars", "connect an external account; the secret "
                 "(app-specific password or OAuth refresh token) is read from stdin")
    p.add_argument("--email", required=True, help=_EMAIL)
    p.add_argument("--provider", required=True, choices=PROVIDERS,
                   help="ios: iCloud or any CalDAV server; google: Google Calendar; "
                   "microsoft: Microsoft 365 / Outlook")
    p.add_argument("--url", help="the CalDAV server, for ios only (default: "
                   "KALENDS_CALDAV_URL, else https://caldav.icloud.com)")
    p.add_argument("--username", help="the CalDAV user name, for ios only (default: none; "
                   "ios requires it)")
    p.set_defaults(func=_admin(lambda db, a: connected_admin.connect(
        db, _vault_settings(), a.email, a.provider, a.url, a.username, _read_secret())))

    p = _command(asub, "disconnect-calendars", "remove a connected account, its calendars "
                 "and their synced events, and the copies pushed to it")
    p.add_argument("--account", required=True, metavar="ACCOUNT_ID",
                   help="the connected account's ID (xac_...)")
    p.set_defaults(func=_admin(lambda db, a: connected_admin.disconnect(
        db, _vault_settings(), a.account)))

    p = _command(asub, "sync-calendars", "queue a sync of connected accounts now")
    p.add_argument("--account", metavar="ACCOUNT_ID",
                   help="the connected account's ID, xac_... (default: every account)")
    p.set_defaults(func=_admin(lambda db, a: connected_admin.sync_now(db, a.account)))

    p = _command(asub, "select-calendar", "set whether the agenda includes a connected "
                 "calendar by default")
    p.add_argument("--id", required=True, metavar="CALENDAR_ID",
                   help="the connected calendar's ID (xcal_...)")
    p.add_argument("--selected", required=True, choices=("true", "false"),
                   help="true: the agenda includes it by default; false: it does not")
    p.set_defaults(func=_admin(lambda db, a: connected_admin.select(db, a.id, a.selected)))

    p = _command(asub, "rotate-signing-key", "sign /mcp access tokens with a new key; "
                 "the old one stays published until its tokens have expired")
    p.set_defaults(func=_admin(lambda db, a: oauth_keys.rotate(
        db, connected_engine.open_vault(_vault_settings()))))
    return parser


def _read_secret(prompt: str = "secret: ") -> str:
    """The secret from standard input, never from the command line (where other
    users' `ps` would show it): typed at a prompt without echo, or piped."""
    if sys.stdin.isatty():
        return getpass.getpass(prompt).strip()
    return sys.stdin.readline().strip()


def _key_given(api_key: str | None) -> str | None:
    """`--api-key`'s key: read from standard input for `-`."""
    if api_key != "-":
        return api_key
    key = _read_secret("API key: ")
    if not key:
        raise AdminError("no API key on standard input (--api-key -)")
    return key


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command != "serve":  # serve defers stop signals instead
        _exit_on_sigterm()
    try:
        code: int = args.func(args)
    # SealedWithAnotherKey: found when the service starts.
    except (_CannotStart, embedded.DataDirError, config.ConfigError,
            instance_secrets.SealedWithAnotherKey) as exc:
        sys.stderr.write(f"kalends: {exc}\n")
        return 2
    return code


if __name__ == "__main__":
    sys.exit(main())
