"""Agenda throughput and latency of one `kalends serve` process.

    python bench/agenda.py [--weekly 100] [--single 1000] [--requests 3000]
                           [--warmup 300] [--concurrency 16]

Starts the service as a real process on a free loopback port (embedded
PostgreSQL in a fresh temporary KALENDS_DATA_DIR, or DATABASE_URL when set),
creates a user with `kalends admin create-user`, seeds its default calendar
through `POST /v1/calendars/{id}/events` with weekly recurring events and one-off
events around today, then measures, after a warm-up, with a fixed number of
concurrent clients: `GET /v1/agenda?days=31`, the same with `detail=full`, and
`GET /v1/agenda?days=7`. Prints requests/s and latency percentiles, stops the
service with SIGTERM and checks that it exited cleanly. Exit status 0 only if
every measured request answered 200 and the service stopped cleanly. The
scaffolding is in `harness.py`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta

import aiohttp
import harness
from harness import Result, Scenario

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


async def _benchmark(session: aiohttp.ClientSession, url: str, args: argparse.Namespace
                     ) -> list[Result]:
    today = datetime.now(UTC).date()
    events = f"{url}/v1/calendars/{await _calendar_id(session, url)}/events"
    await harness.seed(session, Scenario(
        "POST /v1/calendars/{id}/events", lambda i: events, method="POST",
        body_for=lambda i: recurring_body(i, today), expected=201,
    ), args.weekly, args.concurrency)
    await harness.seed(session, Scenario(
        "POST /v1/calendars/{id}/events", lambda i: events, method="POST",
        body_for=lambda i: one_off_body(i, today), expected=201,
    ), args.single, args.concurrency)
    queries = ["days=31", "days=31&detail=full", "days=7"]
    for query in queries:
        print(await _describe(session, url, query), flush=True)
    scenarios = [Scenario(f"GET /v1/agenda?{q}", _fixed(f"{url}/v1/agenda?{q}"))
                 for q in queries]
    return [await harness.measure(session, s, args.warmup, args.requests, args.concurrency)
            for s in scenarios]


def main() -> int:
    args = harness.options(__doc__ or "", {
        "weekly": (100, "weekly recurring events"),
        "single": (1000, "one-off events"),
    })
    return harness.run(_benchmark, args,
                       f"{args.weekly} weekly + {args.single} one-off calendar events")


if __name__ == "__main__":
    sys.exit(main())
