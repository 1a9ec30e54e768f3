"""Background jobs on a PostgreSQL queue (pgqueuer).

A job is enqueued inside the transaction of the write that calls for it, so
the change and its follow-up commit together or not at all. Workers run inside
`kalends serve` and in any number of `kalends worker` processes, on any
machine that reaches the database. A job whose worker dies is picked up again
once its heartbeat is stale (`KALENDS_JOB_HEARTBEAT_SECONDS`, default 30), and
every handler reconciles from the current state of the database, so running a
job twice, or half a job and then all of it, leaves one right result.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from contextlib import suppress
from datetime import timedelta
from typing import Any

import asyncpg
import orjson
from pgqueuer import DatabaseRetryEntrypointExecutor, Job, Queries, QueueManager
from pgqueuer.executors import AbstractEntrypointExecutor, EntrypointExecutorParameters

from db.database import Database, Tx

log = logging.getLogger("kalends.jobs")

Handler = Callable[[Database, dict[str, Any]], Awaitable[None]]


async def enqueue(tx: Tx, entrypoint: str, payload: dict[str, Any],
                  after: timedelta | None = None) -> None:
    """Queue a job; it becomes visible to workers when `tx` commits (and
    `after` has passed)."""
    queries = Queries.from_asyncpg_connection(tx.connection)
    await queries.enqueue(entrypoint, orjson.dumps(payload), execute_after=after)


async def enqueue_many(tx: Tx, entrypoint: str, payloads: list[dict[str, Any]]) -> None:
    """Queue several jobs of one entrypoint in one statement."""
    if payloads:
        queries = Queries.from_asyncpg_connection(tx.connection)
        await queries.enqueue([entrypoint] * len(payloads), [orjson.dumps(p) for p in payloads],
                              [0] * len(payloads))


_POLL = timedelta(seconds=1)


def _retrying(parameters: EntrypointExecutorParameters) -> AbstractEntrypointExecutor:
    # A failed job (a lost connection, a deadlock) is retried with back-off;
    # after the last attempt it is held as failed, not deleted, for an operator.
    return DatabaseRetryEntrypointExecutor(parameters, max_attempts=5)


async def finish(task: asyncio.Task[None], timeout: float = 10) -> None:
    """Wait for a stopped worker to finish its jobs; past `timeout`, cancel them
    (their transactions roll back and the jobs run again elsewhere)."""
    try:
        await asyncio.wait_for(task, timeout)
    except TimeoutError:
        log.warning("jobs still running after %.0f s; cancelled", timeout)


class Worker:
    """Runs queued jobs until `stop()`; restarts its queue manager if the
    database goes away, so a worker outlives a database restart."""

    def __init__(self, db: Database, dsn: str, handlers: Mapping[str, Handler],
                 heartbeat: timedelta) -> None:
        self._db = db
        self._heartbeat = heartbeat
        self._dsn = dsn
        self._handlers = handlers
        self._stopping = asyncio.Event()
        self._manager: QueueManager | None = None

    def stop(self) -> None:
        self._stopping.set()
        if self._manager is not None:
            self._manager.shutdown.set()

    async def run(self) -> None:
        while not self._stopping.is_set():
            try:
                await self._run_once()
            except Exception:
                if self._stopping.is_set():
                    break
                log.exception("job worker stopped; restarting in 1 s")
                with suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), timeout=1)

    async def _run_once(self) -> None:
        # Its own connection: the queue manager LISTENs on it and dequeues
        # through it; the jobs themselves use the shared pool.
        conn = await asyncpg.connect(self._dsn)
        try:
            manager = QueueManager(Queries.from_asyncpg_connection(conn))
            for name, handler in self._handlers.items():
                manager.entrypoint(name, executor_factory=_retrying, on_failure="hold")(
                    self._bind(handler)
                )
            self._manager = manager
            if self._stopping.is_set():
                return
            stale = self._heartbeat
            await manager.run(
                heartbeat_timeout=stale,
                # An idle worker looks for due jobs this often; a NOTIFY wakes it
                # sooner for new ones, but nothing tells it when a retried job's
                # back-off (1 s, doubling) ends, nor when a dead worker's job goes
                # stale: waiting the heartbeat (30 s) put every first retry 30 s late.
                dequeue_timeout=min(stale, _POLL),
                batch_size=10,
                max_concurrent_tasks=20,
            )
        finally:
            self._manager = None
            await conn.close()

    def _bind(self, handler: Handler) -> Callable[[Job], Awaitable[None]]:
        async def run(job: Job) -> None:
            await handler(self._db, orjson.loads(job.payload or b"{}"))

        return run
