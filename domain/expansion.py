"""The one way to expand occurrences (docs/api-choices.md, "Bounded work").

Every reader of occurrences (the agenda, free/busy and meeting times, the ICS feed,
the graph's `occurrences`, window filters, `total_count` with a window,
`rsvp_summary`, an event's occurrences) expands here, and three things hold by
construction:

- No expansion without a budget: each function takes the request's `Budget`
  (10,000 occurrences and a bounded walk; free/busy gives one to each person), and
  the expanders under this module (`recurrence.occurrences`,
  `connected.occurrences.expand`) are called from nowhere else:
  tests/domain/test_expansion.py walks the source and fails on any other caller.
- No expansion on the event loop: each function refuses to run on a thread that
  runs one (`_off_loop`); async code calls `run`, which hands the work to the CPU
  pool (`domain.cpu`), so `/healthz` answers while any document expands.
- Occurrences changed on their own (docs/occurrences.md) are applied here: each
  function takes the `Changes` of its rows (`changes`, one statement for any
  number of rows, read before the expansion), so a moved occurrence shows at its
  own time with its own title, under its occurrence_id, and a cancelled one not
  at all, to every reader alike.

What a reader does with a spent budget is its own answer: the agenda says
`complete: false`, a free/busy person `error: expansion_limit`, a GraphQL count the
error `expansion_limit` (`exhausted`), never a smaller number.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any, Literal, NamedTuple, ParamSpec, TypeVar
from zoneinfo import ZoneInfo

from core.errors import ApiError
from db import occurrences as occurrence_store
from db.database import Database, Tx
from domain import cpu, recurrence, times
from domain.connected import occurrences as connected_occurrences

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
    floating dates, its instants being their midnights in the window's zone.
    `changed`: the occurrence's own changes, when it has any (its ID is then
    `changed.slot`, not where it now starts)."""

    start: datetime
    end: datetime | None
    start_date: date | None
    end_date: date | None
    changed: Changed | None = None


Slot = tuple[datetime, "datetime | None", "date | None", "date | None", Any]
"""An occurrence found in the window: (start, end, start_date, end_date, row), as
`Span` plus the row or connected occurrence it comes from (a `Changed` for one
with changes of its own). A plain tuple: a month of a few hundred weekly series
makes thousands, most of them not kept."""


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
    raise RuntimeError("expansion on the event loop: await domain.expansion.run(...)")


# ---------------------------------------------------------------------------
# Kalends' own rows: calendar events and profile events


def spans(row: Mapping[str, Any], w: Window, budget: Budget, limit: int = MAX_ITEMS + 1, *,
          changes: Changes, cancelled: bool = False) -> tuple[list[Span], Reason | None]:
    """The occurrences of event `row` that meet `w`, as the agenda finds them, in
    order, without occurrence IDs; a row that no longer expands is logged and left
    out ("expansion_limit"). Each occurrence (a one-off row's one) and the walk are
    charged to `budget`; past it, the row's answer is "expansion_limit". At most
    `limit` occurrences of the rule, and those that `changes` moved into `w`;
    cancelled ones only with `cancelled` (their `changed` says so)."""
    found, reason = slots(row, w, budget, limit, changes=changes, cancelled=cancelled)
    return [Span(s[0], s[1], s[2], s[3], s[4] if type(s[4]) is Changed else None)
            for s in found], reason


def slots(row: Mapping[str, Any], w: Window, budget: Budget, limit: int = MAX_ITEMS + 1, *,
          changes: Changes, cancelled: bool = False) -> tuple[list[Slot], Reason | None]:
    """`spans` of `row`, each as a slot of `row` (of a `Changed` when it has changes
    of its own)."""
    _off_loop()
    own = changes.get(source_of(row)) if changes and row["recurrence_rule"] else None
    if own:
        limit += len(own)  # each may take one of the rule's occurrences away
    try:
        if row["recurrence_rule"] is None and not budget.spend(1):
            return [], "expansion_limit"
        if row["is_all_day"]:
            found, reason = _all_day(row, times.of_row(row), w, budget, limit)
        else:
            found, reason = _timed(row, w, budget, limit)
    except ApiError as exc:
        # Rules are checked when written; one that no longer expands must not take
        # the whole agenda down. It is left out, so the answer says it is not complete.
        log.warning("calendar event %s not expanded: %s", row["id"], exc.message)
        return [], "expansion_limit"
    if own:
        found = _applied(row, found, own, w, budget, cancelled)
    return found, reason


def meets(row: Mapping[str, Any], w: Window, budget: Budget, *, changes: Changes) -> bool:
    """Whether an occurrence of event `row` meets `w`: the first occurrences at or
    after the window's start, never a list. Raises `expansion_limit` when that
    cannot be told within the budget."""
    # Two: the first may end exactly where the window starts.
    found, reason = spans(row, w, budget, limit=2, changes=changes)
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
# Occurrences changed on their own (docs/occurrences.md, "How changes are applied")


Changes = Mapping[str, Sequence[Mapping[str, Any]]]
"""`event_occurrences` rows by event ID, each event's by slot: what `changes` reads
for the rows a reader is about to expand."""
NO_CHANGES: Changes = {}
_SLOT = re.compile(r"([0-9]{4})([0-9]{2})([0-9]{2})(?:T([0-9]{2})([0-9]{2})([0-9]{2})Z)?",
                   re.ASCII)


class Changed(Mapping[str, Any]):
    """One occurrence with changes of its own, read as its event's row is: its own
    title, description and location where it has them, the row's values otherwise.
    `slot` is its ID after `<row id>:`, `change` its `event_occurrences` row."""

    __slots__ = ("_own", "cancelled", "change", "row", "slot")

    def __init__(self, row: Mapping[str, Any], change: Mapping[str, Any]) -> None:
        self.row = row
        self.change = change
        self.slot: str = change["slot"]
        self.cancelled = change["status"] == "cancelled"
        self._own = occurrence_store.changed_values(change)

    def __getitem__(self, key: str) -> Any:
        own = self._own
        return own[key] if key in own else self.row[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.row.keys())

    def __len__(self) -> int:
        return len(self.row)


def source_of(row: Mapping[str, Any]) -> str:
    """The event whose changes apply to `row`: a subscription copy's source, else
    the row itself (a personal calendar event has none)."""
    return row.get("source_event_id") or row["id"]  # type: ignore[no-any-return]


async def changes(db: Database | Tx, rows: Sequence[Mapping[str, Any]], start: datetime,
                  end: datetime, first_day: date, end_day: date) -> Changes:
    """The changes that may matter to `rows` (events, or calendar events that copy
    them) in the window [start, end) (dates [first_day, end_day)), in one statement
    whatever their number; none, and no statement, without a recurring row."""
    return await read_changes(db, lower_bounds(rows, start), start, end, first_day, end_day)


def lower_bounds(rows: Sequence[Mapping[str, Any]], start: datetime) -> dict[str, datetime]:
    """The events whose changes may matter to `rows` from `start` on (a recurring row's
    source), each with the earliest slot that may: a day and the row's length before
    `start`, where an occurrence that still runs at `start` may begin."""
    lows: dict[str, datetime] = {}
    for row in rows:
        if not row["recurrence_rule"]:
            continue
        key = source_of(row)
        if not key.startswith("evt_"):
            continue  # a personal calendar event: no changes of its own
        low = start - _length(row) - timedelta(days=1)
        lows[key] = min(low, lows.get(key, low))
    return lows


async def read_changes(db: Database | Tx, lows: Mapping[str, datetime], start: datetime,
                       end: datetime, first_day: date, end_day: date) -> Changes:
    """`changes` of the events `lower_bounds` gave."""
    if not lows:
        return NO_CHANGES
    return await occurrence_store.in_window(db, lows, start, end,
                                            first_day - timedelta(days=1),
                                            end_day + timedelta(days=1))


def _length(row: Mapping[str, Any]) -> timedelta:
    if row["is_all_day"] and row["start_date"] is not None and row["end_date"] is not None:
        return timedelta(days=(row["end_date"] - row["start_date"]).days)
    if row["end_time"] is None:
        return timedelta()
    return row["end_time"] - row["start_time"]  # type: ignore[no-any-return]


def slot_of(start: datetime, start_date: date | None) -> str:
    """An occurrence's slot (its ID after `<event_id>:`): its original start as
    `YYYYMMDDTHHMMSSZ`, or its date as `YYYYMMDD` when it is all-day."""
    if start_date is None:
        return times.compact_utc(start)
    return times.compact_date(start_date)


def _moved(change: Mapping[str, Any]) -> bool:
    return change["start_time"] is not None or change["start_date"] is not None


def _applied(row: Mapping[str, Any], found: list[Slot], own: Sequence[Mapping[str, Any]],
             w: Window, budget: Budget, cancelled: bool) -> list[Slot]:
    """`found` (the rule's occurrences of `row` that meet `w`) with `own`, the row's
    changes: a moved occurrence where it now lies, if that meets `w`, whether or
    not its slot does; a cancelled one only if `cancelled`; each with its own
    values. In order of start."""
    # By the slot's start (an all-day one's: its date), which `found` holds as it is:
    # no slot text made for each occurrence.
    if row["is_all_day"]:
        by_slot = {c["original_start"].date(): c for c in own}
    else:
        by_slot = {c["original_start"]: c for c in own}
    out: list[Slot] = []
    for s in found:
        change = by_slot.get(s[2] if s[2] is not None else s[0])
        if change is None:
            out.append(s)
        elif not _moved(change):  # a moved one is placed below, by its own times
            c = Changed(row, change)
            if cancelled or not c.cancelled:
                out.append((s[0], s[1], s[2], s[3], c))
    moved: list[Slot] = []
    for change in own:
        if not _moved(change) or (change["status"] == "cancelled" and not cancelled):
            continue
        start, end, start_date, end_date = _own_place(change, w.tz)
        meets_w = (start_date < w.end_date and end_date > w.first_day
                   if start_date is not None and end_date is not None
                   else start < w.end and (end > w.start if end is not None
                                           else start >= w.start))
        if meets_w:
            moved.append((start, end, start_date, end_date, Changed(row, change)))
    # Each placed one costs an occurrence, as each the rule makes does.
    if moved and budget.spend(len(moved)):
        out += moved
    out.sort(key=_start)
    return out


def _start(s: Slot) -> datetime:
    return s[0]


def _own_place(change: Mapping[str, Any], tz: ZoneInfo
               ) -> tuple[datetime, datetime | None, date | None, date | None]:
    """Where a moved occurrence lies: its own instants, or its own dates with their
    midnights in `tz` (floating, as the agenda places all-day items)."""
    start_date, end_date = change["start_date"], change["end_date"]
    if start_date is not None and end_date is not None:
        return (times.local_midnight(start_date, tz), times.local_midnight(end_date, tz),
                start_date, end_date)
    return change["start_time"], change["end_time"], None, None


class Located(NamedTuple):
    """An occurrence the rule of an event makes: where the rule puts it (`span`, on
    the event's own zone), and its wall-clock start as the rule generated it."""

    span: Span
    wall: datetime


def locate(row: Mapping[str, Any], slot: str, budget: Budget) -> Located | None:
    """Occurrence `slot` of event `row` as its rule makes it; None when `slot` is
    no occurrence of it (a one-off event's one occurrence is its own start), or
    cannot be told within the budget."""
    _off_loop()
    parsed = parse_slot(slot)
    if parsed is None or isinstance(parsed, datetime) == bool(row["is_all_day"]):
        return None
    try:
        t = times.of_row(row)
        tz = times.zone(t.start_timezone, param="start_timezone")
        if isinstance(parsed, datetime):
            return _locate_instant(row, t, tz, parsed, budget)
        return _locate_day(row, t, tz, parsed, budget)
    except (ApiError, ValueError, OverflowError):
        return None  # a rule that no longer expands: no such slot


def parse_slot(slot: str) -> datetime | date | None:
    """A slot's original start: an instant (UTC), or a date for an all-day one; None
    for what is no slot's shape."""
    m = _SLOT.fullmatch(slot)
    if m is None:
        return None
    try:
        if m.group(4) is None:
            return date(*map(int, m.group(1, 2, 3)))
        y, mo, d, h, mi, sec = map(int, m.groups())
        return datetime(y, mo, d, h, mi, sec, tzinfo=UTC)
    except ValueError:
        return None


def _locate_instant(row: Mapping[str, Any], t: times.EventTimes, tz: ZoneInfo,
                    instant: datetime, budget: Budget) -> Located | None:
    length = t.end_time - t.start_time if t.end_time is not None else None
    span = Span(instant, instant + length if length is not None else None, None, None)
    if row["recurrence_rule"] is None:
        return Located(span, t.local_start) if instant == t.start_time else None
    found = recurrence.occurrences(row["recurrence_rule"], t.local_start, tz, instant,
                                   instant + timedelta(seconds=1), limit=1, budget=budget)
    if not found.items or found.items[0].start != instant:
        return None
    return Located(span, found.items[0].original_local)


def _locate_day(row: Mapping[str, Any], t: times.EventTimes, tz: ZoneInfo, day: date,
                budget: Budget) -> Located | None:
    assert t.start_date is not None and t.end_date is not None  # all-day rows have both
    end_day = day + (t.end_date - t.start_date)
    span = Span(times.local_midnight(day, tz), times.local_midnight(end_day, tz), day, end_day)
    wall = datetime.combine(day, time())
    if row["recurrence_rule"] is None:
        return Located(span, wall) if day == t.start_date else None
    found = recurrence.occurrences(
        row["recurrence_rule"], datetime.combine(t.start_date, time()), tz,
        times.local_midnight(day, tz), times.local_midnight(day + timedelta(days=1), tz),
        limit=1, budget=budget)
    if not any(o.original_local.date() == day for o in found.items):
        return None
    return Located(span, wall)


def occurrence(row: Mapping[str, Any], slot: str, budget: Budget, *, changes: Changes
               ) -> Span | None:
    """Occurrence `slot` of event `row` as it stands: where its rule puts it, or where
    it was moved, with its own changes (`changed`; cancelled ones too); None when
    `slot` is no occurrence of the event."""
    found = locate(row, slot, budget)
    if found is None:
        return None
    change = next((c for c in changes.get(source_of(row), ()) if c["slot"] == slot), None)
    if change is None:
        return found.span
    tz = times.zone(row["start_timezone"], param="start_timezone")
    return Span(*_own_place(change, tz), Changed(row, change)) if _moved(change) \
        else found.span._replace(changed=Changed(row, change))


def still_made(row: Mapping[str, Any], slots: Sequence[str]) -> list[str]:
    """Those of `slots` that the rule of event `row` (its times and rule as about to
    be written) still makes; on a budget of their own (a slot that cannot be told
    within it counts as not made)."""
    budget = request_budget()
    return [s for s in slots if locate(row, s, budget) is not None]


# ---------------------------------------------------------------------------
# Connected calendars' components, and a published event's first occurrence


def connected(rows: Sequence[Mapping[str, Any]], w: Bounds, limit: int, shown: set[str],
              budget: Budget) -> tuple[list[Found], Reason | None]:
    """Every occurrence of stored provider components `rows` that meets the window,
    as the provider defines them (`domain.connected.occurrences`), charged to
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
