"""Per-request dataloaders: one SQL statement per batch of keys, whatever the page size.

They are created by the context factory, so a cache never outlives the request
or leaks one caller's view of a row to another.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable, Sequence
from contextlib import suppress
from functools import cached_property
from typing import Any, Generic, TypeVar

import asyncpg
from strawberry.dataloader import DataLoader

from db import calendar_events, calendars, events, profiles, rsvps, series, subscriptions
from db.database import Database
from domain.auth import Viewer

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Batch(Generic[K, V]):
    """Keys asked in one turn of the event loop, answered by one call of `load` (a
    value or an exception per key), and handed back CHUNK at a time, a turn of the
    loop each. A DataLoader hands every answer back in one turn: 500 answers that
    were errors (each located in the document by graphql-core) held the loop, and
    `/healthz` behind it, for tens of milliseconds."""

    CHUNK = 50

    def __init__(self, load: Callable[[list[K]], Awaitable[Sequence[V | BaseException]]]
                 ) -> None:
        self._load = load
        self._pending: dict[K, asyncio.Future[V]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def load(self, key: K) -> asyncio.Future[V]:
        future = self._pending.get(key)
        if future is None:
            loop = asyncio.get_running_loop()
            if not self._pending:  # the first of a turn: dispatched once the turn is over
                task = loop.create_task(self._dispatch())
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            future = self._pending[key] = loop.create_future()
        return future

    async def _dispatch(self) -> None:
        pending, self._pending = self._pending, {}
        try:
            values: Sequence[V | BaseException] = await self._load(list(pending))
        except Exception as exc:  # each asker raises it (a lost database, say)
            values = [exc] * len(pending)
        for i, (future, value) in enumerate(zip(pending.values(), values, strict=True)):
            if i and i % self.CHUNK == 0:
                await asyncio.sleep(0)
            if future.done():  # cancelled meanwhile
                continue
            if isinstance(value, BaseException):
                future.set_exception(value)
            else:
                future.set_result(value)


class Loaders:
    """Each loader is made on first use: most requests need one or two of them."""

    def __init__(self, db: Database, viewer: Viewer) -> None:
        self._db = db
        self._viewer = viewer
        self._keyed: dict[str, DataLoader[Any, Any]] = {}
        self._batches: dict[str, Batch[Any, Any]] = {}

    def batch(self, name: str, load: Callable[[list[Any]], Awaitable[Sequence[Any]]]
              ) -> Batch[Any, Any]:
        """The request's Batch called `name`, made with `load` on first use."""
        found = self._batches.get(name)
        if found is None:
            found = self._batches[name] = Batch(load)
        return found

    def keyed(self, name: str, load: Callable[[Sequence[Any]], Awaitable[list[Any]]]
              ) -> DataLoader[Any, Any]:
        """The request's loader called `name`, made with `load` on first use (the
        connections of graph/connections.py: one per kind of list)."""
        loader = self._keyed.get(name)
        if loader is None:
            loader = self._keyed[name] = DataLoader(load_fn=load)
        return loader

    @cached_property
    def profile(self) -> DataLoader[str, asyncpg.Record | None]:
        """Rows carry the viewer's role in the owning organization."""
        return DataLoader(load_fn=self._profiles)

    @cached_property
    def event(self) -> DataLoader[str, asyncpg.Record | None]:
        """Events the viewer may see; others load as None."""
        return DataLoader(load_fn=self._events)

    @cached_property
    def series(self) -> DataLoader[str, asyncpg.Record | None]:
        """Series the viewer may see; others load as None."""
        return DataLoader(load_fn=self._series)

    @cached_property
    def series_of_event(self) -> DataLoader[str, list[asyncpg.Record]]:
        return DataLoader(load_fn=self._series_of_events)

    @cached_property
    def rsvp_stats(self) -> DataLoader[str, asyncpg.Record | None]:
        return DataLoader(load_fn=self._rsvp_stats)

    @cached_property
    def subscription(self) -> DataLoader[str, asyncpg.Record | None]:
        """The viewer's own subscriptions, those being removed included."""
        return DataLoader(load_fn=self._subscriptions)

    @cached_property
    def calendar(self) -> DataLoader[str, asyncpg.Record | None]:
        """The viewer's own calendars; others load as None."""
        return DataLoader(load_fn=self._calendars)

    @cached_property
    def calendar_event(self) -> DataLoader[str, asyncpg.Record | None]:
        """The viewer's own calendar events; others load as None."""
        return DataLoader(load_fn=self._calendar_events)

    async def _profiles(self, keys: Sequence[str]) -> list[asyncpg.Record | None]:
        rows = await profiles.by_ids(self._db, keys, self._viewer.user_id)
        return _by_key(rows, keys)

    async def _events(self, keys: Sequence[str]) -> list[asyncpg.Record | None]:
        return _by_key(await events.by_ids(self._db, keys, self._viewer.user_id), keys)

    async def _series(self, keys: Sequence[str]) -> list[asyncpg.Record | None]:
        return _by_key(await series.by_ids(self._db, keys, self._viewer.user_id), keys)

    async def _series_of_events(self, keys: Sequence[str]) -> list[list[asyncpg.Record]]:
        grouped: dict[str, list[asyncpg.Record]] = {k: [] for k in keys}
        for row in await series.of_events(self._db, keys, self._viewer.user_id):
            grouped[row["event_id"]].append(row)
        return [grouped[k] for k in keys]

    async def _rsvp_stats(self, keys: Sequence[str]) -> list[asyncpg.Record | None]:
        return _by_key(await rsvps.stats(self._db, keys), keys, column="event_id")

    async def _subscriptions(self, keys: Sequence[str]) -> list[asyncpg.Record | None]:
        rows = await subscriptions.by_ids(self._db, keys, self._viewer.user_id)
        return _by_key(rows, keys)

    async def _calendars(self, keys: Sequence[str]) -> list[asyncpg.Record | None]:
        return _by_key(await calendars.by_ids(self._db, keys, self._viewer.user_id), keys)

    async def _calendar_events(self, keys: Sequence[str]) -> list[asyncpg.Record | None]:
        rows = await calendar_events.by_ids(self._db, keys, self._viewer.user_id)
        return _by_key(rows, keys)


def _by_key(rows: list[asyncpg.Record], keys: Sequence[str], *, column: str = "id"
            ) -> list[asyncpg.Record | None]:
    """The row for each key, in the keys' order; None where there is none."""
    by_key = {r[column]: r for r in rows}
    return [by_key.get(k) for k in keys]


async def reload(loader: DataLoader[str, asyncpg.Record | None], key: str
                 ) -> asyncpg.Record | None:
    """Load `key` afresh after a write, whether or not it was loaded before."""
    with suppress(KeyError):  # strawberry's clear() raises for a key never loaded
        loader.clear(key)
    return await loader.load(key)
