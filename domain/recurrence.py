"""Recurrence rules (RFC 5545 RRULE): validation and bounded expansion.

Wall clock. An event's rule is expanded on the zone's wall clock, as RFC 5545 says:
the first start is a naive local time, dateutil generates naive wall times from it, and
each is then placed in the zone with `fold=0`: the first instant of a repeated wall
time, and for a wall time skipped by a DST gap the offset before the gap, which lands
after it (RFC 5545 3.3.5). A weekly 09:00 meeting stays at 09:00 local across DST.

Parsing. The grammar is checked strictly here (one RRULE value, each part once, the
RFC's value ranges and its "MUST NOT" combinations of parts), because dateutil's parser
is lenient (duplicate parts, BYEASTER, non-ASCII digits) and some values crash it with
IndexError. The parsed parts then become the arguments of `dateutil.rrule.rrule`
(once per rule: the agenda expands the same stored rules on every request), which
does all of the RRULE semantics. WKST is always passed: dateutil's default is
`calendar.firstweekday()`, process-global state, rather than the RFC's Monday.

Bounded work. dateutil walks period by period (year, month, week, day or hour) and
looks at UNTIL, COUNT, or anything else, only when a period produces a candidate, so
a rule that never matches (FREQ=DAILY;BYMONTH=2;BYMONTHDAY=30) walks every period up
to year 9999: 0.25 s yearly, 0.4 s monthly, 1.2 s weekly, 4 s daily and 8 s hourly on
the bench machine (dateutil issues #523 and #1393). With no timeouts, threads or
subprocesses allowed, the walk is metered instead:

* dateutil adds INTERVAL to its counters once per period it steps over (WEEKLY
  multiplies it; an HOURLY BYHOUR search adds it per hour tried). We give dateutil
  INTERVAL as an `int` subclass, `_MeteredInterval`, whose addition and multiplication
  charge a `_Meter` and raise `_Exhausted` once the allowance is spent. That ends
  dateutil's generator at the next period step: the walk stops after a fixed, counted
  amount of work, whatever the rule, and the same rule always gets the same answer.
* Steps do not cost the same: a yearly period tests 366 days, each BYSETPOS position
  lists the period's days, numbered BYDAY rebuilds masks, a long DAILY step is walked
  month by month. `_step_weight` charges each step an upper bound of its cost, in work
  units of about a microsecond of dateutil's time on the bench machine (counted, never
  timed; bench/recurrence.py prints microseconds per unit, which stay below 1).
  Candidates are charged as they come, and the first period up front: dateutil
  generates and silently drops its candidates before the start.
* `check` gives the search for a first occurrence `CHECK_WORK` units (16 to 28 ms on
  the bench machine for the rules that spend them all). For rules with a few BYxxx
  values that is ~580 yearly periods (more than the 400 of a Gregorian cycle, so for
  YEARLY a rejection means "never"), ~4300 monthly (360 years), ~4600 weekly (88 years),
  ~12600 daily (34 years), and ~7600 days of an HOURLY rule whose days do not match
  (21 years). Calendar patterns (leap years, weekdays of dates) recur within 28 to 40
  years, and real sparse rules (29 February, Friday the 13th, the 5th Monday of
  February, the last weekday of the month) are found within a few; a rule with nothing
  in its allowance never occurs or is absurdly rare, and is rejected either way.
* `occurrences` gets `EXPANSION_WORK` units and reports `expansion_limit` when they run
  out. It starts dateutil at the start of the rule's last period before the window
  (`_anchor`), with the parts dateutil would have taken from the event's start written
  out, so the work follows the window and not the age of the series. With COUNT the
  occurrences before that period are counted from the first start once per (rule,
  start, period), on an allowance of their own (`_count_before`, cached), and dateutil
  starts at the period with the COUNT that is left; when they cannot be counted it
  walks from the first start as before.
* `last_occurrence` finds where a COUNT or UNTIL series ends (`END_WORK` units, once
  per write): the agenda stores it so that series over long ago are not read.

Rejected alternative: probing the rule shifted by a multiple of 400 years (the
Gregorian cycle) to just before year 9999, where dateutil stops by itself. The shift
keeps the calendar but moves INTERVAL's phase unless INTERVAL divides it, so the probe
tells whether a rule ever occurs but not when it first does; and one cycle is 20871
weekly, 146097 daily or 3.5 million hourly periods, far too many to walk, while a
shorter horizon cannot be imposed on dateutil from outside its loop.

Policies beyond RFC 5545, each for bounded cost: FREQ=SECONDLY and MINUTELY are refused
("excessively costly"); INTERVAL may not step over more than 1000 years; a rule may not
generate more than 1440 times a day (60 an hour for HOURLY) nor more candidates in one
period than a part of the allowance can skip; a numbered BYDAY counted within a month is
limited to 1..5 (beyond, dateutil indexes past its masks); BYSECOND=60 (a leap second)
is refused, as datetime cannot hold it; COUNT is at most 2**31 - 1.

UNTIL. A UTC UNTIL (...Z) is an instant: dateutil gets a wall-clock bound one day later
(a wall time is within a day of its UTC instant) and later candidates are dropped here
by instant, which also gets the hour of a DST fold right. A floating UNTIL (no Z) is a
wall-clock time, and a DATE UNTIL includes the whole local day.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, time, timedelta
from functools import lru_cache
from typing import Any, Literal, NamedTuple, cast
from zoneinfo import ZoneInfo

from dateutil.rrule import (  # type: ignore[import-untyped]
    DAILY,
    HOURLY,
    MONTHLY,
    WEEKLY,
    YEARLY,
    rrule,
    weekday,
)

from core.errors import ApiError

MAX_RULE_LENGTH = 8192

# Work allowances, in the units of `_step_weight` (see the module docstring).
CHECK_WORK = 30_000
EXPANSION_WORK = 50_000

_MAX_COUNT = 2**31 - 1
_MAX_INTERVAL_YEARS = 1000
_MAX_TIMES_PER_DAY = 1440
_MAX_TIMES_PER_HOUR = 60

_FREQS = {"YEARLY": YEARLY, "MONTHLY": MONTHLY, "WEEKLY": WEEKLY, "DAILY": DAILY, "HOURLY": HOURLY}
_FREQ_NAMES = {v: k for k, v in _FREQS.items()}
_TOO_FINE = ("MINUTELY", "SECONDLY")
_WEEKDAYS = ("MO", "TU", "WE", "TH", "FR", "SA", "SU")
_PERIODS_PER_YEAR = {YEARLY: 1, MONTHLY: 12, WEEKLY: 52, DAILY: 365, HOURLY: 8760}
_DAYS_PER_PERIOD = {YEARLY: 366, MONTHLY: 31, WEEKLY: 7, DAILY: 1, HOURLY: 1}

# Cost model, in work units (about microseconds of dateutil on the bench machine),
# fitted from bench/recurrence.py with margin, so that a step never costs more than
# it is charged. Base cost of one period step per FREQ:
_STEP_BASE = {YEARLY: 40.0, MONTHLY: 6.0, WEEKLY: 5.0, DAILY: 2.3, HOURLY: 3.3}
_PER_DAY_TEST = 0.01  # each BYxxx value tested against each day of a period
_PER_SETPOS = 1.4  # each BYSETPOS position: a list of the period's days, an IndexError
_PER_SETPOS_DAY = 0.012
_PER_NTH_WEEKDAY = 0.4  # numbered BYDAY: mask rebuilt per month range
_PER_WEEKNO = 0.2  # BYWEEKNO: mask rebuilt per year
_PER_HOURLY_TIME = 0.6  # HOURLY: the hour's times are rebuilt every step
_PER_MONTH_WALKED = 0.4  # WEEKLY/DAILY/HOURLY: dateutil walks a step month by month,
_PER_REBUILD = 1.0  # then rebuilds its masks for the new month
_PER_CANDIDATE = 1.0  # a candidate dateutil yields
_PER_DROPPED = 0.4  # a candidate dateutil generates before the start and drops
_PER_LOCALIZED = 3.0  # a candidate near the window, placed in the zone

_INT_PARTS: dict[str, tuple[int, int, bool, int]] = {
    # name: (lowest, highest, may be negative, most digits), per RFC 5545 3.3.10
    "BYSECOND": (0, 60, False, 2),
    "BYMINUTE": (0, 59, False, 2),
    "BYHOUR": (0, 23, False, 2),
    "BYMONTHDAY": (1, 31, True, 2),
    "BYYEARDAY": (1, 366, True, 3),
    "BYWEEKNO": (1, 53, True, 2),
    "BYMONTH": (1, 12, False, 2),
    "BYSETPOS": (1, 366, True, 3),
}
_PARTS = frozenset({"FREQ", "UNTIL", "COUNT", "INTERVAL", "BYDAY", "WKST", *_INT_PARTS})
_BY_PARTS = frozenset({"BYDAY", *_INT_PARTS} - {"BYSETPOS"})

_NUMBER = re.compile(r"[+-]?[0-9]{1,3}", re.ASCII)
_POSITIVE = re.compile(r"[0-9]{1,10}", re.ASCII)
_WEEKDAY_NUM = re.compile(r"([+-]?[0-9]{1,2})?(MO|TU|WE|TH|FR|SA|SU)", re.ASCII)
_UNTIL = re.compile(
    r"([0-9]{4})([0-9]{2})([0-9]{2})(?:T([0-9]{2})([0-9]{2})([0-9]{2})(Z)?)?", re.ASCII
)


class Occurrence(NamedTuple):
    """A tuple: an expansion makes thousands."""

    original_local: datetime  # naive wall-clock start as generated by the rule
    start: datetime  # aware UTC instant


@dataclass(frozen=True)
class Expansion:
    items: list[Occurrence]
    complete: bool
    incomplete_reason: Literal["max_items", "expansion_limit"] | None
    work: float = 0.0
    """The work units the walk spent (also when the expansion was remembered)."""


MAX_OCCURRENCES = 10_000
"""Occurrences one request may expand (per person for free/busy; docs/api-choices.md, "Bounded
work")."""
REQUEST_WORK = 150_000
"""Work units one request may spend walking rules (per person for free/busy): about
0.15 s of dateutil on the bench machine, whatever the rules and however many rows."""


@dataclass
class Budget:
    """What one request (or one person of a free/busy request) may still spend on
    expansion: occurrences (a one-off row is one) and work units of the metered
    walk. Shared by every row the request expands, so that the work is bounded per
    request and not only per row: once spent, `exhausted` is set and the request
    answers `expansion_limit`. Readers get one from `domain.expansion`, the only
    module that expands (docs/api-choices.md, "Bounded work")."""

    occurrences: int = MAX_OCCURRENCES
    work: float = REQUEST_WORK
    exhausted: bool = False
    # One request's fields may expand on both CPU threads at once.
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def spend(self, occurrences: int, work: float = 0.0) -> bool:
        """Charge `occurrences` and `work`; False (and `exhausted`) once past either."""
        with self._lock:
            self.occurrences -= occurrences
            self.work -= work
            if self.occurrences < 0 or self.work < 0:
                self.exhausted = True
            return not self.exhausted


def check(
    rule: str, start_local: datetime, tz: ZoneInfo, *, param: str = "recurrence_rule"
) -> None:
    """Raise `invalid_recurrence_rule` unless `rule` is one valid RRULE that has an
    occurrence at or after `start_local` (naive, wall clock of `tz`) within the work
    allowance."""
    parsed = _parse_or_raise(rule, param)
    _need_naive(start_local)
    until_wall, until_instant = _until_bounds(parsed)
    try:
        if _ends_before(until_wall, until_instant, start_local, tz):
            raise _RuleError("UNTIL is before the event's start.")
        meter = _Meter(CHECK_WORK)
        for wall in _walls(parsed, start_local, start_local, until_wall, meter):
            meter.charge(_PER_CANDIDATE)
            if until_instant is None or _instant(wall, tz) <= until_instant:
                return
        raise _RuleError("The recurrence rule has no occurrence at or after the event's start.")
    except _Exhausted:
        raise _invalid(
            "The recurrence rule has no occurrence at or after the event's start within the "
            "supported search range: it never occurs, or only in the far future.",
            rule,
            param,
        ) from None
    except _RuleError as exc:
        raise _invalid(str(exc), rule, param) from None
    except (ValueError, TypeError, OverflowError, IndexError, KeyError) as exc:
        # dateutil's own failures, e.g. near year 9999: a bad rule, never a 500.
        raise _invalid(f"The recurrence rule cannot be expanded: {exc}", rule, param) from None


def ends_before_start(rule: str, start_local: datetime, tz: ZoneInfo) -> bool:
    """Whether `rule`'s UNTIL is before `start_local` (naive, wall clock of `tz`):
    a set that holds not even its start (RFC 5545 readers drop such a series)."""
    until_wall, until_instant = _until_bounds(_parse_or_raise(rule, "recurrence_rule"))
    return _ends_before(until_wall, until_instant, start_local, tz)


def _ends_before(until_wall: datetime | None, until_instant: datetime | None,
                 start_local: datetime, tz: ZoneInfo) -> bool:
    if until_wall is None:
        return False
    if until_instant is None:
        return until_wall < start_local
    return until_instant < _instant(start_local, tz)


# Expansions remembered: the agenda expands the same stored rules over the same
# window on every request. Only small ones (a month of a daily rule), and a bounded
# number of them, emptied when full: at most about 20 MB.
_EXPANSIONS: dict[tuple[Any, ...], Expansion] = {}
_REMEMBERED_ITEMS = 64
_REMEMBERED_EXPANSIONS = 4096


def occurrences(
    rule: str,
    start_local: datetime,
    tz: ZoneInfo,
    window_start: datetime,
    window_end: datetime,
    *,
    limit: int,
    budget: Budget | None = None,
) -> Expansion:
    """The occurrences of a checked rule whose start instant lies in
    [window_start, window_end), in chronological order: at most `limit` of them, and
    no more work than `EXPANSION_WORK`. Each call gets a list of its own.

    With a `budget`, also no more occurrences or work than it has left, and both
    are charged to it (a remembered expansion costs what its walk cost, so that an
    answer does not depend on what was remembered); an expansion cut by the
    budget is `expansion_limit` and leaves the budget exhausted."""
    cap, allowance = limit, float(EXPANSION_WORK)
    if budget is not None:
        cap = max(min(limit, budget.occurrences), 0)
        allowance = max(min(allowance, budget.work), 0.0)
    key = (rule, start_local, tz, window_start, window_end, cap)
    found = _EXPANSIONS.get(key)
    if found is None or found.work > allowance:
        found = _expand(rule, start_local, tz, window_start, window_end, cap, allowance)
        if len(found.items) <= _REMEMBERED_ITEMS and allowance == EXPANSION_WORK:
            if len(_EXPANSIONS) >= _REMEMBERED_EXPANSIONS:
                _EXPANSIONS.clear()
            _EXPANSIONS[key] = found
    reason = found.incomplete_reason
    if budget is not None:
        budget.spend(len(found.items), found.work)
        cut_by_budget = (reason == "max_items" and cap < limit) or (
            reason == "expansion_limit" and allowance < EXPANSION_WORK)
        if cut_by_budget:
            budget.exhausted = True
            reason = "expansion_limit"
    return Expansion(list(found.items), reason is None, reason, found.work)


def _expand(rule: str, start_local: datetime, tz: ZoneInfo, window_start: datetime,
            window_end: datetime, limit: int, allowance: float = EXPANSION_WORK) -> Expansion:
    parsed = _parse_or_raise(rule, "recurrence_rule")
    _need_naive(start_local)
    if window_start.utcoffset() is None or window_end.utcoffset() is None:
        raise ValueError("the window bounds must be aware datetimes")
    if limit < 0:
        raise ValueError("limit must not be negative")
    items: list[Occurrence] = []
    if window_end <= window_start:
        return Expansion(items, True, None)
    # A wall time is within a day of its UTC instant, so only wall times in
    # [wall_lo, wall_hi) can start inside the window.
    wall_lo = _shift(_naive_utc(window_start), -1)
    wall_hi = _shift(_naive_utc(window_end), 1)
    if wall_hi <= start_local:
        return Expansion(items, True, None)
    until_wall, until_instant = _until_bounds(parsed)
    meter = _Meter(allowance)
    reason: Literal["max_items", "expansion_limit"] | None = None
    try:
        for wall in _walls(parsed, start_local, wall_lo, until_wall, meter):
            meter.charge(_PER_CANDIDATE)
            if wall >= wall_hi:
                break
            if wall < wall_lo:
                continue
            meter.charge(_PER_LOCALIZED)
            instant = _instant(wall, tz)
            if until_instant is not None and instant > until_instant:
                continue
            if window_start <= instant < window_end:
                items.append(Occurrence(wall, instant))
                if len(items) > limit:
                    reason = "max_items"
                    break
    except _Exhausted:
        reason = "expansion_limit"
    except _RuleError as exc:
        raise _invalid(str(exc), rule, "recurrence_rule") from None
    except (ValueError, OverflowError):
        # dateutil or the zone cannot go past year 9999: the series ends there.
        pass
    # Wall order is chronological except around a DST gap, where a skipped wall time
    # lands after the gap.
    items.sort(key=lambda o: (o.start, o.original_local))
    return Expansion(items[:limit], reason is None, reason, allowance - max(meter.left, 0.0))


def last_occurrence(rule: str, start_local: datetime, tz: ZoneInfo) -> Occurrence | None:
    """The last occurrence of a checked rule from `start_local` (naive, wall clock of
    `tz`), as `occurrences` would list it: the latest instant, which is not always the
    latest wall time around a DST gap. None when the series has no end in reach: no
    COUNT or UNTIL, an end past year 9999, or one not found within `END_WORK` units
    (then it is treated as never ending, which is safe for every bound made of it)."""
    parsed = _parse_or_raise(rule, "recurrence_rule")
    _need_naive(start_local)
    if parsed.count is None and parsed.until is None:
        return None
    try:
        return _last(parsed, start_local, tz)
    except _RuleError as exc:
        raise _invalid(str(exc), rule, "recurrence_rule") from None


# Work allowed to find where a series ends: spent once per write, not per request.
END_WORK = 200_000
_LAST_TRIES = 64
_LONGEST_STEP_BACK = timedelta(days=400 * 366)


@lru_cache(maxsize=4096)
def _last(r: _Rule, start: datetime, tz: ZoneInfo) -> Occurrence | None:
    # Cached: a profile event's copies in a thousand calendars share one rule and start.
    until_wall, until_instant = _until_bounds(r)
    meter = _Meter(END_WORK)
    if until_wall is None:  # COUNT: dateutil has to count from the start
        return _latest(r, start, start, None, None, tz, meter)
    # UNTIL: walk only the periods of its last day or so (a wall time just before
    # them cannot be a later instant: DST moves a wall time by hours), and further
    # back, twice as far each time, while they hold no occurrence.
    back = timedelta(days=_DAYS_PER_PERIOD[r.freq] * r.interval)
    target = max(start, _shift(until_wall, -1))
    for _ in range(_LAST_TRIES):
        found = _latest(r, start, target, until_wall, until_instant, tz, meter)
        if found is not None or target <= start or meter.left < 0:
            return found
        target = start if target - start <= back else target - back
        back = min(back * 2, _LONGEST_STEP_BACK)
    return None


def _latest(r: _Rule, start: datetime, target: datetime, until_wall: datetime | None,
            until_instant: datetime | None, tz: ZoneInfo, meter: _Meter) -> Occurrence | None:
    """The latest occurrence from the rule's period at or before `target` on (None:
    none there, or the allowance ran out, or the series runs to year 9999)."""
    latest: Occurrence | None = None
    try:
        for wall in _walls(r, start, target, until_wall, meter):
            meter.charge(_PER_CANDIDATE + _PER_LOCALIZED)
            instant = _instant(wall, tz)
            if until_instant is not None and instant > until_instant:
                continue
            if latest is None or (instant, wall) > (latest.start, latest.original_local):
                latest = Occurrence(wall, instant)
    except _Exhausted:
        return None
    except (ValueError, OverflowError):
        return None  # dateutil or the zone cannot go past year 9999: no end in reach
    return latest


# -- splitting a series ------------------------------------------------------------


def split(rule: str, start_local: datetime, slot_local: datetime, last: datetime | date
          ) -> tuple[str, str]:
    """"This and following" (docs/occurrences.md, "Split"): the rule of a series
    from `start_local` cut before its occurrence at `slot_local` (naive wall times
    of a checked rule, the slot after the first occurrence), and the rule of the
    rest from that occurrence on. With COUNT, the occurrences before the slot are
    counted (on `END_WORK`, as for finding a series' end) and the rest keeps what
    is left; otherwise the first part gets UNTIL `last` (the instant just before
    the slot, or for an all-day series the day before: RFC 5545 wants UNTIL of
    DTSTART's type) and the rest keeps the rule as it is. Raises `invalid_field`
    (`occurrence_id`) when the occurrences before the slot cannot be counted, or
    there are none."""
    parsed = _parse_or_raise(rule, "recurrence_rule")
    _need_naive(start_local)
    _need_naive(slot_local)
    if parsed.count is None:
        return _with_end(rule, f"UNTIL={_until_text(last)}"), rule
    before = _count_before(parsed, start_local, slot_local) if slot_local > start_local else 0
    if before is None or before <= 0 or before >= parsed.count:
        raise ApiError(
            "invalid_field",
            "The series cannot be split there: the occurrence is its first, or too far "
            "from its start to count the occurrences before it.",
            param="occurrence_id",
        )
    return (_with_end(rule, f"COUNT={before}"),
            _with_end(rule, f"COUNT={parsed.count - before}"))


def _until_text(last: datetime | date) -> str:
    if isinstance(last, datetime):
        u = last.astimezone(UTC)
        return f"{u.year:04d}{u.month:02d}{u.day:02d}T{u.hour:02d}{u.minute:02d}{u.second:02d}Z"
    return f"{last.year:04d}{last.month:02d}{last.day:02d}"


def _with_end(rule: str, end: str) -> str:
    """`rule`'s text with its COUNT or UNTIL replaced by `end`, other parts as written."""
    prefix = rule[:6] if rule[:6].upper() == "RRULE:" else ""
    parts = [part for part in rule[len(prefix):].split(";")
             if part.partition("=")[0].upper() not in ("COUNT", "UNTIL")]
    return prefix + ";".join([*parts, end])


# -- parsing -----------------------------------------------------------------------


class _RuleError(Exception):
    """A rule broken in the way the message says; becomes an ApiError at the edge."""


@dataclass(frozen=True)
class _Rule:
    freq: int
    interval: int = 1
    count: int | None = None
    until: datetime | None = None  # naive; UTC when until_utc, else wall clock
    until_utc: bool = False
    until_date: bool = False
    wkst: int = 0
    byday: tuple[tuple[int, int], ...] = ()  # (ordinal or 0, weekday 0=MO)
    bymonth: tuple[int, ...] = ()
    bymonthday: tuple[int, ...] = ()
    byyearday: tuple[int, ...] = ()
    byweekno: tuple[int, ...] = ()
    byhour: tuple[int, ...] = ()
    byminute: tuple[int, ...] = ()
    bysecond: tuple[int, ...] = ()
    bysetpos: tuple[int, ...] = ()
    names: frozenset[str] = field(default=frozenset(), compare=False)


def _parse_or_raise(rule: object, param: str) -> _Rule:
    try:
        if not isinstance(rule, str):
            raise _RuleError("The recurrence rule must be a string.")
        return _parse(rule)
    except _RuleError as exc:
        raise _invalid(str(exc), rule, param) from None


@lru_cache(maxsize=4096)
def _parse(rule: str) -> _Rule:
    # Cached: the agenda expands the same stored rules on every request. A rule
    # that fails raises, and failures are not cached.
    # The length is checked before anything else looks at the text.
    if len(rule) > MAX_RULE_LENGTH:
        raise _RuleError(f"The recurrence rule is longer than {MAX_RULE_LENGTH} characters.")
    body = rule[6:] if rule[:6].upper() == "RRULE:" else rule
    if any(c in body for c in "\r\n"):
        raise _RuleError("Send exactly one RRULE line, without DTSTART, RDATE or EXDATE.")
    if ":" in body:
        raise _RuleError(
            "Send only an RRULE value (optionally prefixed with 'RRULE:'); "
            "DTSTART, RDATE and EXDATE are not accepted."
        )
    if not body:
        raise _RuleError("The recurrence rule is empty.")
    values: dict[str, str] = {}
    for part in body.split(";"):
        name, eq, value = part.partition("=")
        name = name.upper()
        if not eq or not name or not value:
            raise _RuleError(f"Malformed rule part {part[:40]!r}; expected NAME=VALUE.")
        if name not in _PARTS:
            raise _RuleError(f"Unsupported rule part {name[:40]!r}.")
        if name in values:
            raise _RuleError(f"The rule part {name} appears more than once.")
        values[name] = value.upper()
    return _validate(_build_rule(values))


def _build_rule(values: dict[str, str]) -> _Rule:
    freq_name = values.get("FREQ")
    if freq_name is None:
        raise _RuleError("The recurrence rule has no FREQ.")
    if freq_name in _TOO_FINE:
        raise _RuleError(
            f"FREQ={freq_name} is not supported: repeating more often than hourly is "
            "excessively costly."
        )
    if freq_name not in _FREQS:
        raise _RuleError(f"Unknown FREQ {freq_name[:40]}.")
    kw: dict[str, Any] = {"freq": _FREQS[freq_name], "names": frozenset(values)}
    if "INTERVAL" in values:
        kw["interval"] = _positive(values["INTERVAL"], "INTERVAL", None)
    if "COUNT" in values:
        kw["count"] = _positive(values["COUNT"], "COUNT", _MAX_COUNT)
    if "UNTIL" in values:
        kw.update(_parse_until(values["UNTIL"]))
    if "WKST" in values:
        if values["WKST"] not in _WEEKDAYS:
            raise _RuleError("WKST must be one of MO, TU, WE, TH, FR, SA, SU.")
        kw["wkst"] = _WEEKDAYS.index(values["WKST"])
    if "BYDAY" in values:
        kw["byday"] = _parse_byday(values["BYDAY"])
    for name, bounds in _INT_PARTS.items():
        if name in values:
            kw[name.lower()] = _parse_numbers(values[name], name, *bounds)
    return _Rule(**kw)


def _positive(value: str, name: str, highest: int | None) -> int:
    if not _POSITIVE.fullmatch(value) or int(value) < 1:
        raise _RuleError(f"{name} must be a positive integer.")
    if highest is not None and int(value) > highest:
        raise _RuleError(f"{name} must be at most {highest}.")
    return int(value)


def _parse_until(value: str) -> dict[str, Any]:
    m = _UNTIL.fullmatch(value)
    if not m:
        raise _RuleError("UNTIL must be a date (YYYYMMDD) or a date-time (YYYYMMDDTHHMMSS[Z]).")
    year, month, day, hour, minute, second, utc = m.groups()
    try:
        until = datetime(
            int(year), int(month), int(day), int(hour or 0), int(minute or 0), int(second or 0)
        )
    except ValueError:
        raise _RuleError("UNTIL is not a valid date or time.") from None
    return {"until": until, "until_utc": utc is not None, "until_date": hour is None}


def _parse_byday(value: str) -> tuple[tuple[int, int], ...]:
    days: set[tuple[int, int]] = set()
    for item in value.split(","):
        m = _WEEKDAY_NUM.fullmatch(item)
        if not m:
            raise _RuleError(f"BYDAY value {item[:20]!r} is not a weekday like MO, 2TU or -1FR.")
        ordinal = int(m.group(1) or 0)
        if m.group(1) is not None and not 1 <= abs(ordinal) <= 53:
            raise _RuleError("BYDAY ordinals must be between 1 and 53 or -53 and -1.")
        days.add((ordinal, _WEEKDAYS.index(m.group(2))))
    return tuple(sorted(days))


def _parse_numbers(
    value: str, name: str, low: int, high: int, signed: bool, digits: int
) -> tuple[int, ...]:
    numbers: set[int] = set()
    for item in value.split(","):
        unsigned = item.lstrip("+-")
        if (
            not _NUMBER.fullmatch(item)
            or len(unsigned) > digits
            or (item[0] in "+-" and not signed)
        ):
            raise _RuleError(f"{name} value {item[:20]!r} is not a valid number.")
        n = int(item)
        if not (low <= n <= high or (signed and -high <= n <= -low)):
            span = f"between {low} and {high}" + (f" or -{high} and -{low}" if signed else "")
            raise _RuleError(f"{name} values must be {span}.")
        numbers.add(n)
    return tuple(sorted(numbers))


def _validate(r: _Rule) -> _Rule:
    """RFC 5545's restrictions between parts, and our cost policies."""
    name = _FREQ_NAMES[r.freq]
    if r.count is not None and r.until is not None:
        raise _RuleError("COUNT and UNTIL must not both be given.")
    if r.bymonthday and r.freq == WEEKLY:
        raise _RuleError("BYMONTHDAY must not be used with FREQ=WEEKLY.")
    if r.byyearday and r.freq in (MONTHLY, WEEKLY, DAILY):
        raise _RuleError(f"BYYEARDAY must not be used with FREQ={name}.")
    if r.byweekno and r.freq != YEARLY:
        raise _RuleError("BYWEEKNO may only be used with FREQ=YEARLY.")
    numbered = [n for n, _ in r.byday if n]
    if numbered and r.freq not in (MONTHLY, YEARLY):
        raise _RuleError(f"BYDAY with an ordinal (like 2TU) must not be used with FREQ={name}.")
    if numbered and r.byweekno:
        raise _RuleError("BYDAY with an ordinal must not be used together with BYWEEKNO.")
    if numbered and (r.freq == MONTHLY or r.bymonth) and max(map(abs, numbered)) > 5:
        # Counted within a month here; dateutil would index past its masks.
        raise _RuleError("BYDAY ordinals within a month must be between 1 and 5 or -5 and -1.")
    if r.bysetpos and not (r.names & _BY_PARTS):
        raise _RuleError("BYSETPOS must be used together with another BYxxx rule part.")
    if 60 in r.bysecond:
        raise _RuleError("BYSECOND=60 (a leap second) is not supported.")
    if r.interval > _MAX_INTERVAL_YEARS * _PERIODS_PER_YEAR[r.freq]:
        raise _RuleError(f"INTERVAL must not span more than {_MAX_INTERVAL_YEARS} years.")
    per_hour = len(r.byminute or (0,)) * len(r.bysecond or (0,))
    if r.freq == HOURLY and per_hour > _MAX_TIMES_PER_HOUR:
        raise _RuleError(
            f"The rule generates more than {_MAX_TIMES_PER_HOUR} times an hour, which is as "
            "costly as FREQ=MINUTELY."
        )
    if len(r.byhour or (0,)) * per_hour > _MAX_TIMES_PER_DAY:
        raise _RuleError(
            f"The rule generates more than {_MAX_TIMES_PER_DAY} times a day, which is as costly "
            "as FREQ=MINUTELY."
        )
    if _first_period_cost(r) > CHECK_WORK // 2:
        raise _RuleError(
            f"FREQ={name} with this many times of day generates too many candidates per period; "
            "use fewer BYHOUR, BYMINUTE or BYSECOND values."
        )
    return r


# -- expansion ---------------------------------------------------------------------


class _Exhausted(Exception):
    """The work allowance is spent."""


class _Meter:
    def __init__(self, units: float) -> None:
        self.left = units

    def charge(self, units: float) -> None:
        self.left -= units
        if self.left < 0:
            raise _Exhausted


class _MeteredInterval(int):
    """INTERVAL as dateutil sees it: an int that charges `meter` each time dateutil
    adds it (YEARLY to DAILY, and HOURLY per hour tried) or multiplies it (WEEKLY), i.e.
    once per period stepped over. Results are plain ints, so dateutil's counters stay
    plain ints and are not metered themselves."""

    meter: _Meter
    weight: float
    value: int

    def __new__(cls, value: int, meter: _Meter, weight: float) -> _MeteredInterval:
        obj = super().__new__(cls, value)
        obj.meter = meter
        obj.weight = weight
        obj.value = value
        return obj

    def _tick(self) -> int:
        meter = self.meter
        meter.left -= self.weight
        if meter.left < 0:
            raise _Exhausted
        return self.value

    def __add__(self, other: int) -> int:
        return self._tick() + other

    def __radd__(self, other: int) -> int:
        return other + self._tick()

    def __mul__(self, other: int) -> int:
        return self._tick() * other

    # Not metered: __rmul__ and __floordiv__ (int's, returning plain ints) only help
    # HOURLY jump to the day's last hour, which is followed by a metered addition.


def _walls(
    r: _Rule, start: datetime, target: datetime, until: datetime | None, meter: _Meter
) -> Iterator[datetime]:
    """dateutil's naive wall-clock candidates, metered: all of them from `start`, or
    from the start of the rule's last period at or before `target` (with COUNT, less
    the occurrences before that period, when they can be counted)."""
    anchor = _anchor(r, start, target)
    left = None
    if anchor is not None and r.count is not None:
        before = _count_before(r, start, anchor)
        anchor = None if before is None else anchor
        left = None if before is None else r.count - before
    if anchor is None:
        # dateutil generates and drops the first period's candidates before `start`.
        meter.charge(_first_period_cost(r))
        dtstart = start
    else:
        if left is not None:
            if left <= 0:
                return iter(())
            r = replace(r, count=left)
        r = _with_start_defaults(r, start.month, start.day, start.weekday(), start.hour,
                                 start.minute, start.second)
        dtstart = anchor
    try:
        metered = rrule(
            dtstart=dtstart, interval=_MeteredInterval(r.interval, meter, _step_weight(r)),
            until=until, cache=False, **_rrule_arguments(r),
        )
    except (ValueError, TypeError, OverflowError, IndexError, KeyError) as exc:
        raise _RuleError(f"The recurrence rule is invalid: {exc}") from None
    return cast(Iterator[datetime], iter(metered))


@lru_cache(maxsize=4096)
def _count_before(r: _Rule, start: datetime, anchor: datetime) -> int | None:
    """How many of a COUNT rule's occurrences come before `anchor` (a period start),
    counted from `start` once with an allowance of its own (`END_WORK`, as for
    finding the series' end, so that a window can be expanded wherever the end can
    be found): a series that began years ago is then walked from the window's period
    on every later request, with the COUNT that is left. None when the allowance runs
    out (the caller walks from `start` on its own allowance, as without the cache).
    Always counted from `start`, never from another cached count, so that the answer
    does not depend on what was cached. Cached: the agenda's windows start in the
    same period for days or weeks."""
    meter = _Meter(END_WORK)
    meter.charge(_first_period_cost(r))
    counted = 0
    try:
        metered = rrule(dtstart=start, interval=_MeteredInterval(r.interval, meter,
                                                                 _step_weight(r)),
                        cache=False, **_rrule_arguments(r))
        for wall in metered:
            meter.charge(_PER_CANDIDATE)
            if wall >= anchor:
                break
            counted += 1
    except _Exhausted:
        return None
    except (ValueError, OverflowError):
        pass  # year 9999: the series ends there, whatever COUNT says
    except (TypeError, IndexError, KeyError):
        return None
    return counted


@lru_cache(maxsize=4096)
def _rrule_arguments(r: _Rule) -> dict[str, Any]:
    """dateutil's `rrule` arguments for the parsed rule, without UNTIL, DTSTART and
    INTERVAL (passed per expansion): what `rrulestr` would make of the rule's text,
    built once per rule instead of reparsed per expansion. Empty parts stay None, so
    that dateutil takes them from DTSTART."""
    days = tuple(weekday(d, n) if n else weekday(d) for n, d in r.byday)
    return {
        "freq": r.freq, "wkst": r.wkst, "count": r.count, "byweekday": days or None,
        **{name.lower(): getattr(r, name.lower()) or None for name in _INT_PARTS},
    }


@lru_cache(maxsize=4096)
def _step_weight(r: _Rule) -> float:
    """An upper bound of dateutil's work per INTERVAL use (see the cost model above)."""
    days = _DAYS_PER_PERIOD[r.freq]
    plain = [d for n, d in r.byday if not n]
    nth = [d for n, d in r.byday if n]
    tested = len(r.bymonth) + len(plain) + len(r.bymonthday) + len(r.byyearday) + 1
    weight = _STEP_BASE[r.freq] + days * tested * _PER_DAY_TEST
    weight += len(r.bysetpos) * (_PER_SETPOS + days * _PER_SETPOS_DAY)
    if nth:
        ranges = len(r.bymonth) if r.freq == YEARLY and r.bymonth else 1
        weight += len(nth) * ranges * _PER_NTH_WEEKDAY
    weight += len(r.byweekno) * 7 * _PER_WEEKNO
    if r.freq == HOURLY:
        weight += len(r.byminute or (0,)) * len(r.bysecond or (0,)) * _PER_HOURLY_TIME
    if r.freq in (WEEKLY, DAILY, HOURLY):
        months = r.interval * {WEEKLY: 7.0, DAILY: 1.0, HOURLY: 1 / 24}[r.freq] / 30.4
        weight += months * _PER_MONTH_WALKED + min(months, 1.0) * _PER_REBUILD
    return weight


def _first_period_cost(r: _Rule) -> float:
    """What dateutil may spend on its first period before it yields anything: the
    period itself, and the candidates before the start that it drops."""
    times = len(r.byminute or (0,)) * len(r.bysecond or (0,))
    if r.freq != HOURLY:
        times *= len(r.byhour or (0,)) * _DAYS_PER_PERIOD[r.freq]
    return times * _PER_DROPPED + _step_weight(r)


def _anchor(r: _Rule, start: datetime, target: datetime) -> datetime | None:
    """The start of the rule's last period that begins at or before `target`, or None
    when that is the period holding `start`. Periods follow dateutil: calendar years,
    months, WKST weeks, days and hours, every INTERVAL-th one counted from `start`'s."""
    step = r.interval
    k: int
    if r.freq == YEARLY:
        k = (target.year - start.year) // step
        return datetime(start.year + k * step, 1, 1) if k > 0 else None
    if r.freq == MONTHLY:
        k = ((target.year - start.year) * 12 + target.month - start.month) // step
        if k <= 0:
            return None
        months = start.month - 1 + k * step
        return datetime(start.year + months // 12, months % 12 + 1, 1)
    if r.freq in (WEEKLY, DAILY):
        days = 7 * step if r.freq == WEEKLY else step
        first = start.date()
        if r.freq == WEEKLY:
            first -= timedelta(days=(start.weekday() - r.wkst) % 7)
        k = (target.date() - first).days // days
        return datetime.combine(first + timedelta(days=k * days), time()) if k > 0 else None
    first_hour = start.replace(minute=0, second=0, microsecond=0)
    k = (target - first_hour) // timedelta(hours=step)
    return first_hour + k * timedelta(hours=step) if k > 0 else None


@lru_cache(maxsize=4096)
def _with_start_defaults(r: _Rule, month: int, day: int, weekday: int, hour: int, minute: int,
                         second: int) -> _Rule:
    """The rule with the parts dateutil (per RFC 5545) takes from DTSTART written
    out, so that it means the same when started elsewhere. Cached, with the rule's
    dateutil arguments (`_rrule_arguments`): an agenda starts the same stored
    events' rules at the same times on every request."""
    out = replace(r, byminute=r.byminute or (minute,), bysecond=r.bysecond or (second,))
    if r.freq != HOURLY and not r.byhour:
        out = replace(out, byhour=(hour,))
    if not (r.byweekno or r.byyearday or r.bymonthday or r.byday):
        if r.freq == YEARLY:
            out = replace(out, bymonth=r.bymonth or (month,), bymonthday=(day,))
        elif r.freq == MONTHLY:
            out = replace(out, bymonthday=(day,))
        elif r.freq == WEEKLY:
            out = replace(out, byday=((0, weekday),))
    return out


# -- zones and errors --------------------------------------------------------------


def _until_bounds(r: _Rule) -> tuple[datetime | None, datetime | None]:
    """dateutil's wall-clock UNTIL, and for a UTC UNTIL the exact instant."""
    if r.until is None:
        return None, None
    if r.until_date:
        return r.until.replace(hour=23, minute=59, second=59), None
    if not r.until_utc:
        return r.until, None
    # A wall time is less than a day from its UTC instant, so every wall time whose
    # instant is at or before UNTIL is before UNTIL's UTC reading plus a day; the
    # exact test is then done on instants.
    return _shift(r.until, 1), r.until.replace(tzinfo=UTC)


def _instant(wall: datetime, tz: ZoneInfo) -> datetime:
    # fold=0: the first of a repeated wall time; for a wall time in a gap, the offset
    # before the transition, i.e. the instant after the gap (RFC 5545 3.3.5).
    return wall.replace(tzinfo=tz, fold=0).astimezone(UTC)


def _naive_utc(moment: datetime) -> datetime:
    try:
        return moment.astimezone(UTC).replace(tzinfo=None)
    except OverflowError:
        return datetime.min if moment.year < 5000 else datetime.max


def _shift(moment: datetime, days: int) -> datetime:
    """`moment` moved by `days`, held at the ends of the calendar."""
    try:
        return moment + timedelta(days=days)
    except OverflowError:
        return datetime.min if days < 0 else datetime.max


def _need_naive(start_local: datetime) -> None:
    if start_local.tzinfo is not None:
        raise ValueError("start_local must be a naive wall-clock time")


def _invalid(message: str, rule: object, param: str) -> ApiError:
    return ApiError("invalid_recurrence_rule", message, param=param, details={"value": rule})
