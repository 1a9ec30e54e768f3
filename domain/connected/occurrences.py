"""Occurrences of connected events in an agenda window, as the provider defines
them: a master's DTSTART, RRULE and RDATEs, less its EXDATEs, with each instance that
an override (RECURRENCE-ID) replaces or cancels taken out and the override
shown instead. Rules expand on the wall clock of the event's own zone with the
same metered expander (`domain.recurrence`) and bounds as Kalends' own
events; floating times on the agenda's clock; all-day events by date.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from functools import lru_cache
from typing import Any, Literal, NamedTuple
from zoneinfo import ZoneInfo

from core.errors import ApiError
from domain import recurrence, times
from domain.connected import components
from domain.connected.provider import Component, Moment

log = logging.getLogger("kalends.agenda")

Reason = Literal["max_items", "expansion_limit"]
_UTC = ZoneInfo("UTC")


class Found(NamedTuple):
    """One occurrence found in the window (a tuple: a month of weekly masters makes
    thousands per request, most of them not kept)."""

    start: datetime
    end: datetime | None
    start_date: date | None
    end_date: date | None
    calendar_id: str
    event_id: str
    component: Component
    recurring: bool
    original: Moment
    """The ID's stamp: the original start of the slot the occurrence fills (an
    override's RECURRENCE-ID, wherever it moved it), an instant or (all-day) a date."""

    @property
    def occurrence_id(self) -> str:
        # Made when asked: the agenda asks only for the occurrences it may keep, a
        # few hundred of the thousands a month of weekly masters holds.
        day = self.original
        stamp = times.compact_utc(day) if isinstance(day, datetime) else times.compact_date(day)
        return f"{self.event_id}:{stamp}"


@dataclass(frozen=True)
class Bounds:
    start: datetime
    end: datetime
    first_day: date
    end_day: date
    tz: ZoneInfo


def expand(rows: Sequence[Mapping[str, Any]], w: Bounds, limit: int,
           shown: set[str], budget: recurrence.Budget) -> tuple[list[Found], Reason | None]:
    """Every occurrence of the stored components `rows` that meets the window.
    Events that mirror a Kalends event in `shown` (copies Kalends pushed) are
    left out. Each group's occurrences and walk are charged to `budget`; once it
    is spent the rest is left out and the answer is "expansion_limit". Called
    only through `domain.expansion.connected` (the one way to expand)."""
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["calendar_id"], row["uid"]), []).append(row)
    found: list[Found] = []
    reason: Reason | None = None
    for group in groups.values():
        if any(_mirror(r) in shown for r in group):
            continue
        if budget.exhausted:
            return found, "expansion_limit"
        try:
            more, why, work = _group(group, w, limit)
        except (ApiError, ValueError, OverflowError) as exc:
            # Read from a provider, not sent by our client: one event that does not
            # expand must not take the agenda down.
            # It is left out, so the answer says it is not complete.
            log.warning("connected event %s not expanded: %s", group[0]["uid"], exc)
            reason = "expansion_limit"
            continue
        if not budget.spend(len(more), work):
            return found, "expansion_limit"
        found.extend(more)
        reason = _worse(reason, why)
    return found, reason


def _worse(a: Reason | None, b: Reason | None) -> Reason | None:
    # Work that ran out (items may be missing anywhere) outranks a cut list.
    return "expansion_limit" if "expansion_limit" in (a, b) else a or b


def _mirror(row: Mapping[str, Any]) -> str | None:
    mirror: str | None = row["mirror_of"]
    return mirror or components.mirrored_event(row["uid"])


def _group(group: list[Mapping[str, Any]], w: Bounds, limit: int
           ) -> tuple[list[Found], Reason | None, float]:
    """The group's occurrences, why they may be incomplete, and the work units
    their walk spent."""
    masters = [r for r in group if r["recurrence_key"] == ""]
    overrides = [r for r in group if r["recurrence_key"] != ""]
    master = masters[0] if masters else None
    found: list[Found] = []
    reason: Reason | None = None
    work = 0.0
    if master is not None and not master["cancelled"]:
        c = components.from_row(master)
        replaced = {r["recurrence_key"] for r in overrides}
        replaced |= {components.slot_key(m, c.zone) for m in c.exdates}
        recurring = c.rrule is not None or bool(c.rdates)
        # Slot keys only matter when something replaces a slot.
        slots, reason, work = _slots(c, w, limit, keyed=bool(replaced))
        for start, end, days, key in slots:
            if key in replaced:
                continue
            found.append(_found(master, c, start, end, days, recurring, master["id"]))
    if master is not None and master["cancelled"]:
        return [], None, work
    for row in overrides:
        if row["cancelled"]:
            continue
        c = components.from_row(row)
        for start, end, days, _ in _single(c, w):
            # An instance of a recurring event, whether its master is stored or (Graph,
            # which expands series itself) not.
            owner = master["id"] if master is not None else row["id"]
            found.append(_found(row, c, start, end, days, True, owner))
    return found, reason, work


_Slot = tuple[datetime, datetime | None, tuple[date, date] | None, str]


def _found(row: Mapping[str, Any], c: Component, start: datetime, end: datetime | None,
           days: tuple[date, date] | None, recurring: bool, event_id: str) -> Found:
    return Found(start, end, days[0] if days else None, days[1] if days else None,
                 row["calendar_id"], event_id, c, recurring, _original(c, start, days))


def _original(c: Component, start: datetime, days: tuple[date, date] | None) -> Moment:
    """The slot an occurrence fills: an override's RECURRENCE-ID (an instant, or the
    date of an all-day one), else where it starts."""
    if c.recurrence_id is not None:
        if isinstance(c.recurrence_id, datetime):
            return components.instant(c.recurrence_id, c.zone)
        return c.recurrence_id
    return days[0] if days is not None else start


def _single(c: Component, w: Bounds) -> Iterable[_Slot]:
    """An override's (or a one-off event's) own occurrence, if it meets the window."""
    if not isinstance(c.start, datetime):
        first = c.start
        last = c.end if isinstance(c.end, date) and not isinstance(c.end, datetime) \
            else first + timedelta(days=1)
        last = max(last, first + timedelta(days=1))
        if first < w.end_day and last > w.first_day:
            yield (times.local_midnight(first, w.tz), times.local_midnight(last, w.tz),
                   (first, last), "")
        return
    tz = _zone(c, w)
    start = components.instant(c.start, c.zone, tz)
    end = None if c.end is None else max(components.instant(c.end, c.end_zone or c.zone, tz),
                                         start)
    if _meets(start, end, w):
        yield start, end, None, ""


def _meets(start: datetime, end: datetime | None, w: Bounds) -> bool:
    if end is None or end == start:
        return w.start <= start < w.end  # a point
    return start < w.end and end > w.start


def _zone(c: Component, w: Bounds) -> ZoneInfo:
    if isinstance(c.start, datetime) and c.start.tzinfo is not None:
        return _UTC
    return components.zone_of(c.zone) or w.tz  # floating: the agenda's clock


@lru_cache(maxsize=8192)
def _slots(c: Component, w: Bounds, limit: int, *, keyed: bool
           ) -> tuple[tuple[_Slot, ...], Reason | None, float]:
    """The master's slots in the window; with `keyed`, each with its slot key (else ""),
    and the work units the walk spent (charged again when remembered, so that an
    answer does not depend on what was remembered).

    Cached: every request of an agenda expands the same stored masters over the same
    window. Both keys are immutable values (a row that a sync changed is another
    Component), and the slots depend on nothing else."""
    if c.rrule is None and not c.rdates:
        return tuple(_single(c, w)), None, 0.0
    if not isinstance(c.start, datetime):
        slots, reason, work = _all_day_slots(c, w, limit)
    else:
        slots, reason, work = _timed_slots(c, w, limit, keyed)
    return tuple(slots), reason, work


def _timed_slots(c: Component, w: Bounds, limit: int, keyed: bool
                 ) -> tuple[list[_Slot], Reason | None, float]:
    assert isinstance(c.start, datetime)
    wall, tz = components.rule_clock(c, w.tz)
    floating = components.is_floating(c.start, c.zone)
    first = components.wall_instant(wall, tz)
    length = None
    if c.end is not None:
        length = max(components.instant(c.end, c.end_zone or c.zone, tz) - first, timedelta())
    # Wall times and their instants, in order, without repeats; the expansion's
    # instants are the ones placed here (the same fold=0 rule), not placed again.
    starts: dict[datetime, datetime] = {}
    reason: Reason | None = None
    work = 0.0
    if c.rrule is not None:
        rule = components.rule_text(c.rrule)
        expansion = recurrence.occurrences(
            rule, wall, tz, w.start - (length or timedelta()), w.end, limit=limit + 1)
        # DTSTART is the first instance even where the rule would not select it
        # (docs/api-choices.md, "Connected calendars", as recurring-ical-events reads it: unless
        # UNTIL is before it); the rule's own instances, COUNT included, follow as dateutil
        # gives them.
        if not recurrence.ends_before_start(rule, wall, tz):
            starts[wall] = first
        for o in expansion.items:
            starts.setdefault(o.original_local, o.start)
        reason, work = expansion.incomplete_reason, expansion.work
    else:
        starts[wall] = first
    for m in c.rdates:
        if isinstance(m, datetime):
            local = m.astimezone(tz).replace(tzinfo=None) if m.tzinfo else m
            if local not in starts:
                starts[local] = components.wall_instant(local, tz)
    slots: list[_Slot] = []
    for local, start in starts.items():
        end = None if length is None else start + length
        if not _meets(start, end if length else None, w):
            continue
        key = "" if not keyed else (
            times.compact_utc(local.replace(tzinfo=UTC)).removesuffix("Z") if floating
            else times.compact_utc(start))
        slots.append((start, end, None, key))
    return slots, reason, work


def _all_day_slots(c: Component, w: Bounds, limit: int
                   ) -> tuple[list[_Slot], Reason | None, float]:
    first = _day(c.start)
    last = _day(c.end) if c.end is not None else first + timedelta(days=1)
    length = max(last - first, timedelta(days=1))
    days: list[date] = []
    reason: Reason | None = None
    work = 0.0
    if c.rrule is not None:
        rule = components.rule_text(c.rrule)
        midnight, utc = components.rule_clock(c, _UTC)
        expansion = recurrence.occurrences(
            rule, midnight, utc,
            datetime.combine(w.first_day - length + timedelta(days=1), time(), UTC),
            datetime.combine(w.end_day, time(), UTC), limit=limit + 1)
        days = [o.original_local.date() for o in expansion.items]
        if not recurrence.ends_before_start(rule, midnight, utc):
            days.insert(0, first)  # as above
        reason, work = expansion.incomplete_reason, expansion.work
    else:
        days = [first]
    days.extend(_day(m) for m in c.rdates)
    slots: list[_Slot] = []
    for day in dict.fromkeys(days):
        end_day = day + length
        if day < w.end_day and end_day > w.first_day:
            slots.append((times.local_midnight(day, w.tz), times.local_midnight(end_day, w.tz),
                          (day, end_day), times.compact_date(day)))
    return slots, reason, work


def _day(m: Moment) -> date:
    return m.date() if isinstance(m, datetime) else m
