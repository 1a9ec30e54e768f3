"""One key's 1,000 subscriptions on one `kalends serve` process (docs/graphql.md,
"Dashboards: `/graphql`"): how long a change takes to reach all of them, and what they cost the
writes, A B A B.

    python bench/sockets.py [--subscriptions 1000] [--changes 60] [--rounds 2]

Through the API the bench user makes a profile and an event. Each round measures:
A `PATCH /v1/events/{id}` (a new title), `--changes` times one after another, with no
  socket open;
B the same while one key holds `--subscriptions` subscriptions to
  `event_changes(profile_id)` of that profile, 32 to a socket (the per-socket bound),
  opened by a process of their own (graphql-transport-ws) so that reading them does not
  delay the writer; the run waits until the service's /metrics counts all of them. After
  each PATCH the writer waits until every subscription has received that change; the
  time from sending the PATCH to the last arrival is the change's reach (the PATCH's own
  latency included). (Both processes read CLOCK_MONOTONIC.)
Prints p50/p99 of A's and B's PATCH latency, their ratio per round (goal: B within 1.2x
of A), and the reach's p50/p99/max (goal: all within 500 ms). Exit status 0 only if
every PATCH answered 200, every subscription received every change and the service
stopped cleanly.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import statistics
import sys
import time
from multiprocessing.connection import Connection

import aiohttp
import harness
import live
from harness import Result

PER_SOCKET = 32
REACH_TIMEOUT = 10.0


def _subscribers_main(url: str, api_key: str, profile_id: str, count: int,
                      pipe: Connection) -> None:
    asyncio.run(_subscribers(url, api_key, profile_id, count, pipe))


async def _subscribers(url: str, api_key: str, profile_id: str, count: int,
                       pipe: Connection) -> None:
    """Open the sockets and subscriptions, say so; then report, for each title the
    writer names, when the last subscription received it."""
    arrived: dict[str, list[float]] = {}
    failures: list[str] = []
    async with aiohttp.ClientSession() as session:
        sockets = []
        left = count
        while left:
            socket = await live.graphql_socket(session, url, api_key)
            for n in range(min(PER_SOCKET, left)):
                await socket.send_json({"id": str(n), "type": "subscribe", "payload": {
                    "query": live.DOCUMENT, "variables": {"profile_id": profile_id}}})
            left -= min(PER_SOCKET, left)
            sockets.append(socket)

        async def read(socket: aiohttp.ClientWebSocketResponse) -> None:
            async for data, now in live.messages(socket):
                if data.get("type") != "next":
                    failures.append(str(data)[:200])
                    continue
                title = data["payload"]["data"]["event_changes"]["event"]["title"]
                arrived.setdefault(title, []).append(now)

        readers = [asyncio.create_task(read(s)) for s in sockets]
        pipe.send("subscribed")
        while True:
            title = await asyncio.to_thread(pipe.recv)
            if title is None:
                break
            deadline = time.monotonic() + REACH_TIMEOUT
            while len(arrived.get(title, ())) < count and time.monotonic() < deadline:
                await asyncio.sleep(0.001)
            times = arrived.get(title, [])
            pipe.send((len(times), max(times, default=0.0), failures[:3]))
        for socket in sockets:
            await socket.close()
        await asyncio.gather(*readers, return_exceptions=True)


async def _patches(session: aiohttp.ClientSession, url: str, event_id: str, prefix: str,
                   count: int, pipe: Connection | None, subscriptions: int
                   ) -> tuple[Result, list[float]]:
    result = Result(f"{prefix} PATCH /v1/events/{{id}}")
    reach: list[float] = []
    began = time.monotonic()
    for i in range(count):
        title = f"{prefix}{i}-{secrets.token_hex(3)}"
        sent = time.monotonic()
        async with session.patch(f"{url}/v1/events/{event_id}", json={"title": title}) as r:
            await r.read()
        result.latencies.append(time.monotonic() - sent)
        result.statuses[r.status] += 1
        if pipe is not None:
            pipe.send(title)
            got, last, failures = await asyncio.to_thread(pipe.recv)
            if got < subscriptions or failures:
                raise RuntimeError(f"{title}: {got} of {subscriptions} subscriptions received "
                                   f"it within {REACH_TIMEOUT:.0f} s; {failures}")
            reach.append(last - sent)
        else:
            await asyncio.sleep(0.02)  # as B's pace, where the writer waits for the reach
    result.wall = time.monotonic() - began
    return result, reach


async def _benchmark(session: aiohttp.ClientSession, url: str, args: argparse.Namespace
                     ) -> list[Result]:
    api_key = session.headers["Authorization"].removeprefix("Bearer ")
    profile = await harness.call(session, "POST", f"{url}/v1/profiles", 201, {
        "platform_id": f"sockets-{secrets.token_hex(4)}", "display_name": "Sockets bench"})
    event = await harness.call(session, "POST", f"{url}/v1/profiles/{profile['id']}/events",
                               201, {"title": "Watched", "start_time": "2031-01-01T10:00:00Z",
                                     "start_timezone": "UTC"})
    await _patches(session, url, event["id"], "w", 20, None, 0)  # warm-up
    results: list[Result] = []
    reach: list[float] = []
    for round_ in range(args.rounds):
        a, _ = await _patches(session, url, event["id"], f"A{round_ + 1}-", args.changes,
                              None, 0)
        results.append(a)
        async with live.subscribed(_subscribers_main, url, api_key, profile["id"],
                                   args.subscriptions, connect_seconds=120, watch_seconds=60,
                                   service="service") as mine:
            b, reached = await _patches(session, url, event["id"], f"B{round_ + 1}-",
                                        args.changes, mine, args.subscriptions)
            results.append(b)
            reach += reached
            mine.send(None)
        print(f"round {round_ + 1}: PATCH p50 without {a.percentile(50):.1f} ms, with "
              f"{args.subscriptions} subscriptions {b.percentile(50):.1f} ms", flush=True)
    ratios = [results[i + 1].percentile(50) / results[i].percentile(50)
              for i in range(0, len(results), 2)]
    print(f"\nPATCH p50 with / without the subscriptions, per round: "
          f"{', '.join(f'{r:.2f}' for r in ratios)} (median {statistics.median(ratios):.2f}; "
          f"goal <= 1.2)")
    print(f"a change's reach to all {args.subscriptions} subscriptions (from the PATCH sent): "
          f"{live._percentiles(reach)} (goal: all within 500 ms)")
    return results


def main() -> int:
    args = harness.options(__doc__ or "", {
        "subscriptions": (1000, "one key's subscriptions (at most 1,000 a key)"),
        "changes": (60, "PATCHes per A and per B"),
        "rounds": (2, "A B rounds"),
        "concurrency": (4, "HTTP connections"),
    })
    return harness.run(_benchmark, args, f"{args.subscriptions} subscriptions, "
                                         f"{args.rounds} A B rounds")


if __name__ == "__main__":
    sys.exit(main())
