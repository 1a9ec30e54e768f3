"""Calendar and calendar-event resolvers; the rules are in `domain.calendars`."""

from __future__ import annotations

import datetime as dt

import asyncpg
import strawberry

from db import calendar_events as event_store
from db import calendars as store
from domain import calendars as domain
from domain import ids
from graph import lists
from graph.context import Context
from graph.dataloaders import reload
from graph.inputs import input_type, parse_input
from graph.paging import page
from graph.scalars import Timestamp
from graph.types import LOCAL_END, LOCAL_START, Page, on_its_clock

CalendarEventCreateInput = input_type(domain.CalendarEventCreate, "CalendarEventCreateInput")
CalendarEventUpdateInput = input_type(domain.CalendarEventUpdate, "CalendarEventUpdateInput")

Info = strawberry.Info[Context, None]


@strawberry.type(description="One of the caller's personal calendars.")
class Calendar:
    id: strawberry.ID
    name: str
    description: str | None
    color: str | None
    is_default: bool = strawberry.field(description="The calendar created with the user.")
    created_at: Timestamp
    updated_at: Timestamp

    @strawberry.field(description=(
        "The calendar's stored events, as `calendar_events` lists them: by creation time, "
        "a recurring event as its one row (the agenda expands them)."
    ))
    async def events(self, info: Info, limit: int = 20, cursor: str | None = None
                     ) -> Page[CalendarEvent]:
        return await lists.CALENDAR_EVENTS.page(
            info.context, str(self.id), f"calendar-events:{self.id}", limit, cursor, None,
            CalendarEvent.from_row)

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> Calendar:
        return cls(
            id=strawberry.ID(row["id"]), name=row["name"], description=row["description"],
            color=row["color"], is_default=row["is_default"], created_at=row["created_at"],
            updated_at=row["updated_at"],
        )


@strawberry.type(description="An event of a personal calendar: personal, or a synced copy.")
class CalendarEvent:
    id: strawberry.ID
    calendar_id: strawberry.ID
    title: str
    description: str | None
    location: str | None
    start_time: Timestamp
    end_time: Timestamp | None
    start_timezone: str | None
    end_timezone: str | None
    is_all_day: bool
    recurrence_rule: str | None
    status: str | None = strawberry.field(description="confirmed or cancelled.")
    created_at: Timestamp
    updated_at: Timestamp
    transparency: str = strawberry.field(description="opaque (busy) or transparent (free).")

    @strawberry.field(description=LOCAL_START)
    def local_start_time(self) -> dt.datetime | None:
        return on_its_clock(self.start_time, self.start_timezone, self.is_all_day)

    @strawberry.field(description=LOCAL_END)
    def local_end_time(self) -> dt.datetime | None:
        return on_its_clock(self.end_time, self.end_timezone, self.is_all_day)

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> CalendarEvent:
        return cls(
            id=strawberry.ID(row["id"]), calendar_id=strawberry.ID(row["calendar_id"]),
            title=row["title"], description=row["description"], location=row["location"],
            start_time=row["start_time"], end_time=row["end_time"],
            start_timezone=row["start_timezone"], end_timezone=row["end_timezone"],
            is_all_day=row["is_all_day"], recurrence_rule=row["recurrence_rule"],
            status=row["status"], created_at=row["created_at"], updated_at=row["updated_at"],
            transparency=row["transparency"],
        )


async def _calendar(ctx: Context, calendar_id: str) -> asyncpg.Record:
    key = ids.parse("cal", calendar_id, param="calendar_id")
    return domain.check_calendar(await ctx.loaders.calendar.load(key))


async def _event(ctx: Context, calendar_id: str, event_id: str) -> asyncpg.Record:
    cal_key = ids.parse("cal", calendar_id, param="calendar_id")
    key = ids.parse("cev", event_id, param="event_id")
    row = await ctx.loaders.calendar_event.load(key)
    if row is None or row["calendar_id"] != cal_key:
        # Only on the way to a 404: blame the calendar if it is not the caller's.
        domain.check_calendar(await ctx.loaders.calendar.load(cal_key))
    return domain.check_event(row, cal_key)


async def _reload(ctx: Context, calendar_id: str, key: str) -> CalendarEvent:
    row = await reload(ctx.loaders.calendar_event, key)
    return CalendarEvent.from_row(domain.check_event(row, calendar_id))


@strawberry.type
class CalendarQueries:
    @strawberry.field(description="The caller's calendars, oldest first.")
    async def calendars(self, info: Info, limit: int = 20, cursor: str | None = None
                        ) -> Page[Calendar]:
        ctx = info.context
        return await page(
            ctx, "calendars", limit, cursor,
            lambda after, n: store.page(ctx.db, ctx.viewer.user_id, after, n),
            Calendar.from_row,
        )

    @strawberry.field(description="One of the caller's calendars.")
    async def calendar(self, info: Info, calendar_id: strawberry.ID) -> Calendar:
        return Calendar.from_row(await _calendar(info.context, calendar_id))

    @strawberry.field(description=(
        "A calendar's stored events, personal and synced, oldest first; a recurring "
        "event is one row carrying its rule."
    ))
    async def calendar_events(self, info: Info, calendar_id: strawberry.ID, limit: int = 20,
                              cursor: str | None = None) -> Page[CalendarEvent]:
        ctx = info.context
        row = await _calendar(ctx, calendar_id)
        return await page(
            ctx, f"calendar-events:{row['id']}", limit, cursor,
            lambda after, n: event_store.OF_CALENDAR.page(ctx.db, row["id"], after, n),
            CalendarEvent.from_row,
        )

    @strawberry.field(description="An event of one of the caller's calendars.")
    async def calendar_event(self, info: Info, calendar_id: strawberry.ID,
                             event_id: strawberry.ID) -> CalendarEvent:
        return CalendarEvent.from_row(await _event(info.context, calendar_id, event_id))


@strawberry.type
class CalendarMutations:
    @strawberry.mutation(description="Create a personal event in one of the caller's calendars.")
    async def create_calendar_event(self, info: Info, calendar_id: strawberry.ID,
                                    input: CalendarEventCreateInput) -> CalendarEvent:
        ctx = info.context
        data = parse_input(domain.CalendarEventCreate, input)
        calendar = await _calendar(ctx, calendar_id)
        event_id = await domain.create(ctx.db, calendar, data)
        return await _reload(ctx, calendar["id"], event_id)

    @strawberry.mutation(description="Change a personal event; synced copies are read-only.")
    async def update_calendar_event(self, info: Info, calendar_id: strawberry.ID,
                                    event_id: strawberry.ID, input: CalendarEventUpdateInput
                                    ) -> CalendarEvent:
        ctx = info.context
        data = parse_input(domain.CalendarEventUpdate, input)
        row = await _event(ctx, calendar_id, event_id)
        await domain.update(ctx.db, row, data)
        return await _reload(ctx, row["calendar_id"], row["id"])

    @strawberry.mutation(description="Delete a personal event; synced copies are read-only.")
    async def delete_calendar_event(self, info: Info, calendar_id: strawberry.ID,
                                    event_id: strawberry.ID) -> bool:
        ctx = info.context
        row = await _event(ctx, calendar_id, event_id)
        await domain.delete(ctx.db, row)
        return True
