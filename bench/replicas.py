"""Reads from a streaming replica (docs/scaling.md, "Read replicas"): how many reads it takes, what
read-your-writes costs, and whether anyone ever reads an older state than their own.

    python bench/replicas.py [--users 20] [--events 20] [--rounds 2] [--requests 2000]
                             [--concurrency 8] [--pairs 10000] [--writes 10]

One embedded PostgreSQL (the primary) and a streaming replica made from it with the
embedded package's own `pg_basebackup` (tests/replica.py). Three `kalends serve`
processes on the same database, alike but for their replica settings:
  A  reads the primary only (no KALENDS_READ_DATABASE_URL);
  C  keeps read-your-writes' books but reads the primary: its KALENDS_READ_DATABASE_URL
     names a port nobody listens on, so every request pays what B's pays for the
     bookkeeping (a write records its user's WAL position, the key lookup returns it,
     the replica is checked every 25 ms) and no read goes to a replica;
  B  reads the replica, with read-your-writes.
`--users` users (made in the database), each with a profile of `--events` events
through the API. The replica streams all along, for A and C too: on these 2 cores its
replay is everyone's load, where a real replica runs on its own machine.

First, what recording a write's position costs on its own: `Reads.wrote` against
`SELECT 1` through the same pool, A B A B.

Then each round measures A, C then B (A C B A C B over the rounds) with `--requests`
requests of a read-heavy mix, first from one client (what a request costs, without
queueing), then from `--concurrency` clients. Each request is one user's: 90 % reads
(`GET /v1/agenda?days=7`, `GET /v1/profiles/{id}/events?limit=20`, `GET /v1/events/{id}`,
`GET /v1/free-busy` over 7 days) and 10 % writes (`PATCH /v1/events/{id}`; `--writes`
sets the share). Printed per side: p50/p99 of the mix, p50 of its reads and of its
writes; C's p50 less A's (what read-your-writes costs a request) and B's less A's (that
and reading from a replica on the same cores); the share of B's reads the replica
served (B's /metrics).

Last, the stale-read check: the replica is held 500 ms behind (`recovery_min_apply_delay`)
and `--pairs` write-then-read pairs run through B from `--concurrency` clients, each
client one user: PATCH an event's title, then GET it (with the user's second key, for
a different consumer row than the write's), which must show that title; also GET it as
a user who never writes, who may be shown the older state (counted, to show the replica
was behind). Exit status 0 only if every request answered as expected, no pair read
an older title, and the services stopped cleanly.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import secrets
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import harness
from harness import Result

sys.path.insert(0, str(harness.REPO / "tests"))

from replica import replica_of


async def _people(dsn: str, count: int) -> list[dict[str, str]]:
    """`count` users in one organization, each with two keys."""
    from db.database import Database
    from domain import accounts

    db = await Database.connect(dsn, min_size=1, max_size=4)
    try:
        tag = secrets.token_hex(3)
        people = []
        first = None
        for i in range(count):
            made = await accounts.create_user(db, f"replica-{tag}-{i}@example.com", None, None)
            if first is None:
                first = made["organization_id"]
            else:
                await accounts.add_member(db, first, made["email"], "member")
            second = await accounts.create_key(db, made["email"])
            people.append({"email": made["email"], "key": made["api_key"],
                           "key2": second["api_key"]})
        return people
    finally:
        await db.close()


async def _seed(session: aiohttp.ClientSession, url: str, people: list[dict[str, str]],
                events: int) -> None:
    start = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) + timedelta(days=1)
    for n, person in enumerate(people):
        profile = await harness.call(session, "POST", f"{url}/v1/profiles", 201, {
            "platform_id": f"replica-{secrets.token_hex(4)}", "display_name": f"P{n}"},
            key=person["key"])
        person["profile"] = profile["id"]
        ids = []
        for i in range(events):
            at = start + timedelta(hours=5 * i)
            made = await harness.call(
                session, "POST", f"{url}/v1/profiles/{profile['id']}/events", 201,
                {"title": f"Event {i}", "start_timezone": "UTC",
                 "start_time": at.strftime("%Y-%m-%dT%H:%M:%SZ")}, key=person["key"])
            ids.append(made["id"])
        person["events"] = ",".join(ids)


def _request(url: str, person: dict[str, str], rng: random.Random, write_share: float
             ) -> tuple[str, str, Any, str]:
    """One request of the mix: (method, url, body, key)."""
    events = person["events"].split(",")
    if rng.random() < write_share:
        return ("PATCH", f"{url}/v1/events/{rng.choice(events)}",
                {"title": f"t{rng.randrange(10**9)}"}, person["key"])
    start = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    window = (f"start={start:%Y-%m-%dT%H:%M:%SZ}"
              f"&end={start + timedelta(days=7):%Y-%m-%dT%H:%M:%SZ}")
    path = rng.choice([
        "/v1/agenda?days=7", f"/v1/profiles/{person['profile']}/events?limit=20",
        f"/v1/events/{rng.choice(events)}", f"/v1/free-busy?{window}"])
    return "GET", url + path, None, person["key"]


async def _mix(session: aiohttp.ClientSession, url: str, name: str,
               people: list[dict[str, str]], total: int, concurrency: int, seed: int,
               write_share: float) -> tuple[Result, Result, Result]:
    """The mix's requests from `concurrency` clients: (all, the reads, the writes)."""
    every, reads, writes = Result(name), Result(f"{name} reads"), Result(f"{name} writes")
    rng = random.Random(seed)
    plan = [_request(url, rng.choice(people), rng, write_share) for _ in range(total)]
    queue = iter(plan)

    async def client() -> None:
        for method, target, body, key in queue:
            started = time.perf_counter()
            async with session.request(method, target, json=body,
                                       headers={"Authorization": f"Bearer {key}"}) as r:
                await r.read()
            took = time.perf_counter() - started
            for result in (every, writes if method == "PATCH" else reads):
                result.latencies.append(took)
                result.statuses[r.status] += 1

    began = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    every.wall = time.perf_counter() - began
    print(f"measured {name}: {every.count} requests in {every.wall:.1f} s", flush=True)
    return every, reads, writes


async def _reads_by_target(session: aiohttp.ClientSession, url: str) -> dict[str, float]:
    async with session.get(f"{url}/metrics") as response:
        text = await response.text()
    found: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("kalends_db_reads_total{"):
            target = line.split('target="', 1)[1].split('"', 1)[0]
            found[target] = float(line.rsplit(" ", 1)[1])
    return found


async def _pairs(session: aiohttp.ClientSession, url: str, people: list[dict[str, str]],
                 reader: dict[str, str], total: int, concurrency: int
                 ) -> tuple[int, int, int, int]:
    """(pairs done, pairs that read an older title, reads of the non-writer, those of
    them that showed an older title)."""
    done = stale = others = others_stale = 0
    writers = people[:concurrency]

    async def client(person: dict[str, str]) -> None:
        nonlocal done, stale, others, others_stale
        event = person["events"].split(",")[0]
        while done < total:
            done += 1
            title = f"pair-{secrets.token_hex(4)}"
            await harness.call(session, "PATCH", f"{url}/v1/events/{event}", 200,
                               {"title": title}, key=person["key"])
            seen = await harness.call(session, "GET", f"{url}/v1/events/{event}", 200,
                                      key=person["key2"])
            stale += seen["title"] != title
            if done % 10 == 0:
                shown = await harness.call(session, "GET", f"{url}/v1/events/{event}", 200,
                                           key=reader["key"])
                others += 1
                others_stale += shown["title"] != title

    await asyncio.gather(*(client(p) for p in writers))
    return done, stale, others, others_stale


async def _benchmark(session: aiohttp.ClientSession, url: str, args: argparse.Namespace
                     ) -> list[Result]:
    async with harness.database_url() as dsn:
        people = await _people(dsn, args.users + 1)
        reader, people = people[-1], people[:-1]
        await _seed(session, url, people, args.events)
        await _record_cost(dsn, people[0]["email"])
        root = Path(tempfile.mkdtemp(prefix="kalends-bench-replica-", dir="/tmp"))
        with replica_of(dsn, root) as replica:
            # KALENDS_DATA_DIR stays: each finds the bench service's secret.key there
            # (DATABASE_URL wins over the embedded server).
            env = dict(harness._SERVICE_ENV, DATABASE_URL=dsn, KALENDS_JOBS="off")
            env.pop("KALENDS_READ_DATABASE_URL", None)
            nobody = f"postgresql://postgres@127.0.0.1:{harness._free_port()}/postgres"
            services = {
                "A": harness.Service(env, harness.subdir(root, "a")),
                "C": harness.Service(dict(env, KALENDS_READ_DATABASE_URL=nobody),
                                     harness.subdir(root, "c")),
                "B": harness.Service(dict(env, KALENDS_READ_DATABASE_URL=replica.dsn_for(
                    "postgres")), harness.subdir(root, "b")),
            }
            try:
                for service in services.values():
                    service.wait_ready()
                return await _measure(session, {k: s.url for k, s in services.items()},
                                      people, reader, replica, dsn, args)
            finally:
                for service in services.values():
                    service.stop()


async def _record_cost(dsn: str, email: str, count: int = 1000) -> None:
    """What recording a write's position costs on its own: `Reads.wrote` against a
    `SELECT 1` through the same pool, A B A B."""
    from db.database import Database
    from db.replicas import Reads

    db = await Database.connect(dsn, min_size=1, max_size=2)
    try:
        user_id = await db.fetchval("SELECT id FROM users WHERE email = $1", email)
        reads = Reads.of(db, [], 5.0)
        timed: dict[str, list[float]] = {"record": [], "select 1": []}
        for _ in range(2):
            for name, call in (("record", lambda: reads.wrote(user_id)),
                               ("select 1", lambda: db.fetchval("SELECT 1"))):
                for _ in range(count):
                    started = time.perf_counter()
                    await call()
                    timed[name].append((time.perf_counter() - started) * 1000)
    finally:
        await db.close()
    record, select = (statistics.median(timed[n]) for n in ("record", "select 1"))
    print(f"a write's position record alone: p50 {record:.3f} ms, against {select:.3f} ms "
          f"for SELECT 1 ({2 * count} each, A B A B)")


_SIDES = {"A": "A primary only", "C": "C books only", "B": "B with a replica"}


async def _measure(session: aiohttp.ClientSession, urls: dict[str, str],
                   people: list[dict[str, str]], reader: dict[str, str], replica: Any,
                   dsn: str, args: argparse.Namespace) -> list[Result]:
    await asyncio.to_thread(replica.wait_caught_up, dsn)
    results: list[Result] = []
    share = args.writes / 100
    for concurrency in (1, args.concurrency):
        found: dict[str, list[tuple[Result, Result, Result]]] = {side: [] for side in urls}
        shares = []
        for round_ in range(args.rounds):
            seed = 1000 + round_
            for side, url in urls.items():
                await _mix(session, url, "warm-up", people, args.requests // 10,
                           concurrency, seed + 7, share)
                before = await _reads_by_target(session, url)
                measured = await _mix(session, url, f"{_SIDES[side]} #{round_ + 1} "
                                      f"x{concurrency}", people, args.requests, concurrency,
                                      seed, share)
                found[side].append(measured)
                results.append(measured[0])
                if side == "B":
                    after = await _reads_by_target(session, url)
                    on_replica = after.get("replica1", 0) - before.get("replica1", 0)
                    on_primary = after.get("primary", 0) - before.get("primary", 0)
                    shares.append(on_replica / max(1, on_replica + on_primary))
        _report(found, shares, concurrency, 100 - args.writes)

    await asyncio.to_thread(replica.set_apply_delay, 500)
    began = time.perf_counter()
    done, stale, others, others_stale = await _pairs(session, urls["B"], people, reader,
                                                     args.pairs, args.concurrency)
    took = time.perf_counter() - began
    await asyncio.to_thread(replica.set_apply_delay, 0)
    print(f"\nreplica 500 ms behind: {done} write-then-read pairs in {took:.1f} s, "
          f"{stale} read an older state (goal: 0); a user who never writes was shown an "
          f"older title in {others_stale} of {others} reads")
    if stale:
        raise RuntimeError(f"{stale} stale reads")
    return results


def _report(found: dict[str, list[tuple[Result, Result, Result]]], shares: list[float],
            concurrency: int, reads_percent: int) -> None:
    def median(side: str, part: int, p: float) -> float:
        measured = [r[part].percentile(p) for r in found[side] if r[part].count]
        return statistics.median(measured) if measured else math.nan

    print(f"\nmix ({reads_percent} % reads) from {concurrency} client(s), median over rounds, "
          "ms:")
    print("                     p50     p99   reads p50  writes p50")
    for side, name in _SIDES.items():
        print(f"  {name:17} {median(side, 0, 50):6.2f}  {median(side, 0, 99):6.2f}"
              f"     {median(side, 1, 50):6.2f}      {median(side, 2, 50):6.2f}")
    for side, what in (("C", "read-your-writes' books"), ("B", "books and replica reads")):
        costs = [y[0].percentile(50) - x[0].percentile(50)
                 for x, y in zip(found["A"], found[side], strict=True)]
        ratios = [y[0].percentile(50) / x[0].percentile(50)
                  for x, y in zip(found["A"], found[side], strict=True)]
        print(f"  {side} p50 - A p50 per round ({what}): "
              f"{', '.join(f'{c:+.2f}' for c in costs)} ms; ratio "
              f"{', '.join(f'{r:.3f}' for r in ratios)}")
    print("  (goal: read-your-writes at most +0.3 ms at p50)")
    print(f"  reads the replica served in B, per round: "
          f"{', '.join(f'{s:.1%}' for s in shares)} (goal: at least 85 %)")


def main() -> int:
    args = harness.options(__doc__ or "", {
        "users": (20, "users, each with a profile"),
        "events": (20, "events per profile"),
        "rounds": (2, "A B rounds"),
        "requests": (2000, "requests of the mix per side and round"),
        "concurrency": (8, "concurrent clients"),
        "pairs": (10000, "write-then-read pairs through the delayed replica"),
        "writes": (10, "percent of the mix's requests that write"),
    })
    return harness.run(_benchmark, args, f"{args.users} users, {args.rounds} A B rounds")


if __name__ == "__main__":
    sys.exit(main())
