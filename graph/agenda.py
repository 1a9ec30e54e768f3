"""The agenda's types and resolver; everything it decides is in `domain.agenda`."""

from __future__ import annotations

import datetime as dt

import strawberry

from domain import agenda as domain
from graph.context import Context
from graph.scalars import Timestamp
from graph.types import Event

Info = strawberry.Info[Context, None]


@strawberry.type(description="The window of local days the agenda covers.")
class AgendaWindow:
    date: dt.date = strawberry.field(description="The first local day.")
    end_date: dt.date = strawberry.field(description="The day after the last (exclusive).")
    timezone: str = strawberry.field(description="The IANA zone the days are local to.")
    start: Timestamp = strawberry.field(description="Local midnight of `date`.")
    end: Timestamp = strawberry.field(description="Local midnight of `end_date`.")


@strawberry.type(description="The source profile of a subscription-synced item.")
class AgendaProfile:
    id: strawberry.ID
    platform_id: str
    display_name: str


@strawberry.type(description="Where an agenda item comes from.")
class AgendaItemSource:
    type: str = strawberry.field(description="personal, subscription or external.")
    subscription_id: strawberry.ID | None


@strawberry.type(description="One occurrence of a calendar event in the window.")
class AgendaItem:
    occurrence_id: str = strawberry.field(
        description="`<event_id>:<original start YYYYMMDDTHHMMSSZ>`, or `<event_id>:<YYYYMMDD>` "
        "for all-day items. No write operation accepts it."
    )
    calendar_id: strawberry.ID
    event_id: strawberry.ID
    editable: bool = strawberry.field(
        description="True only for non-recurring personal events (updateCalendarEvent)."
    )
    title: str
    start: Timestamp
    end: Timestamp | None = strawberry.field(description="Null for a point in time.")
    local_start: dt.datetime = strawberry.field(description="`start` in the agenda's zone.")
    local_end: dt.datetime | None = strawberry.field(description="`end` in the agenda's zone.")
    is_all_day: bool
    location: str | None
    busy: bool = strawberry.field(description="True when the event blocks time (opaque).")
    is_recurring: bool
    profile: AgendaProfile | None = strawberry.field(
        description="The source profile of a synced copy, when visible; null otherwise."
    )
    source: AgendaItemSource
    start_date: dt.date | None = strawberry.field(description="All-day items only.")
    end_date: dt.date | None = strawberry.field(description="All-day items only, exclusive.")
    description: str | None
    source_event_id: strawberry.Private[str | None]

    @strawberry.field(description=(
        "The public event a subscription copy is a copy of, when the caller may read it; "
        "null otherwise (and for personal and connected items)."
    ))
    async def event(self, info: Info) -> Event | None:
        if self.source_event_id is None:
            return None
        row = await info.context.loaders.event.load(self.source_event_id)
        return Event.from_row(row) if row is not None else None

    @classmethod
    def from_domain(cls, item: domain.Item) -> AgendaItem:
        profile = item.profile
        return cls(
            occurrence_id=item.occurrence_id, calendar_id=strawberry.ID(item.calendar_id),
            event_id=strawberry.ID(item.event_id), editable=item.editable, title=item.title,
            start=Timestamp(item.start),
            end=Timestamp(item.end) if item.end is not None else None,
            local_start=item.local_start, local_end=item.local_end,
            is_all_day=item.is_all_day, location=item.location, busy=item.busy,
            is_recurring=item.is_recurring,
            profile=AgendaProfile(
                id=strawberry.ID(profile.id), platform_id=profile.platform_id,
                display_name=profile.display_name,
            ) if profile is not None else None,
            source=AgendaItemSource(
                type=item.source_type,
                subscription_id=strawberry.ID(item.subscription_id)
                if item.subscription_id is not None else None,
            ),
            start_date=item.start_date, end_date=item.end_date, description=item.description,
            source_event_id=item.source_event_id,
        )


@strawberry.type(description="A searched calendar, listed even when it has no items.")
class AgendaSource:
    calendar_id: strawberry.ID
    name: str
    provider: str = strawberry.field(description="kalends, google, microsoft or ios.")
    last_sync_at: Timestamp | None
    status: str = strawberry.field(description="ok or warning (see warnings).")


@strawberry.type(description="Why a source's data may be missing or stale.")
class AgendaWarning:
    calendar_id: strawberry.ID
    code: str = strawberry.field(
        description="sync_unknown, sync_failed, sync_disabled, sync_stale or sync_unverified."
    )
    message: str


@strawberry.type(description="A combined, read-only schedule over a window of local days.")
class Agenda:
    window: AgendaWindow
    items: list[AgendaItem]
    complete: bool = strawberry.field(
        description="Whether the query and expansion returned all matching stored data."
    )
    incomplete_reason: str | None = strawberry.field(
        description="max_items or expansion_limit when not complete."
    )
    sources: list[AgendaSource]
    warnings: list[AgendaWarning]

    @classmethod
    def from_domain(cls, agenda: domain.Agenda) -> Agenda:
        w = agenda.window
        return cls(
            window=AgendaWindow(
                date=w.first_day, end_date=w.end_date, timezone=w.tz.key,
                start=Timestamp(w.start), end=Timestamp(w.end),
            ),
            items=[AgendaItem.from_domain(i) for i in agenda.items],
            complete=agenda.complete,
            incomplete_reason=agenda.incomplete_reason,
            sources=[
                AgendaSource(
                    calendar_id=strawberry.ID(s.calendar_id), name=s.name, provider=s.provider,
                    last_sync_at=Timestamp(s.last_sync_at) if s.last_sync_at else None,
                    status=s.status,
                )
                for s in agenda.sources
            ],
            warnings=[
                AgendaWarning(calendar_id=strawberry.ID(x.calendar_id), code=x.code,
                              message=x.message)
                for x in agenda.warnings
            ],
        )


@strawberry.type
class AgendaQueries:
    @strawberry.field(description=(
        "The caller's calendars over `days` local days from `date` in `timezone`: "
        "recurrence expanded, at most 500 items by start."
    ))
    async def agenda(
        self, info: Info, date: str | None = None, days: int = domain.DEFAULT_DAYS,
        timezone: str | None = None, calendar_ids: list[strawberry.ID] | None = None,
    ) -> Agenda:
        ctx = info.context
        result = await domain.build(
            ctx.db, ctx.viewer, date_text=date, days=days, timezone=timezone,
            calendar_ids=[str(c) for c in calendar_ids] if calendar_ids is not None else None,
            budget=ctx.budget, sync_interval=ctx.services.sync_interval,
        )
        return Agenda.from_domain(result)
