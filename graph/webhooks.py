"""Webhook endpoint resolvers; the rules are in `domain.notify.webhooks`."""

from __future__ import annotations

import asyncpg
import strawberry

from core.errors import not_found
from db import webhooks as store
from domain import ids
from domain import profiles as profile_rules
from domain.notify import webhooks as domain
from graph.context import Context
from graph.inputs import input_type, parse_input
from graph.paging import page
from graph.scalars import Timestamp
from graph.types import Page

WebhookEndpointCreateInput = input_type(domain.WebhookEndpointCreate,
                                        "WebhookEndpointCreateInput")
WebhookEndpointUpdateInput = input_type(domain.WebhookEndpointUpdate,
                                        "WebhookEndpointUpdateInput")

Info = strawberry.Info[Context, None]


@strawberry.type(description="Where a profile's changes are posted, signed (Standard Webhooks).")
class WebhookEndpoint:
    id: strawberry.ID
    profile_id: strawberry.ID
    url: str
    event_types: list[str]
    is_active: bool = strawberry.field(
        description="false: paused by an administrator, or disabled after failures.")
    disabled_reason: str | None = strawberry.field(
        description="Why delivery was disabled (410 Gone, or attempts that kept failing).")
    created_at: Timestamp
    updated_at: Timestamp

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> WebhookEndpoint:
        return cls(
            id=strawberry.ID(row["id"]), profile_id=strawberry.ID(row["profile_id"]),
            url=row["url"], event_types=list(row["event_types"]), is_active=row["is_active"],
            disabled_reason=row["disabled_reason"], created_at=row["created_at"],
            updated_at=row["updated_at"],
        )


@strawberry.type(description="An endpoint with its signing secret: shown once, when made.")
class WebhookEndpointWithSecret(WebhookEndpoint):
    secret: str = strawberry.field(description="`whsec_...`: keep it; it is not shown again.")

    @classmethod
    def with_secret(cls, row: asyncpg.Record, secret: str) -> WebhookEndpointWithSecret:
        return cls(**vars(WebhookEndpoint.from_row(row)), secret=secret)


async def _administered_profile(ctx: Context, profile_id: str) -> asyncpg.Record:
    return profile_rules.check_administrable(await ctx.loaders.profile.load(profile_id),
                                             ctx.viewer)


async def _endpoint(ctx: Context, endpoint_id: str) -> asyncpg.Record:
    """An endpoint of a profile the caller administers."""
    key = ids.parse("whe", endpoint_id, param="endpoint_id")
    row = await store.by_id(ctx.db, key)
    if row is None:
        raise not_found("webhook endpoint", param="endpoint_id")
    profile_rules.check_administrable(await ctx.loaders.profile.load(row["profile_id"]),
                                      ctx.viewer, what="webhook endpoint", param="endpoint_id")
    return row


async def _reloaded(ctx: Context, endpoint_id: str) -> asyncpg.Record:
    row = await store.by_id(ctx.db, endpoint_id)
    if row is None:  # deleted meanwhile
        raise not_found("webhook endpoint", param="endpoint_id")
    return row


@strawberry.type
class WebhookQueries:
    @strawberry.field(description="A profile's webhook endpoints, oldest first (for its admins).")
    async def webhook_endpoints(self, info: Info, profile_id: strawberry.ID, limit: int = 20,
                                cursor: str | None = None) -> Page[WebhookEndpoint]:
        ctx = info.context
        key = ids.parse("prf", profile_id, param="profile_id")
        await _administered_profile(ctx, key)
        return await page(
            ctx, f"webhook-endpoints:{key}", limit, cursor,
            lambda after, n: store.page(ctx.db, key, after, n), WebhookEndpoint.from_row,
        )

    @strawberry.field(description="A webhook endpoint of a profile the caller administers.")
    async def webhook_endpoint(self, info: Info, endpoint_id: strawberry.ID) -> WebhookEndpoint:
        return WebhookEndpoint.from_row(await _endpoint(info.context, endpoint_id))


@strawberry.type
class WebhookMutations:
    @strawberry.mutation(description="Register a webhook endpoint; its secret is shown once.")
    async def create_webhook_endpoint(self, info: Info, profile_id: strawberry.ID,
                                      input: WebhookEndpointCreateInput
                                      ) -> WebhookEndpointWithSecret:
        ctx = info.context
        key = ids.parse("prf", profile_id, param="profile_id")
        data = parse_input(domain.WebhookEndpointCreate, input)
        profile = await _administered_profile(ctx, key)
        profile_rules.check_live(profile)
        endpoint_id, secret = await domain.create(
            ctx.db, ctx.vault, profile, data, allow_http=ctx.services.webhook_allow_http)
        return WebhookEndpointWithSecret.with_secret(await _reloaded(ctx, endpoint_id), secret)

    @strawberry.mutation(description=(
        "Change a webhook endpoint; is_active true resumes a disabled one, oldest queued "
        "message first."
    ))
    async def update_webhook_endpoint(self, info: Info, endpoint_id: strawberry.ID,
                                      input: WebhookEndpointUpdateInput) -> WebhookEndpoint:
        ctx = info.context
        data = parse_input(domain.WebhookEndpointUpdate, input)
        row = await _endpoint(ctx, endpoint_id)
        await domain.update(ctx.db, row, data, allow_http=ctx.services.webhook_allow_http)
        return WebhookEndpoint.from_row(await _reloaded(ctx, row["id"]))

    @strawberry.mutation(description="Delete a webhook endpoint and what waits in its queue.")
    async def delete_webhook_endpoint(self, info: Info, endpoint_id: strawberry.ID) -> bool:
        ctx = info.context
        await domain.delete(ctx.db, await _endpoint(ctx, endpoint_id))
        return True

    @strawberry.mutation(description=(
        "A new signing secret, shown once; the old one still signs for 24 hours."
    ))
    async def rotate_webhook_endpoint_secret(self, info: Info, endpoint_id: strawberry.ID
                                             ) -> WebhookEndpointWithSecret:
        ctx = info.context
        row = await _endpoint(ctx, endpoint_id)
        secret = await domain.rotate(ctx.db, ctx.vault, row)
        return WebhookEndpointWithSecret.with_secret(await _reloaded(ctx, row["id"]), secret)
