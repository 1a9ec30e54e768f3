"""What the rate limiter costs a request: the same requests against two `kalends serve`
processes on one database, one with the limiter off and one with it on (a quota so large
that it charges every request and refuses none), alternated A B A B.

    python bench/ratelimit.py [--rounds 3] [--requests 2000] [--warmup 200] [--concurrency 16]

Also times authentication alone on one connection: the key lookup, the lookup with the
charge folded in (the service's design), and the lookup followed by a charge statement of its
own (the obvious alternative), alternated the same way.
Prints each round's table and the ratios limiter-on / limiter-off of the medians.
Exit status 0 only if every request answered 200 and both services stopped cleanly.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import statistics
import sys
import time
from datetime import timedelta

import aiohttp
import asyncpg
import harness
from harness import Result, Scenario

sys.path.insert(0, str(harness.REPO))

from db import accounts, embedded, ratelimits
from domain.auth import hash_key

UNLIMITED = {"KALENDS_RATE_LIMIT": "off", "KALENDS_RATE_LIMIT_ANONYMOUS": "off"}
# Charged on every request, never refused: the limiter's full cost, none of its effect.
CHARGED = {"KALENDS_RATE_LIMIT": harness.UNREFUSED_RATE_LIMIT,
           "KALENDS_RATE_LIMIT_ANONYMOUS": "off"}


PATHS = ("/v1/organizations", "/v1/profiles?limit=20", "/v1/events?limit=100")
EVENTS = 100


async def _seed(url: str, api_key: str) -> None:
    """A profile with EVENTS events, for the events page."""
    headers = {"Authorization": f"Bearer {api_key}"}
    async with aiohttp.ClientSession(headers=headers) as session:
        [profile] = await harness.seed(session, Scenario(
            "POST /v1/profiles", lambda i: f"{url}/v1/profiles", method="POST", expected=201,
            body_for=lambda i: {"platform_id": f"rl-{secrets.token_hex(4)}",
                                "display_name": "Rate limit bench"}), 1, 1)
        await harness.seed(session, Scenario(
            "POST events", lambda i: f"{url}/v1/profiles/{profile['id']}/events", method="POST",
            expected=201, body_for=lambda i: {
                "title": f"Event {i}", "start_time": "2031-01-01T10:00:00Z",
                "start_timezone": "UTC"}), EVENTS, 8)


async def _requests(url: str, api_key: str, args: object, label: str) -> list[Result]:
    headers = {"Authorization": f"Bearer {api_key}"}
    concurrency = args.concurrency  # type: ignore[attr-defined]
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(headers=headers, connector=connector) as session:
        results = []
        for path in PATHS:
            scenario = Scenario(f"{label} GET {path}", lambda i, p=path: f"{url}{p}")
            results.append(await harness.measure(
                session, scenario, args.warmup, args.requests, concurrency))  # type: ignore[attr-defined]
        return results


async def _statement(dsn: str, api_key: str, count: int) -> dict[str, float]:
    """Microseconds per authentication, by design: the plain key lookup, the lookup with
    the charge folded in (what the service does), and the lookup then a charge of its own."""
    conn = await asyncpg.connect(dsn)
    db = _OneConnection(conn)
    key = hash_key(api_key)
    interval, window = timedelta(seconds=60 / 999999999), timedelta(seconds=60)

    async def plain() -> None:
        await accounts.key_owner(db, key)  # type: ignore[arg-type]

    async def folded() -> None:
        await accounts.key_owner(db, key, (interval, window))  # type: ignore[arg-type]

    async def separate() -> None:
        row = await accounts.key_owner(db, key)  # type: ignore[arg-type]
        await ratelimits.charge(db, f"consumer:{row['consumer']}", interval, window)  # type: ignore[arg-type, index]

    designs = {"plain": plain, "folded": folded, "separate": separate}
    try:
        timings: dict[str, list[float]] = {name: [] for name in designs}
        for _ in range(3):
            for name, design in designs.items():
                started = time.perf_counter()
                for _ in range(count):
                    await design()
                timings[name].append((time.perf_counter() - started) / count * 1e6)
        return {name: statistics.median(values) for name, values in timings.items()}
    finally:
        await conn.close()


class _OneConnection:
    """The slice of `db.database.Database` that `accounts.key_owner` uses, on one connection."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self._conn = conn

    async def fetchrow(self, sql: str, *args: object) -> object:
        return await self._conn.fetchrow(sql, *args)


def main() -> int:
    args = harness.options(__doc__ or "", {"rounds": (3, "A B rounds")})
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    workdir = harness._data_root()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(harness.REPO), env.get("PYTHONPATH")]))
    server = None
    if not env.get("DATABASE_URL"):
        env["DATABASE_URL"], server = embedded.start(workdir / "data")
    services = {
        "off": harness.Service({**env, **UNLIMITED}, harness.subdir(workdir, "off")),
        "on": harness.Service({**env, **CHARGED}, harness.subdir(workdir, "on")),
    }
    ok = True
    rounds: dict[str, list[list[Result]]] = {"off": [], "on": []}
    try:
        for service in services.values():
            service.wait_ready()
        user = services["off"].admin("create-user", "--email",
                                     f"bench-{secrets.token_hex(4)}@example.com")
        api_key = str(user["api_key"])
        asyncio.run(_seed(services["off"].url, api_key))
        for round_ in range(args.rounds):
            for label, service in services.items():
                results = asyncio.run(_requests(service.url, api_key, args, f"limiter {label}"))
                rounds[label].append(results)
                print(f"\nround {round_ + 1}, limiter {label}\n{harness.table(results)}")
                ok = ok and not any(r.unexpected for r in results)
        statement = asyncio.run(_statement(env["DATABASE_URL"], api_key, args.requests))
    finally:
        for service in services.values():
            status, _ = service.stop()
            ok = ok and status == 0
        if server is not None:
            embedded.stop(server)
    print(f"\nPython {sys.version.split()[0]}, {os.cpu_count()} CPUs, concurrency "
          f"{args.concurrency}, {args.rounds} rounds A B, {args.requests} requests each")
    for index, name in enumerate(f"GET {path}" for path in PATHS):
        off_rps = statistics.median(r[index].rps for r in rounds["off"])
        on_rps = statistics.median(r[index].rps for r in rounds["on"])
        off_p50 = statistics.median(r[index].percentile(50) for r in rounds["off"])
        on_p50 = statistics.median(r[index].percentile(50) for r in rounds["on"])
        print(f"{name:<28} req/s on/off {on_rps:.0f}/{off_rps:.0f} = {on_rps / off_rps:.3f}; "
              f"p50 on/off {on_p50:.2f}/{off_p50:.2f} ms = {on_p50 / off_p50:.3f}")
    plain = statement["plain"]
    print(f"authentication alone, one connection: key lookup {plain:.0f} us; with the charge "
          f"folded in {statement['folded']:.0f} us (x{statement['folded'] / plain:.2f}); "
          f"with a charge statement of its own {statement['separate']:.0f} us "
          f"(x{statement['separate'] / plain:.2f})")
    if ok:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
