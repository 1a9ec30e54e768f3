"""The one way to expand occurrences (docs/api-choices.md, "Bounded work").

Every reader of occurrences (the agenda, free/busy and meeting times, the ICS feed,
the graph's `occurrences`, window filters, `total_count` with a window,
`rsvp_summary`) expands here, and two things hold by construction:

- No expansion without a budget: each function takes the request's `Budget`
  (10,000 occurrences and a bounded walk; free/busy gives one to each person), and
  the expanders under this module (`recurrence.occurrences`,
  `connected.occurrences.expand`) are called from nowhere else:
  tests/test_expansion.py walks the source and fails on any other caller.
- No expansion on the event loop: each function refuses to run on a thread that
  runs one (`_off_loop`); async code calls `run`, which hands the work to the CPU
  pool (`kalends.cpu`), so `/healthz` answers while any document expands.

What a reader does with a spent budget is its own answer: the agenda says
`complete: false`, a free/busy person `error: expansion_limit`, a GraphQL count the
error `expansion_limit` (`exhausted`), never a smaller number.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from typing import Any, Literal, NamedTuple, ParamSpec, TypeVar
from zoneinfo import ZoneInfo

from kalends import cpu, recurrence, times
from kalends.connected import occurrences as connected_occurrences
from kalends.errors import ApiError

log = logging.getLogger("kalends.agenda")

P = ParamSpec("P")
T = TypeVar("T")

Budget = recurrence.Budget
MAX_OCCURRENCES = recurrence.MAX_OCCURRENCES
"""Occurrences one request may expand (free/busy: one person)."""
REQUEST_WORK = recurrence.REQUEST_WORK
MAX_ITEMS = 500
"""Occurrences an agenda answers (and `Event.occurrences` lists) at most."""
Reason = Literal["max_items", "expansion_limit"]
Found = connected_occurrences.Found
Bounds = connected_occurrences.Bounds


@dataclass(frozen=True)
class Window:
    """An agenda window: `first_day` to `end_date` (exclusive) on `tz`'s calendar,
    `start` and `end` their local midnights as instants."""

    first_day: date
    end_date: date  # exclusive
    tz: ZoneInfo
    start: datetime  # local midnight of `date`, UTC
    end: datetime  # local midnight of `end_date`, UTC


class Span(NamedTuple):
    """Where one occurrence of a calendar event lies in a window, without its ID:
    `start` and `end` (None: a point) as instants; an all-day one also has its
    floating dates, its instants being their midnights in the window's zone."""

    start: datetime
    end: datetime | None
    start_date: date | None
    end_date: date | None


Slot = tuple[datetime, "datetime | None", "date | None", "date | None", Any]
"""An occurrence found in the window: (start, end, start_date, end_date, row), as
`Span` plus the row or connected occurrence it comes from. A plain tuple: a month
of a few hundred weekly series makes thousands, most of them not kept."""


def request_budget() -> Budget:
    """A request's whole budget (read when made, so that a test may lower it)."""
    return Budget(occurrences=MAX_OCCURRENCES, work=REQUEST_WORK)


def exhausted() -> ApiError:
    """The error a count or summary answers once the budget is spent: never a
    smaller number."""
    return ApiError(
        "expansion_limit",
        f"Answering exactly would expand more than {MAX_OCCURRENCES} occurrences (or walk "
        "the rules longer than one request may): ask for a shorter window or fewer events.",
    )


async def run(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """`fn(*args, **kwargs)`, which expands, on the CPU pool beside the event loop."""
    return await cpu.run(fn, *args, **kwargs)


def _off_loop() -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise RuntimeError("expansion on the event loop: await kalends.expansion.run(...)")


# ---------------------------------------------------------------------------
# Kalends' own rows: calendar events and profile events


def spans(row: Mapping[str, Any], w: Window, budget: Budget, limit: int = MAX_ITEMS + 1
          ) -> tuple[list[Span], Reason | None]:
    """The occurrences of event `row` that meet `w`, as the agenda finds them, in
    order, without occurrence IDs; a row that no longer expands is logged and left
    out ("expansion_limit"). Each occurrence (a one-off row's one) and the walk are
    charged to `budget`; past it, the row's answer is "expansion_limit". At most
    `limit` occurrences."""
    found, reason = slots(row, w, budget, limit)
    return [Span(s[0], s[1], s[2], s[3]) for s in found], reason


def slots(row: Mapping[str, Any], w: Window, budget: Budget, limit: int = MAX_ITEMS + 1
          ) -> tuple[list[Slot], Reason | None]:
    """`spans` of `row`, each as a slot of `row`."""
    _off_loop()
    try:
        if row["recurrence_rule"] is None and not budget.spend(1):
            return [], "expansion_limit"
        if row["is_all_day"]:
            return _all_day(row, times.of_row(row), w, budget, limit)
        return _timed(row, w, budget, limit)
    except ApiError as exc:
        # Rules are checked when written; one that no longer expands must not take
        # the whole agenda down. It is left out, so the answer says it is not complete.
        log.warning("calendar event %s not expanded: %s", row["id"], exc.message)
        return [], "expansion_limit"


def meets(row: Mapping[str, Any], w: Window, budget: Budget) -> bool:
    """Whether an occurrence of event `row` meets `w`: the first occurrences at or
    after the window's start, never a list. Raises `expansion_limit` when that
    cannot be told within the budget."""
    # Two: the first may end exactly where the window starts.
    found, reason = spans(row, w, budget, limit=2)
    if found:
        return True
    if budget.exhausted or reason == "expansion_limit":
        raise exhausted()
    return False


def _timed(row: Mapping[str, Any], w: Window, budget: Budget, limit: int
           ) -> tuple[list[Slot], Reason | None]:
    start_time, end_time = row["start_time"], row["end_time"]
    rule = row["recurrence_rule"]
    window_start, window_end = w.start, w.end
    if rule is None:  # most rows: no time model needed beyond the stored instants
        if end_time is None:
            if window_start <= start_time < window_end:  # a point
                return [(start_time, None, None, None, row)], None
        elif start_time < window_end and end_time > window_start:
            return [(start_time, end_time, None, None, row)], None
        return [], None
    length = end_time - start_time if end_time is not None else None
    t = times.of_row(row)
    # Started before the window but still running in it: look back one length.
    expansion = recurrence.occurrences(
        rule, t.local_start, times.zone(t.start_timezone, param="start_timezone"),
        window_start - (length or timedelta()), window_end, limit=limit, budget=budget,
    )
    found: list[Slot] = []
    if length is None:
        for o in expansion.items:
            start = o.start
            if window_start <= start < window_end:  # a point
                found.append((start, None, None, None, row))
    else:
        for o in expansion.items:
            start = o.start
            end = start + length
            if start < window_end and end > window_start:
                found.append((start, end, None, None, row))
    return found, expansion.incomplete_reason


def _all_day(row: Mapping[str, Any], t: times.EventTimes, w: Window, budget: Budget,
             limit: int) -> tuple[list[Slot], Reason | None]:
    assert t.start_date is not None and t.end_date is not None  # all-day rows have both
    length = t.end_date - t.start_date
    rule = row["recurrence_rule"]
    if rule is None:
        days, reason = [t.start_date], None
    else:
        # Dates are expanded as midnights in the event's zone; the dates whose span
        # meets the window start in [w.first_day - length + 1 day, w.end_date).
        tz = times.zone(t.start_timezone, param="start_timezone")
        expansion = recurrence.occurrences(
            rule, datetime.combine(t.start_date, time()), tz,
            times.local_midnight(w.first_day - length + timedelta(days=1), tz),
            times.local_midnight(w.end_date, tz), limit=limit, budget=budget,
        )
        days = list(dict.fromkeys(o.original_local.date() for o in expansion.items))
        reason = expansion.incomplete_reason
    found: list[Slot] = []
    for day in days:
        end_day = day + length
        if not (day < w.end_date and end_day > w.first_day):
            continue
        # Floating: the same dates whatever the zone, their midnights in the agenda's.
        found.append((times.local_midnight(day, w.tz), times.local_midnight(end_day, w.tz),
                      day, end_day, row))
    return found, reason


# ---------------------------------------------------------------------------
# Connected calendars' components, and a published event's first occurrence


def connected(rows: Sequence[Mapping[str, Any]], w: Bounds, limit: int, shown: set[str],
              budget: Budget) -> tuple[list[Found], Reason | None]:
    """Every occurrence of stored provider components `rows` that meets the window,
    as the provider defines them (`kalends.connected.occurrences`), charged to
    `budget`; copies of Kalends events in `shown` left out."""
    _off_loop()
    return connected_occurrences.expand(rows, w, limit, shown, budget)


def first_start(rule: str, start_local: datetime, tz: ZoneInfo, lower: datetime,
                upper: datetime, budget: Budget) -> recurrence.Occurrence | None:
    """The first occurrence of `rule` from `start_local` whose start lies in
    [lower, upper), if the walk finds one within its allowance."""
    _off_loop()
    found = recurrence.occurrences(rule, start_local, tz, lower, upper, limit=1, budget=budget)
    return found.items[0] if found.items else None
