"""RSVP and RSVP-settings resolvers; the rules are in `domain.rsvps`."""

from __future__ import annotations

import asyncpg
import strawberry

from db import rsvps as store
from domain import events as event_rules
from domain import ids
from domain import profiles as profile_rules
from domain import rsvps as domain
from graph.context import Context
from graph.dataloaders import reload
from graph.inputs import input_type, parse_input
from graph.paging import page
from graph.types import Page, Rsvp, RsvpAnswer, RsvpSettings, RsvpStats

RsvpCreateInput = input_type(domain.RsvpCreate, "RsvpCreateInput")
RsvpUpdateInput = input_type(domain.RsvpUpdate, "RsvpUpdateInput")
RsvpSettingsUpdateInput = input_type(domain.RsvpSettingsUpdate, "RsvpSettingsUpdateInput")

Info = strawberry.Info[Context, None]


async def _event(ctx: Context, event_id: str) -> asyncpg.Record:
    key = ids.parse("evt", event_id, param="event_id")
    return event_rules.check_visible(await ctx.loaders.event.load(key))


async def _rsvp(ctx: Context, event_id: str, rsvp_id: str) -> asyncpg.Record:
    event = await _event(ctx, event_id)
    key = ids.parse("rsvp", rsvp_id, param="rsvp_id")
    return domain.check_manageable(await store.by_id(ctx.db, key), event, ctx.viewer)


@strawberry.type
class RsvpQueries:
    @strawberry.field(description=(
        "An event's RSVPs: all of them for whoever administers the event, "
        "otherwise only the caller's own."
    ))
    async def event_rsvps(self, info: Info, event_id: strawberry.ID, limit: int = 20,
                          cursor: str | None = None) -> Page[Rsvp]:
        ctx = info.context
        event = await _event(ctx, event_id)
        only = None if profile_rules.administers(event, ctx.viewer) else ctx.viewer.user_id
        listing, args = store.of_event(only, None)
        return await page(
            ctx, f"rsvps:{event['id']}", limit, cursor,
            lambda after, n: listing.page(ctx.db, event["id"], after, n, *args),
            Rsvp.from_row,
        )

    @strawberry.field(description=(
        "One RSVP of an event: the caller's own, or any for whoever administers the event."
    ))
    async def event_rsvp(self, info: Info, event_id: strawberry.ID,
                         rsvp_id: strawberry.ID) -> Rsvp:
        return Rsvp.from_row(await _rsvp(info.context, event_id, rsvp_id))

    @strawberry.field(description="Counts of an event's RSVPs.")
    async def event_rsvp_stats(self, info: Info, event_id: strawberry.ID) -> RsvpStats:
        ctx = info.context
        event = await _event(ctx, event_id)
        return RsvpStats.from_row(event["id"], await ctx.loaders.rsvp_stats.load(event["id"]))

    @strawberry.field(description="An event's RSVP settings.")
    async def event_rsvp_settings(self, info: Info, event_id: strawberry.ID) -> RsvpSettings:
        return RsvpSettings.from_row(await _event(info.context, event_id))


@strawberry.type
class RsvpMutations:
    @strawberry.mutation(description="Create or replace the caller's RSVP to an event.")
    async def create_event_rsvp(self, info: Info, event_id: strawberry.ID,
                                input: RsvpCreateInput) -> RsvpAnswer:
        ctx = info.context
        data = parse_input(domain.RsvpCreate, input)
        event = await _event(ctx, event_id)
        row, created = await domain.answer(ctx.db, ctx.viewer, event["id"], data)
        return RsvpAnswer(rsvp=Rsvp.from_row(row), created=created)

    @strawberry.mutation(description="Change an RSVP: its attendee or the event's owner.")
    async def update_event_rsvp(self, info: Info, event_id: strawberry.ID,
                                rsvp_id: strawberry.ID, input: RsvpUpdateInput) -> Rsvp:
        ctx = info.context
        data = parse_input(domain.RsvpUpdate, input)
        rsvp = await _rsvp(ctx, event_id, rsvp_id)
        return Rsvp.from_row(await domain.change(ctx.db, rsvp, data))

    @strawberry.mutation(description="Withdraw an RSVP: its attendee or the event's owner.")
    async def delete_event_rsvp(self, info: Info, event_id: strawberry.ID,
                                rsvp_id: strawberry.ID) -> bool:
        ctx = info.context
        await domain.withdraw(ctx.db, await _rsvp(ctx, event_id, rsvp_id))
        return True

    @strawberry.mutation(description="Change an event's RSVP settings (its administrators).")
    async def update_event_rsvp_settings(self, info: Info, event_id: strawberry.ID,
                                         input: RsvpSettingsUpdateInput) -> RsvpSettings:
        ctx = info.context
        data = parse_input(domain.RsvpSettingsUpdate, input)
        key = ids.parse("evt", event_id, param="event_id")
        event = event_rules.check_administrable(await ctx.loaders.event.load(key), ctx.viewer)
        await domain.update_settings(ctx.db, event, data)
        return RsvpSettings.from_row(
            event_rules.check_visible(await reload(ctx.loaders.event, key))
        )
