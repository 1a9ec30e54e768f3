"""One user's flood of occurrences against everyone else (docs/api-choices.md, "Bounded work"):
bounded expansion, and an event loop that other requests still reach. One `kalends serve`
process.

    python bench/flood.py [--items 900] [--rounds 2] [--requests 40] [--warmup 4]
                          [--probes 200] [--heavy 4]

The bench user gets `--items` personal events `FREQ=HOURLY;BYMINUTE=0,10,20,30,40,50`
from tomorrow (one through `POST /v1/calendars/{id}/events`, the rest copied from its row
in the database: any user may make them through the API, it only takes longer). That is
about 8,500 occurrences per item in 59 days, 7.6 million in all, where a request may
expand 10,000 per person. Each round measures, in turn:
A `GET /healthz`, `--probes` requests one after another, with nothing else running;
B `GET /v1/free-busy` over 59 days (the answer: the caller's `error: expansion_limit`);
C `GET /v1/agenda?days=31` (the answer: `complete: false`, `expansion_limit`);
D `POST /v1/meeting-times` over 14 days (the caller `unavailable`);
E `GET /healthz` as A, while `--heavy` clients send B's request back to back.
A and E alternate in every round (A E A E over the rounds); the table prints p50 and p99,
and the summary their ratio, beside the goals (B and C at most 200 ms, E's p99 at most
50 ms). Timings are printed, never checked: the exit status is the harness' (every
request answered 200, the service stopped cleanly); an answer that is not bounded as
described stops the run.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import harness
from harness import Result, Scenario

RULE = "FREQ=HOURLY;BYMINUTE=0,10,20,30,40,50"


async def _flood(session: aiohttp.ClientSession, url: str, items: int) -> datetime:
    """The bench user's `items` hourly events from tomorrow's UTC midnight; returns it."""
    async with session.get(f"{url}/v1/calendars") as response:
        calendar = (await response.json())["data"][0]["id"]
    start = (datetime.now(UTC) + timedelta(days=1)).replace(hour=0, minute=0, second=0,
                                                            microsecond=0)
    body = {"title": "Flood", "start_time": f"{start:%Y-%m-%dT%H:%M:%S}Z",
            "end_time": f"{start + timedelta(minutes=5):%Y-%m-%dT%H:%M:%S}Z",
            "start_timezone": "UTC", "end_timezone": "UTC", "recurrence_rule": RULE}
    async with session.post(f"{url}/v1/calendars/{calendar}/events", json=body) as response:
        created = await response.json()
        if response.status != 201:
            raise RuntimeError(f"creating the first item answered {response.status}: {created}")
    import asyncpg

    async with harness.database_url() as dsn:
        conn = await asyncpg.connect(dsn)
        try:
            columns = [c for c in await conn.fetchval(
                "SELECT array_agg(column_name::text ORDER BY ordinal_position)"
                " FROM information_schema.columns WHERE table_name = 'calendar_events'")
                if c != "id"]
            listed = ", ".join(columns)
            await conn.execute(
                f"INSERT INTO calendar_events (id, {listed})"
                f" SELECT 'cev_' || md5(n::text || random()::text), {listed}"
                " FROM calendar_events, generate_series(1, $2) n WHERE id = $1",
                created["id"], items - 1)
            await conn.execute("ANALYZE calendar_events")
        finally:
            await conn.close()
    return start


def _check(name: str, ok: bool, shown: Any) -> None:
    if not ok:
        raise RuntimeError(f"{name} is not bounded as expected: {str(shown)[:300]}")


async def _describe(session: aiohttp.ClientSession, scenarios: list[Scenario]) -> None:
    free_busy, agenda, meeting = scenarios
    async with session.get(free_busy.url_for(0)) as response:
        body = await response.json()
    _check("free/busy", body["people"][0]["error"] == "expansion_limit", body)
    print(f"B {free_busy.name}: the caller's error {body['people'][0]['error']}")
    async with session.get(agenda.url_for(0)) as response:
        body = await response.json()
    _check("the agenda", (body["complete"], body["incomplete_reason"])
           == (False, "expansion_limit"), body)
    print(f"C {agenda.name}: {len(body['items'])} items, complete false, expansion_limit")
    async with session.post(meeting.url_for(0), json=meeting.body_for and meeting.body_for(0)
                            ) as response:
        body = await response.json()
    _check("meeting times", len(body["unavailable"]) == 1, body)
    print(f"D {meeting.name}: unavailable {body['unavailable']}, {len(body['data'])} slots")


async def _under_load(session: aiohttp.ClientSession, url: str, heavy: Scenario, clients: int,
                      name: str, count: int) -> tuple[Result, int]:
    """`harness.healthz` while `clients` clients send `heavy` back to back; also how many heavy
    requests were answered meanwhile."""
    done = asyncio.Event()
    answered = 0

    async def client() -> None:
        nonlocal answered
        while not done.is_set():
            async with session.get(heavy.url_for(0)) as response:
                await response.read()
                if response.status != 200:
                    raise RuntimeError(f"{heavy.name} answered {response.status}")
            answered += 1

    tasks = [asyncio.create_task(client()) for _ in range(clients)]
    await asyncio.sleep(0.5)  # the heavy clients are all in flight
    try:
        result = await harness.healthz(url, name, count)
    finally:
        done.set()
        await asyncio.gather(*tasks)
    return result, answered


async def _benchmark(session: aiohttp.ClientSession, url: str, args: argparse.Namespace
                     ) -> list[Result]:
    start = await _flood(session, url, args.items)
    z = "%Y-%m-%dT%H:%M:%SZ"
    window = f"start={start:{z}}&end={start + timedelta(days=59):{z}}"
    meeting = {"start": f"{start:{z}}", "end": f"{start + timedelta(days=14):{z}}",
               "duration_minutes": 30, "time_zone": "UTC"}
    scenarios = [
        Scenario("GET /v1/free-busy 59 days", lambda i: f"{url}/v1/free-busy?{window}"),
        Scenario("GET /v1/agenda?days=31",
                 lambda i: f"{url}/v1/agenda?days=31&date={start:%Y-%m-%d}"),
        Scenario("POST /v1/meeting-times 14 days", lambda i: f"{url}/v1/meeting-times",
                 method="POST", body_for=lambda i: meeting),
    ]
    await _describe(session, scenarios)
    requests = max(1, args.requests)
    results: list[Result] = []
    busy_answered = []
    for round_ in range(args.rounds):
        results.append(await harness.healthz(url, f"A GET /healthz idle #{round_ + 1}",
                                             args.probes))
        for letter, scenario in zip("BCD", scenarios, strict=True):
            named = Scenario(f"{letter} {scenario.name} #{round_ + 1}", scenario.url_for,
                             scenario.method, scenario.body_for)
            results.append(await harness.measure(session, named, args.warmup, requests, 1))
        loaded, answered = await _under_load(
            session, url, scenarios[0], args.heavy,
            f"E GET /healthz, {args.heavy} x B running #{round_ + 1}", args.probes)
        results.append(loaded)
        busy_answered.append(answered)
    _summary(results, args, busy_answered)
    return results


def _summary(results: list[Result], args: argparse.Namespace, answered: list[int]) -> None:
    def by(letter: str) -> list[Result]:
        return [r for r in results if r.name.startswith(letter)]

    print("\nover all rounds (p50 / p99 in ms, median of the rounds):")
    goals = {"B": "goal: <= 200 ms", "C": "goal: <= 200 ms", "D": "", "A": "",
             "E": "goal: p99 <= 50 ms"}
    for letter in "ABCDE":
        rounds = by(letter)
        p50 = statistics.median(r.percentile(50) for r in rounds)
        p99 = statistics.median(r.percentile(99) for r in rounds)
        print(f"  {rounds[0].name.rsplit(' #', 1)[0]:<46} p50 {p50:7.1f}  p99 {p99:7.1f}  "
              f"{goals[letter]}")
    ratio = statistics.median(e.percentile(99) / a.percentile(99)
                              for a, e in zip(by("A"), by("E"), strict=True))
    print(f"  /healthz p99 under load / idle (A E per round): {ratio:.2f}; heavy requests "
          f"answered meanwhile per round: {answered}")


def main() -> int:
    args = harness.options(__doc__ or "", {
        "items": (900, "the user's hourly items"),
        "rounds": (2, "A B C D E rounds"),
        "probes": (200, "/healthz requests per A and E"),
        "heavy": (4, "concurrent free/busy clients during E"),
        "requests": (40, "measured B, C and D requests per round"),
        "warmup": (4, "warm-up requests per round"),
        "concurrency": (8, "HTTP connections"),
    })
    return harness.run(_benchmark, args, f"{args.items} hourly items, {args.rounds} rounds")


if __name__ == "__main__":
    sys.exit(main())
