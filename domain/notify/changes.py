"""Changes to events and RSVPs as they commit, for live subscribers in every process
(GraphQL subscriptions, docs/graphql.md, "Dashboards: `/graphql`").

Every change webhooks record (`domain.notify.webhooks.record`) is also announced
here, in the change's own transaction, with `pg_notify`: PostgreSQL delivers a
transaction's notifications when it commits, to every listening session of every
process, in commit order, and never those of a transaction that rolls back. A
notification holds the change's type and IDs only (`event.updated prf_... evt_...`,
far below PostgreSQL's 8000 bytes); a subscriber then reads what it shows as its
own caller may see it. An event a delete removed can no longer be read, so the
delete also keeps what it was, for an hour (`db.changes.keep_deleted`).

Each process listens on one connection of its own (`Feed`) and hands each change
to the watches it concerns: a profile's watches get its events' changes in commit
order, at most `STREAM_LIMIT` waiting; an event's watches get "something about
the event changed", coalesced. A watch that falls further behind, or that was
open while the feed lost its database connection, ends with `service_unavailable`:
changes it should have seen are gone, and its subscriber must subscribe (and read)
again. The feed reconnects on its own, with back-off.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar

import asyncpg

from core.errors import ApiError
from db import changes as store
from db.database import Tx

log = logging.getLogger("kalends.changes")
T = TypeVar("T")

STREAM_LIMIT = 256
"""Changes one profile watch may have waiting before it is ended as fallen behind."""
DELETED_KEPT = timedelta(hours=1)
"""How long what a deleted event was stays readable."""
DISPATCH_BATCH = 4
"""Watches offered a change per turn of the event loop."""
DISPATCH_DELAY = 0.005
"""Seconds a change waits before it is offered (a burst of changes waits once)."""
_CONNECT_TIMEOUT = 5.0
_PING_EVERY = 10.0
"""Seconds between checks that the listening connection still answers (a peer
that vanished without closing the socket is otherwise never noticed)."""
_RETRY_FIRST, _RETRY_MOST = 0.2, 5.0
CONNECTION_ERRORS = (OSError, asyncpg.PostgresError, asyncpg.InterfaceError,
                      asyncpg.InternalClientError)
"""What the feed's own connection raises when the server goes away. asyncpg's
InternalClientError ("cannot switch to state 11; another operation (2) is in
progress") is among them: a postmaster killed while LISTEN was being sent left it,
and the feed's task died of it, so that the service exited 1 at its next stop."""


@dataclass(frozen=True, slots=True)
class Change:
    type: str
    """A webhook event type (`domain.notify.webhooks.EVENT_TYPES`)."""
    profile_id: str
    event_id: str
    occurrence_id: str | None = None
    """For an `occurrence.*` change: the occurrence's ID (docs/occurrences.md)."""
    _reads: dict[Hashable, asyncio.Future[Any]] = field(
        default_factory=dict, compare=False, repr=False)

    async def read_once(self, key: Hashable, read: Callable[[], Awaitable[T]]) -> T:
        """What `read()` gives, read once for all the watches this change reached
        that ask under the same `key` (the same read by the same caller): N
        subscribers of one caller cost one query, not N."""
        future = self._reads.get(key)
        if future is None:
            future = self._reads[key] = asyncio.ensure_future(read())
            # Retrieved even if every asker was cancelled meanwhile.
            future.add_done_callback(lambda f: f.cancelled() or f.exception())
        elif future.done():
            return future.result()  # type: ignore[no-any-return]
        # Shielded: one asker cancelled does not cancel the read for the others.
        result: T = await asyncio.shield(future)
        return result

    def payload(self) -> str:
        words = (self.type, self.profile_id, self.event_id, self.occurrence_id)
        return " ".join(w for w in words if w is not None)

    @classmethod
    def parse(cls, payload: str) -> Change | None:
        parts = payload.split(" ")
        if len(parts) not in (3, 4):
            return None
        return cls(parts[0], parts[1], parts[2], parts[3] if len(parts) == 4 else None)


async def announce(tx: Tx, event_type: str, profile_id: str,
                   changed: Sequence[tuple[str, str | None]]) -> None:
    """In the transaction of a change to these events (or to their RSVPs, or to one
    of their occurrences: (event ID, occurrence ID or None) each): tell every
    process's subscribers once it commits. A delete must be announced before the
    rows go."""
    if not changed:
        return
    if event_type == "event.deleted":
        await store.keep_deleted(tx, [e for e, _ in changed], DELETED_KEPT)
    await store.announce(tx, [Change(event_type, profile_id, e, o).payload()
                              for e, o in changed])


def _unavailable(message: str) -> ApiError:
    return ApiError("service_unavailable", message, retry_after=1)


class Watch:
    """One subscriber's changes: `next()` waits for the next one."""

    def __init__(self, feed: Feed, key: str, *, coalesce: bool) -> None:
        self.key = key
        self._feed = feed
        self._limit = 1 if coalesce else STREAM_LIMIT
        self._waiting: deque[Change] = deque(maxlen=1 if coalesce else None)
        self._arrived = asyncio.Event()
        self._ended: str | None = None
        """Why no more changes will come, once they cannot."""

    async def next(self) -> Change:
        """The oldest change not yet taken (the latest only, when coalesced);
        raises `service_unavailable` once the watch has lost changes."""
        while True:
            if self._waiting:
                return self._waiting.popleft()
            if self._ended is not None:
                raise _unavailable(self._ended)
            self._arrived.clear()
            await self._arrived.wait()

    def close(self) -> None:
        self._feed._forget(self)

    def _offer(self, change: Change) -> None:
        if self._ended is not None:
            return
        if self._waiting.maxlen is None and len(self._waiting) >= self._limit:
            self._end(f"This subscription fell more than {self._limit} changes behind; "
                      "subscribe again.")
            return
        self._waiting.append(change)
        self._arrived.set()

    def _end(self, why: str) -> None:
        if self._ended is None:
            self._ended = why
            self._arrived.set()


class Feed:
    """The process's one listening connection, and the watches it feeds."""

    def __init__(self, dsn: str, *, on_count: Callable[[int], Any] | None = None) -> None:
        self._dsn = dsn
        self._on_count = on_count
        self._profiles: dict[str, set[Watch]] = {}
        self._events: dict[str, set[Watch]] = {}
        self._count = 0
        self._pending: deque[tuple[Change, list[Watch]]] = deque()
        self._dispatcher: asyncio.Task[None] | None = None
        self._connected = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def watches(self) -> int:
        """Watches open in this process (each one subscriber's buffer)."""
        return self._count

    @property
    def connected(self) -> bool:
        return self._connected.is_set()

    async def start(self, wait: float = _CONNECT_TIMEOUT) -> None:
        """Start listening; waits up to `wait` seconds for the first connection,
        and keeps trying in the background after that."""
        self._task = asyncio.create_task(self._listen(), name="change feed")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._connected.wait(), wait)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._end_all("The service is stopping; subscribe again.")

    def watch_profile(self, profile_id: str) -> Watch:
        """Changes to the profile's events, in commit order, from now on."""
        return self._open(self._profiles, profile_id, coalesce=False)

    def watch_event(self, event_id: str) -> Watch:
        """A signal for each change to the event or its RSVPs, from now on."""
        return self._open(self._events, event_id, coalesce=True)

    def _open(self, index: dict[str, set[Watch]], key: str, *, coalesce: bool) -> Watch:
        if not self.connected:
            raise _unavailable("Changes cannot be followed right now: the service is "
                               "reconnecting to its database.")
        watch = Watch(self, key, coalesce=coalesce)
        index.setdefault(key, set()).add(watch)
        self._counted(1)
        return watch

    def _forget(self, watch: Watch) -> None:
        for index in (self._profiles, self._events):
            watches = index.get(watch.key)
            if watches is not None and watch in watches:
                watches.discard(watch)
                if not watches:
                    del index[watch.key]
                self._counted(-1)
                return

    def _counted(self, delta: int) -> None:
        self._count += delta
        if self._on_count is not None:
            self._on_count(self._count)

    def _receive(self, payload: str) -> None:
        change = Change.parse(payload)
        if change is None:
            log.warning("unreadable change notification", extra={"payload": payload[:200]})
            return
        # The watches open at the commit's notification, offered the change a few at a
        # time, in arrival order (so each watch keeps commit order).
        targets = list(self._events.get(change.event_id, ()))
        if not change.type.startswith("rsvp."):  # an event's changes, its occurrences' too
            targets[:0] = self._profiles.get(change.profile_id, ())
        if not targets:
            return
        self._pending.append((change, targets))
        if self._dispatcher is None or self._dispatcher.done():
            self._dispatcher = asyncio.get_running_loop().create_task(
                self._dispatch(), name="change feed dispatch")

    async def _dispatch(self) -> None:
        """Offer pending changes to their watches, `DISPATCH_BATCH` watches per turn of
        the event loop: a thousand subscriptions woken at once would hold every other
        request (the write that made the change among them) behind all of their work.
        A change waits `DISPATCH_DELAY` first: the write that made it, which hears of
        its commit as the feed does, answers meanwhile."""
        await asyncio.sleep(DISPATCH_DELAY)
        while self._pending:
            change, targets = self._pending[0]
            for start in range(0, len(targets), DISPATCH_BATCH):
                for watch in targets[start:start + DISPATCH_BATCH]:
                    watch._offer(change)
                if start + DISPATCH_BATCH < len(targets):
                    await asyncio.sleep(0)
            self._pending.popleft()

    def _end_all(self, why: str) -> None:
        for index in (self._profiles, self._events):
            for watches in index.values():
                for watch in watches:
                    watch._end(why)

    async def _listen(self) -> None:
        retry = _RETRY_FIRST
        while True:
            lost = asyncio.Event()
            try:
                conn = await store.listen(self._dsn, self._receive, lost.set,
                                          timeout=_CONNECT_TIMEOUT)
            except Exception as exc:
                _failed("change feed cannot connect", exc, retry)
                await asyncio.sleep(retry)
                retry = min(2 * retry, _RETRY_MOST)
                continue
            retry = _RETRY_FIRST
            self._connected.set()
            try:
                await hold(conn, lost)
            except Exception as exc:
                _failed("change feed failed while listening", exc, retry)
            finally:
                self._connected.clear()
                await store.close(conn)
                self._end_all("The service lost its database connection; changes may have "
                              "been missed. Subscribe again.")
            log.warning("change feed lost its database connection; reconnecting")


def _failed(what: str, exc: Exception, retry: float) -> None:
    """A lost or unreachable database is a warning. Anything else is a fault of ours or
    asyncpg's, logged in full; either way the feed tries again rather than end for the
    life of the process."""
    if isinstance(exc, (*CONNECTION_ERRORS, TimeoutError)):
        log.warning(what, extra={"error": repr(exc), "retry_seconds": retry})
    else:
        log.error(what, exc_info=exc, extra={"retry_seconds": retry})


async def hold(conn: asyncpg.Connection, lost: asyncio.Event) -> None:
    """Returns once the listening connection `conn` is lost: `lost` is set (by its
    termination listener), or a ping every `_PING_EVERY` seconds goes unanswered (a
    peer that vanished without closing the socket is otherwise never noticed)."""
    while not lost.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(lost.wait(), _PING_EVERY)
            return
        try:
            await store.alive(conn, timeout=_CONNECT_TIMEOUT)
        except (*CONNECTION_ERRORS, TimeoutError):
            return
