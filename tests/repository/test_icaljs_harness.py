"""The ical.js harness itself (tests/icaljs.py): it reads TZIDs through the
calendar's own VTIMEZONE (a wrong one gives wrong instants), expands all-day
events, EXDATE and RECURRENCE-ID overrides as ical.js does, and reports a
broken event as an error for its UID alone."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest
from icaljs import Occurrence, expand, expand_many, run_raw

# Europe/Paris as tzurl.org writes it: EU rules since 1996, open-ended.
PARIS = """BEGIN:VTIMEZONE
TZID:Europe/Paris
X-LIC-LOCATION:Europe/Paris
BEGIN:DAYLIGHT
TZOFFSETFROM:+0100
TZOFFSETTO:+0200
TZNAME:CEST
DTSTART:19700329T020000
RRULE:FREQ=YEARLY;BYMONTH=3;BYDAY=-1SU
END:DAYLIGHT
BEGIN:STANDARD
TZOFFSETFROM:+0200
TZOFFSETTO:+0100
TZNAME:CET
DTSTART:19701025T030000
RRULE:FREQ=YEARLY;BYMONTH=10;BYDAY=-1SU
END:STANDARD
END:VTIMEZONE"""

# The same TZID, wrongly written: no summer time at all.
PARIS_WITHOUT_SUMMER = """BEGIN:VTIMEZONE
TZID:Europe/Paris
BEGIN:STANDARD
TZOFFSETFROM:+0100
TZOFFSETTO:+0100
TZNAME:CET
DTSTART:19700101T000000
END:STANDARD
END:VTIMEZONE"""

# Mondays 09:00-10:00 Paris time from 6 January 2025.
WEEKLY = """BEGIN:VEVENT
UID:weekly@kalends.test
DTSTAMP:20250101T000000Z
DTSTART;TZID=Europe/Paris:20250106T090000
DTEND;TZID=Europe/Paris:20250106T100000
RRULE:FREQ=WEEKLY
SUMMARY:Weekly
END:VEVENT"""


def calendar(*components: str) -> str:
    lines = ["BEGIN:VCALENDAR", "VERSION:2.0", "PRODID:-//Kalends//tests//EN",
             *"\n".join(components).splitlines(), "END:VCALENDAR", ""]
    return "\r\n".join(lines)


def utc(year: int, month: int, day: int, hour: int = 0) -> datetime:
    return datetime(year, month, day, hour, tzinfo=UTC)


def starts(occurrences: list[Occurrence]) -> list[datetime | None]:
    return [occurrence.start for occurrence in occurrences]


def test_the_calendars_vtimezone_gives_summer_and_winter_time() -> None:
    march, october, far = expand_many([
        (calendar(PARIS, WEEKLY), utc(2025, 3, 20), utc(2025, 4, 1)),
        (calendar(PARIS, WEEKLY), utc(2025, 10, 20), utc(2025, 11, 1)),
        # Past 2038 too: ical.js 2.x expands the observances' RRULEs on demand.
        (calendar(PARIS, WEEKLY), utc(2044, 7, 11), utc(2044, 7, 12)),
    ])
    # 30 March 2025 and 26 October 2025 are the switch-over Sundays.
    assert march["weekly@kalends.test"] == [
        Occurrence(utc(2025, 3, 24, 8), utc(2025, 3, 24, 9)),
        Occurrence(utc(2025, 3, 31, 7), utc(2025, 3, 31, 8)),
    ]
    assert starts(october["weekly@kalends.test"]) == [utc(2025, 10, 20, 7),
                                                      utc(2025, 10, 27, 8)]
    assert starts(far["weekly@kalends.test"]) == [utc(2044, 7, 11, 7)]


def test_a_wrong_vtimezone_gives_wrong_instants() -> None:
    # No zone database behind ical.js: the VTIMEZONE written is the one read.
    summer = expand(calendar(PARIS_WITHOUT_SUMMER, WEEKLY), utc(2025, 7, 14), utc(2025, 7, 15))
    assert starts(summer["weekly@kalends.test"]) == [utc(2025, 7, 14, 8)]


def test_a_tzid_without_vtimezone_is_an_error() -> None:
    result = expand(calendar(WEEKLY), utc(2025, 7, 1), utc(2025, 8, 1), strict=False)
    assert "weekly@kalends.test" not in result
    assert "no VTIMEZONE" in result.errors["weekly@kalends.test"]
    with pytest.raises(AssertionError, match="no VTIMEZONE"):
        expand(calendar(WEEKLY), utc(2025, 7, 1), utc(2025, 8, 1))


def test_an_instant_before_the_first_observance_is_an_error() -> None:
    # ical.js would read it at UTC offset 0.
    early = WEEKLY.replace("20250106", "19650104")
    result = expand(calendar(PARIS, early), utc(1965, 1, 1), utc(1965, 2, 1), strict=False)
    assert "precedes the first observance" in result.errors["weekly@kalends.test"]


def test_all_day_events_report_their_dates() -> None:
    holiday = """BEGIN:VEVENT
UID:holiday@kalends.test
DTSTAMP:20250101T000000Z
DTSTART;VALUE=DATE:20250714
DTEND;VALUE=DATE:20250715
RRULE:FREQ=YEARLY
SUMMARY:Fête nationale
END:VEVENT"""
    result = expand(calendar(holiday), utc(2025, 1, 1), utc(2027, 1, 1))
    assert result["holiday@kalends.test"] == [
        Occurrence(None, None, date(2025, 7, 14)),
        Occurrence(None, None, date(2026, 7, 14)),
    ]
    assert result["holiday@kalends.test"][0].end_day == date(2025, 7, 15)


def _instance(recurrence_id: str, start: str, end: str, *more: str) -> str:
    """An override of series@kalends.test: its instance of `recurrence_id` at `start` to
    `end` instead (local times in Paris), with `more` lines."""
    return "\n".join([
        "BEGIN:VEVENT", "UID:series@kalends.test", "DTSTAMP:20250101T000000Z",
        f"RECURRENCE-ID;TZID=Europe/Paris:{recurrence_id}",
        f"DTSTART;TZID=Europe/Paris:{start}", f"DTEND;TZID=Europe/Paris:{end}", *more,
        "END:VEVENT"])


def test_exdate_and_a_moved_instance() -> None:
    series = """BEGIN:VEVENT
UID:series@kalends.test
DTSTAMP:20250101T000000Z
DTSTART;TZID=Europe/Paris:20250106T090000
DTEND;TZID=Europe/Paris:20250106T100000
RRULE:FREQ=WEEKLY;COUNT=6
EXDATE;TZID=Europe/Paris:20250113T090000
END:VEVENT"""
    moved = _instance("20250120T090000", "20250122T140000", "20250122T150000")
    cancelled = _instance("20250127T090000", "20250127T090000", "20250127T100000",
                          "STATUS:CANCELLED")
    back = _instance("20250210T090000", "20250108T090000", "20250108T100000")
    result = expand(calendar(PARIS, series, moved, cancelled, back), utc(2025, 1, 1),
                    utc(2025, 2, 1))
    occurrences = result["series@kalends.test"]
    assert occurrences == [
        Occurrence(utc(2025, 1, 6, 8), utc(2025, 1, 6, 9)),
        # The last instance (10 February) moved back into the window.
        Occurrence(utc(2025, 1, 8, 8), utc(2025, 1, 8, 9)),
        # 13 January excluded; 20 January moved to the 22nd, 14:00.
        Occurrence(utc(2025, 1, 22, 13), utc(2025, 1, 22, 14)),
        Occurrence(utc(2025, 1, 27, 8), utc(2025, 1, 27, 9), cancelled=True),
    ]
    assert occurrences[1].recurrence_id == utc(2025, 2, 10, 8)
    assert occurrences[2].recurrence_id == utc(2025, 1, 20, 8)


def test_a_broken_rule_is_an_error_for_its_uid_alone() -> None:
    doubled = """BEGIN:VEVENT
UID:doubled@kalends.test
DTSTAMP:20250101T000000Z
DTSTART:20250106T090000Z
RRULE:RRULE:FREQ=WEEKLY
END:VEVENT"""
    # ICAL.parse itself refuses this one, for the whole text.
    unknown = """BEGIN:VEVENT
UID:unknown@kalends.test
DTSTAMP:20250101T000000Z
DTSTART:20250106T090000Z
RRULE:FREQ=FORTNIGHTLY
END:VEVENT"""
    text = calendar(PARIS, doubled, WEEKLY, unknown)
    result = expand(text, utc(2025, 1, 1), utc(2025, 1, 14), strict=False)
    assert result.error is None
    assert set(result.errors) == {"doubled@kalends.test", "unknown@kalends.test"}
    assert "FORTNIGHTLY" in result.errors["unknown@kalends.test"]
    assert starts(result["weekly@kalends.test"]) == [utc(2025, 1, 6, 8), utc(2025, 1, 13, 8)]
    with pytest.raises(AssertionError, match=r"doubled@kalends\.test(.|\n)*FORTNIGHTLY"):
        expand(text, utc(2025, 1, 1), utc(2025, 1, 14))


@pytest.mark.slow
def test_an_endless_rule_is_stopped() -> None:
    # ical.js loops forever looking for a 30 February.
    endless = """BEGIN:VEVENT
UID:endless@kalends.test
DTSTAMP:20250101T000000Z
DTSTART:20250106T090000Z
RRULE:FREQ=DAILY;BYMONTH=2;BYMONTHDAY=30
END:VEVENT"""
    text = calendar(PARIS, endless, WEEKLY)
    [result] = run_raw([(text, utc(2025, 1, 1), utc(2025, 1, 8))], event_timeout_ms=1000)
    assert "did not finish" in result["endless@kalends.test"]["error"]
    assert [o["start"] for o in result["weekly@kalends.test"]] == ["2025-01-06T08:00:00Z"]


def test_a_calendar_ical_js_cannot_read_is_a_job_error() -> None:
    broken = "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nnot a content line\r\nEND:VCALENDAR\r\n"
    good, bad = expand_many([(calendar(PARIS, WEEKLY), utc(2025, 1, 6), utc(2025, 1, 7)),
                             (broken, utc(2025, 1, 6), utc(2025, 1, 7))], strict=False)
    assert starts(good["weekly@kalends.test"]) == [utc(2025, 1, 6, 8)]
    assert bad.error is not None and bad == {}
