"""Free/busy and meeting times (docs/api-choices.md, "Free/busy and meeting times"): when the
caller, and the people they share an organization with, are busy, and when all of them are free.

Busy time comes from what the agenda reads and how it expands it
(`domain.agenda`, `domain.connected.occurrences`): occurrences in personal
calendars (own items and subscription copies) and selected connected calendars
that are opaque and not cancelled, plus the events a person answered `going`
(busy) or `maybe` (tentative). All-day items block their dates' local days in
the item's own zone. Intervals are clipped to the window and merged per status:
overlapping or touching intervals of one status become one, and busy wins where
busy and tentative overlap (the tentative interval keeps only its parts outside
busy time, so intervals never overlap).

Slots lie on each working day's wall clock in the requested zone: every
`step_minutes` from the day's start, a start the clocks skip is skipped and one
they repeat is taken once, at its first offset.
"""

from __future__ import annotations

import asyncio
import logging
import re
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from functools import lru_cache
from typing import Annotated, Literal, NamedTuple
from zoneinfo import ZoneInfo

import asyncpg
from pydantic import Field

from core.errors import ApiError
from db import agenda as agenda_store
from db import connected as connected_store
from db import freebusy as store
from db.database import Database
from domain import agenda, expansion, times
from domain.auth import Viewer
from domain.connected import components, sync_state
from domain.validation import Body

log = logging.getLogger("kalends.agenda")

MAX_PEOPLE = 20
MAX_SPAN_DAYS = 62
MAX_EMAIL_LENGTH = 320
DURATIONS = (5, 480)
Step = Literal[5, 10, 15, 30, 60]
Status = Literal["busy", "tentative"]
Weekday = Literal["MO", "TU", "WE", "TH", "FR", "SA", "SU"]
MAX_SLOTS = 50
DEFAULT_SLOTS = 10
DEFAULT_STEP: Step = 30
WEEKDAYS: tuple[Weekday, ...] = ("MO", "TU", "WE", "TH", "FR", "SA", "SU")
WORKING_DAYS: tuple[Weekday, ...] = WEEKDAYS[:5]
NOT_VISIBLE: Literal["not_visible"] = "not_visible"
EXPANSION_LIMIT: Literal["expansion_limit"] = "expansion_limit"
Reason = Literal["max_items", "expansion_limit"]

# The accounts' rule for an address (domain.accounts), without commas: the
# query parameter lists them comma-separated.
EMAIL_PATTERN = r"[^@\s,]+@[^@\s,]+\.[^@\s,]+"
_EMAIL = re.compile(EMAIL_PATTERN)
INSTANT_PATTERN = (
    r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:[Zz]|[+-]\d{2}:?\d{2})$"
)
_INSTANT = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d+))?)?"
    r"(?:([Zz])|([+-])(\d{2}):?(\d{2}))",
    re.ASCII,
)
CLOCK_PATTERN = r"^\d{2}:\d{2}$"
_CLOCK = re.compile(r"(\d{2}):(\d{2})", re.ASCII)
# A local date in any zone lies within these days of its UTC date.
_DATE_MARGIN = timedelta(days=2)


class Interval(NamedTuple):
    start: datetime
    end: datetime
    status: Status


@dataclass(frozen=True)
class Person:
    email: str
    busy: list[Interval]
    error: Literal["not_visible", "expansion_limit"] | None


@dataclass(frozen=True)
class FreeBusy:
    start: datetime
    end: datetime
    people: list[Person]
    sources: list[agenda.Source]
    warnings: list[agenda.SyncWarning]
    complete: bool
    incomplete_reason: Reason | None


@dataclass(frozen=True)
class Slot:
    start: datetime
    end: datetime
    local_start: datetime
    local_end: datetime


@dataclass(frozen=True)
class MeetingTimes:
    slots: list[Slot]
    unavailable: list[str]
    time_zone: ZoneInfo
    warnings: list[agenda.SyncWarning]
    complete: bool
    incomplete_reason: Reason | Literal["people_unavailable"] | None


# ---------------------------------------------------------------------------
# Request shapes: shapes and ranges here, meanings (times, zones) checked below


Instant = Annotated[str, Field(
    description="RFC 3339 with an offset, e.g. `2026-03-09T09:00:00+01:00` or `...Z`.",
    json_schema_extra={"format": "date-time", "pattern": INSTANT_PATTERN})]
Clock = Annotated[str, Field(
    description="Local `HH:MM`; `24:00` ends at midnight.",
    json_schema_extra={"pattern": CLOCK_PATTERN})]
Email = Annotated[str, Field(
    max_length=MAX_EMAIL_LENGTH, json_schema_extra={"pattern": f"^{EMAIL_PATTERN}$"})]


class WorkingHours(Body):
    """The local hours and weekdays a meeting may take, on `time_zone`'s clock."""

    start: Clock = "09:00"
    end: Clock = "17:00"
    days: Annotated[list[Weekday], Field(min_length=1, max_length=7)] = Field(
        default_factory=lambda: list(WORKING_DAYS),
        json_schema_extra={"default": list(WORKING_DAYS)})


class MeetingTimesQuery(Body):
    """A search for times when the caller and `emails` are all free."""

    duration_minutes: Annotated[int, Field(ge=DURATIONS[0], le=DURATIONS[1])]
    start: Instant
    end: Instant
    emails: Annotated[list[Email], Field(max_length=MAX_PEOPLE)] | None = None
    time_zone: Annotated[str, Field(description="An IANA zone name.")] | None = None
    working_hours: WorkingHours | None = None
    step_minutes: Step = DEFAULT_STEP
    limit: Annotated[int, Field(ge=1, le=MAX_SLOTS)] = DEFAULT_SLOTS


# ---------------------------------------------------------------------------
# Parameters


def parse_instant(text: str, param: str) -> datetime:
    """An RFC 3339 time that carries its offset, as a UTC instant."""
    match = _INSTANT.fullmatch(text)
    if match is None:
        raise _invalid(param, text, "must be an RFC 3339 date and time with an offset, such "
                       "as 2026-03-09T09:00:00+01:00 or 2026-03-09T08:00:00Z"
                       + (f". {hint[:-1]}" if (hint := times.space_for_plus_hint(text)) else ""))
    year, month, day, hour, minute, second, fraction, zulu, sign, off_h, off_m = match.groups()
    try:
        wall = datetime(int(year), int(month), int(day), int(hour), int(minute),
                        int(second or 0), int((fraction or "")[:6].ljust(6, "0")))
    except ValueError:
        raise _invalid(param, text, "names a day or a time of day that does not exist") from None
    offset = timedelta(0)
    if not zulu:
        if int(off_h) > 23 or int(off_m) > 59:
            raise _invalid(param, text, "has an offset that does not exist (at most +23:59)")
        offset = timedelta(hours=int(off_h), minutes=int(off_m)) * (-1 if sign == "-" else 1)
    try:
        return (wall - offset).replace(tzinfo=UTC)
    except OverflowError:
        raise _invalid(param, text, "is outside the supported range") from None


def span(start_text: str, end_text: str, max_days: int, params: tuple[str, str]
         ) -> tuple[datetime, datetime]:
    """[start, end) from two RFC 3339 times with offsets, named `params` in errors:
    end after start, at most `max_days` apart."""
    first, last = params
    start, end = parse_instant(start_text, first), parse_instant(end_text, last)
    details = {"start": times.utc_text(start), "end": times.utc_text(end)}
    if end <= start:
        raise ApiError("invalid_time_range", f"`{last}` must be after `{first}`.", param=last,
                       details=details)
    if end - start > timedelta(days=max_days):
        raise ApiError("invalid_time_range",
                       f"`{first}` and `{last}` must be at most {max_days} days apart.",
                       param=last, details=details)
    return start, end


def window(start_text: str, end_text: str, tz: ZoneInfo) -> tuple[datetime, datetime]:
    """[start, end): end after start, at most MAX_SPAN_DAYS long, within the agenda's
    bounds (30 days back, 365 ahead) of today in `tz`."""
    start, end = span(start_text, end_text, MAX_SPAN_DAYS, ("start", "end"))
    today = datetime.now(tz).date()
    earliest = times.local_midnight(today - timedelta(days=agenda.DAYS_BACK), tz)
    latest = times.local_midnight(today + timedelta(days=agenda.DAYS_AHEAD), tz)
    if start < earliest or end > latest:
        raise ApiError(
            "agenda_window_out_of_range",
            f"The window must lie within {agenda.DAYS_BACK} days back and {agenda.DAYS_AHEAD} "
            f"days ahead of today ({today.isoformat()} in {tz.key}): from "
            f"{times.utc_text(earliest)} to {times.utc_text(latest)}.",
            details={"start": times.utc_text(earliest), "end": times.utc_text(latest)},
        )
    return start, end


def parse_emails(values: Sequence[str] | None, own: str) -> list[str]:
    """The addresses asked about, at most MAX_PEOPLE (none: nobody else), each once
    (compared without regard to case, as the users table compares them), in the
    order first given, spelled as first given; the caller's own address is left
    out (answered first)."""
    if values is None:
        return []
    if len(values) > MAX_PEOPLE:
        raise ApiError("invalid_field", f"`emails` must list at most {MAX_PEOPLE} addresses.",
                       param="emails")
    seen = {own.lower()}
    kept = []
    for value in values:
        if len(value) > MAX_EMAIL_LENGTH or not _EMAIL.fullmatch(value):
            raise _invalid("emails", value, "must list email addresses (name@domain)")
        if value.lower() not in seen:
            seen.add(value.lower())
            kept.append(value)
    return kept


def time_zone(requested: str | None, saved: str | None) -> ZoneInfo:
    """`requested`, else the caller's saved zone (an unusable one is UTC, as the
    agenda has it), else UTC."""
    if requested is None:
        return agenda.resolve_zone(None, saved)
    try:
        return times.zone(requested, param="time_zone")
    except ApiError:
        raise _invalid("time_zone", requested, "must be an IANA time zone name, such as "
                       "Europe/Berlin or UTC") from None


def _invalid(param: str, value: object, what: str) -> ApiError:
    return ApiError("invalid_field", f"`{param}` {what}.", param=param,
                    details={"value": value})


# ---------------------------------------------------------------------------
# Intervals


def merge(intervals: Iterable[tuple[datetime, datetime, Status]], start: datetime,
          end: datetime) -> list[Interval]:
    """`intervals` clipped to [start, end) and merged: per status, overlapping or
    touching ones become one; where busy and tentative overlap, busy wins. Sorted,
    never overlapping."""
    busy: list[tuple[datetime, datetime]] = []
    tentative: list[tuple[datetime, datetime]] = []
    for s, e, status in intervals:
        if s < e and s < end and e > start:
            (busy if status == "busy" else tentative).append(
                (s if s > start else start, e if e < end else end))
    blocked = _union(busy)
    out = [Interval(s, e, "busy") for s, e in blocked]
    out += [Interval(s, e, "tentative") for s, e in _subtract(_union(tentative), blocked)]
    out.sort()
    return out


def _union(spans: list[tuple[datetime, datetime]]) -> list[tuple[datetime, datetime]]:
    spans.sort()
    out: list[tuple[datetime, datetime]] = []
    for s, e in spans:
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1] = (out[-1][0], e)
        else:
            out.append((s, e))
    return out


def _subtract(spans: list[tuple[datetime, datetime]], holes: list[tuple[datetime, datetime]]
              ) -> list[tuple[datetime, datetime]]:
    """The parts of sorted disjoint `spans` outside sorted disjoint `holes`."""
    out: list[tuple[datetime, datetime]] = []
    i = 0
    for s, e in spans:
        while i < len(holes) and holes[i][1] <= s:
            i += 1
        j = i
        while j < len(holes) and holes[j][0] < e:
            if holes[j][0] > s:
                out.append((s, holes[j][0]))
            s = max(s, holes[j][1])
            j += 1
        if s < e:
            out.append((s, e))
    return out


# ---------------------------------------------------------------------------
# Reading people's time


class _Someone(NamedTuple):
    user_id: str
    tz: ZoneInfo


async def free_busy(
    db: Database, viewer: Viewer, *, start_text: str, end_text: str,
    emails: Sequence[str] | None, calendar_ids: Sequence[str] | None,
    sync_interval: timedelta = timedelta(seconds=300),
) -> FreeBusy:
    own_tz = agenda.resolve_zone(None, viewer.timezone)
    start, end = window(start_text, end_text, own_tz)
    asked = parse_emails(emails, viewer.email)
    requested = agenda.parse_calendar_ids(calendar_ids)
    people, sources, warnings, reason = await _read(
        db, viewer, own_tz, asked, requested, start, end, sync_interval)
    return FreeBusy(start, end, people, sources, warnings, reason is None, reason)


async def meeting_times(db: Database, viewer: Viewer, query: MeetingTimesQuery,
                        sync_interval: timedelta = timedelta(seconds=300)) -> MeetingTimes:
    tz = time_zone(query.time_zone, viewer.timezone)
    start, end = window(query.start, query.end, tz)
    asked = parse_emails(query.emails, viewer.email)
    hours = query.working_hours or WorkingHours()
    opening, closing = _working_clock(hours)
    own_tz = agenda.resolve_zone(None, viewer.timezone)
    people, _, warnings, reason = await _read(
        db, viewer, own_tz, asked, None, start, end, sync_interval)
    blocked = _union([(i.start, i.end) for p in people for i in p.busy])
    found = slots(blocked, start, end, tz, opening, closing, frozenset(hours.days),
                  timedelta(minutes=query.duration_minutes),
                  timedelta(minutes=query.step_minutes), query.limit)
    unavailable = [p.email for p in people if p.error is not None]
    # The slots then reflect only the others: never complete (docs/api-choices.md,
    # "Free/busy and meeting times"). Work that ran out says so first.
    why = reason or ("people_unavailable" if unavailable else None)
    return MeetingTimes(found, unavailable, tz, warnings, why is None, why)


async def _read(
    db: Database, viewer: Viewer, own_tz: ZoneInfo, asked: list[str],
    requested: list[str] | None, start: datetime, end: datetime, sync_interval: timedelta,
) -> tuple[list[Person], list[agenda.Source], list[agenda.SyncWarning], Reason | None]:
    """Everyone's intervals in a constant number of statements: who is visible, their
    calendars, those calendars' events and connected components, their answers."""
    me = _Someone(viewer.user_id, own_tz)
    found = await store.visible_people(db, viewer.user_id, asked) if asked else []
    # Two spellings may name one user, even the caller: each user is read once.
    by_user = {viewer.user_id: me}
    for r in found:
        by_user.setdefault(r["id"], _Someone(r["id"], agenda.resolve_zone(None, r["timezone"])))
    user_of = {asked[r["ord"] - 1]: r["id"] for r in found}
    everyone = list(by_user.values())
    others = everyone[1:]
    if requested is None:
        rows = await agenda_store.default_calendars(db, list(by_user))
    else:
        rows = _in_order(await agenda_store.calendars(
            db, viewer.user_id, [c for c in requested if c.startswith("cal_")],
            [c for c in requested if c.startswith("xcal_")]), requested)
        if others:
            rows += await agenda_store.default_calendars(db, [s.user_id for s in others])
    sources, warnings = _sources([r for r in rows if r["user_id"] == viewer.user_id],
                                 sync_interval)

    first_day = start.date() - _DATE_MARGIN
    end_day = end.date() + _DATE_MARGIN + timedelta(days=1)
    personal = [r["id"] for r in rows if r["provider"] == agenda.PROVIDER]
    external = [r["id"] for r in rows if r["provider"] != agenda.PROVIDER]
    owner = {r["id"]: by_user[r["user_id"]] for r in rows}
    # Independent reads, on connections of their own; each bounded per person.
    items, connected, answered = await asyncio.gather(
        agenda_store.brief_events(db, [(c, owner[c].user_id) for c in personal], start, end,
                                  first_day, end_day, limit=agenda.READ_ROWS)
        if personal else _nothing(),
        connected_store.agenda_events(db, external, start, end) if external else _nothing(),
        store.answered_events(db, list(by_user), start, end, first_day, end_day,
                              limit=agenda.READ_ROWS),
    )

    own_rows: dict[str, list[asyncpg.Record]] = {s.user_id: [] for s in everyone}
    for row in items:
        own_rows[owner[row["calendar_id"]].user_id].append(row)
    own_connected: dict[str, list[asyncpg.Record]] = {s.user_id: [] for s in everyone}
    for row in connected:
        own_connected[owner[row["calendar_id"]].user_id].append(row)
    own_answers: dict[str, list[asyncpg.Record]] = {s.user_id: [] for s in everyone}
    for row in answered:
        own_answers[row["user_id"]].append(row)

    changes = await expansion.changes(db, [*items, *answered], start, end, first_day, end_day)
    # Expansion is CPU work (bounded per person): beside the event loop.
    busy, reason = await expansion.run(
        _everyones_busy, everyone, own_rows, own_connected, own_answers,
        first_day, end_day, start, end, changes)
    people = [_person(viewer.email, busy[viewer.user_id])]
    for email in asked:
        user_id = user_of.get(email)
        people.append(Person(email, [], NOT_VISIBLE) if user_id is None
                      else _person(email, busy[user_id]))
    return people, sources, warnings, reason


def _person(email: str, busy: list[Interval] | None) -> Person:
    # None: the person's time passed the work bound (10,000 occurrences).
    return Person(email, [], EXPANSION_LIMIT) if busy is None else Person(email, busy, None)


def _everyones_busy(
    everyone: Sequence[_Someone], own_rows: dict[str, list[asyncpg.Record]],
    own_connected: dict[str, list[asyncpg.Record]], own_answers: dict[str, list[asyncpg.Record]],
    first_day: date, end_day: date, start: datetime, end: datetime,
    changes: expansion.Changes,
) -> tuple[dict[str, list[Interval] | None], Reason | None]:
    """Each person's merged intervals, None for one whose occurrences passed the
    work bound (rows read or the expansion budget), each person on a budget of
    their own."""
    busy: dict[str, list[Interval] | None] = {}
    reason: Reason | None = None
    for someone in everyone:
        rows, answers = own_rows[someone.user_id], own_answers[someone.user_id]
        if len(rows) >= agenda.READ_ROWS or len(answers) >= agenda.READ_ROWS:
            busy[someone.user_id], reason = None, "expansion_limit"
            continue
        w = agenda.Window(first_day, end_day, someone.tz, start, end)
        budget = expansion.request_budget()
        spans, why = _spans(rows, own_connected[someone.user_id], answers, w, budget, changes)
        if budget.exhausted:
            busy[someone.user_id], reason = None, "expansion_limit"
            continue
        busy[someone.user_id] = merge(spans, start, end)
        reason = _worse(reason, why)
    return busy, reason


async def _nothing() -> list[asyncpg.Record]:
    return []


def _in_order(rows: list[asyncpg.Record], wanted: list[str]) -> list[asyncpg.Record]:
    """As the agenda: in the order asked for, and every one the caller's."""
    by_id = {r["id"]: r for r in rows}
    for calendar_id in wanted:
        if calendar_id not in by_id:
            raise ApiError("resource_not_found", f"No such calendar: {calendar_id}.",
                           param="calendar_ids")
    return [by_id[c] for c in wanted]


def _sources(rows: list[asyncpg.Record], sync_interval: timedelta
             ) -> tuple[list[agenda.Source], list[agenda.SyncWarning]]:
    """The caller's searched calendars, and their sync warnings, as the agenda lists them."""
    now = datetime.now(UTC)
    sources, warnings = [], []
    for row in rows:
        if row["provider"] == agenda.PROVIDER:
            sources.append(agenda.Source(row["id"], row["name"], agenda.PROVIDER, None, "ok"))
            continue
        warning = sync_state.warning(row, sync_interval, now)
        sources.append(agenda.Source(row["id"], row["name"], row["provider"],
                                     row["last_success_at"],
                                     "ok" if warning is None else "warning"))
        if warning is not None:
            warnings.append(agenda.SyncWarning(row["id"], *warning))
    return sources, warnings


def _spans(rows: Sequence[asyncpg.Record], connected: Sequence[asyncpg.Record],
           answered: Sequence[asyncpg.Record], w: agenda.Window, budget: expansion.Budget,
           changes: expansion.Changes,
           ) -> tuple[list[tuple[datetime, datetime, Status]], Reason | None]:
    """One person's occurrences that take time, before merging: the agenda's own
    expansion of their calendar events and connected components, and of the events
    they answered, with their occurrences' `changes`; a subscription copy of an
    event they declined takes none. Stops once `budget` is spent."""
    spans: list[tuple[datetime, datetime, Status]] = []
    reason: Reason | None = None
    declined = {r["id"] for r in answered if r["rsvp_status"] == "not_going"}
    for row in (*rows, *answered):
        if budget.exhausted:
            return spans, "expansion_limit"
        if row["transparency"] != "opaque" or row.get("rsvp_status") == "not_going":
            continue  # takes no time, whatever its occurrences
        if row.get("source_event_id") in declined:
            continue  # a copy of an event they answered not_going
        status: Status = "tentative" if row.get("rsvp_status") == "maybe" else "busy"
        all_day = row["is_all_day"]
        zone = components.zone_of(row["start_timezone"]) if all_day else None
        if all_day and zone is None:
            log.warning("event %s not expanded: no zone %r", row["id"], row["start_timezone"])
            reason = "expansion_limit"
            continue
        if row["recurrence_rule"] is None:
            # Nothing to expand (the agenda takes the stored span as it is too).
            budget.spend(1)
            if zone is not None:
                spans.append((_midnight(row["start_date"], zone),
                              _midnight(row["end_date"], zone), status))
            elif row["end_time"] is not None:
                spans.append((row["start_time"], row["end_time"], status))
            continue
        # The agenda's own expansion, bounded as it bounds it; a row it cannot expand
        # is logged there and reported here as incomplete.
        found, why = expansion.spans(row, w, budget, limit=agenda.READ_ROWS, changes=changes)
        reason = _worse(reason, why)
        if zone is not None:
            for span in found:
                assert span.start_date is not None and span.end_date is not None
                spans.append((_midnight(span.start_date, zone), _midnight(span.end_date, zone),
                              status))
        else:
            spans.extend((span.start, span.end, status) for span in found
                         if span.end is not None)
    shown = {r["source_event_id"] for r in rows if r["source_event_id"] is not None}
    bounds = expansion.Bounds(w.start, w.end, w.first_day, w.end_date, w.tz)
    external, why = expansion.connected(connected, bounds, agenda.MAX_ITEMS, shown, budget)
    reason = _worse(reason, why)
    for f in external:
        if f.component.transparent or f.end is None:
            continue
        if f.start_date is not None and f.end_date is not None:
            tz = components.zone_of(f.component.zone) or w.tz  # a floating date: theirs
            spans.append((_midnight(f.start_date, tz), _midnight(f.end_date, tz), "busy"))
        else:
            spans.append((f.start, f.end, "busy"))
    return spans, reason


@lru_cache(maxsize=4096)
def _midnight(day: date, tz: ZoneInfo) -> datetime:
    """Where local `day` begins in `tz` (all-day items share a few dates and zones)."""
    return times.local_midnight(day, tz)


def _worse(a: Reason | None, b: Reason | None) -> Reason | None:
    # As the agenda: work that ran out (items may be missing anywhere) outranks a cut.
    return "expansion_limit" if "expansion_limit" in (a, b) else a or b


# ---------------------------------------------------------------------------
# Slots


def _working_clock(hours: WorkingHours) -> tuple[time, time | None]:
    """The working day's local start, and its end (None: the next midnight)."""
    opening = _clock(hours.start, "working_hours.start")
    closing = None if hours.end == "24:00" else _clock(hours.end, "working_hours.end")
    if closing is not None and closing <= opening:
        raise ApiError(
            "invalid_time_range", "`working_hours.end` must be after `working_hours.start`.",
            param="working_hours.end", details={"start": hours.start, "end": hours.end},
        )
    if len(set(hours.days)) != len(hours.days):
        raise _invalid("working_hours.days", hours.days, "must name each weekday once")
    return opening, closing


def _clock(text: str, param: str) -> time:
    match = _CLOCK.fullmatch(text)
    if match is not None:
        try:
            return time(int(match[1]), int(match[2]))
        except ValueError:
            pass
    raise _invalid(param, text, "must be a local time of day, HH:MM (00:00 to 23:59; an end "
                   "may be 24:00)")


def slots(blocked: Sequence[tuple[datetime, datetime]], start: datetime, end: datetime,
          tz: ZoneInfo, opening: time, closing: time | None, days: frozenset[str],
          duration: timedelta, step: timedelta, limit: int) -> list[Slot]:
    """The earliest `limit` slots of `duration` within [start, end) that meet no
    interval of `blocked` (sorted, disjoint), on working days `days` between
    `opening` and `closing` on `tz`'s wall clock, every `step` from `opening`."""
    ends = [e for _, e in blocked]
    found: list[Slot] = []
    day = start.astimezone(tz).date()
    last = end.astimezone(tz).date()
    while day <= last and len(found) < limit:
        if WEEKDAYS[day.weekday()] in days:
            found += _day_slots(blocked, ends, start, end, tz, day, opening, closing, duration,
                                step, limit - len(found))
        day += timedelta(days=1)
    return found


def _day_slots(blocked: Sequence[tuple[datetime, datetime]], ends: list[datetime],
               start: datetime, end: datetime, tz: ZoneInfo, day: date, opening: time,
               closing: time | None, duration: timedelta, step: timedelta, limit: int
               ) -> list[Slot]:
    wall = datetime.combine(day, opening)
    last_wall = datetime.combine(day + timedelta(days=1), time()) if closing is None \
        else datetime.combine(day, closing)
    close = _reached(last_wall, tz)
    found: list[Slot] = []
    while wall < last_wall and len(found) < limit:
        s = _first_instant(wall, tz)
        wall += step
        if s is None or s < start:
            continue  # skipped by the clocks, or before the window
        e = s + duration
        if e > close or e > end:
            if s >= end:
                break
            continue
        i = bisect_right(ends, s)
        if i < len(blocked) and blocked[i][0] < e:
            continue
        found.append(Slot(s, e, s.astimezone(tz), e.astimezone(tz)))
    return found


def _first_instant(wall: datetime, tz: ZoneInfo) -> datetime | None:
    """The first instant whose wall clock in `tz` reads `wall`; None in a gap."""
    found = None
    for fold in (0, 1):
        instant = wall.replace(tzinfo=tz, fold=fold).astimezone(UTC)
        if instant.astimezone(tz).replace(tzinfo=None) == wall and (
                found is None or instant < found):
            found = instant
    return found


def _reached(wall: datetime, tz: ZoneInfo) -> datetime:
    """When `tz`'s clock first reads `wall` or later: in a gap, the jump over it."""
    first = _first_instant(wall, tz)
    if first is not None:
        return first
    # zoneinfo reads a wall time in a gap with the offsets on either side of it;
    # the jump lies between those two readings (transitions fall on whole seconds).
    lo, hi = sorted(int(wall.replace(tzinfo=tz, fold=f).timestamp()) for f in (0, 1))
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if datetime.fromtimestamp(mid, tz).replace(tzinfo=None) >= wall:
            hi = mid
        else:
            lo = mid
    return datetime.fromtimestamp(hi, UTC)
