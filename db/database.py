"""The asyncpg pool, wrapped so every query is counted and errors are typed.

The count is what the query-budget tests pin: a list page must cost the same
number of statements whatever its size.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg

from kalends.errors import ApiError

log = logging.getLogger("kalends.db")


class Database:
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
        )
        return cls(pool, dsn)

    async def close(self) -> None:
        await self.pool.close()

    async def fetch(self, sql: str, *args: Any) -> list[asyncpg.Record]:
        self.query_count += 1
        async with _unavailable_on_connection_loss():
            return await self.pool.fetch(sql, *args)  # type: ignore[no-any-return]

    async def fetchrow(self, sql: str, *args: Any) -> asyncpg.Record | None:
        self.query_count += 1
        async with _unavailable_on_connection_loss():
            return await self.pool.fetchrow(sql, *args)

    async def fetchval(self, sql: str, *args: Any) -> Any:
        self.query_count += 1
        async with _unavailable_on_connection_loss():
            return await self.pool.fetchval(sql, *args)

    async def execute(self, sql: str, *args: Any) -> str:
        self.query_count += 1
        async with _unavailable_on_connection_loss():
            return await self.pool.execute(sql, *args)  # type: ignore[no-any-return]

    @asynccontextmanager
    async def transaction(self, isolation: str = "read_committed") -> AsyncIterator[Tx]:
        async with (
            _unavailable_on_connection_loss(),
            self.pool.acquire() as conn,
            conn.transaction(isolation=isolation),
        ):
            yield Tx(conn, self)


class Tx:
    """A connection inside a transaction, counting like `Database`."""

    def __init__(self, conn: asyncpg.Connection, db: Database) -> None:
        self._conn = conn
        self._db = db

    @property
    def connection(self) -> asyncpg.Connection:
        """For libraries that must act inside this transaction (the job queue)."""
        return self._conn

    async def fetch(self, sql: str, *args: Any) -> list[asyncpg.Record]:
        self._db.query_count += 1
        return await self._conn.fetch(sql, *args)  # type: ignore[no-any-return]

    async def fetchrow(self, sql: str, *args: Any) -> asyncpg.Record | None:
        self._db.query_count += 1
        return await self._conn.fetchrow(sql, *args)

    async def fetchval(self, sql: str, *args: Any) -> Any:
        self._db.query_count += 1
        return await self._conn.fetchval(sql, *args)

    async def execute(self, sql: str, *args: Any) -> str:
        self._db.query_count += 1
        return await self._conn.execute(sql, *args)  # type: ignore[no-any-return]


async def _init_connection(conn: asyncpg.Connection) -> None:
    await conn.execute("SET TIME ZONE 'UTC'")


async def _keep_session(conn: asyncpg.Connection) -> None:
    """What a connection needs on its way back to the pool: nothing. Pool
    connections hold no session state to clear (no LISTEN, no session-level
    advisory lock, no cursor outside a transaction, no SET but the time zone of
    `_init_connection`). asyncpg's default reset (`pg_advisory_unlock_all(); CLOSE
    ALL; UNLISTEN *; RESET ALL`) cost a round trip on every statement run through
    the pool, and its RESET ALL undid that time zone after a connection's first use."""


@asynccontextmanager
async def _unavailable_on_connection_loss() -> AsyncIterator[None]:
    try:
        yield
    except (
        OSError,  # includes timeouts and a vanished socket
        asyncpg.exceptions.PostgresConnectionError,  # SQLSTATE class 08
        asyncpg.exceptions.AdminShutdownError,
        asyncpg.exceptions.CrashShutdownError,
        asyncpg.exceptions.CannotConnectNowError,
        asyncpg.exceptions.TooManyConnectionsError,
    ) as exc:
        raise ApiError("service_unavailable", "The database is unreachable; retry.") from exc
    except asyncpg.exceptions.InternalClientError as exc:
        # What asyncpg raises on a connection whose server died mid-exchange ("cannot
        # switch to state ..."); logged in full in case it ever means something else.
        log.warning("database connection in a broken state", exc_info=True)
        raise ApiError("service_unavailable", "The database is unreachable; retry.") from exc
