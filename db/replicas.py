"""Reads from streaming replicas (docs/scaling.md, "Read replicas"), with read-your-writes per user.

`Reads` holds a pool per replica and a background check of each one: reachable or
not, how far it has replayed (`pg_last_wal_replay_lsn()`), and how far behind the
primary it is in seconds. A request that only reads asks `choose(written)` for a
database once, where its kind is known (domain/reads.py): a replica in use (up,
and no more than `max_lag` behind) that has replayed past `written` (the end of the
user's last write), else the primary. Nothing fails when a replica does: it is skipped
until a check finds it well again. A server that is not in recovery, or is a replica of
another cluster (a wrong URL: its system identifier is not the primary's), is never
read. Each change of a replica's state (down, refused, behind, in use) is logged once,
in one line that says what an operator can act on.

Read-your-writes across processes: after a write request, `wrote(user_id)` records
`pg_current_wal_lsn()` on the primary, a position at or after the write's commit; the
next requests of that user read it with their authentication (db/accounts.py), in the
same statement, so the check costs no round trip. A replica's replayed position comes
from the last check, never newer than the truth, so a user is sent to the primary
rather than to a replica that has not caught up.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from core.errors import ApiError
from db.database import Database, Tx

log = logging.getLogger("kalends.replicas")

CHECK_SECONDS = 0.025
"""How often each replica's position and lag are read: a user who just wrote reads the
primary until a check shows the replica past their write (a replica on the same
network replays within milliseconds), so this bounds how long; the check is one
tiny statement, 40 a second per replica and process."""
_CONNECT_TIMEOUT = 2.0
_SYSTEM = "SELECT system_identifier FROM pg_control_system()"


def lsn(text: str | None) -> int | None:
    """A `pg_lsn` (`16/B374D848`) as a number; None stays None."""
    if text is None:
        return None
    high, _, low = text.partition("/")
    return (int(high, 16) << 32) | int(low, 16)


class OrPrimary(Database):
    """A replica's pool that falls back to the primary, statement by statement, when
    the replica is lost (reads can be asked again): a replica that stops between two
    checks costs no request. So does a statement the replica cancels for a conflict
    with recovery (replaying the primary's cleanup of rows it still reads; fewer with
    `hot_standby_feedback = on`). A transaction falls back when its connection cannot
    be had; one whose replica dies halfway fails as it would on the primary."""

    def __init__(self, replica: Replica, pool: asyncpg.Pool, primary: Database) -> None:
        super().__init__(pool, replica.dsn)
        self._replica = replica
        self._primary = primary

    def _lost(self, exc: ApiError) -> None:
        if exc.code != "service_unavailable":
            raise exc
        _down(self._replica, "a statement lost its connection")

    async def fetch(self, sql: str, *args: Any) -> list[asyncpg.Record]:
        return await self._read("fetch", sql, args)  # type: ignore[no-any-return]

    async def fetchrow(self, sql: str, *args: Any) -> asyncpg.Record | None:
        return await self._read("fetchrow", sql, args)

    async def fetchval(self, sql: str, *args: Any) -> Any:
        return await self._read("fetchval", sql, args)

    async def execute(self, sql: str, *args: Any) -> str:
        return await self._read("execute", sql, args)  # type: ignore[no-any-return]

    async def _read(self, method: str, sql: str, args: tuple[Any, ...]) -> Any:
        """`Database.<method>` on the replica, else on the primary."""
        try:
            return await getattr(super(), method)(sql, *args)
        except ApiError as exc:
            self._lost(exc)
        except asyncpg.TransactionRollbackError:
            pass  # a conflict with recovery: asked again on the primary
        return await getattr(self._primary, method)(sql, *args)

    @asynccontextmanager
    async def transaction(self, isolation: str = "read_committed") -> AsyncIterator[Tx]:
        stack = contextlib.AsyncExitStack()
        try:
            tx = await stack.enter_async_context(super().transaction(isolation))
        except ApiError as exc:
            self._lost(exc)
            tx = await stack.enter_async_context(self._primary.transaction(isolation))
        async with stack:
            yield tx


@dataclass
class Replica:
    dsn: str
    name: str
    """How /metrics names it (`replica1`, ...): never the DSN, which may hold a password."""
    db: OrPrimary | None = None
    checked: bool = False
    """Whether a check has ended yet (one that finds it down at start says so once)."""
    up: bool = False
    """The last check reached it and found it replaying this primary's WAL."""
    behind: bool = False
    """Up, but more than `max_lag` behind at the last check: not read until it catches up."""
    refused: str | None = None
    """Why a reachable server is not read (not in recovery, another primary's replica):
    said once in the log, not at every check."""
    losses: int = 0
    """How many times it was found down: a check that began before the last of them
    says nothing of it now."""
    replayed: int | None = None
    lag: float | None = None
    """Seconds behind the primary at the last check (0 when it has replayed all it got);
    None while it is not up, so that no stale figure is shown for it."""

    @property
    def in_use(self) -> bool:
        """Whether reads may be sent to it: up, not behind, its pool open."""
        return self.up and not self.behind and self.db is not None and self.lag is not None


def _lose(replica: Replica) -> None:
    """Not up: its last position and lag say nothing any more."""
    replica.checked = True
    replica.losses += 1
    replica.up = replica.behind = False
    replica.replayed = replica.lag = None


def _down(replica: Replica, why: str) -> None:
    """Unreachable or failing: said once, when it was up (or at its first check)."""
    if replica.up or not replica.checked:
        log.warning("read replica %s down (%s); reading the primary until it is back",
                    replica.name, why)
    _lose(replica)


_LOST = (asyncpg.InterfaceError, asyncpg.InternalClientError,
         asyncpg.ConnectionDoesNotExistError, ConnectionError)
"""What a connection the server or the network dropped raises."""


def _why(exc: Exception) -> str:
    """What a failed check says about the replica, in a few words. asyncpg's own text for a
    connection the server dropped ("cannot switch to state 12; another operation is in
    progress") says nothing to an operator."""
    if isinstance(exc, TimeoutError):
        return f"no answer within {_CONNECT_TIMEOUT:g} s"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, _LOST):
        return "connection lost"
    if isinstance(exc, asyncpg.PostgresError):  # the server's own words: shutting down, ...
        return (str(exc).splitlines() or [type(exc).__name__])[0]
    if isinstance(exc, OSError):
        return f"cannot connect: {exc.strerror or type(exc).__name__}"
    return f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}"


@dataclass
class Reads:
    primary: Database
    replicas: list[Replica]
    max_lag: float
    pool_size: int = 10
    _turn: itertools.count[int] = field(default_factory=itertools.count)
    _task: asyncio.Task[None] | None = None
    _system: int | None = None
    """The primary's system identifier: a replica of it has the same."""

    @classmethod
    def of(cls, primary: Database, dsns: Sequence[str], max_lag: float,
           pool_size: int = 10) -> Reads:
        return cls(primary, [Replica(dsn, f"replica{n}") for n, dsn in enumerate(dsns, 1)],
                   max_lag, pool_size)

    async def start(self) -> None:
        """Check every replica once (a replica down at start is simply skipped), then
        keep checking in the background."""
        # On the pool itself, as the checks: no request's statement (query_count).
        self._system = await self.primary.pool.fetchval(_SYSTEM)
        await asyncio.gather(*(self._check(r) for r in self.replicas))
        self._task = asyncio.create_task(self._watch(), name="read replica checks")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for replica in self.replicas:
            if replica.db is not None:
                await replica.db.close()

    def choose(self, written: int | None) -> tuple[Database, str]:
        """A database for one read-only request of a user whose last write ended at
        `written` (None: none recorded), and the name of the target."""
        usable = [r for r in self.replicas
                  if r.in_use
                  and (written is None or (r.replayed is not None and r.replayed >= written))]
        if not usable:
            return self.primary, "primary"
        chosen = usable[next(self._turn) % len(usable)]
        assert chosen.db is not None
        return chosen.db, chosen.name

    async def wrote(self, user_id: str) -> None:
        """Record that `user_id`'s write (committed before this call) ends at or
        before the primary's WAL position now."""
        await self.primary.execute(
            """
            INSERT INTO write_positions (user_id, lsn) VALUES ($1, pg_current_wal_lsn())
            ON CONFLICT (user_id) DO UPDATE SET lsn = greatest(write_positions.lsn,
                                                                excluded.lsn)
            """,
            user_id,
        )

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(CHECK_SECONDS)
            await asyncio.gather(*(self._check(r) for r in self.replicas))

    @staticmethod
    def _refuse(replica: Replica, why: str) -> None:
        if replica.refused != why:
            log.warning("read replica %s %s; skipped", replica.name, why)
        _lose(replica)
        replica.refused = why

    def _judge_lag(self, replica: Replica, lag: float) -> None:
        """Up after a check that read `lag`: in use, or skipped while behind; each change
        said once."""
        behind = lag > self.max_lag
        if behind and not replica.behind:
            log.warning("read replica %s is %.1f s behind the primary, more than the %g s "
                        "allowed (KALENDS_READ_MAX_LAG_SECONDS); reading the primary until "
                        "it catches up", replica.name, lag, self.max_lag)
        elif not behind and replica.behind:
            log.info("read replica %s caught up (%.1f s behind); reading it again",
                     replica.name, lag)
        elif not behind and not replica.up:
            log.info("read replica %s usable", replica.name)
        replica.checked, replica.up, replica.behind, replica.refused = True, True, behind, None
        replica.lag = lag

    async def _check(self, replica: Replica) -> None:
        losses = replica.losses
        try:
            if replica.db is None:
                connected = await asyncio.wait_for(
                    Database.connect(replica.dsn, min_size=1, max_size=self.pool_size),
                    _CONNECT_TIMEOUT)
                replica.db = OrPrimary(replica, connected.pool, self.primary)
            # On the pool itself: a check is no request's statement (query_count).
            row = await asyncio.wait_for(replica.db.pool.fetchrow(
                f"""
                SELECT pg_is_in_recovery() AS standby, ({_SYSTEM}) AS system,
                       pg_last_wal_replay_lsn()::text AS replayed,
                       CASE WHEN pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() THEN 0
                            ELSE extract(epoch FROM now() - pg_last_xact_replay_timestamp())
                       END::float8 AS lag
                """), _CONNECT_TIMEOUT)
        except Exception as exc:  # down, unreachable, restarting: skipped until well again
            _down(replica, _why(exc))
            if replica.db is not None and not isinstance(exc, TimeoutError):
                db, replica.db = replica.db, None
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(db.close(), _CONNECT_TIMEOUT)
            return
        assert row is not None
        if replica.losses != losses:
            # A request lost its connection while this check was answered (a server
            # shutting down answers some statements, and drops others): the next
            # check says whether it is back; this one would say "usable" in between.
            return
        if row["system"] != self._system:
            # A copy of another cluster (a wrong URL): its rows are not this primary's.
            self._refuse(replica, "is not a replica of this primary (another system "
                                  "identifier)")
            return
        if not row["standby"]:
            # A promoted replica no longer follows the primary's writes.
            self._refuse(replica, "is not in recovery")
            return
        replica.replayed = lsn(row["replayed"])
        self._judge_lag(replica, row["lag"] if row["lag"] is not None else 0.0)
