"""Keeping subscribers' calendars in step with their sources.

Writes that change what a subscriber should see (an event created, changed,
cancelled or deleted; an event linked to or unlinked from a series; a profile
or series made private or deleted; a subscription created, reactivated or
removed) call one of the `*_changed` functions inside their transaction. That
queues a sync job naming the scope; the job recomputes the copies of every
event in the scope from the current state (`db.sync.reconcile`). Jobs hold
the source profile's lock while they do, so they apply changes in order.
"""

from __future__ import annotations

from typing import Any, Literal

from db import connected
from db import sync as store
from db.database import Database, Tx
from kalends import agenda
from kalends.connected import engine
from kalends.service import jobs

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


async def run_sync(db: Database, payload: dict[str, Any]) -> None:
    async with db.transaction() as tx:
        await _reconcile(tx, payload["scope"], payload["id"])


async def run_cleanup(db: Database, payload: dict[str, Any]) -> None:
    """Remove what the subscription alone copied, then the subscription. Copies
    another subscription of the same user covers are handed over to it."""
    async with db.transaction() as tx:
        await _reconcile(tx, "subscription", payload["id"])
        await tx.execute(
            "DELETE FROM subscriptions WHERE id = $1 AND cleanup_requested_at IS NOT NULL",
            payload["id"],
        )


async def _reconcile(tx: Tx, scope: Scope, key: str) -> None:
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
            return
    await store.lock_profiles(tx, event_ids)
    await store.reconcile(tx, event_ids, user_id)
    await agenda.settle_recurrence_ends(tx, source_event_ids=event_ids)
    # Connected calendars the change reaches get their copies brought in line
    # by the account's own job (it talks to the provider, outside this lock).
    accounts = await connected.targets_of_events(tx, event_ids)
    if user_id is not None:  # the subscription's targets may have changed
        accounts += await connected.accounts_of_user(tx, user_id)
    await engine.queue_pushes(tx, accounts)


HANDLERS: dict[str, jobs.Handler] = {SYNC: run_sync, CLEANUP: run_cleanup}
