"""iCalendar (RFC 5545) in and out, through the `icalendar` package: VEVENTs
read into components with their times as written, and one component written
as a VCALENDAR with the VTIMEZONEs it uses."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import icalendar

from domain.connected import components
from domain.connected.provider import Component, Moment
from domain.notify import ics

log = logging.getLogger("kalends.connected")

PRODID = "-//Kalends//Connected calendars//EN"


def parse(text: str | bytes) -> tuple[Component, ...]:
    """Every VEVENT of an iCalendar object; () for one that cannot be read (it is
    logged, and the rest of the calendar still syncs)."""
    try:
        calendar = icalendar.Calendar.from_ical(text)
    except ValueError as exc:
        log.warning("unreadable iCalendar object skipped: %s", exc)
        return ()
    found = []
    for event in calendar.walk("VEVENT"):
        try:
            found.append(_component(event))
        except (KeyError, ValueError, TypeError) as exc:
            log.warning("unreadable VEVENT %s skipped: %s", event.get("UID"), exc)
    return tuple(found)


def _component(event: Any) -> Component:
    # Any: the properties' own types are a union of every value type.
    start, zone = _moment(event["DTSTART"])
    end: Moment | None = None
    end_zone: str | None = None
    if "DTEND" in event:
        end, end_zone = _moment(event["DTEND"])
    elif "DURATION" in event:
        duration: timedelta = event["DURATION"].dt
        end, end_zone = start + duration, zone
    recurrence_id = None
    if "RECURRENCE-ID" in event:
        recurrence_id = _in(*_moment(event["RECURRENCE-ID"]), zone)
    rrule = event.get("RRULE")
    return Component(
        uid=str(event["UID"]),
        start=start, zone=zone, end=end, end_zone=end_zone,
        title=str(event.get("SUMMARY", "")),
        description=_text(event.get("DESCRIPTION")),
        location=_text(event.get("LOCATION")),
        recurrence_id=recurrence_id,
        rrule=None if rrule is None else _first(rrule).to_ical().decode(),
        rdates=tuple(_dates(event.get("RDATE"), zone)),
        exdates=tuple(_dates(event.get("EXDATE"), zone)),
        cancelled=str(event.get("STATUS", "")).upper() == "CANCELLED",
        transparent=str(event.get("TRANSP", "")).upper() == "TRANSPARENT",
        sequence=int(event.get("SEQUENCE", 0)),
    )


def _first(value: Any) -> Any:
    return value[0] if isinstance(value, list) else value


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _moment(prop: Any) -> tuple[Moment, str | None]:
    return _split(prop.dt, prop.params.get("TZID"))


def _split(value: Any, tzid: str | None) -> tuple[Moment, str | None]:
    """(moment, zone name): wall clock in an IANA zone, a UTC instant, floating or a date."""
    if not isinstance(value, datetime):
        if isinstance(value, date):
            return value, None
        raise ValueError(f"not a date or date-time: {value!r}")
    tz = value.tzinfo
    if tz is None:
        return value, None
    if isinstance(tz, ZoneInfo) and tz.key != "UTC":
        return value.replace(tzinfo=None), tz.key
    # UTC, or a zone only its VTIMEZONE defines: the instant is exact either way.
    return value.astimezone(UTC), None


def _in(moment: Moment, moment_zone: str | None, zone: str | None) -> Moment:
    """A RECURRENCE-ID, RDATE or EXDATE value as the component holds it: a wall time
    when it is written on the clock of the component's DTSTART (`zone`), else the
    instant it names (UTC). Values are matched to occurrences by instant
    (`components.slot_key` reads a wall time on DTSTART's clock), and an instance
    moved to another zone keeps the RECURRENCE-ID of its slot in the series' zone:
    read on its own DTSTART's clock, it would name another instant."""
    if moment_zone is None or moment_zone == zone or not isinstance(moment, datetime):
        return moment
    return components.instant(moment, moment_zone)


def _dates(prop: Any, zone: str | None) -> Iterable[Moment]:
    if prop is None:
        return
    for entry in prop if isinstance(prop, list) else [prop]:
        tzid = entry.params.get("TZID")
        for value in entry.dts:
            # A PERIOD: its start.
            yield _in(*_split(value.dt[0] if isinstance(value.dt, tuple) else value.dt, tzid),
                      zone)


def serialize(c: Component, overrides: Sequence[Component] = ()) -> bytes:
    """One VCALENDAR holding `c` and its `overrides` (one iCalendar object, as RFC 4791
    4.1 wants every component of one UID), with the VTIMEZONEs their times use
    (domain/notify/ics.py)."""
    stamp = datetime.now(UTC).replace(microsecond=0)
    return ics.document([ics.vevent(one, stamp=stamp) for one in (c, *overrides)],
                        prodid=PRODID)
