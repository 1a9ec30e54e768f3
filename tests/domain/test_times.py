"""domain.times: time shapes, zones, DST gaps and folds, and the create/update/
reschedule rules for event times. Pure unit tests: no database, no server."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, available_timezones

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from core.errors import ApiError
from domain.times import (
    DATE_PATTERN,
    EXPECTED_SHAPES,
    TIME_PATTERN,
    EventTimes,
    compact_utc,
    local_midnight,
    parse_date,
    parse_time,
    resolve_create,
    resolve_reschedule,
    resolve_update,
    zone,
)
from graph.scalars import SCALARS, Timestamp

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")
SYDNEY = ZoneInfo("Australia/Sydney")

# What the GraphQL layer (and so REST and MCP) writes for an instant.
Timestamp_serialize = SCALARS[Timestamp].serialize


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0,
    microsecond: int = 0,
) -> datetime:
    return datetime(year, month, day, hour, minute, second, microsecond, tzinfo=UTC)


def raises(code: str, fn: Callable[..., object], *args: Any, **kwargs: Any) -> ApiError:
    with pytest.raises(ApiError) as info:
        fn(*args, **kwargs)
    assert info.value.code == code, (info.value.code, info.value.message)
    return info.value


def details(exc: ApiError) -> dict[str, Any]:
    assert exc.details is not None
    return exc.details


# ---------------------------------------------------------------------------
# Accepted shapes

# One instance of every advertised shape, in a zone where its offset is right.
SHAPE_SAMPLES: dict[str, tuple[str, ZoneInfo, datetime]] = {
    "YYYY-MM-DDTHH:MM": ("2026-07-14T09:30", BERLIN, utc(2026, 7, 14, 7, 30)),
    "YYYY-MM-DDTHH:MM:SS": ("2026-07-14T09:30:15", BERLIN, utc(2026, 7, 14, 7, 30, 15)),
    "YYYY-MM-DDTHH:MM:SS.ffffff": (
        "2026-07-14T09:30:15.123456", BERLIN, utc(2026, 7, 14, 7, 30, 15, 123456),
    ),
    "YYYY-MM-DD HH:MM:SS": ("2026-07-14 09:30:15", BERLIN, utc(2026, 7, 14, 7, 30, 15)),
    "YYYY-MM-DDTHH:MMZ": ("2026-07-14T09:30Z", ZoneInfo("UTC"), utc(2026, 7, 14, 9, 30)),
    "YYYY-MM-DDTHH:MM:SSZ": ("2026-07-14T09:30:15Z", ZoneInfo("UTC"), utc(2026, 7, 14, 9, 30, 15)),
    "YYYY-MM-DDTHH:MM+HH:MM": ("2026-07-14T09:30+02:00", BERLIN, utc(2026, 7, 14, 7, 30)),
    "YYYY-MM-DDTHH:MM:SS+HH:MM": ("2026-07-14T09:30:15+02:00", BERLIN, utc(2026, 7, 14, 7, 30, 15)),
    "YYYY-MM-DDTHH:MM:SS-HHMM": ("2026-07-14T09:30:15-0400", NEW_YORK, utc(2026, 7, 14, 13, 30, 15)),
    "YYYY-MM-DD HH:MM:SS.ffffff+HH:MM": (
        "2026-07-14 09:30:15.5+02:00", BERLIN, utc(2026, 7, 14, 7, 30, 15, 500000),
    ),
}


def test_every_expected_shape_has_a_sample() -> None:
    assert set(SHAPE_SAMPLES) == set(EXPECTED_SHAPES)
    assert len(EXPECTED_SHAPES) == len(set(EXPECTED_SHAPES))


@pytest.mark.parametrize("shape", EXPECTED_SHAPES)
def test_expected_shape_is_accepted(shape: str) -> None:
    text, tz, expected = SHAPE_SAMPLES[shape]
    result = parse_time(text, tz, param="start_time")
    assert result == expected
    assert result.tzinfo is UTC


@pytest.mark.parametrize(
    ("text", "tz", "expected"),
    [
        # RFC 3339 allows lower-case t and z; so do we.
        ("2026-07-14t09:30", BERLIN, utc(2026, 7, 14, 7, 30)),
        ("2026-07-14t09:30:00z", ZoneInfo("UTC"), utc(2026, 7, 14, 9, 30)),
        ("2026-07-14 09:30Z", ZoneInfo("UTC"), utc(2026, 7, 14, 9, 30)),
        ("2026-07-14T09:30:15.1+02:00", BERLIN, utc(2026, 7, 14, 7, 30, 15, 100000)),
        # Digits past the microsecond are dropped, never rounded into the next second.
        ("2026-07-14T09:30:15.999999999", BERLIN, utc(2026, 7, 14, 7, 30, 15, 999999)),
        ("2026-07-14T09:30+0200", BERLIN, utc(2026, 7, 14, 7, 30)),
        ("2026-07-14T09:30-04:00", NEW_YORK, utc(2026, 7, 14, 13, 30)),
        ("2026-07-14T09:30+05:30", ZoneInfo("Asia/Kolkata"), utc(2026, 7, 14, 4, 0)),
        ("2026-07-14T09:30+0545", ZoneInfo("Asia/Kathmandu"), utc(2026, 7, 14, 3, 45)),
        # RFC 3339's "-00:00" (offset unknown) is still the instant at UTC.
        ("2026-07-14T09:30-00:00", ZoneInfo("UTC"), utc(2026, 7, 14, 9, 30)),
        ("2026-01-14T09:30+00:00", ZoneInfo("Europe/London"), utc(2026, 1, 14, 9, 30)),
        ("2024-02-29T00:00", ZoneInfo("UTC"), utc(2024, 2, 29)),
        ("2026-12-31T23:59:59", ZoneInfo("UTC"), utc(2026, 12, 31, 23, 59, 59)),
        ("1970-01-01T00:00", ZoneInfo("UTC"), utc(1970, 1, 1)),
        # Southern hemisphere: July is winter (+10:00) in Sydney.
        ("2026-07-14T09:30", SYDNEY, utc(2026, 7, 13, 23, 30)),
        ("2026-01-14T09:30+11:00", SYDNEY, utc(2026, 1, 13, 22, 30)),
    ],
)
def test_more_accepted_variants(text: str, tz: ZoneInfo, expected: datetime) -> None:
    assert parse_time(text, tz, param="start_time") == expected


# ---------------------------------------------------------------------------
# Rejected shapes


@pytest.mark.parametrize(
    "text",
    [
        "",
        "2026-07-14",
        "2026-07-14T",
        "2026-07-14T09",
        "2026-07-14T0930",
        "2026-7-14T09:30",
        "2026-07-4T09:30",
        "26-07-14T09:30",
        "2026-07-14T9:30",
        "2026-07-14T09:3",
        "2026-07-14T09:30:5",
        "2026-07-14T09:30.5",  # a fraction only after seconds
        "2026-07-14T09:30:15.",
        "2026-07-14T09:30:15,5",
        "20260714T093015",
        "2026-07-14_09:30",
        "2026-07-14TT09:30",
        "2026-07-14  09:30",
        " 2026-07-14T09:30",
        "2026-07-14T09:30 ",
        "2026-07-14T09:30\n",
        "2026-07-14T09:30+02",
        "2026-07-14T09:30+2:00",
        "2026-07-14T09:30+02:0",
        "2026-07-14T09:30+02:00:00",
        "2026-07-14T09:30 +02:00",
        "2026-07-14T09:30UTC",
        "2026-07-14T09:30Z+02:00",
        "2026-07-14T09:30ZZ",
        "2026-07-14T09:30[Europe/Berlin]",
        "-2026-07-14T09:30",
        "+2026-07-14T09:30",
        "12026-07-14T09:30",
        "\uff12\uff10\uff12\uff16-07-14T09:30",  # full-width digits
        "2026-07-14T\u0660\u0669:30",  # Arabic-Indic digits
        "tomorrow at noon",
    ],
)
def test_rejected_shape(text: str) -> None:
    exc = raises("invalid_time_format", parse_time, text, BERLIN, param="end_time")
    assert exc.param == "end_time"
    assert details(exc) == {"value": text, "expected_shapes": list(EXPECTED_SHAPES)}


@pytest.mark.parametrize(
    ("text", "named"),
    [
        # The right shape, naming a day, time or offset that does not exist: the
        # error says which, rather than listing shapes the value already has.
        ("2026-13-01T09:30", "month 13"),
        ("2026-00-10T09:30", "month 00"),
        ("2027-02-30T09:30", "day 30 of February 2027, which has 28 days"),
        ("2025-02-29T09:30", "day 29 of February 2025, which has 28 days"),
        ("2026-07-00T09:30", "day 00 of July 2026, which has 31 days"),
        ("0000-01-01T00:00", "year 0000"),
        ("2026-07-14T24:00", "time of day"),
        ("2026-07-14T25:00", "time of day"),
        ("2026-07-14T09:60", "time of day"),
        ("2026-07-14T09:30:60", "time of day"),  # no leap seconds
        ("2026-07-14T09:30+24:00", "offset"),
        ("2026-07-14T09:30+02:60", "offset"),
        ("2026-07-14T09:30-9999", "offset"),
    ],
)
def test_right_shape_naming_what_does_not_exist(text: str, named: str) -> None:
    exc = raises("invalid_field", parse_time, text, BERLIN, param="end_time")
    assert exc.param == "end_time"
    assert details(exc) == {"value": text}
    assert exc.message.startswith("`end_time` names ") and named in exc.message
    assert "such as" not in exc.message


def test_instant_outside_datetime_range_is_invalid_field() -> None:
    # A real local time whose UTC instant falls before year 1 or after 9999.
    exc = raises("invalid_field", parse_time, "0001-01-01T00:00", ZoneInfo("Asia/Tokyo"),
                 param="start_time")
    assert exc.param == "start_time"
    assert details(exc) == {"value": "0001-01-01T00:00"}
    raises("invalid_field", parse_time, "9999-12-31T23:00-05:00", NEW_YORK, param="start_time")
    assert parse_time("9999-12-31T23:00", ZoneInfo("Asia/Tokyo"), param="p") == utc(
        9999, 12, 31, 14)


# ---------------------------------------------------------------------------
# Dates and zones


@pytest.mark.parametrize(
    ("text", "expected"),
    [("2026-07-14", date(2026, 7, 14)), ("2024-02-29", date(2024, 2, 29)),
     ("0001-01-01", date(1, 1, 1)), ("9999-12-31", date(9999, 12, 31))],
)
def test_parse_date_accepts(text: str, expected: date) -> None:
    assert parse_date(text, param="start_date") == expected


@pytest.mark.parametrize(
    "text",
    ["", "2026-7-14", "2026-07-4", "20260714", "2026-07-14T00:00", "2026-07-14 ", " 2026-07-14",
     "2026-07-14\n", "2026/07/14", "14-07-2026", "\uff12\uff10\uff12\uff16-07-14",
     "2026-W28-2", "2026-195"],
)
def test_parse_date_rejects(text: str) -> None:
    exc = raises("invalid_time_format", parse_date, text, param="end_date")
    assert exc.param == "end_date"
    assert details(exc) == {"value": text, "expected_shapes": ["YYYY-MM-DD"]}


@pytest.mark.parametrize(
    ("text", "named"),
    [("2026-02-30", "day 30 of February 2026"), ("2025-02-29", "day 29 of February 2025"),
     ("2026-13-01", "month 13"), ("2026-00-01", "month 00"), ("0000-01-01", "year 0000")],
)
def test_parse_date_names_a_day_that_does_not_exist(text: str, named: str) -> None:
    exc = raises("invalid_field", parse_date, text, param="end_date")
    assert exc.param == "end_date"
    assert details(exc) == {"value": text}
    assert named in exc.message


@pytest.mark.parametrize(
    "name", ["UTC", "Etc/UTC", "Europe/Berlin", "America/Argentina/Buenos_Aires", "US/Eastern",
             "EST5EDT", "Etc/GMT+5", "Asia/Kolkata"],
)
def test_zone_accepts_iana_names(name: str) -> None:
    tz = zone(name, param="start_timezone")
    assert isinstance(tz, ZoneInfo)
    assert tz.key == name


@pytest.mark.parametrize(
    "name",
    ["", " ", "localtime", "Factory", "posixrules", "europe/berlin", "EUROPE/BERLIN", "utc",
     "Europe/Berlin/", " Europe/Berlin", "Europe/Berlin\x00", "Europe//Berlin",
     "/usr/share/zoneinfo/UTC", "../zoneinfo/UTC", "Europe/../UTC", "Mars/Olympus_Mons",
     "Europe", "zone.tab", "tzdata.zi", "right/UTC", "+02:00", "CEST", "GMT+2"],
)
def test_zone_rejects_everything_else(name: str) -> None:
    exc = raises("invalid_timezone", zone, name, param="end_timezone")
    assert exc.param == "end_timezone"
    assert details(exc) == {"value": name}


ZONE_NAMES = sorted(available_timezones() - {"localtime", "posixrules", "Factory"})


def test_zone_accepts_every_available_zone() -> None:
    for name in ZONE_NAMES:
        assert zone(name, param="start_timezone").key == name


# ---------------------------------------------------------------------------
# DST gaps


@pytest.mark.parametrize(
    ("tz", "text", "gap_from", "gap_to"),
    [
        (NEW_YORK, "2026-03-08T02:30", "2026-03-08T02:00:00-05:00", "2026-03-08T03:00:00-04:00"),
        (NEW_YORK, "2026-03-08T02:00", "2026-03-08T02:00:00-05:00", "2026-03-08T03:00:00-04:00"),
        (NEW_YORK, "2026-03-08 02:59:59.999999",
         "2026-03-08T02:00:00-05:00", "2026-03-08T03:00:00-04:00"),
        (BERLIN, "2026-03-29T02:30", "2026-03-29T02:00:00+01:00", "2026-03-29T03:00:00+02:00"),
        (BERLIN, "2026-03-29T02:00:00", "2026-03-29T02:00:00+01:00", "2026-03-29T03:00:00+02:00"),
        (SYDNEY, "2026-10-04T02:30", "2026-10-04T02:00:00+10:00", "2026-10-04T03:00:00+11:00"),
        # Half-hour DST.
        (ZoneInfo("Australia/Lord_Howe"), "2026-10-04T02:15",
         "2026-10-04T02:00:00+10:30", "2026-10-04T02:30:00+11:00"),
        # Samoa skipped a whole day when it crossed the date line.
        (ZoneInfo("Pacific/Apia"), "2011-12-30T12:00",
         "2011-12-30T00:00:00-10:00", "2011-12-31T00:00:00+14:00"),
    ],
)
def test_time_in_gap_does_not_exist(tz: ZoneInfo, text: str, gap_from: str, gap_to: str) -> None:
    exc = raises("nonexistent_local_time", parse_time, text, tz, param="start_time")
    assert exc.param == "start_time"
    assert details(exc) == {"value": text, "gap_from": gap_from, "gap_to": gap_to}


@pytest.mark.parametrize("offset", ["-05:00", "-04:00", "Z"])
def test_explicit_offset_in_gap_is_nonexistent_not_mismatch(offset: str) -> None:
    text = "2026-03-08T02:30" + offset
    exc = raises("nonexistent_local_time", parse_time, text, NEW_YORK, param="end_time")
    assert exc.param == "end_time"
    assert details(exc) == {
        "value": text, "gap_from": "2026-03-08T02:00:00-05:00",
        "gap_to": "2026-03-08T03:00:00-04:00",
    }


@pytest.mark.parametrize(
    ("tz", "text", "expected"),
    [
        (NEW_YORK, "2026-03-08T01:59:59", utc(2026, 3, 8, 6, 59, 59)),
        (NEW_YORK, "2026-03-08T03:00", utc(2026, 3, 8, 7)),
        (BERLIN, "2026-03-29T03:00", utc(2026, 3, 29, 1)),
        (SYDNEY, "2026-10-04T03:00", utc(2026, 10, 3, 16)),
    ],
)
def test_edges_of_gap_exist(tz: ZoneInfo, text: str, expected: datetime) -> None:
    assert parse_time(text, tz, param="start_time") == expected


# ---------------------------------------------------------------------------
# DST folds


FOLDS = [
    # zone, wall time, first offset, first instant, second offset, second instant
    (NEW_YORK, "2026-11-01T01:30", "-04:00", utc(2026, 11, 1, 5, 30), "-05:00",
     utc(2026, 11, 1, 6, 30)),
    (BERLIN, "2026-10-25T02:30", "+02:00", utc(2026, 10, 25, 0, 30), "+01:00",
     utc(2026, 10, 25, 1, 30)),
    (SYDNEY, "2026-04-05T02:30", "+11:00", utc(2026, 4, 4, 15, 30), "+10:00",
     utc(2026, 4, 4, 16, 30)),
]


@pytest.mark.parametrize(("tz", "text", "off1", "first", "off2", "second"), FOLDS)
def test_fold_naive_takes_the_earlier_instant(
    tz: ZoneInfo, text: str, off1: str, first: datetime, off2: str, second: datetime,
) -> None:
    assert parse_time(text, tz, param="start_time") == first


@pytest.mark.parametrize(("tz", "text", "off1", "first", "off2", "second"), FOLDS)
def test_fold_explicit_offset_picks_either_instant(
    tz: ZoneInfo, text: str, off1: str, first: datetime, off2: str, second: datetime,
) -> None:
    assert parse_time(text + off1, tz, param="start_time") == first
    assert parse_time(text + off2, tz, param="start_time") == second
    assert parse_time(text + off2.replace(":", ""), tz, param="start_time") == second


@pytest.mark.parametrize(("tz", "text", "off1", "first", "off2", "second"), FOLDS)
def test_fold_wrong_offset_lists_both_valid_offsets(
    tz: ZoneInfo, text: str, off1: str, first: datetime, off2: str, second: datetime,
) -> None:
    value = text + "Z"
    exc = raises("timezone_offset_mismatch", parse_time, value, tz, param="start_time")
    assert exc.param == "start_time"
    assert details(exc) == {
        "value": value, "expected_offset": off1, "valid_offsets": [off1, off2],
    }


# ---------------------------------------------------------------------------
# Offset mismatch outside folds


@pytest.mark.parametrize(
    ("tz", "text", "expected"),
    [
        (BERLIN, "2026-07-14T09:30Z", "+02:00"),
        (BERLIN, "2026-07-14T09:30+01:00", "+02:00"),  # the winter offset in summer
        (BERLIN, "2026-01-14T09:30+0200", "+01:00"),
        (NEW_YORK, "2026-07-14T09:30-05:00", "-04:00"),
        (NEW_YORK, "2026-07-14T09:30+04:00", "-04:00"),  # sign matters
        (SYDNEY, "2026-07-14T09:30+11:00", "+10:00"),
        (ZoneInfo("Asia/Kolkata"), "2026-07-14T09:30+05:00", "+05:30"),
        (ZoneInfo("UTC"), "2026-07-14T09:30+01:00", "+00:00"),
        # Local mean time of old zones has seconds; so do their offsets.
        (NEW_YORK, "1880-01-01T12:00-05:00", "-04:56:02"),
        (ZoneInfo("Africa/Monrovia"), "1971-06-01T12:00Z", "-00:44:30"),
    ],
)
def test_offset_mismatch(tz: ZoneInfo, text: str, expected: str) -> None:
    exc = raises("timezone_offset_mismatch", parse_time, text, tz, param="end_time")
    assert exc.param == "end_time"
    assert details(exc) == {"value": text, "expected_offset": expected, "valid_offsets": [expected]}


def test_offset_with_seconds_zone_accepts_naive_time() -> None:
    assert parse_time("1880-01-01T12:00", NEW_YORK, param="start_time") == utc(
        1880, 1, 1, 16, 56, 2)


# ---------------------------------------------------------------------------
# local_midnight and local_start


@pytest.mark.parametrize(
    ("day", "tz", "expected"),
    [
        (date(2026, 7, 14), BERLIN, utc(2026, 7, 13, 22)),
        (date(2026, 1, 14), BERLIN, utc(2026, 1, 13, 23)),
        (date(2026, 7, 14), SYDNEY, utc(2026, 7, 13, 14)),
        (date(2026, 7, 14), ZoneInfo("UTC"), utc(2026, 7, 14)),
        # The DST days themselves: midnight is before the change.
        (date(2026, 3, 8), NEW_YORK, utc(2026, 3, 8, 5)),
        (date(2026, 11, 1), NEW_YORK, utc(2026, 11, 1, 4)),
        # Havana springs forward at midnight: the day starts at 01:00 CDT.
        (date(2026, 3, 8), ZoneInfo("America/Havana"), utc(2026, 3, 8, 5)),
        # ...and falls back from 01:00 to 00:00: the first of two midnights.
        (date(2026, 11, 1), ZoneInfo("America/Havana"), utc(2026, 11, 1, 4)),
        (date(2018, 11, 4), ZoneInfo("America/Sao_Paulo"), utc(2018, 11, 4, 3)),
        # A day the zone skipped entirely begins (and ends) where the next one does.
        (date(2011, 12, 30), ZoneInfo("Pacific/Apia"), utc(2011, 12, 30, 10)),
    ],
)
def test_local_midnight(day: date, tz: ZoneInfo, expected: datetime) -> None:
    result = local_midnight(day, tz)
    assert result == expected
    assert result.tzinfo is UTC


def test_local_midnight_out_of_range() -> None:
    exc = raises("invalid_field", local_midnight, date(1, 1, 1), ZoneInfo("Asia/Tokyo"),
                 param="start_date")
    assert exc.param == "start_date"
    assert details(exc) == {"value": "0001-01-01"}


def test_local_start_is_naive_wall_clock_in_start_zone() -> None:
    t = EventTimes(
        is_all_day=False, start_time=utc(2026, 7, 14, 7, 30), end_time=None,
        start_timezone="Europe/Berlin", end_timezone=None, start_date=None, end_date=None,
    )
    assert t.local_start == datetime(2026, 7, 14, 9, 30)
    assert t.local_start.tzinfo is None


def test_local_start_in_fold_keeps_fold() -> None:
    t = resolve_create({"start_time": "2026-11-01T01:30-05:00", "start_timezone":
                        "America/New_York"}, fill_end_timezone=False)
    assert t.local_start == datetime(2026, 11, 1, 1, 30)
    assert t.local_start.fold == 1
    assert t.local_start.replace(tzinfo=NEW_YORK).astimezone(UTC) == t.start_time


# ---------------------------------------------------------------------------
# Create: all-day

ALL_DAY_BERLIN = {"is_all_day": True, "start_date": "2026-07-14", "start_timezone": "Europe/Berlin"}


@pytest.mark.parametrize("fill", [True, False])
def test_create_all_day_defaults_to_one_day(fill: bool) -> None:
    t = resolve_create({**ALL_DAY_BERLIN, "title": "ignored"}, fill_end_timezone=fill)
    assert t == EventTimes(
        is_all_day=True, start_time=utc(2026, 7, 13, 22), end_time=utc(2026, 7, 14, 22),
        start_timezone="Europe/Berlin", end_timezone="Europe/Berlin",
        start_date=date(2026, 7, 14), end_date=date(2026, 7, 15),
    )
    assert t.local_start == datetime(2026, 7, 14)


def test_create_all_day_multi_day_across_dst() -> None:
    t = resolve_create(
        {**ALL_DAY_BERLIN, "start_date": "2026-03-28", "end_date": "2026-03-30"},
        fill_end_timezone=True,
    )
    assert (t.start_date, t.end_date) == (date(2026, 3, 28), date(2026, 3, 30))
    assert t.start_time == utc(2026, 3, 27, 23)
    assert t.end_time == utc(2026, 3, 29, 22)
    assert t.end_time - t.start_time == timedelta(hours=47)


def test_create_all_day_end_timezone_kept_but_end_is_midnight_in_start_zone() -> None:
    t = resolve_create(
        {**ALL_DAY_BERLIN, "end_date": "2026-07-16", "end_timezone": "America/New_York"},
        fill_end_timezone=True,
    )
    assert t.end_timezone == "America/New_York"
    assert t.end_time == utc(2026, 7, 15, 22)


def test_create_all_day_midnight_in_gap() -> None:
    t = resolve_create(
        {"is_all_day": True, "start_date": "2026-03-08", "start_timezone": "America/Havana"},
        fill_end_timezone=True,
    )
    assert t.start_time == utc(2026, 3, 8, 5)
    assert t.end_time == utc(2026, 3, 9, 4)


@pytest.mark.parametrize(
    ("fields", "code", "param"),
    [
        ({"is_all_day": True, "start_timezone": "Europe/Berlin"}, "missing_field", "start_date"),
        ({"is_all_day": True, "start_date": "2026-07-14"}, "missing_field", "start_timezone"),
        ({"is_all_day": True}, "missing_field", "start_date"),
        ({**ALL_DAY_BERLIN, "start_time": "2026-07-14T09:00"}, "field_dependency", "start_time"),
        ({**ALL_DAY_BERLIN, "end_time": "2026-07-14T10:00"}, "field_dependency", "end_time"),
        ({**ALL_DAY_BERLIN, "end_time": None}, "field_dependency", "end_time"),
        # An excluded field is reported before a missing one.
        ({"is_all_day": True, "start_time": "2026-07-14T09:00"}, "field_dependency",
         "start_time"),
        ({**ALL_DAY_BERLIN, "start_timezone": "Europe/Nowhere"}, "invalid_timezone",
         "start_timezone"),
        ({**ALL_DAY_BERLIN, "end_timezone": "nowhere"}, "invalid_timezone", "end_timezone"),
        ({**ALL_DAY_BERLIN, "start_date": "2026-07-14T00:00"}, "invalid_time_format",
         "start_date"),
        ({**ALL_DAY_BERLIN, "end_date": "2026-02-30"}, "invalid_field", "end_date"),
        # Zones are judged before the dates that depend on them.
        ({**ALL_DAY_BERLIN, "start_timezone": "Nowhere", "start_date": "bad"},
         "invalid_timezone", "start_timezone"),
        ({**ALL_DAY_BERLIN, "is_all_day": None}, "invalid_field", "is_all_day"),
    ],
)
def test_create_all_day_errors(fields: dict[str, Any], code: str, param: str) -> None:
    exc = raises(code, resolve_create, fields, fill_end_timezone=True)
    assert exc.param == param


@pytest.mark.parametrize("end_date", ["2026-07-14", "2026-07-13"])
def test_create_all_day_end_date_must_be_after_start_date(end_date: str) -> None:
    exc = raises("invalid_time_range", resolve_create, {**ALL_DAY_BERLIN, "end_date": end_date},
                 fill_end_timezone=True)
    assert exc.param == "end_date"
    assert details(exc) == {"start": "2026-07-14", "end": end_date}


def test_create_all_day_last_representable_day() -> None:
    exc = raises("invalid_field", resolve_create,
                 {**ALL_DAY_BERLIN, "start_date": "9999-12-31"}, fill_end_timezone=True)
    assert exc.param == "start_date"


# ---------------------------------------------------------------------------
# Create: timed

TIMED_BERLIN = {"start_time": "2026-07-14T10:00", "start_timezone": "Europe/Berlin"}
END_BERLIN = {"end_time": "2026-07-14T11:30", "end_timezone": "Europe/Berlin"}


def test_create_timed_with_end() -> None:
    t = resolve_create({**TIMED_BERLIN, **END_BERLIN, "is_all_day": False},
                       fill_end_timezone=True)
    assert t == EventTimes(
        is_all_day=False, start_time=utc(2026, 7, 14, 8), end_time=utc(2026, 7, 14, 9, 30),
        start_timezone="Europe/Berlin", end_timezone="Europe/Berlin", start_date=None,
        end_date=None,
    )
    assert t.start_time.tzinfo is UTC and t.end_time is not None and t.end_time.tzinfo is UTC


def test_create_timed_end_is_read_in_end_timezone() -> None:
    t = resolve_create(
        {**TIMED_BERLIN, "end_time": "2026-07-14T09:00", "end_timezone": "America/New_York"},
        fill_end_timezone=True,
    )
    assert t.end_time == utc(2026, 7, 14, 13)
    assert (t.start_timezone, t.end_timezone) == ("Europe/Berlin", "America/New_York")


@pytest.mark.parametrize(("fill", "end_timezone"), [(True, "Europe/Berlin"), (False, None)])
def test_create_timed_without_end_fills_end_timezone_on_request(
    fill: bool, end_timezone: str | None,
) -> None:
    for fields in (TIMED_BERLIN, {**TIMED_BERLIN, "end_time": None}):
        t = resolve_create(fields, fill_end_timezone=fill)
        assert t.end_time is None
        assert t.end_timezone == end_timezone


def test_create_timed_null_end_with_end_timezone_keeps_the_zone() -> None:
    t = resolve_create({**TIMED_BERLIN, "end_time": None, "end_timezone": "Asia/Tokyo"},
                       fill_end_timezone=False)
    assert (t.end_time, t.end_timezone) == (None, "Asia/Tokyo")


def test_create_timed_explicit_offset_is_not_reinterpreted() -> None:
    t = resolve_create({"start_time": "2026-07-14T10:00+02:00", "start_timezone":
                        "Europe/Berlin"}, fill_end_timezone=True)
    assert t.start_time == utc(2026, 7, 14, 8)


@pytest.mark.parametrize(
    ("fields", "code", "param"),
    [
        ({}, "missing_field", "start_time"),
        ({"title": "x", "end_time": None}, "missing_field", "start_time"),
        ({"is_all_day": False}, "missing_field", "start_time"),
        ({"start_time": "2026-07-14T10:00"}, "field_dependency", "start_timezone"),
        ({"start_timezone": "Europe/Berlin"}, "field_dependency", "start_time"),
        ({**TIMED_BERLIN, "end_time": "2026-07-14T11:00"}, "field_dependency", "end_timezone"),
        ({**TIMED_BERLIN, "end_timezone": "Europe/Berlin"}, "field_dependency", "end_time"),
        ({**TIMED_BERLIN, "start_date": "2026-07-14"}, "field_dependency", "start_date"),
        ({**TIMED_BERLIN, "end_date": "2026-07-15"}, "field_dependency", "end_date"),
        ({"start_date": "2026-07-14"}, "field_dependency", "start_date"),
        ({**TIMED_BERLIN, "start_timezone": "Berlin"}, "invalid_timezone", "start_timezone"),
        ({**TIMED_BERLIN, **END_BERLIN, "end_timezone": "CEST"}, "invalid_timezone",
         "end_timezone"),
        # Zones are judged before the times read in them.
        ({"start_time": "garbage", "start_timezone": "Berlin"}, "invalid_timezone",
         "start_timezone"),
        ({**TIMED_BERLIN, "end_time": "garbage", "end_timezone": "Berlin"}, "invalid_timezone",
         "end_timezone"),
        ({**TIMED_BERLIN, "start_time": "2026-07-14"}, "invalid_time_format", "start_time"),
        ({**TIMED_BERLIN, **END_BERLIN, "end_time": "11:30"}, "invalid_time_format", "end_time"),
        ({**TIMED_BERLIN, "start_time": "2026-03-29T02:30"}, "nonexistent_local_time",
         "start_time"),
        ({**TIMED_BERLIN, **END_BERLIN, "end_time": "2026-07-14T11:30Z"},
         "timezone_offset_mismatch", "end_time"),
        ({**TIMED_BERLIN, "start_time": 5}, "invalid_field", "start_time"),
    ],
)
def test_create_timed_errors(fields: dict[str, Any], code: str, param: str) -> None:
    exc = raises(code, resolve_create, fields, fill_end_timezone=True)
    assert exc.param == param


@pytest.mark.parametrize(
    ("end", "end_zone", "shown_end"),
    [
        ("2026-07-14T10:00", "Europe/Berlin", "2026-07-14T08:00:00Z"),
        ("2026-07-14T09:59:59", "Europe/Berlin", "2026-07-14T07:59:59Z"),
        # Compared as instants: 04:00 in New York is 10:00 in Berlin.
        ("2026-07-14T04:00", "America/New_York", "2026-07-14T08:00:00Z"),
    ],
)
def test_create_timed_end_must_be_after_start(end: str, end_zone: str, shown_end: str) -> None:
    exc = raises("invalid_time_range", resolve_create,
                 {**TIMED_BERLIN, "end_time": end, "end_timezone": end_zone},
                 fill_end_timezone=True)
    assert exc.param == "end_time"
    assert details(exc) == {"start": "2026-07-14T08:00:00Z", "end": shown_end}


def test_create_timed_end_one_microsecond_after_start_is_fine() -> None:
    t = resolve_create({"start_time": "2026-07-14T10:00:00.000001", "start_timezone":
                        "Europe/Berlin", "end_time": "2026-07-14T10:00:00.000002",
                        "end_timezone": "Europe/Berlin"}, fill_end_timezone=True)
    assert t.end_time is not None and t.end_time > t.start_time


# ---------------------------------------------------------------------------
# Update

TIMED = resolve_create({**TIMED_BERLIN, **END_BERLIN}, fill_end_timezone=True)
POINT = resolve_create(TIMED_BERLIN, fill_end_timezone=False)
ALL_DAY = resolve_create({**ALL_DAY_BERLIN, "end_date": "2026-07-17"}, fill_end_timezone=True)


@pytest.mark.parametrize("current", [TIMED, POINT, ALL_DAY])
def test_update_without_time_fields_changes_nothing(current: EventTimes) -> None:
    assert resolve_update(current, {}) is current
    assert resolve_update(current, {"title": "New", "slug": "x"}) is current


def test_update_is_all_day_unchanged_is_a_no_op() -> None:
    assert resolve_update(TIMED, {"is_all_day": False}) == TIMED
    assert resolve_update(ALL_DAY, {"is_all_day": True}) == ALL_DAY


@pytest.mark.parametrize(
    ("start", "zone_name", "start_instant"),
    [
        ("2026-07-14T03:00", "America/New_York", utc(2026, 7, 14, 7)),
        # Another zone, the same end instant.
        ("2026-07-14T10:00", "Europe/London", utc(2026, 7, 14, 9)),
    ],
    ids=["new_york", "london"],
)
def test_update_start_keeps_the_stored_end_and_end_zone(
    start: str, zone_name: str, start_instant: datetime,
) -> None:
    t = resolve_update(TIMED, {"start_time": start, "start_timezone": zone_name})
    assert (t.start_time, t.end_time) == (start_instant, TIMED.end_time)
    # No cascade from start_timezone to end_timezone.
    assert (t.start_timezone, t.end_timezone) == (zone_name, "Europe/Berlin")


def test_update_start_later_keeps_the_end() -> None:
    t = resolve_update(TIMED, {"start_time": "2026-07-14T11:00", "start_timezone":
                               "Europe/Berlin"})
    assert (t.start_time, t.end_time) == (utc(2026, 7, 14, 9), utc(2026, 7, 14, 9, 30))


@pytest.mark.parametrize(
    ("start", "zone_name", "shown_start"),
    [
        ("2026-07-14T11:30", "Europe/Berlin", "2026-07-14T09:30:00Z"),  # onto the end
        ("2026-07-20T15:00", "Europe/Berlin", "2026-07-20T13:00:00Z"),
        # Only the zone changes, but 10:00 in New York is after 11:30 in Berlin.
        ("2026-07-14T10:00", "America/New_York", "2026-07-14T14:00:00Z"),
    ],
)
def test_update_start_onto_or_past_the_stored_end(
    start: str, zone_name: str, shown_start: str,
) -> None:
    exc = raises("invalid_time_range", resolve_update, TIMED,
                 {"start_time": start, "start_timezone": zone_name})
    assert exc.param == "start_time"
    assert details(exc) == {"start": shown_start, "end": "2026-07-14T09:30:00Z"}


def test_update_is_not_reschedule() -> None:
    sent = {"start_time": "2026-07-20T09:00", "start_timezone": "Europe/Berlin"}
    assert resolve_reschedule(TIMED, sent).end_time == utc(2026, 7, 20, 8, 30)
    exc = raises("invalid_time_range", resolve_update, TIMED, sent)
    assert details(exc) == {"start": "2026-07-20T07:00:00Z", "end": "2026-07-14T09:30:00Z"}


def test_update_point_event_stays_a_point() -> None:
    t = resolve_update(POINT, {"start_time": "2026-07-20T15:00", "start_timezone":
                               "Europe/Berlin"})
    assert (t.start_time, t.end_time, t.end_timezone) == (utc(2026, 7, 20, 13), None, None)


def test_update_end_only() -> None:
    t = resolve_update(TIMED, {"end_time": "2026-07-14T13:00", "end_timezone": "Europe/London"})
    assert t.start_time == TIMED.start_time
    assert t.end_time == utc(2026, 7, 14, 12)
    assert (t.start_timezone, t.end_timezone) == ("Europe/Berlin", "Europe/London")


def test_update_both_ends() -> None:
    t = resolve_update(TIMED, {**TIMED_BERLIN, "start_time": "2026-07-15T10:00",
                               "end_time": "2026-07-15T18:00", "end_timezone": "Europe/Berlin"})
    assert (t.start_time, t.end_time) == (utc(2026, 7, 15, 8), utc(2026, 7, 15, 16))


def test_update_null_end_time_clears_end_and_keeps_end_timezone() -> None:
    t = resolve_update(TIMED, {"end_time": None})
    assert (t.end_time, t.end_timezone) == (None, "Europe/Berlin")
    assert t.start_time == TIMED.start_time


def test_update_gives_a_point_event_an_end() -> None:
    t = resolve_update(POINT, {"end_time": "2026-07-14T12:00", "end_timezone": "Europe/Berlin"})
    assert (t.end_time, t.end_timezone) == (utc(2026, 7, 14, 10), "Europe/Berlin")


def test_update_null_end_time_with_end_timezone_sets_the_zone() -> None:
    t = resolve_update(TIMED, {"end_time": None, "end_timezone": "Asia/Tokyo"})
    assert (t.end_time, t.end_timezone) == (None, "Asia/Tokyo")


def test_update_does_not_rejudge_times_it_does_not_change() -> None:
    # A row stored before the range rule existed stays editable.
    legacy = EventTimes(
        is_all_day=False, start_time=utc(2026, 7, 14, 8), end_time=utc(2026, 7, 14, 8),
        start_timezone="Europe/Berlin", end_timezone="Europe/Berlin", start_date=None,
        end_date=None,
    )
    assert resolve_update(legacy, {"is_all_day": False}) == legacy


@pytest.mark.parametrize(
    ("changes", "code", "param"),
    [
        ({"start_time": "2026-07-20T15:00"}, "field_dependency", "start_timezone"),
        ({"start_timezone": "America/New_York"}, "field_dependency", "start_time"),
        ({"end_time": "2026-07-14T12:00"}, "field_dependency", "end_timezone"),
        ({"end_timezone": "Europe/London"}, "field_dependency", "end_time"),
        ({"start_date": "2026-07-14"}, "field_dependency", "start_date"),
        ({"end_date": "2026-07-15"}, "field_dependency", "end_date"),
        ({"is_all_day": False, "start_date": "2026-07-14"}, "field_dependency", "start_date"),
        ({**TIMED_BERLIN, "start_timezone": "Nowhere"}, "invalid_timezone", "start_timezone"),
        ({**END_BERLIN, "end_timezone": "Nowhere"}, "invalid_timezone", "end_timezone"),
        ({**TIMED_BERLIN, "start_time": "2026-07-14T10"}, "invalid_time_format", "start_time"),
        ({**END_BERLIN, "end_time": "2026-03-29T02:30"}, "nonexistent_local_time", "end_time"),
        ({**TIMED_BERLIN, "start_time": "2026-07-14T10:00-04:00"}, "timezone_offset_mismatch",
         "start_time"),
    ],
)
def test_update_timed_errors(changes: dict[str, Any], code: str, param: str) -> None:
    exc = raises(code, resolve_update, TIMED, changes)
    assert exc.param == param


def test_update_end_before_start() -> None:
    exc = raises("invalid_time_range", resolve_update, TIMED,
                 {"end_time": "2026-07-14T09:00", "end_timezone": "Europe/Berlin"})
    assert exc.param == "end_time"
    assert details(exc) == {"start": "2026-07-14T08:00:00Z", "end": "2026-07-14T07:00:00Z"}


def test_update_start_after_end_when_both_sent() -> None:
    exc = raises("invalid_time_range", resolve_update, TIMED,
                 {**TIMED_BERLIN, "start_time": "2026-07-14T12:00", **END_BERLIN})
    assert exc.param == "end_time"
    assert details(exc) == {"start": "2026-07-14T10:00:00Z", "end": "2026-07-14T09:30:00Z"}


# Switching timed -> all-day


def test_update_to_all_day() -> None:
    # A timed end is an instant, not a day to keep: the event lasts one day, as on create.
    t = resolve_update(TIMED, {"is_all_day": True, "start_date": "2026-07-20"})
    assert t == EventTimes(
        is_all_day=True, start_time=utc(2026, 7, 19, 22), end_time=utc(2026, 7, 20, 22),
        start_timezone="Europe/Berlin", end_timezone="Europe/Berlin",
        start_date=date(2026, 7, 20), end_date=date(2026, 7, 21),
    )


def test_update_to_all_day_with_zone_and_end_date() -> None:
    t = resolve_update(TIMED, {"is_all_day": True, "start_date": "2026-07-20",
                               "end_date": "2026-07-23", "start_timezone": "Asia/Tokyo"})
    assert (t.start_date, t.end_date) == (date(2026, 7, 20), date(2026, 7, 23))
    assert (t.start_time, t.end_time) == (utc(2026, 7, 19, 15), utc(2026, 7, 22, 15))
    # end_timezone is left as it was.
    assert (t.start_timezone, t.end_timezone) == ("Asia/Tokyo", "Europe/Berlin")


def test_update_point_to_all_day_keeps_missing_end_timezone() -> None:
    t = resolve_update(POINT, {"is_all_day": True, "start_date": "2026-07-20"})
    assert t.end_timezone is None
    assert t.end_date == date(2026, 7, 21)


@pytest.mark.parametrize(
    ("changes", "code", "param"),
    [
        ({"is_all_day": True}, "missing_field", "start_date"),
        ({"is_all_day": True, "start_timezone": "Europe/Berlin"}, "missing_field", "start_date"),
        ({"is_all_day": True, "end_date": "2026-07-20"}, "missing_field", "start_date"),
        ({"is_all_day": True, "start_date": "2026-07-20", **TIMED_BERLIN}, "field_dependency",
         "start_time"),
        ({"is_all_day": True, "start_date": "2026-07-20", "end_time": None}, "field_dependency",
         "end_time"),
        ({"is_all_day": True, "start_date": "2026-07-20", **END_BERLIN}, "field_dependency",
         "end_time"),
        ({"is_all_day": True, "start_date": "2026-07-20", "end_date": "2026-07-20"},
         "invalid_time_range", "end_date"),
        ({"is_all_day": True, "start_date": "07/20/2026"}, "invalid_time_format", "start_date"),
        ({"is_all_day": True, "start_date": "2026-07-20", "start_timezone": "X"},
         "invalid_timezone", "start_timezone"),
    ],
)
def test_update_to_all_day_errors(changes: dict[str, Any], code: str, param: str) -> None:
    exc = raises(code, resolve_update, TIMED, changes)
    assert exc.param == param


# Updating all-day events


@pytest.mark.parametrize(
    ("start_date", "start"), [("2026-07-16", utc(2026, 7, 15, 22)),
                              ("2026-07-10", utc(2026, 7, 9, 22))],
)
def test_update_all_day_new_start_date_keeps_the_end_date(start_date: str, start: datetime) -> None:
    t = resolve_update(ALL_DAY, {"start_date": start_date})
    assert (t.start_date, t.end_date) == (date.fromisoformat(start_date), date(2026, 7, 17))
    assert (t.start_time, t.end_time) == (start, ALL_DAY.end_time)


def test_update_all_day_kept_end_date_is_still_a_midnight_across_dst() -> None:
    autumn = resolve_create({**ALL_DAY_BERLIN, "start_date": "2026-10-20", "end_date":
                             "2026-10-27"}, fill_end_timezone=True)
    t = resolve_update(autumn, {"start_date": "2026-10-24"})
    assert (t.start_date, t.end_date) == (date(2026, 10, 24), date(2026, 10, 27))
    # Three calendar days, one of them 25 hours long.
    assert (t.start_time, t.end_time) == (utc(2026, 10, 23, 22), utc(2026, 10, 26, 23))


def test_update_all_day_end_date_only() -> None:
    t = resolve_update(ALL_DAY, {"end_date": "2026-07-15"})
    assert (t.start_date, t.end_date) == (date(2026, 7, 14), date(2026, 7, 15))
    assert t.end_time == utc(2026, 7, 14, 22)


def test_update_all_day_start_timezone_alone_moves_the_midnights() -> None:
    t = resolve_update(ALL_DAY, {"start_timezone": "America/New_York"})
    assert (t.start_date, t.end_date) == (ALL_DAY.start_date, ALL_DAY.end_date)
    assert (t.start_time, t.end_time) == (utc(2026, 7, 14, 4), utc(2026, 7, 17, 4))
    assert (t.start_timezone, t.end_timezone) == ("America/New_York", "Europe/Berlin")


def test_update_all_day_end_timezone_alone() -> None:
    t = resolve_update(ALL_DAY, {"end_timezone": "Asia/Tokyo"})
    assert t.end_timezone == "Asia/Tokyo"
    assert (t.start_time, t.end_time) == (ALL_DAY.start_time, ALL_DAY.end_time)


def test_update_all_day_row_without_dates_derives_them_from_its_instants() -> None:
    row = EventTimes(
        is_all_day=True, start_time=utc(2026, 7, 13, 22), end_time=utc(2026, 7, 15, 22),
        start_timezone="Europe/Berlin", end_timezone="Europe/Berlin", start_date=None,
        end_date=None,
    )
    t = resolve_update(row, {"start_date": "2026-07-15"})
    assert (t.start_date, t.end_date) == (date(2026, 7, 15), date(2026, 7, 16))


@pytest.mark.parametrize(
    ("changes", "code", "param", "range_"),
    [
        ({"start_time": "2026-07-14T10:00", "start_timezone": "Europe/Berlin"},
         "field_dependency", "start_time", None),
        ({"end_time": "2026-07-14T10:00", "end_timezone": "Europe/Berlin"},
         "field_dependency", "end_time", None),
        ({"end_time": None}, "field_dependency", "end_time", None),
        ({"end_date": "2026-07-14"}, "invalid_time_range", "end_date",
         {"start": "2026-07-14", "end": "2026-07-14"}),
        ({"start_date": "2026-07-20", "end_date": "2026-07-19"}, "invalid_time_range",
         "end_date", {"start": "2026-07-20", "end": "2026-07-19"}),
        # The stored end_date stays: a start_date onto or past it is refused.
        ({"start_date": "2026-07-17"}, "invalid_time_range", "start_date",
         {"start": "2026-07-17", "end": "2026-07-17"}),
        ({"start_date": "2026-08-01"}, "invalid_time_range", "start_date",
         {"start": "2026-08-01", "end": "2026-07-17"}),
        ({"end_date": "2026-7-20"}, "invalid_time_format", "end_date", None),
        ({"start_timezone": "Nowhere"}, "invalid_timezone", "start_timezone", None),
        ({"end_timezone": "Nowhere"}, "invalid_timezone", "end_timezone", None),
    ],
)
def test_update_all_day_errors(
    changes: dict[str, Any], code: str, param: str, range_: dict[str, str] | None,
) -> None:
    exc = raises(code, resolve_update, ALL_DAY, changes)
    assert exc.param == param
    if range_ is not None:
        assert details(exc) == range_


# Switching all-day -> timed


def test_update_to_timed_keeps_the_end_instant() -> None:
    t = resolve_update(ALL_DAY, {"is_all_day": False, **TIMED_BERLIN})
    assert t.start_time == utc(2026, 7, 14, 8)
    assert t.end_time == ALL_DAY.end_time == utc(2026, 7, 16, 22)  # its last midnight
    assert (t.start_date, t.end_date) == (None, None)
    assert (t.start_timezone, t.end_timezone) == ("Europe/Berlin", "Europe/Berlin")
    assert not t.is_all_day


def test_update_to_timed_with_end_or_without() -> None:
    t = resolve_update(ALL_DAY, {"is_all_day": False, **TIMED_BERLIN, **END_BERLIN})
    assert (t.start_time, t.end_time) == (utc(2026, 7, 14, 8), utc(2026, 7, 14, 9, 30))
    t = resolve_update(ALL_DAY, {"is_all_day": False, **TIMED_BERLIN, "end_time": None})
    assert (t.end_time, t.end_timezone) == (None, "Europe/Berlin")


@pytest.mark.parametrize(
    ("changes", "code", "param"),
    [
        ({"is_all_day": False}, "missing_field", "start_time"),
        ({"is_all_day": False, **END_BERLIN}, "missing_field", "start_time"),
        ({"is_all_day": False, "start_time": "2026-07-14T10:00"}, "field_dependency",
         "start_timezone"),
        ({"is_all_day": False, "start_timezone": "Europe/Berlin"}, "field_dependency",
         "start_time"),
        ({"is_all_day": False, **TIMED_BERLIN, "start_date": "2026-07-14"}, "field_dependency",
         "start_date"),
        ({"is_all_day": False, **TIMED_BERLIN, "end_date": "2026-07-15"}, "field_dependency",
         "end_date"),
        ({"is_all_day": False, **TIMED_BERLIN, "end_time": "2026-07-14T11:00"},
         "field_dependency", "end_timezone"),
        ({"is_all_day": False, **TIMED_BERLIN, "end_timezone": "Europe/Berlin"},
         "field_dependency", "end_time"),
        ({"is_all_day": False, **TIMED_BERLIN, "end_time": "2026-07-14T09:00",
          "end_timezone": "Europe/Berlin"}, "invalid_time_range", "end_time"),
        # The kept end is the last midnight, 2026-07-17T00:00 in Berlin.
        ({"is_all_day": False, "start_time": "2026-07-17T00:00", "start_timezone":
          "Europe/Berlin"}, "invalid_time_range", "start_time"),
        ({"is_all_day": "yes", **TIMED_BERLIN}, "invalid_field", "is_all_day"),
    ],
)
def test_update_to_timed_errors(changes: dict[str, Any], code: str, param: str) -> None:
    exc = raises(code, resolve_update, ALL_DAY, changes)
    assert exc.param == param


# ---------------------------------------------------------------------------
# Reschedule

RESCHEDULE = {"start_time": "2026-07-20T09:00", "start_timezone": "Europe/Berlin"}


def test_reschedule_keeps_duration() -> None:
    t = resolve_reschedule(TIMED, RESCHEDULE)
    assert (t.start_time, t.end_time) == (utc(2026, 7, 20, 7), utc(2026, 7, 20, 8, 30))
    assert (t.start_timezone, t.end_timezone) == ("Europe/Berlin", "Europe/Berlin")


def test_reschedule_keeps_end_timezone_when_start_zone_changes() -> None:
    t = resolve_reschedule(TIMED, {"start_time": "2026-07-20T09:00",
                                   "start_timezone": "America/New_York"})
    assert (t.start_time, t.end_time) == (utc(2026, 7, 20, 13), utc(2026, 7, 20, 14, 30))
    assert (t.start_timezone, t.end_timezone) == ("America/New_York", "Europe/Berlin")


def test_reschedule_point_stays_point() -> None:
    t = resolve_reschedule(POINT, RESCHEDULE)
    assert (t.start_time, t.end_time) == (utc(2026, 7, 20, 7), None)


def test_reschedule_with_new_end() -> None:
    t = resolve_reschedule(TIMED, {**RESCHEDULE, "end_time": "2026-07-20T12:00",
                                   "end_timezone": "Europe/London"})
    assert (t.end_time, t.end_timezone) == (utc(2026, 7, 20, 11), "Europe/London")


def test_reschedule_null_end_removes_end() -> None:
    t = resolve_reschedule(TIMED, {**RESCHEDULE, "end_time": None})
    assert t.end_time is None


def test_reschedule_all_day_becomes_timed_keeping_duration() -> None:
    one_day = resolve_create(ALL_DAY_BERLIN, fill_end_timezone=True)
    t = resolve_reschedule(one_day, RESCHEDULE)
    assert not t.is_all_day
    assert (t.start_date, t.end_date) == (None, None)
    assert (t.start_time, t.end_time) == (utc(2026, 7, 20, 7), utc(2026, 7, 21, 7))
    assert t.end_timezone == "Europe/Berlin"


def test_reschedule_ignores_other_keys() -> None:
    assert resolve_reschedule(TIMED, {**RESCHEDULE, "is_all_day": True, "start_date": "x"}) == (
        resolve_reschedule(TIMED, RESCHEDULE))


@pytest.mark.parametrize(
    ("fields", "code", "param"),
    [
        ({}, "missing_field", "start_time"),
        ({"start_timezone": "Europe/Berlin"}, "missing_field", "start_time"),
        ({"start_time": "2026-07-20T09:00"}, "missing_field", "start_timezone"),
        ({**RESCHEDULE, "end_time": "2026-07-20T10:00"}, "field_dependency", "end_timezone"),
        ({**RESCHEDULE, "end_timezone": "Europe/Berlin"}, "field_dependency", "end_time"),
        ({**RESCHEDULE, "start_timezone": "Nowhere"}, "invalid_timezone", "start_timezone"),
        ({**RESCHEDULE, "end_time": "2026-07-20T10:00", "end_timezone": "Nowhere"},
         "invalid_timezone", "end_timezone"),
        ({**RESCHEDULE, "start_time": "2026-07-20"}, "invalid_time_format", "start_time"),
        ({**RESCHEDULE, "start_time": "2026-03-29T02:30"}, "nonexistent_local_time",
         "start_time"),
        ({**RESCHEDULE, "end_time": "2026-07-20T10:00+01:00", "end_timezone": "Europe/Berlin"},
         "timezone_offset_mismatch", "end_time"),
    ],
)
def test_reschedule_errors(fields: dict[str, Any], code: str, param: str) -> None:
    exc = raises(code, resolve_reschedule, TIMED, fields)
    assert exc.param == param


def test_reschedule_end_before_start() -> None:
    exc = raises("invalid_time_range", resolve_reschedule, TIMED,
                 {**RESCHEDULE, "end_time": "2026-07-20T09:00", "end_timezone": "Europe/Berlin"})
    assert exc.param == "end_time"
    assert details(exc) == {"start": "2026-07-20T07:00:00Z", "end": "2026-07-20T07:00:00Z"}


# ---------------------------------------------------------------------------
# Properties, over every zone


@functools.cache
def _transitions(name: str, year: int) -> tuple[tuple[datetime, timedelta, timedelta], ...]:
    """(instant, offset before, offset after) of the offset changes in `year`: test
    data only, to aim examples at gaps and folds."""
    tz = ZoneInfo(name)

    def offset_at(seconds: int) -> timedelta:
        offset = (EPOCH + timedelta(seconds=seconds)).astimezone(tz).utcoffset()
        assert offset is not None
        return offset

    start = int((datetime(year, 1, 1, tzinfo=UTC) - EPOCH).total_seconds())
    step = 3 * 86400
    found = []
    for lo in range(start, start + 366 * 86400, step):
        hi = lo + step
        before, after = offset_at(lo), offset_at(hi)
        if before == after:
            continue
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if offset_at(mid) == before else (lo, mid)
        found.append((EPOCH + timedelta(seconds=hi), before, offset_at(hi)))
    return tuple(found)


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
ZONES = st.sampled_from(ZONE_NAMES)
NAIVE = st.datetimes(min_value=datetime(1970, 1, 1), max_value=datetime(2100, 12, 31, 23, 59))
NEAR = st.integers(min_value=-2 * 3600, max_value=2 * 3600)
# One example in four anywhere in the range, the rest near an offset change.
ANYWHERE = st.integers(min_value=0, max_value=3).map(lambda n: n == 0)
MICROS = st.sampled_from([0, 0, 0, 1, 500_000, 999_999])


def _zone_and_changes(draw: st.DrawFn
                      ) -> tuple[ZoneInfo, tuple[tuple[datetime, timedelta, timedelta], ...]]:
    """A zone drawn, and its offset changes in a year drawn from 1970 to 2100."""
    tz = ZoneInfo(draw(ZONES))
    year = draw(st.integers(min_value=1970, max_value=2100))
    return tz, _transitions(tz.key, year)


@st.composite
def zone_and_wall(draw: st.DrawFn) -> tuple[ZoneInfo, datetime]:
    """A zone and a naive wall-clock time, most within two hours of an offset change."""
    tz, changes = _zone_and_changes(draw)
    if not changes or draw(ANYWHERE):
        return tz, draw(NAIVE)
    instant, before, after = draw(st.sampled_from(changes))
    base = (instant + draw(st.sampled_from([before, after]))).replace(tzinfo=None)
    return tz, base + timedelta(seconds=draw(NEAR), microseconds=draw(MICROS))


@st.composite
def zone_and_instant(draw: st.DrawFn) -> tuple[ZoneInfo, datetime]:
    """A zone and a UTC instant, most within two hours of an offset change."""
    tz, changes = _zone_and_changes(draw)
    if not changes or draw(ANYWHERE):
        return tz, draw(NAIVE).replace(tzinfo=UTC)
    instant = draw(st.sampled_from(changes))[0]
    return tz, instant + timedelta(seconds=draw(NEAR), microseconds=draw(MICROS))


def _offset_of(aware: datetime) -> timedelta:
    offset = aware.utcoffset()
    assert offset is not None
    return offset


def _in_gap(wall: datetime, tz: ZoneInfo) -> bool:
    # PEP 495: in a gap fold=0 reads the offset before the change, fold=1 the
    # later (larger) one; in a fold it is the other way round.
    return _offset_of(wall.replace(tzinfo=tz, fold=0)) < _offset_of(wall.replace(tzinfo=tz, fold=1))


def _offset_text(offset: timedelta, *, colon: bool = True) -> str:
    seconds = int(offset.total_seconds())
    sign = "-" if seconds < 0 else "+"
    hours, rest = divmod(abs(seconds), 3600)
    minutes, seconds = divmod(rest, 60)
    sep = ":" if colon else ""
    text = f"{sign}{hours:02d}{sep}{minutes:02d}"
    return f"{text}:{seconds:02d}" if seconds else text


@settings(max_examples=300, deadline=None)
@given(zone_and_wall(), st.sampled_from(["T", " "]))
def test_property_naive_time_round_trips_or_is_in_a_gap(
    case: tuple[ZoneInfo, datetime], sep: str,
) -> None:
    tz, wall = case
    text = wall.isoformat(sep=sep)
    try:
        instant = parse_time(text, tz, param="start_time")
    except ApiError as exc:
        assert exc.code == "nonexistent_local_time", (exc.code, exc.details)
        assert _in_gap(wall, tz)
        gap = details(exc)
        assert gap["value"] == text
        gap_from = datetime.fromisoformat(gap["gap_from"])
        gap_to = datetime.fromisoformat(gap["gap_to"])
        # Two spellings of the one instant the clocks jump, bracketing the wall time.
        assert gap_from == gap_to
        assert gap_from.replace(tzinfo=None) <= wall < gap_to.replace(tzinfo=None)
        assert gap_from.utcoffset() == (gap_from - timedelta(seconds=1)).astimezone(tz).utcoffset()
        assert gap_to.utcoffset() == gap_to.astimezone(tz).utcoffset()
    else:
        assert not _in_gap(wall, tz)
        assert instant.tzinfo is UTC
        assert instant.astimezone(tz).replace(tzinfo=None) == wall
        # In a fold, the earlier instant (fold=0).
        assert instant == wall.replace(tzinfo=tz, fold=0).astimezone(UTC)


@settings(max_examples=300, deadline=None)
@given(zone_and_instant(), st.booleans(), st.sampled_from(["T", " "]))
def test_property_wall_clock_with_its_offset_round_trips(
    case: tuple[ZoneInfo, datetime], colon: bool, sep: str,
) -> None:
    tz, instant = case
    local = instant.astimezone(tz)
    offset = _offset_of(local)
    # Offsets with seconds (local mean time) cannot be written as ±HH:MM.
    assume(offset % timedelta(minutes=1) == timedelta(0))
    text = local.replace(tzinfo=None).isoformat(sep=sep) + _offset_text(offset, colon=colon)
    assert parse_time(text, tz, param="start_time") == instant
    if not offset:
        zulu = local.replace(tzinfo=None).isoformat(sep=sep) + "Z"
        assert parse_time(zulu, tz, param="start_time") == instant


@settings(max_examples=300, deadline=None)
@given(zone_and_instant(), st.integers(min_value=-23 * 60 - 59, max_value=23 * 60 + 59),
       st.booleans())
def test_property_wrong_offset_is_a_mismatch(
    case: tuple[ZoneInfo, datetime], minutes: int, near: bool,
) -> None:
    tz, instant = case
    local = instant.astimezone(tz)
    wall = local.replace(tzinfo=None, fold=0)
    valid = [_offset_of(wall.replace(tzinfo=tz, fold=f)) for f in (0, 1)]
    real = _offset_of(local)
    assert real in valid
    # Half the time a near miss of the real offset, else anything writable.
    wrong = real + timedelta(minutes=minutes % 121 - 60) if near else timedelta(minutes=minutes)
    wrong = wrong // timedelta(minutes=1) * timedelta(minutes=1)
    assume(wrong not in valid and abs(wrong) < timedelta(hours=24))
    text = wall.isoformat() + _offset_text(wrong)
    exc = raises("timezone_offset_mismatch", parse_time, text, tz, param="end_time")
    assert exc.param == "end_time"
    shown = details(exc)
    assert shown["value"] == text
    assert shown["expected_offset"] == _offset_text(valid[0])
    assert _offset_text(real) in shown["valid_offsets"]
    assert len(shown["valid_offsets"]) == len(set(valid))


# ---------------------------------------------------------------------------
# The wire format of instants, over the whole accepted range

_RFC3339_UTC = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z", re.ASCII)


@settings(max_examples=400, deadline=None)
@given(
    wall=st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59)),
    name=st.sampled_from(sorted(available_timezones() - {"localtime", "posixrules", "Factory"})),
)
def test_every_accepted_time_is_written_as_rfc3339(wall: datetime, name: str) -> None:
    """Whatever time the API accepts, the instant it answers with is RFC 3339 with a
    four-digit year (year 1 in Paris is 0001-01-01T00:20:39Z, not 1-01-01T...), and
    reads back as the same instant."""
    text = wall.isoformat(timespec="seconds")
    try:
        instant = parse_time(text, ZoneInfo(name), param="start_time")
    except ApiError as exc:  # refused: only a gap, or an instant outside years 1-9999
        assert exc.code in ("nonexistent_local_time", "invalid_field")
        return
    written = Timestamp_serialize(instant)
    assert _RFC3339_UTC.fullmatch(written), written
    assert datetime.fromisoformat(written) == instant.replace(microsecond=0)


def test_the_earliest_and_latest_instants() -> None:
    paris = ZoneInfo("Europe/Paris")
    assert Timestamp_serialize(parse_time("0001-01-01T00:30", paris, param="p")) == (
        "0001-01-01T00:20:39Z")
    assert Timestamp_serialize(datetime(1, 1, 1, tzinfo=UTC)) == "0001-01-01T00:00:00Z"
    assert Timestamp_serialize(datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)) == (
        "9999-12-31T23:59:59Z")
    assert compact_utc(datetime(12, 3, 4, 5, 6, 7, tzinfo=UTC)) == "00120304T050607Z"


@pytest.mark.slow
@settings(max_examples=500, deadline=None)
@given(st.one_of(
    st.from_regex(TIME_PATTERN, fullmatch=True),
    st.datetimes().map(lambda d: d.isoformat()),
    st.text(alphabet="0123456789-:T Zz+.", max_size=30),
))
def test_the_advertised_time_pattern_is_the_shape_checked(text: str) -> None:
    """The documents' pattern admits exactly the shapes parse_time reads (what it then
    refuses is a day, time or offset that does not exist, or a DST gap)."""
    shaped = re.fullmatch(TIME_PATTERN, text, re.ASCII) is not None
    try:
        parse_time(text, BERLIN, param="start_time")
    except ApiError as exc:
        assert (exc.code == "invalid_time_format") == (not shaped), (text, exc.code)
    else:
        assert shaped, text
    date_part = text[:10]
    try:
        parse_date(date_part, param="start_date")
    except ApiError as exc:
        assert (exc.code == "invalid_time_format") == (
            re.fullmatch(DATE_PATTERN, date_part, re.ASCII) is None), date_part
