"""Keyset pages: decode the cursor, fetch one row more than asked, cut."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, TypeVar

import asyncpg

from domain.pagination import COUNT_CAP, check_limit
from graph.context import Context
from graph.types import Count, Page

T = TypeVar("T")
K = TypeVar("K", datetime, float)

Fetch = Callable[[tuple[datetime, str] | None, int], Awaitable[list[asyncpg.Record]]]
RankFetch = Callable[[tuple[float, str] | None, int], Awaitable[list[asyncpg.Record]]]


async def page(
    ctx: Context, list_key: str, limit: int, cursor: str | None, fetch: Fetch,
    item: Callable[[asyncpg.Record], T], *, order: str = "created_at",
) -> Page[T]:
    """`list_key` binds cursors to one list of one caller."""
    return await _page(ctx, list_key, limit, cursor, ctx.services.cursors.decode, fetch, item,
                       order)


async def ranked_page(
    ctx: Context, list_key: str, limit: int, cursor: str | None, fetch: RankFetch,
    item: Callable[[asyncpg.Record], T], *, order: str = "rank",
) -> Page[T]:
    """A list ordered by a float `order` column, descending (search): the same
    keyset cursors, carrying the rank instead of a timestamp."""
    return await _page(ctx, list_key, limit, cursor, ctx.services.cursors.decode_rank, fetch,
                       item, order)


async def _page(
    ctx: Context, list_key: str, limit: int, cursor: str | None,
    decode: Callable[[str, str], tuple[K, str]],
    fetch: Callable[[tuple[K, str] | None, int], Awaitable[list[asyncpg.Record]]],
    item: Callable[[asyncpg.Record], T], order: str,
) -> Page[T]:
    limit = check_limit(limit)
    key = f"{list_key}:{ctx.viewer.user_id}"
    after = decode(key, cursor) if cursor else None
    rows: list[Any] = await fetch(after, limit + 1)
    rows, has_more, next_cursor = ctx.services.cursors.page(key, rows, limit, order=order)
    # The total is what the same statement reads from the start, up to the cap: it
    # cannot disagree with the pages, and it is read only when asked for.
    return Page(data=[item(r) for r in rows], has_more=has_more, next_cursor=next_cursor,
                count=Count(lambda: _total(fetch)))


async def _total(fetch: Callable[[Any, int], Awaitable[list[Any]]]) -> int:
    return len(await fetch(None, COUNT_CAP + 1))
