"""The one iCalendar writer (docs/api-choices.md, "ICS feeds and attendee e-mail"): the ICS
feed, attendee e-mail (iMIP) and the copies pushed to connected calendars all write their
VEVENTs and VTIMEZONEs here, so that every reader (ical.js, `icalendar` +
`recurring-ical-events`, CalDAV servers) reads them to the agenda's instants.

- A Kalends event becomes one `Component` (`of_event`): its `UID` and
  `SEQUENCE` are the same everywhere, its rule is written without the `RRULE:`
  prefix a request may have used, and a recurring event starts at its first
  occurrence. (Kalends expands rules with dateutil, for which a start the rule
  does not select is no occurrence; RFC 5545 readers count `DTSTART` as the
  first instance. Starting at the first occurrence is where both agree.)
- Every `TZID` used gets a `VTIMEZONE` made from the zone as `zoneinfo` (the
  agenda's reference) has it: `STANDARD`/`DAYLIGHT` observances with yearly
  `RRULE`s for every run of years a rule held, dated observances (one date per
  `RDATE` property; readers such as ical.js read one date per line) for the
  years that fit no rule, and an open-ended `RRULE` for the rule still in force,
  so occurrences after 2038 are right too.
"""

from __future__ import annotations

import calendar as _calendar
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, time, timedelta
from functools import lru_cache
from typing import Any
from zoneinfo import ZoneInfo

import icalendar

from db import occurrences as occurrence_store
from domain import expansion, times
from domain.connected.provider import Component, Moment

UID_SUFFIX = "@kalends"
PRODID = "-//Kalends//Kalends//EN"

_FIRST_WITHIN = timedelta(days=366 * 30)
"""A rule's first occurrence is looked for this far from the stored start."""
_HORIZON_YEARS = 10
"""Zones are read this many years past the last year written, so that a rule
still in force is recognised as one (and a zone with no rule is written out)."""
_RULES_SETTLED = 2040
"""Zones are read at least to here: tzdata lists explicit changes up to 2037 and
its zones' rules from then on, so a rule that runs to here is the one in force."""
_IRREGULAR_UNTIL = 2100
"""A zone still changing at `_RULES_SETTLED` by no rule (Morocco's and Gaza's
changes follow Ramadan; tzdata lists them to 2087) is written out change by
change to here."""
_PROBE_STEP = timedelta(days=1)
_WEEKDAYS = ("MO", "TU", "WE", "TH", "FR", "SA", "SU")
_TZID_PROPERTIES = ("DTSTART", "DTEND", "RECURRENCE-ID", "RDATE", "EXDATE", "DUE")


def uid(event_id: str) -> str:
    """An event's iCalendar UID, the same in the feed, in mail and in pushed copies."""
    return event_id + UID_SUFFIX


def rule_text(rule: str) -> str:
    """The RRULE value alone: a request may write the `RRULE:` prefix (docs/api-choices.md,
    "Events, RSVPs and series")."""
    text = rule.strip()
    if text[:6].upper() == "RRULE:":
        text = text[6:]
    return text


# --- Rules as every reader reads them ----------------------------------------------

_ALL_MONTHS = tuple(range(1, 13))
_MONTH_DAYS = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)  # February: see below
_AFTER = tuple(sum(_MONTH_DAYS[m:]) for m in range(1, 13))
"""Days of the months after month m (index m - 1) to the year's end: the same in
leap years, February being the only month whose length changes."""


def rule_for_readers(rule: str) -> str:
    """`rule` (an RRULE value) in a form that expands to exactly the same occurrences
    (RFC 5545, and dateutil, the agenda's expander) and that ical.js reads alike;
    `rule` itself when it needs no other form or has none.

    ical.js 2.x expands a YEARLY rule's BYMONTHDAY in DTSTART's month alone unless
    BYMONTH is given (FREQ=YEARLY;BYMONTHDAY=1 is the 1st of every month, ical.js
    reads it once a year), reads a negative BYMONTHDAY over several months as the
    day of one month, and applies BYSETPOS only with BYDAY and BYMONTH, to each
    month's set rather than to the year's (it reads FREQ=YEARLY;BYDAY=MO,TU;
    BYSETPOS=1, the year's first Monday or Tuesday, as every Monday and Tuesday).
    So, for YEARLY rules without BYWEEKNO or BYYEARDAY and whose BYDAY has no
    ordinals (an ordinal means the nth of the year, or of the month once BYMONTH
    is written):

    - BYMONTHDAY of days 1 to 28, no BYMONTH: the twelve months written out.
    - BYMONTHDAY with negative days or days past the 28th (ical.js makes 31
      February the 3rd of March, matches BYDAY's days against negative numbers
      as written, and with INTERVAL begins a year late): the
      dates as BYYEARDAY, numbered from the year's start to 28 February and from
      its end after, so the same in leap years; not when February's 29th (or
      29th from the end) is named: no day of the year is that in every year;
      nor with COUNT when two of them are one date in some years (16 February
      and the 14th from its end, in leap years): ical.js counts it twice.
    - BYSETPOS with BYDAY alone: the year's set is the months' sets in turn, so
      positions 1 to 4 per weekday are all in the first month (every weekday
      comes at least 4 times in a month) and -1 to -4 per weekday in the last:
      that one month as BYMONTH. Other positions, or both signs, keep the rule.

    What keeps the rule (BYSETPOS with BYMONTHDAY, positions beyond those, ...)
    ical.js reads otherwise; the agenda, the REST field and RFC readers are the
    reference."""
    parts: dict[str, str] = {}
    for part in rule.split(";"):
        name, sep, value = part.partition("=")
        name = name.strip().upper()
        if not sep or not name or name in parts:
            return rule
        parts[name] = value.strip().upper()
    if parts.get("FREQ") != "YEARLY" or "BYWEEKNO" in parts or "BYYEARDAY" in parts:
        return rule
    try:
        weekdays = [d for d in parts.get("BYDAY", "").split(",") if d]
        months = [int(m) for m in parts["BYMONTH"].split(",")] if "BYMONTH" in parts \
            else list(_ALL_MONTHS)
        monthdays = [int(d) for d in parts["BYMONTHDAY"].split(",")] \
            if "BYMONTHDAY" in parts else []
        positions = [int(p) for p in parts["BYSETPOS"].split(",")] \
            if "BYSETPOS" in parts else []
    except ValueError:
        return rule
    if any(d not in _WEEKDAYS for d in weekdays):  # an ordinal, or not a weekday
        return rule
    changed = dict(parts)
    if monthdays and not positions:
        if "BYMONTH" not in parts and all(0 < d <= 28 for d in monthdays):
            changed["BYMONTH"] = ",".join(map(str, _ALL_MONTHS))
        elif any(not 0 < d <= 28 for d in monthdays):
            days = _year_days(months, monthdays)
            if days is None or ("COUNT" in parts and _coincide(days)):
                return rule
            changed.pop("BYMONTH", None)
            changed.pop("BYMONTHDAY")
            changed["BYYEARDAY"] = ",".join(map(str, days))
        else:
            return rule
    elif positions and weekdays and not monthdays and len(set(months)) > 1:
        most = 4 * len(set(weekdays))
        if all(0 < p <= most for p in positions):
            changed["BYMONTH"] = str(min(months))
        elif all(-most <= p < 0 for p in positions):
            changed["BYMONTH"] = str(max(months))
        else:
            return rule
    else:
        return rule
    return ";".join(f"{name}={value}" for name, value in changed.items())


def _year_days(months: Iterable[int], monthdays: Iterable[int]) -> list[int] | None:
    """The days of the year of `monthdays` of `months`, each as a number that names
    the same date in every year (January's and February's first 28 from the start,
    the rest from the end); None if one cannot be (February's 29th to 31st, from
    either end)."""
    out: set[int] = set()
    for month in set(months):
        length = _MONTH_DAYS[month - 1]
        for day in monthdays:
            if month == 2 and abs(day) == 29:
                return None  # in leap years only
            if abs(day) > length:
                continue  # no such day in this month: no occurrence (RFC 5545)
            if month == 1:
                out.add(day if day > 0 else 32 + day)
            elif month == 2 and day > 0:
                out.add(31 + day)
            elif day > 0:
                out.add(-(_AFTER[month - 1] + length - day + 1))
            else:
                out.add(-(_AFTER[month - 1] - day))
    return sorted(out, key=lambda d: d if d > 0 else 1000 + d)


def _coincide(days: Sequence[int]) -> bool:
    """Whether two of `days` (of the year) are one date in a leap year or in another
    year (16 February, and the 14th from its end in a leap year): ical.js counts
    such a date twice toward COUNT."""
    for year in (2027, 2028):
        length = 366 if _calendar.isleap(year) else 365
        if len({d if d > 0 else length + 1 + d for d in days}) < len(days):
            return True
    return False


# --- Kalends events --------------------------------------------------------------


def of_series(row: Mapping[str, Any], occurrences: Sequence[Mapping[str, Any]] = ()
              ) -> tuple[Component, ...]:
    """A Kalends event and its `event_occurrences` rows as written everywhere
    (docs/api-choices.md, "ICS feeds and attendee e-mail"): the master (`of_event`)
    with an `EXDATE` for each cancelled occurrence, then one override
    (`RECURRENCE-ID`) for each changed one. A row of a slot the rule no longer makes
    is not written, as the agenda does not show it (readers disagree on such an
    override: ical.js drops it, `recurring-ical-events` adds it)."""
    master = of_event(row)
    if not row["recurrence_rule"] or not occurrences:
        return (master,)
    made = set(expansion.still_made(row, [o["slot"] for o in occurrences]))
    kept = [o for o in occurrences if o["slot"] in made]
    exdates = tuple(original_start(row, o) for o in kept if o["status"] == "cancelled")
    overrides = tuple(_override(row, master, o) for o in kept
                      if o["status"] != "cancelled" and is_changed(o))
    return (replace(master, exdates=exdates), *overrides)


def of_occurrence(row: Mapping[str, Any], slot: str,
                  occurrence: Mapping[str, Any] | None) -> Component:
    """One occurrence of a recurring event on its own (attendee e-mail): `slot`'s
    `RECURRENCE-ID`, with the occurrence's times and text as the agenda shows them
    (its row's when it has one, else where and what the rule makes of it) and its
    `SEQUENCE` (`occurrence_sequence`)."""
    master = of_event(row)
    o = occurrence if occurrence is not None else _unchanged(row, slot)
    return replace(_override(row, master, o),
                   cancelled=master.cancelled or o["status"] == "cancelled")


def occurrence_sequence(row: Mapping[str, Any], occurrence: Mapping[str, Any] | None) -> int:
    """An occurrence's `SEQUENCE`: the event's, plus its row's revision plus one
    when it has a row, so that it is above the master's from the first change on
    (calendars ignore an update of an instance that is not above what they hold,
    the master's for an instance never changed) and rises with either."""
    if occurrence is None or occurrence["sequence"] is None:
        return int(row["sequence"])
    return int(row["sequence"]) + int(occurrence["sequence"]) + 1


def is_changed(occurrence: Mapping[str, Any]) -> bool:
    """Whether a scheduled occurrence's row makes it differ from the rule's: moved,
    or with text of its own."""
    return _moved(occurrence) or bool(occurrence_store.changed_values(occurrence))


def _moved(occurrence: Mapping[str, Any]) -> bool:
    return occurrence["start_time"] is not None or occurrence["start_date"] is not None


def original_start(row: Mapping[str, Any], occurrence: Mapping[str, Any]) -> Moment:
    """The slot as `RECURRENCE-ID` and `EXDATE` write it, in DTSTART's form: the
    original start on the event's own clock (TZID), or its date (all-day)."""
    instant: datetime = occurrence["original_start"]
    if row["is_all_day"]:
        return instant.astimezone(UTC).date()
    return instant.astimezone(ZoneInfo(row["start_timezone"]))


def _unchanged(row: Mapping[str, Any], slot: str) -> dict[str, Any]:
    """The row of an occurrence that has none: where and what the rule makes of it."""
    original = expansion.parse_slot(slot)
    if not isinstance(original, datetime):
        assert original is not None, slot
        original = datetime.combine(original, time(), UTC)
    return {"slot": slot, "status": "scheduled", "changes": {}, "sequence": None,
            "original_start": original,
            **dict.fromkeys(("start_time", "end_time", "start_timezone", "end_timezone",
                             "start_date", "end_date"))}


def _override(row: Mapping[str, Any], master: Component, o: Mapping[str, Any]) -> Component:
    """The VEVENT of one occurrence: its own times (moved) or the rule's, its own
    text or the event's."""
    own = occurrence_store.changed_values(o)
    return replace(
        master, **_override_times(row, o), recurrence_id=original_start(row, o),
        title=own.get("title", row["title"]) or "",
        description=own.get("description", row["description"]),
        location=own.get("location", row["location"]),
        rrule=None, rdates=(), exdates=(), sequence=occurrence_sequence(row, o))


def _override_times(row: Mapping[str, Any], o: Mapping[str, Any]) -> dict[str, Any]:
    """An occurrence's DTSTART/DTEND: a moved one's own (times in their zones, or
    dates), else the rule's: the original start and the event's length after it."""
    if row["is_all_day"]:
        if _moved(o):
            return {"start": o["start_date"], "end": o["end_date"]}
        first = o["original_start"].astimezone(UTC).date()
        return {"start": first, "end": first + (row["end_date"] - row["start_date"])}
    if _moved(o):
        start: datetime = o["start_time"]
        end: datetime | None = o["end_time"]
        zone = o["start_timezone"] or row["start_timezone"]
        end_zone = o["end_timezone"] or zone
    else:
        start, zone = o["original_start"], row["start_timezone"]
        end = None if row["end_time"] is None else start + (row["end_time"] - row["start_time"])
        end_zone = row["end_timezone"] or zone
    return {"start": _wall(start, zone), "zone": zone,
            "end": None if end is None else _wall(end, end_zone),
            "end_zone": None if end is None else end_zone}


def _wall(instant: datetime, zone: str) -> datetime:
    """`instant` on `zone`'s wall clock; in UTC when that wall time is the second of
    two (a change back repeats an hour): RFC 5545 reads a repeated wall time as the
    first, so no TZID form names the second."""
    tz = ZoneInfo(zone)
    wall = instant.astimezone(tz).replace(tzinfo=None)
    if wall.replace(tzinfo=tz, fold=0).astimezone(UTC) != instant.astimezone(UTC):
        return instant.astimezone(UTC)
    return wall


def of_event(row: Mapping[str, Any]) -> Component:
    """A Kalends event (an `events` row) as written everywhere: starting at its
    first occurrence, with its rule alone and its revision as `SEQUENCE`."""
    shift = _to_first_occurrence(row)
    start: Moment
    end: Moment | None
    rule = row["recurrence_rule"]
    if row["is_all_day"]:
        start, end = row["start_date"] + shift, row["end_date"] + shift
        zone = end_zone = None
    else:
        zone = row["start_timezone"]
        start = (row["start_time"] + shift).astimezone(ZoneInfo(zone)).replace(tzinfo=None)
        end_zone = row["end_timezone"] or zone
        end = None if row["end_time"] is None else \
            (row["end_time"] + shift).astimezone(ZoneInfo(end_zone)).replace(tzinfo=None)
    return Component(
        uid=uid(row["id"]),
        start=start, zone=zone, end=end, end_zone=end_zone if end is not None else None,
        title=row["title"], description=row["description"], location=row["location"],
        rrule=rule_text(rule) if rule else None, cancelled=row["status"] == "cancelled",
        transparent=row["transparency"] == "transparent", sequence=row["sequence"],
    )


def _to_first_occurrence(row: Mapping[str, Any]) -> timedelta:
    """How far a recurring event's first occurrence is from its stored start
    (zero when the rule selects the start, or never occurs)."""
    rule = row["recurrence_rule"]
    if not rule:
        return timedelta()
    t = times.of_row(row)
    zone = ZoneInfo(row["start_timezone"])
    if t.is_all_day:
        local = datetime.combine(row["start_date"], time())
        lower = local.replace(tzinfo=zone)
    else:
        local, lower = t.local_start, row["start_time"]
    # One occurrence, on a budget of its own: a feed's rows are few and each walk is
    # bounded, but no rule is expanded without one (domain/expansion.py).
    first = expansion.first_start(rule, local, zone, lower, lower + _FIRST_WITHIN,
                                  expansion.Budget())
    if first is None:
        return timedelta()
    shift: timedelta
    if t.is_all_day:
        shift = first.original_local.date() - row["start_date"]
    else:
        shift = first.start - row["start_time"]
    return shift


# --- VEVENT and VCALENDAR --------------------------------------------------------


def vevent(c: Component, *, stamp: datetime, created: datetime | None = None,
           modified: datetime | None = None) -> icalendar.Event:
    """`c` as a VEVENT: its times in their own zones, dates as dates."""
    event = icalendar.Event()
    event.add("uid", c.uid)
    event.add("dtstamp", stamp)
    if created is not None:
        event.add("created", created)
    if modified is not None:
        event.add("last-modified", modified)
    event.add("sequence", c.sequence)
    event.add("summary", c.title)
    if c.description:
        event.add("description", c.description)
    if c.location:
        event.add("location", c.location)
    event.add("dtstart", _aware(c.start, c.zone))
    if c.end is not None:
        event.add("dtend", _aware(c.end, c.end_zone or c.zone))
    if c.recurrence_id is not None:
        event.add("recurrence-id", _aware(c.recurrence_id, c.zone))
    if c.rrule:
        event.add("rrule", icalendar.vRecur.from_ical(rule_for_readers(rule_text(c.rrule))))
    for m in c.rdates:  # one date per property: some readers take only the first of a list
        event.add("rdate", _aware(m, c.zone))
    for m in c.exdates:
        event.add("exdate", _aware(m, c.zone))
    event.add("status", "CANCELLED" if c.cancelled else "CONFIRMED")
    event.add("transp", "TRANSPARENT" if c.transparent else "OPAQUE")
    return event


def _aware(m: Moment, zone: str | None) -> Moment:
    if isinstance(m, datetime) and m.tzinfo is None and zone:
        return m.replace(tzinfo=ZoneInfo(zone))
    return m


def document(events: Iterable[icalendar.Event], *, prodid: str = PRODID,
             properties: Sequence[tuple[str, Any, Mapping[str, str] | None]] = ()) -> bytes:
    """A VCALENDAR of `events`, after `properties` (name, value, parameters), with
    a VTIMEZONE for every zone they name."""
    cal = icalendar.Calendar()
    cal.add("prodid", prodid)
    cal.add("version", "2.0")
    for name, value, parameters in properties:
        if parameters:
            cal.add(name, value, parameters=dict(parameters))
        else:
            cal.add(name, value)
    spans: dict[str, _Years] = {}
    for event in events:
        _note_zones(event, spans)
        cal.add_component(event)
    for key in sorted(spans):
        years = spans[key]
        cal.add_component(vtimezone(key, years.first, years.last + _HORIZON_YEARS))
    body: bytes = cal.to_ical()
    return body


@dataclass
class _Years:
    first: int
    last: int


def _note_zones(event: icalendar.Event, spans: dict[str, _Years]) -> None:
    """Widen `spans` by the zoned times of `event` (and its rule's UNTIL)."""
    found: list[tuple[str, int]] = []
    for name in _TZID_PROPERTIES:
        for prop in _as_list(event.get(name)):
            tzid = prop.params.get("TZID")
            if tzid:
                found.extend((str(tzid), d.year) for d in _moments(prop))
    if not found:
        return
    last_year = max(year for _, year in found)
    for until in _as_list(event.get("RRULE")):
        for value in until.get("UNTIL", []):
            last_year = max(last_year, value.year)
    for tzid, year in found:
        span = spans.get(tzid)
        if span is None:
            spans[tzid] = _Years(year, last_year)
        else:
            span.first, span.last = min(span.first, year), max(span.last, last_year)


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def _moments(prop: Any) -> Iterator[datetime | date]:
    if hasattr(prop, "dts"):  # RDATE, EXDATE: a list type
        for entry in prop.dts:
            yield entry.dt[0] if isinstance(entry.dt, tuple) else entry.dt
    else:
        yield prop.dt


# --- VTIMEZONE -------------------------------------------------------------------


@dataclass(frozen=True)
class _Transition:
    at: datetime  # UTC
    before: timedelta
    after: timedelta
    is_dst: bool
    name: str

    @property
    def onset(self) -> datetime:
        """The local wall time of the change, in the offset before it (RFC 5545 3.6.5)."""
        return (self.at + self.before).replace(tzinfo=None)


@dataclass
class _Run:
    """Transitions of one kind in consecutive years that one yearly rule produces."""
    key: tuple[bool, timedelta, timedelta, str, int, time]
    transitions: list[_Transition]
    patterns: set[tuple[str, int, int]] = field(default_factory=set)


def vtimezone(key: str, first_year: int, last_year: int) -> icalendar.Timezone:
    """The VTIMEZONE of zone `key`, right for every instant from the start of
    `first_year`, and beyond `last_year` for as long as its last rule holds."""
    return _vtimezone(key, first_year, max(last_year, first_year, _RULES_SETTLED))


@lru_cache(maxsize=256)
def _vtimezone(key: str, first_year: int, last_year: int) -> icalendar.Timezone:
    zone = ZoneInfo(key)
    changes = list(_transitions(zone, first_year, last_year))
    runs = _runs(changes)
    if last_year < _IRREGULAR_UNTIL and any(
            run.transitions[-1].at.year >= last_year - 2 and not _open(run, last_year)
            for run in runs):
        last_year = _IRREGULAR_UNTIL
        changes = list(_transitions(zone, first_year, last_year))
        runs = _runs(changes)
    vtz = icalendar.Timezone()
    vtz.add("tzid", key)
    # Where the range starts: the offset then, so that nothing written is before
    # every observance (readers would guess).
    begin = datetime(first_year, 1, 1, tzinfo=UTC)
    local = begin.astimezone(zone)
    offset = local.utcoffset() or timedelta()
    vtz.add_component(_observance(
        bool(local.dst()), datetime(first_year, 1, 1), offset, offset, local.tzname() or key))
    singles: dict[tuple[bool, timedelta, timedelta, str], list[_Transition]] = {}
    for run in runs:
        if len(run.transitions) == 1 and not _open(run, last_year):
            t = run.transitions[0]
            singles.setdefault((t.is_dst, t.before, t.after, t.name), []).append(t)
            continue
        first = run.transitions[0]
        observance = _observance(first.is_dst, first.onset, first.before, first.after,
                                 first.name)
        rule: dict[str, Any] = {"freq": "yearly", "bymonth": first.onset.month}
        rule.update(_pattern_parts(_best(run.patterns, first.onset.month), first.onset.month))
        if not _open(run, last_year):
            rule["until"] = run.transitions[-1].at
        observance.add("rrule", rule)
        vtz.add_component(observance)
    for (is_dst, before, after, name), dated in singles.items():
        observance = _observance(is_dst, dated[0].onset, before, after, name)
        if len(dated) > 1:
            # One date per RDATE property, DTSTART's too: ical.js takes an
            # observance with RDATEs to begin at its RDATEs alone.
            for t in dated:
                observance.add("rdate", t.onset)
        vtz.add_component(observance)
    return vtz


def _observance(is_dst: bool, onset: datetime, before: timedelta, after: timedelta,
                name: str) -> icalendar.cal.Component:
    part = icalendar.TimezoneDaylight() if is_dst else icalendar.TimezoneStandard()
    part.add("dtstart", onset)
    part.add("tzoffsetfrom", before)
    part.add("tzoffsetto", after)
    part.add("tzname", name)
    return part


def _open(run: _Run, last_year: int) -> bool:
    """Whether `run` is the rule still in force at the end of the range read."""
    return len(run.transitions) > 1 and run.transitions[-1].at.year >= last_year


def _transitions(zone: ZoneInfo, first_year: int, last_year: int) -> Iterator[_Transition]:
    """Every change of UTC offset from the start of `first_year` to the end of
    `last_year`, found by sampling and bisection (zoneinfo has no list of them;
    beyond its table it applies the zone's rule, as this then reads)."""
    at = datetime(first_year, 1, 1, tzinfo=UTC)
    end = datetime(last_year + 1, 1, 1, tzinfo=UTC)
    before = _offset(zone, at)
    while at < end:
        step = at + _PROBE_STEP
        after = _offset(zone, step)
        if after != before:
            lo, hi = at, step
            while hi - lo > timedelta(seconds=1):
                mid = lo + (hi - lo) / 2
                mid = mid.replace(microsecond=0)
                if _offset(zone, mid) == before:
                    lo = mid
                else:
                    hi = mid
            local = hi.astimezone(zone)
            yield _Transition(hi, before, after, bool(local.dst()), local.tzname() or "")
            before = after
        at = step


def _offset(zone: ZoneInfo, at: datetime) -> timedelta:
    return at.astimezone(zone).utcoffset() or timedelta()


def _runs(changes: Sequence[_Transition]) -> list[_Run]:
    """Changes grouped into runs of consecutive years that one yearly rule
    (month, weekday on or after a day, or a fixed day; same time and offsets)
    produces; a change that fits no run starts its own."""
    runs: list[_Run] = []
    current: dict[tuple[bool, timedelta, timedelta, str, int, time], _Run] = {}
    for t in changes:
        onset = t.onset
        key = (t.is_dst, t.before, t.after, t.name, onset.month, onset.time())
        patterns = _patterns(onset.date())
        run = current.get(key)
        if run is not None and run.transitions[-1].onset.year == onset.year - 1 \
                and run.patterns & patterns:
            run.transitions.append(t)
            run.patterns &= patterns
            continue
        run = _Run(key, [t], patterns)
        current[key] = run
        runs.append(run)
    return runs


def _patterns(day: date) -> set[tuple[str, int, int]]:
    """The yearly rules that select `day` within its month: ("on", weekday, d) is
    the first `weekday` on or after day d (d = 1, 8, 15, 22 are the first to
    fourth; the last is d = month length - 6), ("day", 0, d) the fixed day."""
    found = {("day", 0, day.day)}
    lowest = max(1, day.day - 6)
    for d in range(lowest, day.day + 1):
        found.add(("on", day.weekday(), d))
    return found


def _best(patterns: set[tuple[str, int, int]], month: int) -> tuple[str, int, int]:
    """The rule to write among those that fit every year of a run: the way tz
    rules are usually said (first to fourth, last) where it fits, a fixed day
    for a run with no weekday in common, else the latest "weekday on or after"."""
    weekdays = sorted(p for p in patterns if p[0] == "on")
    if not weekdays:
        return min(patterns)
    last = _calendar.monthrange(2001, month)[1] - 6 if month != 2 else 0
    usual = [p for p in weekdays if p[2] in (1, 8, 15, 22, last)]
    return usual[0] if usual else weekdays[-1]


def _pattern_parts(pattern: tuple[str, int, int], month: int) -> dict[str, Any]:
    kind, weekday, d = pattern
    if kind == "day":
        return {"bymonthday": d}
    name = _WEEKDAYS[weekday]
    if d in (1, 8, 15, 22):
        return {"byday": f"{(d + 6) // 7}{name}"}
    # The last weekday of a month of fixed length (every month but February).
    if month != 2 and d == _calendar.monthrange(2001, month)[1] - 6:
        return {"byday": f"-1{name}"}
    return {"byday": name, "bymonthday": list(range(d, d + 7))}
