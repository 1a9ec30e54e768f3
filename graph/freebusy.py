"""Free/busy and meeting times: types and resolvers; the rules are in `domain.freebusy`."""

from __future__ import annotations

import datetime as dt
from typing import Any

import strawberry

from domain import agenda
from domain import freebusy as domain
from domain.validation import validate
from graph.agenda import AgendaSource, AgendaWarning
from graph.context import Context
from graph.scalars import Timestamp

Info = strawberry.Info[Context, None]


@strawberry.type(description="A span of a person's time that is taken, in UTC.")
class BusyInterval:
    start: Timestamp
    end: Timestamp
    status: str = strawberry.field(
        description="busy, or tentative (only events answered maybe); busy wins where both "
        "meet."
    )


@strawberry.type(description="One person's taken time: intervals only, never what fills them.")
class FreeBusyPerson:
    email: str = strawberry.field(description="As asked (the caller's own for the first).")
    busy: list[BusyInterval] = strawberry.field(
        description="Sorted, merged (overlapping or touching become one), clipped to the window."
    )
    error: str | None = strawberry.field(
        description="not_visible for someone who shares no organization with the caller, or "
        "no user at all (the two are not told apart); expansion_limit for someone whose "
        "occurrences in the window pass the work bound (10,000); busy is then empty."
    )


@strawberry.type(description="When the caller and the people asked about are busy.")
class FreeBusy:
    start: Timestamp
    end: Timestamp
    people: list[FreeBusyPerson] = strawberry.field(
        description="The caller first, then `emails` in the order given, each once."
    )
    sources: list[AgendaSource] = strawberry.field(
        description="The caller's calendars searched, as the agenda lists them."
    )
    warnings: list[AgendaWarning] = strawberry.field(
        description="The caller's connected calendars whose data may be stale or missing."
    )
    complete: bool = strawberry.field(
        description="False when an item could not be fully expanded (see the agenda)."
    )
    incomplete_reason: str | None = strawberry.field(
        description="max_items or expansion_limit when not complete."
    )


@strawberry.type(description="A time when everyone asked about is free.")
class MeetingSlot:
    start: Timestamp
    end: Timestamp
    local_start: dt.datetime = strawberry.field(description="`start` on `time_zone`'s clock.")
    local_end: dt.datetime = strawberry.field(description="`end` on `time_zone`'s clock.")


@strawberry.type(description="The earliest times when the caller and the people asked are free.")
class MeetingTimes:
    data: list[MeetingSlot]
    unavailable: list[str] = strawberry.field(
        description="Addresses whose free/busy has an error (not_visible, expansion_limit): "
        "their time was not taken into account."
    )
    time_zone: str = strawberry.field(description="The zone of the working hours.")
    warnings: list[AgendaWarning] = strawberry.field(
        description="The caller's connected calendars whose data may be stale or missing."
    )
    complete: bool
    incomplete_reason: str | None


@strawberry.input(description=domain.WorkingHours.__doc__)
class WorkingHoursInput:
    start: str | None = strawberry.UNSET
    end: str | None = strawberry.UNSET
    days: list[str] | None = strawberry.UNSET


@strawberry.input(description=domain.MeetingTimesQuery.__doc__)
class MeetingTimesInput:
    duration_minutes: int
    start: str
    end: str
    emails: list[str] | None = strawberry.UNSET
    time_zone: str | None = strawberry.UNSET
    working_hours: WorkingHoursInput | None = strawberry.UNSET
    step_minutes: int | None = strawberry.UNSET
    limit: int | None = strawberry.UNSET


def _sent(value: Any) -> Any:
    """An input as the JSON a REST client sends: only what was given."""
    if isinstance(value, list):
        return [_sent(v) for v in value]
    if isinstance(value, WorkingHoursInput | MeetingTimesInput):
        return {k: _sent(v) for k, v in vars(value).items() if v is not strawberry.UNSET}
    return value


def _warnings(warnings: list[agenda.SyncWarning]) -> list[AgendaWarning]:
    return [AgendaWarning(calendar_id=strawberry.ID(w.calendar_id), code=w.code,
                          message=w.message) for w in warnings]


def _free_busy(result: domain.FreeBusy) -> FreeBusy:
    return FreeBusy(
        start=Timestamp(result.start), end=Timestamp(result.end),
        people=[
            FreeBusyPerson(email=p.email, error=p.error, busy=[
                BusyInterval(start=Timestamp(i.start), end=Timestamp(i.end), status=i.status)
                for i in p.busy
            ])
            for p in result.people
        ],
        sources=[
            AgendaSource(calendar_id=strawberry.ID(s.calendar_id), name=s.name,
                         provider=s.provider,
                         last_sync_at=Timestamp(s.last_sync_at) if s.last_sync_at else None,
                         status=s.status)
            for s in result.sources
        ],
        warnings=_warnings(result.warnings),
        complete=result.complete, incomplete_reason=result.incomplete_reason,
    )


def _meeting_times(result: domain.MeetingTimes) -> MeetingTimes:
    return MeetingTimes(
        data=[MeetingSlot(start=Timestamp(s.start), end=Timestamp(s.end),
                          local_start=s.local_start, local_end=s.local_end)
              for s in result.slots],
        unavailable=result.unavailable, time_zone=result.time_zone.key,
        warnings=_warnings(result.warnings),
        complete=result.complete, incomplete_reason=result.incomplete_reason,
    )


@strawberry.type
class FreeBusyQueries:
    @strawberry.field(description=(
        "When the caller, and people who share an organization with them, are busy between "
        "`start` and `end` (RFC 3339 with offsets, at most 62 days apart)."
    ))
    async def free_busy(
        self, info: Info, start: str, end: str, emails: list[str] | None = None,
        calendar_ids: list[strawberry.ID] | None = None,
    ) -> FreeBusy:
        ctx = info.context
        result = await domain.free_busy(
            ctx.db, ctx.viewer, start_text=start, end_text=end, emails=emails,
            calendar_ids=[str(c) for c in calendar_ids] if calendar_ids is not None else None,
            sync_interval=ctx.services.sync_interval,
        )
        return _free_busy(result)

    @strawberry.field(description=(
        "The earliest slots within working hours when the caller and `emails` are all free."
    ))
    async def meeting_times(self, info: Info, input: MeetingTimesInput) -> MeetingTimes:
        ctx = info.context
        query = validate(domain.MeetingTimesQuery, _sent(input))
        result = await domain.meeting_times(ctx.db, ctx.viewer, query,
                                            sync_interval=ctx.services.sync_interval)
        return _meeting_times(result)
