"""Occurrences changed on their own, as Kalends writes them in iCalendar
(docs/api-choices.md, "ICS feeds and attendee e-mail"): the master's
`EXDATE`s and the `RECURRENCE-ID` overrides `domain.notify.ics.of_series` makes of an
event's `event_occurrences` rows, checked without a server: the forms written, and
generated cases (tests/domain/test_occurrences_ical_cases.py) whose steps are applied to rows
as the API stores them, read by `recurring-ical-events` to the occurrences the
expansion (domain/expansion.py, the agenda's) gives the same rows. The same cases
through the server, every reader and a CalDAV server: test_occurrences_ical_differential.py.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import icalendar
import pytest
from ical_readers import Window, beside_changes, imported_occurrences, python_occurrences, within
from test_occurrences_ical_cases import Case, Series, Step, cases

from domain import expansion
from domain.notify import feeds, ics

EVENT_ID = "evt_" + "0" * 31 + "1"
UID = ics.uid(EVENT_ID)
_CREATED = datetime(2026, 11, 1, tzinfo=UTC)
OFFLINE_CASES = int(os.environ.get("KALENDS_OCCURRENCE_OFFLINE_CASES", "150"))


# --- Rows as the API stores them ------------------------------------------------------


def event_row(s: Series, event_id: str = EVENT_ID) -> dict[str, Any]:
    """The `events` row of series `s`."""
    tz = ZoneInfo(s.zone)
    row: dict[str, Any] = {
        "id": event_id, "title": s.title, "description": None, "location": None,
        "recurrence_rule": s.rule, "status": "scheduled", "transparency": "opaque",
        "sequence": 0, "created_at": _CREATED, "updated_at": _CREATED,
        "start_timezone": s.zone, "end_timezone": None, "is_all_day": s.all_day,
        "start_date": None, "end_date": None, "start_time": None, "end_time": None}
    if s.all_day:
        return {**row, "start_date": s.first, "end_date": s.first + timedelta(days=s.days),
                "start_time": datetime.combine(s.first, time(), tz).astimezone(UTC)}
    start = datetime.combine(s.first, time(s.hour, s.minute), tz).astimezone(UTC)
    end = None if s.minutes is None else start + timedelta(minutes=s.minutes)
    return {**row, "start_time": start, "end_time": end,
            "end_timezone": s.zone if end is not None else None}


def change_row(row: Mapping[str, Any], slot: str, **values: Any) -> dict[str, Any]:
    """An `event_occurrences` row of `row`'s occurrence `slot`."""
    original = expansion.parse_slot(slot)
    if not isinstance(original, datetime):
        assert original is not None
        original = datetime.combine(original, time(), UTC)
    return {"event_id": row["id"], "slot": slot, "original_start": original,
            "status": "scheduled", "cancellation_reason": None, "changes": "{}",
            "start_time": None, "end_time": None, "start_timezone": None,
            "end_timezone": None, "start_date": None, "end_date": None, "sequence": 0,
            "created_at": _CREATED, "updated_at": _CREATED, **values}


def _window(row: Mapping[str, Any]) -> expansion.Window:
    first = (row["start_date"] or row["start_time"].date()) - timedelta(days=5)
    end = first + timedelta(days=200)
    return expansion.Window(first, end, ZoneInfo("UTC"), datetime.combine(first, time(), UTC),
                            datetime.combine(end, time(), UTC))


def expanded(row: Mapping[str, Any], changes: Sequence[Mapping[str, Any]],
             w: expansion.Window) -> list[tuple[Any, ...]]:
    """The occurrences as the expansion (the agenda's) gives them, labelled: (kind,
    first, last, slot, title)."""
    found, reason = expansion.slots(row, w, expansion.request_budget(),
                                    changes={row["id"]: list(changes)})
    assert reason is None, reason
    out = []
    for start, end, first_day, end_day, source in found:
        changed = source if isinstance(source, expansion.Changed) else None
        slot = changed.slot if changed is not None else expansion.slot_of(start, first_day)
        title = (changed or row)["title"] or ""
        if first_day is not None:
            out.append(("day", first_day, end_day, slot, title))
        else:
            out.append(("timed", start, end if end is not None else start, slot, title))
    return out


# --- A case's steps applied to rows, as the API would -----------------------------------


@dataclass
class Rows:
    """An event's row and its occurrences' rows by slot, as the steps leave them."""

    row: dict[str, Any]
    changes: dict[str, dict[str, Any]] = field(default_factory=dict)

    def shown(self, w: expansion.Window) -> list[tuple[Any, ...]]:
        return expanded(self.row, [self.changes[k] for k in sorted(self.changes)], w)


def apply(case: Case) -> Rows:
    """`case`'s steps but splits (the server's own: test_occurrences_ical_differential.py)
    on rows as docs/occurrences.md has them: a move sets the occurrence's own times, a
    title change its own title, a cancel its status; a restore removes its row."""
    rows = Rows(event_row(case.series))
    w = _window(rows.row)
    for step in case.steps:
        slots = [o[3] for o in rows.shown(w)]
        changed = sorted(rows.changes)
        if step.kind == "restore" and changed:
            del rows.changes[changed[int(step.pick * len(changed))]]
        elif step.kind in ("move", "retitle", "cancel") and slots:
            _change(rows, slots[int(step.pick * len(slots))], step)
    return rows


def _change(rows: Rows, slot: str, step: Step) -> None:
    current = rows.changes.get(slot) or change_row(rows.row, slot, sequence=-1)
    values: dict[str, Any] = {"sequence": current["sequence"] + 1}
    if step.kind == "cancel":
        values["status"] = "cancelled"
    elif step.kind == "retitle":
        values["changes"] = f'{{"title": "{step.title}"}}'
    else:
        values.update(_moved(rows.row, current, step))
    rows.changes[slot] = {**current, **values}


def _moved(row: Mapping[str, Any], current: Mapping[str, Any], step: Step) -> dict[str, Any]:
    if row["is_all_day"]:
        first = current["start_date"] or current["original_start"].date()
        length = (current["end_date"] - first) if current["end_date"] else \
            row["end_date"] - row["start_date"]
        first += timedelta(days=step.days)
        days = timedelta(days=step.length) if step.length else length
        return {"start_date": first, "end_date": first + days}
    start = current["start_time"] or current["original_start"]
    length = (current["end_time"] or start) - start if current["start_time"] else \
        (row["end_time"] or row["start_time"]) - row["start_time"]
    start += timedelta(days=step.days, minutes=step.minutes)
    if step.length:
        length = timedelta(minutes=step.length)
    zone = step.zone or current["start_timezone"] or row["start_timezone"]
    end = start + length if row["end_time"] is not None or step.length else None
    return {"start_time": start, "end_time": end, "start_timezone": zone,
            "end_timezone": zone if end is not None else None}


def text_of(rows: Rows) -> bytes:
    return feeds.calendar({"display_name": "Cases"}, [rows.row],
                          {rows.row["id"]: [rows.changes[k] for k in sorted(rows.changes)]})


# --- The generated cases ---------------------------------------------------------------


def applied_cases(seed: int, chunk: int) -> list[tuple[Case, Rows, expansion.Window, Window]]:
    """Every third of the cases generated from `seed`, from the `chunk`th (0, 1 or 2: a
    test of them runs as three), each with its rows (`apply`) and the days they are read
    in: the expansion's window and the readers' (the same days)."""
    applied = []
    for case in cases(OFFLINE_CASES, seed, date(2026, 11, 29))[chunk::3]:
        rows = apply(case)
        w = _window(rows.row)
        applied.append((case, rows, w, Window(w.start, w.end)))
    return applied


def _apart(got: list[Any], want: list[Any]) -> tuple[list[Any], list[Any]]:
    """The first three occurrences `got` but not wanted, and wanted but not `got`."""
    return [o for o in got if o not in want][:3], [o for o in want if o not in got][:3]


@pytest.mark.parametrize("chunk", range(3))
def test_generated_cases_read_by_recurring_ical_events_as_the_expansion_gives_them(
        chunk: int) -> None:
    made = applied_cases(20261129, chunk)
    wrong = []
    for case, rows, w, window in made:
        want = beside_changes(within(rows.shown(w), window), [case.series.zone],
                              starts_too=False)
        read = python_occurrences(text_of(rows), window, labelled=True).get(UID, [])
        got = beside_changes(within(read, window), [case.series.zone], starts_too=False)
        if got != want:
            wrong.append((case, *_apart(got, want)))
    assert not wrong, f"{len(wrong)} of {len(made)} differ; first: {wrong[0]}"


@pytest.mark.parametrize("chunk", range(3))
def test_generated_cases_imported_from_a_connected_calendar_keep_their_occurrence_ids(
        chunk: int) -> None:
    """What Kalends writes, read back as a connected calendar's events (overrides by
    RECURRENCE-ID, EXDATEs; moves across days, zones and changes of offset): the same
    occurrences, each under the occurrence_id of the slot it replaces, as the
    expansion gives the rows (docs/api-choices.md, "Connected calendars")."""
    made = applied_cases(20261130, chunk)
    wrong = []
    for case, rows, w, window in made:
        want = within(rows.shown(w), window)
        read, reason = imported_occurrences(text_of(rows), window, labelled=True)
        got = within(read.get(UID, []), window)
        if got != want or reason is not None:
            wrong.append((case, reason, *_apart(got, want)))
    assert not wrong, f"{len(wrong)} of {len(made)} differ; first: {wrong[0]}"


# --- The forms written ------------------------------------------------------------------


_WEEKLY = Series("Weekly", "America/New_York", False, date(2027, 3, 1), 14, 0, 60, 0,
                 "FREQ=WEEKLY;COUNT=6")


def _vevents(rows: Rows) -> list[Any]:
    return list(icalendar.Calendar.from_ical(text_of(rows)).walk("VEVENT"))


def test_a_cancelled_occurrence_is_an_exdate_in_dtstarts_form_even_the_first() -> None:
    rows = Rows(event_row(_WEEKLY))
    for slot in ("20270301T190000Z", "20270315T180000Z"):  # before and after the change
        rows.changes[slot] = change_row(rows.row, slot, status="cancelled")
    [master] = _vevents(rows)
    assert master["DTSTART"].dt == datetime(2027, 3, 1, 14, tzinfo=ZoneInfo(_WEEKLY.zone))
    exdates = [d.dt for e in master["EXDATE"] for d in e.dts]
    assert exdates == [datetime(2027, 3, 1, 14, tzinfo=ZoneInfo(_WEEKLY.zone)),
                       datetime(2027, 3, 15, 14, tzinfo=ZoneInfo(_WEEKLY.zone))]
    assert all(e.params["TZID"] == _WEEKLY.zone for e in master["EXDATE"])


def test_an_all_day_cancel_is_a_date_exdate_and_a_move_an_override_of_dates() -> None:
    s = Series("Days", "Australia/Sydney", True, date(2027, 4, 1), 0, 0, None, 2,
               "FREQ=DAILY;INTERVAL=3;COUNT=4")
    rows = Rows(event_row(s))
    rows.changes["20270404"] = change_row(rows.row, "20270404", status="cancelled")
    rows.changes["20270407"] = change_row(rows.row, "20270407", start_date=date(2027, 4, 9),
                                          end_date=date(2027, 4, 10), sequence=2)
    master, override = _vevents(rows)
    assert master.get("EXDATE").to_ical() == b"20270404"
    assert master.get("EXDATE").params["VALUE"] == "DATE"
    assert override["RECURRENCE-ID"].dt == date(2027, 4, 7)
    assert (override["DTSTART"].dt, override["DTEND"].dt) == (date(2027, 4, 9), date(2027, 4, 10))
    assert override["SEQUENCE"] == 3  # the event's 0, the row's 2, plus one


def test_a_moved_first_occurrence_keeps_the_master_at_the_first_slot() -> None:
    rows = Rows(event_row(_WEEKLY))
    moved = datetime(2027, 3, 2, 20, tzinfo=UTC)
    rows.changes["20270301T190000Z"] = change_row(
        rows.row, "20270301T190000Z", start_time=moved, end_time=moved + timedelta(hours=2),
        start_timezone="Europe/Berlin", end_timezone="Europe/Berlin",
        changes='{"title": "Moved", "location": null}')
    rows.row["location"] = "Hall"
    master, override = _vevents(rows)
    assert master["DTSTART"].dt == datetime(2027, 3, 1, 14, tzinfo=ZoneInfo(_WEEKLY.zone))
    assert override["RECURRENCE-ID"].dt == master["DTSTART"].dt
    assert override["RECURRENCE-ID"].params["TZID"] == _WEEKLY.zone
    assert override["DTSTART"].dt == moved.astimezone(ZoneInfo("Europe/Berlin"))
    assert override["DTSTART"].params["TZID"] == "Europe/Berlin"
    assert (str(override["SUMMARY"]), override.get("LOCATION")) == ("Moved", None)
    assert str(master["LOCATION"]) == "Hall"


def test_an_occurrence_moved_into_a_repeated_hour_is_written_in_utc() -> None:
    # 01:30 on 7 November 2027 happens twice in New York: the second is 06:30 UTC.
    rows = Rows(event_row(_WEEKLY))
    second = datetime(2027, 11, 7, 6, 30, tzinfo=UTC)
    rows.changes["20270308T190000Z"] = change_row(
        rows.row, "20270308T190000Z", start_time=second, end_time=second + timedelta(hours=1),
        start_timezone=_WEEKLY.zone, end_timezone=_WEEKLY.zone)
    _, override = _vevents(rows)
    assert override["DTSTART"].to_ical() == b"20271107T063000Z"
    assert override["DTEND"].params["TZID"] == _WEEKLY.zone  # 02:30 EST is no repeat


def test_rows_the_rule_does_not_make_and_unchanged_rows_are_not_written() -> None:
    rows = Rows(event_row(_WEEKLY))
    rows.changes["20270309T180000Z"] = change_row(rows.row, "20270309T180000Z",
                                                  status="cancelled")  # a Tuesday
    rows.changes["20270412T180000Z"] = change_row(rows.row, "20270412T180000Z",
                                                  changes='{"title": "7th"}')  # past COUNT
    rows.changes["20270315T180000Z"] = change_row(rows.row, "20270315T180000Z", sequence=3)
    [master] = _vevents(rows)
    assert "EXDATE" not in master


def test_a_cancelled_event_cancels_its_overrides_too() -> None:
    rows = Rows(event_row(_WEEKLY))
    rows.row["status"] = "cancelled"
    rows.changes["20270315T180000Z"] = change_row(rows.row, "20270315T180000Z",
                                                  changes='{"title": "Own"}')
    assert [str(v["STATUS"]) for v in _vevents(rows)] == ["CANCELLED", "CANCELLED"]


def test_one_occurrence_on_its_own_as_mail_writes_it() -> None:
    row = event_row(_WEEKLY)
    row["sequence"] = 4
    plain = ics.of_occurrence(row, "20270315T180000Z", None)
    assert (plain.recurrence_id, plain.start, plain.sequence, plain.cancelled) == (
        datetime(2027, 3, 15, 14, tzinfo=ZoneInfo(_WEEKLY.zone)), datetime(2027, 3, 15, 14),
        4, False)
    gone = ics.of_occurrence(row, "20270315T180000Z", change_row(
        row, "20270315T180000Z", status="cancelled", sequence=1))
    assert (gone.sequence, gone.cancelled, gone.rrule) == (6, True, None)
