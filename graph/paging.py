"""Keyset pages: decode the cursor, fetch one row more than asked, cut."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, TypeVar

import asyncpg

from graph.context import Context
from graph.types import Page
from kalends.pagination import check_limit

T = TypeVar("T")

Fetch = Callable[[tuple[datetime, str] | None, int], Awaitable[list[asyncpg.Record]]]


async def page(
    ctx: Context, list_key: str, limit: int, cursor: str | None, fetch: Fetch,
    item: Callable[[asyncpg.Record], T], *, order: str = "created_at",
) -> Page[T]:
    """`list_key` binds cursors to one list of one caller."""
    limit = check_limit(limit)
    cursors = ctx.services.cursors
    key = f"{list_key}:{ctx.viewer.user_id}"
    after = cursors.decode(key, cursor) if cursor else None
    rows: list[Any] = await fetch(after, limit + 1)
    rows, has_more, next_cursor = cursors.page(key, rows, limit, order=order)
    return Page(data=[item(r) for r in rows], has_more=has_more, next_cursor=next_cursor)
