"""Expansion that starts at the window, and where a series ends, against plain
dateutil iteration from the first start: generated rules (FREQ DAILY to YEARLY,
INTERVAL, BYDAY, COUNT, UNTIL in its three forms) in zones with DST, windows years
after the first start, with the caches cold and warm."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from dateutil.rrule import rrulestr  # type: ignore[import-untyped]
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.errors import ApiError
from domain import recurrence
from domain.recurrence import Occurrence, check, last_occurrence, occurrences

_ZONES = st.sampled_from(["Europe/Paris", "America/New_York", "Australia/Lord_Howe",
                          "America/Sao_Paulo", "Pacific/Chatham", "Asia/Tokyo", "UTC"])
_DAYS = ["MO", "TU", "WE", "TH", "FR", "SA", "SU"]


def _until_bound(rule: str, tz: ZoneInfo) -> tuple[datetime | None, datetime | None]:
    """The rule's UNTIL read plainly: (last wall time, last instant), either None."""
    parts = dict(p.split("=", 1) for p in rule.split(";"))
    text = parts.get("UNTIL")
    if text is None:
        return None, None
    if "T" not in text:  # a DATE: the whole local day
        return datetime.strptime(text, "%Y%m%d").replace(hour=23, minute=59, second=59), None
    if text.endswith("Z"):
        return None, datetime.strptime(text, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    return datetime.strptime(text, "%Y%m%dT%H%M%S"), None


def _plain(rule: str, start: datetime, tz: ZoneInfo, stop: datetime | None
           ) -> list[Occurrence]:
    """Every occurrence from the first start, by dateutil alone (UNTIL applied here
    by wall time or instant), up to the wall time `stop` (None: to the end)."""
    parts = [p for p in rule.split(";") if not p.startswith("UNTIL=")]
    body = ";".join(parts) + ("" if "WKST" in rule else ";WKST=MO")
    until_wall, until_instant = _until_bound(rule, tz)
    out = []
    for wall in rrulestr(body, dtstart=start):
        if (stop is not None and wall >= stop) or (until_wall and wall > until_wall):
            break
        if until_instant is not None and wall > until_instant.replace(tzinfo=None) + \
                timedelta(days=1):
            break
        instant = wall.replace(tzinfo=tz, fold=0).astimezone(UTC)
        if until_instant is None or instant <= until_instant:
            out.append(Occurrence(wall, instant))
    return sorted(out, key=lambda o: (o.start, o.original_local))


@st.composite
def _rules(draw: st.DrawFn) -> str:
    freq = draw(st.sampled_from(["DAILY", "WEEKLY", "MONTHLY", "YEARLY"]))
    parts = [f"FREQ={freq}"]
    interval = draw(st.sampled_from([1, 1, 1, 2, 3, 5]))
    if interval > 1:
        parts.append(f"INTERVAL={interval}")
    if draw(st.booleans()):
        days = draw(st.lists(st.sampled_from(_DAYS), min_size=1, max_size=3, unique=True))
        if freq in ("MONTHLY", "YEARLY") and draw(st.booleans()):
            days = [f"{draw(st.sampled_from([1, 2, -1]))}{d}" for d in days]
        parts.append("BYDAY=" + ",".join(days))
    if freq == "YEARLY" and draw(st.booleans()):
        parts.append(f"BYMONTH={draw(st.integers(1, 12))}")
    if draw(st.integers(0, 4)) == 0:
        parts.append("WKST=" + draw(st.sampled_from(_DAYS)))
    end = draw(st.sampled_from(["none", "count", "until-date", "until-wall", "until-utc"]))
    if end == "count":
        # Large enough that daily and weekly series reach windows years later.
        parts.append(f"COUNT={draw(st.integers(1, 4000))}")
    elif end != "none":
        until = draw(st.datetimes(min_value=datetime(2018, 1, 1),
                                  max_value=datetime(2040, 12, 31))).replace(microsecond=0)
        parts.append("UNTIL=" + {
            "until-date": until.strftime("%Y%m%d"),
            "until-wall": until.strftime("%Y%m%dT%H%M%S"),
            "until-utc": until.strftime("%Y%m%dT%H%M%SZ"),
        }[end])
    return ";".join(parts)


def _checked(rule: str, start: datetime, tz: ZoneInfo) -> bool:
    try:
        check(rule, start, tz)
    except ApiError:
        return False
    return True


def _cold() -> None:
    recurrence._EXPANSIONS.clear()
    recurrence._count_before.cache_clear()
    recurrence._last.cache_clear()


def _against_dateutil(**more: st.SearchStrategy[Any]
                      ) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """A slow property test (250 examples) of a generated rule, a zone, a first start from
    2000 to 2020, and what the strategies `more` draw."""
    def decorate(test: Callable[..., None]) -> Callable[..., None]:
        drawn = given(rule=_rules(), zone=_ZONES,
                      start=st.datetimes(min_value=datetime(2000, 1, 1),
                                         max_value=datetime(2020, 12, 31)),
                      **more)(test)
        checked = settings(max_examples=250, deadline=None,
                           suppress_health_check=[HealthCheck.too_slow])(drawn)
        return pytest.mark.slow(checked)  # type: ignore[no-any-return]
    return decorate


@_against_dateutil(years_later=st.integers(0, 25), days=st.integers(1, 62),
                   around_the_end=st.booleans())
def test_a_window_years_after_the_start_has_dateutils_occurrences(
    rule: str, zone: str, start: datetime, years_later: int, days: int, around_the_end: bool
) -> None:
    tz = ZoneInfo(zone)
    start = start.replace(microsecond=0)
    if not _checked(rule, start, tz):
        return
    lo = (start + timedelta(days=365 * years_later + 17)).replace(tzinfo=UTC)
    if around_the_end and "COUNT" in rule:
        # Where COUNT runs out: the count of earlier occurrences must be exact.
        lo = _plain(rule, start, tz, None)[-1].start - timedelta(days=days // 2)
    hi = lo + timedelta(days=days)
    expected = [o for o in _plain(rule, start, tz, hi.replace(tzinfo=None) + timedelta(days=1))
                if lo <= o.start < hi]
    _cold()
    cold = occurrences(rule, start, tz, lo, hi, limit=1000)
    assert cold.complete and cold.items == expected
    # Warm: the counted COUNT prefix and the parsed rule come from the caches; a
    # neighbouring window of the same period too.
    recurrence._EXPANSIONS.clear()
    assert occurrences(rule, start, tz, lo, hi, limit=1000).items == expected
    later = lo + timedelta(days=1)
    assert occurrences(rule, start, tz, later, hi, limit=1000).items == \
        [o for o in expected if o.start >= later]


@_against_dateutil()
def test_the_last_occurrence_is_dateutils_last_and_open_ended_rules_have_none(
    rule: str, zone: str, start: datetime
) -> None:
    tz = ZoneInfo(zone)
    start = start.replace(microsecond=0)
    if not _checked(rule, start, tz):
        return
    _cold()
    last = last_occurrence(rule, start, tz)
    if "COUNT" not in rule and "UNTIL" not in rule:
        assert last is None
        return
    every = _plain(rule, start, tz, None)
    if last is None and every:
        # Past the write-time allowance (a yearly COUNT of thousands): treated as
        # never ending, which is safe; it is None for that reason alone, since with
        # more allowance the same call finds dateutil's last.
        _cold()
        allowance = recurrence.END_WORK
        recurrence.END_WORK = allowance * 50
        try:
            assert last_occurrence(rule, start, tz) == every[-1]
        finally:
            recurrence.END_WORK = allowance
            _cold()
        return
    assert last == (every[-1] if every else None)


def test_a_count_rule_that_began_long_ago_is_walked_from_the_window() -> None:
    """The COUNT already spent before the window's period is counted once, then
    each window walks its own periods only."""
    tz = ZoneInfo("Europe/Paris")
    start = datetime(1990, 3, 1, 9, 0)
    rule = "FREQ=DAILY;COUNT=20000"  # runs to 2044
    lo = datetime(2026, 3, 20, tzinfo=UTC)
    _cold()
    first = occurrences(rule, start, tz, lo, lo + timedelta(days=31), limit=100)
    assert first.complete and len(first.items) == 31
    # Across the spring change the wall clock stays at 09:00.
    assert {o.start.astimezone(tz).time() for o in first.items} == {datetime(1, 1, 1, 9).time()}
    before = recurrence._count_before.cache_info()
    recurrence._EXPANSIONS.clear()
    occurrences(rule, start, tz, lo, lo + timedelta(days=31), limit=100)
    assert recurrence._count_before.cache_info().hits == before.hits + 1
    # The last one: 19,999 days after the first; a window over it ends with it.
    last = last_occurrence(rule, start, tz)
    assert last is not None and last.original_local == start + timedelta(days=19_999)
    around = occurrences(rule, start, tz, last.start - timedelta(days=10),
                         last.start + timedelta(days=10), limit=100)
    assert around.complete and len(around.items) == 11 and around.items[-1] == last


def test_an_end_out_of_reach_is_none_and_never_early() -> None:
    tz = ZoneInfo("UTC")
    # Two billion hourly occurrences cannot be counted at write time: no end known.
    assert last_occurrence("FREQ=HOURLY;COUNT=2000000000", datetime(2020, 1, 1), tz) is None
    # An UNTIL in a period the rule skips: the last occurrence is further back.
    last = last_occurrence("FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=29;UNTIL=20270301",
                           datetime(2000, 2, 29, 8), tz)
    assert last is not None and last.original_local == datetime(2024, 2, 29, 8)
