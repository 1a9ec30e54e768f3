"""Components stored and read back: the `times` JSON of `external_events`, the
keys that match an override to the occurrence it replaces, and the span index.
(The component Kalends pushes for one of its own events is `domain.notify.ics.of_event`.)

Moments keep the provider's kind: a date (all-day), a wall-clock time in a
named zone, a floating wall-clock time (no zone: the same clock reading in
every zone), or a UTC instant.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from datetime import UTC, date, datetime, time, timedelta
from functools import lru_cache
from typing import Any
from zoneinfo import ZoneInfo

import orjson

from core.errors import ApiError
from domain import recurrence, times
from domain.connected.provider import Component, Moment
from domain.notify import ics

# No zone is further than this from UTC: floating times and dates are stored
# with their span widened by it, so the window query never misses one.
_WIDEST_OFFSET = timedelta(hours=14)
_UTC_ZONE = ZoneInfo("UTC")


def moment_text(m: Moment) -> str:
    if isinstance(m, datetime):
        if m.tzinfo is not None:
            return times.utc_text(m)
        return m.replace(microsecond=0).isoformat()
    return m.isoformat()


def parse_moment(text: str) -> Moment:
    if len(text) == 10:
        return date.fromisoformat(text)
    if text.endswith("Z"):
        return datetime.fromisoformat(text[:-1]).replace(tzinfo=UTC)
    return datetime.fromisoformat(text)


def zone_of(name: str | None) -> ZoneInfo | None:
    """The zone a provider named, or None when it is not one zoneinfo knows (the
    time is then read as floating rather than dropped)."""
    if not name:
        return None
    try:
        return ZoneInfo(name)
    except (ValueError, KeyError, OSError):
        return None


def instant(m: Moment, zone: str | None, floating_in: ZoneInfo = _UTC_ZONE) -> datetime:
    """The UTC instant of a moment; floating times and dates in `floating_in`."""
    if isinstance(m, datetime):
        if m.tzinfo is not None:
            return m.astimezone(UTC)
        return wall_instant(m, zone_of(zone) or floating_in)
    return wall_instant(datetime.combine(m, datetime.min.time()), floating_in)


def wall_instant(wall: datetime, tz: ZoneInfo) -> datetime:
    # fold=0: the first of a repeated wall time; a wall time in a DST gap takes
    # the offset before the transition, landing after the gap (RFC 5545 3.3.5).
    return wall.replace(tzinfo=tz, fold=0).astimezone(UTC)


def is_floating(m: Moment, zone: str | None) -> bool:
    if isinstance(m, datetime):
        return m.tzinfo is None and zone_of(zone) is None
    return True


def slot_key(m: Moment, zone: str | None) -> str:
    """The key of an original start: matches RECURRENCE-ID and EXDATE values to
    occurrences whatever zone each was written in."""
    if not isinstance(m, datetime):
        return times.compact_date(m)
    if is_floating(m, zone):
        return times.compact_utc(m.replace(tzinfo=UTC)).removesuffix("Z")
    return times.compact_utc(instant(m, zone))


def times_json(c: Component) -> dict[str, Any]:
    return {
        "start": moment_text(c.start),
        "zone": c.zone,
        "end": None if c.end is None else moment_text(c.end),
        "end_zone": c.end_zone,
        "rrule": c.rrule,
        "rdates": [moment_text(m) for m in c.rdates],
        "exdates": [moment_text(m) for m in c.exdates],
        "recurrence_id": None if c.recurrence_id is None else moment_text(c.recurrence_id),
    }


def from_row(row: Mapping[str, Any]) -> Component:
    """A stored `external_events` row as the component it was made from."""
    t = row["times"]
    fields = (row["uid"], row["title"], row["description"], row["location"], row["cancelled"],
              row["transparent"])
    if isinstance(t, (str, bytes)):
        return _parsed(t, *fields)
    return _component(t, *fields)


@lru_cache(maxsize=8192)
def _parsed(times_text: str | bytes, *fields: Any) -> Component:
    # The agenda reads the same stored rows on every request, as JSON text: each is
    # parsed once. Keyed by every column the component is made of, so a row that a
    # sync changed is parsed again; a Component is immutable, so it can be shared.
    return _component(orjson.loads(times_text), *fields)


def _component(t: Mapping[str, Any], uid: str, title: str, description: str | None,
               location: str | None, cancelled: bool, transparent: bool) -> Component:
    return Component(
        uid=uid,
        start=parse_moment(t["start"]),
        zone=t["zone"],
        end=None if t["end"] is None else parse_moment(t["end"]),
        end_zone=t["end_zone"],
        title=title,
        description=description,
        location=location,
        recurrence_id=None if t["recurrence_id"] is None else parse_moment(t["recurrence_id"]),
        rrule=t["rrule"],
        rdates=tuple(parse_moment(m) for m in t["rdates"]),
        exdates=tuple(parse_moment(m) for m in t["exdates"]),
        cancelled=cancelled,
        transparent=transparent,
    )


def recurrence_key(c: Component) -> str:
    return "" if c.recurrence_id is None else slot_key(c.recurrence_id, c.zone)


def span(c: Component) -> tuple[datetime, datetime | None]:
    """Bounds every occurrence of `c` lies within (None: unbounded), for the
    agenda's window query. An override also covers the slot it replaces, so
    that a window holding only the original slot still finds it."""
    start = instant(c.start, c.zone)
    end = _end_instant(c, start)
    firsts, lasts = [start], [end]
    for m in c.rdates:
        s = instant(m, c.zone)
        firsts.append(s)
        lasts.append(s + (end - start))
    if c.recurrence_id is not None:
        original = instant(c.recurrence_id, c.zone)
        firsts.append(original)
        lasts.append(original + (end - start) + timedelta(days=1))
    floating = is_floating(c.start, c.zone) or (
        c.recurrence_id is not None and is_floating(c.recurrence_id, c.zone))
    margin = _WIDEST_OFFSET if floating else timedelta()
    latest = max(lasts) + margin
    if c.rrule is None:
        return min(firsts) - margin, latest
    # RDATEs may lie past the rule's UNTIL: the later of the two.
    until = _until(c.rrule, margin + (end - start))
    if until is None:
        until = _count_end(c, c.rrule, margin + (end - start))
    return min(firsts) - margin, None if until is None else max(until, latest)


def _end_instant(c: Component, start: datetime) -> datetime:
    if c.end is not None:
        return max(instant(c.end, c.end_zone or c.zone), start)
    if not isinstance(c.start, datetime):
        return start + timedelta(days=1)
    return start


def _until(rule: str, margin: timedelta) -> datetime | None:
    """Where a rule with UNTIL stops (plus `margin`); None for any other rule."""
    for part in rule.upper().split(";"):
        name, _, value = part.partition("=")
        if name != "UNTIL":
            continue
        try:
            if len(value) == 8:
                return datetime.strptime(value, "%Y%m%d").replace(tzinfo=UTC) + margin \
                    + _WIDEST_OFFSET + timedelta(days=1)
            return datetime.strptime(value.rstrip("Z"), "%Y%m%dT%H%M%S").replace(
                tzinfo=UTC) + margin + _WIDEST_OFFSET
        except ValueError:
            return None
    return None


def _count_end(c: Component, rule: str, margin: timedelta) -> datetime | None:
    """Where a rule with COUNT stops: its last occurrence on the clock the agenda
    expands it on (`rule_clock`; floating times and dates in UTC, `margin` covering
    every zone), plus `margin`. None for a rule without an end, one the expander
    cannot read, or an end out of its reach: the series is then read as never
    ending, which is safe."""
    wall, tz = rule_clock(c, _UTC_ZONE)
    try:
        last = recurrence.last_occurrence(rule_text(rule), wall, tz)
    except (ApiError, ValueError, OverflowError):
        return None
    return None if last is None else last.start + margin


def rule_clock(c: Component, floating_in: ZoneInfo) -> tuple[datetime, ZoneInfo]:
    """The clock a master's rule is expanded on: its start as a naive wall time, and
    that clock's zone. UTC times on UTC's clock, zoned ones on their zone's, floating
    ones on `floating_in`'s; dates as UTC midnights (they recur on their own calendar)."""
    if not isinstance(c.start, datetime):
        return datetime.combine(c.start, time()), _UTC_ZONE
    if c.start.tzinfo is not None:
        return c.start.astimezone(UTC).replace(tzinfo=None), _UTC_ZONE
    return c.start, zone_of(c.zone) or floating_in


@lru_cache(maxsize=4096)
def rule_text(rule: str) -> str:
    """A provider's RRULE as the expander reads it. Providers write WKST, UNTIL and
    friends in any order, sometimes with a trailing separator; the expander reads the
    same parts. Cached: the agenda reads the same stored masters on every request."""
    return ";".join(p for p in rule.strip().removeprefix("RRULE:").split(";") if p)


def digest(c: Component, overrides: Sequence[Component] = ()) -> str:
    """What a pushed copy holds (a master and its overrides), as a hash: unchanged
    events are not written again. A copy without overrides hashes as it did before
    they existed, so that no copy is written again for them alone."""
    held = [_fields(c)] if not overrides else [_fields(one) for one in (c, *overrides)]
    value = held[0] if len(held) == 1 else held
    return hashlib.sha256(orjson.dumps(value, option=orjson.OPT_SORT_KEYS)).hexdigest()


def _fields(c: Component) -> dict[str, Any]:
    return times_json(c) | {
        "uid": c.uid, "title": c.title, "description": c.description, "location": c.location,
        "cancelled": c.cancelled, "transparent": c.transparent, "sequence": c.sequence,
    }


def mirrored_event(uid: str) -> str | None:
    """The Kalends event a pushed copy's UID names, if it names one."""
    if uid.endswith(ics.UID_SUFFIX):
        event_id = uid.removesuffix(ics.UID_SUFFIX).lower()
        if event_id.startswith("evt_") and len(event_id) == 36:
            return event_id
    return None
