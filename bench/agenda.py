"""Agenda throughput and latency of one `kalends serve` process, and its floor.

    python bench/agenda.py [--weekly 100] [--single 1000] [--copies 500] [--ended 5000]
                           [--requests 3000] [--warmup 300] [--concurrency 16]

Starts the service as a real process on a free loopback port (embedded
PostgreSQL in a fresh temporary KALENDS_DATA_DIR, or DATABASE_URL when set),
creates a user with `kalends admin create-user`, seeds its default calendar
through `POST /v1/calendars/{id}/events` with weekly recurring events and one-off
events around today, then, in SQL as the subscription sync writes them (no series
end stored), `--copies` long-running weekly subscription copies (open-ended, begun
one to five years ago) and `--ended` weekly copies whose series ended one to three
years ago (UNTIL or COUNT), and stores their series' ends as the service would
(`domain.agenda.settle_recurrence_ends`, when the checkout has it). Then
measures, after a warm-up, with a fixed number of concurrent clients:
`GET /v1/agenda?days=31`, the same with `detail=full`, and `GET /v1/agenda?days=7`.
Prints requests/s and latency percentiles, then the 31-day agenda's floor, in
this process, one call at a time (medians): the statement's execution time from
EXPLAIN ANALYZE and the rows it reads, the statement fetched through asyncpg, and
the expansion and sorting of what it returns (`domain.agenda.merge`); stops the
service with SIGTERM and checks that it exited cleanly. Exit status 0 only if
every measured request answered 200 and the service stopped cleanly. The
scaffolding is in `harness.py`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import aiohttp
import harness
from harness import Result, Scenario

# This checkout's code in this process too (the floor is measured here), whatever
# checkout the installed package points at.
sys.path.insert(0, str(harness.REPO))

ZONES = ("Europe/Paris", "America/New_York", "Asia/Tokyo", "UTC")
ONE_OFF_DAYS = 100
"""One-off events are spread over this many days from today."""


def recurring_body(i: int, today: date) -> dict[str, str]:
    """The i-th weekly event: from the week before today, on weekday i mod 7, 45 minutes
    at a time of day between 07:00 and 18:45, in one of four zones."""
    day = today - timedelta(days=7 - i % 7)
    clock = f"{7 + i % 12:02d}:{(i // 12) % 4 * 15:02d}"
    end = f"{8 + i % 12:02d}:{(i // 12) % 4 * 15:02d}"
    zone = ZONES[i % len(ZONES)]
    return {"title": f"Weekly {i}", "start_time": f"{day}T{clock}", "start_timezone": zone,
            "end_time": f"{day}T{end}", "end_timezone": zone,
            "recurrence_rule": "FREQ=WEEKLY", "description": f"Recurring event number {i}."}


def one_off_body(i: int, today: date) -> dict[str, object]:
    """The i-th one-off: day i mod ONE_OFF_DAYS from today; one in ten all-day, the rest
    an hour long between 08:00 and 17:00."""
    day = today + timedelta(days=i % ONE_OFF_DAYS)
    zone = ZONES[i % len(ZONES)]
    if i % 10 == 0:
        return {"title": f"All-day {i}", "is_all_day": True, "start_date": str(day),
                "start_timezone": zone}
    hour = 8 + i % 10
    return {"title": f"One-off {i}", "start_time": f"{day}T{hour:02d}:00",
            "start_timezone": zone, "end_time": f"{day}T{hour + 1:02d}:00",
            "end_timezone": zone, "location": "Room 1",
            "description": f"One-off event number {i}."}


async def _calendar_id(session: aiohttp.ClientSession, url: str) -> str:
    async with session.get(f"{url}/v1/calendars") as response:
        page = await response.json(content_type=None)
    if response.status != 200 or not page.get("data"):
        raise RuntimeError(f"GET /v1/calendars answered {response.status}: {page}")
    return str(page["data"][0]["id"])


async def _describe(session: aiohttp.ClientSession, url: str, query: str) -> str:
    async with session.get(f"{url}/v1/agenda?{query}") as response:
        body = await response.json(content_type=None)
    if response.status != 200:
        raise RuntimeError(f"GET /v1/agenda?{query} answered {response.status}: {body}")
    return (f"GET /v1/agenda?{query}: {len(body['items'])} items, complete "
            f"{str(body['complete']).lower()} ({body['incomplete_reason']})")


def _fixed(url: str) -> Callable[[int], str]:
    return lambda i: url


# Subscription copies as the sync job writes them: $1 calendar, $2 today, $3 how many,
# $4 true for series over long ago. Begun 1 to 5 years ago (over ones: 2 to 4, ending
# a year after they began, by UNTIL or COUNT), 45 minutes, 07:00 to 18:45 local.
_COPIES = """
INSERT INTO calendar_events (id, calendar_id, title, description, location, start_time,
    end_time, start_timezone, end_timezone, recurrence_rule, source_event_id,
    source_profile_id)
SELECT 'cev_' || md5(k || random()::text), $1, 'Copy ' || g, 'Subscription copy ' || g,
       'Room ' || g % 10, s.start, s.start + interval '45 minutes', s.zone, s.zone,
       CASE WHEN NOT $4 THEN 'FREQ=WEEKLY'
            WHEN g % 2 = 0 THEN 'FREQ=WEEKLY;COUNT=52'
            ELSE 'FREQ=WEEKLY;UNTIL=' || to_char(s.start + interval '1 year', 'YYYYMMDD') END,
       'evt_' || md5(k || random()::text), 'prf_' || md5((g % 20)::text)
FROM generate_series(1, $3) g
CROSS JOIN LATERAL (SELECT CASE WHEN $4 THEN 'ended' ELSE 'open' END || g AS k) key
CROSS JOIN LATERAL (
    SELECT (($2::date - CASE WHEN $4 THEN 730 + g % 730 ELSE 365 + g % 1460 END)
            + time '07:00' + (g % 12) * interval '1 hour' + (g / 12 % 4) * interval '15 minutes')
           AT TIME ZONE z.zone AS start, z.zone
    FROM (SELECT (ARRAY['Europe/Paris', 'America/New_York', 'Asia/Tokyo', 'UTC'])[1 + g % 4]
          AS zone) z
) s
"""


class _Explained:
    """Stands in for the Database: runs the statement under EXPLAIN ANALYZE."""

    def __init__(self, db: Any) -> None:
        self.db = db
        self.plan: Any = None

    async def fetch(self, sql: str, *args: Any) -> list[Any]:
        [row] = await self.db.pool.fetch("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, *args)
        self.plan = json.loads(row[0])[0]
        return []


def _rows_read(node: dict[str, Any]) -> int:
    read = 0
    if node.get("Relation Name") == "calendar_events":
        read += node["Actual Rows"] * node.get("Actual Loops", 1)
        read += node.get("Rows Removed by Filter", 0)
    return read + sum(_rows_read(child) for child in node.get("Plans", ()))


def _median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


async def _copies(calendar_id: str, args: argparse.Namespace) -> str:
    """Writes the copies; returns what storing their ends took, in words."""
    from db.database import Database
    from domain import agenda

    async with harness.database_url() as dsn:
        db = await Database.connect(dsn, min_size=1, max_size=2)
        try:
            today = datetime.now(UTC).date()
            await db.execute(_COPIES, calendar_id, today, args.copies, False)
            await db.execute(_COPIES, calendar_id, today, args.ended, True)
            await db.execute("ANALYZE calendar_events")
            settle = getattr(agenda, "settle_recurrence_ends", None)
            if settle is None:
                return "series ends: not stored by this checkout"
            started = time.perf_counter()
            settled = await settle(db)
            return (f"series ends of {settled} recurring rows stored in "
                    f"{time.perf_counter() - started:.1f} s")
        finally:
            await db.close()


async def _floor(calendar_id: str, rounds: int = 50) -> list[str]:
    """The 31-day agenda's parts, measured here one call at a time."""
    from db import agenda as store
    from db.database import Database
    from domain import agenda, expansion

    async with harness.database_url() as dsn:
        db = await Database.connect(dsn, min_size=1, max_size=2)
        try:
            user_id = await db.fetchval("SELECT user_id FROM calendars WHERE id = $1",
                                        calendar_id)
            w = agenda.window(ZoneInfo("UTC"), None, 31)
            query = (db, user_id, [calendar_id], w.start, w.end, w.first_day, w.end_date)
            explained: Any = _Explained(db)
            read = {"limit": agenda.READ_ROWS}
            executions, fetches, merges = [], [], []
            rows: list[Any] = []
            for _ in range(rounds):
                await store.events(explained, *query[1:], **read)
                executions.append(explained.plan["Execution Time"] / 1000)
                started = time.perf_counter()
                rows = await store.events(*query, **read)
                fetches.append(time.perf_counter() - started)
                started = time.perf_counter()
                changes = await expansion.changes(db, rows, w.start, w.end, w.first_day,
                                                  w.end_date)
                items, _, _ = await expansion.run(agenda.merge, rows, w,
                                                  expansion.request_budget(), changes=changes)
                merges.append(time.perf_counter() - started)
            recurring = sum(r["recurrence_rule"] is not None for r in rows)
            return [
                f"floor of GET /v1/agenda?days=31 (this process, medians of {rounds}):",
                f"  SQL execution (EXPLAIN ANALYZE)  {_median_ms(executions):7.2f} ms, "
                f"{_rows_read(explained.plan['Plan'])} calendar_events rows read",
                f"  SQL fetched through asyncpg      {_median_ms(fetches):7.2f} ms, "
                f"{len(rows)} rows ({recurring} recurring)",
                f"  expansion and sort (merge)       {_median_ms(merges):7.2f} ms, "
                f"{len(items)} items",
                f"  fetch + merge                    "
                f"{_median_ms(fetches) + _median_ms(merges):7.2f} ms",
            ]
        finally:
            await db.close()


async def _benchmark(session: aiohttp.ClientSession, url: str, args: argparse.Namespace
                     ) -> list[Result]:
    today = datetime.now(UTC).date()
    calendar_id = await _calendar_id(session, url)
    events = f"{url}/v1/calendars/{calendar_id}/events"
    await harness.seed(session, Scenario(
        "POST /v1/calendars/{id}/events", lambda i: events, method="POST",
        body_for=lambda i: recurring_body(i, today), expected=201,
    ), args.weekly, args.concurrency)
    await harness.seed(session, Scenario(
        "POST /v1/calendars/{id}/events", lambda i: events, method="POST",
        body_for=lambda i: one_off_body(i, today), expected=201,
    ), args.single, args.concurrency)
    print(await _copies(calendar_id, args), flush=True)
    queries = ["days=31", "days=31&detail=full", "days=7"]
    for query in queries:
        print(await _describe(session, url, query), flush=True)
    scenarios = [Scenario(f"GET /v1/agenda?{q}", _fixed(f"{url}/v1/agenda?{q}"))
                 for q in queries]
    results = [await harness.measure(session, s, args.warmup, args.requests, args.concurrency)
               for s in scenarios]
    print("\n".join(await _floor(calendar_id)), flush=True)
    return results


def main() -> int:
    args = harness.options(__doc__ or "", {
        "weekly": (100, "weekly recurring events"),
        "single": (1000, "one-off events"),
        "copies": (500, "long-running weekly subscription copies"),
        "ended": (5000, "weekly subscription copies whose series ended years ago"),
    })
    return harness.run(_benchmark, args,
                       f"{args.weekly} weekly + {args.single} one-off calendar events, "
                       f"{args.copies} long-running + {args.ended} ended recurring copies")


if __name__ == "__main__":
    sys.exit(main())
