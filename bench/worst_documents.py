"""The most expensive GraphQL documents the limits allow, against a busy profile: each
answers or is refused within a second, and `/healthz` stays quick while four run
(docs/api-choices.md, "Bounded work"). One `kalends serve` process.

    python bench/worst_documents.py [--events 400] [--rounds 2] [--probes 150]
                                    [--heavy 4] [--requests 5]

The bench user's profile gets `--events` events `FREQ=HOURLY;BYMINUTE=0,10,20,30,40,50`
from tomorrow (through `POST /v1/profiles/{id}/events`), about 8,600 occurrences each in
60 days. The documents:
- the three of the issue that found the hole: 6 aliases of `events(limit: 100,
  profile_ids: [P]) { data { occurrences(60 days) } }`; 15 aliases of `Profile.events(limit:
  5, from, to) { total_count }` over 366 days; 15 aliases of `rsvp_summary` by day over
  366 days;
- `Query.events(from, to)` over them, asked by another user (public events of others);
- generated: for each expensive field (occurrences under a page of 100, a windowed
  count, a summary by day, week and month, the agenda, free/busy, meeting times), the
  most aliases of it that graph/limits.py accepts (found by asking the validator itself,
  in this process), so the worst document of each kind that a client may send.
Each is sent `--requests` times alone (its latency and what it answered: data,
`expansion_limit`, or refused by cost), then `/healthz` is probed `--probes` times idle
(A) and while `--heavy` clients send the document back to back (B), A B A B over the
rounds. Timings are printed, never checked.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import harness
from graphql import parse, validate
from harness import Result

RULE = "FREQ=HOURLY;BYMINUTE=0,10,20,30,40,50"
Z = "%Y-%m-%dT%H:%M:%SZ"


def _schema() -> Any:
    from graph.limits import QueryLimits
    from graph.schema import schema

    return schema._schema, QueryLimits


def _accepted(document: str) -> bool:
    """Whether graph/limits.py lets `document` run (the server's own rule, here)."""
    schema, rule = _schema()
    return not validate(schema, parse(document), [rule])


def _aliased(body: str, count: int, header: str) -> str:
    return header + "{" + " ".join(f"a{i}: {body}" for i in range(count)) + "}"


def _most(body: str, header: str, top: int = 15) -> tuple[str, int]:
    """The document with the most aliases of `body` that the limits accept."""
    for count in range(top, 0, -1):
        document = _aliased(body, count, header)
        if _accepted(document):
            return document, count
    return _aliased(body, 1, header), 0


async def _seed(session: aiohttp.ClientSession, url: str, events: int) -> tuple[str, datetime]:
    start = (datetime.now(UTC) + timedelta(days=1)).replace(hour=0, minute=0, second=0,
                                                            microsecond=0)
    async with session.post(f"{url}/v1/profiles", json={
            "platform_id": f"busy-{time.time_ns()}", "display_name": "Busy"}) as r:
        profile = await r.json()
    sem = asyncio.Semaphore(8)

    async def one(i: int) -> None:
        async with sem, session.post(f"{url}/v1/profiles/{profile['id']}/events", json={
                "title": f"busy {i}", "start_time": f"{start:%Y-%m-%dT%H:%M}",
                "start_timezone": "UTC", "recurrence_rule": RULE}) as r:
            if r.status != 201:
                raise RuntimeError(await r.text())

    await asyncio.gather(*(one(i) for i in range(events)))
    return profile["id"], start


def _documents(profile: str, start: datetime) -> list[tuple[str, str, dict[str, Any]]]:
    """(name, document, variables)."""
    v60 = {"id": profile, "from": f"{start:{Z}}", "to": f"{start + timedelta(days=60):{Z}}"}
    v366 = {"id": profile, "from": f"{start:{Z}}", "to": f"{start + timedelta(days=366):{Z}}"}
    head = "query($id: ID!, $from: String!, $to: String!)"
    occurrences = ("events(limit: 100, profile_ids: [$id]) { data { occurrences(from: $from, "
                   "to: $to) { start } } }")
    counts = "profile(profile_id: $id) { events(limit: 5, from: $from, to: $to) { total_count } }"

    def summary(bucket: str) -> str:
        return (f'profile(profile_id: $id) {{ rsvp_summary(from: $from, to: $to, bucket: '
                f'"{bucket}", timezone: "UTC") {{ start events going }} }}')

    docs = [
        ("issue: 6 x occurrences(60 d) of 100 events", _aliased(occurrences, 6, head), v60),
        ("issue: 15 x windowed total_count, 366 d", _aliased(counts, 15, head), v366),
        ("issue: 15 x rsvp_summary by day, 366 d", _aliased(summary("day"), 15, head), v366),
    ]
    window_only = "query($from: String!, $to: String!)"
    for name, body, variables, header in (
            ("occurrences(60 d) under a page of 100", occurrences, v60, head),
            ("windowed total_count, 366 d", counts, v366, head),
            ("rsvp_summary by day, 366 d", summary("day"), v366, head),
            ("rsvp_summary by week, 366 d", summary("week"), v366, head),
            ("rsvp_summary by month, 366 d", summary("month"), v366, head),
            ("Query.events(from, to) { total_count }",
             "events(limit: 100, from: $from, to: $to) { total_count data { id } }",
             {k: v for k, v in v366.items() if k != "id"}, window_only)):
        document, count = _most(body, header)
        docs.append((f"generated: {count} x {name}", document, variables))
    # Reads that are not the graph's own but run through it too.
    agenda = f'agenda(date: "{start:%Y-%m-%d}", days: 31) {{ items {{ title start }} }}'
    free = (f'free_busy(start: "{start:{Z}}", end: "{start + timedelta(days=62):{Z}}") '
            "{ people { busy { start } } }")
    for name, body in (("agenda 31 d", agenda), ("free_busy 62 d", free)):
        document, count = _most(body, "query")
        docs.append((f"generated: {count} x {name}", document, {}))
    return docs


async def _send(session: aiohttp.ClientSession, url: str, document: str,
                variables: dict[str, Any]) -> tuple[float, str]:
    started = time.perf_counter()
    async with session.post(f"{url}/graphql", json={"query": document,
                                                    "variables": variables}) as r:
        body = await r.json()
        if r.status != 200:
            raise RuntimeError(f"{r.status}: {body}")
    took = time.perf_counter() - started
    codes = sorted({e.get("extensions", {}).get("code") or e["message"][:60]
                    for e in body.get("errors", [])})
    return took, ",".join(codes) or "data"


async def _loaded(session: aiohttp.ClientSession, url: str, document: str,
                  variables: dict[str, Any], clients: int, name: str, probes: int) -> Result:
    done = asyncio.Event()

    async def client() -> None:
        while not done.is_set():
            await _send(session, url, document, variables)

    tasks = [asyncio.create_task(client()) for _ in range(clients)]
    await asyncio.sleep(0.3)
    try:
        return await harness.healthz(url, name, probes)
    finally:
        done.set()
        await asyncio.gather(*tasks)


async def _benchmark(session: aiohttp.ClientSession, url: str, args: argparse.Namespace
                     ) -> list[Result]:
    t0 = time.perf_counter()
    profile, start = await _seed(session, url, args.events)
    print(f"seeded {args.events} hourly events in {time.perf_counter() - t0:.1f} s")
    docs = _documents(profile, start)
    print("\neach document alone (seconds over --requests; what it answered):")
    worst: tuple[float, str, str, dict[str, Any]] = (0.0, "", "", {})
    for name, document, variables in docs:
        await _send(session, url, document, variables)  # warm: compiled and cached
        took = []
        answer = ""
        for _ in range(args.requests):
            seconds, answer = await _send(session, url, document, variables)
            took.append(seconds)
        print(f"  {name:<52} p50 {statistics.median(took):6.3f}  max {max(took):6.3f}  "
              f"{answer}")
        if max(took) > worst[0]:
            worst = (max(took), name, document, variables)
    print(f"\nslowest: {worst[1]} ({worst[0]:.3f} s)")
    results: list[Result] = []
    for round_ in range(args.rounds):
        results.append(await harness.healthz(url, f"A GET /healthz idle #{round_ + 1}",
                                             args.probes))
        results.append(await _loaded(
            session, url, worst[2], worst[3], args.heavy,
            f"B GET /healthz, {args.heavy} x slowest #{round_ + 1}", args.probes))
    ratios = [b.percentile(99) / a.percentile(99) for a, b in zip(results[::2], results[1::2],
                                                                 strict=True)]
    print("\n/healthz p99 ms (A idle, B loaded), per round: " + ", ".join(
        f"{a.percentile(99):.1f} / {b.percentile(99):.1f}"
        for a, b in zip(results[::2], results[1::2], strict=True))
        + f"; B/A {', '.join(f'{r:.2f}' for r in ratios)} (goal: B p99 <= 100 ms)")
    return results


def main() -> int:
    args = harness.options(__doc__ or "", {
        "events": (400, "hourly events on the profile"),
        "rounds": (2, "A B rounds"),
        "probes": (150, "/healthz requests per A and B"),
        "heavy": (4, "concurrent clients of the slowest document during B"),
        "requests": (5, "requests of each document alone"),
        "concurrency": (8, "HTTP connections"),
    })
    return harness.run(_benchmark, args, f"{args.events} hourly events, {args.rounds} rounds")


if __name__ == "__main__":
    sys.exit(main())
