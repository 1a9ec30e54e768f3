"""What changed occurrences cost the agenda (docs/occurrences.md, "What it costs").

    python bench/occurrences.py [--profiles 20] [--changes 100] [--requests 200]
                                [--warmup 50] [--concurrency 4]

Starts the service as a real process (as bench/agenda.py does; the scaffolding is in
`harness.py`), then makes twice `--profiles` public profiles through the API, each with
three recurring events in UTC: two weekly ones begun 50 weeks ago and one every three
days begun 150 days ago, so that each holds occurrences from long ago to months ahead.
In the first half, every event gets `--changes` changed occurrences, written in SQL
as the service writes them (one statement; the API would take minutes): its first
`--changes` slots, each moved half an hour later with a title of its own, one in ten
cancelled; the second half is the same without changes. One user subscribes to the
first half, another to the second (through the API; the copies are made by the
sync job), and each reads `GET /v1/agenda?days=31` from today: alternately, A B A B
in one run, so that both see the same machine. Prints both agendas, the latency
table, the median of each side and their ratio (goal: at most 1.2), and exits 0 only
if every request answered 200 and the service stopped cleanly.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import harness
from harness import Result, Scenario

# This checkout's code in this process too, whatever the installed package points at.
sys.path.insert(0, str(harness.REPO))

# The rows of changed occurrences, as domain/occurrences.py writes them: $1 the
# events, $2 how many each. Slot k of an event is its start plus k periods (its rule,
# FREQ=WEEKLY or FREQ=DAILY;INTERVAL=3, makes no other), moved half an hour later,
# retitled; every tenth cancelled.
_CHANGES = """
INSERT INTO event_occurrences (event_id, slot, original_start, status, changes, start_time,
                               end_time, start_timezone, end_timezone)
SELECT e.id, to_char(s.at AT TIME ZONE 'UTC', 'YYYYMMDD"T"HH24MISS"Z"'), s.at,
       CASE WHEN k % 10 = 0 THEN 'cancelled' ELSE 'scheduled' END,
       jsonb_build_object('title', e.title || ' (moved ' || k || ')'),
       s.at + interval '30 minutes', s.at + interval '90 minutes', 'UTC', 'UTC'
FROM events e
CROSS JOIN generate_series(0, $2 - 1) k
CROSS JOIN LATERAL (
    SELECT e.start_time + k * CASE WHEN e.recurrence_rule = 'FREQ=WEEKLY'
                                   THEN interval '7 days' ELSE interval '3 days' END AS at
) s
WHERE e.id = ANY($1::text[])
"""


def _events(today: datetime) -> list[dict[str, str]]:
    """A profile's three recurring events, an hour each."""
    weekly = today - timedelta(weeks=50)
    every_third = today - timedelta(days=150)
    return [
        _hour("Weekly A", weekly.replace(hour=9), "FREQ=WEEKLY"),
        _hour("Weekly B", (weekly + timedelta(days=2)).replace(hour=14), "FREQ=WEEKLY"),
        _hour("Every third day", every_third.replace(hour=11), "FREQ=DAILY;INTERVAL=3"),
    ]


def _hour(title: str, start: datetime, rule: str) -> dict[str, str]:
    return {"title": title, "start_time": f"{start:%Y-%m-%dT%H:%M}", "start_timezone": "UTC",
            "end_time": f"{start + timedelta(hours=1):%Y-%m-%dT%H:%M}", "end_timezone": "UTC",
            "recurrence_rule": rule}


async def _profiles(session: aiohttp.ClientSession, url: str, count: int, label: str
                    ) -> tuple[list[str], list[str]]:
    """`count` profiles with their events: (profile IDs, event IDs)."""
    today = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    profiles, events = [], []
    for i in range(count):
        profile = await harness.call(session, "POST", f"{url}/v1/profiles", 201, {
            "platform_id": f"{label}-{i}-{int(time.time())}", "display_name": f"{label} {i}"})
        profiles.append(profile["id"])
        for body in _events(today):
            event = await harness.call(session, "POST",
                                       f"{url}/v1/profiles/{profile['id']}/events", 201, body)
            events.append(event["id"])
    return profiles, events


async def _subscribe(session: aiohttp.ClientSession, url: str, key: str,
                     profiles: list[str]) -> None:
    for profile_id in profiles:
        await harness.call(session, "POST", f"{url}/v1/subscriptions", 201, {
            "subscription_type": "profile", "profile_id": profile_id}, key=key)


async def _seed(session: aiohttp.ClientSession, url: str, args: argparse.Namespace
                ) -> tuple[str, str]:
    """The two subscribers' keys, once every copy is made."""
    from db.database import Database

    changed, changed_events = await _profiles(session, url, args.profiles, "changed")
    plain, plain_events = await _profiles(session, url, args.profiles, "plain")
    async with harness.database_url() as dsn:
        key_a, key_b = await harness.user_keys(dsn, 2, "occurrences", "Subscriber")
        db = await Database.connect(dsn, min_size=1, max_size=2)
        try:
            await db.execute(_CHANGES, changed_events, args.changes)
            await db.execute("ANALYZE event_occurrences")
            await _subscribe(session, url, key_a, changed)
            await _subscribe(session, url, key_b, plain)
            copies = len(changed_events) + len(plain_events)
            conn: Any = db.pool
            waited = await harness.until(
                conn, "SELECT count(*) >= $1 FROM calendar_events"
                " WHERE source_event_id IS NOT NULL", copies, timeout=harness.PHASE_TIMEOUT)
            rows = await db.fetchval("SELECT count(*) FROM event_occurrences")
        finally:
            await db.close()
    print(f"{rows} changed occurrences on {len(changed_events)} events; {copies} copies made "
          f"in {waited:.1f} s", flush=True)
    return key_a, key_b


async def _describe(session: aiohttp.ClientSession, url: str, key: str, side: str) -> str:
    body = await harness.call(session, "GET", f"{url}/v1/agenda?days=31", 200, key=key)
    moved = sum("(moved" in item["title"] for item in body["items"])
    return (f"{side}: {len(body['items'])} items ({moved} moved), complete "
            f"{str(body['complete']).lower()} ({body['incomplete_reason']})")


async def _benchmark(session: aiohttp.ClientSession, url: str, args: argparse.Namespace
                     ) -> list[Result]:
    key_a, key_b = await _seed(session, url, args)
    sides = {"A: with changes": key_a, "B: without": key_b}
    for side, key in sides.items():
        print(await _describe(session, url, key, side), flush=True)
    runs: dict[str, list[Result]] = {side: [] for side in sides}
    for _ in range(2):  # A B A B
        for side, key in sides.items():
            scenario = Scenario(f"GET /v1/agenda?days=31 ({side})",
                                lambda i: f"{url}/v1/agenda?days=31",
                                headers={"Authorization": f"Bearer {key}"})
            runs[side].append(await harness.measure(session, scenario, args.warmup,
                                                    args.requests, args.concurrency))
    results = [_together(side, found) for side, found in runs.items()]
    p50 = [statistics.median(r.latencies) * 1000 for r in results]
    print(f"p50 with changes {p50[0]:.1f} ms, without {p50[1]:.1f} ms: "
          f"ratio {p50[0] / p50[1]:.2f} (goal: at most 1.2)", flush=True)
    return results


def _together(side: str, runs: list[Result]) -> Result:
    """One side's measured runs as one result."""
    out = Result(f"GET /v1/agenda?days=31 ({side}, both runs)")
    for run in runs:
        out.latencies += run.latencies
        out.statuses.update(run.statuses)
        out.wall += run.wall
    return out


def main() -> int:
    args = harness.options(__doc__ or "", {
        "profiles": (20, "subscribed profiles on each side"),
        "changes": (100, "changed occurrences of each event on side A"),
        "requests": (200, "measured requests per run"),
        "warmup": (50, "warm-up requests per run"),
        "concurrency": (4, "concurrent clients"),
    })
    return harness.run(_benchmark, args,
                       f"{args.profiles} profiles x 3 recurring events a side, "
                       f"{args.changes} changed occurrences per event on side A")


if __name__ == "__main__":
    sys.exit(main())
