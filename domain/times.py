"""Time input: zone names, the accepted time shapes, DST gaps and folds, and the
rules that turn an event's time fields into UTC instants on create, update and
reschedule.

Every transport hands the fields the client actually sent (absent keys = not
sent) to `resolve_create`, `resolve_update` or `resolve_reschedule` and stores
the `EventTimes` they return. All tz arithmetic is zoneinfo's; this module only
decides which of zoneinfo's answers a wall-clock time has (none in a gap, two in
a fold) and reports them in the error's details (docs/http.md, "Errors").
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from functools import cache
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from core.errors import ApiError
from domain import recurrence

# Shown to clients in `details.expected_shapes`. `T` may also be a space or a
# lower-case `t` (and `Z` a `z`, as RFC 3339 allows); the fraction takes any
# number of digits (kept to the microsecond) and any of the shapes may carry
# an offset.
EXPECTED_SHAPES: tuple[str, ...] = (
    "YYYY-MM-DDTHH:MM",
    "YYYY-MM-DDTHH:MM:SS",
    "YYYY-MM-DDTHH:MM:SS.ffffff",
    "YYYY-MM-DD HH:MM:SS",
    "YYYY-MM-DDTHH:MMZ",
    "YYYY-MM-DDTHH:MM:SSZ",
    "YYYY-MM-DDTHH:MM+HH:MM",
    "YYYY-MM-DDTHH:MM:SS+HH:MM",
    "YYYY-MM-DDTHH:MM:SS-HHMM",
    "YYYY-MM-DD HH:MM:SS.ffffff+HH:MM",
)
_DATE_SHAPES = ("YYYY-MM-DD",)

# re.ASCII: without it \d also matches other scripts' digits, which int() would
# then happily read.
_DATE_RE = re.compile(r"(\d{4})-(\d{2})-(\d{2})", re.ASCII)
_TIME_RE = re.compile(
    r"""
    (?P<year>\d{4})-(?P<month>\d{2})-(?P<day>\d{2})
    [Tt\x20]
    (?P<hour>\d{2}):(?P<minute>\d{2})
    (?::(?P<second>\d{2})(?:\.(?P<fraction>\d+))?)?
    (?:(?P<zulu>[Zz])|(?P<sign>[+-])(?P<off_h>\d{2}):?(?P<off_m>\d{2}))?
    """,
    re.ASCII | re.VERBOSE,
)

# The shapes above for JSON Schema (ECMA-262 regexes, where \d is ASCII): advertised
# in the documents, while the checks and their error codes stay here.
DATE_PATTERN = r"^\d{4}-\d{2}-\d{2}$"
TIME_PATTERN = (
    r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:[Zz]|[+-]\d{2}:?\d{2})?$"
)

# A date and time, then a space where an offset's sign belongs: what a `+` in a URL
# query becomes when the client did not encode it (form encoding reads `+` as a space).
_LOST_PLUS_RE = re.compile(
    r"(\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?) (\d{2}:?\d{2})", re.ASCII)

# Files a tz directory may hold that name no zone of their own: the host's zone
# under another name, a template, and tzdata's "zone not configured" placeholder.
_NOT_ZONES = frozenset({"localtime", "posixrules", "Factory"})

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

# Fields that make resolve_update look at times at all.
_TIME_FIELDS = frozenset(
    {"is_all_day", "start_time", "end_time", "start_timezone", "end_timezone", "start_date",
     "end_date"}
)


# ---------------------------------------------------------------------------
# Zones and single values


@cache
def _zone_names() -> frozenset[str]:
    # available_timezones() walks the tz directories on every call.
    return frozenset(available_timezones()) - _NOT_ZONES


def zone(name: str, *, param: str) -> ZoneInfo:
    """The IANA zone `name`; anything else (paths, wrong case, "localtime") is refused."""
    # The membership test comes first: ZoneInfo() itself would accept file paths
    # and, on a case-insensitive file system, any spelling.
    if name in _zone_names():
        try:
            return ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError, OSError):
            pass
    raise ApiError(
        "invalid_timezone",
        f"`{param}` must be an IANA time zone name, such as Europe/Berlin or UTC.",
        param=param, details={"value": name},
    )


def space_for_plus_hint(text: str) -> str | None:
    """A sentence for the error on a query-string time whose `+` arrived as a space
    (`2026-03-09T09:00:00 01:00` from `...T09:00:00+01:00` sent un-encoded), else None."""
    match = _LOST_PLUS_RE.fullmatch(text)
    if match is None:
        return None
    example = f"{match[1][:10]}T{match[1][11:]}%2B{match[2]}"  # no space left to encode
    return ("A space stands where the offset's sign should be: in a URL query, write + as "
            f"%2B ({example}).")


def parse_date(value: str, *, param: str) -> date:
    """Exactly `YYYY-MM-DD`, and a day that exists."""
    match = _DATE_RE.fullmatch(value)
    if match is not None:
        return _day(match[1], match[2], match[3], value, param)
    raise ApiError(
        "invalid_time_format", f"`{param}` must be a calendar date written YYYY-MM-DD.",
        param=param, details={"value": value, "expected_shapes": list(_DATE_SHAPES)},
    )


def parse_time(value: str, tz: ZoneInfo, *, param: str) -> datetime:
    """The UTC instant `value` names, read in `tz`.

    A naive value is wall-clock time in `tz`: in a DST gap it names no instant
    (`nonexistent_local_time`); in a fold it names the earlier one. An explicit
    offset (`Z` is +00:00) is not reinterpreted, but it must be one `tz` really
    has at that wall-clock time (`timezone_offset_mismatch`).
    """
    wall, offset = _read_time(value, param)
    try:
        instants = _instants(wall, tz)
        if not instants:
            raise _gap_error(value, wall, tz, param)
        if offset is None:
            return instants[0]
        valid = [_wall_offset(wall, instant) for instant in instants]
        if offset not in valid:
            raise ApiError(
                "timezone_offset_mismatch",
                f"`{param}` has the offset {_show_offset(offset)}, but {tz.key} is at "
                f"{' or '.join(_show_offset(v) for v in valid)} at {wall.isoformat()}.",
                param=param,
                details={
                    "value": value,
                    "expected_offset": _show_offset(valid[0]),
                    "valid_offsets": [_show_offset(v) for v in valid],
                },
            )
        return instants[valid.index(offset)]
    except OverflowError:
        raise _out_of_range(value, param) from None


def local_midnight(day: date, tz: ZoneInfo, *, param: str | None = None) -> datetime:
    """The UTC instant at which local `day` begins in `tz`.

    Where midnight falls in a DST gap the day begins right after the gap; where
    it falls in a fold, at the first of the two midnights. `param` only names
    the field to blame when the instant is outside what datetime can hold.
    """
    wall = datetime.combine(day, time())
    try:
        instants = _instants(wall, tz)
        return instants[0] if instants else _gap(wall, tz)[0]
    except OverflowError:
        raise _out_of_range(day.isoformat(), param) from None


# ---------------------------------------------------------------------------
# Event times


@dataclass(frozen=True)
class EventTimes:
    """An event's resolved time columns. Instants are aware UTC datetimes."""

    is_all_day: bool
    start_time: datetime
    end_time: datetime | None  # None: a point in time
    start_timezone: str
    end_timezone: str | None
    start_date: date | None  # all-day only
    end_date: date | None  # all-day only, exclusive

    @property
    def local_start(self) -> datetime:
        """Naive wall-clock start in `start_timezone` (recurrence DTSTART, slugs).

        `fold` is kept, so the second 01:30 of a fold is still told apart by
        anyone who converts it back with zoneinfo.
        """
        return self.start_time.astimezone(ZoneInfo(self.start_timezone)).replace(tzinfo=None)


def resolve_create(fields: Mapping[str, Any], *, fill_end_timezone: bool) -> EventTimes:
    """Times of a new event from the fields sent.

    All-day: `start_date` and `start_timezone` required, `end_date` (exclusive)
    defaults to the next day; both ends are local midnights in `start_timezone`.
    Timed: `start_time` with `start_timezone`, optionally `end_time` with
    `end_timezone`. With no end sent, `end_timezone` is `start_timezone` when
    `fill_end_timezone` (profile events), else None.
    """
    if _flag(fields):
        return _create_all_day(fields)
    return _create_timed(fields, fill_end_timezone=fill_end_timezone)


def _sent(*keys: str) -> dict[str, Any]:
    return {"anyOf": [{"required": [key]} for key in keys]}


# The rules above, as JSON Schema keywords for request bodies (OpenAPI, MCP): which
# fields a timed or an all-day event takes, and which travel together. A real
# `end_time` needs `end_timezone`; `end_time: null` ("no end") needs none.
_END_PAIR: dict[str, Any] = {
    "dependentRequired": {"end_timezone": ["end_time"]},
    "if": {"properties": {"end_time": {"type": "string"}}, "required": ["end_time"]},
    "then": {"required": ["end_timezone"]},
}
CREATE_FIELD_RULES: dict[str, Any] = {
    "if": {"properties": {"is_all_day": {"const": True}}, "required": ["is_all_day"]},
    "then": {"required": ["start_date", "start_timezone"],
             "not": _sent("start_time", "end_time")},
    "else": {"required": ["start_time", "start_timezone"], "not": _sent("start_date", "end_date"),
             **_END_PAIR},
}
RESCHEDULE_FIELD_RULES: dict[str, Any] = dict(_END_PAIR)


def resolve_update(current: EventTimes, changes: Mapping[str, Any]) -> EventTimes:
    """`current` with the time fields in `changes` applied.

    Times travel with their zones (`start_time` with `start_timezone`,
    `end_time` with `end_timezone`); a zone not sent is left as it is, and a new
    `start_timezone` never changes `end_timezone`. `end_time: null` alone
    removes the end.

    A PATCH changes exactly the fields it is sent (docs/api-choices.md, "Events, RSVPs and
    series"). A start moved with no end sent keeps the stored end (`end_time`, or `end_date` of
    an all-day event), and a start moved onto or past it is `invalid_time_range`; an event
    with no end stays a point in time. An all-day event made timed keeps its
    end instant, its last midnight. A timed event made all-day has no end date
    to keep, so without `end_date` it lasts one day, as on create.
    """
    if not any(key in changes for key in _TIME_FIELDS):
        return current
    all_day = _flag(changes)
    if all_day is None:
        all_day = current.is_all_day
    if all_day:
        return _update_all_day(current, changes)
    return _update_timed(current, changes)


def resolve_reschedule(current: EventTimes, fields: Mapping[str, Any]) -> EventTimes:
    """The event moved to `start_time` in `start_timezone`; always timed after.

    With no `end_time` sent the event keeps its duration (an all-day event's
    duration is the time between its two midnights), or stays a point in time
    if it had no end. `end_time: null` removes the end.
    """
    for key in ("start_time", "start_timezone"):
        if key not in fields:
            raise _missing(key, f"`{key}` is required to reschedule an event.")
    _end_pair(fields)
    start_tz = _zone_field(fields, "start_timezone")
    end_tz = _zone_field(fields, "end_timezone") if "end_timezone" in fields else None
    start = parse_time(_text(fields, "start_time"), start_tz, param="start_time")
    if "end_time" in fields:
        end = _end_time(fields, end_tz)
        return _timed(
            start, end, start_tz.key, end_tz.key if end_tz is not None else current.end_timezone,
            range_param="end_time",
        )
    end = _keep_duration(current, start)
    return _timed(start, end, start_tz.key, current.end_timezone, range_param="start_time")


# ---------------------------------------------------------------------------
# Stored columns: events and calendar events keep their times alike


def of_row(row: Mapping[str, Any]) -> EventTimes:
    """The times of a stored event or calendar event."""
    return EventTimes(
        is_all_day=row["is_all_day"], start_time=row["start_time"], end_time=row["end_time"],
        start_timezone=row["start_timezone"], end_timezone=row["end_timezone"],
        start_date=row["start_date"], end_date=row["end_date"],
    )


def columns(t: EventTimes) -> dict[str, Any]:
    return {
        "is_all_day": t.is_all_day, "start_time": t.start_time, "end_time": t.end_time,
        "start_timezone": t.start_timezone, "end_timezone": t.end_timezone,
        "start_date": t.start_date, "end_date": t.end_date,
    }


def check_rule(rule: str | None, t: EventTimes) -> None:
    """A rule must have a first occurrence from the event's start, on its wall clock."""
    if rule is not None:
        recurrence.check(rule, t.local_start, zone(t.start_timezone, param="start_timezone"))


def create_columns(fields: Mapping[str, Any], *, fill_end_timezone: bool) -> dict[str, Any]:
    """The time columns and `recurrence_rule` of a new event from the fields sent
    (see `resolve_create`)."""
    t = resolve_create(fields, fill_end_timezone=fill_end_timezone)
    rule = fields.get("recurrence_rule")
    check_rule(rule, t)
    return {**columns(t), "recurrence_rule": rule}


def update_columns(row: Mapping[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    """The time columns and `recurrence_rule` a PATCH changes, from the stored
    `row` and the fields sent (see `resolve_update`). The rule is judged again
    whenever it or the times change: it must still occur from the new start."""
    current = of_row(row)
    t = resolve_update(current, changes)
    values: dict[str, Any] = {}
    if t != current:
        values.update(columns(t))
    if "recurrence_rule" in changes or t != current:
        rule = changes.get("recurrence_rule", row["recurrence_rule"])
        check_rule(rule, t)
        values["recurrence_rule"] = rule
    return values


# ---------------------------------------------------------------------------
# Create


def _create_all_day(fields: Mapping[str, Any]) -> EventTimes:
    _exclude(fields, ("start_time", "end_time"), "an all-day event; use start_date and end_date")
    for key in ("start_date", "start_timezone"):
        if key not in fields:
            raise _missing(key, f"`{key}` is required for an all-day event.")
    tz = _zone_field(fields, "start_timezone")
    end_tz = _zone_field(fields, "end_timezone").key if "end_timezone" in fields else tz.key
    start_date = _date_field(fields, "start_date")
    if "end_date" in fields:
        end_date = _date_field(fields, "end_date")
    else:
        end_date = _add_days(start_date, 1, "start_date")
    return _all_day(start_date, end_date, tz, end_tz, range_param="end_date")


def _create_timed(fields: Mapping[str, Any], *, fill_end_timezone: bool) -> EventTimes:
    _exclude(fields, ("start_date", "end_date"), "a timed event; use start_time and end_time")
    if "start_time" not in fields and "start_timezone" not in fields:
        raise _missing("start_time", "`start_time` (with `start_timezone`) is required.")
    _together(fields, "start_time", "start_timezone")
    _end_pair(fields)
    start_tz = _zone_field(fields, "start_timezone")
    end_tz = _zone_field(fields, "end_timezone") if "end_timezone" in fields else None
    start = parse_time(_text(fields, "start_time"), start_tz, param="start_time")
    end = _end_time(fields, end_tz) if "end_time" in fields else None
    if end_tz is not None:
        end_tz_name: str | None = end_tz.key
    else:
        end_tz_name = start_tz.key if fill_end_timezone else None
    return _timed(start, end, start_tz.key, end_tz_name, range_param="end_time")


# ---------------------------------------------------------------------------
# Update


def _update_all_day(current: EventTimes, changes: Mapping[str, Any]) -> EventTimes:
    _exclude(changes, ("start_time", "end_time"), "an all-day event; use start_date and end_date")
    becoming = not current.is_all_day
    if becoming and "start_date" not in changes:
        raise _missing("start_date", "`start_date` is required to make an event all-day.")
    if "start_timezone" in changes:
        tz = _zone_field(changes, "start_timezone")
    else:
        tz = zone(current.start_timezone, param="start_timezone")
    if "end_timezone" in changes:
        end_tz: str | None = _zone_field(changes, "end_timezone").key
    else:
        end_tz = current.end_timezone
    if "start_date" in changes:
        start_date = _date_field(changes, "start_date")
    else:
        start_date = _current_dates(current)[0]
    range_param = "end_date"
    if "end_date" in changes:
        end_date = _date_field(changes, "end_date")
    elif becoming:
        end_date = _add_days(start_date, 1, "start_date")
    else:
        end_date = _current_dates(current)[1]
        range_param = "start_date"
    return _all_day(start_date, end_date, tz, end_tz, range_param=range_param)


def _update_timed(current: EventTimes, changes: Mapping[str, Any]) -> EventTimes:
    _exclude(changes, ("start_date", "end_date"), "a timed event; use start_time and end_time")
    if current.is_all_day and "start_time" not in changes and "start_timezone" not in changes:
        raise _missing(
            "start_time",
            "`start_time` (with `start_timezone`) is required to make an event timed.",
        )
    _together(changes, "start_time", "start_timezone")
    _end_pair(changes)
    moved = "start_time" in changes
    start_tz = _zone_field(changes, "start_timezone") if moved else None
    end_tz = _zone_field(changes, "end_timezone") if "end_timezone" in changes else None
    if start_tz is not None:
        start = parse_time(_text(changes, "start_time"), start_tz, param="start_time")
        start_tz_name = start_tz.key
    else:
        start, start_tz_name = current.start_time, current.start_timezone
    end_tz_name = end_tz.key if end_tz is not None else current.end_timezone
    if "end_time" in changes:
        end = _end_time(changes, end_tz)
        return _timed(start, end, start_tz_name, end_tz_name, range_param="end_time")
    # The stored end stays. Unchanged times are not re-judged: an event stored
    # before a rule existed must stay editable.
    return _timed(
        start, current.end_time, start_tz_name, end_tz_name,
        range_param="start_time" if moved else None,
    )


def _current_dates(current: EventTimes) -> tuple[date, date]:
    """An all-day event's dates; derived from its instants should a row lack them."""
    start = current.start_date or current.local_start.date()
    if current.end_date is not None:
        return start, current.end_date
    if current.end_time is not None:
        tz = ZoneInfo(current.start_timezone)
        end = current.end_time.astimezone(tz).date()
        if end > start:
            return start, end
    return start, _add_days(start, 1, "start_date")


# ---------------------------------------------------------------------------
# Reschedule


def _keep_duration(current: EventTimes, start: datetime) -> datetime | None:
    if current.end_time is None:
        return None
    try:
        return start + (current.end_time - current.start_time)
    except OverflowError:
        raise _out_of_range(start.isoformat(), "start_time") from None


# ---------------------------------------------------------------------------
# Building and checking results


def _all_day(
    start_date: date, end_date: date, tz: ZoneInfo, end_tz: str | None, *, range_param: str,
) -> EventTimes:
    if end_date <= start_date:
        raise ApiError(
            "invalid_time_range",
            f"`end_date` ({end_date.isoformat()}) is exclusive and must be after `start_date` "
            f"({start_date.isoformat()}).",
            param=range_param,
            details={"start": start_date.isoformat(), "end": end_date.isoformat()},
        )
    # Both ends are midnights in start_timezone, whatever end_timezone says.
    return EventTimes(
        is_all_day=True,
        start_time=local_midnight(start_date, tz, param="start_date"),
        end_time=local_midnight(end_date, tz, param="end_date"),
        start_timezone=tz.key,
        end_timezone=end_tz,
        start_date=start_date,
        end_date=end_date,
    )


def _timed(
    start: datetime,
    end: datetime | None,
    start_tz: str,
    end_tz: str | None,
    *,
    range_param: str | None,
) -> EventTimes:
    start = start.astimezone(UTC)
    end = end.astimezone(UTC) if end is not None else None
    if range_param is not None and end is not None and end <= start:
        raise ApiError(
            "invalid_time_range",
            f"The end ({utc_text(end)}) must be after the start ({utc_text(start)}).",
            param=range_param,
            details={"start": utc_text(start), "end": utc_text(end)},
        )
    return EventTimes(
        is_all_day=False, start_time=start, end_time=end, start_timezone=start_tz,
        end_timezone=end_tz, start_date=None, end_date=None,
    )


def _end_time(fields: Mapping[str, Any], end_tz: ZoneInfo | None) -> datetime | None:
    """The sent `end_time`: None for an explicit null."""
    if fields["end_time"] is None:
        return None
    assert end_tz is not None  # _end_pair saw to it
    return parse_time(_text(fields, "end_time"), end_tz, param="end_time")


# ---------------------------------------------------------------------------
# Field rules


def _flag(fields: Mapping[str, Any]) -> bool | None:
    if "is_all_day" not in fields:
        return None
    value = fields["is_all_day"]
    if not isinstance(value, bool):
        raise ApiError(
            "invalid_field", "`is_all_day` must be true or false.", param="is_all_day",
            details={"value": value},
        )
    return value


def _text(fields: Mapping[str, Any], key: str) -> str:
    # Pydantic has checked types already; this keeps a bypass from becoming a 500.
    value = fields[key]
    if not isinstance(value, str):
        raise ApiError(
            "invalid_field", f"`{key}` must be a string.", param=key, details={"value": value},
        )
    return value


def _zone_field(fields: Mapping[str, Any], key: str) -> ZoneInfo:
    return zone(_text(fields, key), param=key)


def _date_field(fields: Mapping[str, Any], key: str) -> date:
    return parse_date(_text(fields, key), param=key)


def _exclude(fields: Mapping[str, Any], keys: tuple[str, ...], what: str) -> None:
    for key in keys:
        if key in fields:
            raise ApiError(
                "field_dependency", f"`{key}` cannot be sent for {what}.", param=key,
            )


def _together(fields: Mapping[str, Any], a: str, b: str) -> None:
    """`a` and `b` are sent together or not at all; blame the absent one."""
    for sent, absent in ((a, b), (b, a)):
        if sent in fields and absent not in fields:
            raise ApiError(
                "field_dependency", f"`{sent}` must be sent together with `{absent}`.",
                param=absent,
            )


def _end_pair(fields: Mapping[str, Any]) -> None:
    # end_time: null ("no end") needs no zone, so only a real end_time demands one.
    if fields.get("end_time") is not None and "end_timezone" not in fields:
        raise ApiError(
            "field_dependency", "`end_time` must be sent together with `end_timezone`.",
            param="end_timezone",
        )
    if "end_timezone" in fields and "end_time" not in fields:
        raise ApiError(
            "field_dependency", "`end_timezone` must be sent together with `end_time`.",
            param="end_time",
        )


def _missing(key: str, message: str) -> ApiError:
    return ApiError("missing_field", message, param=key)


def _add_days(day: date, days: int, param: str) -> date:
    try:
        return day + timedelta(days=days)
    except OverflowError:
        raise _out_of_range(day.isoformat(), param) from None


# ---------------------------------------------------------------------------
# Wall clocks, gaps and folds


def _read_time(value: str, param: str) -> tuple[datetime, timedelta | None]:
    """The naive wall-clock time and the explicit offset (None if naive) of `value`."""
    match = _TIME_RE.fullmatch(value)
    if match is not None:
        # The shape is right from here on: a wrong value is named as such.
        day = _day(match["year"], match["month"], match["day"], value, param)
        fraction = (match["fraction"] or "")[:6].ljust(6, "0")
        try:
            clock = time(int(match["hour"]), int(match["minute"]), int(match["second"] or 0),
                         int(fraction))
        except ValueError:
            raise _no_such(value, param, "a time of day that does not exist "
                           "(hours 00-23, minutes and seconds 00-59)") from None
        wall = datetime.combine(day, clock)
        if match["zulu"]:
            return wall, timedelta(0)
        if not match["sign"]:
            return wall, None
        hours, minutes = int(match["off_h"]), int(match["off_m"])
        if hours > 23 or minutes > 59:
            raise _no_such(value, param, "an offset that does not exist (at most +23:59)")
        offset = timedelta(hours=hours, minutes=minutes)
        return wall, -offset if match["sign"] == "-" else offset
    raise ApiError(
        "invalid_time_format",
        f"`{param}` must be a date and time such as 2026-03-08T09:30 (optionally with "
        "seconds, a fraction and an offset).",
        param=param, details={"value": value, "expected_shapes": list(EXPECTED_SHAPES)},
    )


def _day(year: str, month: str, day: str, value: str, param: str) -> date:
    try:
        return date(int(year), int(month), int(day))
    except ValueError:
        pass
    if not 1 <= int(month) <= 12:
        what = f"month {month}, which does not exist"
    elif int(year) == 0:
        what = "year 0000, which does not exist (years start at 0001)"
    else:
        last = calendar.monthrange(int(year), int(month))[1]
        what = (f"day {day} of {calendar.month_name[int(month)]} {year}, which has "
                f"{last} days")
    raise _no_such(value, param, what)


def _no_such(value: str, param: str, what: str) -> ApiError:
    """A value of the right shape naming something that does not exist (2027-02-30)."""
    return ApiError("invalid_field", f"`{param}` names {what}.", param=param,
                    details={"value": value})


def _instants(wall: datetime, tz: ZoneInfo) -> list[datetime]:
    """The UTC instants whose wall clock in `tz` reads `wall`, earliest first:
    none in a gap, two in a fold.

    zoneinfo gives an offset for either `fold` even where that wall time does
    not exist; an offset counts only if the instant it names reads `wall` again.
    """
    found: list[datetime] = []
    for fold in (0, 1):
        instant = (wall - _offset(wall.replace(tzinfo=tz, fold=fold))).replace(tzinfo=UTC)
        if instant.astimezone(tz).replace(tzinfo=None) == wall and instant not in found:
            found.append(instant)
    return sorted(found)


def _gap(wall: datetime, tz: ZoneInfo) -> tuple[datetime, timedelta, timedelta]:
    """For `wall` in a gap: the transition instant and the offsets before and after.

    zoneinfo has no public list of transitions, so the transition is found by
    bisecting the UTC seconds that could hold it (tzdata transitions fall on
    whole seconds).
    """
    before, after = sorted(_offset(wall.replace(tzinfo=tz, fold=f)) for f in (0, 1))
    # The gap holds the wall times [T + before, T + after), so T is in
    # (wall - after, wall - before].
    lo = _epoch_seconds(wall - after)
    hi = _epoch_seconds(wall - before)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _offset(_from_epoch(mid).astimezone(tz)) == before:
            lo = mid
        else:
            hi = mid
    return _from_epoch(hi), before, after


def _gap_error(value: str, wall: datetime, tz: ZoneInfo, param: str) -> ApiError:
    transition, before, after = _gap(wall, tz)
    gap_from = _with_offset(transition, before)
    gap_to = _with_offset(transition, after)
    return ApiError(
        "nonexistent_local_time",
        f"`{param}` names {wall.isoformat()} in {tz.key}, a time the clocks skip: they go "
        f"from {gap_from} to {gap_to}.",
        param=param, details={"value": value, "gap_from": gap_from, "gap_to": gap_to},
    )


def _out_of_range(value: str, param: str | None) -> ApiError:
    return ApiError(
        "invalid_field",
        "The time is outside the supported range (years 0001 to 9999 in UTC).",
        param=param, details={"value": value},
    )


def _offset(aware: datetime) -> timedelta:
    offset = aware.utcoffset()
    assert offset is not None  # aware by construction
    return offset


def _wall_offset(wall: datetime, instant: datetime) -> timedelta:
    return wall - instant.replace(tzinfo=None)


def _epoch_seconds(naive_utc: datetime) -> int:
    # Floor to whole seconds: the transition is a whole second, so flooring
    # keeps it inside the bracket.
    return (naive_utc.replace(tzinfo=UTC) - _EPOCH) // timedelta(seconds=1)


def _from_epoch(seconds: int) -> datetime:
    return _EPOCH + timedelta(seconds=seconds)


def _show_offset(offset: timedelta) -> str:
    """`+HH:MM`, or `+HH:MM:SS` for the local mean times of old zones."""
    seconds = int(offset.total_seconds())
    sign = "-" if seconds < 0 else "+"
    hours, rest = divmod(abs(seconds), 3600)
    minutes, seconds = divmod(rest, 60)
    text = f"{sign}{hours:02d}:{minutes:02d}"
    return f"{text}:{seconds:02d}" if seconds else text


def _with_offset(instant: datetime, offset: timedelta) -> str:
    """RFC 3339 wall-clock text of `instant` at `offset`."""
    wall = (instant + offset).replace(tzinfo=None, microsecond=0)
    return wall.isoformat() + _show_offset(offset)


def _in_utc(instant: datetime) -> datetime:
    # asyncpg's values are UTC already: most calls skip the conversion.
    return instant if instant.tzinfo is UTC else instant.astimezone(UTC)


def utc_text(instant: datetime) -> str:
    """A timestamp as answers write it (docs/http.md, "HTTP conventions"): RFC 3339 in UTC, `Z`,
    whole seconds, and always a four-digit year (isoformat pads it; strftime's `%Y` does not on
    glibc). Every answer's timestamps go through here (four an event): formatting the aware
    value and cutting its `+00:00` is a fifth cheaper than building a naive copy first."""
    return _in_utc(instant).isoformat(timespec="seconds")[:-6] + "Z"


def compact_date(day: date) -> str:
    """`YYYYMMDD` (RFC 5545's DATE form), the year padded as in `utc_text`."""
    return f"{day.year:04d}{day.month:02d}{day.day:02d}"


def compact_utc(instant: datetime) -> str:
    """`YYYYMMDDTHHMMSSZ` (RFC 5545's UTC form), the year padded as in `utc_text`."""
    u = _in_utc(instant)
    return f"{u.year:04d}{u.month:02d}{u.day:02d}T{u.hour:02d}{u.minute:02d}{u.second:02d}Z"
