"""What the dashboard graph decides (GraphQL only; REST and MCP do not use it):
the time windows its lists take, whether an event meets one, an event's
occurrences, and RSVP counts by day, week or month.

Occurrences are found by the agenda's own expansion (`domain.expansion`), so
a dashboard and an agenda can never disagree about when an event happens, and on
the request's budget: each function here that expands runs beside the event loop
(`expansion.run`), and a count it cannot finish within the budget is the error
`expansion_limit`, never a smaller number.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import date, datetime, time, timedelta
from functools import lru_cache
from typing import Any, Literal, NamedTuple
from zoneinfo import ZoneInfo

from core.errors import ApiError
from domain import agenda, expansion, times
from domain.freebusy import span

MAX_RANGE_DAYS = 366
"""`from`/`to` of a list (events of a window, an RSVP summary)."""
MAX_OCCURRENCE_DAYS = 62
"""`from`/`to` of `Event.occurrences`, as free/busy's window."""
MAX_OCCURRENCES = expansion.MAX_ITEMS
MAX_BUCKETS = 366
BUCKETS_AT_MOST = {"day": MAX_BUCKETS, "week": 54, "month": 14}
"""Buckets a window of at most MAX_RANGE_DAYS can meet, by kind."""
MAX_SUMMARY_RECURRING = 500
"""Recurring events one RSVP summary may expand: past it, `expansion_limit`
(graph/limits.py counts a summary as its buckets times these)."""
STATUSES = ("scheduled", "cancelled")
Bucket = Literal["day", "week", "month"]
BUCKETS: tuple[Bucket, ...] = ("day", "week", "month")


class Range(NamedTuple):
    start: datetime
    end: datetime


@lru_cache(maxsize=1024)
def parse_range(start_text: str | None, end_text: str | None, *,
                max_days: int = MAX_RANGE_DAYS, required: bool = False) -> Range | None:
    """`from` and `to` (RFC 3339 with an offset), both or neither: [from, to), `to`
    after `from`, at most `max_days` apart."""
    if start_text is None and end_text is None and not required:
        return None
    if start_text is None or end_text is None:
        absent = "from" if start_text is None else "to"
        raise ApiError("field_dependency", "`from` and `to` go together: send both.",
                       param=absent)
    return Range(*span(start_text, end_text, max_days, ("from", "to")))


def check_status(status: str | None) -> str | None:
    if status is not None and status not in STATUSES:
        raise ApiError("invalid_field", "`status` must be scheduled or cancelled.",
                       param="status", details={"value": status})
    return status


def instant_window(r: Range, tz: ZoneInfo) -> agenda.Window:
    """The agenda's window for [start, end) on `tz`'s clock: timed occurrences meet
    it as instants, all-day ones by their dates, from the local date of `start` to
    the first local midnight at or after `end` (the same thing, for spans that run
    midnight to midnight)."""
    last = r.end.astimezone(tz)
    end_date = last.date() if last.time() == time() else last.date() + timedelta(days=1)
    return agenda.Window(r.start.astimezone(tz).date(), end_date, tz, r.start, r.end)


def events_meet(rows: Sequence[Mapping[str, Any]], r: Range, budget: expansion.Budget,
                changes: expansion.Changes) -> list[bool]:
    """Whether an occurrence of each event of `rows` (with the `changes` of their
    occurrences) meets [start, end): for a one-off event its own span, for a
    recurring one its first occurrences from `start` on, all-day ones on the
    event's own clock (where its `start_time` and `end_time` are midnights).
    Raises `expansion_limit` past the budget."""
    return [_meets(row, r, budget, changes) for row in rows]


def _meets(row: Mapping[str, Any], r: Range, budget: expansion.Budget,
           changes: expansion.Changes) -> bool:
    try:
        tz = times.zone(row["start_timezone"], param="start_timezone")
    except ApiError:
        return False
    return expansion.meets(row, instant_window(r, tz), budget, changes=changes)


def occurrence_spans(row: Mapping[str, Any], r: Range, tz: ZoneInfo,
                     budget: expansion.Budget, changes: expansion.Changes, *,
                     cancelled: bool = False, limit: int = MAX_OCCURRENCES + 1
                     ) -> list[expansion.Span]:
    """Where the occurrences of event `row` that meet [start, end) lie, as the agenda
    finds them (with their `changes`; cancelled ones only if `cancelled`), sorted:
    what the budget pays for, before anything is made of them, so a batch past the
    budget makes nothing. Raises `expansion_limit` when they cannot all be told
    within the budget."""
    found, reason = expansion.spans(row, instant_window(r, tz), budget, limit=limit,
                                    changes=changes, cancelled=cancelled)
    if reason == "expansion_limit":
        raise expansion.exhausted()
    return found


# ---------------------------------------------------------------------------
# RSVP summary


class Counts(NamedTuple):
    going: int
    maybe: int
    not_going: int
    waitlist: int
    total_attendees: int


_NONE = Counts(0, 0, 0, 0, 0)


class BucketCounts(NamedTuple):
    start: date
    events: int
    going: int
    maybe: int
    not_going: int
    waitlist: int
    total_attendees: int


def check_bucket(bucket: str) -> Bucket:
    for known in BUCKETS:
        if bucket == known:
            return known
    raise ApiError("invalid_field", "`bucket` must be day, week or month.", param="bucket",
                   details={"value": bucket})


def bucket_of(day: date, bucket: Bucket) -> date:
    """The first day of the day, ISO week (Monday) or month that holds `day`, as
    PostgreSQL's date_trunc gives it."""
    if bucket == "week":
        return day - timedelta(days=day.weekday())
    if bucket == "month":
        return day.replace(day=1)
    return day


def bucket_starts(r: Range, tz: ZoneInfo, bucket: Bucket) -> list[date]:
    """Every bucket [start, end) meets on `tz`'s calendar, at most MAX_BUCKETS."""
    first = bucket_of(r.start.astimezone(tz).date(), bucket)
    last = bucket_of((r.end - timedelta(microseconds=1)).astimezone(tz).date(), bucket)
    starts = []
    day = first
    while day <= last:
        starts.append(day)
        if len(starts) > MAX_BUCKETS:
            raise ApiError(
                "invalid_time_range",
                f"The summary would have more than {MAX_BUCKETS} buckets: choose a larger "
                "`bucket` or a shorter window.", param="to",
                details={"start": times.utc_text(r.start), "end": times.utc_text(r.end)},
            )
        day = _next_bucket(day, bucket)
    return starts


def _next_bucket(day: date, bucket: Bucket) -> date:
    if bucket == "day":
        return day + timedelta(days=1)
    if bucket == "week":
        return day + timedelta(days=7)
    return (day.replace(day=28) + timedelta(days=4)).replace(day=1)


def summarize(starts: Sequence[date], grouped: Iterable[tuple[date, int, Counts]],
              recurring: Iterable[tuple[Mapping[str, Any], Counts]], r: Range, tz: ZoneInfo,
              bucket: Bucket, budget: expansion.Budget, changes: expansion.Changes,
              status: str | None) -> list[BucketCounts]:
    """One entry per bucket of `starts`: `grouped` (one-off events, already counted
    per bucket by SQL: bucket, events, RSVP counts) plus each recurring event's
    occurrences of `status` (None: any) that start in [start, end), every one of
    them, one event each, its RSVPs counted once, in the bucket of its first
    occurrence there. An occurrence is where its `changes` put it, and cancelled
    when it or its event is. Raises `expansion_limit` when an event's occurrences
    cannot all be counted within the budget: a summary is exact or an error."""
    totals: dict[date, list[int]] = {day: [0] * 6 for day in starts}
    for day, events, counts in grouped:
        _add(totals, day, events, counts)
    w = instant_window(r, tz)
    for row, counts in recurring:
        first = True
        # No cut of its own: only the budget bounds it, and passing it is an error.
        found, reason = expansion.spans(row, w, budget, limit=expansion.MAX_OCCURRENCES + 1,
                                        changes=changes, cancelled=status != "scheduled")
        if reason is not None or budget.exhausted:
            raise expansion.exhausted()
        for s in found:
            if not r.start <= s.start < r.end:
                continue  # began before the window: it meets it, but starts outside
            if status is not None and _status(row, s) != status:
                continue
            _add(totals, bucket_of(s.start.astimezone(tz).date(), bucket), 1,
                 counts if first else _NONE)
            first = False
    return [BucketCounts(day, *totals[day]) for day in starts]


def _status(row: Mapping[str, Any], s: expansion.Span) -> str:
    """An occurrence's status: cancelled with its event, or on its own."""
    if row["status"] == "cancelled" or (s.changed is not None and s.changed.cancelled):
        return "cancelled"
    return "scheduled"


def _add(totals: dict[date, list[int]], day: date, events: int, counts: Counts) -> None:
    entry = totals.get(day)
    if entry is None:  # only an occurrence outside the window's buckets; never counted
        return
    entry[0] += events
    for i, n in enumerate(counts, start=1):
        entry[i] += n

