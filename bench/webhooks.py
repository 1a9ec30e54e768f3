"""Webhooks under load: fan-out to many endpoints, and one endpoint that refuses
some first attempts while changes keep coming.

    python bench/webhooks.py [--part both|fanout|load] [--endpoints 100] [--rounds 5]
                             [--rate 50] [--seconds 30] [--events 200] [--refuse 4]
                             [--drain 60] [--workers 0] [--baseline DIR]

Fan-out (`--part fanout`): one change, many endpoints, the time until every one has it.

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

Load (`--part load`): one endpoint (event.updated) on a profile of `--events`
events, made beforehand. For `--seconds`, `--rate` changes a second (PATCH of a
random event's title, open loop: sent on schedule whatever the answers; one
change of an event at a time, so its changes' order is the order sent), each
one message. The receiver answers 500 to the first attempt of one message in
`--refuse` (every n-th new `webhook-id`), so with Standard Webhooks' schedule
that message is due again 5 s later, and 2xx to everything else. Prints messages
per second produced and accepted while producing, how long the backlog took to
drain (at most `--drain` s after the last change), and the lag from sending a
change to the receiver accepting its message: p50, p90, p99, max (a message not
accepted by the end counts with the time waited, and the figure is shown as at
least), and the same figures had every step taken no time but the 5 s retry (the
floor: at the defaults a p99 of about 10 s, from messages refused behind their
event's refused message). Checks that each event's messages were accepted in the
order of its changes. `--workers`: `kalends worker` processes beside the service
(which runs jobs too), as a deployment would have, on the same database. `--baseline DIR`:
another checkout of Kalends (`git worktree add DIR HEAD` before a change), served
with a database of its own on the same server, with as many workers, and put
under the same load afterwards, for before/after figures in one run.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import heapq
import itertools
import os
import random
import secrets
import statistics
import subprocess
import sys
import time
from collections import Counter
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

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


async def _profile(session: aiohttp.ClientSession, url: str, name: str) -> str:
    made = await harness.call(session, "POST", f"{url}/v1/profiles", 201, {
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


_until = functools.partial(harness.until, timeout=SETTLE_TIMEOUT)


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
    event = await harness.call(
        session, "POST", f"{url}/v1/profiles/{group.profile_id}/events", 201, {
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


async def _fanout(session: aiohttp.ClientSession, url: str, args: argparse.Namespace
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


# ---------------------------------------------------------------------------
# Load: one endpoint, some first attempts refused, changes coming all the while

_LOAD_CLIENTS = 64
"""Changes in flight at once at most (the schedule is kept while below this)."""


@dataclass
class _Load:
    """One service under the load: when each change was sent, when its message was
    accepted, and what the receiver refused."""

    name: str
    fail_every: int
    sent: dict[str, float] = field(default_factory=dict)
    """Title (unique per change): when its PATCH was sent."""
    accepted: dict[str, float] = field(default_factory=dict)
    """Title: when its message was first answered 2xx."""
    attempts: Counter[str] = field(default_factory=Counter)
    """webhook-id: requests received."""
    versions: dict[str, list[int]] = field(default_factory=dict)
    """Event ID: the versions (title suffixes) accepted, in the order accepted."""
    refused: int = 0
    copies: int = 0
    produced_in: float = 0.0
    started: float = 0.0
    latencies: Result = field(init=False)

    def __post_init__(self) -> None:
        self.latencies = Result(f"PATCH /v1/events/{{id}}, {self.name}")

    async def hook(self, request: web.Request) -> web.Response:
        at = time.perf_counter()
        body = await request.read()
        webhook_id = request.headers.get("webhook-id", "")
        self.attempts[webhook_id] += 1
        # The first attempt of every `fail_every`-th message, by arrival.
        if self.attempts[webhook_id] == 1 and len(self.attempts) % self.fail_every == 0:
            self.refused += 1
            return web.Response(status=500)
        data = orjson.loads(body)["data"]
        title = str(data["title"])
        if title in self.accepted:
            self.copies += 1
        else:
            self.accepted[title] = at
            self.versions.setdefault(str(data["id"]), []).append(int(title.rsplit(" ", 1)[1]))
        return web.Response(status=200)

    def out_of_order(self) -> int:
        return sum(1 for vs in self.versions.values()
                   for a, b in itertools.pairwise(vs) if b < a)


async def _load_setup(session: aiohttp.ClientSession, url: str, hook: str, events: int
                      ) -> list[str]:
    """A profile with an endpoint on `hook` (event.updated only) and `events` events."""
    profile_id = await _profile(session, url, "Webhooks under load")
    await harness.call(session, "POST", f"{url}/v1/profiles/{profile_id}/webhook-endpoints",
                       201, {"url": hook, "event_types": ["event.updated"]})
    ids: list[str] = []
    for i in range(events):
        made = await harness.call(session, "POST", f"{url}/v1/profiles/{profile_id}/events", 201, {
            "title": f"load {i} 0", "start_time": "2031-05-06T10:00",
            "start_timezone": "Europe/Paris"})
        ids.append(str(made["id"]))
    return ids


async def _produce(session: aiohttp.ClientSession, url: str, ids: list[str], load: _Load,
                   args: argparse.Namespace) -> None:
    """`--rate` changes a second for `--seconds`, on schedule; one change of an
    event at a time, so the order sent is the order of its changes."""
    rng = random.Random(7)
    locks = [asyncio.Lock() for _ in ids]
    versions = [0] * len(ids)
    clients = asyncio.Semaphore(_LOAD_CLIENTS)

    async def change(e: int) -> None:
        async with clients, locks[e]:
            versions[e] += 1
            title = f"load {e} {versions[e]}"
            load.sent[title] = started = time.perf_counter()
            async with session.patch(f"{url}/v1/events/{ids[e]}",
                                     json={"title": title}) as response:
                await response.read()
                load.latencies.statuses[response.status] += 1
            load.latencies.latencies.append(time.perf_counter() - started)

    total = args.rate * args.seconds
    load.started = time.perf_counter()
    tasks = []
    for i in range(total):
        delay = load.started + i / args.rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(change(rng.randrange(len(ids)))))
    await asyncio.gather(*tasks)
    load.produced_in = time.perf_counter() - load.started
    load.latencies.wall = load.produced_in


async def _drain(load: _Load, seconds: float) -> float:
    """Waits until every change's message is accepted, or `seconds`; returns when
    that was, from the first change sent."""
    deadline = time.perf_counter() + seconds
    while len(load.accepted) < len(load.sent) and time.perf_counter() < deadline:
        await asyncio.sleep(0.05)
    return time.perf_counter() - load.started


_FIRST_RETRY = 5.0
"""Seconds from a refused first attempt to the retry (Standard Webhooks' schedule)."""


def _floor(load: _Load) -> list[float]:
    """The lags, sorted, had every step taken no time but the retry's wait: the same
    changes at the same times, each event's messages in order, the first attempt of
    every `fail_every`-th message refused (in the order first attempts are made),
    its event's later messages waiting behind its retry."""
    changes = sorted((at, title.rsplit(" ", 2)[1]) for title, at in load.sent.items())
    lanes: dict[str, list[int]] = {}
    for k, (_, event) in enumerate(changes):
        lanes.setdefault(event, []).append(k)
    head = dict.fromkeys(lanes, 0)
    waiting: set[str] = set()
    due: list[tuple[float, int, int]] = [(at, 0, k) for k, (at, _) in enumerate(changes)]
    heapq.heapify(due)
    arrived: set[int] = set()
    firsts = 0
    accepted: dict[int, float] = {}
    while due:
        now, retried, k = heapq.heappop(due)
        event = changes[k][1]
        if retried:
            accepted[k] = now
            waiting.discard(event)
            head[event] += 1
        else:
            arrived.add(k)
        lane = lanes[event]
        while event not in waiting and head[event] < len(lane) and lane[head[event]] in arrived:
            first = lane[head[event]]
            firsts += 1
            if firsts % load.fail_every == 0:
                waiting.add(event)
                heapq.heappush(due, (now + _FIRST_RETRY, 1, first))
                break
            accepted[first] = now
            head[event] += 1
    return sorted(accepted[k] - at for k, (at, _) in enumerate(changes))


def _pct(lags: list[float], q: float) -> float:
    return lags[max(0, min(len(lags) - 1, int(q / 100 * len(lags) + 0.5) - 1))]


def _load_report(load: _Load, drained: float) -> None:
    produced = len(load.sent)
    end_of_load = load.started + load.produced_in
    during = sum(1 for at in load.accepted.values() if at <= end_of_load)
    missing = produced - len(load.accepted)
    now = time.perf_counter()
    lags = sorted((load.accepted.get(t, now) - sent) for t, sent in load.sent.items())
    floor = _floor(load)

    def pct(q: float) -> float:
        return _pct(lags, q)

    bound = "\u2265 " if missing else ""
    print(f"\n{load.name}: {produced} changes in {load.produced_in:.1f} s "
          f"({produced / load.produced_in:.1f} messages/s produced), "
          f"{during / load.produced_in:.1f} messages/s accepted meanwhile; "
          + (f"all accepted {drained:.1f} s after the first change"
             if not missing else f"{missing} not accepted {drained:.1f} s after the first change"))
    print(f"{load.name}: lag from sending a change to its message accepted, s: "
          f"p50 {bound}{pct(50):.2f}, p90 {bound}{pct(90):.2f}, p99 {bound}{pct(99):.2f}, "
          f"max {bound}{lags[-1]:.2f}")
    print(f"{load.name}: the same lags had every step taken no time but the {_FIRST_RETRY:g} s "
          f"retry (the floor), s: p50 {_pct(floor, 50):.2f}, p90 {_pct(floor, 90):.2f}, "
          f"p99 {_pct(floor, 99):.2f}, max {floor[-1]:.2f}")
    print(f"{load.name}: {load.refused} first attempts refused (one message in "
          f"{load.fail_every}), {load.copies} copies accepted twice, "
          f"{load.out_of_order()} accepted out of their event's order")


async def _load_side(session: aiohttp.ClientSession, url: str, hook: str, load: _Load,
                     args: argparse.Namespace) -> None:
    ids = await _load_setup(session, url, hook, args.events)
    print(f"{load.name}: {args.events} events made; {args.rate} changes/s for "
          f"{args.seconds} s", flush=True)
    await _produce(session, url, ids, load, args)
    drained = await _drain(load, args.drain)
    _load_report(load, drained)
    if load.out_of_order():
        raise RuntimeError(f"{load.name}: messages of one event accepted out of order")


async def _baseline(stack: AsyncExitStack, tree: Path, workers: int) -> tuple[str, str]:
    """`kalends serve` from another checkout, with a database of its own on the
    service's server (its schema is older), and `workers` workers; its URL and a
    user's API key."""
    async with harness.database_url() as dsn:
        name = f"kalends_webhooks_baseline_{secrets.token_hex(4)}"
        server = urlunsplit(urlsplit(dsn)._replace(path="/postgres"))
        conn = await asyncpg.connect(server)
        try:
            await conn.execute(f"CREATE DATABASE {name}")
        finally:
            await conn.close()
    stack.push_async_callback(_drop_database, server, name)
    env = {**harness._SERVICE_ENV, "PYTHONPATH": str(tree), "KALENDS_WEBHOOK_ALLOW_HTTP": "on",
           "DATABASE_URL": urlunsplit(urlsplit(dsn)._replace(path="/" + name))}
    port = harness._free_port()
    process = subprocess.Popen([sys.executable, "-m", "kalends", "serve", "--port", str(port)],
                               cwd=tree, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    stack.callback(_stop, process)
    url = f"http://127.0.0.1:{port}"
    await _ready(url, process)
    _start_workers(stack, env, tree, workers)
    made = await asyncio.to_thread(subprocess.run, [
        sys.executable, "-m", "kalends", "admin", "create-user", "--email",
        f"bench-{secrets.token_hex(4)}@example.com", "--name", "Bench"],
        cwd=tree, env=env, capture_output=True, check=True, timeout=120)
    return url, str(orjson.loads(made.stdout)["api_key"])


async def _ready(url: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + harness.STARTUP_TIMEOUT
    async with aiohttp.ClientSession() as probe:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"the baseline exited with {process.returncode} on start")
            try:
                async with probe.get(f"{url}/readyz") as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.2)
    raise RuntimeError("the baseline did not become ready")


def _start_workers(stack: AsyncExitStack, env: dict[str, str], tree: Path, count: int) -> None:
    """`kalends worker` processes (jobs only: webhook delivery among them), stopped
    with the stack."""
    for _ in range(count):
        worker = subprocess.Popen([sys.executable, "-m", "kalends", "worker"], cwd=tree,
                                  env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        stack.callback(_stop, worker)


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=harness.STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


async def _drop_database(server: str, name: str) -> None:
    conn = await asyncpg.connect(server)
    try:
        await conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    finally:
        await conn.close()


async def _load(session: aiohttp.ClientSession, url: str, args: argparse.Namespace
                ) -> list[Result]:
    app = web.Application()
    sides = {"current": _Load("this checkout", args.refuse)}
    if args.baseline:
        sides["baseline"] = _Load("baseline", args.refuse)
    for key, load in sides.items():
        app.router.add_post(f"/load/{key}", load.hook)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    hooks = f"http://127.0.0.1:{runner.addresses[0][1]}/load"
    try:
        async with AsyncExitStack() as stack, harness.database_url() as dsn:
            _start_workers(stack, {**harness._SERVICE_ENV, "DATABASE_URL": dsn}, harness.REPO,
                           args.workers)
            await _load_side(session, url, f"{hooks}/current", sides["current"], args)
        if args.baseline:
            async with AsyncExitStack() as stack:
                base_url, key = await _baseline(stack, Path(args.baseline).resolve(),
                                                args.workers)
                headers = {"Authorization": f"Bearer {key}"}
                async with aiohttp.ClientSession(headers=headers) as base:
                    await _load_side(base, base_url, f"{hooks}/baseline", sides["baseline"],
                                     args)
    finally:
        await runner.cleanup()
    return [load.latencies for load in sides.values()]


async def _benchmark(session: aiohttp.ClientSession, url: str, args: argparse.Namespace
                     ) -> list[Result]:
    results = []
    if args.part in ("both", "fanout"):
        results += await _fanout(session, url, args)
    if args.part in ("both", "load"):
        results += await _load(session, url, args)
    return results


def main() -> int:
    args = harness.options(__doc__ or "", {
        "endpoints": (100, "webhook endpoints of the fan-out profile"),
        "rounds": (5, "measured rounds of each side, A B A B"),
        "rate": (50, "load: changes (messages) per second"),
        "seconds": (30, "load: seconds of changes"),
        "events": (200, "load: events the changes are spread over"),
        "refuse": (4, "load: one message in this many has its first attempt refused"),
        "drain": (60, "load: seconds to wait, after the last change, for every message"),
    }, part=("both", "fanout, load or both"),
        workers=("0", "load: `kalends worker` processes beside the service, which runs "
                      "jobs too (0: none)"),
        baseline=(None, "load: another Kalends checkout, put under the same load"))
    if not args.workers.isdigit() or int(args.workers) > 8:
        raise SystemExit("--workers must be 0..8")
    args.workers = int(args.workers)
    if args.part not in ("both", "fanout", "load"):
        raise SystemExit("--part must be fanout, load or both")
    # The receiver is http on loopback, which the service refuses unless allowed.
    os.environ["KALENDS_WEBHOOK_ALLOW_HTTP"] = "on"
    return harness.run(_benchmark, args,
                       f"{args.part}: endpoint registration ({args.endpoints + 1} endpoints)"
                       if args.part != "load" else
                       f"load: {args.rate} changes/s for {args.seconds} s over {args.events}"
                       " events")


if __name__ == "__main__":
    sys.exit(main())
