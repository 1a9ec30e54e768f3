"""The asyncpg pool, wrapped so every query is counted and errors are typed.

The count is what the query-budget tests pin: a list page must cost the same
number of statements whatever its size.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg

from core.errors import ApiError

log = logging.getLogger("kalends.db")


class _Statements:
    """What `Database` and `Tx` share: the four ways to run a statement, each counted
    and each run by `_statement`, where a lost connection becomes `503
    service_unavailable`. A class that runs statements elsewhere (another pool, a
    connection) says where in `_runner`, and inherits the rest."""

    async def fetch(self, sql: str, *args: Any) -> list[asyncpg.Record]:
        return await self._statement("fetch", sql, args)  # type: ignore[no-any-return]

    async def fetchrow(self, sql: str, *args: Any) -> asyncpg.Record | None:
        return await self._statement("fetchrow", sql, args)

    async def fetchval(self, sql: str, *args: Any) -> Any:
        return await self._statement("fetchval", sql, args)

    async def execute(self, sql: str, *args: Any) -> str:
        return await self._statement("execute", sql, args)  # type: ignore[no-any-return]

    def _runner(self) -> asyncpg.Pool | asyncpg.Connection:
        raise NotImplementedError

    def _counted(self) -> None:
        raise NotImplementedError

    def _released_is_lost(self) -> bool:
        """Whether asyncpg's "released back to the pool" means the connection closed."""
        return False

    async def _statement(self, method: str, sql: str, args: tuple[Any, ...]) -> Any:
        self._counted()
        async with _unavailable_on_connection_loss(released_is_lost=self._released_is_lost()):
            return await getattr(self._runner(), method)(sql, *args)


class Database(_Statements):
    def __init__(self, pool: asyncpg.Pool, dsn: str | None = None) -> None:
        self.pool = pool
        self.dsn = dsn
        """For a connection outside the pool (a lock held across network calls)."""
        self.query_count = 0

    @classmethod
    async def connect(cls, dsn: str, *, min_size: int = 2, max_size: int = 10) -> Database:
        pool = await asyncpg.create_pool(
            dsn, min_size=min_size, max_size=max_size, init=_init_connection,
            reset=_keep_session,
            timeout=5, command_timeout=30,
            server_settings={
                # No parallel plans: a request's statement reads few rows, and the
                # workers of a parallel one cost more to start (milliseconds, measured
                # in search at a million events) than they save, on cores other
                # requests need.
                "max_parallel_workers_per_gather": "0",
                # The pages a request reads are in memory or on SSD, where a random
                # read costs about what a sequential one does. With the default (4), an
                # overestimated range (the agenda's one-off events: 1,714 rows expected,
                # 286 found) made the planner scan a user's 18,000 calendar rows
                # instead of the index over their ends (10.4 ms against 2.0).
                "random_page_cost": "1.1",
            },
        )
        return cls(pool, dsn)

    async def close(self) -> None:
        await self.pool.close()

    def _runner(self) -> asyncpg.Pool:
        return self.pool

    def _counted(self) -> None:
        self.query_count += 1

    @asynccontextmanager
    async def transaction(self, isolation: str = "read_committed") -> AsyncIterator[Tx]:
        async with _unavailable_on_connection_loss(), self.pool.acquire() as conn:
            work_failed: BaseException | None = None
            try:
                async with conn.transaction(isolation=isolation):
                    tx = Tx(conn, self, in_transaction=True)
                    try:
                        yield tx
                    except BaseException as exc:
                        work_failed = exc
                        raise
                    finally:
                        tx.in_transaction = False
            except Exception as leaving:
                outcome = _outcome(work_failed, leaving)
                if outcome is leaving:
                    raise
            else:
                return
            raise outcome  # out of the `except`: it keeps its own chain for the log


class Tx(_Statements):
    """A connection inside a transaction, counting like `Database`; its statements
    answer a lost connection as the pool's do (a webhook payload is rendered by
    GraphQL resolvers running on a Tx, which see the 503, not asyncpg's error)."""

    def __init__(self, conn: asyncpg.Connection, db: Database, *,
                 in_transaction: bool = False) -> None:
        self._conn = conn
        self._db = db
        self.in_transaction = in_transaction
        """Inside `Database.transaction`, which holds the pool's connection: until it
        ends, the pool takes the connection back only when it closes."""

    @property
    def connection(self) -> asyncpg.Connection:
        """For libraries that must act inside this transaction (the job queue). What
        they raise is theirs; the transaction, as it ends, maps a lost connection."""
        return self._conn

    def _runner(self) -> asyncpg.Connection:
        return self._conn

    def _counted(self) -> None:
        self._db.query_count += 1

    def _released_is_lost(self) -> bool:
        return self.in_transaction


async def _init_connection(conn: asyncpg.Connection) -> None:
    await conn.execute("SET TIME ZONE 'UTC'")


async def _keep_session(conn: asyncpg.Connection) -> None:
    """What a connection needs on its way back to the pool: nothing. Pool
    connections hold no session state to clear (no LISTEN, no session-level
    advisory lock, no cursor outside a transaction, no SET but the time zone of
    `_init_connection`). asyncpg's default reset (`pg_advisory_unlock_all(); CLOSE
    ALL; UNLISTEN *; RESET ALL`) cost a round trip on every statement run through
    the pool, and its RESET ALL undid that time zone after a connection's first use."""


# What asyncpg's InterfaceError says when the connection under it has gone: the
# connection itself, the protocol, or a resource on it (a transaction that cannot
# roll back). Its other messages ("another operation is in progress", "released back
# to the pool", and DataError's "invalid input for query argument") name bugs: 500s.
_CLOSED = re.compile(
    r"(?:cannot perform operation: |cannot call \w+\.\w+\(\): the underlying )?"
    r"connection (?:is closed|was closed in the middle of operation)"
)
# What a pooled connection's proxy says once the pool has taken it back: after the
# transaction (a bug: a Tx kept too long), or when the connection closed under it.
_RELEASED = re.compile(
    r"cannot call Connection\.\w+\(\): connection has been released back to the pool")

# The forms a vanished server takes. Sockets: refused, reset, a unix socket gone, a
# connect or statement timing out (TimeoutError is an OSError). PostgreSQL: SQLSTATE
# class 08, a server shutting down or crashed (57P01, 57P02), one not yet accepting
# connections while it starts and recovers (57P03), every slot taken (53300).
_LOSS = (
    OSError,
    asyncpg.exceptions.PostgresConnectionError,
    asyncpg.exceptions.AdminShutdownError,
    asyncpg.exceptions.CrashShutdownError,
    asyncpg.exceptions.CannotConnectNowError,
    asyncpg.exceptions.TooManyConnectionsError,
)


def _connection_lost(exc: BaseException) -> bool:
    if isinstance(exc, _LOSS):
        return True
    if isinstance(exc, asyncpg.exceptions.InternalClientError):
        # What asyncpg's protocol says when the server died mid-exchange (logged in
        # full below, in case it ever means something else); others are its bugs.
        return str(exc).startswith("cannot switch to state") or str(exc) == "not connected"
    return isinstance(exc, asyncpg.exceptions.InterfaceError) and bool(
        _CLOSED.fullmatch(str(exc)))


def _outcome(work_failed: BaseException | None, leaving: Exception) -> BaseException:
    """What a transaction failed with, when leaving it (its commit or rollback) raised
    `leaving`. When that says the connection is gone, the
    transaction went with it (PostgreSQL discards what a vanished session left
    uncommitted), so if the work had already failed, that failure is the answer: a
    refusal, a bug, or the lost connection seen first; not asyncpg's "cannot call
    Transaction.__aexit__(): the underlying connection is closed" over it."""
    if work_failed is None or leaving is work_failed or not _connection_lost(leaving):
        return leaving
    if isinstance(work_failed, asyncpg.exceptions.InterfaceError) and _RELEASED.fullmatch(
            str(work_failed)):
        return leaving  # the pool took the connection back as it closed: the same loss
    return work_failed


def unavailable(exc: BaseException, *, released_is_lost: bool = False) -> ApiError | None:
    """The `503 service_unavailable` to answer when `exc` is how a database connection
    was lost, else None. For code that turns what it caught into an answer (GraphQL's
    errors, the registry's), so that a loss met on a connection other than
    `Database`'s and `Tx`'s is a 503 as well. `released_is_lost`: `exc` came from a
    connection the pool lent to an open transaction, which the pool takes back early
    only when it closes."""
    released = isinstance(exc, asyncpg.exceptions.InterfaceError) and bool(
        _RELEASED.fullmatch(str(exc)))
    if not (_connection_lost(exc) or (released and released_is_lost)):
        return None
    if isinstance(exc, asyncpg.exceptions.InternalClientError):
        log.warning("database connection in a broken state", exc_info=exc)
    return ApiError("service_unavailable", "The database is unreachable; retry.")


@asynccontextmanager
async def _unavailable_on_connection_loss(*, released_is_lost: bool = False
                                          ) -> AsyncIterator[None]:
    """Where a lost database becomes `503 service_unavailable`: every statement of
    `Database` and `Tx`, and every transaction from acquiring its connection to
    releasing it."""
    try:
        yield
    except Exception as exc:
        error = unavailable(exc, released_is_lost=released_is_lost)
        if error is None:
            raise
        raise error from exc
