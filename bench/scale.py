"""What the requests cost as the data grows: the same data set seeded at 10,000, 100,000 and
1,000,000 events, and the same requests through a real `kalends serve` at each size.

    python bench/scale.py [--sizes 10000,100000,1000000] [--requests 300] [--warmup 50]
                          [--concurrency 16] [--rounds 1] [--baseline DIR] [--data DIR]
                          [--only TEXT] [--check] [--explain] [--keep]

One embedded PostgreSQL (in `--data DIR`, else a temporary directory) holds, per checkout
schema and size, a template database seeded once by bench/seed.py (run with that checkout's
code on PYTHONPATH; see its docstring for the data set) and kept in `--data` for later runs.
Each size is then measured on a fresh copy of its template (CREATE DATABASE ... TEMPLATE), so
every run starts from the same rows, whatever earlier runs wrote. `kalends serve` runs on the
copy (DATABASE_URL; KALENDS_DATA_DIR holds its key file), the bench user gets a new key with
`kalends admin create-key`. All templates are seeded before any service starts; then every
size's service runs at once and each request kind is measured size after size (and checkout
after checkout), `--rounds` times, after a warm-up, with `--concurrency` clients, so that a
drift of the machine's load falls on every size alike: the median over rounds of p50 and of
requests/s, and the ratio of the largest size's p50 to the smallest's (flagged above 1.5).

`--baseline DIR`: another checkout (`git worktree add DIR <commit>`), seeded with its own
migrations and code into its own databases, served at the same time and measured A B A B per
request kind (`--rounds` times); both tables and the after/before p50 ratios are printed.
The agenda is measured twice: over the bench user's default calendars, and with its connected
calendar too (5,000 CalDAV events and a history growing with the size, seed.py's `_connect`,
named in `calendar_ids`). Both are also measured against their floor (`trim_to_window`): at
each size, another copy of the template in which the bench user's calendars, personal and
connected, hold only the rows with an occurrence in the 31-day window, served by its own
`kalends serve`, checked to give the same answers, and measured by the same requests right
after the real ones; the last tables give agenda p50 / floor p50 (flagged above 1.5). Only the
measured checkout gets a floor.

`--check`: after measuring a size, create one event, one subscription copy and one RSVP
through the API and compare their rows' shapes with the seeded rows'. `--explain`: EXPLAIN
(ANALYZE, BUFFERS) of the search and agenda statements, run by this checkout's functions.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import re
import secrets
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import asyncpg
import harness
from harness import Result, Scenario

sys.path.insert(0, str(harness.REPO))

SEEDER = Path(__file__).resolve().parent / "seed.py"
BENCH_EMAIL = "scale@example.com"
RARE_WORD, COMMON_WORD = "quokka", "concert"
"""As bench/seed.py writes them."""
DEEP_PAGES = 50
"""The deep page is the one after this many pages of 100 (reached by their cursors)."""
FLAG_RATIO = 1.5
MAX_CONNECTIONS = 500
"""Every service runs at once (two checkouts and the agenda's floor at three sizes), each with
its request pool (10), jobs pool (4) and webhook delivery's (8): more than PostgreSQL's
default 100, which made requests fail with 503 (set with ALTER SYSTEM in the bench's server)."""
SEED_TIMEOUT = 3 * 3600
COPY_TIMEOUT = 1800


def _with_database(dsn: str, name: str) -> str:
    parts = urlsplit(dsn)
    return urlunsplit(parts._replace(path=f"/{name}"))


# ---------------------------------------------------------------------------
# Checkouts and their databases


@dataclass
class Checkout:
    label: str
    tree: Path
    key: str = ""
    """What its seeded data depends on: its migrations, the seeder, the day."""

    def __post_init__(self) -> None:
        digest = hashlib.sha256(SEEDER.read_bytes())
        digest.update(datetime.now(UTC).date().isoformat().encode())
        for path in sorted((self.tree / "db" / "migrations").glob("*.sql")):
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
        self.key = digest.hexdigest()[:12]

    def env(self, base: dict[str, str], dsn: str) -> dict[str, str]:
        return {**base, "DATABASE_URL": dsn, "PYTHONPATH": str(self.tree)}


async def _admin_connect(dsn: str) -> asyncpg.Connection:
    return await asyncpg.connect(dsn, command_timeout=COPY_TIMEOUT)


async def _seeded(admin_dsn: str, name: str) -> dict[str, Any] | None:
    """The seed summary stored on template `name`, or None if it is missing or incomplete."""
    conn = await _admin_connect(admin_dsn)
    try:
        comment = await conn.fetchval(
            "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = $1",
            name)
        exists = await conn.fetchval("SELECT true FROM pg_database WHERE datname = $1", name)
        if exists and not comment:  # a seeding that did not finish
            await conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
    finally:
        await conn.close()
    return json.loads(comment) if comment else None


def _run(command: list[str], env: dict[str, str], cwd: Path, timeout: float) -> str:
    done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:3])} failed:\n{done.stderr[-3000:]}")
    return done.stdout


async def template(checkout: Checkout, size: int, admin_dsn: str, base_env: dict[str, str]
                   ) -> tuple[str, dict[str, Any]]:
    """The template database of `checkout` at `size`, seeded unless it already was."""
    name = f"scale_{checkout.key}_{size}"
    summary = await _seeded(admin_dsn, name)
    if summary is not None:
        print(f"{checkout.label} {size}: template {name} seeded before "
              f"({summary['seconds']} s then)", flush=True)
        return name, summary
    conn = await _admin_connect(admin_dsn)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    dsn = _with_database(admin_dsn, name)
    env = checkout.env(base_env, dsn)
    started = time.perf_counter()
    _run([sys.executable, "-m", "kalends", "migrate"], env, checkout.tree, 600)
    migrated = time.perf_counter() - started
    print(f"{checkout.label} {size}: seeding {name} ...", flush=True)
    summary = json.loads(_run([sys.executable, str(SEEDER), "--dsn", dsn, "--size", str(size)],
                              env, checkout.tree, SEED_TIMEOUT))
    summary["seconds"] = round(time.perf_counter() - started, 1)
    summary["migrate_seconds"] = round(migrated, 1)
    conn = await _admin_connect(admin_dsn)
    try:
        # The mark of a complete seeding; also what later runs read back.
        await conn.execute(f"COMMENT ON DATABASE \"{name}\" IS "
                           f"{_literal(json.dumps(summary))}")
    finally:
        await conn.close()
    print(f"{checkout.label} {size}: seeded in {summary['seconds']} s: {summary['events']} "
          f"events, {summary['rsvps']} RSVPs, {summary['copies']} subscription copies "
          f"(seconds: migrate {summary['migrate_seconds']}, {summary.get('steps')})", flush=True)
    return name, summary


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


async def fresh_copy(admin_dsn: str, template_name: str, name: str) -> str:
    """A new database `name`, a file copy of the template (the seeded rows, their statistics
    and visibility map as they are)."""
    conn = await _admin_connect(admin_dsn)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await conn.execute(
            f'CREATE DATABASE "{name}" TEMPLATE "{template_name}" STRATEGY FILE_COPY')
    finally:
        await conn.close()
    return _with_database(admin_dsn, name)


async def drop(admin_dsn: str, name: str) -> None:
    conn = await _admin_connect(admin_dsn)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


# ---------------------------------------------------------------------------
# One service on one seeded copy


@dataclass
class Target:
    """A running service and what its requests need."""

    label: str
    service: harness.Service
    dsn: str
    session: aiohttp.ClientSession
    bench_profile: str = ""
    subscribed: list[str] = field(default_factory=list)
    event_ids: list[str] = field(default_factory=list)
    rsvp_event_ids: list[str] = field(default_factory=list)
    deep_cursor: str = ""
    agenda_calendars: str = ""
    """The bench user's personal and connected calendars, comma-separated."""
    token: str = field(default_factory=lambda: secrets.token_hex(3))
    floor_of: Target | None = None
    """For an agenda floor: the target whose agenda it is the floor of."""


async def _targets_of(target: Target, needed: int) -> None:
    """Ids the requests use, read from the database: events to read, events to answer."""
    conn = await asyncpg.connect(target.dsn)
    try:
        target.bench_profile = await conn.fetchval(
            "SELECT id FROM profiles WHERE platform_id = 'scale-0000'")
        target.agenda_calendars = ",".join(r[0] for r in await conn.fetch(
            "SELECT c.id FROM calendars c JOIN users u ON u.id = c.user_id WHERE u.email = $1"
            " UNION ALL SELECT x.id FROM external_calendars x JOIN users u ON u.id = x.user_id"
            " WHERE u.email = $1 ORDER BY 1", BENCH_EMAIL))
        target.subscribed = [r[0] for r in await conn.fetch(
            "SELECT s.profile_id FROM subscriptions s JOIN users u ON u.id = s.user_id"
            " WHERE u.email = $1 ORDER BY s.profile_id", BENCH_EMAIL)]
        # Public events of public profiles, in an order unrelated to time or profile.
        rows = await conn.fetch(
            "SELECT e.id FROM events e JOIN profiles p ON p.id = e.profile_id"
            " WHERE NOT e.is_private AND NOT p.is_private AND e.status = 'scheduled'"
            " ORDER BY md5(e.id) LIMIT $1", 1000 + needed)
    finally:
        await conn.close()
    ids = [r[0] for r in rows]
    target.event_ids, target.rsvp_event_ids = ids[:1000], ids[1000:]


async def _deep_cursor(target: Target) -> str:
    """The cursor after DEEP_PAGES pages of 100, walked through the service."""
    cursor = ""
    for _ in range(DEEP_PAGES):
        query = f"limit=100&cursor={cursor}" if cursor else "limit=100"
        async with target.session.get(f"{target.service.url}/v1/events?{query}") as response:
            page = await response.json(content_type=None)
        if response.status != 200:
            raise RuntimeError(f"GET /v1/events answered {response.status}: {page}")
        if not page.get("next_cursor"):
            break
        cursor = page["next_cursor"]
    return cursor


@dataclass(frozen=True)
class Kind:
    """One request kind: `request(target, i)` -> (method, path, body), and its status."""

    name: str
    request: Callable[[Target, int], tuple[str, str, object]]
    expected: int = 200


def _post_event(t: Target, i: int) -> tuple[str, str, object]:
    # A title of its own each time: the slug is derived (the profile's slugs with the same
    # prefix are read, under its lock), and no suffix chain grows over the run.
    day = datetime.now(UTC).date() + timedelta(days=i % 300)
    return "POST", "/v1/events", {
        "profile_id": t.bench_profile, "title": f"Scale write {t.token} {i}",
        "description": "Written by bench/scale.py", "location": "Room 1",
        "start_time": f"{day}T18:00", "start_timezone": "Europe/Paris",
        "end_time": f"{day}T19:30", "end_timezone": "Europe/Paris"}


KINDS = (
    Kind("GET /v1/events?limit=20", lambda t, i: ("GET", "/v1/events?limit=20", None)),
    Kind("GET /v1/events deep page", lambda t, i: (
        "GET", f"/v1/events?limit=20&cursor={t.deep_cursor}", None)),
    Kind("GET /v1/events/{id}", lambda t, i: (
        "GET", f"/v1/events/{t.event_ids[i % len(t.event_ids)]}", None)),
    # A page of 10: a full page at every size (a subscribed profile holds 10 events at 10k,
    # about 950 at 1M), so that every size gives the same answer, not more of it.
    Kind("GET /v1/profiles/{id}/events", lambda t, i: (
        "GET", f"/v1/profiles/{t.subscribed[i % len(t.subscribed)]}/events?limit=10", None)),
    Kind(f"GET /v1/search?q={RARE_WORD}", lambda t, i: (
        "GET", f"/v1/search?q={RARE_WORD}", None)),
    Kind(f"GET /v1/search?q={COMMON_WORD}", lambda t, i: (
        "GET", f"/v1/search?q={COMMON_WORD}", None)),
    Kind("GET /v1/agenda?days=31", lambda t, i: ("GET", "/v1/agenda?days=31", None)),
    Kind("GET /v1/agenda?days=31 +connected", lambda t, i: (
        "GET", f"/v1/agenda?days=31&calendar_ids={t.agenda_calendars}", None)),
    Kind("POST /v1/events", _post_event, 201),
    Kind("POST /v1/events/{id}/rsvps", lambda t, i: (
        "POST", f"/v1/events/{t.rsvp_event_ids[i]}/rsvps", {"status": "going"}), 201),
)


def _scenario(kind: Kind, target: Target) -> Scenario:
    def url_for(i: int) -> str:
        return f"{target.service.url}{kind.request(target, i)[1]}"

    def body_for(i: int) -> object:
        return kind.request(target, i)[2]

    method = kind.request(target, 0)[0]
    return Scenario(kind.name, url_for, method=method,
                    body_for=body_for if method == "POST" else None, expected=kind.expected)


# ---------------------------------------------------------------------------
# The agenda's floor


AGENDA = "GET /v1/agenda?days=31"
AGENDA_CONNECTED = "GET /v1/agenda?days=31 +connected"
AGENDAS = (AGENDA, AGENDA_CONNECTED)
AGENDA_DAYS = 31


async def trim_to_window(dsn: str) -> str:
    """Deletes from database `dsn` every row of the bench user's calendars that has no
    occurrence in the agenda's window (AGENDA_DAYS days from today in the user's zone, as
    `GET /v1/agenda?days=31` resolves it), then VACUUM ANALYZE: what is left is the least the
    agenda must read, expand and build to give the same answer. Which rows meet the window
    is decided by this checkout's own functions: the agenda's statements
    (`db.agenda.events`, `db.connected.agenda_events`) and their expansion
    (`domain.agenda.spans`; `domain.connected.occurrences.expand`, one event's components
    at a time, since overrides and their master go together); a row whose expansion fails is
    kept (it makes the answer incomplete). Rows that meet the window but fall past the
    answer's MAX_ITEMS cut are kept too: they are why the answer says `complete: false`.
    Returns what was kept, in words."""
    from db import agenda as store
    from db import connected as connected_store
    from db.database import Database
    from domain import agenda, expansion

    db = await Database.connect(dsn, min_size=1, max_size=2)
    try:
        user = await db.fetchrow("SELECT id, timezone FROM users WHERE email = $1",
                                 BENCH_EMAIL)
        assert user is not None
        w = agenda.window(agenda.resolve_zone(None, user["timezone"]), None, AGENDA_DAYS)
        calendars = [r["id"] for r in await store.calendars(db, user["id"], None, None)
                     if r["provider"] == agenda.PROVIDER]
        read = await store.events(db, user["id"], calendars, w.start, w.end, w.first_day,
                                  w.end_date, limit=agenda.READ_ROWS)
        changes = await expansion.changes(db, read, w.start, w.end, w.first_day, w.end_date)

        def _shown(rows: list[asyncpg.Record]) -> list[str]:
            return [r["id"] for r in rows
                    if expansion.spans(r, w, expansion.request_budget(),
                                       changes=changes) != ([], None)]

        needed = await expansion.run(_shown, read)
        held = await db.fetchval(
            "SELECT count(*) FROM calendar_events WHERE calendar_id = ANY($1::text[])",
            calendars)
        await db.execute(
            "DELETE FROM calendar_events WHERE calendar_id = ANY($1::text[])"
            " AND NOT id = ANY($2::text[])", calendars, needed)
        connected = [r["id"] for r in await db.fetch(
            "SELECT id FROM external_calendars WHERE user_id = $1", user["id"])]
        components = await connected_store.agenda_events(db, connected, w.start, w.end)
        bounds = expansion.Bounds(w.start, w.end, w.first_day, w.end_date, w.tz)
        groups: dict[tuple[str, str], list[asyncpg.Record]] = {}
        for row in components:
            groups.setdefault((row["calendar_id"], row["uid"]), []).append(row)

        def _kept() -> list[str]:
            return [r["id"] for group in groups.values()
                    if expansion.connected(group, bounds, agenda.MAX_ITEMS, set(),
                                           expansion.request_budget()) != ([], None)
                    for r in group]

        kept = await expansion.run(_kept)
        connected_held = await db.fetchval(
            "SELECT count(*) FROM external_events WHERE calendar_id = ANY($1::text[])",
            connected)
        await db.execute(
            "DELETE FROM external_events WHERE calendar_id = ANY($1::text[])"
            " AND NOT id = ANY($2::text[])", connected, kept)
        await db.execute("VACUUM ANALYZE")
    finally:
        await db.close()
    return (f"agenda floor: kept the {len(needed)} rows of the bench user's calendars that "
            f"meet the window from {w.first_day} (of {held}; the agenda's statement read "
            f"{len(read)}), and {len(kept)} of its connected calendars' {connected_held} "
            f"(their statement read {len(components)})")


async def _agenda_answer(target: Target, calendars: str) -> dict[str, Any]:
    chosen = f"&calendar_ids={calendars}" if calendars else ""
    return await _api(target, "GET", f"/v1/agenda?days={AGENDA_DAYS}&detail=full{chosen}",
                      None)


async def same_agenda(floor: Target) -> str | None:
    """None if the floor's agendas (default and with the connected calendar) answer exactly
    as its target's (every field of `detail=full`: window, items, complete, sources,
    warnings), else the first difference."""
    assert floor.floor_of is not None
    for calendars in ("", floor.floor_of.agenda_calendars):
        difference = _difference(await _agenda_answer(floor.floor_of, calendars),
                                 await _agenda_answer(floor, calendars))
        if difference is not None:
            return f"{'with' if calendars else 'without'} calendar_ids: {difference}"
    return None


def _difference(real: dict[str, Any], least: dict[str, Any]) -> str | None:
    if real == least:
        return None
    for key in sorted(real.keys() | least.keys()):
        if key == "items":
            continue
        if real.get(key) != least.get(key):
            return f"{key}: {real.get(key)!r} against the floor's {least.get(key)!r}"
    items, floor_items = real["items"], least["items"]
    for i, (a, b) in enumerate(zip(items, floor_items, strict=False)):
        if a != b:
            return f"item {i}: {a} against the floor's {b}"
    return f"{len(items)} items against the floor's {len(floor_items)}"


# ---------------------------------------------------------------------------
# The run


@dataclass
class Measured:
    """p50 (ms) and req/s per (checkout label, kind name, size), medians over rounds."""

    p50: dict[tuple[str, str, int], float] = field(default_factory=dict)
    rps: dict[tuple[str, str, int], float] = field(default_factory=dict)
    bad: list[str] = field(default_factory=list)


async def _start(checkout: Checkout, size: int, template_name: str, admin_dsn: str,
                 base_env: dict[str, str], workdir: Path, stack: contextlib.AsyncExitStack,
                 args: argparse.Namespace, floor_of: Target | None = None) -> Target:
    """A service on a fresh copy of the template; with `floor_of`, the agenda floor of that
    target: the copy first trimmed to the rows the agenda's window needs (`trim_to_window`)."""
    suffix = "_floor" if floor_of is not None else ""
    # The label too: a baseline of the same schema shares the template, not the copy.
    run_name = f"run_{checkout.key}_{checkout.label.lower()}_{size}{suffix}"
    dsn = await fresh_copy(admin_dsn, template_name, run_name)
    if not args.keep:
        stack.push_async_callback(drop, admin_dsn, run_name)
    label = checkout.label + (" floor" if floor_of is not None else "")
    if floor_of is not None:
        print(f"{label} {size}: {await trim_to_window(dsn)}", flush=True)
    service = harness.Service(checkout.env(base_env, dsn),
                              harness.subdir(workdir, f"{checkout.label}-{size}{suffix}"))
    stack.callback(_stopped, service)
    await asyncio.to_thread(service.wait_ready)
    key = (await asyncio.to_thread(service.admin, "create-key", "--email", BENCH_EMAIL))
    connector = aiohttp.TCPConnector(limit=args.concurrency)
    session = aiohttp.ClientSession(
        headers={"Authorization": f"Bearer {key['api_key']}"}, connector=connector,
        timeout=aiohttp.ClientTimeout(total=60))
    stack.push_async_callback(session.close)
    target = Target(label, service, dsn, session, floor_of=floor_of)
    await _targets_of(target, args.rounds * (args.warmup + args.requests))
    if floor_of is None:
        target.deep_cursor = await _deep_cursor(target)
    return target


def _stopped(service: harness.Service) -> None:
    status, took = service.stop()
    if status is None:
        service.kill()
    if status != 0:
        print(f"service {service.url} exit status {status} after {took:.1f} s "
              f"(log {service.log_path})", file=sys.stderr)


async def _measure_all(checkouts: list[Checkout], sizes: list[int], admin_dsn: str,
                       base_env: dict[str, str], workdir: Path, args: argparse.Namespace,
                       measured: Measured) -> None:
    """Every template first (seeding competes with nothing measured), then every service at
    once, and each request kind measured size after size, checkout after checkout, round
    after round: a drift of the machine's load (2 shared cores) falls on all alike."""
    templates = {s: [await template(c, s, admin_dsn, base_env) for c in checkouts]
                 for s in sizes}
    async with contextlib.AsyncExitStack() as stack:
        targets = {s: [await _start(c, s, name, admin_dsn, base_env, workdir, stack, args)
                       for c, (name, _summary) in zip(checkouts, templates[s], strict=True)]
                   for s in sizes}
        kinds = [k for k in KINDS if not args.only or any(o in k.name for o in args.only)]
        floors: dict[int, list[Target]] = {s: [] for s in sizes}
        if any(k.name in AGENDAS for k in kinds):
            for size in sizes:  # the floor of the measured checkout's agenda (A)
                floor = await _start(checkouts[0], size, templates[size][0][0], admin_dsn,
                                     base_env, workdir, stack, args, floor_of=targets[size][0])
                difference = await same_agenda(floor)
                if difference is None:
                    floors[size].append(floor)
                    print(f"{floor.label} {size}: the same agenda answer as "
                          f"{targets[size][0].label}'s", flush=True)
                else:
                    measured.bad.append(f"{floor.label} {size}: not the same agenda answer, "
                                        f"not measured: {difference}")
        for kind in kinds:
            runs: dict[tuple[str, int], list[Result]] = {}
            for round_ in range(args.rounds):
                for size in sizes:
                    # A B A B, and the agenda's floor after them
                    measuring = targets[size] + (floors[size] if kind.name in AGENDAS else [])
                    for target in measuring:
                        result = await _measure(kind, target, round_, args)
                        if result is None:
                            measured.bad.append(f"{target.label} {size} {kind.name}: timeout")
                            continue
                        runs.setdefault((target.label, size), []).append(result)
                        print(f"  {size:>8} {target.label:<7} {kind.name:<34} p50 "
                              f"{result.percentile(50):7.1f} ms {result.rps:7.0f} req/s "
                              f"{result.unexpected} unexpected", flush=True)
                        if result.unexpected:
                            measured.bad.append(f"{target.label} {size} {kind.name}: "
                                                f"{dict(result.statuses)}")
            for (label, size), results in runs.items():
                measured.p50[label, kind.name, size] = statistics.median(
                    r.percentile(50) for r in results)
                measured.rps[label, kind.name, size] = statistics.median(r.rps for r in results)
        for size in sizes:
            for floor in floors[size]:  # still the same day's window?
                difference = await same_agenda(floor)
                if difference is not None:
                    measured.bad.append(f"{floor.label} {size}: the agenda answers differed "
                                        f"after measuring (a new day?): {difference}")
            await _afterwards(targets[size], size, args, measured)
            if args.explain:
                for floor in floors[size]:
                    print(f"{size} events: " + "\n".join(await explain(floor, False)),
                          flush=True)


async def _measure(kind: Kind, target: Target, round_: int, args: argparse.Namespace
                   ) -> Result | None:
    """Warm-up, then the measured requests; each round has request indices of its own (an
    RSVP goes to an event not answered before)."""
    scenario = _scenario(kind, target)
    first = round_ * (args.warmup + args.requests)
    try:
        await asyncio.wait_for(harness.load(target.session, scenario, args.warmup,
                                            args.concurrency, first=first), harness.PHASE_TIMEOUT)
        return await asyncio.wait_for(harness.load(
            target.session, scenario, args.requests, args.concurrency,
            first=first + args.warmup), harness.PHASE_TIMEOUT)
    except (TimeoutError, aiohttp.ClientError) as exc:
        # A request over the client's 60 s, or a phase over PHASE_TIMEOUT: that is the
        # figure at this size; the other kinds and sizes are still measured.
        print(f"  {target.label} {kind.name}: {exc!r}", flush=True)
        return None


async def _afterwards(targets: list[Target], size: int, args: argparse.Namespace,
                      measured: Measured) -> None:
    """--explain and --check, once the measurements are over (they write)."""
    if args.explain:
        print(f"{size} events: " + "\n".join(await explain(targets[0])), flush=True)
    if not args.check:
        return
    for target in targets:
        problems = await check(target)
        print(f"check {target.label} {size}: "
              f"{'rows as the service writes them' if not problems else 'DIFFERENT'}",
              flush=True)
        for problem in problems:
            print(f"  {problem}", flush=True)
        measured.bad.extend(f"check {target.label} {size}: {p}" for p in problems)


def _size_name(size: int) -> str:
    for unit, name in ((1_000_000, "M"), (1_000, "k")):
        if size % unit == 0:
            return f"{size // unit}{name}"
    return str(size)


def tables(measured: Measured, labels: list[str], sizes: list[int]) -> str:
    kinds = [k.name for k in KINDS if any((labels[0], k.name, s) in measured.p50 for s in sizes)]
    width = max(len(k) for k in kinds) + 1
    lines = []
    for label in labels:
        head = (f"{label + ' (p50 ms)':<{width}}"
                + "".join(f"{_size_name(s):>9}" for s in sizes)
                + "".join(f"{'req/s ' + _size_name(s):>12}" for s in sizes)
                + f"{_size_name(sizes[-1]) + '/' + _size_name(sizes[0]):>10}")
        lines += ["", head, "-" * len(head)]
        for kind in kinds:
            p50 = [measured.p50.get((label, kind, s)) for s in sizes]
            rps = [measured.rps.get((label, kind, s)) for s in sizes]
            line = f"{kind:<{width}}" + "".join(_cell(v, 9, 1) for v in p50)
            line += "".join(_cell(v, 12, 0) for v in rps)
            if p50[0] and p50[-1] and len(sizes) > 1:
                ratio = p50[-1] / p50[0]
                line += f"{ratio:>9.2f}{' !' if ratio > FLAG_RATIO else ''}"
            lines.append(line)
    if len(labels) > 1:
        head = f"{'p50 ' + labels[0] + ' / ' + labels[1]:<{width}}" + "".join(
            f"{_size_name(s):>9}" for s in sizes)
        lines += ["", head, "-" * len(head)]
        for kind in kinds:
            cells = []
            for s in sizes:
                a = measured.p50.get((labels[0], kind, s))
                b = measured.p50.get((labels[1], kind, s))
                cells.append(_cell(a / b if a and b else None, 9, 2))
            lines.append(f"{kind:<{width}}" + "".join(cells))
    for agenda in AGENDAS:
        lines += _floor_table(measured, labels[0], agenda, sizes, width)
    return "\n".join(lines)


def _floor_table(measured: Measured, label: str, agenda: str, sizes: list[int], width: int
                 ) -> list[str]:
    """Agenda request `agenda`'s p50 against its floor's (the same request on a copy holding
    only the rows its window needs), flagged above FLAG_RATIO."""
    floor = f"{label} floor"
    if not any((floor, agenda, s) in measured.p50 for s in sizes):
        return []
    width = max(width, len(agenda) + 5)
    head = f"{label + ' agenda against its floor':<{width}}" + "".join(
        f"{_size_name(s):>9}" for s in sizes)
    real = [measured.p50.get((label, agenda, s)) for s in sizes]
    least = [measured.p50.get((floor, agenda, s)) for s in sizes]
    ratios = [a / b if a and b else None for a, b in zip(real, least, strict=True)]
    return ["", head, "-" * len(head),
            f"{agenda + ' p50':<{width}}" + "".join(_cell(v, 9, 1) for v in real),
            f"{'floor p50':<{width}}" + "".join(_cell(v, 9, 1) for v in least),
            f"{'agenda / floor':<{width}}" + "".join(
                _cell(r, 7, 2) + (" !" if r is not None and r > FLAG_RATIO else "  ")
                for r in ratios)]


def _cell(value: float | None, width: int, digits: int) -> str:
    return f"{value:>{width}.{digits}f}" if value is not None else f"{'-':>{width}}"


# ---------------------------------------------------------------------------
# --check: rows made through the API against seeded ones


_ID = re.compile(r"^([a-z]+)_[0-9a-f]{32}$")
_SLUG = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*-\d{4}-\d{2}-\d{2}(?:-\d+)?$")
_EXACT = ("status", "transparency", "rsvp_type")
"""Text columns compared by value (a handful of values each)."""


def _shape(row: asyncpg.Record, zones: set[str]) -> dict[str, str]:
    shape = {}
    for column, value in row.items():
        if value is None:
            shape[column] = "null"
        elif isinstance(value, bool | int):
            shape[column] = repr(value)
        elif isinstance(value, str):
            match = _ID.match(value)
            if column in _EXACT:
                shape[column] = value
            elif match:
                shape[column] = f"{match[1]}_<32 hex>"
            elif value in zones:
                shape[column] = "<zone>"
            elif _SLUG.match(value) and column == "slug":
                shape[column] = "<slug-date>"
            else:
                shape[column] = "<text>"
        else:
            shape[column] = type(value).__name__
    return shape


def _differences(what: str, made: asyncpg.Record, seeded: list[asyncpg.Record],
                 zones: set[str]) -> list[str]:
    if not seeded:
        return [f"{what}: no seeded row of the same kind to compare with"]
    want = _shape(made, zones)
    problems = []
    for row in seeded:
        got = _shape(row, zones)
        diff = {c: (want.get(c), got.get(c)) for c in want.keys() | got.keys()
                if want.get(c) != got.get(c)}
        if diff:
            problems.append(f"{what} {row['id']}: (API, seeded) {diff}")
    return problems[:5]


async def _wait_for(conn: asyncpg.Connection, sql: str, *args: object) -> asyncpg.Record | None:
    """The row of `sql` once a job has written it (30 s at most)."""
    for _ in range(300):
        row = await conn.fetchrow(sql, *args)
        if row is not None:
            return row
        await asyncio.sleep(0.1)
    return None


async def _api(target: Target, method: str, path: str, body: object) -> dict[str, Any]:
    async with target.session.request(method, f"{target.service.url}{path}",
                                      json=body) as response:
        answer: dict[str, Any] = await response.json(content_type=None)
    if response.status not in (200, 201):
        raise RuntimeError(f"{method} {path} answered {response.status}: {answer}")
    return answer


async def check(target: Target) -> list[str]:
    """An event, its subscription copy and an RSVP made through the API, compared with seeded
    rows of the same kind: the same columns, null where they are null, the same formats, and
    slugs as domain.events.slugify derives them."""
    from zoneinfo import available_timezones

    from domain import events, times

    zones = set(available_timezones())
    day = datetime.now(UTC).date() + timedelta(days=3)
    made = await _api(target, "POST", "/v1/events", {
        "profile_id": target.bench_profile, "title": "Check event",
        "description": "Made through the API.", "location": "Room 2",
        "start_time": f"{day}T10:00", "start_timezone": "Europe/Paris",
        "end_time": f"{day}T11:00", "end_timezone": "Europe/Paris"})
    # The bench user's own profile: subscribing copies its events, the new one among them.
    await _api(target, "POST", "/v1/subscriptions",
               {"subscription_type": "profile", "profile_id": target.bench_profile})
    rsvp = await _api(target, "POST", f"/v1/events/{target.event_ids[-1]}/rsvps",
                      {"status": "going"})
    conn = await asyncpg.connect(target.dsn)
    await conn.set_type_codec("citext", encoder=str, decoder=str, format="text")
    try:
        event = await conn.fetchrow("SELECT * FROM events WHERE id = $1", made["id"])
        assert event is not None
        seeded_events = await conn.fetch(
            "SELECT * FROM events WHERE profile_id = $1 AND id <> $2 AND NOT is_all_day"
            " AND recurrence_rule IS NULL AND location IS NOT NULL AND NOT is_private"
            " LIMIT 200", target.bench_profile, made["id"])
        copy = await _wait_for(conn, "SELECT * FROM calendar_events WHERE source_event_id = $1",
                               made["id"])
        seeded_copies = await conn.fetch(
            "SELECT ce.* FROM calendar_events ce JOIN subscriptions s ON s.id = ce.subscription_id"
            " WHERE s.profile_id <> $1 AND NOT ce.is_all_day AND ce.recurrence_rule IS NULL"
            " AND ce.location IS NOT NULL LIMIT 200", target.bench_profile)
        answer = await conn.fetchrow("SELECT * FROM rsvps WHERE id = $1", rsvp["id"])
        assert answer is not None
        seeded_rsvps = await conn.fetch(
            "SELECT * FROM rsvps WHERE status = 'going' AND id <> $1 LIMIT 200", rsvp["id"])
    finally:
        await conn.close()
    problems = _differences("event", event, seeded_events, zones)
    for row in [event, *seeded_events]:
        base = events.slugify(row["title"], times.of_row(row))
        if not (row["slug"] == base or re.fullmatch(re.escape(base) + r"-\d+", row["slug"])):
            problems.append(f"event {row['id']}: slug {row['slug']!r}, derived {base!r}")
    if copy is None:
        problems.append("no subscription copy of the API event within 30 s")
    else:
        problems += _differences("copy", copy, seeded_copies, zones)
    problems += _differences("rsvp", answer, seeded_rsvps, zones)
    print(f"check {target.label}: the API's event, copy and RSVP against "
          f"{len(seeded_events)} seeded events, {len(seeded_copies)} copies and "
          f"{len(seeded_rsvps)} RSVPs of the same kind", flush=True)
    return problems


# ---------------------------------------------------------------------------
# --explain


class _Explaining:
    """Stands in for the Database (and its transactions): each read is first run under
    EXPLAIN (ANALYZE, BUFFERS) and summed up in `notes`, then run for real."""

    def __init__(self, inner: Any, notes: list[str]) -> None:
        self.inner = inner
        self.notes = notes

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def _explain(self, sql: str, args: tuple[Any, ...]) -> None:
        if not sql.lstrip().upper().startswith(("SELECT", "WITH")):
            return
        text = await self.inner.fetchval("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, *args)
        plan = (json.loads(text) if isinstance(text, str) else text)[0]
        top = plan["Plan"]
        read = _rows_read(top)
        self.notes.append(
            f"    {plan['Execution Time']:8.2f} ms  {top['Actual Rows']:>6.0f} rows returned, "
            f"{read:>8.0f} read, buffers hit {top.get('Shared Hit Blocks', 0)} read "
            f"{top.get('Shared Read Blocks', 0)}  | {' '.join(sql.split())[:70]}")

    async def fetch(self, sql: str, *args: Any) -> Any:
        await self._explain(sql, args)
        return await self.inner.fetch(sql, *args)

    async def fetchrow(self, sql: str, *args: Any) -> Any:
        await self._explain(sql, args)
        return await self.inner.fetchrow(sql, *args)

    async def fetchval(self, sql: str, *args: Any) -> Any:
        await self._explain(sql, args)
        return await self.inner.fetchval(sql, *args)

    @contextlib.asynccontextmanager
    async def transaction(self, *args: Any, **kwargs: Any) -> Any:
        async with self.inner.transaction(*args, **kwargs) as tx:
            yield _Explaining(tx, self.notes)


def _rows_read(node: dict[str, Any]) -> float:
    """Rows the scans of the plan produced or filtered out, over all their loops."""
    read = 0.0
    if "Relation Name" in node:
        read += node["Actual Rows"] * node.get("Actual Loops", 1)
        read += node.get("Rows Removed by Filter", 0) + node.get("Rows Removed by Index Recheck", 0)
    return read + sum(_rows_read(child) for child in node.get("Plans", ()))


async def explain(target: Target, search_too: bool = True) -> list[str]:
    """The statements of GET /v1/search (both words) and GET /v1/agenda?days=31 as this
    checkout's own functions run them for the bench user, each under EXPLAIN (ANALYZE,
    BUFFERS), on the second call (the first warms the cache)."""
    from db import search as search_store
    from db.database import Database
    from domain import agenda, expansion, search
    from domain.auth import Viewer

    db = await Database.connect(target.dsn, min_size=1, max_size=2)
    lines = [f"EXPLAIN (ANALYZE, BUFFERS) of {target.label}'s statements:"]
    try:
        user = await db.fetchrow(
            "SELECT u.id, u.email::text AS email, u.timezone, c.name FROM users u"
            " JOIN consumers c ON c.user_id = u.id WHERE u.email = $1 LIMIT 1", BENCH_EMAIL)
        assert user is not None
        viewer = Viewer(user_id=user["id"], consumer=user["name"], email=user["email"],
                        timezone=user["timezone"])
        for word in (RARE_WORD, COMMON_WORD) if search_too else ():
            query = search.parse(word, None)
            notes: list[str] = []
            try:
                for _ in range(2):
                    notes = []
                    explaining: Any = _Explaining(db, notes)
                    await search_store.page(explaining, query.kinds, query.text, query.prefix,
                                            viewer.user_id, None, 21)
            except Exception as exc:  # the checkout's functions changed shape: say so, go on
                notes.append(f"    unavailable: {exc!r}")
            lines += [f"  GET /v1/search?q={word}", *notes]
        for name, calendars in ((AGENDA, None), (AGENDA_CONNECTED, target.agenda_calendars)):
            for _ in range(2):
                notes = []
                explaining = _Explaining(db, notes)
                await agenda.build(explaining, viewer, date_text=None, days=31, timezone=None,
                                   calendar_ids=calendars.split(",") if calendars else None,
                                   budget=expansion.request_budget())
            lines += [f"  {name}", *notes]
    except Exception as exc:  # likewise
        lines.append(f"  unavailable: {exc!r}")
    finally:
        await db.close()
    return lines


# ---------------------------------------------------------------------------


def _options() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000,1000000",
                        help="event counts, comma-separated (10000,100000,1000000)")
    parser.add_argument("--requests", type=int, default=300, help="measured requests (300)")
    parser.add_argument("--warmup", type=int, default=50, help="warm-up requests (50)")
    parser.add_argument("--concurrency", type=int, default=16, help="concurrent clients (16)")
    parser.add_argument("--rounds", type=int, default=2,
                        help="rounds over the sizes (and checkouts) per request kind (2)")
    parser.add_argument("--baseline", help="another Kalends checkout, measured as well")
    parser.add_argument("--data", help="where the seeded databases are kept for later runs "
                                       "(default: a temporary directory, removed)")
    parser.add_argument("--only", action="append",
                        help="measure only the request kinds whose name contains this")
    parser.add_argument("--check", action="store_true",
                        help="compare rows made through the API with seeded rows")
    parser.add_argument("--explain", action="store_true",
                        help="EXPLAIN (ANALYZE, BUFFERS) of the search and agenda statements")
    parser.add_argument("--keep", action="store_true", help="keep the run databases and logs")
    args = parser.parse_args()
    args.sizes = sorted(int(s) for s in args.sizes.split(","))
    for name in ("requests", "warmup", "concurrency", "rounds"):
        if not 1 <= getattr(args, name) <= harness.MAX_COUNT:
            parser.error(f"--{name} must be 1..{harness.MAX_COUNT}")
    if any(not 1000 <= s <= 10_000_000 for s in args.sizes):
        parser.error("--sizes must be 1000..10000000")
    return args


async def _main(args: argparse.Namespace, root: Path) -> Measured:
    from db import embedded

    checkouts = [Checkout("A", harness.REPO)]
    if args.baseline:
        checkouts.append(Checkout("B", Path(args.baseline).resolve()))
    base_env = dict(os.environ)
    base_env.setdefault("KALENDS_RATE_LIMIT", harness.UNREFUSED_RATE_LIMIT)
    # The services' key file (cursor and webhook secrets are sealed with it), kept with the
    # databases so that a later run's service opens them.
    base_env["KALENDS_DATA_DIR"] = str(root / "service")
    base_env.pop("DATABASE_URL", None)
    admin_dsn, server = await asyncio.to_thread(embedded.start, root / "db")
    admin = await asyncpg.connect(admin_dsn)
    try:
        enough = int(await admin.fetchval("SHOW max_connections")) >= MAX_CONNECTIONS
        if not enough:
            await admin.execute(f"ALTER SYSTEM SET max_connections = {MAX_CONNECTIONS}")
    finally:
        await admin.close()
    if not enough:  # a setting read at start only
        await asyncio.to_thread(embedded.stop, server)
        admin_dsn, server = await asyncio.to_thread(embedded.start, root / "db")
    measured = Measured()
    workdir = Path(harness.subdir(root, f"run-{datetime.now(UTC):%Y%m%dT%H%M%S}"))
    try:
        await _measure_all(checkouts, args.sizes, admin_dsn, base_env, workdir, args, measured)
    finally:
        await asyncio.to_thread(embedded.stop, server)
        if measured.p50:  # what was measured, even if the run stopped half-way
            print(tables(measured, [c.label for c in checkouts], args.sizes))
    return measured


def main() -> int:
    args = _options()
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    root = Path(args.data).resolve() if args.data else harness._data_root()
    root.mkdir(parents=True, exist_ok=True)
    print(f"data in {root}; concurrency {args.concurrency}, warm-up {args.warmup}, "
          f"{args.requests} requests, {args.rounds} round(s)", flush=True)
    measured = asyncio.run(_main(args, root))
    for problem in measured.bad:
        print(problem, file=sys.stderr)
    if not args.data and not args.keep and not measured.bad:
        shutil.rmtree(root, ignore_errors=True)
    return 1 if measured.bad else 0


if __name__ == "__main__":
    sys.exit(main())
