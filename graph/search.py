"""Search resolvers; what a query may be is decided in `domain.search`."""

from __future__ import annotations

import asyncpg
import strawberry

from db import search as store
from domain import search as domain
from graph.context import Context
from graph.paging import ranked_page
from graph.scalars import Timestamp
from graph.types import Page

Info = strawberry.Info[Context, None]


@strawberry.type(description="A search hit: an event, a profile or a series.")
class SearchItem:
    type: str = strawberry.field(description="event, profile or series.")
    id: strawberry.ID
    title: str | None = strawberry.field(
        description="An event's title, a profile's display_name, a series' name."
    )
    description: str | None
    rank: float | None = strawberry.field(
        description="Relevance: 3 when the whole query is found in the title (an event's) or "
        "the name or handle (a profile's, a series'), 2 when it is found only once the "
        "description is included, 1 when it needs the location too; plus the item's day "
        "(an event's start, a profile's or series' creation; whole days since 1970) over "
        "10,000,000, so the latest come first within a tier. Results come in descending "
        "rank, then by id."
    )
    image_url: str | None = strawberry.field(
        description="An event's image_url, a profile's profile_image_url; null for a series."
    )
    slug: str | None = strawberry.field(
        description="An event's or a series' slug; a profile's platform_id."
    )
    profile_handle: str | None = strawberry.field(
        description="The owning profile's platform_id; null when that profile is not visible."
    )
    date_info: Timestamp | None = strawberry.field(
        description="An event's start_time (the first occurrence of a recurring one); "
        "null for profiles and series."
    )

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> SearchItem:
        return cls(
            type=row["kind"], id=strawberry.ID(row["id"]), title=row["title"],
            description=row["description"], rank=row["rank"], image_url=row["image_url"],
            slug=row["slug"], profile_handle=row["profile_handle"], date_info=row["date_info"],
        )


@strawberry.type
class SearchQueries:
    @strawberry.field(description="Full-text search over the events, profiles and series "
                      "visible to the caller, by rank.")
    async def search(
        self, info: Info, q: str, types: list[str] | None = None, limit: int = 20,
        cursor: str | None = None,
    ) -> Page[SearchItem]:
        ctx = info.context
        query = domain.parse(q, types)
        return await ranked_page(
            ctx, query.list_key, limit, cursor,
            lambda after, n: store.page(ctx.db, query.kinds, query.text, query.prefix,
                                        ctx.viewer.user_id, after, n),
            SearchItem.from_row,
        )
