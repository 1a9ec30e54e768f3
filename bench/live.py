"""GraphQL subscriptions: how long a committed change takes to reach subscribers
connected to another `kalends serve` process.

    python bench/live.py [--subscribers 10] [--rate 100] [--seconds 30] [--warmup 300]

Two `kalends serve` processes on one database (the embedded server the script
starts, or DATABASE_URL): the writer and the reader. Through the writer it creates
a profile and `--events` (100) events. `--subscribers` WebSocket clients (the
graphql-transport-ws protocol, in a process of their own so that their work does
not delay the writer's) connect to the reader and subscribe to
`event_changes(profile_id)` with `{ type event { id title } }`; the run starts once
the reader's /metrics counts every one of them. Then the writer sends `PATCH
/v1/events/{id}` at `--rate` changes a second, on a fixed schedule (not waiting for
answers), cycling through the events, `--warmup` changes unmeasured and then
`--seconds` worth measured; change i sets the title `c<i>`, by which subscribers
recognise it.

Each arrival is timed from the change's commit as PostgreSQL announces it: the
bench holds a LISTEN session of its own on the service's channel, and the i-th
notification it receives is the i-th change every subscriber receives (both in
commit order); the gap is what Kalends adds: the reader's listener, its fan-out,
the read as the subscriber may see it, and the WebSocket. (All the processes read
CLOCK_MONOTONIC.) Arrivals are also timed from the writer receiving its answer,
after the commit: a lower bound, negative when the subscriber had the change
first. Prints nearest-rank p50/p90/p99/max of both over every (change,
subscriber) pair, the writer's own latency and the rate it achieved, and the
counts: changes answered 200, notifications expected, received and missing, and
those whose event already showed a later change's title. Exit status 0 only if
every change was answered 200, every notification arrived in the announced order,
and both services stopped cleanly.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import multiprocessing
import os
import re
import secrets
import shutil
import sys
import time
import urllib.request
from collections.abc import AsyncIterator, Callable
from multiprocessing.connection import Connection
from typing import Any

import aiohttp
import asyncpg
import harness

sys.path.insert(0, str(harness.REPO))

from db import embedded
from db.changes import CHANNEL

DOCUMENT = """subscription changes($profile_id: ID!) {
  event_changes(profile_id: $profile_id) { type event { id title } }
}"""
Arrival = tuple[str, str, float]
"""(event ID, title shown, monotonic seconds)"""
SETTLE_SECONDS = 10.0
"""How long after the last change the subscribers may take to receive everything."""
SubscribersMain = Callable[[str, str, str, int, Connection], None]
"""A subscribers' process: (GraphQL WebSocket URL, API key, profile ID, count, pipe)."""


def _options() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    for name, default, text in (
        ("subscribers", 10, "WebSocket subscribers on the reader"),
        ("rate", 100, "changes a second"),
        ("seconds", 30, "seconds of measured changes"),
        ("warmup", 300, "unmeasured changes first"),
        ("events", 100, "events the changes cycle through"),
    ):
        parser.add_argument(f"--{name}", type=int, default=default, help=f"{text} ({default})")
    args = parser.parse_args()
    for name in ("subscribers", "rate", "seconds", "warmup", "events"):
        if not 1 <= getattr(args, name) <= harness.MAX_COUNT:
            parser.error(f"--{name} must be 1..{harness.MAX_COUNT}")
    return args


# ---------------------------------------------------------------------------
# The subscribers' process


async def graphql_socket(session: aiohttp.ClientSession, url: str, api_key: str
                         ) -> aiohttp.ClientWebSocketResponse:
    """A graphql-transport-ws socket to `url`, its connection acknowledged for the key."""
    socket = await session.ws_connect(url, protocols=("graphql-transport-ws",))
    await socket.send_json({"type": "connection_init",
                            "payload": {"Authorization": f"Bearer {api_key}"}})
    ack = await socket.receive_json(timeout=10)
    if ack.get("type") != "connection_ack":
        raise RuntimeError(f"connection_init answered {ack}")
    return socket


async def messages(socket: aiohttp.ClientWebSocketResponse
                   ) -> AsyncIterator[tuple[dict[str, Any], float]]:
    """Each message the socket receives, parsed, with its arrival (monotonic seconds),
    until the socket closes or receives anything but text."""
    async for message in socket:
        arrived = time.monotonic()
        if message.type is not aiohttp.WSMsgType.TEXT:
            break
        yield json.loads(message.data), arrived


def _subscribers_main(url: str, api_key: str, profile_id: str, count: int,
                      pipe: Connection) -> None:
    asyncio.run(_subscribers(url, api_key, profile_id, count, pipe))


async def _subscribers(url: str, api_key: str, profile_id: str, count: int,
                       pipe: Connection) -> None:
    """Connect, subscribe, say so; note each change's arrival until told to stop;
    send back every subscriber's arrivals, and any failure."""
    arrivals: list[list[Arrival]] = [[] for _ in range(count)]
    failures: list[str] = []
    async with aiohttp.ClientSession() as session:
        sockets = []
        for _ in range(count):
            socket = await graphql_socket(session, url, api_key)
            await socket.send_json({"id": "1", "type": "subscribe", "payload": {
                "query": DOCUMENT, "variables": {"profile_id": profile_id}}})
            sockets.append(socket)

        async def read(index: int, socket: aiohttp.ClientWebSocketResponse) -> None:
            async for data, arrived in messages(socket):
                if data.get("type") != "next":
                    failures.append(f"subscriber {index}: {data}")
                    return
                event = data["payload"]["data"]["event_changes"]["event"]
                arrivals[index].append((event["id"], event["title"], arrived))

        readers = [asyncio.create_task(read(i, s)) for i, s in enumerate(sockets)]
        pipe.send("subscribed")
        await asyncio.to_thread(pipe.recv)  # "stop"
        for socket in sockets:
            await socket.close()
        await asyncio.gather(*readers, return_exceptions=True)
    pipe.send({"arrivals": arrivals, "failures": failures})


# ---------------------------------------------------------------------------
# The writer


def _metric(url: str, name: str) -> float:
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as response:
        text = response.read().decode()
    found = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


async def _all_watched(url: str, count: int, seconds: float, service: str) -> None:
    """Wait until the service's /metrics counts `count` change-feed watches."""
    deadline = time.monotonic() + seconds
    while await asyncio.to_thread(_metric, url, "kalends_change_feed_watches") < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the {service} does not count every subscription")
        await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def subscribed(main: SubscribersMain, url: str, api_key: str, profile_id: str,
                     count: int, *, connect_seconds: float, watch_seconds: float,
                     service: str) -> AsyncIterator[Connection]:
    """Start `main` in a process of its own (so that reading the sockets does not delay
    the writer) for `count` subscriptions to the service at `url`; yield the bench's
    end of the pipe once the process says "subscribed" and the service's /metrics
    counts every subscription. On leaving, wait up to 30 s for the process, then kill it."""
    spawn = multiprocessing.get_context("spawn")
    mine, theirs = spawn.Pipe()
    process = spawn.Process(target=main, args=(
        url.replace("http://", "ws://") + "/graphql", api_key, profile_id, count, theirs))
    process.start()
    try:
        if not await asyncio.to_thread(mine.poll, connect_seconds):
            raise RuntimeError(
                f"the subscribers did not connect within {connect_seconds:.0f} s")
        mine.recv()
        await _all_watched(url, count, watch_seconds, service)
        yield mine
    finally:
        process.join(timeout=30)
        if process.is_alive():
            process.kill()


async def _changes(session: aiohttp.ClientSession, url: str, event_ids: list[str],
                   titles: list[str], rate: int
                   ) -> tuple[dict[str, tuple[float, float]], dict[int, int]]:
    """PATCH each title onto the events in turn, one every 1/rate s from now;
    returns {title: (sent, answered)} and the statuses counted."""
    times: dict[str, tuple[float, float]] = {}
    statuses: dict[int, int] = {}

    async def change(index: int, title: str) -> None:
        sent = time.monotonic()
        async with session.patch(f"{url}/v1/events/{event_ids[index % len(event_ids)]}",
                                 json={"title": title}) as response:
            await response.read()
        times[title] = (sent, time.monotonic())
        statuses[response.status] = statuses.get(response.status, 0) + 1

    start = time.monotonic()
    tasks = []
    for index, title in enumerate(titles):
        await asyncio.sleep(max(0.0, start + index / rate - time.monotonic()))
        tasks.append(asyncio.create_task(change(index, title)))
    await asyncio.gather(*tasks)
    return times, statuses


def _percentiles(values: list[float]) -> str:
    ordered = sorted(values)

    def at(p: float) -> float:
        return ordered[max(0, min(len(ordered), math.ceil(p / 100 * len(ordered))) - 1)] * 1000

    return (f"p50 {at(50):7.1f}  p90 {at(90):7.1f}  p99 {at(99):7.1f}  "
            f"max {ordered[-1] * 1000:7.1f} ms")


async def _announced(dsn: str, profile_id: str, into: list[tuple[str, float]]
                     ) -> asyncpg.Connection:
    """A LISTEN session of the bench's own: each of the profile's `event.updated`
    notifications, (event ID, monotonic seconds), in commit order."""
    conn = await asyncpg.connect(dsn)

    def heard(_conn: object, _pid: int, _channel: str, payload: str) -> None:
        kind, profile, event_id = payload.split(" ")
        if kind == "event.updated" and profile == profile_id:
            into.append((event_id, time.monotonic()))

    await conn.add_listener(CHANNEL, heard)
    return conn


async def _run(writer: str, reader: str, dsn: str, api_key: str, args: argparse.Namespace
               ) -> bool:
    headers = {"Authorization": f"Bearer {api_key}"}
    connector = aiohttp.TCPConnector(limit=64)
    async with aiohttp.ClientSession(headers=headers, connector=connector) as session:
        profile = await harness.call(session, "POST", f"{writer}/v1/profiles", 201, {
            "platform_id": f"live-{secrets.token_hex(4)}", "display_name": "Live bench"})
        events_url = f"{writer}/v1/profiles/{profile['id']}/events"
        event_ids = [(await harness.call(session, "POST", events_url, 201, {
                          "title": f"Event {i}", "start_time": "2031-01-01T10:00:00Z",
                          "start_timezone": "UTC"}))["id"]
                     for i in range(args.events)]
        announced: list[tuple[str, float]] = []
        listening = await _announced(dsn, profile["id"], announced)
        try:
            async with subscribed(_subscribers_main, reader, api_key, profile["id"],
                                  args.subscribers, connect_seconds=60, watch_seconds=30,
                                  service="reader") as mine:
                print(f"{args.subscribers} subscribers on the reader; "
                      f"{args.warmup} warm-up changes", flush=True)
                await _changes(session, writer, event_ids,
                               [f"w{i}" for i in range(args.warmup)], args.rate)
                await asyncio.sleep(1)
                measured = [f"c{i}" for i in range(args.rate * args.seconds)]
                print(f"{len(measured)} measured changes at {args.rate}/s", flush=True)
                began = time.monotonic()
                times, statuses = await _changes(session, writer, event_ids, measured,
                                                 args.rate)
                wall = time.monotonic() - began
                await asyncio.sleep(SETTLE_SECONDS)
                mine.send("stop")
                if not await asyncio.to_thread(mine.poll, 60):
                    raise RuntimeError("the subscribers did not report within 60 s")
                report = mine.recv()
        finally:
            await listening.close()

    from_commit: list[float] = []
    from_answer: list[float] = []
    received = later = disordered = 0
    for arrivals in report["arrivals"]:
        seen: set[str] = set()
        for index, (event_id, title, arrived) in enumerate(arrivals):
            if index < args.warmup:
                continue
            received += 1
            if index >= len(announced) or announced[index][0] != event_id:
                disordered += 1
                continue
            from_commit.append(arrived - announced[index][1])
            if title in times and title not in seen:
                seen.add(title)
                from_answer.append(arrived - times[title][1])
            else:
                later += 1  # read after a later change to its event had committed
    expected = len(measured) * args.subscribers
    missing = expected - received
    write_latency = [answered - sent for sent, answered in times.values()]
    print(f"\nPython {sys.version.split()[0]}, {os.cpu_count()} CPUs, {args.subscribers} "
          f"subscribers on the reader, changes through the writer at {args.rate}/s for "
          f"{args.seconds} s ({len(measured) / wall:.1f}/s achieved), loopback")
    print(f"changes: {len(measured)}, answered {dict(sorted(statuses.items()))}; announced "
          f"{len(announced) - args.warmup}")
    print(f"notifications: expected {expected}, received {received}, missing {missing}, "
          f"out of commit order {disordered}, showing a later change {later}")
    for failure in report["failures"]:
        print(f"subscriber failure: {failure}", file=sys.stderr)
    if from_commit:
        print(f"arrival after the commit's notification {_percentiles(from_commit)}")
    if from_answer:
        print(f"arrival after the writer's answer       {_percentiles(from_answer)}")
    print(f"writer's PATCH latency                  {_percentiles(write_latency)}")
    return (statuses == {200: len(measured)} and missing == 0 and not disordered
            and not report["failures"])


def main() -> int:
    args = _options()
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    workdir = harness._data_root()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(harness.REPO), env.get("PYTHONPATH")]))
    env.setdefault("KALENDS_RATE_LIMIT", harness.UNREFUSED_RATE_LIMIT)
    server = None
    if not env.get("DATABASE_URL"):
        env["DATABASE_URL"], server = embedded.start(workdir / "data")
        env["KALENDS_DATA_DIR"] = str(workdir / "data")
    print(f"two kalends serve processes, one database, data in {workdir}", flush=True)
    services = {name: harness.Service(env, harness.subdir(workdir, name))
                for name in ("writer", "reader")}
    ok = False
    try:
        for service in services.values():
            service.wait_ready()
        user = services["writer"].admin("create-user", "--email",
                                        f"bench-{secrets.token_hex(4)}@example.com")
        ok = asyncio.run(_run(services["writer"].url, services["reader"].url,
                              env["DATABASE_URL"], str(user["api_key"]), args))
    except Exception as exc:
        print(f"\nbenchmark failed: {exc!r}", file=sys.stderr)
        for name, service in services.items():
            print(f"--- last lines of the {name}'s log\n{service.log_tail()}", file=sys.stderr)
    finally:
        for name, service in services.items():
            status, took = service.stop()
            print(f"{name}: SIGTERM, exit status {status} after {took:.1f} s")
            ok = ok and status == 0
        if server is not None:
            embedded.stop(server)
    if ok:
        shutil.rmtree(workdir, ignore_errors=True)
    else:
        print(f"kept {workdir}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
