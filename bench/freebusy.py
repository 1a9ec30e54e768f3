"""Free/busy and meeting times against the agenda on the same data, alternated A B A B
on one `kalends serve` process, one request at a time.

    python bench/freebusy.py [--weekly 250] [--single 3000] [--calendars 5] [--others 5]
                             [--other_weekly 100] [--other_single 1000] [--rounds 2]
                             [--requests 3000] [--warmup 300] [--concurrency 16]

Seeds the bench user's calendars (the default one and `--calendars` - 1 more, made in
the database) through `POST /v1/calendars/{id}/events` with the agenda bench's events
(bench/agenda.py: weekly recurring ones from the week before today, one-offs over the
100 days from today, one in ten all-day), spread over the calendars: with the defaults
about 2,000 occurrences in the 31 days from today. Then `--others` users of the bench
user's organization (made in the database), each seeded the same way with the agenda
bench's default counts in their default calendar. Each round measures, in turn:
A `GET /v1/agenda?days=31`, B1 `GET /v1/free-busy` over the same 31 days (the caller
alone), B2 the same with the `--others` people, B3 `POST /v1/meeting-times` over 14
days for the caller and the `--others` (30 minutes, default working hours, UTC).
`--requests` and `--warmup` are split over the rounds; requests are measured one at a
time (latency, one core's worth of work); `--concurrency` only seeds. Prints the table
and, per scenario, the median over rounds of p50 / the agenda's p50.
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import harness
from agenda import one_off_body, recurring_body
from harness import Result, Scenario


async def _get(session: aiohttp.ClientSession, url: str, headers: dict[str, str] | None = None
               ) -> Any:
    async with session.get(url, headers=headers) as response:
        body = await response.json(content_type=None)
    if response.status != 200:
        raise RuntimeError(f"GET {url} answered {response.status}: {body}")
    return body


async def _people(url: str, session: aiohttp.ClientSession, calendars: int, others: int
                  ) -> tuple[list[str], list[tuple[str, str, str]]]:
    """The bench user's calendars (its default one first, the rest made here), and
    `others` users of its organization: (email, API key, default calendar)."""
    from db import calendars as calendar_store
    from db.database import Database
    from domain import accounts, ids

    default = (await _get(session, f"{url}/v1/calendars"))["data"][0]["id"]
    organization = (await _get(session, f"{url}/v1/organizations"))["data"][0]["id"]
    async with harness.database_url() as dsn:
        db = await Database.connect(dsn, min_size=1, max_size=4)
        try:
            owner = await db.fetchval("SELECT user_id FROM calendars WHERE id = $1", default)
            made = [ids.new_id("cal") for _ in range(calendars - 1)]
            for n, calendar_id in enumerate(made):
                await calendar_store.insert(db, calendar_id, owner, f"Calendar {n + 2}")
            tag = secrets.token_hex(3)
            people = []
            for i in range(others):
                email = f"bench-other-{tag}-{i}@example.com"
                user = await accounts.create_user(db, email, f"Other {i}")
                await accounts.add_member(db, organization, email, "member")
                people.append((email, str(user["api_key"]), str(user["calendar_id"])))
        finally:
            await db.close()
    return [default, *made], people


async def _seed(session: aiohttp.ClientSession, url: str, calendars: list[str], weekly: int,
                single: int, concurrency: int, headers: dict[str, str] | None = None) -> None:
    today = datetime.now(UTC).date()

    def events(i: int) -> str:
        return f"{url}/v1/calendars/{calendars[i % len(calendars)]}/events"

    await harness.seed(session, Scenario(
        "POST /v1/calendars/{id}/events", events, method="POST",
        body_for=lambda i: recurring_body(i, today), expected=201, headers=headers,
    ), weekly, concurrency)
    await harness.seed(session, Scenario(
        "POST /v1/calendars/{id}/events", events, method="POST",
        body_for=lambda i: one_off_body(i, today), expected=201, headers=headers,
    ), single, concurrency)


async def _benchmark(session: aiohttp.ClientSession, url: str, args: argparse.Namespace
                     ) -> list[Result]:
    calendars, others = await _people(url, session, args.calendars, args.others)
    await _seed(session, url, calendars, args.weekly, args.single, args.concurrency)
    for _, key, calendar_id in others:
        await _seed(session, url, [calendar_id], args.other_weekly, args.other_single,
                    args.concurrency, {"Authorization": f"Bearer {key}"})

    start = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    window = (f"start={start:%Y-%m-%dT%H:%M:%SZ}"
              f"&end={start + timedelta(days=31):%Y-%m-%dT%H:%M:%SZ}")
    emails = ",".join(email for email, _, _ in others)
    meeting = {"start": f"{start:%Y-%m-%dT%H:%M:%SZ}",
               "end": f"{start + timedelta(days=14):%Y-%m-%dT%H:%M:%SZ}",
               "emails": [email for email, _, _ in others], "duration_minutes": 30,
               "time_zone": "UTC"}
    scenarios = [
        Scenario("A GET /v1/agenda?days=31", lambda i: f"{url}/v1/agenda?days=31"),
        Scenario("B1 GET /v1/free-busy 31 days", lambda i: f"{url}/v1/free-busy?{window}"),
        Scenario(f"B2 GET /v1/free-busy 31 days +{len(others)}",
                 lambda i: f"{url}/v1/free-busy?{window}&emails={emails}"),
        Scenario(f"B3 POST /v1/meeting-times 14 days +{len(others)}",
                 lambda i: f"{url}/v1/meeting-times", method="POST", body_for=lambda i: meeting),
    ]
    await _describe(session, url, window, emails, meeting)
    args.concurrency = 1  # seeding is done: from here on one request at a time (the table says so)
    requests = max(1, args.requests // args.rounds)
    warmup = max(1, args.warmup // args.rounds)
    results: list[Result] = []
    for round_ in range(args.rounds):
        for scenario in scenarios:
            named = Scenario(f"{scenario.name} #{round_ + 1}", scenario.url_for,
                             scenario.method, scenario.body_for)
            results.append(await harness.measure(session, named, warmup, requests,
                                                 args.concurrency))
    _ratios(results, len(scenarios))
    return results


async def _describe(session: aiohttp.ClientSession, url: str, window: str, emails: str,
                    meeting: dict[str, Any]) -> None:
    agenda = await _get(session, f"{url}/v1/agenda?days=31")
    print(f"GET /v1/agenda?days=31: {len(agenda['items'])} items, complete "
          f"{str(agenda['complete']).lower()} ({agenda['incomplete_reason']})")
    for query in (window, f"{window}&emails={emails}"):
        body = await _get(session, f"{url}/v1/free-busy?{query}")
        print(f"GET /v1/free-busy ({len(body['people'])} people): "
              f"{[len(p['busy']) for p in body['people']]} busy intervals, complete "
              f"{str(body['complete']).lower()}")
    async with session.post(f"{url}/v1/meeting-times", json=meeting) as response:
        found = await response.json(content_type=None)
    if response.status != 200:
        raise RuntimeError(f"POST /v1/meeting-times answered {response.status}: {found}")
    print(f"POST /v1/meeting-times: {len(found['data'])} slots, first "
          f"{json.dumps(found['data'][:1])}")


def _ratios(results: list[Result], per_round: int) -> None:
    rounds = [results[i:i + per_round] for i in range(0, len(results), per_round)]
    print("\np50 / the agenda's p50 (A), median over rounds:")
    for k in range(1, per_round):
        ratio = statistics.median(r[k].percentile(50) / r[0].percentile(50) for r in rounds)
        p50 = statistics.median(r[k].percentile(50) for r in rounds)
        print(f"  {rounds[0][k].name.rsplit(' #', 1)[0]}: p50 {p50:.1f} ms, ratio {ratio:.2f}")


def main() -> int:
    args = harness.options(__doc__ or "", {
        "weekly": (250, "the caller's weekly recurring events"),
        "single": (3000, "the caller's one-off events"),
        "calendars": (5, "the caller's calendars"),
        "others": (5, "other people of the caller's organization"),
        "other_weekly": (100, "each other person's weekly recurring events"),
        "other_single": (1000, "each other person's one-off events"),
        "rounds": (2, "A B rounds"),
    })
    return harness.run(_benchmark, args, f"{args.rounds} A B rounds, {args.calendars} calendars, "
                                         f"{args.others} others")


if __name__ == "__main__":
    sys.exit(main())
