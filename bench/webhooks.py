"""Webhook fan-out: one change, many endpoints, the time until every one has it.

    python bench/webhooks.py [--endpoints 100] [--rounds 5]

Starts one real `kalends serve` process with KALENDS_WEBHOOK_ALLOW_HTTP=on (its
in-process job worker does the delivery) and, in this process, a receiver: an
aiohttp server on 127.0.0.1 that answers 200 to `POST /hook/<n>` and notes when
each message reached each path. Registers `--endpoints` endpoints on one profile
(B), each on its own path, through `POST /v1/profiles/{id}/webhook-endpoints`,
which is measured, and one endpoint on a second profile (A), the baseline.

After one unmeasured pair, `--rounds` times A then B: one event is created on the
profile through `POST /v1/profiles/{id}/events`, and the round measures the
create's API latency, the time from sending it to the first delivery received,
to the last (every endpoint reached once by that message), and to every
delivery marked delivered in the database with no due delivery job of its
endpoints left (polled every 10 ms, only once all have arrived). Before the next
round, each delivery's signature is checked with the `standardwebhooks` package
(untimed). Prints the median and max of each
measure for A and B, and the ratios B/A of the medians: for the create, what the
outbox costs the writer; for the last delivery, what fan-out costs over one
delivery on the same loaded machine. Copies of a message received more than
once by an endpoint (at least once allows them) are counted. Fails if an endpoint
is not reached within 120 s, a signature does not verify, or the database does
not settle within 60 s.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass, field

import aiohttp
import asyncpg
import harness
import orjson
from aiohttp import web
from harness import Result
from standardwebhooks import Webhook, WebhookVerificationError

DELIVERY_TIMEOUT = 120.0
"""Seconds for every delivery of one message to arrive."""
SETTLE_TIMEOUT = 60.0
"""Seconds, once all have arrived, for the database to show them delivered and no job left."""
_HEADERS = ("webhook-id", "webhook-timestamp", "webhook-signature")


@dataclass
class _Arrival:
    endpoint: int
    at: float
    body: bytes
    headers: dict[str, str]


@dataclass
class _Receiver:
    """Counts, per event ID, the distinct endpoints its messages reached."""

    arrivals: dict[str, list[_Arrival]] = field(default_factory=dict)
    copies: Counter[tuple[str, int]] = field(default_factory=Counter)
    reached: dict[str, set[int]] = field(default_factory=dict)
    waiting: dict[str, tuple[int, asyncio.Event]] = field(default_factory=dict)
    malformed: int = 0

    async def hook(self, request: web.Request) -> web.Response:
        at = time.perf_counter()
        body = await request.read()
        try:
            endpoint = int(request.match_info["n"])
            event_id = str(orjson.loads(body)["data"]["id"])
        except (ValueError, KeyError, TypeError):
            self.malformed += 1
            return web.Response(status=200)
        headers = {h: request.headers.get(h, "") for h in _HEADERS}
        self.arrivals.setdefault(event_id, []).append(_Arrival(endpoint, at, body, headers))
        self.copies[(headers["webhook-id"], endpoint)] += 1
        reached = self.reached.setdefault(event_id, set())
        reached.add(endpoint)
        wanted = self.waiting.get(event_id)
        if wanted is not None and len(reached) >= wanted[0]:
            wanted[1].set()
        return web.Response(status=200)

    def expect(self, event_id: str, count: int) -> asyncio.Event:
        done = asyncio.Event()
        if len(self.reached.get(event_id, ())) >= count:
            done.set()
        self.waiting[event_id] = (count, done)
        return done

    @property
    def duplicates(self) -> int:
        return sum(n - 1 for n in self.copies.values())


@dataclass
class _Group:
    """One side of the A/B comparison: a profile, its endpoints, its measures (seconds)."""

    name: str
    """A or B."""
    profile_id: str
    secrets: dict[int, str] = field(default_factory=dict)
    """Endpoint number (its path, /hook/<n>): its signing secret."""
    endpoint_ids: list[str] = field(default_factory=list)
    create: list[float] = field(default_factory=list)
    first: list[float] = field(default_factory=list)
    last: list[float] = field(default_factory=list)
    settled: list[float] = field(default_factory=list)

    @property
    def label(self) -> str:
        n = len(self.secrets)
        return f"{self.name}: {n} endpoint{'' if n == 1 else 's'}"


async def _call(session: aiohttp.ClientSession, method: str, url: str, expected: int,
                body: object = None) -> dict[str, object]:
    async with session.request(method, url, json=body) as response:
        data: dict[str, object] = (
            await response.json(content_type=None) if response.status != 204 else {})
        if response.status != expected:
            raise RuntimeError(f"{method} {url} answered {response.status}: {data}")
        return data


async def _profile(session: aiohttp.ClientSession, url: str, name: str) -> str:
    made = await _call(session, "POST", f"{url}/v1/profiles", 201, {
        "platform_id": f"webhooks-{secrets.token_hex(4)}", "display_name": name})
    return str(made["id"])


async def _endpoints(session: aiohttp.ClientSession, url: str, group: _Group, hooks: str,
                     numbers: range, concurrency: int, result: Result) -> None:
    """Registers an endpoint of `group`'s profile on `hooks/<n>` for each n, for
    event.created only."""
    queue = list(reversed(numbers))
    path = f"{url}/v1/profiles/{group.profile_id}/webhook-endpoints"

    async def client() -> None:
        while queue:
            n = queue.pop()
            body = {"url": f"{hooks}/{n}", "event_types": ["event.created"]}
            started = time.perf_counter()
            async with session.post(path, json=body) as response:
                data = await response.json(content_type=None)
                result.statuses[response.status] += 1
            result.latencies.append(time.perf_counter() - started)
            if response.status != 201:
                raise RuntimeError(f"POST {path} answered {response.status}: {data}")
            group.secrets[n] = str(data["secret"])
            group.endpoint_ids.append(str(data["id"]))

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    result.wall += time.perf_counter() - started


async def _until(conn: asyncpg.Connection, query: str, *args: object) -> None:
    """Polls `query` (a boolean) every 10 ms until it holds."""
    started = time.perf_counter()
    while not await conn.fetchval(query, *args):
        if time.perf_counter() - started > SETTLE_TIMEOUT:
            raise RuntimeError(f"not within {SETTLE_TIMEOUT:.0f} s: {query}")
        await asyncio.sleep(0.01)


_SETTLED = """
    SELECT NOT EXISTS (SELECT 1 FROM webhook_deliveries
                       WHERE endpoint_id = ANY($1) AND state <> 'delivered')
       AND NOT EXISTS (SELECT 1 FROM pgqueuer
                       WHERE entrypoint = 'webhook_delivery' AND execute_after <= now()
                         AND convert_from(payload, 'UTF8')::jsonb ->> 'endpoint_id' = ANY($1))
"""
"""This bench's deliveries all marked delivered, and no due delivery job of its endpoints left
(the database may be DATABASE_URL, shared with others)."""


async def _round(session: aiohttp.ClientSession, url: str, conn: asyncpg.Connection,
                 receiver: _Receiver, group: _Group, r: int, *, measured: bool) -> None:
    n = len(group.secrets)
    started = time.perf_counter()
    event = await _call(session, "POST", f"{url}/v1/profiles/{group.profile_id}/events", 201, {
        "title": f"Webhook fan-out {r}", "start_time": "2031-05-06T10:00",
        "start_timezone": "Europe/Paris"})
    created = time.perf_counter() - started
    event_id = str(event["id"])
    try:
        await asyncio.wait_for(receiver.expect(event_id, n).wait(), DELIVERY_TIMEOUT)
    except TimeoutError:
        missing = sorted(set(group.secrets) - receiver.reached.get(event_id, set()))
        raise RuntimeError(
            f"{group.label}, round {r}: {n - len(missing)} of {n} endpoints reached within "
            f"{DELIVERY_TIMEOUT:.0f} s; not /hook/" + ", /hook/".join(map(str, missing[:10]))
            + (", ..." if len(missing) > 10 else "")) from None
    arrivals = receiver.arrivals[event_id]
    first = min(a.at for a in arrivals) - started
    # The last endpoint reached for the first time (a late copy does not count).
    seen: set[int] = set()
    last = 0.0
    for a in sorted(arrivals, key=lambda a: a.at):
        if a.endpoint not in seen:
            seen.add(a.endpoint)
            last = a.at - started
    await _until(conn, _SETTLED, group.endpoint_ids)
    settled = time.perf_counter() - started
    _verify(group, arrivals)
    if measured:
        group.create.append(created)
        group.first.append(first)
        group.last.append(last)
        group.settled.append(settled)
    print(f"{group.label}, round {r}: create {created * 1000:.0f} ms, first "
          f"{first * 1000:.0f} ms, all {last * 1000:.0f} ms, settled {settled * 1000:.0f} ms"
          + ("" if measured else " (warm-up)"), flush=True)


def _verify(group: _Group, arrivals: list[_Arrival]) -> None:
    for a in arrivals:
        try:
            Webhook(group.secrets[a.endpoint]).verify(a.body, a.headers)
        except (KeyError, WebhookVerificationError) as exc:
            raise RuntimeError(f"{group.label}: the delivery to /hook/{a.endpoint} does not "
                               f"verify: {exc!r}") from None


def _ms(values: list[float]) -> tuple[float, float]:
    return statistics.median(values) * 1000, max(values) * 1000


def _report(a: _Group, b: _Group, receiver: _Receiver, rounds: int) -> None:
    print(f"\nwebhook fan-out, ms from sending POST /v1/profiles/{{id}}/events; {a.label} (a "
          f"profile of its own), {b.label}; {rounds} rounds each, A B A B, after one unmeasured "
          f"pair:")
    print(f"{'measure':<28} {'A median':>8} {'A max':>7} {'B median':>8} {'B max':>7} "
          f"{'B/A medians':>11}")
    for label, attr in (("create (API latency)", "create"),
                        ("first delivery received", "first"),
                        ("all deliveries received", "last"),
                        ("all marked delivered in DB", "settled")):
        am, ax = _ms(getattr(a, attr))
        bm, bx = _ms(getattr(b, attr))
        print(f"{label:<28} {am:>8.1f} {ax:>7.1f} {bm:>8.1f} {bx:>7.1f} {bm / am:>11.2f}")
    spread = statistics.median(
        last - first for first, last in zip(b.first, b.last, strict=True))
    rate = f", {(len(b.secrets) - 1) / spread:.0f} deliveries/s after the first" if spread else ""
    print(f"B: first to last delivery, median {spread * 1000:.0f} ms{rate}")
    total = sum(len(v) for v in receiver.arrivals.values())
    print(f"received {total} deliveries, {receiver.duplicates} duplicate copies, "
          f"{receiver.malformed} malformed; every signature verified (standardwebhooks)")


async def _benchmark(session: aiohttp.ClientSession, url: str, args: argparse.Namespace
                     ) -> list[Result]:
    receiver = _Receiver()
    app = web.Application()
    app.router.add_post("/hook/{n}", receiver.hook)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    hooks = f"http://127.0.0.1:{runner.addresses[0][1]}/hook"
    try:
        registered = Result("POST .../webhook-endpoints", expected=201)
        a = _Group("A", await _profile(session, url, "Webhooks baseline (A)"))
        b = _Group("B", await _profile(session, url, "Webhooks fan-out (B)"))
        await _endpoints(session, url, a, hooks, range(0, 1), 1, registered)
        await _endpoints(session, url, b, hooks, range(1, args.endpoints + 1),
                         args.concurrency, registered)
        print(f"{len(a.secrets) + len(b.secrets)} webhook endpoints registered, receiver on "
              f"{hooks}", flush=True)
        async with harness.database_url() as dsn:
            conn = await asyncpg.connect(dsn)
            try:
                for r in range(args.rounds + 1):
                    for group in (a, b):
                        await _round(session, url, conn, receiver, group, r, measured=r > 0)
                # Late copies, if any, would come now.
                await asyncio.sleep(1.0)
            finally:
                await conn.close()
        _report(a, b, receiver, args.rounds)
        return [registered]
    finally:
        await runner.cleanup()


def main() -> int:
    args = harness.options(__doc__ or "", {
        "endpoints": (100, "webhook endpoints of the fan-out profile"),
        "rounds": (5, "measured rounds of each side, A B A B"),
    })
    # The receiver is http on loopback, which the service refuses unless allowed.
    os.environ["KALENDS_WEBHOOK_ALLOW_HTTP"] = "on"
    return harness.run(_benchmark, args,
                       f"endpoint registration ({args.endpoints + 1} endpoints)")


if __name__ == "__main__":
    sys.exit(main())
