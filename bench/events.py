"""Event creation and read throughput and latency of one `kalends serve` process.

    python bench/events.py [--requests 3000] [--warmup 300] [--concurrency 16]

Starts the service as a real process on a free loopback port (embedded
PostgreSQL in a fresh temporary KALENDS_DATA_DIR, or DATABASE_URL when set),
creates a user with `kalends admin create-user` and one profile through the API,
then measures, after a warm-up, with a fixed number of concurrent clients:
`POST /v1/profiles/{id}/events` (one event a day from 2031-01-01, the Tuesdays
weekly recurring; these events are the data of the reads), `GET /v1/events?limit=100`,
`GET /v1/events/{id}` and the same with `?expand=profile,rsvp_settings,rsvp_stats`.
Prints requests/s and latency percentiles, stops the service with SIGTERM and
checks that it exited cleanly. Exit status 0 only if every measured creation
answered 201, every measured read 200, and the service stopped cleanly. The
scaffolding is in `harness.py`.
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
from datetime import date, timedelta

import aiohttp
import harness
from harness import Result, Scenario

FIRST_DAY = date(2031, 1, 1)
ZONE = "Europe/Paris"
RULE = "FREQ=WEEKLY;BYDAY=TU"
PAGE = 100
EXPAND = "profile,rsvp_settings,rsvp_stats"


def event_body(i: int) -> dict[str, str]:
    """The i-th event: day i from FIRST_DAY, 19:30 to 21:00 in Paris; weekly on Tuesdays if
    it falls on a Tuesday (one in seven)."""
    day = FIRST_DAY + timedelta(days=i)
    body = {"title": f"Bench event {i}", "start_time": f"{day}T19:30", "start_timezone": ZONE,
            "end_time": f"{day}T21:00", "end_timezone": ZONE}
    if day.weekday() == 1:
        body["recurrence_rule"] = RULE
    return body


async def _benchmark(session: aiohttp.ClientSession, url: str, args: argparse.Namespace
                     ) -> list[Result]:
    profile_body = {"platform_id": f"bench-{secrets.token_hex(4)}",
                    "display_name": "Bench events profile"}
    [profile] = await harness.seed(
        session, Scenario("POST /v1/profiles", lambda i: f"{url}/v1/profiles", method="POST",
                          body_for=lambda i: profile_body, expected=201), 1, 1)
    events_path = f"/v1/profiles/{profile['id']}/events"
    create = Scenario("POST /v1/profiles/{id}/events", lambda i: f"{url}{events_path}",
                      method="POST", body_for=event_body, expected=201)

    ids: list[str] = []
    refused: list[tuple[int, int, bytes]] = []

    def keep(i: int, status: int, data: bytes) -> None:
        if status == 201:
            ids.append(json.loads(data)["id"])
        elif not refused:
            refused.append((i, status, data))

    created = await harness.measure(session, create, args.warmup, args.requests,
                                    args.concurrency, on_response=keep)
    if refused:
        i, status, data = refused[0]
        print(f"first refused creation: POST {events_path} {json.dumps(event_body(i))} "
              f"answered {status}: {data.decode(errors='replace')}", file=sys.stderr)
    if len(ids) < PAGE:  # too few requests for a full page: create the rest unmeasured
        more = await harness.seed(session, create, PAGE - len(ids), args.concurrency,
                                  first=args.warmup + args.requests)
        ids.extend(event["id"] for event in more)
    print(f"{len(ids)} events in all", flush=True)
    await harness.check_page(session, url, f"/v1/events?limit={PAGE}", PAGE)

    scenarios = [
        Scenario(f"GET /v1/events?limit={PAGE}", lambda i: f"{url}/v1/events?limit={PAGE}"),
        Scenario("GET /v1/events/{id}", lambda i: f"{url}/v1/events/{ids[i % len(ids)]}"),
        Scenario(f"GET /v1/events/{{id}}?expand={EXPAND}",
                 lambda i: f"{url}/v1/events/{ids[i % len(ids)]}?expand={EXPAND}"),
    ]
    return [created, *[await harness.measure(session, s, args.warmup, args.requests,
                                             args.concurrency) for s in scenarios]]


def main() -> int:
    args = harness.options(__doc__ or "")
    events = max(PAGE, args.warmup + args.requests)
    return harness.run(_benchmark, args, f"1 profile, {events} events")


if __name__ == "__main__":
    sys.exit(main())
