"""Subscription fan-out: how long a change to a profile takes to reach every subscriber.

    python bench/fanout.py [--subscribers 1000] [--rounds 5]

Starts one real `kalends serve` process (its in-process job worker does the
sync), creates `--subscribers` users (with `domain.accounts.create_user`,
straight into the service's database: a thousand `kalends admin` processes
would take minutes) and subscribes each of them to one profile through
`POST /v1/subscriptions`, which is measured. Then, `--rounds` times, the
publisher creates an event, renames it, cancels it and deletes it through the
API, and after each step the time is taken until every subscriber's default
calendar shows the change (polled with one SQL count every 10 ms). Prints the
subscribe table and the fan-out times (median and worst over the rounds).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import secrets
import statistics
import sys
import time

import aiohttp
import asyncpg
import harness
from harness import Result

FAN_OUT_TIMEOUT = 120.0


async def _subscribe(url: str, keys: list[str], profile_id: str, concurrency: int) -> Result:
    result = Result("POST /v1/subscriptions", expected=201)
    body = {"subscription_type": "profile", "profile_id": profile_id}
    queue = list(keys)

    async def client(session: aiohttp.ClientSession) -> None:
        while queue:
            key = queue.pop()
            started = time.perf_counter()
            async with session.post(f"{url}/v1/subscriptions", json=body,
                                    headers={"Authorization": f"Bearer {key}"}) as response:
                await response.read()
                result.statuses[response.status] += 1
            result.latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    async with aiohttp.ClientSession() as session:
        await asyncio.gather(*(client(session) for _ in range(concurrency)))
    result.wall = time.perf_counter() - started
    return result


_until = functools.partial(harness.until, timeout=FAN_OUT_TIMEOUT)
"""Seconds until a query holds, polled every 10 ms."""


async def _benchmark(session: aiohttp.ClientSession, url: str, args: argparse.Namespace
                     ) -> list[Result]:
    profile = await harness.call(session, "POST", f"{url}/v1/profiles", 201, {
        "platform_id": f"fanout-{secrets.token_hex(4)}", "display_name": "Fan-out profile"})
    profile_id = str(profile["id"])
    async with harness.database_url() as dsn:
        keys = await harness.user_keys(dsn, args.subscribers, "fan", "Fan")
        print(f"{len(keys)} subscribers created", flush=True)
        subscribed = await _subscribe(url, keys, profile_id, args.concurrency)
        conn = await asyncpg.connect(dsn)
        try:
            times = await _rounds(session, url, conn, profile_id, args)
        finally:
            await conn.close()
    n = args.subscribers
    print(f"\nfan-out to {n} subscribers' calendars, seconds from the API answer until "
          f"all {n} copies show the change ({args.rounds} rounds):")
    print(f"{'change':<26} {'median':>7} {'worst':>7}")
    for name, seconds in times.items():
        print(f"{name:<26} {statistics.median(seconds):>7.2f} {max(seconds):>7.2f}")
    return [subscribed]


_COPIES = "SELECT count(*) {condition} FROM calendar_events WHERE source_event_id = $1"
_ALL = _COPIES.format(condition="= $2")


async def _rounds(session: aiohttp.ClientSession, url: str, conn: asyncpg.Connection,
                  profile_id: str, args: argparse.Namespace) -> dict[str, list[float]]:
    n = args.subscribers
    steps: dict[str, list[float]] = {
        "new event": [], "event renamed": [], "event cancelled": [], "event deleted": []}
    # The subscriptions' own first syncs have nothing to copy; let them drain.
    await _until(conn, "SELECT count(*) = 0 FROM pgqueuer")
    for r in range(args.rounds):
        event = await harness.call(session, "POST", f"{url}/v1/profiles/{profile_id}/events", 201, {
            "title": f"Fan-out {r}", "start_time": "2031-06-01T19:00",
            "start_timezone": "Europe/Paris"})
        path = f"{url}/v1/events/{event['id']}"
        steps["new event"].append(await _until(conn, _ALL, event["id"], n))
        await harness.call(session, "PATCH", path, 200, {"title": f"Fan-out {r} renamed"})
        steps["event renamed"].append(
            await _until(conn, f"{_ALL} AND title LIKE '%renamed'", event["id"], n))
        await harness.call(session, "POST", f"{path}/cancel", 200, {})
        steps["event cancelled"].append(
            await _until(conn, f"{_ALL} AND status = 'cancelled'", event["id"], n))
        await harness.call(session, "DELETE", path, 204)
        steps["event deleted"].append(
            await _until(conn, _COPIES.format(condition="= 0"), event["id"]))
        print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in steps.items()),
              flush=True)
    return steps


def main() -> int:
    args = harness.options(__doc__ or "", {
        "subscribers": (1000, "subscribers of the profile"),
        "rounds": (5, "create/rename/cancel/delete rounds"),
    })
    return harness.run(_benchmark, args, f"1 profile, {args.subscribers} subscribers")


if __name__ == "__main__":
    sys.exit(main())
