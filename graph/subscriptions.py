"""Subscription resolvers; the rules are in `domain.subscriptions`."""

from __future__ import annotations

import asyncpg
import strawberry

from db import subscriptions as store
from domain import ids, profiles
from domain import series as series_rules
from domain import subscriptions as domain
from graph.context import Context
from graph.dataloaders import reload
from graph.inputs import input_type, parse_input
from graph.paging import page
from graph.scalars import Timestamp
from graph.types import Page

SubscriptionCreateInput = input_type(domain.SubscriptionCreate, "SubscriptionCreateInput")
SubscriptionUpdateInput = input_type(domain.SubscriptionUpdate, "SubscriptionUpdateInput")

Info = strawberry.Info[Context, None]


@strawberry.type
class Subscription:
    id: strawberry.ID
    profile_id: strawberry.ID | None = strawberry.field(
        description="The source of a profile subscription; null when the caller can no "
                    "longer see it (access_valid is then false)."
    )
    series_id: strawberry.ID | None = strawberry.field(
        description="The source of a series subscription; null as for profile_id."
    )
    subscription_type: str
    is_active: bool | None
    access_valid: bool | None = strawberry.field(
        description="Whether the subscriber may still see the source."
    )
    include_personal_calendar: bool | None
    created_at: Timestamp | None
    updated_at: Timestamp | None

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> Subscription:
        valid = row["access_valid"]
        source_profile, source_series = row["source_profile_id"], row["source_series_id"]
        return cls(
            id=strawberry.ID(row["id"]),
            profile_id=strawberry.ID(source_profile) if valid and source_profile else None,
            series_id=strawberry.ID(source_series) if valid and source_series else None,
            subscription_type=row["subscription_type"], is_active=row["is_active"],
            access_valid=valid, include_personal_calendar=row["include_personal_calendar"],
            created_at=row["created_at"], updated_at=row["updated_at"],
        )


@strawberry.type
class SubscriptionAnswer:
    subscription: Subscription
    created: bool = strawberry.field(description="False when an existing one was reactivated.")


async def _owned(ctx: Context, subscription_id: str) -> asyncpg.Record:
    key = ids.parse("sub", subscription_id, param="subscription_id")
    return domain.check_owned(await ctx.loaders.subscription.load(key))


async def _reload(ctx: Context, key: str) -> Subscription:
    return Subscription.from_row(domain.check_owned(await reload(ctx.loaders.subscription, key)))


@strawberry.type
class SubscriptionQueries:
    @strawberry.field(description="The caller's subscriptions, active and paused.")
    async def subscriptions(self, info: Info, limit: int = 20, cursor: str | None = None
                            ) -> Page[Subscription]:
        ctx = info.context
        return await page(
            ctx, "subscriptions", limit, cursor,
            lambda after, n: store.page(ctx.db, ctx.viewer.user_id, after, n),
            Subscription.from_row,
        )

    @strawberry.field(description="One of the caller's subscriptions.")
    async def subscription(self, info: Info, subscription_id: strawberry.ID) -> Subscription:
        row = await _owned(info.context, subscription_id)
        if row["cleanup_requested_at"] is not None:  # unsubscribed, being cleaned up
            domain.check_owned(None)
        return Subscription.from_row(row)


@strawberry.type
class SubscriptionMutations:
    @strawberry.mutation(description="Subscribe to a profile or series, or reactivate.")
    async def create_subscription(self, info: Info, input: SubscriptionCreateInput
                                  ) -> SubscriptionAnswer:
        ctx = info.context
        data = parse_input(domain.SubscriptionCreate, input)
        kind, source_id = domain.source_of(data)
        if kind == "profile":
            profiles.check_visible(await ctx.loaders.profile.load(source_id), ctx.viewer)
        else:
            series_rules.check_visible(await ctx.loaders.series.load(source_id))
        targets = await domain.check_targets(ctx.db, ctx.viewer, data.external_calendar_ids)
        key, created = await domain.subscribe(ctx.db, ctx.viewer, data, targets)
        return SubscriptionAnswer(subscription=await _reload(ctx, key), created=created)

    @strawberry.mutation(description="Pause or resume a subscription.")
    async def update_subscription(self, info: Info, subscription_id: strawberry.ID,
                                  input: SubscriptionUpdateInput) -> Subscription:
        ctx = info.context
        data = parse_input(domain.SubscriptionUpdate, input)
        row = await _owned(ctx, subscription_id)
        await domain.update(ctx.db, row, data)
        return await _reload(ctx, row["id"])

    @strawberry.mutation(description="Unsubscribe; the synced copies are removed by a job.")
    async def delete_subscription(self, info: Info, subscription_id: strawberry.ID) -> bool:
        ctx = info.context
        await domain.unsubscribe(ctx.db, await _owned(ctx, subscription_id))
        return True
