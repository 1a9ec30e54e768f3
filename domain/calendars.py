"""Personal calendars and their events: request shapes, ownership, and the rule
that subscription-synced copies are read-only. Time input and recurrence are
`domain.times`' (the same rules as profile events)."""

from __future__ import annotations

from typing import Any

import asyncpg

from core.errors import ApiError, not_found
from db import calendar_events as store
from db.database import Database
from domain import agenda, ids, times
from domain.events import ScheduleFields, Title


class CalendarEventUpdate(ScheduleFields):
    """Fields of a calendar event; all optional. `null` clears a nullable field."""


class CalendarEventCreate(CalendarEventUpdate, json_schema_extra=times.CREATE_FIELD_RULES):
    """A new personal event; the calendar comes from the path."""

    title: Title


_AS_SENT = ("title", "description", "location", "transparency")


def check_calendar(row: asyncpg.Record | None) -> asyncpg.Record:
    """Rows come from loaders that return the caller's own calendars only."""
    if row is None:
        raise not_found("calendar", param="calendar_id")
    return row


def check_event(row: asyncpg.Record | None, calendar_id: str) -> asyncpg.Record:
    """The caller's event, and in the calendar of the URL: an event addressed
    under another calendar, even one of the caller's, is not found."""
    if row is None or row["calendar_id"] != calendar_id:
        raise not_found("calendar event", param="event_id")
    return row


def _check_writable(row: asyncpg.Record) -> None:
    if row["source_event_id"] is not None:
        raise ApiError(
            "calendar_event_read_only",
            "This event is synced from a subscription and is read-only: change it at the "
            "source profile; unsubscribe to remove it.",
            param="event_id",
        )


async def create(db: Database, calendar: asyncpg.Record, data: CalendarEventCreate) -> str:
    fields = data.model_dump(exclude_unset=True)
    values: dict[str, Any] = {k: fields[k] for k in _AS_SENT if k in fields}
    # end_timezone is filled from start_timezone for profile events only
    # (docs/api-choices.md, "Calendars and calendar events").
    values.update(times.create_columns(fields, fill_end_timezone=False))
    values = agenda.with_series_end(values)
    event_id = ids.new_id("cev")
    try:
        await store.insert(db, event_id, calendar["id"], values)
    except asyncpg.ForeignKeyViolationError:
        raise not_found("calendar", param="calendar_id") from None
    return event_id


async def update(db: Database, row: asyncpg.Record, data: CalendarEventUpdate) -> None:
    _check_writable(row)
    changes = data.model_dump(exclude_unset=True)
    values: dict[str, Any] = {k: changes[k] for k in _AS_SENT if k in changes}
    values.update(times.update_columns(row, changes))
    # An event created with no end has no end_timezone. Made all-day, it gains an
    # end (its last midnight, in start_timezone), which it keeps when made timed
    # again: an end always has its zone, so it takes that one.
    if values.get("end_time") is not None and values.get("end_timezone") is None:
        values["end_timezone"] = values["start_timezone"]
    await store.update(db, row["id"], agenda.with_series_end(values, row))


async def delete(db: Database, row: asyncpg.Record) -> None:
    _check_writable(row)
    await store.delete(db, row["id"])
