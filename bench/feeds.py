"""ICS feed generation: a public profile with `--events` events.

    python bench/feeds.py [--events 2000] [--requests 300] [--concurrency 4]

Starts one real `kalends serve` (harness.py), creates a public profile and its
events through the API (one in seven weekly, one in ten all-day, one in twenty
cancelled, every tenth in another zone), then measures
`GET /v1/profiles/{id}/events.ics`:
- cold: `--cold` (5) requests one after another, each after the profile was
  changed (`PATCH`, unmeasured), so each builds the feed;
- kept: without a validator, the feed unchanged (served as built);
- 304: with `If-None-Match` carrying its ETag (no feed built);
and prints the feed's size and event count.
"""

from __future__ import annotations

import argparse
import secrets
import sys
import time
from datetime import date, timedelta

import aiohttp
import harness
from harness import Result, Scenario


def _event(i: int) -> dict[str, object]:
    day = date(2031, 1, 1) + timedelta(days=i % 700)
    zone = "America/New_York" if i % 10 == 3 else "Europe/Paris"
    body: dict[str, object] = {"title": f"Feed event {i}", "location": "Hall",
                               "description": "Seeded by bench/feeds.py", "start_timezone": zone}
    if i % 10 == 0:
        body.update(is_all_day=True, start_date=day.isoformat(),
                    end_date=(day + timedelta(days=1)).isoformat())
    else:
        body.update(start_time=f"{day.isoformat()}T{8 + i % 12:02d}:00",
                    end_time=f"{day.isoformat()}T{9 + i % 12:02d}:30", end_timezone=zone)
    if i % 7 == 0:
        body["recurrence_rule"] = "FREQ=WEEKLY;COUNT=10"
    return body


async def _benchmark(session: aiohttp.ClientSession, url: str, args: argparse.Namespace
                     ) -> list[Result]:
    [profile] = await harness.seed(session, Scenario(
        "POST /v1/profiles", lambda i: f"{url}/v1/profiles", method="POST", expected=201,
        body_for=lambda i: {"platform_id": f"feed-{secrets.token_hex(4)}",
                            "display_name": "Feed bench"}), 1, 1)
    created = await harness.seed(session, Scenario(
        "POST events", lambda i: f"{url}/v1/profiles/{profile['id']}/events", method="POST",
        expected=201, body_for=_event), args.events, 8)
    for event in created[::20]:
        async with session.post(f"{url}/v1/events/{event['id']}/cancel", json={}) as response:
            assert response.status == 200, await response.text()
    feed = f"{url}/v1/profiles/{profile['id']}/events.ics"
    async with session.get(feed) as response:
        body = await response.read()
    print(f"feed: {len(body) / 1024:.0f} KiB, {body.count(b'BEGIN:VEVENT')} events", flush=True)
    cold = Result("GET events.ics (cold: built)", 200)
    for i in range(args.cold):
        async with session.patch(f"{url}/v1/profiles/{profile['id']}",
                                 json={"description": f"Version {i}"}) as response:
            assert response.status == 200, await response.text()
        t0 = time.perf_counter()
        async with session.get(feed) as response:
            await response.read()
            cold.statuses[response.status] += 1
        cold.latencies.append(time.perf_counter() - t0)
    cold.wall = sum(cold.latencies)  # the builds alone, not the changes between them
    async with session.get(feed) as response:
        etag = response.headers["ETag"]  # the version now
    return [
        cold,
        await harness.measure(session, Scenario("GET events.ics (kept)", lambda i: feed),
                              args.warmup, args.requests, args.concurrency),
        await harness.measure(session, Scenario(
            "GET events.ics (304)", lambda i: feed, expected=304,
            headers={"If-None-Match": etag}), args.warmup, args.requests, args.concurrency),
    ]


def main() -> int:
    args = harness.options(__doc__ or "", {"events": (2000, "events of the profile"),
                                           "cold": (5, "feeds built, one after another")})
    return harness.run(_benchmark, args, f"{args.events} events")


if __name__ == "__main__":
    sys.exit(main())
