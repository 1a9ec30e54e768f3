"""Keeping subscribers' calendars in step with their sources.

Writes that change what a subscriber should see (an event created, changed,
cancelled or deleted; an event linked to or unlinked from a series; a profile
or series made private or deleted; a subscription created, reactivated or
removed) call one of the `*_changed` functions inside their transaction. That
queues a sync job naming the scope; the job recomputes the copies of every
event in the scope from the current state (`db.sync.reconcile`). Jobs hold
the source profile's lock while they do, so they apply changes in order.

A job never waits for that lock holding a connection: it tries the lock, and
if another transaction has it, rolls back and tries again a little later, so
a burst of changes to one profile does not take every connection of the
jobs' pool (webhook delivery and other profiles' jobs go on). A process's
event jobs are reconciled together: those that arrive while one reconciliation
runs go in the next, one transaction for all (each job's change committed
before the job could be picked, so that transaction sees it); a job is done
once a reconciliation that began after it arrived has committed. Events of a
profile locked elsewhere wait for the next round, the others go on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from db import connected
from db import sync as store
from db.database import Database, Tx
from domain import agenda, jobs
from domain.connected import engine

SYNC = "sync"
CLEANUP = "subscription_cleanup"

Scope = Literal["event", "profile", "series", "subscription"]


async def event_changed(tx: Tx, event_id: str) -> None:
    await _queue(tx, "event", event_id)


async def profile_changed(tx: Tx, profile_id: str) -> None:
    await _queue(tx, "profile", profile_id)


async def series_changed(tx: Tx, series_id: str) -> None:
    await _queue(tx, "series", series_id)


async def subscription_changed(tx: Tx, subscription_id: str) -> None:
    await _queue(tx, "subscription", subscription_id)


async def subscription_removed(tx: Tx, subscription_id: str) -> None:
    """Queue the cleanup of a subscription marked for removal."""
    await jobs.enqueue(tx, CLEANUP, {"id": subscription_id})


async def _queue(tx: Tx, scope: Scope, key: str) -> None:
    await jobs.enqueue(tx, SYNC, {"scope": scope, "id": key})


_FIRST_WAIT = 0.01
"""Seconds before trying a profile's lock again, doubled up to `_MOST_WAIT`."""
_MOST_WAIT = 0.5

log = logging.getLogger("kalends.sync")


class _Busy(Exception):
    """A profile's lock is held by another transaction: roll back, try again later."""


class _Jobs:
    """The sync jobs of one worker (one process): state for coalescing its event jobs."""

    def __init__(self) -> None:
        self._waiting: dict[str, list[asyncio.Future[None]]] = {}
        self._rounds: asyncio.Task[None] | None = None

    async def run_sync(self, db: Database, payload: dict[str, Any]) -> None:
        scope, key = payload["scope"], payload["id"]
        if scope != "event":
            await _exclusive(db, lambda tx: _reconcile(tx, scope, key))
            return
        done = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(key, []).append(done)
        if self._rounds is None or self._rounds.done():
            self._rounds = asyncio.create_task(self._run_rounds(db))
        await done

    async def run_cleanup(self, db: Database, payload: dict[str, Any]) -> None:
        """Remove what the subscription alone copied, then the subscription. Copies
        another subscription of the same user covers are handed over to it."""
        async def work(tx: Tx) -> bool:
            if not await _reconcile(tx, "subscription", payload["id"]):
                return False
            await tx.execute(
                "DELETE FROM subscriptions WHERE id = $1 AND cleanup_requested_at IS NOT NULL",
                payload["id"],
            )
            return True

        await _exclusive(db, work)

    async def _run_rounds(self, db: Database) -> None:
        """Reconcile the waiting events, one round after another, until none waits."""
        wait = _FIRST_WAIT
        batch: dict[str, list[asyncio.Future[None]]] = {}
        try:
            while self._waiting:
                batch, self._waiting = self._waiting, {}
                left = await self._round(db, batch)
                batch = {}
                for event_id, futures in left.items():  # their profile is locked elsewhere
                    self._waiting.setdefault(event_id, [])[:0] = futures
                if left:
                    await asyncio.sleep(wait)
                    wait = min(2 * wait, _MOST_WAIT)
                else:
                    wait = _FIRST_WAIT
        finally:  # cancelled (the loop closing): the jobs of the round in flight too
            for futures in batch.values():
                for future in futures:
                    future.cancel()

    async def _round(self, db: Database, batch: dict[str, list[asyncio.Future[None]]]
                     ) -> dict[str, list[asyncio.Future[None]]]:
        """One transaction for the batch; what is left for the next round. If it
        fails, each event on its own, so that one event's failure is its jobs'
        alone (each job is then retried by the queue)."""
        try:
            left = await _reconcile_events(db, list(batch))
        except Exception as exc:
            if len(batch) == 1:
                _settle(batch, exc)
                return {}
            log.warning("sync of %d events failed together; one by one now", len(batch),
                        exc_info=True)
            left = set()
            for event_id, futures in batch.items():
                try:
                    left |= await _reconcile_events(db, [event_id])
                except Exception as one:
                    _settle({event_id: futures}, one)
        _settle({e: f for e, f in batch.items() if e not in left}, None)
        return {e: f for e, f in batch.items() if e in left}


def _settle(batch: dict[str, list[asyncio.Future[None]]], exc: Exception | None) -> None:
    for futures in batch.values():
        for future in futures:
            if future.done():  # its job was cancelled meanwhile
                continue
            if exc is None:
                future.set_result(None)
            else:
                future.set_exception(exc)


async def _reconcile_events(db: Database, event_ids: list[str]) -> set[str]:
    """Reconcile the events whose profiles' locks are free, in one transaction;
    the others, left for later."""
    async with db.transaction() as tx:
        left = await store.try_lock_profiles(tx, event_ids)
        ready = [e for e in event_ids if e not in left]
        if ready:
            await _apply(tx, ready, None)
    return left


async def _exclusive(db: Database, work: Callable[[Tx], Awaitable[bool]]) -> None:
    """Run `work` in a transaction until it finds its profiles' locks free (it
    returns False when one is held elsewhere: rolled back, tried again later)."""
    wait = _FIRST_WAIT
    while True:
        try:
            async with db.transaction() as tx:
                if not await work(tx):
                    raise _Busy
            return
        except _Busy:
            await asyncio.sleep(wait)
            wait = min(2 * wait, _MOST_WAIT)


async def _reconcile(tx: Tx, scope: Scope, key: str) -> bool:
    """False, having changed nothing, if a profile's lock is held elsewhere."""
    user_id: str | None = None
    if scope == "event":
        event_ids = [key]
    elif scope == "profile":
        event_ids = await store.events_of_profile(tx, key)
    elif scope == "series":
        event_ids = await store.events_of_series(tx, key)
    else:
        event_ids, user_id = await store.events_of_subscription(tx, key)
        if user_id is None:
            return True
    if await store.try_lock_profiles(tx, event_ids):
        return False
    await _apply(tx, event_ids, user_id)
    return True


async def _apply(tx: Tx, event_ids: list[str], user_id: str | None) -> None:
    """With the profiles' locks held: the copies, and what follows from them."""
    await store.reconcile(tx, event_ids, user_id)
    await agenda.settle_recurrence_ends(tx, source_event_ids=event_ids)
    # Connected calendars the change reaches get their copies brought in line
    # by the account's own job (it talks to the provider, outside this lock).
    accounts = await connected.targets_of_events(tx, event_ids)
    if user_id is not None:  # the subscription's targets may have changed
        accounts += await connected.accounts_of_user(tx, user_id)
    await engine.queue_pushes(tx, accounts)


def handlers() -> dict[str, jobs.Handler]:
    """The sync jobs' handlers, for one worker."""
    state = _Jobs()
    return {SYNC: state.run_sync, CLEANUP: state.run_cleanup}


JOBS = (SYNC, CLEANUP)
"""The sync jobs' names (for metrics): what `handlers` handles."""


async def run_sync(db: Database, payload: dict[str, Any]) -> None:
    """One sync, now, on its own (what a job does, for callers outside a worker)."""
    scope, key = payload["scope"], payload["id"]
    await _exclusive(db, lambda tx: _reconcile(tx, scope, key))
