"""Series resolvers; the rules are in `domain.series`."""

from __future__ import annotations

import asyncpg
import strawberry

from db import events as event_store
from db import series as store
from domain import events as event_rules
from domain import ids
from domain import profiles as profile_rules
from domain import series as domain
from graph.context import Context
from graph.dataloaders import reload
from graph.inputs import input_type, parse_input
from graph.paging import page
from graph.types import Event, Page, Series, SeriesDeletion, SeriesDeletionPreview

SeriesCreateInput = input_type(domain.SeriesCreate, "SeriesCreateInput")
SeriesUpdateInput = input_type(domain.SeriesUpdate, "SeriesUpdateInput")
SeriesEventLinkInput = input_type(domain.SeriesEventLink, "SeriesEventLinkInput")

Info = strawberry.Info[Context, None]


async def _visible(ctx: Context, series_id: str) -> asyncpg.Record:
    key = ids.parse("ser", series_id, param="series_id")
    return domain.check_visible(await ctx.loaders.series.load(key))


async def _administrable(ctx: Context, series_id: str) -> asyncpg.Record:
    key = ids.parse("ser", series_id, param="series_id")
    return domain.check_administrable(await ctx.loaders.series.load(key), ctx.viewer)


async def _reload(ctx: Context, key: str) -> Series:
    return Series.from_row(domain.check_visible(await reload(ctx.loaders.series, key)))


@strawberry.type
class SeriesQueries:
    @strawberry.field(description="Series of the profiles the caller owns or administers.")
    async def series_list(self, info: Info, limit: int = 20, cursor: str | None = None
                          ) -> Page[Series]:
        ctx = info.context
        return await page(
            ctx, "series", limit, cursor,
            lambda after, n: store.page(ctx.db, ctx.viewer.user_id, after, n),
            Series.from_row,
        )

    @strawberry.field(description="A profile's series visible to the caller.")
    async def profile_series(self, info: Info, profile_id: strawberry.ID, limit: int = 20,
                             cursor: str | None = None) -> Page[Series]:
        ctx = info.context
        key = ids.parse("prf", profile_id, param="profile_id")
        profile_rules.check_visible(await ctx.loaders.profile.load(key), ctx.viewer)
        return await page(
            ctx, f"profile-series:{key}", limit, cursor,
            lambda after, n: store.OF_PROFILE.page(ctx.db, key, after, n, ctx.viewer.user_id),
            Series.from_row,
        )

    @strawberry.field(description="A series visible to the caller.")
    async def series(self, info: Info, series_id: strawberry.ID) -> Series:
        return Series.from_row(await _visible(info.context, series_id))

    @strawberry.field(description="A series' visible events, by start time.")
    async def series_events(self, info: Info, series_id: strawberry.ID, limit: int = 20,
                            cursor: str | None = None) -> Page[Event]:
        ctx = info.context
        row = await _visible(ctx, series_id)
        return await page(
            ctx, f"series-events:{row['id']}", limit, cursor,
            lambda after, n: event_store.OF_SERIES.page(ctx.db, row["id"], after, n,
                                                        ctx.viewer.user_id),
            Event.from_row, order="start_time",
        )

    @strawberry.field(description="What deleting the series would do; changes nothing.")
    async def series_deletion_preview(self, info: Info, series_id: strawberry.ID
                                      ) -> SeriesDeletionPreview:
        ctx = info.context
        row = await _administrable(ctx, series_id)
        counts = await store.deletion_counts(ctx.db, row["id"])
        return SeriesDeletionPreview(series_name=row["name"], **dict(counts))


@strawberry.type
class SeriesMutations:
    @strawberry.mutation(description="Create a series on a profile the caller administers.")
    async def create_profile_series(self, info: Info, profile_id: strawberry.ID,
                                    input: SeriesCreateInput) -> Series:
        ctx = info.context
        key = ids.parse("prf", profile_id, param="profile_id")
        data = parse_input(domain.SeriesCreate, input)
        profile = profile_rules.check_administrable(await ctx.loaders.profile.load(key),
                                                    ctx.viewer)
        profile_rules.check_live(profile)
        return await _reload(ctx, await domain.create(ctx.db, profile, data))

    @strawberry.mutation(description="Change a series the caller administers.")
    async def update_series(self, info: Info, series_id: strawberry.ID,
                            input: SeriesUpdateInput) -> Series:
        ctx = info.context
        data = parse_input(domain.SeriesUpdate, input)
        row = await _administrable(ctx, series_id)
        await domain.update(ctx.db, row, data)
        return await _reload(ctx, row["id"])

    @strawberry.mutation(description="Delete a series; its events stay unless cascading.")
    async def delete_series(self, info: Info, series_id: strawberry.ID,
                            cascade_exclusive_events: bool = False) -> SeriesDeletion:
        ctx = info.context
        row = await _administrable(ctx, series_id)
        counts = await domain.delete(ctx.db, row,
                                     cascade_exclusive_events=cascade_exclusive_events)
        return SeriesDeletion(**counts)

    @strawberry.mutation(description="Add an event to a series; a no-op when already in it.")
    async def add_series_event(self, info: Info, series_id: strawberry.ID,
                               input: SeriesEventLinkInput) -> bool:
        ctx = info.context
        data = parse_input(domain.SeriesEventLink, input)
        row = await _administrable(ctx, series_id)
        event = event_rules.check_administrable(await ctx.loaders.event.load(data.event_id),
                                                ctx.viewer)
        await domain.link(ctx.db, row, event)
        return True

    @strawberry.mutation(description="Take an event out of a series; the event stays.")
    async def remove_series_event(self, info: Info, series_id: strawberry.ID,
                                  event_id: strawberry.ID) -> bool:
        ctx = info.context
        row = await _administrable(ctx, series_id)
        key = ids.parse("evt", event_id, param="event_id")
        await domain.unlink(ctx.db, row, key)
        return True
