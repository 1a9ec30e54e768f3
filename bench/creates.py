"""Creates into one profile: does `POST /v1/profiles/{id}/events` cost more in a large
profile, and does it scale with connections?

    python bench/creates.py [--events 10000] [--rounds 4] [--requests 400] [--warmup 100]
                            [--concurrency 16]

Starts the service as a real process (see `harness.py`), makes two profiles through the
API, and seeds the large one with `--events` events by SQL (copies of an event the API
created, each with its own title and derived slug, as the service writes them). Then, in
`--rounds` rounds, A B A B interleaved so that drift hits both alike, it measures creates
into the large and into the small profile with 1 connection and with `--concurrency`
connections (`--requests` per leg and round, after `--warmup` unmeasured ones in the first
round). Each create has a title of its own (the common case; creates of one title and day
wait on each other by design, for their -2, -3, ... suffixes). Prints the table and the
ratios large/small (p50) and N connections/1 connection (req/s). Exit status 0 only if
every measured create answered 201 and the service stopped cleanly.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from datetime import date, timedelta

import aiohttp
import asyncpg
import harness
from harness import Result, Scenario

sys.path.insert(0, str(harness.REPO / "tests"))

from seeding import copies_of_event

DAY = date(2032, 6, 1)
ZONE = "Europe/Paris"
_NEXT = itertools.count()
"""Request indices over the whole run, so that no two creates share a title."""


def _body(i: int) -> dict[str, str]:
    day = DAY + timedelta(days=i % 365)
    return {"title": f"Bench create {i}", "start_time": f"{day}T19:30",
            "start_timezone": ZONE, "end_time": f"{day}T21:00", "end_timezone": ZONE}


async def _profile(session: aiohttp.ClientSession, url: str, name: str) -> str:
    [profile] = await harness.seed(session, Scenario(
        "POST /v1/profiles", lambda i: f"{url}/v1/profiles", method="POST",
        body_for=lambda i: {"platform_id": f"bench-{name}-{DAY}", "display_name": name},
        expected=201), 1, 1)
    return str(profile["id"])


async def _seed_events(session: aiohttp.ClientSession, url: str, profile_id: str,
                       count: int) -> None:
    """One event through the API, then `count` copies of its row by SQL."""
    [template] = await harness.seed(session, Scenario(
        "POST template", lambda i: f"{url}/v1/profiles/{profile_id}/events", method="POST",
        body_for=lambda i: {**_body(0), "title": "Seed template"}, expected=201), 1, 1)
    async with harness.database_url() as dsn:
        conn = await asyncpg.connect(dsn)
        try:
            await copies_of_event(conn, template["id"], count, "Seeded", str(DAY))
        finally:
            await conn.close()


def _merge(into: Result, part: Result) -> None:
    into.latencies += part.latencies
    into.statuses.update(part.statuses)
    into.wall += part.wall


async def _benchmark(session: aiohttp.ClientSession, url: str, args: argparse.Namespace
                     ) -> list[Result]:
    large = await _profile(session, url, "large")
    small = await _profile(session, url, "small")
    await _seed_events(session, url, large, args.events)
    print(f"seeded {args.events} events into the large profile", flush=True)
    targets = {f"large ({args.events})": large, "small": small}
    legs = [(name, conns) for conns in (1, args.concurrency) for name in targets]
    results = {leg: Result(f"POST events, {leg[0]}, {leg[1]} conn", 201) for leg in legs}

    def scenario(profile_id: str) -> Scenario:
        return Scenario("POST /v1/profiles/{id}/events",
                        lambda i: f"{url}/v1/profiles/{profile_id}/events", method="POST",
                        body_for=_body, expected=201)

    for name, conns in legs:  # warm-up: every leg's code paths and pool connections
        await harness.load(session, scenario(targets[name]), args.warmup, conns,
                           first=_next_block(args.warmup))
    for _ in range(args.rounds):
        for name, conns in legs:
            part = await harness.load(session, scenario(targets[name]), args.requests, conns,
                                      first=_next_block(args.requests))
            _merge(results[(name, conns)], part)
    _print_ratios(results, list(targets), args.concurrency)
    return list(results.values())


def _next_block(n: int) -> int:
    """The first of `n` fresh request indices."""
    first = next(_NEXT)
    for _ in range(n - 1):
        next(_NEXT)
    return first


def _print_ratios(results: dict[tuple[str, int], Result], names: list[str], n: int) -> None:
    large, small = names
    print("\nratios:")
    for conns in (1, n):
        a, b = results[(large, conns)], results[(small, conns)]
        print(f"  {conns:>2} conn: p50 large/small {a.percentile(50) / b.percentile(50):.2f}"
              f"  req/s large/small {a.rps / b.rps:.2f}")
    for name in names:
        one, many = results[(name, 1)], results[(name, n)]
        print(f"  {name}: req/s {n} conn / 1 conn {many.rps / one.rps:.2f}"
              f" ({many.rps:.0f} / {one.rps:.0f})")


def main() -> int:
    args = harness.options(__doc__ or "", {
        "events": (10_000, "events seeded into the large profile"),
        "rounds": (4, "A B A B rounds"),
    })
    if args.requests == 3000 and "--requests" not in sys.argv:
        args.requests = 400
    if args.warmup == 300 and "--warmup" not in sys.argv:
        args.warmup = 100
    return harness.run(_benchmark, args, f"{args.events} events seeded, {args.rounds} rounds")


if __name__ == "__main__":
    sys.exit(main())
