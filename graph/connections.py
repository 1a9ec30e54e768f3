"""Connections: the lists under an object (`Profile.events`, `Organization.profiles`,
...), paged like the top-level lists and with the visibility of the REST read that
lists the same things.

A document asks for a connection once per parent (20 profiles' events), so each
connection loads through a per-request DataLoader: the pages of a whole level are
one statement (db/nested.py), whatever their number and size. Pages asked with the
same filters and size share a statement; a parent asked twice (two aliases, two
cursors) is simply two of its parents.

A list may keep only some of the rows its statement reads (`keep`: an event list's
window, which only recurrence expansion can decide, for a whole batch of rows at once,
beside the event loop); its page then reads on past
the rows it drops, at most MAX_SCAN rows, and a page cut short by that bound says
`has_more` with a cursor after the last row read, so the next page goes on from
there and nothing is skipped.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, NamedTuple, TypeVar

import asyncpg

from db.nested import Listing
from domain.pagination import COUNT_CAP, check_limit
from graph.context import Context
from graph.types import Count, Page

S = TypeVar("S", bound=Hashable)
T = TypeVar("T")

MAX_SCAN = 1000
"""Rows one page of a filtered list reads past those it keeps, per parent."""

Select = Callable[[Context, S], tuple[Listing, tuple[Any, ...]]]
Counts = Callable[[Context, Sequence[str], S], Awaitable[list[int]]]
Keep = Callable[[Context, Sequence[asyncpg.Record], S], Awaitable[list[bool]]]


class _Want(NamedTuple):
    parent: str
    after: tuple[datetime, str] | None
    rows: int  # the page's limit + 1: one more tells whether there are more
    spec: Any  # the connection's S: hashable, it keys the batches


class _Found(NamedTuple):
    rows: list[asyncpg.Record]
    resume: tuple[datetime, str] | None
    """Set when the page stopped at MAX_SCAN: where the next one goes on."""


@dataclass(frozen=True)
class Connection(Generic[S]):
    """One kind of list under a parent: `select` gives its listing (db/nested.py)
    and the listing's own parameters for the request and `spec` (what the list is
    filtered by; hashable: it keys the batches). `counts`, when set, counts in place
    of the listing (up to COUNT_CAP + 1)."""

    name: str
    select: Select[S]
    keep: Keep[S] | None = None
    counts: Counts[S] | None = None

    async def page(self, ctx: Context, parent: str, list_key: str, limit: int,
                   cursor: str | None, spec: S, item: Callable[[asyncpg.Record], T]
                   ) -> Page[T]:
        """`list_key` binds cursors to this parent's list and filters (and, as every
        cursor, to the caller)."""
        limit = check_limit(limit)
        key = f"{list_key}:{ctx.viewer.user_id}"
        cursors, order = ctx.services.cursors, self.select(ctx, spec)[0].column
        after = cursors.decode(key, cursor) if cursor else None
        pages = ctx.loaders.keyed(f"{self.name}:pages", lambda wants: self._pages(ctx, wants))
        found: _Found = await pages.load(_Want(parent, after, limit + 1, spec))
        rows, has_more, next_cursor = cursors.page(key, found.rows, limit, order=order)
        if not has_more and found.resume is not None:
            has_more, next_cursor = True, cursors.encode(key, *found.resume)
        totals = ctx.loaders.keyed(f"{self.name}:counts", lambda keys: self._counts(ctx, keys))
        return Page(data=[item(r) for r in rows], has_more=has_more, next_cursor=next_cursor,
                    count=Count(lambda: totals.load((parent, spec))))

    async def _pages(self, ctx: Context, wants: Sequence[_Want]) -> list[_Found]:
        return await _batched(wants, lambda w: (w.rows, w.spec),
                              lambda group: self._fill(ctx, group))

    async def _fill(self, ctx: Context, wants: Sequence[_Want]) -> list[_Found]:
        """The pages of `wants`, which share their size and spec: one statement,
        and more only for pages whose rows were dropped by `keep`."""
        rows, spec = wants[0].rows, wants[0].spec
        listing, args = self.select(ctx, spec)
        kept: list[list[asyncpg.Record]] = [[] for _ in wants]
        after = [w.after for w in wants]
        scanned = [0] * len(wants)
        resume: list[tuple[datetime, str] | None] = [None] * len(wants)
        active, size = list(range(len(wants))), rows
        while active:
            parents = [(wants[i].parent, *(after[i] or (None, None))) for i in active]
            lists = await listing.pages(ctx.db, parents, size, *args)
            flags = await self._keep(ctx, lists, spec)
            again = []
            for i, read, keep in zip(active, lists, flags, strict=True):
                scanned[i] += len(read)
                kept[i] += [r for r, k in zip(read, keep, strict=True) if k]
                if len(kept[i]) >= rows or len(read) < size:
                    continue  # the page is full, or the list has ended
                after[i] = (read[-1][listing.column], read[-1]["id"])
                if scanned[i] >= MAX_SCAN:
                    resume[i] = after[i]
                    continue
                again.append(i)
            active, size = again, min(MAX_SCAN, size * 4)
        return [_Found(k[:rows], r) for k, r in zip(kept, resume, strict=True)]

    async def _keep(self, ctx: Context, lists: Sequence[list[asyncpg.Record]], spec: S
                    ) -> list[list[bool]]:
        """Which rows of each list the page keeps: all, or as `keep` decides for the
        whole batch in one call."""
        if self.keep is None:
            return [[True] * len(read) for read in lists]
        flags = iter(await self.keep(ctx, [r for read in lists for r in read], spec))
        return [[next(flags) for _ in read] for read in lists]

    async def _counts(self, ctx: Context, keys: Sequence[tuple[str, Any]]) -> list[int]:
        async def count(group: Sequence[tuple[str, Any]]) -> list[int]:
            parents, spec = [k[0] for k in group], group[0][1]
            if self.counts is not None:
                return await self.counts(ctx, parents, spec)
            listing, args = self.select(ctx, spec)
            return await listing.counts(ctx.db, parents, COUNT_CAP + 1, *args)

        return await _batched(keys, lambda k: k[1], count)


K = TypeVar("K")
R = TypeVar("R")


async def _batched(items: Sequence[K], by: Callable[[K], Hashable],
                   run: Callable[[Sequence[K]], Awaitable[list[R]]]) -> list[R]:
    """`run` once per group of `items` alike by `by`, its answers put back in the
    items' order (a DataLoader's batch may mix sizes and filters)."""
    groups: dict[Hashable, list[int]] = {}
    for i, x in enumerate(items):
        groups.setdefault(by(x), []).append(i)
    answers: dict[int, R] = {}
    for indexes in groups.values():
        found = await run([items[i] for i in indexes])
        answers.update(zip(indexes, found, strict=True))
    return [answers[i] for i in range(len(items))]
