"""Yearly rules as Kalends writes them for other readers (docs/api-choices.md, "ICS feeds and
attendee e-mail"): ical.js read FREQ=YEARLY;BYMONTHDAY=1 once a year and
FREQ=YEARLY;BYDAY=MO,TU;BYSETPOS=1 as every Monday and Tuesday, where RFC 5545 and the agenda
expand the 1st of every month and the year's first Monday or Tuesday. The writer
(`ics.rule_for_readers`) writes such rules in a form that expands to exactly the
same occurrences (checked here with the agenda's expander over decades) and that
ical.js reads alike (checked on generated rules against the agenda)."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

import icaljs
import pytest
from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis import strategies as st
from ical_readers import Window

from domain import recurrence
from domain.connected.provider import Component
from domain.notify import ics

_DAYS = ("MO", "TU", "WE", "TH", "FR", "SA", "SU")
ZONES = ("UTC", "Europe/Paris", "America/New_York", "Australia/Lord_Howe")
YEARS = 6


@st.composite
def yearly_rules(draw: st.DrawFn, *, readable_only: bool) -> str:
    """YEARLY rules of the shapes ical.js read otherwise: BYMONTHDAY (positive and
    negative days, with or without plain BYDAY) and BYSETPOS over plain BYDAY,
    with no BYMONTH, one month or several; INTERVAL, COUNT and UNTIL. With
    `readable_only`, only what `rule_for_readers` documents it can write for
    ical.js (the rest stays as sent)."""
    parts = ["FREQ=YEARLY"]
    if draw(st.booleans()):
        parts.append(f"INTERVAL={draw(st.integers(2, 4))}")
    months = draw(st.sampled_from(("none", "none", "one", "several")))
    if months == "one":
        parts.append(f"BYMONTH={draw(st.integers(1, 12))}")
    elif months == "several":
        chosen = draw(st.lists(st.integers(1, 12), min_size=2, max_size=4, unique=True))
        parts.append("BYMONTH=" + ",".join(map(str, chosen)))
    weekdays = st.lists(st.sampled_from(_DAYS), min_size=1, max_size=3, unique=True)
    if draw(st.booleans()):
        # February's 29th (from either end) is in leap years only: no BYYEARDAY.
        day = st.integers(-31, 31).filter(
            lambda d: d != 0 and not (readable_only and abs(d) == 29))
        days = draw(st.lists(day, min_size=1, max_size=3, unique=True))
        parts.append("BYMONTHDAY=" + ",".join(map(str, days)))
        if draw(st.integers(0, 3)) == 0:
            parts.append("BYDAY=" + ",".join(draw(weekdays)))
    else:
        days_drawn = draw(weekdays)
        parts.append("BYDAY=" + ",".join(days_drawn))
        sign = draw(st.sampled_from((1, -1)))
        most = 4 * len(days_drawn) if readable_only else 8
        positions = draw(st.lists(st.integers(1, most), min_size=1, max_size=2, unique=True))
        if not readable_only and draw(st.booleans()):
            positions.append(-positions[0])  # both signs
        parts.append("BYSETPOS=" + ",".join(str(sign * p) for p in positions))
    mixed = any("BYMONTHDAY=" in p and "-" in p and any(
        not d.startswith("-") for d in p.split("=")[1].split(",")) for p in parts)
    # Documented: with COUNT, days of both signs that are one date in some years
    # stay as sent (ical.js counts that date twice).
    ends = ("none", "until") if readable_only and mixed else ("none", "count", "until")
    end = draw(st.sampled_from(ends))
    if end == "count":
        parts.append(f"COUNT={draw(st.integers(1, 40))}")
    elif end == "until":
        parts.append(f"UNTIL={draw(st.integers(2029, 2040))}0615T000000Z")
    return ";".join(draw(st.permutations(parts)))


def _first(rule: str, start: datetime, zone: ZoneInfo) -> datetime | None:
    """The rule's first occurrence (wall clock) from `start`: where Kalends starts
    what it writes."""
    lower = start.replace(tzinfo=zone)
    found = recurrence.occurrences(rule, start, zone, lower, lower + timedelta(days=366 * 30),
                                   limit=1)
    return found.items[0].original_local if found.items else None


def _valid(rule: str, start: datetime, zone: ZoneInfo) -> bool:
    try:
        recurrence.check(rule, start, zone)
    except Exception:  # a generated rule Kalends refuses
        return False
    return True


def _agenda(rule: str, start: datetime, zone: ZoneInfo, window: Window) -> list[datetime]:
    found = recurrence.occurrences(rule, start, zone, window.start, window.end, limit=5000)
    assert found.complete, (rule, found.incomplete_reason)
    return [o.start.astimezone(UTC) for o in found.items]


def _written(uid: str, rule: str, start: datetime, zone: str) -> bytes:
    c = Component(uid=uid, start=start, zone=zone, end=start + timedelta(hours=1), rrule=rule)
    return ics.document([ics.vevent(c, stamp=datetime(2026, 1, 1, tzinfo=UTC))])


def _read_alike(cases: list[tuple[str, datetime, str]]) -> None:
    """Each (rule, first occurrence, zone), written by Kalends and read by ical.js
    (one node run for all), gives the agenda's starts over YEARS years."""
    jobs, wanted = [], []
    for i, (rule, start, zone) in enumerate(cases):
        w0 = datetime.combine(start.date() - timedelta(days=1), time(), UTC)
        window = Window(w0, w0 + timedelta(days=365 * YEARS))
        jobs.append((_written(f"case-{i}", rule, start, zone), window.start, window.end))
        wanted.append(_agenda(rule, start, ZoneInfo(zone), window))
    results = icaljs.expand_many(jobs)
    wrong = []
    for i, (rule, start, zone) in enumerate(cases):
        got = [o.start for o in results[i].get(f"case-{i}", []) if o.start is not None]
        if got != wanted[i]:
            only_reader = sorted(set(got) - set(wanted[i]))[:3]
            only_agenda = sorted(set(wanted[i]) - set(got))[:3]
            written = next(line for line in jobs[i][0].decode().splitlines()
                           if line.startswith("RRULE:"))
            wrong.append(f"{rule} from {start:%Y-%m-%d %H:%M} {zone}, written as "
                         f"{written}: ical.js {len(got)}, agenda "
                         f"{len(wanted[i])}; only ical.js {only_reader}; only the agenda "
                         f"{only_agenda}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.slow
@pytest.mark.parametrize("rule", [
    "FREQ=YEARLY;BYMONTHDAY=1",  # the 1st of every month
    "FREQ=YEARLY;BYDAY=MO,TU;BYSETPOS=1",  # the year's first Monday or Tuesday
    "FREQ=YEARLY;INTERVAL=2;BYMONTHDAY=-1",  # every month's last day, every other year
    "FREQ=YEARLY;BYMONTH=3,9;BYDAY=MO;BYSETPOS=1",  # March's first Monday only
    "FREQ=YEARLY;BYMONTHDAY=15,-1;BYDAY=FR;COUNT=12",
])
def test_the_rules_ical_js_read_otherwise_read_alike(rule: str) -> None:
    zone = "Europe/Paris"
    start = _first(rule, datetime(2027, 1, 1, 12), ZoneInfo(zone))
    assert start is not None
    _read_alike([(rule, start, zone)])


_CASE = st.tuples(yearly_rules(readable_only=True), st.dates(date(2026, 1, 1), date(2040, 12, 31)),
                  st.sampled_from(ZONES), st.sampled_from((time(9), time(12, 30), time(18))))


@pytest.mark.slow
@given(st.lists(_CASE, min_size=30, max_size=30))
@settings(max_examples=8, deadline=None, derandomize=True,
          phases=(Phase.explicit, Phase.reuse, Phase.generate),  # every wrong case is shown
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
def test_generated_yearly_rules_read_alike_by_icaljs_and_the_agenda(
        cases: list[tuple[str, date, str, time]]) -> None:
    kept = []
    for rule, day, zone, at in cases:
        tz = ZoneInfo(zone)
        start = datetime.combine(day, at)
        if not _valid(rule, start, tz):
            continue
        first = _first(rule, start, tz)
        if first is not None:
            kept.append((rule, first, zone))
    assume(kept)
    _read_alike(kept)


@pytest.mark.slow
@given(yearly_rules(readable_only=False), st.dates(date(1990, 1, 1), date(2060, 12, 31)))
@settings(max_examples=600, deadline=None, derandomize=True)
def test_the_written_form_expands_to_the_same_occurrences(rule: str, day: date) -> None:
    """Whatever the shape (those left as sent too), the rule written expands, by the
    agenda's expander, to exactly the occurrences of the rule as sent, over 40
    years from its start."""
    zone = ZoneInfo("Europe/Paris")
    start = datetime.combine(day, time(12))
    assume(_valid(rule, start, zone))
    written = ics.rule_for_readers(rule)
    if written != rule:
        recurrence.check(written, start, zone)
    lower = start.replace(tzinfo=zone)
    window = Window(lower.astimezone(UTC), lower.astimezone(UTC) + timedelta(days=365 * 40))
    assert _agenda(written, start, zone, window) == _agenda(rule, start, zone, window), written


def test_what_is_left_as_sent() -> None:
    for rule in (
        "FREQ=MONTHLY;BYMONTHDAY=1",
        "FREQ=YEARLY;BYMONTH=6,7;BYMONTHDAY=15",  # read alike already
        "FREQ=YEARLY;BYDAY=1MO",  # the year's first Monday: an ordinal
        "FREQ=YEARLY;BYDAY=MO,TU",  # every Monday and Tuesday: read alike already
        "FREQ=YEARLY;BYDAY=MO;BYSETPOS=1,-1",  # both ends: no one month holds both
        "FREQ=YEARLY;BYMONTHDAY=-29",  # February's 29th from the end: leap years only
        "FREQ=YEARLY;BYMONTHDAY=16,-14;COUNT=5",  # one date in leap Februaries
        "FREQ=YEARLY;BYWEEKNO=20;BYMONTHDAY=15",
    ):
        assert ics.rule_for_readers(rule) == rule
    assert ics.rule_for_readers("RRULE:x") == "RRULE:x"
