"""Occurrence resolvers (docs/occurrences.md): load through the per-request loaders,
decide in `domain.occurrences`."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, cast

import asyncpg
import strawberry

from core.errors import not_found
from domain import dashboard, ids
from domain import events as event_rules
from domain import occurrences as rules
from graph.context import Context
from graph.events import EventCancelInput, administrable, reload_event
from graph.inputs import input_type, parse_input
from graph.paging import page
from graph.types import Event, Occurrence, Page

OccurrenceUpdateInput = input_type(event_rules.OccurrenceUpdate, "OccurrenceUpdateInput")
EventSplitInput = input_type(rules.EventSplit, "EventSplitInput")

Info = strawberry.Info[Context, None]


async def _event_key(ctx: Context, event_id: str) -> str:
    """The event an occurrence's operation names: by its own ID, or as the agenda names
    it, by a subscription copy in one of the caller's calendars (docs/occurrences.md,
    "Occurrence IDs")."""
    if not ids.is_valid("cev", event_id):
        return ids.parse("evt", event_id, param="event_id")
    copy = await ctx.loaders.calendar_event.load(event_id.lower())
    if copy is None or copy["source_event_id"] is None:
        raise not_found("event", param="event_id")
    return str(copy["source_event_id"])


async def _visible(ctx: Context, event_id: str) -> asyncpg.Record:
    key = await _event_key(ctx, event_id)
    return event_rules.check_visible(await ctx.loaders.event.load(key))


async def _administrable(ctx: Context, event_id: str) -> tuple[str, asyncpg.Record]:
    return await administrable(ctx, await _event_key(ctx, event_id))


async def read(ctx: Context, row: asyncpg.Record, occurrence_id: str) -> Occurrence:
    """Occurrence `occurrence_id` of visible event `row`, as it stands."""
    found: Occurrence = Occurrence.of(await rules.read(ctx.db, row, occurrence_id, ctx.budget))
    return found


async def _after_write(ctx: Context, event_id: str, slot: str) -> Occurrence:
    return await read(ctx, (await reload_event(ctx, event_id)).row, f"{event_id}:{slot}")


@strawberry.type
class OccurrenceQueries:
    @strawberry.field(description=(
        "The occurrences of an event visible to the caller that meet [from, to) (RFC 3339 "
        "with an offset, at most 62 days apart), by start: each as it stands, cancelled "
        "ones included. All-day ones meet the window on the event's own calendar."
    ))
    async def event_occurrences(
        self, info: Info, event_id: strawberry.ID,
        from_: Annotated[str, strawberry.argument(name="from")], to: str, limit: int = 20,
        cursor: str | None = None,
    ) -> Page[Occurrence]:
        ctx = info.context
        row = await _visible(ctx, event_id)
        r = dashboard.parse_range(from_, to, max_days=dashboard.MAX_OCCURRENCE_DAYS,
                                  required=True)
        assert r is not None

        async def fetch(after: tuple[datetime, str] | None, n: int) -> list[asyncpg.Record]:
            views = await rules.window(ctx.db, row, r.start, r.end, ctx.budget)
            kept = [{"start_time": v.start_time, "id": v.occurrence_id, "view": v}
                    for v in views if after is None or (v.start_time, v.occurrence_id) > after]
            return cast(list[asyncpg.Record], kept[:n])  # rows as paging reads them

        return await page(ctx, f"occurrences:{row['id']}:{r.start}:{r.end}", limit, cursor,
                          fetch, _of_view, order="start_time")

    @strawberry.field(description=(
        "One occurrence of an event visible to the caller, as it stands; an ID that is no "
        "occurrence of the event's rule is `resource_not_found`."
    ))
    async def event_occurrence(self, info: Info, event_id: strawberry.ID,
                               occurrence_id: str) -> Occurrence:
        ctx = info.context
        return await read(ctx, await _visible(ctx, event_id), occurrence_id)


def _of_view(found: Any) -> Occurrence:
    made: Occurrence = Occurrence.of(found["view"])
    return made


@strawberry.type
class OccurrenceMutations:
    @strawberry.mutation(description=(
        "Change one occurrence of a recurring event the caller administers; it keeps its "
        "occurrence_id. An empty input changes nothing."))
    async def update_event_occurrence(self, info: Info, event_id: strawberry.ID,
                                      occurrence_id: str, input: OccurrenceUpdateInput
                                      ) -> Occurrence:
        ctx = info.context
        data = parse_input(event_rules.OccurrenceUpdate, input)
        key, row = await _administrable(ctx, event_id)
        slot = await rules.update(ctx.db, row, occurrence_id, data, ctx.budget)
        return await _after_write(ctx, key, slot)

    @strawberry.mutation(description="Cancel one occurrence of a recurring event.")
    async def cancel_event_occurrence(self, info: Info, event_id: strawberry.ID,
                                      occurrence_id: str, input: EventCancelInput | None = None
                                      ) -> Occurrence:
        ctx = info.context
        data = parse_input(event_rules.EventCancel, input) if input is not None else (
            event_rules.EventCancel())
        key, row = await _administrable(ctx, event_id)
        slot = await rules.cancel(ctx.db, row, occurrence_id, data, ctx.budget)
        return await _after_write(ctx, key, slot)

    @strawberry.mutation(description=(
        "Drop one occurrence's own changes and cancellation: it is as the rule makes it."))
    async def restore_event_occurrence(self, info: Info, event_id: strawberry.ID,
                                       occurrence_id: str) -> Occurrence:
        ctx = info.context
        key, row = await _administrable(ctx, event_id)
        slot = await rules.restore(ctx.db, row, occurrence_id, ctx.budget)
        return await _after_write(ctx, key, slot)

    @strawberry.mutation(description=(
        "This and following: the event ends before the occurrence, and the new event "
        "returned starts at it with the rest of the rule and the input's changes."))
    async def split_event(self, info: Info, event_id: strawberry.ID, input: EventSplitInput
                          ) -> Event:
        ctx = info.context
        data = parse_input(rules.EventSplit, input)
        _, row = await _administrable(ctx, event_id)
        return await reload_event(ctx, await rules.split(ctx.db, row, data,
                                                         ctx.budget))
