"""Event resolvers: load through the per-request loaders, decide in `domain.events`."""

from __future__ import annotations

from typing import Annotated

import asyncpg
import strawberry

from db import events as store
from domain import events as domain
from domain import ids
from domain import profiles as profile_rules
from graph import lists
from graph.context import Context
from graph.dataloaders import reload
from graph.inputs import input_type, parse_input
from graph.paging import page
from graph.types import Event, Page

EventCreateInput = input_type(domain.EventCreate, "EventCreateInput")
ProfileEventCreateInput = input_type(domain.ProfileEventCreate, "ProfileEventCreateInput")
EventUpdateInput = input_type(domain.EventUpdate, "EventUpdateInput")
EventCancelInput = input_type(domain.EventCancel, "EventCancelInput")
EventRescheduleInput = input_type(domain.EventReschedule, "EventRescheduleInput")

Info = strawberry.Info[Context, None]


async def load_visible(ctx: Context, event_id: str) -> Event:
    key = ids.parse("evt", event_id, param="event_id")
    return Event.from_row(domain.check_visible(await ctx.loaders.event.load(key)))


async def reload_event(ctx: Context, key: str) -> Event:
    return Event.from_row(domain.check_visible(await reload(ctx.loaders.event, key)))


async def administrable(ctx: Context, event_id: str) -> tuple[str, asyncpg.Record]:
    key = ids.parse("evt", event_id, param="event_id")
    return key, domain.check_administrable(await ctx.loaders.event.load(key), ctx.viewer)


async def _create(ctx: Context, profile_id: str, data: domain.ProfileEventCreate) -> Event:
    row = profile_rules.check_administrable(await ctx.loaders.profile.load(profile_id),
                                            ctx.viewer)
    profile_rules.check_live(row)
    event_id = await domain.create(ctx.db, row, data)
    return await reload_event(ctx, event_id)


@strawberry.type
class EventQueries:
    @strawberry.field(description=(
        "Events visible to the caller, by start time. Filters as `Profile.events`: "
        "`from` and `to` (both or neither, at most 366 days apart) keep the events that "
        "meet [from, to); `status` scheduled or cancelled; `profile_ids` (at most 100) "
        "those of these profiles."
    ))
    async def events(
        self, info: Info, limit: int = 20, cursor: str | None = None,
        from_: Annotated[str | None, strawberry.argument(name="from")] = None,
        to: str | None = None, status: str | None = None,
        profile_ids: list[strawberry.ID] | None = None,
    ) -> Page[Event]:
        ctx = info.context
        if from_ is not None or to is not None or status is not None or profile_ids is not None:
            wanted = None if profile_ids is None else [str(p) for p in profile_ids]
            return await lists.events(ctx, limit, cursor, from_, to, status, wanted)
        return await page(
            ctx, "events", limit, cursor,
            lambda after, n: store.page(ctx.db, ctx.viewer.user_id, after, n),
            Event.from_row, order="start_time",
        )

    @strawberry.field(description="A profile's events visible to the caller, by start time.")
    async def profile_events(self, info: Info, profile_id: strawberry.ID, limit: int = 20,
                             cursor: str | None = None) -> Page[Event]:
        ctx = info.context
        key = ids.parse("prf", profile_id, param="profile_id")
        profile_rules.check_visible(await ctx.loaders.profile.load(key), ctx.viewer)
        return await page(
            ctx, f"profile-events:{key}", limit, cursor,
            lambda after, n: store.OF_PROFILE.page(ctx.db, key, after, n, ctx.viewer.user_id),
            Event.from_row, order="start_time",
        )

    @strawberry.field(description="An event visible to the caller (its stored base row).")
    async def event(self, info: Info, event_id: strawberry.ID) -> Event:
        return await load_visible(info.context, event_id)


@strawberry.type
class EventMutations:
    @strawberry.mutation(description="Create an event on a profile the caller administers.")
    async def create_event(self, info: Info, input: EventCreateInput) -> Event:
        data = parse_input(domain.EventCreate, input)
        return await _create(info.context, data.profile_id, data)

    @strawberry.mutation(description="Create an event on the profile in the path.")
    async def create_profile_event(self, info: Info, profile_id: strawberry.ID,
                                   input: ProfileEventCreateInput) -> Event:
        key = ids.parse("prf", profile_id, param="profile_id")
        data = parse_input(domain.ProfileEventCreate, input)
        return await _create(info.context, key, data)

    @strawberry.mutation(description="Change an event the caller administers.")
    async def update_event(self, info: Info, event_id: strawberry.ID, input: EventUpdateInput
                           ) -> Event:
        ctx = info.context
        data = parse_input(domain.EventUpdate, input)
        key, row = await administrable(ctx, event_id)
        await domain.update(ctx.db, row, data)
        return await reload_event(ctx, key)

    @strawberry.mutation(description="Delete an event permanently, with its RSVPs.")
    async def delete_event(self, info: Info, event_id: strawberry.ID) -> bool:
        ctx = info.context
        _, row = await administrable(ctx, event_id)
        await domain.delete(ctx.db, row)
        return True

    @strawberry.mutation(description="Cancel an event; its RSVPs are kept.")
    async def cancel_event(self, info: Info, event_id: strawberry.ID,
                           input: EventCancelInput | None = None) -> Event:
        ctx = info.context
        data = parse_input(domain.EventCancel, input) if input is not None else (
            domain.EventCancel()
        )
        key, row = await administrable(ctx, event_id)
        await domain.cancel(ctx.db, row, data)
        return await reload_event(ctx, key)

    @strawberry.mutation(description="Move an event to a new time; reopens a cancelled one.")
    async def reschedule_event(self, info: Info, event_id: strawberry.ID,
                               input: EventRescheduleInput) -> Event:
        ctx = info.context
        data = parse_input(domain.EventReschedule, input)
        key, row = await administrable(ctx, event_id)
        await domain.reschedule(ctx.db, row, data)
        return await reload_event(ctx, key)
