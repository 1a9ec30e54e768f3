"""How long `domain.recurrence.check` and `occurrences` take.

    python bench/recurrence.py [--runs 7]

Prints, for rules that never occur (one or more per FREQ), adversarial rules (huge
BYxxx lists, the largest INTERVAL, a rule of MAX_RULE_LENGTH characters) and real
sparse rules, the median time `check` takes over a few runs, and whether it accepted
the rule; then the time to expand a weekly rule over 31 and over 365 days, and a
sparse rule over a long window. Rejections by the work allowance spend all of
CHECK_WORK, so for them the "us/unit" column shows how many microseconds one work
unit costs on this machine; the allowance is meant to keep that at or below 1.
Plain prints, no assertions; the figures depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core.errors import ApiError
from domain import recurrence

TZ = ZoneInfo("America/New_York")
START = datetime(2026, 1, 1, 9, 0)  # a Thursday

_ALL_DAYS = "MO,TU,WE,TH,FR,SA,SU"
_SETPOS_ALL = (
    ",".join(str(i) for i in range(1, 367)) + "," + ",".join(str(-i) for i in range(1, 367))
)
_SETPOS_8 = ",".join(str(i) for i in range(8, 367)) + "," + ",".join(str(-i) for i in range(8, 367))
_YEARDAYS_365 = ",".join(str(i) for i in range(1, 366))
_MONTHDAYS_ALL = (
    ",".join(str(i) for i in range(1, 32)) + "," + ",".join(str(-i) for i in range(1, 32))
)
_WEEKNOS_ALL = (
    ",".join(str(i) for i in range(1, 54)) + "," + ",".join(str(-i) for i in range(1, 54))
)
_NTH_YEAR = ",".join(f"{s}{n}{d}" for d in _ALL_DAYS.split(",") for n in range(1, 54) for s in "+-")
_NTH_MONTH = ",".join(f"{s}{n}{d}" for d in _ALL_DAYS.split(",") for n in range(1, 6) for s in "+-")
_HOURS_ALL = ",".join(str(i) for i in range(24))
_MINUTES_ALL = ",".join(str(i) for i in range(60))


def _longest_rule() -> str:
    """Never occurs (30 February), with BYSETPOS values up to MAX_RULE_LENGTH exactly."""
    head = "FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=30;BYSETPOS="
    values: list[str] = []
    while len(head) + len(",".join(values)) + 5 <= recurrence.MAX_RULE_LENGTH:
        values.append(str(-(len(values) % 366) - 1))
    # Zero-pad values ("-5" -> "-05") until the rule is exactly the longest allowed.
    i = 0
    while len(head) + len(",".join(values)) < recurrence.MAX_RULE_LENGTH:
        if len(values[i]) < 4:
            values[i] = "-0" + values[i][1:]
        i = (i + 1) % len(values)
    return head + ",".join(values)


IMPOSSIBLE = [
    ("YEARLY 30 Feb", "FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=30"),
    ("MONTHLY 30 Feb", "FREQ=MONTHLY;BYMONTH=2;BYMONTHDAY=30"),
    ("WEEKLY 2nd of one day", "FREQ=WEEKLY;BYDAY=MO;BYSETPOS=2"),
    ("WEEKLY Feb, 2nd Monday", "FREQ=WEEKLY;BYMONTH=2;BYDAY=MO;BYSETPOS=2"),
    ("DAILY 30 Feb", "FREQ=DAILY;BYMONTH=2;BYMONTHDAY=30"),
    ("DAILY every 7 on Mondays", "FREQ=DAILY;INTERVAL=7;BYDAY=MO"),
    ("DAILY 2nd of one time", "FREQ=DAILY;BYHOUR=9;BYSETPOS=2"),
    ("HOURLY 30 Feb", "FREQ=HOURLY;BYMONTH=2;BYMONTHDAY=30"),
    ("HOURLY 3am 30 Feb", "FREQ=HOURLY;BYHOUR=3;BYMONTH=2;BYMONTHDAY=30"),
    ("HOURLY 2nd of one time", "FREQ=HOURLY;BYMINUTE=0;BYSETPOS=2"),
]

ADVERSARIAL = [
    ("YEARLY 30 Feb, 732 BYSETPOS", f"FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=30;BYSETPOS={_SETPOS_ALL}"),
    ("YEARLY 365 yeardays, pos 366", f"FREQ=YEARLY;BYYEARDAY={_YEARDAYS_365};BYSETPOS=366"),
    (
        "YEARLY 742 nth BYDAY",
        f"FREQ=YEARLY;BYDAY={_NTH_YEAR};BYMONTHDAY=30;BYYEARDAY=60",
    ),
    (
        "YEARLY weeknos+monthdays",
        f"FREQ=YEARLY;BYWEEKNO={_WEEKNOS_ALL};BYMONTHDAY={_MONTHDAYS_ALL};BYMONTH=1;BYYEARDAY=366",
    ),
    (
        "MONTHLY 70 nth BYDAY, 30 Feb",
        f"FREQ=MONTHLY;BYMONTH=2;BYDAY={_NTH_MONTH};BYMONTHDAY=30",
    ),
    (
        "MONTHLY 30 Feb, 732 BYSETPOS",
        f"FREQ=MONTHLY;BYMONTH=2;BYMONTHDAY=30;BYSETPOS={_SETPOS_ALL}",
    ),
    ("WEEKLY 7 days, 718 BYSETPOS", f"FREQ=WEEKLY;BYDAY={_ALL_DAYS};BYSETPOS={_SETPOS_8}"),
    (
        "YEARLY 48 times/day from 31 Dec",
        f"FREQ=YEARLY;BYDAY={_ALL_DAYS};BYHOUR={_HOURS_ALL};BYMINUTE=0,30;BYMONTH=2;BYMONTHDAY=30",
    ),
    ("DAILY max INTERVAL", "FREQ=DAILY;INTERVAL=365000;BYMONTH=2;BYMONTHDAY=30"),
    ("DAILY INTERVAL 10 years", "FREQ=DAILY;INTERVAL=3650;BYMONTH=2;BYMONTHDAY=30"),
    ("WEEKLY max INTERVAL", "FREQ=WEEKLY;INTERVAL=52000;BYDAY=MO;BYSETPOS=2"),
    ("HOURLY max INTERVAL", "FREQ=HOURLY;INTERVAL=8760000;BYMONTH=2;BYMONTHDAY=30"),
    ("HOURLY 60 minutes, 30 Feb", f"FREQ=HOURLY;BYMINUTE={_MINUTES_ALL};BYMONTH=2;BYMONTHDAY=30"),
    ("HOURLY all hours, 30 Feb", f"FREQ=HOURLY;BYHOUR={_HOURS_ALL};BYMONTH=2;BYMONTHDAY=30"),
    ("8192 characters", _longest_rule()),
]

SPARSE = [
    ("YEARLY 29 Feb", "FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=29"),
    ("YEARLY 29 Feb from 2097", "FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=29"),
    ("YEARLY 5th Monday of Feb", "FREQ=YEARLY;BYMONTH=2;BYDAY=5MO"),
    ("YEARLY/3 5th Monday of Feb", "FREQ=YEARLY;INTERVAL=3;BYMONTH=2;BYDAY=5MO"),
    ("MONTHLY Friday 13th", "FREQ=MONTHLY;BYDAY=FR;BYMONTHDAY=13"),
    ("MONTHLY 2nd Tuesday", "FREQ=MONTHLY;BYDAY=2TU"),
    ("MONTHLY last Friday", "FREQ=MONTHLY;BYDAY=-1FR"),
    ("MONTHLY last workday", "FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-1"),
    ("DAILY 29 Feb", "FREQ=DAILY;BYMONTH=2;BYMONTHDAY=29"),
    ("DAILY 29 Feb on a Monday", "FREQ=DAILY;BYMONTH=2;BYMONTHDAY=29;BYDAY=MO"),
    ("DAILY 29 Feb Monday from 2045", "FREQ=DAILY;BYMONTH=2;BYMONTHDAY=29;BYDAY=MO"),
    ("HOURLY 29 Feb from 2097", "FREQ=HOURLY;BYMONTH=2;BYMONTHDAY=29"),
]


def _median_ms(fn: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def _check_row(label: str, rule: str, runs: int) -> None:
    start = START
    if "from 31 Dec" in label:
        start = datetime(2026, 12, 31, 23, 0)
    elif "from 2097" in label:
        start = datetime(2097, 3, 1, 9, 0)
    elif "from 2045" in label:
        start = datetime(2045, 1, 1, 9, 0)  # next 29 February on a Monday: 2072
    outcome: list[str] = []

    def run() -> None:
        try:
            recurrence.check(rule, start, TZ)
            outcome[:] = ["accepted"]
        except ApiError as exc:
            exhausted = "search range" in exc.message
            outcome[:] = ["rejected (allowance)" if exhausted else "rejected (validation)"]

    ms = _median_ms(run, runs)
    per_unit = f"{ms * 1000 / recurrence.CHECK_WORK:5.2f}" if "allowance" in outcome[0] else ""
    print(f"  {label:34s} {ms:8.2f} ms  {outcome[0]:22s} {per_unit}")


def _expand_row(
    label: str, rule: str, start: datetime, days: int, runs: int, *, limit: int = 1000
) -> None:
    # The window opens at 2026-01-01 09:00 local, whenever the series started.
    window_start = START.replace(tzinfo=TZ).astimezone(UTC)
    window_end = window_start + timedelta(days=days)
    result: list[recurrence.Expansion] = []

    def run() -> None:
        result[:] = [recurrence.occurrences(rule, start, TZ, window_start, window_end, limit=limit)]

    def cold() -> None:
        recurrence._EXPANSIONS.clear()  # what a first request (or a new window) pays
        run()

    ms = _median_ms(cold, runs)
    warm = _median_ms(run, runs)
    e = result[0]
    status = "complete" if e.complete else f"incomplete ({e.incomplete_reason})"
    print(f"  {label:34s} {ms:8.2f} ms  {len(e.items):5d} items, {status};"
          f" remembered {warm:.3f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    runs: int = args.runs
    print(f"Python {platform.python_version()} on {platform.machine()}, {runs} runs, median")
    print(f"CHECK_WORK={recurrence.CHECK_WORK}, EXPANSION_WORK={recurrence.EXPANSION_WORK}")
    print(f"  {'check':34s} {'time':>11s}  {'outcome':22s} us/unit")
    for title, rows in (
        ("impossible", IMPOSSIBLE),
        ("adversarial", ADVERSARIAL),
        ("sparse, real", SPARSE),
    ):
        print(f" {title}")
        for label, rule in rows:
            _check_row(label, rule, runs)
    print(" occurrences")
    weekly, weekly3 = "FREQ=WEEKLY", "FREQ=WEEKLY;BYDAY=MO,WE,FR"
    leap_yearly = "FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=29"
    leap_daily = "FREQ=DAILY;BYMONTH=2;BYMONTHDAY=29"
    _expand_row("weekly, 31 days", weekly, START, 31, runs)
    _expand_row("weekly, 365 days", weekly, START, 365, runs)
    _expand_row("weekly MO,WE,FR, 365 days", weekly3, START, 365, runs)
    _expand_row("weekly, 365 days, started 1990", weekly, datetime(1990, 1, 1, 9), 365, runs)
    _expand_row(
        "weekly, COUNT, started 1990", weekly + ";COUNT=5000", datetime(1990, 1, 1, 9), 365, runs
    )
    _expand_row("hourly, 365 days, limit 1000", "FREQ=HOURLY", START, 365, runs)
    _expand_row("hourly started 1990, 31 days", "FREQ=HOURLY", datetime(1990, 1, 1, 9), 31, runs)
    _expand_row("yearly 29 Feb, 400 years", leap_yearly, START, 146097, runs)
    _expand_row("daily 29 Feb, 400 years", leap_daily, START, 146097, runs)


if __name__ == "__main__":
    main()
