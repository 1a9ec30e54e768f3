"""The agenda: a read-only schedule of the caller's calendars over a window of
local days.

The window is `days` local days from `date` in the resolved zone (the `timezone`
parameter, else the user's saved zone, else UTC): from local midnight of `date`
to local midnight of `date + days`, so a day with a DST change is 23 or 25 hours.
Timed items overlap it as instants; all-day items are floating and meet it by
calendar date. Recurring events are expanded on the wall clock of their own
`start_timezone` and shown in the requested zone. Items are sorted by (start,
occurrence_id) and capped at `MAX_ITEMS`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any, Literal, NamedTuple
from zoneinfo import ZoneInfo

import asyncpg

from core.errors import ApiError
from db import agenda as store
from db import calendar_events as events_store
from db import connected as connected_store
from db.database import Database, Tx
from domain import expansion, ids, recurrence, times
from domain.auth import Viewer
from domain.connected import sync_state

log = logging.getLogger("kalends.agenda")

MAX_ITEMS = expansion.MAX_ITEMS
READ_ROWS = expansion.MAX_OCCURRENCES + 1
"""Rows an agenda (or one person of free/busy) reads at most: each row costs at least
one occurrence of the budget, so one more than it has says that more were there."""
DEFAULT_DAYS = 7
MAX_DAYS = 31
DAYS_BACK = 30
DAYS_AHEAD = 365
MAX_CALENDARS = 100
PROVIDER = "kalends"

Reason = Literal["max_items", "expansion_limit"]


Window = expansion.Window


class ProfileRef(NamedTuple):
    id: str
    platform_id: str
    display_name: str


class Item(NamedTuple):
    """One occurrence kept in the agenda (a tuple: hundreds are made per request)."""

    occurrence_id: str
    calendar_id: str
    event_id: str
    editable: bool
    title: str
    start: datetime
    end: datetime | None
    local_start: datetime
    local_end: datetime | None
    is_all_day: bool
    location: str | None
    busy: bool
    is_recurring: bool
    profile: ProfileRef | None
    source_type: Literal["personal", "subscription", "external"]
    subscription_id: str | None
    start_date: date | None
    end_date: date | None
    description: str | None
    source_event_id: str | None
    """The public event a subscription copy is a copy of."""


@dataclass(frozen=True)
class Source:
    calendar_id: str
    name: str
    provider: str
    last_sync_at: datetime | None
    status: Literal["ok", "warning"]


@dataclass(frozen=True)
class SyncWarning:
    calendar_id: str
    code: str
    message: str


@dataclass(frozen=True)
class Agenda:
    window: Window
    items: list[Item]
    complete: bool
    incomplete_reason: Reason | None
    sources: list[Source]
    warnings: list[SyncWarning]


# ---------------------------------------------------------------------------
# Query parameters


def resolve_zone(requested: str | None, saved: str | None) -> ZoneInfo:
    """`timezone` as sent, else the user's saved zone, else UTC."""
    if requested is not None:
        return times.zone(requested, param="timezone")
    if saved is not None:
        try:
            return times.zone(saved, param="timezone")
        except ApiError:
            # Saved by an operator, not sent by the client: not the client's mistake.
            log.warning("unusable saved time zone %r; using UTC", saved)
    return ZoneInfo("UTC")


def window(tz: ZoneInfo, date_text: str | None, days: int) -> Window:
    """The window of `days` local days from `date_text` (default: today in `tz`),
    within DAYS_BACK days back and DAYS_AHEAD days ahead of today in `tz`."""
    if not 1 <= days <= MAX_DAYS:
        raise ApiError(
            "invalid_query_parameter", f"`days` must be 1 to {MAX_DAYS}.", param="days",
            details={"value": days},
        )
    today = datetime.now(tz).date()
    first = today if date_text is None else _date(date_text)
    earliest = today - timedelta(days=DAYS_BACK)
    latest_end = today + timedelta(days=DAYS_AHEAD)
    # Compared before adding, so a far date cannot overflow.
    if first < earliest or first > latest_end - timedelta(days=days):
        raise ApiError(
            "agenda_window_out_of_range",
            f"The agenda window must lie within {DAYS_BACK} days back and {DAYS_AHEAD} days "
            f"ahead of today ({today.isoformat()} in {tz.key}): its first day no earlier "
            f"than {earliest.isoformat()} and its exclusive end no later than "
            f"{latest_end.isoformat()}.",
            details={"start": earliest.isoformat(), "end": latest_end.isoformat()},
        )
    end_date = first + timedelta(days=days)
    return Window(first, end_date, tz, times.local_midnight(first, tz),
                  times.local_midnight(end_date, tz))


def _date(text: str) -> date:
    try:
        return times.parse_date(text, param="date")
    except ApiError:
        raise ApiError(
            "invalid_query_parameter", "`date` must be a calendar date written YYYY-MM-DD.",
            param="date", details={"value": text},
        ) from None


def parse_calendar_ids(values: Sequence[str] | None) -> list[str] | None:
    """The cal_ and xcal_ IDs sent, normalised, in order, without repeats; None: not sent."""
    if values is None:
        return None
    if not 1 <= len(values) <= MAX_CALENDARS:
        raise ApiError(
            "invalid_query_parameter",
            f"`calendar_ids` must list 1 to {MAX_CALENDARS} calendar IDs, comma-separated.",
            param="calendar_ids",
        )
    for value in values:
        if not (ids.is_valid("cal", value) or ids.is_valid("xcal", value)):
            raise ApiError(
                "invalid_id",
                "Each entry of `calendar_ids` must be a cal_ or xcal_ ID (the prefix and 32 "
                "hex digits).",
                param="calendar_ids", details={"value": value},
            )
    return list(dict.fromkeys(v.lower() for v in values))


# ---------------------------------------------------------------------------
# The agenda


async def build(
    db: Database, viewer: Viewer, *, date_text: str | None, days: int, timezone: str | None,
    calendar_ids: Sequence[str] | None, budget: expansion.Budget,
    sync_interval: timedelta = timedelta(seconds=300),
) -> Agenda:
    tz = resolve_zone(timezone, viewer.timezone)
    w = window(tz, date_text, days)
    requested = parse_calendar_ids(calendar_ids)
    if requested is None:
        rows = await store.calendars(db, viewer.user_id, None, None)
    else:
        rows = await store.calendars(
            db, viewer.user_id, [c for c in requested if c.startswith("cal_")],
            [c for c in requested if c.startswith("xcal_")],
        )
        rows = _in_requested_order(rows, requested)
    now = datetime.now(UTC)
    sources, warnings = [], []
    for row in rows:
        if row["provider"] == PROVIDER:
            sources.append(Source(row["id"], row["name"], PROVIDER, None, "ok"))
            continue
        warning = sync_state.warning(row, sync_interval, now)
        sources.append(Source(row["id"], row["name"], row["provider"], row["last_success_at"],
                              "ok" if warning is None else "warning"))
        if warning is not None:
            warnings.append(SyncWarning(row["id"], *warning))
    personal = [s.calendar_id for s in sources if s.provider == PROVIDER]
    external = [s.calendar_id for s in sources if s.provider != PROVIDER]
    found = await store.events(db, viewer.user_id, personal, w.start, w.end, w.first_day,
                               w.end_date, limit=READ_ROWS) if personal else []
    connected = await connected_store.agenda_events(db, external, w.start, w.end) \
        if external else []
    rows = found[:READ_ROWS - 1]
    changes = await expansion.changes(db, rows, w.start, w.end, w.first_day, w.end_date)
    # Expansion is CPU work (bounded by the budget): beside the event loop, so that
    # no other request waits for it.
    items, complete, reason = await expansion.run(
        merge, rows, w, budget, connected, more_rows=len(found) >= READ_ROWS,
        changes=changes)
    return Agenda(w, items, complete, reason, sources, warnings)


def _in_requested_order(rows: list[asyncpg.Record], wanted: list[str]) -> list[asyncpg.Record]:
    by_id = {r["id"]: r for r in rows}
    for calendar_id in wanted:
        if calendar_id not in by_id:
            raise ApiError(
                "resource_not_found", f"No such calendar: {calendar_id}.", param="calendar_ids",
            )
    return [by_id[c] for c in wanted]


_Slot = expansion.Slot


def merge(rows: Sequence[asyncpg.Record], w: Window, budget: expansion.Budget,
          connected: Sequence[asyncpg.Record] = (), *, more_rows: bool = False,
          changes: expansion.Changes) -> tuple[list[Item], bool, Reason | None]:
    """Every occurrence of `rows` (personal and subscription events, with the
    `changes` of their own of their occurrences) and of `connected` (stored
    provider components) that meets the window, sorted, at most MAX_ITEMS. A
    connected event that is a copy of a Kalends event shown here is left out. The
    expansion is bounded by the request's `budget`; once it is spent (or when
    `more_rows` says the read was cut), the answer is `expansion_limit`."""
    slots: list[_Slot] = []
    cut = False
    short = more_rows
    for row in rows:
        found, reason = expansion.slots(row, w, budget, changes=changes)
        slots += found
        if reason is not None:
            cut = cut or reason == "max_items"
            short = short or reason == "expansion_limit"
        if budget.exhausted:
            short = True
            break
    shown = {r["source_event_id"] for r in rows if r["source_event_id"] is not None}
    bounds = expansion.Bounds(w.start, w.end, w.first_day, w.end_date, w.tz)
    external, reason = expansion.connected(connected, bounds, MAX_ITEMS, shown, budget)
    slots.extend((f.start, f.end, f.start_date, f.end_date, f) for f in external)
    cut = cut or reason == "max_items"
    short = short or reason == "expansion_limit"
    if len(slots) > MAX_ITEMS:
        cut = True
        slots = _earliest(slots)
    kept = sorted(((s[0], _occurrence_id(s), s) for s in slots),
                  key=_by_start_and_id)[:MAX_ITEMS]
    items = [_item(s, occurrence_id, w.tz) for _, occurrence_id, s in kept]
    # Work ran out: occurrences may be missing anywhere, not only past the cut.
    if short:
        return items, False, "expansion_limit"
    if cut:
        return items, False, "max_items"
    return items, True, None


def _by_start_and_id(kept: tuple[datetime, str, _Slot]) -> tuple[datetime, str]:
    return kept[0], kept[1]


def _earliest(slots: list[_Slot]) -> list[_Slot]:
    """The slots that may be among the first MAX_ITEMS by (start, occurrence ID):
    every one that starts no later than the MAX_ITEMS-th start. A month of a few
    hundred weekly series has thousands of occurrences; only these get an ID."""
    last = sorted([s[0] for s in slots])[MAX_ITEMS - 1]
    return [s for s in slots if s[0] <= last]


def _occurrence_id(slot: _Slot) -> str:
    row = slot[4]
    if isinstance(row, expansion.Found):
        return row.occurrence_id
    if type(row) is expansion.Changed:  # its ID is where it was, not where it is
        return f"{row['id']}:{row.slot}"
    return occurrence_id(row["id"], slot[0], slot[2])


def occurrence_id(event_id: str, start: datetime, start_date: date | None) -> str:
    """`<event_id>:<original start, YYYYMMDDTHHMMSSZ>`, or `<event_id>:<YYYYMMDD>`
    for an all-day occurrence (one with a `start_date`)."""
    return f"{event_id}:{expansion.slot_of(start, start_date)}"


# ---------------------------------------------------------------------------
# Where a recurring series ends: the bound the agenda's query reads recurring rows by


def series_end(row: Mapping[str, Any]) -> datetime | None:
    """An instant at or after which no occurrence of calendar event `row` (a stored
    row, or the columns about to be written) can meet an agenda window: the end of its
    last occurrence, placed as `spans` places it. None when the series does not end,
    or its end is out of reach (`recurrence.last_occurrence`), or the row has no rule.

    db/agenda.py reads a recurring row only if this is at or after the window's
    start, so it must never be early: a late one only costs a row read."""
    rule = row["recurrence_rule"]
    if rule is None:
        return None
    try:
        t = times.of_row(row)
        tz = times.zone(t.start_timezone, param="start_timezone")
        if t.is_all_day:
            assert t.start_date is not None and t.end_date is not None
            last = recurrence.last_occurrence(rule, datetime.combine(t.start_date, time()), tz)
            if last is None:
                return None
            # Floating dates: an agenda window starts at its first day's midnight in
            # a zone less than a day from UTC, so an occurrence ending on a later date
            # ends after that; the UTC midnight of its end date is the bound.
            end_day = last.original_local.date() + (t.end_date - t.start_date)
            return datetime.combine(end_day, time(), UTC)
        last = recurrence.last_occurrence(rule, t.local_start, tz)
        if last is None:
            return None
        length = t.end_time - t.start_time if t.end_time is not None else timedelta()
        return last.start + length
    except (ApiError, OverflowError):
        # A rule that no longer expands, or an end past year 9999: no bound.
        return None


def with_series_end(values: dict[str, Any], row: Mapping[str, Any] | None = None
                    ) -> dict[str, Any]:
    """`values` (columns about to be written to calendar event `row`, None for a new
    one) with `recurrence_end` added whenever they set the times or the rule."""
    if row is not None and "recurrence_rule" not in values:
        return values  # times.update_columns sends the rule whenever the times change
    return {**values, "recurrence_end": series_end({**(row or {}), **values})}


async def settle_recurrence_ends(db: Database | Tx, *,
                                 source_event_ids: Sequence[str] | None = None,
                                 batch: int = 1000) -> int:
    """Stores `series_end` for recurring calendar events whose end is not known
    (written by a statement that does not compute it: the subscription sync's
    set-based copies, rows older than migration 0017): the copies of
    `source_event_ids`, or every such row, `batch` at a time. Until then such a row
    is read by every agenda that could show it, as if it never ended. Returns how
    many rows were settled."""
    settled = 0
    while True:
        rows = await events_store.unsettled(db, source_event_ids, batch)
        done = await events_store.settle(db, [(r["id"], r["inputs"], series_end(r)) for r in rows])
        settled += done
        # A row changed meanwhile is left unknown (its new times are not the ones
        # read); the next round, or the next write, settles it.
        if len(rows) < batch or done == 0:
            return settled


def _item(slot: _Slot, occurrence_id: str, tz: ZoneInfo) -> Item:
    start, end, start_date, end_date, row = slot
    if isinstance(row, expansion.Found):
        return _external_item(row, occurrence_id, tz)
    texts = row  # an occurrence with changes has its own title, description and location
    if type(row) is expansion.Changed:
        row = row.row
    copy = row["source_event_id"] is not None
    recurring = row["recurrence_rule"] is not None
    profile = None
    if copy and row["profile_visible"]:
        profile = ProfileRef(row["source_profile_id"], row["profile_platform_id"],
                             row["profile_display_name"])
    # Positional, in Item's order (hundreds are made per request).
    return Item(
        occurrence_id,  # occurrence_id
        row["calendar_id"],  # calendar_id
        row["id"],  # event_id
        not copy and not recurring,  # editable
        texts["title"],  # title
        start,  # start
        end,  # end
        local(start, tz),  # local_start
        local(end, tz) if end is not None else None,  # local_end
        row["is_all_day"],  # is_all_day
        texts["location"],  # location
        row["transparency"] == "opaque",  # busy
        recurring,  # is_recurring
        profile,  # profile
        "subscription" if copy else "personal",  # source_type
        row["subscription_id"] if copy else None,  # subscription_id
        start_date,  # start_date
        end_date,  # end_date
        texts["description"],  # description
        row["source_event_id"],  # source_event_id
    )


def local(instant: datetime, tz: ZoneInfo) -> datetime:
    """The instant on `tz`'s clock, with its offset; whole seconds as everywhere."""
    return instant.astimezone(tz).replace(microsecond=0)


def _external_item(f: expansion.Found, occurrence_id: str, tz: ZoneInfo) -> Item:
    c = f.component
    return Item(
        occurrence_id=occurrence_id,
        calendar_id=f.calendar_id,
        event_id=f.event_id,
        editable=False,
        title=c.title,
        start=f.start,
        end=f.end,
        local_start=local(f.start, tz),
        local_end=local(f.end, tz) if f.end is not None else None,
        is_all_day=f.start_date is not None,
        location=c.location,
        busy=not c.transparent,
        is_recurring=f.recurring,
        profile=None,
        source_type="external",
        subscription_id=None,
        start_date=f.start_date,
        end_date=f.end_date,
        description=c.description,
        source_event_id=None,
    )
