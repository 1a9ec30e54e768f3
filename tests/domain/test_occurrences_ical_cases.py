"""Generated cases for the occurrences differential (docs/api-choices.md, "ICS feeds
and attendee e-mail"): recurring series (DAILY, WEEKLY, MONTHLY; timed and all-day) in
three zones with DST, each starting before a change of UTC offset so that
it runs across it, and the steps an owner takes on single occurrences: moves (across
days, across a change of offset, into another zone), title changes, cancels, restores
and splits ("this and following").

A seeded generator (`cases`), not Hypothesis: the acceptance run is a given number of
cases (tests/domain/test_occurrences_ical_differential.py reads it from the environment), each
one reproducible from its seed, its number and the day it was made on. The tests here check that the cases
are what they claim to be: every zone, frequency and step kind, and series that cross
a change.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any, Literal
from zoneinfo import ZoneInfo

from dateutil.rrule import rrulestr  # type: ignore[import-untyped]

ZONES = ("America/New_York", "Europe/Berlin", "Australia/Sydney")
FREQUENCIES = ("DAILY", "WEEKLY", "MONTHLY")
StepKind = Literal["move", "retitle", "cancel", "restore", "split"]
STEP_KINDS: tuple[StepKind, ...] = ("move", "retitle", "cancel", "restore", "split")
_STEP_WEIGHTS = (30, 20, 25, 15, 10)
_DAYS = ("MO", "TU", "WE", "TH", "FR", "SA", "SU")
MAX_SPAN = timedelta(days=150)
"""A series' occurrences lie within this of its start: with its moves and the agenda's
365 days ahead, every case fits the windows the API answers."""
LAST_DAY = 340
"""Cases end (moves included) this many days from today at the latest: within the
365 days ahead the agenda answers."""


@dataclass(frozen=True)
class Series:
    """A recurring profile event: `first` (a local date) at `hour`:`minute` for
    `minutes` (None: a point in time) in `zone`, or all-day for `days` days."""

    title: str
    zone: str
    all_day: bool
    first: date
    hour: int
    minute: int
    minutes: int | None
    days: int
    rule: str

    def body(self) -> dict[str, Any]:
        """The REST body of `POST /v1/profiles/{id}/events`."""
        body: dict[str, Any] = {"title": self.title, "start_timezone": self.zone,
                                "recurrence_rule": self.rule}
        if self.all_day:
            return {**body, "is_all_day": True, "start_date": self.first.isoformat(),
                    "end_date": (self.first + timedelta(days=self.days)).isoformat()}
        start = datetime.combine(self.first, time(self.hour, self.minute))
        body["start_time"] = start.strftime("%Y-%m-%dT%H:%M")
        if self.minutes is not None:
            end = start.replace(tzinfo=ZoneInfo(self.zone)) + timedelta(minutes=self.minutes)
            body["end_time"] = end.astimezone(ZoneInfo(self.zone)).strftime("%Y-%m-%dT%H:%M")
            body["end_timezone"] = self.zone
        return body


@dataclass(frozen=True)
class Step:
    """One change of one occurrence. `pick` chooses the occurrence (a fraction of
    those the step can apply to, in order: scheduled ones to move, retitle or cancel,
    those with changes of their own to restore, all but the first to split at), `which`
    the event (a split makes another); a move shifts the occurrence by `days` and
    `minutes`, sets its length (`length` minutes, or days when all-day; None keeps it)
    and maybe its `zone`; a title change, and maybe a split, set `title`. Steps of
    `phase` 1 come after the subscriber's copy was first pushed."""

    kind: StepKind
    pick: float
    which: float
    phase: int
    days: int = 0
    minutes: int = 0
    length: int | None = None
    zone: str | None = None
    title: str = ""


@dataclass(frozen=True)
class Case:
    number: int
    series: Series
    steps: tuple[Step, ...]


def transitions(zone: str, first: date, last: date) -> list[date]:
    """The local dates from `first` to `last` on which `zone`'s UTC offset changes."""
    tz = ZoneInfo(zone)
    found = []
    day = first
    offset = datetime.combine(day, time(), tz).utcoffset()
    while day < last:
        day += timedelta(days=1)
        now = datetime.combine(day, time(), tz).utcoffset()
        if now != offset:
            found.append(day - timedelta(days=1))
            offset = now
    return found


def cases(count: int, seed: int, today: date) -> list[Case]:
    """`count` cases from `seed`, each starting after `today` and ending within
    `LAST_DAY` days of it."""
    rng = random.Random(seed)
    return [_case(rng, n, today) for n in range(count)]


def _case(rng: random.Random, number: int, today: date) -> Case:
    series = _series(rng, number, today)
    steps = tuple(_step(rng, series) for _ in range(rng.randint(1, 6)))
    return Case(number, series, steps)


def _series(rng: random.Random, number: int, today: date) -> Series:
    zone = rng.choice(ZONES)
    last = today + timedelta(days=LAST_DAY)
    # A change of offset, and a start before it by less than the series runs: the
    # series crosses it.
    change = rng.choice(transitions(zone, today + timedelta(days=5), last - _LEAD))
    first = max(change - timedelta(days=rng.randint(1, _LEAD.days)), today + timedelta(days=2))
    rule = _rule(rng, rng.choice(FREQUENCIES), (change - first).days + 1,
                 min(MAX_SPAN, last - first).days)
    all_day = rng.random() < 0.2
    hour, minute = (0, 0) if all_day else (rng.randint(0, 23), rng.choice((0, 15, 30, 45)))
    if rng.random() < 0.25:  # UNTIL instead of COUNT: the last occurrence's start
        head, count = rule.rsplit(";COUNT=", 1)
        start = datetime.combine(first, time(hour, minute))
        rule = f"{head};UNTIL={_until(head, start, int(count), zone, all_day)}"
    title = f"Case {number}"
    if all_day:
        return Series(title, zone, True, first, 0, 0, None, rng.randint(1, 3), rule)
    minutes = rng.choice((None, 30, 60, 60, 90, 150, 600))
    return Series(title, zone, False, first, hour, minute, minutes, 0, rule)


_LEAD = timedelta(days=40)
"""How long before a change of offset a series may start."""
_PERIOD = {"DAILY": 1, "WEEKLY": 7, "MONTHLY": 31}


def _rule(rng: random.Random, freq: str, least: int, most: int) -> str:
    """A rule of `freq` whose occurrences run past `least` days from the start and
    end within `most` (ending with COUNT)."""
    parts = [f"FREQ={freq}"]
    interval = rng.choice((1, 1, 2, 3)) if freq != "MONTHLY" else 1
    step = _PERIOD[freq] * interval
    per_period = 1
    if freq == "WEEKLY":
        days = rng.sample(_DAYS, rng.choice((1, 1, 2, 3)))
        if len(days) > 1 or rng.random() < 0.5:
            parts.append("BYDAY=" + ",".join(days))
            per_period = len(days)
    elif freq == "MONTHLY":
        shape = rng.choice(("plain", "monthday", "nth"))
        if shape == "monthday":
            parts.append(f"BYMONTHDAY={rng.choice((1, 10, 15, 28, -1))}")
        elif shape == "nth":
            parts.append(f"BYDAY={rng.choice((1, 2, -1))}{rng.choice(_DAYS)}")
    if interval > 1:
        parts.append(f"INTERVAL={interval}")
    periods = rng.randint(least // step + 2, max(least // step + 2, most // step - 1))
    parts.append(f"COUNT={min(periods * per_period, 40)}")
    return ";".join(parts)


def _until(head: str, start: datetime, count: int, zone: str, all_day: bool) -> str:
    """UNTIL at the `count`th occurrence of rule `head` from wall time `start` (COUNT
    written another way): its date, or its instant in UTC."""
    last = list(rrulestr(f"{head};COUNT={count}", dtstart=start))[-1]
    if all_day:
        return f"{last:%Y%m%d}"
    return f"{last.replace(tzinfo=ZoneInfo(zone)).astimezone(UTC):%Y%m%dT%H%M%SZ}"


def _step(rng: random.Random, series: Series) -> Step:
    kind = rng.choices(STEP_KINDS, _STEP_WEIGHTS)[0]
    pick, which, phase = rng.random(), rng.random(), rng.choice((0, 1))
    if kind == "move":
        if series.all_day:
            return Step(kind, pick, which, phase, days=rng.randint(-3, 3) or 1,
                        length=rng.choice((None, 1, 2)))
        return Step(kind, pick, which, phase, days=rng.randint(-2, 2),
                    minutes=rng.choice((-300, -60, -30, 0, 15, 45, 90, 240, 600)) or 60,
                    length=rng.choice((None, None, 30, 120)),
                    zone=rng.choice((None, None, None, *ZONES)))
    if kind == "retitle" or (kind == "split" and rng.random() < 0.5):
        return Step(kind, pick, which, phase, title=f"{series.title} ({rng.randint(1, 999)})")
    return Step(kind, pick, which, phase)


# --- The cases are what they claim --------------------------------------------------


def test_the_cases_cover_every_zone_frequency_and_step() -> None:
    made = cases(200, 1, date(2027, 1, 10))
    assert {c.series.zone for c in made} == set(ZONES)
    assert {c.series.rule.split(";")[0] for c in made} == {f"FREQ={f}" for f in FREQUENCIES}
    kinds = Counter(s.kind for c in made for s in c.steps)
    assert set(kinds) == set(STEP_KINDS), kinds
    assert any(c.series.all_day for c in made) and not all(c.series.all_day for c in made)
    assert {s.phase for c in made for s in c.steps} == {0, 1}


def test_each_series_starts_before_a_change_of_offset_within_its_span() -> None:
    today = date(2027, 5, 20)
    for case in cases(100, 2, today):
        s = case.series
        assert today < s.first, case
        assert transitions(s.zone, s.first, s.first + MAX_SPAN), case


def test_the_same_seed_makes_the_same_cases() -> None:
    assert cases(20, 7, date(2027, 1, 1)) == cases(20, 7, date(2027, 1, 1))
    assert cases(20, 7, date(2027, 1, 1)) != cases(20, 8, date(2027, 1, 1))
