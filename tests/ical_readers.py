"""What the differential iCalendar tests share (docs/api-choices.md, "ICS feeds and attendee
e-mail"): generated events, the agenda's occurrences of them (the reference), and the same
occurrences as two independent readers compute them from what Kalends wrote: Mozilla's ical.js
(tests/icaljs.py, which reads the VTIMEZONEs written) and `icalendar` +
`recurring-ical-events`.

An occurrence is compared as ("timed", start, end) in UTC or ("day", first,
end) for all-day ones (dates, end exclusive); each event's occurrences over a
window of a year and a bit from its start. With `labelled`, each also has its slot
(the occurrence_id after `<event_id>:`, from its RECURRENCE-ID) and its title, so
that an override is compared as the occurrence it replaces (`Labelled`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import icalendar
import icaljs
import recurring_ical_events  # type: ignore[import-untyped]
from hypothesis import strategies as st

from db import agenda as agenda_store
from db.database import Database
from domain import agenda, expansion
from domain.connected import engine, ical
from domain.connected.provider import RemoteEvent

ZONES = ("Europe/Paris", "America/New_York", "Asia/Kolkata", "Pacific/Chatham",
         "Australia/Lord_Howe")
_DAYS = ("MO", "TU", "WE", "TH", "FR", "SA", "SU")
WINDOW_DAYS = 368

Occurrence = tuple[str, Any, Any]
Labelled = tuple[str, Any, Any, str, str]
"""(kind, first, last, slot, title)"""


@dataclass(frozen=True)
class Window:
    start: datetime  # UTC midnight
    end: datetime

    @property
    def first_day(self) -> date:
        return self.start.date()

    @property
    def end_day(self) -> date:
        return self.end.date()

    def meets(self, o: Occurrence) -> bool:
        kind, first, last = o
        if kind == "day":
            return bool(first < self.end_day and last > self.first_day)
        if last is None or last == first:
            return bool(self.start <= first < self.end)
        return bool(first < self.end and last > self.start)


def window_of(body: Mapping[str, Any]) -> Window:
    """A year and a bit from the day before an event (as REST returned it) starts."""
    first = date.fromisoformat(body["start_date"]) if body.get("start_date") else \
        datetime.fromisoformat(body["start_time"].replace("Z", "+00:00")).date()
    start = datetime.combine(first - timedelta(days=1), datetime.min.time(), UTC)
    return Window(start, start + timedelta(days=WINDOW_DAYS))


# --- Generated events (REST bodies) ---------------------------------------------


@st.composite
def event_bodies(draw: st.DrawFn, title: str) -> dict[str, Any]:
    """A REST body for `POST /v1/profiles/{id}/events`: a zone with DST or a
    half-hour offset, timed, all-day or multi-day, recurring DAILY to YEARLY with
    BYDAY, BYMONTHDAY, BYSETPOS, COUNT or UNTIL, written with or without the
    `RRULE:` prefix, starting on or off its rule, up to 2045."""
    zone = draw(st.sampled_from(ZONES))
    kind = draw(st.sampled_from(("timed", "timed", "timed", "all_day", "multi_day")))
    first = draw(st.dates(date(2027, 1, 1), date(2045, 6, 30)))
    body: dict[str, Any] = {"title": title, "start_timezone": zone}
    if kind == "timed":
        hour = draw(st.integers(0, 23))
        minute = draw(st.sampled_from((0, 15, 30, 45)))
        body["start_time"] = f"{first.isoformat()}T{hour:02d}:{minute:02d}"
        length = draw(st.sampled_from((0, 30, 60, 90, 150, 600, 1500)))
        if length:
            end_zone = draw(st.sampled_from((zone, zone, zone, "UTC", "Asia/Kolkata")))
            start = datetime.fromisoformat(body["start_time"]).replace(tzinfo=ZoneInfo(zone))
            end = (start.astimezone(UTC) + timedelta(minutes=length)).astimezone(
                ZoneInfo(end_zone))
            body["end_time"] = end.strftime("%Y-%m-%dT%H:%M")
            body["end_timezone"] = end_zone
    else:
        days = 1 if kind == "all_day" else draw(st.integers(2, 4))
        body.update(is_all_day=True, start_date=first.isoformat(),
                    end_date=(first + timedelta(days=days)).isoformat())
    rule = draw(rules(first, timed=kind == "timed"))
    if rule is not None:
        body["recurrence_rule"] = rule
    return body


@st.composite
def rules(draw: st.DrawFn, first: date, *, timed: bool) -> str | None:
    freq = draw(st.sampled_from((None, "DAILY", "WEEKLY", "WEEKLY", "MONTHLY", "MONTHLY",
                                 "YEARLY")))
    if freq is None:
        return None
    parts = [f"FREQ={freq}"]
    if draw(st.booleans()):
        parts.append(f"INTERVAL={draw(st.integers(2, 3))}")
    weekdays = st.lists(st.sampled_from(_DAYS), min_size=1, max_size=3, unique=True)
    if freq in ("DAILY", "WEEKLY"):
        if draw(st.booleans()):
            parts.append("BYDAY=" + ",".join(draw(weekdays)))
    elif freq in ("MONTHLY", "YEARLY"):
        if freq == "YEARLY" and draw(st.booleans()):
            parts.append(f"BYMONTH={draw(st.integers(1, 12))}")
        shape = draw(st.sampled_from(("plain", "nth", "monthday", "setpos")))
        if shape == "nth":
            nth = draw(st.sampled_from((1, 2, 3, 4, -1)))
            parts.append(f"BYDAY={nth}{draw(st.sampled_from(_DAYS))}")
        elif shape == "monthday":
            days = draw(st.lists(st.sampled_from((1, 2, 13, 15, 28, -1)), min_size=1,
                                 max_size=2, unique=True))
            parts.append("BYMONTHDAY=" + ",".join(map(str, days)))
        elif shape == "setpos":
            parts.append("BYDAY=" + ",".join(draw(weekdays)))
            parts.append(f"BYSETPOS={draw(st.sampled_from((1, 2, -1)))}")
    end = draw(st.sampled_from(("none", "count", "until")))
    if end == "count":
        parts.append(f"COUNT={draw(st.integers(1, 30))}")
    elif end == "until":
        until = first + timedelta(days=draw(st.integers(0, 500)))
        parts.append(f"UNTIL={until.strftime('%Y%m%d')}" if not timed
                     else f"UNTIL={until.strftime('%Y%m%d')}T{draw(st.integers(0, 23)):02d}0000Z")
    parts = draw(st.permutations(parts))
    prefix = draw(st.sampled_from(("", "", "RRULE:")))
    return prefix + ";".join(parts)


async def create_events(api: Any, owner: Any, profile_id: str,
                        bodies: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The events of `bodies` that Kalends accepts, made through REST in the
    profile; a generated rule with no occurrence is refused (`invalid_recurrence_rule`:
    docs/api-choices.md, "Events, RSVPs and series")."""
    created = []
    for body in bodies:
        status, event, _ = await api.post(f"/v1/profiles/{profile_id}/events", owner,
                                          json=body)
        if status == 201:
            created.append(event)
        else:
            assert status == 400 and event["error"]["param"] == "recurrence_rule", event
    return created


# --- The reference: the agenda of a subscriber ------------------------------------


async def agenda_occurrences(db: Database, email: str, calendar_id: str,
                             window: Window) -> tuple[dict[str, list[Occurrence]], bool]:
    """The subscriber's agenda over `window` (in UTC), by event title, as
    `domain.agenda.build` makes it (the API's window limits aside: years ahead
    are compared too); and whether it says it is complete."""
    w = agenda.Window(window.first_day, window.end_day, ZoneInfo("UTC"), window.start,
                      window.end)
    user_id = await db.fetchval("SELECT id FROM users WHERE email = $1", email)
    rows = await agenda_store.events(db, user_id, [calendar_id], w.start, w.end,
                                     w.first_day, w.end_date, limit=agenda.READ_ROWS)
    changes = await expansion.changes(db, rows, w.start, w.end, w.first_day, w.end_date)
    items, complete, _ = await expansion.run(agenda.merge, rows, w,
                                             expansion.request_budget(), changes=changes)
    found: dict[str, list[Occurrence]] = {}
    for item in items:
        if item.is_all_day:
            o: Occurrence = ("day", item.start_date, item.end_date)
        else:
            o = ("timed", item.start.astimezone(UTC), _utc(item.end))
        found.setdefault(item.title, []).append(o)
    return found, complete


def _utc(value: datetime | None) -> datetime | None:
    return None if value is None else value.astimezone(UTC)


# --- The readers ------------------------------------------------------------------


def slot_of(value: datetime | date) -> str:
    """An occurrence's slot as Kalends writes it in occurrence IDs: its original
    start in UTC (`YYYYMMDDTHHMMSSZ`), or its date (`YYYYMMDD`)."""
    if isinstance(value, datetime):
        return value.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    return value.strftime("%Y%m%d")


def icaljs_occurrences(texts: Sequence[str | bytes], window: Window, *,
                       labelled: bool = False) -> list[dict[str, list[Any]]]:
    """Each calendar as ical.js expands it, by UID (cancelled components left out);
    with `labelled`, as `Labelled` occurrences."""
    return icaljs_each([(text, window) for text in texts], labelled=labelled)


def icaljs_each(calendars: Sequence[tuple[str | bytes, Window]], *,
                labelled: bool = False) -> list[dict[str, list[Any]]]:
    """`icaljs_occurrences` for calendars each in its own window, in one run of node."""
    results = icaljs.expand_many([(text, w.start, w.end) for text, w in calendars])
    out = []
    for result in results:
        found: dict[str, list[Any]] = {}
        for uid, occurrences in result.items():
            for o in occurrences:
                if o.cancelled:
                    continue
                if o.day is not None:
                    one: tuple[Any, ...] = ("day", o.day, o.end_day)
                else:
                    one = ("timed", o.start, o.end)
                if labelled:
                    original = o.recurrence_id or o.day or o.start
                    assert original is not None
                    one += (slot_of(original), o.summary or "")
                found.setdefault(uid, []).append(one)
        out.append(found)
    return out


def python_occurrences(text: str | bytes, window: Window, *, labelled: bool = False
                       ) -> dict[str, list[Any]]:
    """The calendar as `icalendar` + `recurring-ical-events` expand it, by UID;
    with `labelled`, as `Labelled` occurrences."""
    cal = icalendar.Calendar.from_ical(text)
    found: dict[str, list[Any]] = {}
    for event in recurring_ical_events.of(cal).between(window.start - timedelta(days=2),
                                                         window.end + timedelta(days=2)):
        if str(event.get("STATUS", "")).upper() == "CANCELLED":
            continue
        start = event["DTSTART"].dt
        end = event["DTEND"].dt if "DTEND" in event else None
        if not isinstance(start, datetime):
            o: tuple[Any, ...] = ("day", start, end if end is not None else start + timedelta(1))
        else:
            o = ("timed", start.astimezone(UTC), _utc(end) if end != start else start)
        if labelled:
            original = event["RECURRENCE-ID"].dt if "RECURRENCE-ID" in event else start
            o += (slot_of(original), str(event.get("SUMMARY", "")))
        found.setdefault(str(event["UID"]), []).append(o)
    return found


def imported_occurrences(text: str | bytes, window: Window, *, labelled: bool = False
                         ) -> tuple[dict[str, list[Any]], str | None]:
    """The calendar imported as a connected calendar holds it (`engine.event_rows` of
    its VEVENTs) and expanded as the agenda expands connected events, by UID; and
    why the expansion may be incomplete. With `labelled`, as `Labelled` occurrences
    (the slot from the occurrence_id the agenda gives them)."""
    rows = [{**row, "calendar_id": "xcal_" + "0" * 32, "mirror_of": None}
            for row in engine.event_rows([RemoteEvent("k.ics", None, ical.parse(text))])]
    bounds = expansion.Bounds(window.start, window.end, window.first_day, window.end_day,
                              ZoneInfo("UTC"))
    found, reason = expansion.connected(rows, bounds, agenda.MAX_ITEMS, set(),
                                        expansion.request_budget())
    out: dict[str, list[Any]] = {}
    for f in found:
        one: tuple[Any, ...] = ("day", f.start_date, f.end_date) if f.start_date is not None \
            else ("timed", f.start, f.end)
        if labelled:
            one += (f.occurrence_id.rsplit(":", 1)[1], f.component.title)
        out.setdefault(f.component.uid, []).append(one)
    return out, reason


def beside_changes(found: Iterable[Sequence[Any]], zones: Iterable[str], *,
                   starts_too: bool) -> list[Any]:
    """`found` without what readers compute against RFC 5545 by design
    (tests/icaljs.py) near a change of UTC offset in `zones`: the end of an
    occurrence whose span meets a change (ical.js and recurring-ical-events
    add the length on the wall clock, the RFC in exact time) is not compared;
    with `starts_too` (ical.js), an occurrence starting at a wall time a change
    skips or repeats is left out (ical.js takes the offset after the change,
    the RFC the one before). Labels (`Labelled`) are kept."""
    tzs = [ZoneInfo(z) for z in zones]
    margin = timedelta(hours=3)

    def offsets(at: datetime) -> list[Any]:
        return [at.astimezone(tz).utcoffset() for tz in tzs]

    kept: list[Any] = []
    for kind, first, last, *labels in found:
        if kind == "timed":
            near_start = offsets(first - margin) != offsets(first + margin)
            if starts_too and near_start:
                continue
            end = first if last is None else last
            if offsets(first - margin) != offsets(end + margin):
                last = "not compared"
        kept.append((kind, first, last, *labels))
    return kept


def within(found: Iterable[Sequence[Any]], window: Window) -> list[Any]:
    """`found` in `window`, sorted, a point event's end as its start (labels kept)."""
    normal = []
    for kind, first, last, *labels in found:
        if kind == "timed" and last is None:
            last = first
        normal.append((kind, first, last, *labels))
    return sorted(o for o in normal if window.meets((o[0], o[1], o[2])))
