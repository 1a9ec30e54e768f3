"""Connected (external) calendars, as the caller sees them."""

from __future__ import annotations

import asyncpg
import strawberry

from db import connected as store
from graph.context import Context
from graph.paging import page
from graph.scalars import Timestamp
from graph.types import Page

Info = strawberry.Info[Context, None]


@strawberry.type(description=(
    "A calendar of one of the caller's connected accounts (iCloud/CalDAV, Google, Microsoft); "
    "its xcal_ ID is a subscription target and an agenda source."))
class ExternalCalendar:
    id: strawberry.ID
    name: str
    description: str | None
    color: str | None = strawberry.field(description="As the provider gives it; null if not.")
    can_edit: bool | None = strawberry.field(
        description="Whether Kalends may write to it (a subscription target needs true).")
    time_zone: str | None
    is_primary: bool | None
    created_at: Timestamp | None

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> ExternalCalendar:
        return cls(
            id=strawberry.ID(row["id"]), name=row["name"], description=row["description"],
            color=row["color"], can_edit=row["can_edit"], time_zone=row["time_zone"],
            is_primary=row["is_primary"], created_at=row["created_at"],
        )


@strawberry.type
class ExternalCalendarQueries:
    @strawberry.field(description="The caller's connected calendars, oldest first.")
    async def external_calendars(self, info: Info, limit: int = 20, cursor: str | None = None
                                 ) -> Page[ExternalCalendar]:
        ctx = info.context
        return await page(
            ctx, "external_calendars", limit, cursor,
            lambda after, n: store.page(ctx.db, ctx.viewer.user_id, after, n),
            ExternalCalendar.from_row,
        )
