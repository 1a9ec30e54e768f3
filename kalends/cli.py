"""The `kalends` command (contract §7)."""

from __future__ import annotations

import argparse
import asyncio
import atexit
import gc
import getpass
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson

from db import backup, embedded
from db.database import Database
from db.migrate import migrate
from kalends import accounts, config, logs
from kalends.connected import admin as connected_admin
from kalends.connected import engine as connected_engine
from kalends.connected.provider import PROVIDERS
from kalends.oauth import keys as oauth_keys


@contextmanager
def _database(url: str | None, *, keep: bool = False) -> Iterator[str]:
    """`url` (DATABASE_URL) when set; else the embedded server, stopped on the way
    out unless another process (a running `serve`) still holds it. `keep`: this
    process owns the server while it runs, and starts it again if it stops."""
    if url:
        yield url
        return
    if keep:
        embedded.become_subreaper()
    elif not embedded.running():
        # Most often a different KALENDS_DATA_DIR from the running server's: the
        # command would quietly work on a database no server reads.
        sys.stderr.write(
            f"kalends: no server is running on the data directory {embedded.data_dir()} "
            "(KALENDS_DATA_DIR); this command started its database on its own, and a "
            "`kalends serve` using another data directory will not see the change.\n")
    dsn, server = embedded.start()
    try:
        if keep:
            with embedded.Keeper(server, on_restart=_count_restart):
                yield dsn
        else:
            yield dsn
    finally:
        embedded.stop(server)


def _count_restart() -> None:
    from kalends import metrics

    metrics.embedded_db_restarted()


def _exit_on_sigterm() -> None:
    # Python runs no exit handler on SIGTERM by default; exiting normally lets
    # the embedded database's cleanup run.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))


_stop_requested = False
# Seconds in-flight requests get to finish, once while draining, once after.
_SHUTDOWN_TIMEOUT = 30


def _defer_stop_signals() -> None:
    """While `serve` starts, remember a SIGTERM/SIGINT instead of raising in the
    middle of library code (file locks, pg_ctl, asyncio teardown); it is acted
    on at the next safe point."""

    def request_stop(_signum: int, _frame: Any) -> None:
        global _stop_requested
        _stop_requested = True

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)


def _serve(args: argparse.Namespace) -> int:
    from aiohttp import web

    _defer_stop_signals()
    logs.configure()
    if args.workers > 1 and not args.child:
        _share_metrics()
    settings = _settings()
    with _database(settings.database_url, keep=True) as dsn:
        if not args.child:
            asyncio.run(migrate(dsn))
        if _stop_requested:
            return 0
        if args.workers > 1:
            return _supervise(args, dsn)
        from kalends.app import create_app

        app = create_app(dsn, settings=settings)
        url = f"http://{args.host}:{args.port}"

        async def start(app: web.Application) -> None:
            # run_app has installed its own handlers by now; a stop requested
            # before that is honoured here, before the port opens.
            if _stop_requested:
                raise web.GracefulExit
            # SIGTERM (an orchestrator's stop) drains first; SIGINT (Ctrl-C) or
            # a second SIGTERM stops at once, as run_app's handlers do.
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, _drain_then_exit, app)
            # What start-up built (modules, the schema, compiled plans) lives as long as
            # the process: left out of the cyclic collector's full passes, which a
            # request allocating hundreds of objects (an agenda) otherwise triggers.
            gc.freeze()
            logging.getLogger("kalends").info("serving", extra={"url": url, "pid": os.getpid()})

        app.on_startup.append(start)
        web.run_app(
            app, host=args.host, port=args.port, access_log=None,
            reuse_port=args.child or None, shutdown_timeout=_SHUTDOWN_TIMEOUT, print=None,
        )
        # run_app restored the default handlers; a second SIGTERM must not cut
        # short the database's shutdown below.
        _defer_stop_signals()
    return 0


def _drain_then_exit(app: Any) -> None:
    from aiohttp import web

    from kalends.services import DRAIN, SETTINGS

    loop = asyncio.get_running_loop()

    def exit_now() -> None:
        raise web.GracefulExit  # out of the event loop, into run_app's shutdown

    loop.add_signal_handler(signal.SIGTERM, exit_now)
    logging.getLogger("kalends").info("draining", extra={"pid": os.getpid()})
    drained = asyncio.ensure_future(
        app[DRAIN].drain(app[SETTINGS].drain_seconds, timeout=_SHUTDOWN_TIMEOUT))
    # Cancelled: run_app is already stopping (a second signal), and a second
    # GracefulExit would escape its shutdown.
    drained.add_done_callback(lambda task: None if task.cancelled() else exit_now())


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

    def stop_all(signum: int, _frame: Any = None) -> None:
        nonlocal stopping
        stopping = True
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    signal.signal(signal.SIGTERM, stop_all)
    signal.signal(signal.SIGINT, stop_all)
    if _stop_requested:
        stop_all(signal.SIGTERM)
    # A worker that dies on its own takes the others down, and the exit status
    # tells whoever runs the supervisor (systemd, a container) to restart it.
    worker_died = False
    while any(child.poll() is None for child in children):
        if not stopping and any(child.poll() is not None for child in children):
            worker_died = True
            stop_all(signal.SIGTERM)
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


def _worker(args: argparse.Namespace) -> int:
    """Background jobs only: run as many as you like, on any machine."""
    logs.configure()
    settings = _settings()
    with _database(settings.database_url) as dsn:
        asyncio.run(_run_worker(dsn, settings))
    return 0


async def _run_worker(dsn: str, settings: config.Settings) -> None:
    from kalends import jobs
    from kalends.connected.engine import connected_jobs
    from kalends.job_handlers import all_handlers

    await migrate(dsn)
    db = await Database.connect(dsn, min_size=1, max_size=20)
    try:
        async with connected_jobs(db, settings) as handlers:
            worker = jobs.Worker(db, dsn, all_handlers(settings, handlers),
                                 settings.job_heartbeat)
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(signum, worker.stop)
            logging.getLogger("kalends").info("worker started", extra={"pid": os.getpid()})
            await worker.run()
    finally:
        await db.close()


def _migrate(args: argparse.Namespace) -> int:
    with _database(os.environ.get("DATABASE_URL")) as dsn:
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
    with _database(os.environ.get("DATABASE_URL")) as dsn:
        try:
            result = produce(dsn)
        except accounts.AdminError as exc:
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


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kalends", description="Kalends scheduling service")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the service")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=_bounded(1, 65535), default=8080)
    serve.add_argument("--workers", type=_bounded(1, 64), default=1)
    serve.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    serve.set_defaults(func=_serve)

    sub.add_parser("worker", help=(
        "run background jobs (subscription and calendar sync, attendee e-mail, webhooks)"
    )).set_defaults(func=_worker)

    sub.add_parser("migrate", help="apply pending migrations").set_defaults(func=_migrate)

    admin = sub.add_parser("admin", help="operator commands; each prints one JSON object")
    asub = admin.add_subparsers(dest="admin_command", required=True)

    p = asub.add_parser("create-user")
    p.add_argument("--email", required=True)
    p.add_argument("--name")
    p.add_argument("--timezone")
    p.set_defaults(func=_admin(lambda db, a: accounts.create_user(db, a.email, a.name, a.timezone)))

    p = asub.add_parser("create-key")
    p.add_argument("--email", required=True)
    p.set_defaults(func=_admin(lambda db, a: accounts.create_key(db, a.email)))

    p = asub.add_parser("revoke-key")
    p.add_argument("--api-key", required=True)
    p.set_defaults(func=_admin(lambda db, a: accounts.revoke_key(db, a.api_key)))

    p = asub.add_parser("create-consumer")
    p.add_argument("--name", required=True)
    p.set_defaults(func=_admin(lambda db, a: accounts.create_consumer(db, a.name)))

    p = asub.add_parser("claim-consumer")
    p.add_argument("--name", required=True)
    p.add_argument("--email", required=True)
    p.set_defaults(func=_admin(lambda db, a: accounts.claim_consumer(db, a.name, a.email)))

    p = asub.add_parser("create-organization")
    p.add_argument("--name", required=True)
    p.add_argument("--owner", required=True)
    p.add_argument("--handle")
    p.set_defaults(func=_admin(
        lambda db, a: accounts.create_organization(db, a.name, a.owner, a.handle)))

    p = asub.add_parser("add-member")
    p.add_argument("--organization", required=True)
    p.add_argument("--email", required=True)
    p.add_argument("--role", required=True, choices=accounts.ROLES)
    p.set_defaults(func=_admin(
        lambda db, a: accounts.add_member(db, a.organization, a.email, a.role)))

    p = asub.add_parser("backup", help="write the whole database to FILE (pg_dump)")
    p.add_argument("--to", required=True, metavar="FILE")
    p.set_defaults(func=_backup)

    p = asub.add_parser("restore", help="replace the whole database with a backup, at once")
    p.add_argument("--from", required=True, metavar="FILE", dest="source")
    p.set_defaults(func=_restore)

    p = asub.add_parser("create-calendar")
    p.add_argument("--email", required=True)
    p.add_argument("--name", required=True)
    p.set_defaults(func=_admin(lambda db, a: accounts.create_calendar(db, a.email, a.name)))

    p = asub.add_parser("connect-calendars", help="connect an external account; the secret "
                        "(app-specific password or OAuth refresh token) is read from stdin")
    p.add_argument("--email", required=True)
    p.add_argument("--provider", required=True, choices=PROVIDERS)
    p.add_argument("--url")
    p.add_argument("--username")
    p.set_defaults(func=_admin(lambda db, a: connected_admin.connect(
        db, _settings(), a.email, a.provider, a.url, a.username, _read_secret())))

    p = asub.add_parser("disconnect-calendars")
    p.add_argument("--account", required=True)
    p.set_defaults(func=_admin(lambda db, a: connected_admin.disconnect(
        db, _settings(), a.account)))

    p = asub.add_parser("sync-calendars")
    p.add_argument("--account")
    p.set_defaults(func=_admin(lambda db, a: connected_admin.sync_now(db, a.account)))

    p = asub.add_parser("select-calendar")
    p.add_argument("--id", required=True)
    p.add_argument("--selected", required=True, choices=("true", "false"))
    p.set_defaults(func=_admin(lambda db, a: connected_admin.select(db, a.id, a.selected)))

    p = asub.add_parser("rotate-signing-key", help="sign /mcp access tokens with a new key; "
                        "the old one stays published until its tokens have expired")
    p.set_defaults(func=_admin(lambda db, a: oauth_keys.rotate(
        db, connected_engine.open_vault(_settings()))))
    return parser


def _read_secret() -> str:
    """The secret from standard input, never from the command line (where other
    users' `ps` would show it): typed at a prompt without echo, or piped."""
    if sys.stdin.isatty():
        return getpass.getpass("secret: ").strip()
    return sys.stdin.readline().strip()


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command != "serve":  # serve defers stop signals instead
        _exit_on_sigterm()
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
