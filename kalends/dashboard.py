"""What the dashboard graph decides (GraphQL only; REST and MCP do not use it):
the time windows its lists take, whether an event meets one, an event's
occurrences, and RSVP counts by day, week or month.

Occurrences are found by the agenda's own expansion (`kalends.agenda.spans`), so
a dashboard and an agenda can never disagree about when an event happens.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import date, datetime, time, timedelta
from typing import Any, Literal, NamedTuple
from zoneinfo import ZoneInfo

from kalends import agenda, times
from kalends.errors import ApiError
from kalends.freebusy import span

MAX_RANGE_DAYS = 366
"""`from`/`to` of a list (events of a window, an RSVP summary)."""
MAX_OCCURRENCE_DAYS = 62
"""`from`/`to` of `Event.occurrences`, as free/busy's window."""
MAX_OCCURRENCES = agenda.MAX_ITEMS
MAX_BUCKETS = 366
STATUSES = ("scheduled", "cancelled")
Bucket = Literal["day", "week", "month"]
BUCKETS: tuple[Bucket, ...] = ("day", "week", "month")


class Range(NamedTuple):
    start: datetime
    end: datetime


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


def event_meets(row: Mapping[str, Any], r: Range) -> bool:
    """Whether an occurrence of event `row` meets [start, end): for a one-off event
    its own span, for a recurring one any occurrence, all-day ones on the event's
    own clock (where its `start_time` and `end_time` are midnights)."""
    try:
        tz = times.zone(row["start_timezone"], param="start_timezone")
    except ApiError:
        return False
    found, _ = agenda.spans(row, instant_window(r, tz))
    return bool(found)


class Occurrence(NamedTuple):
    occurrence_id: str
    start: datetime
    end: datetime | None
    local_start: datetime
    local_end: datetime | None
    start_date: date | None
    end_date: date | None
    is_all_day: bool


def occurrences(row: Mapping[str, Any], r: Range, tz: ZoneInfo) -> list[Occurrence]:
    """The occurrences of event `row` that meet [start, end), as the agenda shows
    them in zone `tz`: sorted, at most MAX_OCCURRENCES."""
    found, _ = agenda.spans(row, instant_window(r, tz))
    return [
        Occurrence(
            agenda.occurrence_id(row["id"], s.start, s.start_date), s.start, s.end,
            agenda.local(s.start, tz), agenda.local(s.end, tz) if s.end is not None else None,
            s.start_date, s.end_date, s.start_date is not None,
        )
        for s in found[:MAX_OCCURRENCES]
    ]


# ---------------------------------------------------------------------------
# RSVP summary


class Counts(NamedTuple):
    going: int
    maybe: int
    not_going: int
    waitlist: int


class BucketCounts(NamedTuple):
    start: date
    events: int
    going: int
    maybe: int
    not_going: int
    waitlist: int


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
              bucket: Bucket) -> list[BucketCounts]:
    """One entry per bucket of `starts`: `grouped` (one-off events, already counted
    per bucket by SQL: bucket, events, RSVP counts) plus each recurring event's
    occurrences that start in [start, end), one event each, its RSVPs counted once,
    in the bucket of its first occurrence there."""
    totals: dict[date, list[int]] = {day: [0, 0, 0, 0, 0] for day in starts}
    for day, events, counts in grouped:
        _add(totals, day, events, counts)
    w = instant_window(r, tz)
    for row, counts in recurring:
        first = True
        found, _ = agenda.spans(row, w)
        for s in found:
            if not r.start <= s.start < r.end:
                continue  # began before the window: it meets it, but starts outside
            _add(totals, bucket_of(s.start.astimezone(tz).date(), bucket), 1,
                 counts if first else Counts(0, 0, 0, 0))
            first = False
    return [BucketCounts(day, *totals[day]) for day in starts]


def _add(totals: dict[date, list[int]], day: date, events: int, counts: Counts) -> None:
    entry = totals.get(day)
    if entry is None:  # only an occurrence outside the window's buckets; never counted
        return
    entry[0] += events
    for i, n in enumerate(counts, start=1):
        entry[i] += n

