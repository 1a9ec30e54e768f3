"""domain.recurrence: RRULE validation and bounded, zone-aware expansion (pure unit tests)."""

from __future__ import annotations

import itertools
import time
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from dateutil.rrule import rrulestr  # type: ignore[import-untyped]
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.errors import ApiError
from domain import recurrence
from domain.recurrence import MAX_RULE_LENGTH, Expansion, Occurrence, check, occurrences

NY = ZoneInfo("America/New_York")
RFC_START = datetime(1997, 9, 2, 9, 0)  # DTSTART;TZID=America/New_York:19970902T090000
START = datetime(2026, 1, 1, 9, 0)  # a Thursday

# RFC 5545 section 3.8.5.3, every example that is not MINUTELY/SECONDLY (the rule only,
# without its DTSTART or EXDATE), started at the RFC's 1997-09-02 09:00 New York.
RFC_EXAMPLES = [
    "FREQ=DAILY;COUNT=10",
    "FREQ=DAILY;UNTIL=19971224T000000Z",
    "FREQ=DAILY;INTERVAL=2",
    "FREQ=DAILY;INTERVAL=10;COUNT=5",
    "FREQ=YEARLY;UNTIL=20000131T140000Z;BYMONTH=1;BYDAY=SU,MO,TU,WE,TH,FR,SA",
    "FREQ=DAILY;UNTIL=20000131T140000Z;BYMONTH=1",
    "FREQ=WEEKLY;COUNT=10",
    "FREQ=WEEKLY;UNTIL=19971224T000000Z",
    "FREQ=WEEKLY;INTERVAL=2;WKST=SU",
    "FREQ=WEEKLY;UNTIL=19971007T000000Z;WKST=SU;BYDAY=TU,TH",
    "FREQ=WEEKLY;COUNT=10;WKST=SU;BYDAY=TU,TH",
    "FREQ=WEEKLY;INTERVAL=2;UNTIL=19971224T000000Z;WKST=SU;BYDAY=MO,WE,FR",
    "FREQ=WEEKLY;INTERVAL=2;COUNT=8;WKST=SU;BYDAY=TU,TH",
    "FREQ=MONTHLY;COUNT=10;BYDAY=1FR",
    "FREQ=MONTHLY;UNTIL=19971224T000000Z;BYDAY=1FR",
    "FREQ=MONTHLY;INTERVAL=2;COUNT=10;BYDAY=1SU,-1SU",
    "FREQ=MONTHLY;COUNT=6;BYDAY=-2MO",
    "FREQ=MONTHLY;BYMONTHDAY=-3",
    "FREQ=MONTHLY;COUNT=10;BYMONTHDAY=2,15",
    "FREQ=MONTHLY;COUNT=10;BYMONTHDAY=1,-1",
    "FREQ=MONTHLY;INTERVAL=18;COUNT=10;BYMONTHDAY=10,11,12,13,14,15",
    "FREQ=MONTHLY;INTERVAL=2;BYDAY=TU",
    "FREQ=YEARLY;COUNT=10;BYMONTH=6,7",
    "FREQ=YEARLY;INTERVAL=2;COUNT=10;BYMONTH=1,2,3",
    "FREQ=YEARLY;INTERVAL=3;COUNT=10;BYYEARDAY=1,100,200",
    "FREQ=YEARLY;BYDAY=20MO",
    "FREQ=YEARLY;BYWEEKNO=20;BYDAY=MO",
    "FREQ=YEARLY;BYMONTH=3;BYDAY=TH",
    "FREQ=YEARLY;BYDAY=TH;BYMONTH=6,7,8",
    "FREQ=MONTHLY;BYDAY=FR;BYMONTHDAY=13",
    "FREQ=MONTHLY;BYDAY=SA;BYMONTHDAY=7,8,9,10,11,12,13",
    "FREQ=YEARLY;INTERVAL=4;BYMONTH=11;BYDAY=TU;BYMONTHDAY=2,3,4,5,6,7,8",
    "FREQ=MONTHLY;COUNT=3;BYDAY=TU,WE,TH;BYSETPOS=3",
    "FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-2",
    "FREQ=HOURLY;INTERVAL=3;UNTIL=19970902T170000Z",
    "FREQ=WEEKLY;INTERVAL=2;COUNT=4;BYDAY=TU,SU;WKST=MO",
    "FREQ=WEEKLY;INTERVAL=2;COUNT=4;BYDAY=TU,SU;WKST=SU",
    "FREQ=MONTHLY;BYMONTHDAY=15,30;COUNT=5",
]

SPARSE_REAL = [
    "FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=29",
    "FREQ=MONTHLY;BYDAY=2TU",
    "FREQ=MONTHLY;BYDAY=-1FR",
    "FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-1",
    "FREQ=MONTHLY;BYDAY=FR;BYMONTHDAY=13",
    "FREQ=YEARLY;BYMONTH=2;BYDAY=5MO",
    "FREQ=YEARLY;INTERVAL=3;BYMONTH=2;BYDAY=5MO",
    "FREQ=DAILY;BYMONTH=2;BYMONTHDAY=29",
    "FREQ=DAILY;BYMONTH=2;BYMONTHDAY=29;BYDAY=MO",
    "FREQ=HOURLY;BYMONTH=2;BYMONTHDAY=29",
]

# One never-occurring rule per FREQ at least; the RFC-valid ways each FREQ can be empty.
IMPOSSIBLE = [
    "FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=30",
    "FREQ=YEARLY;BYMONTH=4;BYMONTHDAY=31",
    "FREQ=YEARLY;BYYEARDAY=366;BYMONTH=1",
    "FREQ=MONTHLY;BYMONTH=2;BYMONTHDAY=30",
    "FREQ=MONTHLY;BYMONTH=2;BYMONTHDAY=-30",
    "FREQ=WEEKLY;BYDAY=MO;BYSETPOS=2",
    "FREQ=WEEKLY;BYMONTH=2;BYDAY=MO,TU;BYSETPOS=3",
    "FREQ=DAILY;BYMONTH=2;BYMONTHDAY=30",
    "FREQ=DAILY;INTERVAL=7;BYDAY=MO",  # from a Thursday: always a Thursday
    "FREQ=DAILY;BYHOUR=9;BYSETPOS=2",
    "FREQ=HOURLY;BYMONTH=2;BYMONTHDAY=30",
    "FREQ=HOURLY;BYMINUTE=0;BYSETPOS=2",
    "FREQ=HOURLY;BYHOUR=3;BYMONTH=11;BYMONTHDAY=31",
]


def _rejected(rule: object, start: datetime = START, *, param: str = "recurrence_rule") -> ApiError:
    with pytest.raises(ApiError) as info:
        check(rule, start, NY, param=param)  # type: ignore[arg-type]
    err = info.value
    assert err.code == "invalid_recurrence_rule"
    assert err.status == 400
    assert err.param == param
    return err


def _utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)  # type: ignore[misc]


def _expand(
    rule: str, start: datetime, window_start: datetime, window_end: datetime, limit: int = 1000
) -> Expansion:
    return occurrences(rule, start, NY, window_start, window_end, limit=limit)


# -- check: accepted -----------------------------------------------------------------


@pytest.mark.parametrize("rule", RFC_EXAMPLES)
def test_rfc_5545_examples_are_accepted(rule: str) -> None:
    check(rule, RFC_START, NY)


@pytest.mark.parametrize("rule", SPARSE_REAL)
def test_sparse_real_rules_are_accepted(rule: str) -> None:
    check(rule, START, NY)


def test_leap_day_rules_are_accepted_across_the_non_leap_2100() -> None:
    # From March 2097 the next 29 February is in 2104, eight years on.
    check("FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=29", datetime(2097, 3, 1, 9), NY)
    check("FREQ=DAILY;BYMONTH=2;BYMONTHDAY=29", datetime(2097, 3, 1, 9), NY)
    check("FREQ=HOURLY;BYMONTH=2;BYMONTHDAY=29", datetime(2097, 3, 1, 9), NY)


@pytest.mark.parametrize(
    "rule",
    [
        "FREQ=WEEKLY;COUNT=1",
        "FREQ=DAILY;COUNT=2147483647",
        "FREQ=WEEKLY;UNTIL=20260108T140000Z",  # exactly the second start, 09:00 EST
        "FREQ=WEEKLY;UNTIL=20260101T140000Z",  # exactly the first start
        "FREQ=WEEKLY;UNTIL=20260101",  # a date: the whole local day
        "FREQ=WEEKLY;UNTIL=20260101T090000",  # a floating (wall-clock) time
        "FREQ=DAILY;INTERVAL=3",
        "FREQ=YEARLY;INTERVAL=1000",
        "FREQ=DAILY;INTERVAL=365000",
        "FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=1,-1",
        "FREQ=YEARLY;BYSETPOS=-1;BYMONTH=12;BYDAY=MO,TU,WE,TH,FR",
        "RRULE:FREQ=WEEKLY",
        "rrule:FREQ=WEEKLY",
        "RRule:freq=weekly;byday=mo,tu;wkst=su",
        "freq=monthly;byday=+2tu,-1fr",
        "FREQ=DAILY;BYHOUR=9,12,17;BYMINUTE=0,30",
        "FREQ=HOURLY;INTERVAL=4;BYHOUR=1,5,9",
        "FREQ=YEARLY;BYWEEKNO=53;BYDAY=TH",
        "FREQ=YEARLY;BYYEARDAY=-1",
    ],
)
def test_other_valid_rules_are_accepted(rule: str) -> None:
    check(rule, START, NY)


def _padded(length: int) -> str:
    """A valid rule of exactly `length` characters: repeated BYSETPOS values."""
    rule = "FREQ=DAILY;BYHOUR=9;BYSETPOS=1"
    rule += ",1" * ((length - len(rule)) // 2)
    return rule.replace("=1", "=01", 1) if len(rule) < length else rule


def test_a_rule_of_max_length_is_accepted_and_one_more_character_is_not() -> None:
    rule = _padded(MAX_RULE_LENGTH)
    assert len(rule) == MAX_RULE_LENGTH
    check(rule, START, NY)
    longer = _padded(MAX_RULE_LENGTH + 1)
    assert len(longer) == MAX_RULE_LENGTH + 1
    assert "longer than 8192" in _rejected(longer).message


# -- check: rejected -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("rule", "fragment"),
    [
        ("FREQ=DAILY;" + "BYHOUR=9;" * 1000, "longer than"),
        ("FREQ=DAILY\nFREQ=WEEKLY", "exactly one RRULE"),
        ("RRULE:FREQ=DAILY\r\nRRULE:FREQ=WEEKLY", "exactly one RRULE"),
        ("DTSTART:20260101T090000\nRRULE:FREQ=DAILY", "exactly one RRULE"),
        ("DTSTART:20260101T090000", "DTSTART"),
        ("EXDATE:20260101T090000", "DTSTART"),
        ("RRULE;X-A=B:FREQ=DAILY", "DTSTART"),
        ("garbage", "NAME=VALUE"),
        ("", "empty"),
        ("RRULE:", "empty"),
        ("FREQ=DAILY;", "NAME=VALUE"),
        ("FREQ=DAILY;;COUNT=2", "NAME=VALUE"),
        (" FREQ=DAILY", "Unsupported"),
        ("=DAILY", "NAME=VALUE"),
        ("FREQ=DAILY;COUNT==2", "COUNT"),
        ("COUNT=5", "no FREQ"),
        ("INTERVAL=2;BYDAY=MO", "no FREQ"),
        ("FREQ=FORTNIGHTLY", "Unknown FREQ"),
        ("FREQ=SECONDLY", "SECONDLY"),
        ("FREQ=MINUTELY;INTERVAL=30", "MINUTELY"),
        ("FREQ=DAILY;FREQ=DAILY", "more than once"),
        ("FREQ=DAILY;COUNT=2;COUNT=3", "more than once"),
        ("FREQ=DAILY;BYEASTER=0", "Unsupported"),
        ("FREQ=DAILY;X-NAME=1", "Unsupported"),
        ("FREQ=DAILY;INTERVAL=0", "INTERVAL"),
        ("FREQ=DAILY;INTERVAL=-1", "INTERVAL"),
        ("FREQ=DAILY;INTERVAL=+2", "INTERVAL"),
        ("FREQ=DAILY;INTERVAL=\uff12", "INTERVAL"),  # a fullwidth digit
        ("FREQ=YEARLY;INTERVAL=1001", "INTERVAL"),
        ("FREQ=DAILY;INTERVAL=99999999999", "INTERVAL"),
        ("FREQ=DAILY;COUNT=0", "COUNT"),
        ("FREQ=DAILY;COUNT=2147483648", "COUNT"),
        ("FREQ=DAILY;COUNT=2;UNTIL=20270101T000000Z", "COUNT and UNTIL"),
        ("FREQ=DAILY;UNTIL=20250101T000000Z", "before"),
        ("FREQ=DAILY;UNTIL=20251231", "before"),
        ("FREQ=DAILY;UNTIL=20260101T085959", "before"),
        ("FREQ=DAILY;UNTIL=20260101T135959Z", "before"),  # 08:59:59 EST
        ("FREQ=DAILY;UNTIL=20260230T000000Z", "UNTIL"),
        ("FREQ=DAILY;UNTIL=2026-12-31", "UNTIL"),
        ("FREQ=DAILY;UNTIL=20261231Z", "UNTIL"),
        ("FREQ=DAILY;UNTIL=20261231T240000Z", "UNTIL"),
        ("FREQ=WEEKLY;WKST=XX", "WKST"),
        ("FREQ=WEEKLY;BYDAY=", "NAME=VALUE"),
        ("FREQ=WEEKLY;BYDAY=MO,", "BYDAY"),
        ("FREQ=WEEKLY;BYDAY=MON", "BYDAY"),
        ("FREQ=WEEKLY;BYDAY=MO(1)", "BYDAY"),
        ("FREQ=MONTHLY;BYDAY=0MO", "BYDAY"),
        ("FREQ=YEARLY;BYDAY=54MO", "BYDAY"),
        ("FREQ=MONTHLY;BYDAY=6MO", "BYDAY"),
        ("FREQ=YEARLY;BYMONTH=2;BYDAY=-6MO", "BYDAY"),
        ("FREQ=WEEKLY;BYDAY=2MO", "ordinal"),
        ("FREQ=DAILY;BYDAY=-1FR", "ordinal"),
        ("FREQ=YEARLY;BYWEEKNO=1;BYDAY=1MO", "BYWEEKNO"),
        ("FREQ=MONTHLY;BYMONTH=0", "BYMONTH"),
        ("FREQ=MONTHLY;BYMONTH=13", "BYMONTH"),
        ("FREQ=MONTHLY;BYMONTH=-1", "BYMONTH"),
        ("FREQ=MONTHLY;BYMONTHDAY=0", "BYMONTHDAY"),
        ("FREQ=MONTHLY;BYMONTHDAY=32", "BYMONTHDAY"),
        ("FREQ=MONTHLY;BYMONTHDAY=-32", "BYMONTHDAY"),
        ("FREQ=YEARLY;BYYEARDAY=367", "BYYEARDAY"),
        ("FREQ=YEARLY;BYYEARDAY=0001", "BYYEARDAY"),
        ("FREQ=YEARLY;BYWEEKNO=54", "BYWEEKNO"),
        ("FREQ=DAILY;BYHOUR=24", "BYHOUR"),
        ("FREQ=DAILY;BYMINUTE=60", "BYMINUTE"),
        ("FREQ=DAILY;BYSECOND=61", "BYSECOND"),
        ("FREQ=DAILY;BYSECOND=60", "leap second"),
        ("FREQ=DAILY;BYHOUR=9;BYSETPOS=0", "BYSETPOS"),
        ("FREQ=DAILY;BYHOUR=9;BYSETPOS=367", "BYSETPOS"),
        ("FREQ=MONTHLY;BYSETPOS=1", "another BYxxx"),
        ("FREQ=WEEKLY;BYMONTHDAY=1", "FREQ=WEEKLY"),
        ("FREQ=MONTHLY;BYYEARDAY=1", "BYYEARDAY"),
        ("FREQ=DAILY;BYYEARDAY=1", "BYYEARDAY"),
        ("FREQ=MONTHLY;BYWEEKNO=1", "BYWEEKNO"),
        ("FREQ=HOURLY;BYMINUTE=0,1;BYSECOND=" + ",".join(map(str, range(31))), "an hour"),
        (
            "FREQ=DAILY;BYHOUR=0,1,2,3;BYMINUTE="
            + ",".join(map(str, range(60)))
            + ";BYSECOND=0,1,2,3,4,5,6",
            "a day",
        ),
        (
            "FREQ=YEARLY;BYHOUR=" + ",".join(map(str, range(24))) + ";BYMINUTE=0,10,20,30,40,50",
            "per period",
        ),
        ("FREQ=HOURLY;INTERVAL=6;BYHOUR=1", "invalid"),  # from 09:00 only 3, 9, 15, 21
    ],
)
def test_invalid_rules_are_rejected(rule: str, fragment: str) -> None:
    err = _rejected(rule)
    assert fragment.lower() in err.message.lower()
    assert err.details == {"value": rule if len(rule) <= 200 else rule[:197] + "..."}


def test_length_is_checked_before_parsing() -> None:
    # Otherwise valid, and otherwise an error about its parts: the length comes first.
    rule = ("FREQ=DAILY;BYEASTER=1;" + "BYHOUR=9;" * 1000)[: MAX_RULE_LENGTH + 1]
    assert "longer than 8192" in _rejected(rule).message


def test_the_error_carries_the_param_given() -> None:
    err = _rejected("FREQ=SECONDLY", param="events[2].recurrence_rule")
    assert err.param == "events[2].recurrence_rule"
    assert err.extensions["param"] == "events[2].recurrence_rule"


def test_a_non_string_rule_is_an_api_error() -> None:
    _rejected(None)
    _rejected(["FREQ=DAILY"])


@pytest.mark.parametrize("rule", IMPOSSIBLE)
def test_impossible_rules_are_rejected_quickly(rule: str) -> None:
    started = time.perf_counter()
    err = _rejected(rule)
    elapsed = time.perf_counter() - started
    assert "no occurrence" in err.message
    # Unbounded, dateutil takes 0.2 s (YEARLY) to 8 s (HOURLY) here; the allowance keeps
    # it near 20 ms. A generous bound, so that a loaded machine does not make it flaky.
    assert elapsed < 1.0


@pytest.mark.parametrize(
    "rule",
    [
        "FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=30;BYSETPOS="
        + ",".join(f"{i},-{i}" for i in range(1, 367)),
        "FREQ=YEARLY;BYYEARDAY=" + ",".join(map(str, range(1, 366))) + ";BYSETPOS=366",
        "FREQ=YEARLY;BYMONTHDAY=30;BYYEARDAY=60;BYDAY="
        + ",".join(
            f"{s}{n}{d}"
            for d in ("MO", "TU", "WE", "TH", "FR", "SA", "SU")
            for n in range(1, 54)
            for s in "+-"
        ),
        "FREQ=DAILY;INTERVAL=365000;BYMONTH=2;BYMONTHDAY=30",
        "FREQ=WEEKLY;INTERVAL=52000;BYDAY=MO;BYSETPOS=2",
        "FREQ=HOURLY;INTERVAL=8760000;BYMONTH=2;BYMONTHDAY=30",
        "FREQ=HOURLY;BYMINUTE=" + ",".join(map(str, range(60))) + ";BYMONTH=2;BYMONTHDAY=30",
    ],
)
def test_adversarial_rules_are_rejected_quickly(rule: str) -> None:
    started = time.perf_counter()
    _rejected(rule)
    assert time.perf_counter() - started < 1.0


@pytest.mark.parametrize(
    ("rule", "start"),
    [
        ("FREQ=WEEKLY;BYDAY=SU", datetime(9999, 12, 31, 9)),
        ("FREQ=DAILY;INTERVAL=2", datetime(9999, 12, 31, 9)),
        ("FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=29", datetime(9998, 3, 1)),
        ("FREQ=MONTHLY;BYMONTHDAY=31", datetime(9999, 12, 31, 23, 59, 59)),
        ("FREQ=WEEKLY;UNTIL=99991231T235959Z", datetime(9999, 12, 30, 9)),
        ("FREQ=HOURLY;UNTIL=99991231T235959Z", datetime(9999, 12, 31, 23, 30)),
        ("FREQ=DAILY", datetime(1, 1, 1, 0, 0)),
    ],
)
def test_the_ends_of_the_calendar_never_escape_as_other_errors(rule: str, start: datetime) -> None:
    try:
        check(rule, start, NY)
    except ApiError as err:
        assert err.code == "invalid_recurrence_rule"
    window = (_utc(9999, 12, 1), datetime.max.replace(tzinfo=UTC))
    expansion = occurrences(rule, start, NY, *window, limit=10)
    assert len(expansion.items) <= 10


_WORDS = (
    "FREQ= YEARLY MONTHLY WEEKLY DAILY HOURLY MINUTELY BYDAY= MO TU SU -1 +5 0 2 7 12 29 30 "
    "31 53 60 366 BYMONTHDAY= BYMONTH= BYYEARDAY= BYWEEKNO= BYSETPOS= BYHOUR= BYMINUTE= "
    "BYSECOND= COUNT= UNTIL= 20261231 T090000Z INTERVAL= WKST= RRULE:"
)
_TOKENS = st.sampled_from([*_WORDS.split(), ";", ",", "=", ":", "\n"])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_TOKENS, min_size=1, max_size=14).map("".join))
def test_any_text_is_accepted_or_an_api_error(rule: str) -> None:
    try:
        check(rule, START, NY)
    except ApiError as err:
        assert err.code == "invalid_recurrence_rule"
        return
    expansion = occurrences(rule, START, NY, _utc(2026, 1, 1), _utc(2027, 1, 1), limit=50)
    assert len(expansion.items) <= 50


# -- occurrences ---------------------------------------------------------------------


def test_weekly_stays_at_nine_local_across_both_dst_changes() -> None:
    start = datetime(2026, 3, 2, 9, 0)  # a Monday; DST starts 8 March, ends 1 November
    spring = _expand("FREQ=WEEKLY", start, _utc(2026, 3, 1), _utc(2026, 3, 20))
    assert [o.start for o in spring.items] == [
        _utc(2026, 3, 2, 14),
        _utc(2026, 3, 9, 13),
        _utc(2026, 3, 16, 13),
    ]
    autumn = _expand("FREQ=WEEKLY", start, _utc(2026, 10, 20), _utc(2026, 11, 10))
    assert [o.start for o in autumn.items] == [
        _utc(2026, 10, 26, 13),
        _utc(2026, 11, 2, 14),
        _utc(2026, 11, 9, 14),
    ]
    for o in spring.items + autumn.items:
        assert o.original_local.time() == datetime(2026, 1, 1, 9).time()
        assert o.start.astimezone(NY).replace(tzinfo=None) == o.original_local
        assert o.start.tzinfo is UTC
    assert spring.complete and spring.incomplete_reason is None


def test_second_tuesdays() -> None:
    e = _expand("FREQ=MONTHLY;BYDAY=2TU", START, _utc(2026, 1, 1), _utc(2026, 7, 1))
    assert [o.original_local.date().isoformat() for o in e.items] == [
        "2026-01-13",
        "2026-02-10",
        "2026-03-10",
        "2026-04-14",
        "2026-05-12",
        "2026-06-09",
    ]


def test_rfc_listed_instances() -> None:
    def days(rule: str, start: datetime, years: int = 2) -> list[str]:
        end = _utc(start.year + years, 1, 1)
        items = _expand(rule, start, _utc(start.year, 1, 1), end).items
        return [o.original_local.strftime("%Y-%m-%d %H:%M") for o in items]

    assert days("FREQ=MONTHLY;COUNT=10;BYDAY=1FR", datetime(1997, 9, 5, 9)) == [
        f"{d} 09:00"
        for d in (
            "1997-09-05",
            "1997-10-03",
            "1997-11-07",
            "1997-12-05",
            "1998-01-02",
            "1998-02-06",
            "1998-03-06",
            "1998-04-03",
            "1998-05-01",
            "1998-06-05",
        )
    ]
    assert days("FREQ=MONTHLY;COUNT=3;BYDAY=TU,WE,TH;BYSETPOS=3", datetime(1997, 9, 4, 9)) == [
        "1997-09-04 09:00",
        "1997-10-07 09:00",
        "1997-11-06 09:00",
    ]
    election = "FREQ=YEARLY;INTERVAL=4;BYMONTH=11;BYDAY=TU;BYMONTHDAY=2,3,4,5,6,7,8"
    assert days(election, datetime(1996, 11, 5, 9), years=9) == [
        "1996-11-05 09:00",
        "2000-11-07 09:00",
        "2004-11-02 09:00",
    ]
    daily = days("FREQ=DAILY;UNTIL=19971224T000000Z", RFC_START)
    assert (len(daily), daily[-1]) == (113, "1997-12-23 09:00")
    # UNTIL=...T170000Z is 13:00 EDT, so 15:00 EDT is after it: UNTIL is an instant.
    assert days("FREQ=HOURLY;INTERVAL=3;UNTIL=19970902T170000Z", RFC_START) == [
        "1997-09-02 09:00",
        "1997-09-02 12:00",
    ]


def test_a_gap_time_maps_to_the_instant_after_the_gap() -> None:
    e = _expand("FREQ=DAILY", datetime(2026, 3, 7, 2, 30), _utc(2026, 3, 7), _utc(2026, 3, 10))
    assert [(o.original_local, o.start) for o in e.items] == [
        (datetime(2026, 3, 7, 2, 30), _utc(2026, 3, 7, 7, 30)),  # 02:30 EST
        (datetime(2026, 3, 8, 2, 30), _utc(2026, 3, 8, 7, 30)),  # no 02:30: 03:30 EDT
        (datetime(2026, 3, 9, 2, 30), _utc(2026, 3, 9, 6, 30)),  # 02:30 EDT
    ]


def test_a_repeated_time_takes_the_first_instant() -> None:
    e = _expand("FREQ=DAILY", datetime(2026, 10, 31, 1, 30), _utc(2026, 11, 1), _utc(2026, 11, 2))
    assert [o.start for o in e.items] == [_utc(2026, 11, 1, 5, 30)]  # 01:30 EDT, not EST


def test_limit_stops_with_max_items() -> None:
    e = _expand("FREQ=DAILY", START, _utc(2026, 1, 1), _utc(2027, 1, 1), limit=10)
    assert len(e.items) == 10
    assert (e.complete, e.incomplete_reason) == (False, "max_items")
    assert e.items[0].original_local == START
    exact = _expand("FREQ=DAILY;COUNT=10", START, _utc(2026, 1, 1), _utc(2027, 1, 1), limit=10)
    assert (len(exact.items), exact.complete, exact.incomplete_reason) == (10, True, None)
    none = _expand("FREQ=DAILY", START, _utc(2026, 1, 1), _utc(2027, 1, 1), limit=0)
    assert (none.items, none.incomplete_reason) == ([], "max_items")


def test_a_sparse_rule_over_a_long_window() -> None:
    window = (_utc(2026, 1, 1), _utc(2426, 1, 1))
    # Yearly: one step a year, well within the allowance.
    yearly = _expand("FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=29", START, *window)
    assert yearly.complete and len(yearly.items) == 97
    # Daily: a step a day; the allowance runs out decades in, and says so.
    started = time.perf_counter()
    daily = _expand("FREQ=DAILY;BYMONTH=2;BYMONTHDAY=29", START, *window)
    assert time.perf_counter() - started < 1.0
    assert (daily.complete, daily.incomplete_reason) == (False, "expansion_limit")
    assert 5 <= len(daily.items) < 97
    assert [o.original_local for o in daily.items] == [
        o.original_local for o in yearly.items[: len(daily.items)]
    ]


def test_the_window_is_half_open() -> None:
    first, second = _utc(2026, 1, 1, 14), _utc(2026, 1, 8, 14)
    e = _expand("FREQ=WEEKLY", START, first, second)
    assert [o.start for o in e.items] == [first]
    e = _expand("FREQ=WEEKLY", START, first + timedelta(seconds=1), second + timedelta(seconds=1))
    assert [o.start for o in e.items] == [second]
    assert _expand("FREQ=WEEKLY", START, second, first).items == []
    assert _expand("FREQ=WEEKLY", START, first, first).items == []


def test_windows_before_the_start_or_after_the_end_are_empty_and_complete() -> None:
    before = _expand("FREQ=DAILY", START, _utc(2025, 1, 1), _utc(2025, 12, 31))
    after = _expand("FREQ=DAILY;COUNT=5", START, _utc(2026, 2, 1), _utc(2030, 1, 1))
    until = _expand("FREQ=DAILY;UNTIL=20260110", START, _utc(2026, 2, 1), _utc(2030, 1, 1))
    for e in (before, after, until):
        assert (e.items, e.complete) == ([], True)


def test_count_is_counted_from_the_first_start() -> None:
    e = _expand("FREQ=WEEKLY;COUNT=5", START, _utc(2026, 1, 20), _utc(2027, 1, 1))
    assert [o.original_local.date().isoformat() for o in e.items] == ["2026-01-22", "2026-01-29"]


def test_a_utc_until_is_an_instant_and_a_date_until_a_whole_day() -> None:
    window = (_utc(2026, 1, 1), _utc(2026, 2, 1))
    at = _expand("FREQ=WEEKLY;UNTIL=20260115T140000Z", START, *window)
    assert [o.start for o in at.items][-1] == _utc(2026, 1, 15, 14)
    before = _expand("FREQ=WEEKLY;UNTIL=20260115T135959Z", START, *window)
    assert [o.start for o in before.items][-1] == _utc(2026, 1, 8, 14)
    day = _expand("FREQ=WEEKLY;UNTIL=20260115", START, *window)
    assert [o.start for o in day.items][-1] == _utc(2026, 1, 15, 14)
    wall = _expand("FREQ=WEEKLY;UNTIL=20260115T085959", START, *window)
    assert [o.start for o in wall.items][-1] == _utc(2026, 1, 8, 14)


def test_a_utc_until_in_the_fall_back_hour_is_compared_as_an_instant() -> None:
    # 01:50 EDT (05:50Z) is before UNTIL 06:10Z (01:10 EST) though 01:50 > 01:10 on the
    # wall; 01:05 the next day is not.
    e = _expand(
        "FREQ=DAILY;UNTIL=20261101T061000Z",
        datetime(2026, 10, 31, 1, 50),
        _utc(2026, 10, 30),
        _utc(2026, 11, 5),
    )
    assert [o.start for o in e.items] == [_utc(2026, 10, 31, 5, 50), _utc(2026, 11, 1, 5, 50)]


def test_a_series_started_long_ago_is_expanded_from_its_window() -> None:
    # Hourly since 1990: without starting near the window this would be 300k steps.
    started = time.perf_counter()
    e = _expand(
        "FREQ=HOURLY;INTERVAL=5", datetime(1990, 1, 1, 0, 20), _utc(2026, 1, 1), _utc(2026, 1, 3)
    )
    assert time.perf_counter() - started < 1.0
    assert e.complete
    # 2025-12-31 23:20 EST (04:20Z) is 13148 days and 23 hours, 315575 = 5 * 63115
    # hours, after the first start (the lattice is on the wall clock, as in dateutil).
    assert e.items[0].original_local == datetime(2025, 12, 31, 23, 20)
    assert all(
        (o.original_local - datetime(1990, 1, 1, 0, 20)) % timedelta(hours=5) == timedelta(0)
        for o in e.items
    )


# -- properties ----------------------------------------------------------------------

# Zones with ordinary DST (and none): a zone that skipped a whole day, like Pacific/Apia
# in 2011, maps two wall days to one instant and is left out of the ordering property.
_ZONES = st.sampled_from(
    [
        "America/New_York",
        "Europe/London",
        "Europe/Dublin",
        "Australia/Lord_Howe",
        "America/Sao_Paulo",
        "Asia/Kolkata",
        "Pacific/Chatham",
        "America/St_Johns",
        "UTC",
    ]
)
_STARTS = st.datetimes(min_value=datetime(1970, 1, 1), max_value=datetime(2090, 12, 31))


def _in_gap(wall: datetime, tz: ZoneInfo) -> bool:
    # PEP 495: in a gap the later offset (fold=1) is larger than the earlier one.
    early = wall.replace(tzinfo=tz, fold=0).utcoffset()
    late = wall.replace(tzinfo=tz, fold=1).utcoffset()
    assert early is not None and late is not None
    return early < late


@settings(max_examples=100, deadline=None)
@given(
    freq=st.sampled_from(["DAILY", "WEEKLY", "MONTHLY", "YEARLY"]),
    interval=st.integers(1, 5),
    count=st.none() | st.integers(1, 40),
    zone=_ZONES,
    start=_STARTS,
    offset_days=st.integers(0, 3000),
)
def test_wall_clock_and_order_property(
    freq: str, interval: int, count: int | None, zone: str, start: datetime, offset_days: int
) -> None:
    tz = ZoneInfo(zone)
    start = start.replace(microsecond=0)
    rule = f"FREQ={freq};INTERVAL={interval}" + (f";COUNT={count}" if count else "")
    check(rule, start, tz)
    window_start = (start + timedelta(days=offset_days)).replace(tzinfo=UTC)
    e = occurrences(rule, start, tz, window_start, window_start + timedelta(days=800), limit=60)
    for o in e.items:
        wall = o.start.astimezone(tz).replace(tzinfo=None)
        if _in_gap(o.original_local, tz):
            offset = o.original_local.replace(tzinfo=tz, fold=0).utcoffset()
            assert offset is not None
            assert o.start == (o.original_local - offset).replace(tzinfo=UTC)
        else:
            assert wall == o.original_local
        assert window_start <= o.start < window_start + timedelta(days=800)
    starts = [o.start for o in e.items]
    assert all(a < b for a, b in itertools.pairwise(starts))


def _direct(
    rule: str, start: datetime, tz: ZoneInfo, lo: datetime, hi: datetime
) -> list[Occurrence]:
    """The same expansion done plainly: dateutil from the first start, every candidate."""
    body = rule if "WKST" in rule else rule + ";WKST=MO"
    out = []
    wall_hi = hi.replace(tzinfo=None) + timedelta(days=1)
    for wall in rrulestr(body, dtstart=start):
        if wall >= wall_hi:
            break
        instant = wall.replace(tzinfo=tz).astimezone(UTC)
        if lo <= instant < hi:
            out.append(Occurrence(wall, instant))
    return sorted(out, key=lambda o: (o.start, o.original_local))


@st.composite
def _rules(draw: st.DrawFn) -> str:
    freq = draw(st.sampled_from(["YEARLY", "MONTHLY", "WEEKLY", "DAILY", "HOURLY"]))
    parts = [f"FREQ={freq}", f"INTERVAL={draw(st.sampled_from([1, 1, 2, 3, 5, 7, 13, 30]))}"]
    days = ["MO", "TU", "WE", "TH", "FR", "SA", "SU"]

    def maybe() -> bool:
        return draw(st.integers(0, 2)) == 0

    if maybe():
        parts.append("WKST=" + draw(st.sampled_from(days)))
    by = len(parts)
    if maybe():
        chosen = draw(st.lists(st.sampled_from(days), min_size=1, max_size=3, unique=True))
        if freq in ("MONTHLY", "YEARLY") and draw(st.booleans()):
            chosen = [f"{draw(st.sampled_from([1, 2, -1]))}{d}" for d in chosen]
        parts.append("BYDAY=" + ",".join(chosen))
    if maybe():
        months = draw(st.lists(st.integers(1, 12), min_size=1, max_size=6, unique=True))
        parts.append("BYMONTH=" + ",".join(map(str, months)))
    if freq != "WEEKLY" and maybe():
        mdays = draw(
            st.lists(
                st.sampled_from([1, 2, 13, 15, 28, 29, 30, 31, -1, -2]),
                min_size=1,
                max_size=4,
                unique=True,
            )
        )
        parts.append("BYMONTHDAY=" + ",".join(map(str, mdays)))
    if freq != "HOURLY" and maybe():
        hours = draw(st.lists(st.integers(0, 23), min_size=1, max_size=3, unique=True))
        parts.append("BYHOUR=" + ",".join(map(str, sorted(hours))))
    if maybe():
        minutes = draw(st.lists(st.integers(0, 59), min_size=1, max_size=2, unique=True))
        parts.append("BYMINUTE=" + ",".join(map(str, sorted(minutes))))
    if len(parts) > by and maybe():
        parts.append(f"BYSETPOS={draw(st.sampled_from([1, 2, -1, -2]))}")
    if draw(st.integers(0, 3)) == 0:
        parts.append(f"COUNT={draw(st.integers(1, 60))}")
    return ";".join(parts)


@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rule=_rules(),
    zone=_ZONES,
    start=st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2030, 12, 31)),
    offset_hours=st.integers(-2000, 24 * 365 * 6),
    length_hours=st.integers(24 * 7, 24 * 400),
)
def test_expansion_matches_dateutil_from_the_first_start(
    rule: str, zone: str, start: datetime, offset_hours: int, length_hours: int
) -> None:
    tz = ZoneInfo(zone)
    start = start.replace(microsecond=0)
    try:
        check(rule, start, tz)
    except ApiError:
        return  # rejected rules are not expanded
    lo = (start + timedelta(hours=offset_hours)).replace(tzinfo=UTC)
    hi = lo + timedelta(hours=length_hours)
    e = occurrences(rule, start, tz, lo, hi, limit=200)
    if e.incomplete_reason == "expansion_limit":
        return  # the direct expansion could take long; covered by the sparse-window test
    expected = _direct(rule, start, tz, lo, hi)
    if e.incomplete_reason == "max_items":
        assert e.items == expected[:200]
    else:
        assert e.items == expected


# -- the meter -----------------------------------------------------------------------


def test_the_metered_interval_is_an_int_that_charges_per_use() -> None:
    meter = recurrence._Meter(10)
    interval = recurrence._MeteredInterval(3, meter, 4.0)
    assert interval == 3 and isinstance(interval, int)
    year = 2026
    year += interval
    assert year == 2029 and type(year) is int
    assert type(interval * 7) is int and type(5 // interval) is int
    assert meter.left == 2.0
    with pytest.raises(recurrence._Exhausted):
        year += interval


def test_a_remembered_expansion_is_the_same_and_each_caller_owns_its_list() -> None:
    tz = ZoneInfo("Europe/Paris")
    start = datetime(2026, 3, 2, 9, 0)
    window = (datetime(2026, 3, 20, tzinfo=UTC), datetime(2026, 4, 20, tzinfo=UTC))
    first = occurrences("FREQ=WEEKLY;BYDAY=MO,TH", start, tz, *window, limit=50)
    first.items.clear()
    again = occurrences("FREQ=WEEKLY;BYDAY=MO,TH", start, tz, *window, limit=50)
    # Across the spring change: 09:00 in Paris is 08:00 UTC, then 07:00.
    assert [o.start for o in again.items][:3] == [
        datetime(2026, 3, 23, 8, tzinfo=UTC), datetime(2026, 3, 26, 8, tzinfo=UTC),
        datetime(2026, 3, 30, 7, tzinfo=UTC)]
    assert len(again.items) == 8 and again.complete
