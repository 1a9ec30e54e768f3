"""Organization resolvers."""

from __future__ import annotations

import strawberry

from db import organizations
from graph.context import Context
from graph.types import Organization, Page


@strawberry.type
class OrganizationQueries:
    @strawberry.field(description="All organizations the caller belongs to (never paginated).")
    async def organizations(self, info: strawberry.Info[Context, None]) -> Page[Organization]:
        ctx = info.context
        rows = await organizations.of_user(ctx.db, ctx.viewer.user_id)
        return Page(data=[Organization.from_row(r) for r in rows], has_more=False, next_cursor=None)
