"""The dashboard graph (docs/graphql.md, "The dashboard graph") on 100,000 events: one `kalends
serve` process, three request kinds measured A B C A B C, one request at a time.

    python bench/dashboard.py [--quick] [--events 100000] [--profiles 20]
                              [--summary_events 5000] [--summary_rsvps 50000]
                              [--rounds 2] [--requests 200] [--warmup 20] [--explain]
                              [--keep]

The bench user (made by `kalends admin create-user`) gets `--profiles` profiles through
`POST /v1/profiles`, in its default organization. The rest is written in the database, in
bulk, by bench/seed.py's own helpers (`_event_row`: the row `domain.events.create` stores
for a request body; `_copy`: COPY in batches; `_settle`: the steps the service runs after
a bulk write), then VACUUM ANALYZE:
- each dashboard profile: 3 to 6 one-off events in the 7 days from today (UTC midnight),
  one or two weekly recurring events begun weeks ago on one profile in three, and 30
  one-off events elsewhere in the year around today; 0 to 8 RSVPs on each event;
- the summary profile, of another user (its administrator): `--summary_events` events
  over the 366 days of the summary's window, one in 50 weekly recurring (open or COUNT),
  and `--summary_rsvps` RSVPs spread evenly over them (going 5 : maybe 2 : not_going 2 :
  waitlist 1, 1 to 3 guests);
- the rest of `--events` over 200 profiles of 10 other users, spread over the year around
  today, one in 20 weekly recurring, RSVPs on one event in five (1 to 4).

Each round measures, in turn (after `--warmup` requests each):
A `POST /graphql` with the dashboard document (organizations -> profiles(limit: 20) ->
  events of the next 7 days with total_count, rsvp_stats and occurrences of the same window);
B `GET /v1/events?limit=100` (REST, a full page);
C `POST /graphql` `profile { rsvp_summary }` by week over 366 days, as the summary
  profile's owner.
It prints what each answers, the SQL statements one request runs (the `query_count` of the
service's own `Database`, read from a second instance of the application (`create_app`,
jobs off) on the same database in this process, as tests/conftest.py's live server does),
p50 and p99 over all rounds against the issue's goals, and the harness' table per round.
`--quick`: 20,000 events, a summary profile of 1,000 events and 10,000 RSVPs, 60 requests a
round. `--explain`: where C's time goes (`explain_summary`). Timings are printed, never
checked: the exit status is the harness' (every request answered 200, the service stopped
cleanly), and a GraphQL answer with `errors` stops the run.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import secrets
import statistics
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

import aiohttp
import asyncpg
import harness
import seed as dataset
from aiohttp import web
from harness import Result, Scenario

from db import profiles as profile_store
from db.database import Database
from domain import accounts, ids, rsvps

WINDOW_DAYS = 7
SUMMARY_DAYS = 366
OTHER_PROFILES = 200
OTHER_OWNERS = 10
ATTENDEES = 60
"""Users who answer; an event's RSVPs are from distinct ones."""
OUTSIDE_WINDOW = 30
"""One-off events of a dashboard profile outside the 7 days."""
SUMMARY_RECURRING_EVERY = 50
RSVP_WEIGHTS = {"going": 5, "maybe": 2, "not_going": 2, "waitlist": 1}
ZONES = ("Europe/Paris", "Europe/London", "UTC")
"""Dashboard and summary zones: local 08:00-20:00 falls inside the UTC days."""
GOALS = {"A": (25.0, 10), "C": (30.0, None)}
"""Issue goals: p50 ms and SQL statements per request."""
QUICK = {"events": 20_000, "summary_events": 1000, "summary_rsvps": 10_000,
         "requests": 60, "warmup": 10}

DASHBOARD = """
query dashboard($from: String!, $to: String!) {
  organizations {
    data {
      id
      name
      profiles(limit: 20) {
        total_count
        data {
          id
          display_name
          events(limit: 20, from: $from, to: $to) {
            total_count
            total_count_is_capped
            has_more
            data {
              id
              title
              start_time
              end_time
              recurrence_rule
              status
              rsvp_stats { going maybe not_going waitlist total_attendees }
              occurrences(from: $from, to: $to) { occurrence_id start end }
            }
          }
        }
      }
    }
  }
}
"""

SUMMARY = """
query summary($profile_id: ID!, $from: String!, $to: String!) {
  profile(profile_id: $profile_id) {
    rsvp_summary(from: $from, to: $to, bucket: "week") {
      start events going maybe not_going waitlist
    }
  }
}
"""


# ---------------------------------------------------------------------------
# The data set


@dataclass
class Written:
    """What the database seeding wrote, and what the summary requests need."""

    summary_profile: str = ""
    summary_key: str = ""
    events: int = 0
    rsvps: int = 0
    seconds: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Layout:
    today: date
    dashboard: list[str]
    summary_events: int
    summary_rsvps: int
    other_events: int


def _midnight(day: date) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


def _text(instant: datetime) -> str:
    return instant.strftime("%Y-%m-%dT%H:%M:%SZ")


def _body(words: Any, rng: random.Random, day: date, zone: str, rule: str | None = None
          ) -> dict[str, Any]:
    """A request body of an event on `day`, local 08:00 to 20:00 in `zone`."""
    start = datetime(day.year, day.month, day.day) + timedelta(
        minutes=rng.randrange(8 * 60, 19 * 60, 15))
    end = start + timedelta(minutes=rng.choice((30, 45, 60, 90)))
    body: dict[str, Any] = {
        "title": " ".join(words.text(rng.randint(2, 5))).capitalize(),
        "description": " ".join(words.text(rng.randint(8, 30))).capitalize() + ".",
        "location": f"Room {rng.randint(1, 40)}",
        "start_time": start.isoformat(timespec="minutes"), "start_timezone": zone,
        "end_time": end.isoformat(timespec="minutes"), "end_timezone": zone}
    if rule is not None:
        body["recurrence_rule"] = rule
    return body


def _year_day(rng: random.Random, today: date, skip_window: bool) -> date:
    """A day of the year around today (182 days back, 183 ahead)."""
    day = today + timedelta(days=rng.randrange(-182, 184))
    if skip_window and today <= day < today + timedelta(days=WINDOW_DAYS):
        day += timedelta(days=WINDOW_DAYS)
    return day


def _in_window(k: int) -> tuple[int, int]:
    """(one-off, weekly) events of dashboard profile k in the 7 days."""
    return 3 + k % 4, (k % 3 == 0) + (k % 6 == 0)


def _dashboard_bodies(k: int, rng: random.Random, words: Any, today: date
                      ) -> Iterator[dict[str, Any]]:
    zone = ZONES[k % len(ZONES)]
    one_off, weekly = _in_window(k)
    for _ in range(one_off):
        yield _body(words, rng, today + timedelta(days=rng.randrange(WINDOW_DAYS)), zone)
    for n in range(weekly):
        begun = today - timedelta(days=7 * rng.randint(3, 10) + rng.randrange(7) + n)
        yield _body(words, rng, begun, zone, "FREQ=WEEKLY")
    for _ in range(OUTSIDE_WINDOW):
        yield _body(words, rng, _year_day(rng, today, skip_window=True), zone)


def _summary_bodies(count: int, rng: random.Random, words: Any, first: date
                    ) -> Iterator[dict[str, Any]]:
    for i in range(count):
        day = first + timedelta(days=rng.randrange(SUMMARY_DAYS))
        rule = None
        if i % SUMMARY_RECURRING_EVERY == 7:
            rule = "FREQ=WEEKLY" if i % 2 else f"FREQ=WEEKLY;COUNT={rng.randint(4, 30)}"
        yield _body(words, rng, day, ZONES[i % len(ZONES)], rule)


def _other_bodies(count: int, rng: random.Random, words: Any, today: date
                  ) -> Iterator[dict[str, Any]]:
    for i in range(count):
        rule = "FREQ=WEEKLY" if i % dataset.RECURRING_EVERY == 11 else None
        yield _body(words, rng, _year_day(rng, today, skip_window=False),
                    dataset.ZONES[i % len(dataset.ZONES)], rule)


@dataclass
class _Rows:
    """Event rows for COPY, and the ids of each group, for their RSVPs."""

    taken: dict[str, set[str]] = field(default_factory=dict)
    groups: dict[str, list[str]] = field(default_factory=dict)

    def rows(self, group: str, profiles: list[str], bodies: Iterator[dict[str, Any]]
             ) -> Iterator[dict[str, Any]]:
        """Body i goes to profile i modulo their number."""
        kept = self.groups.setdefault(group, [])
        for i, body in enumerate(bodies):
            profile_id = profiles[i % len(profiles)]
            row = dataset._event_row(body, profile_id, self.taken.setdefault(profile_id, set()))
            kept.append(row["id"])
            yield row


def _event_rows(layout: Layout, summary_profile: str, others: list[str], rows: _Rows
                ) -> Iterator[dict[str, Any]]:
    rng = random.Random("kalends-dashboard")
    words = dataset._Words(rng)
    for k, profile_id in enumerate(layout.dashboard):
        yield from rows.rows("dashboard", [profile_id],
                             _dashboard_bodies(k, rng, words, layout.today))
    first = layout.today - timedelta(days=SUMMARY_DAYS // 2)
    yield from rows.rows("summary", [summary_profile],
                         _summary_bodies(layout.summary_events, rng, words, first))
    yield from rows.rows("other", others,
                         _other_bodies(layout.other_events, rng, words, layout.today))


def _rsvp(event_id: str, user_id: str, rng: random.Random) -> dict[str, Any]:
    """A row as `domain.rsvps.answer` writes it for a `RsvpCreate` body."""
    status = rng.choices(list(RSVP_WEIGHTS), list(RSVP_WEIGHTS.values()))[0]
    answer = rsvps.RsvpCreate.model_validate(
        {"status": status, "num_guests": rng.choice((1, 1, 1, 2, 3))}).model_dump()
    return {"id": ids.new_id("rsvp"), "event_id": event_id, "user_id": user_id, **answer}


def _rsvp_rows(groups: dict[str, list[str]], attendees: list[str], summary_rsvps: int
               ) -> Iterator[dict[str, Any]]:
    rng = random.Random("kalends-dashboard-rsvps")
    for event_id in groups["dashboard"]:
        for user_id in rng.sample(attendees, rng.randint(0, 8)):
            yield _rsvp(event_id, user_id, rng)
    summary = groups["summary"]
    for n, event_id in enumerate(summary):
        each = summary_rsvps // len(summary) + (n < summary_rsvps % len(summary))
        for user_id in rng.sample(attendees, each):
            yield _rsvp(event_id, user_id, rng)
    for n, event_id in enumerate(groups["other"]):
        if n % dataset.RSVP_EVERY == 0:
            for user_id in rng.sample(attendees, rng.randint(1, 4)):
                yield _rsvp(event_id, user_id, rng)


async def _user(db: Database, role: str, tag: str, zone: str | None = None
                ) -> tuple[str, dict[str, Any]]:
    """(user id, `accounts.create_user`'s answer) of a new user."""
    made = await accounts.create_user(db, f"dash-{role}-{tag}@example.com", role, zone)
    row = await accounts.find_user(db, made["email"])
    return str(row["id"]), made


async def _profile(db: Database, owner: tuple[str, dict[str, Any]], name: str) -> str:
    profile_id = ids.new_id("prf")
    await profile_store.insert(db, profile_id, owner[1]["organization_id"], owner[0],
                               f"dash-{secrets.token_hex(5)}", {"display_name": name})
    return profile_id


async def _people(db: Database, written: Written) -> tuple[list[str], list[str], str]:
    """(other profiles, attendees, the summary profile); the summary owner's key goes
    into `written`."""
    tag = secrets.token_hex(3)
    owners = [await _user(db, f"owner{k}", tag, ZONES[k % len(ZONES)])
              for k in range(OTHER_OWNERS)]
    others = [await _profile(db, owners[j % OTHER_OWNERS], f"Other profile {j}")
              for j in range(OTHER_PROFILES)]
    attendees = [(await _user(db, f"attendee{k}", tag))[0] for k in range(ATTENDEES)]
    summary_owner = await _user(db, "summary", tag, "Europe/Paris")
    written.summary_key = str(summary_owner[1]["api_key"])
    summary = await _profile(db, summary_owner, "Summary profile")
    return others, attendees, summary


async def seed_database(dsn: str, layout: Layout) -> Written:
    written = Written()
    started = time.perf_counter()

    def lap(name: str) -> None:
        written.seconds[name] = round(time.perf_counter() - started
                                      - sum(written.seconds.values()), 1)

    db = await Database.connect(dsn, min_size=1, max_size=2)
    conn = await asyncpg.connect(dsn, command_timeout=1800)
    try:
        await conn.execute("SET TIME ZONE 'UTC'")
        await conn.set_type_codec("citext", encoder=str.encode, decoder=bytes.decode,
                                  format="binary")
        others, attendees, written.summary_profile = await _people(db, written)
        lap("users_profiles")
        rows = _Rows()
        async with conn.transaction():
            written.events = await dataset._copy(
                conn, "events", _event_rows(layout, written.summary_profile, others, rows))
            lap("events")
            written.rsvps = await dataset._copy(
                conn, "rsvps", _rsvp_rows(rows.groups, attendees, layout.summary_rsvps))
        lap("rsvps")
        await dataset._settle(db)
        await conn.execute("VACUUM ANALYZE")
        await dataset._settle(db, dataset.ANALYZED_STEPS)
        lap("settle_vacuum_analyze")
    finally:
        await conn.close()
        await db.close()
    return written


async def _dashboard_profiles(session: aiohttp.ClientSession, url: str, count: int
                              ) -> list[str]:
    made = await harness.seed(session, Scenario(
        "POST /v1/profiles", lambda i: f"{url}/v1/profiles", method="POST", expected=201,
        body_for=lambda i: {"platform_id": f"dash-{secrets.token_hex(5)}",
                            "display_name": f"Dashboard profile {i}"}), count, 1)
    return [str(p["id"]) for p in made]


# ---------------------------------------------------------------------------
# Requests


@dataclass(frozen=True)
class Kind:
    label: str
    scenario: Scenario

    def body(self) -> object:
        return None if self.scenario.body_for is None else self.scenario.body_for(0)


def _kinds(url: str, written: Written, today: date) -> list[Kind]:
    start = _midnight(today)
    window = {"from": _text(start), "to": _text(start + timedelta(days=WINDOW_DAYS))}
    first = _midnight(today - timedelta(days=SUMMARY_DAYS // 2))
    summary = {"profile_id": written.summary_profile, "from": _text(first),
               "to": _text(first + timedelta(days=SUMMARY_DAYS))}
    owner = {"Authorization": f"Bearer {written.summary_key}"}
    return [
        Kind("A", Scenario("A POST /graphql dashboard", lambda i: f"{url}/graphql",
                           method="POST",
                           body_for=lambda i: {"query": DASHBOARD, "variables": window})),
        Kind("B", Scenario("B GET /v1/events?limit=100",
                           lambda i: f"{url}/v1/events?limit=100")),
        Kind("C", Scenario("C POST /graphql rsvp_summary 366 d", lambda i: f"{url}/graphql",
                           method="POST",
                           body_for=lambda i: {"query": SUMMARY, "variables": summary},
                           headers=owner)),
    ]


async def _answer(session: aiohttp.ClientSession, url: str, kind: Kind) -> Any:
    """The JSON answer of one request of `kind` to the service at `url`; raises unless it
    answers 200 without GraphQL errors."""
    s = kind.scenario
    path = s.url_for(0).split("/", 3)[3]
    async with session.request(s.method, f"{url}/{path}", json=kind.body(),
                               headers=s.headers) as response:
        answer = await response.json(content_type=None)
    if response.status != 200 or (isinstance(answer, dict) and "errors" in answer):
        raise RuntimeError(f"{s.name} answered {response.status}: {str(answer)[:600]}")
    return answer


def _describe(kind: Kind, answer: Any) -> str:
    if kind.label == "A":
        [org] = answer["data"]["organizations"]["data"]
        profiles = org["profiles"]["data"]
        events = [e for p in profiles for e in p["events"]["data"]]
        totals = [p["events"]["total_count"] for p in profiles]
        recurring = sum(e["recurrence_rule"] is not None for e in events)
        occurrences = sum(len(e["occurrences"]) for e in events)
        rsvps_seen = sum(e["rsvp_stats"]["going"] + e["rsvp_stats"]["maybe"]
                         + e["rsvp_stats"]["not_going"] + e["rsvp_stats"]["waitlist"]
                         for e in events)
        return (f"{len(profiles)} profiles (total_count {org['profiles']['total_count']}), "
                f"{len(events)} events in the 7 days ({recurring} weekly; per profile "
                f"{min(totals)} to {max(totals)}), {occurrences} occurrences, {rsvps_seen} "
                f"RSVPs counted; {len(json.dumps(answer)):,} bytes")
    if kind.label == "B":
        return f"{len(answer['data'])} events, has_more {answer['has_more']}"
    buckets = answer["data"]["profile"]["rsvp_summary"]
    sums = {k: sum(b[k] for b in buckets)
            for k in ("events", "going", "maybe", "not_going", "waitlist")}
    return f"{len(buckets)} weekly buckets, summed {sums}"


@asynccontextmanager
async def counting_app(dsn: str) -> AsyncIterator[tuple[str, Database]]:
    """A second instance of the application on the same database, in this process, jobs
    off: its `Database.query_count` counts what each request runs."""
    from domain import config
    from kalends.service.app import create_app
    from web.services import SERVICES

    env = {**harness._SERVICE_ENV, "DATABASE_URL": dsn}
    if "KALENDS_DATA_DIR" in env:  # its key file seals the cursor secret
        os.environ["KALENDS_DATA_DIR"] = env["KALENDS_DATA_DIR"]
    app = create_app(dsn, pool_size=2, run_jobs=False, settings=config.load(env))
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        yield f"http://127.0.0.1:{runner.addresses[0][1]}", app[SERVICES].db
    finally:
        await runner.cleanup()


async def statements(session: aiohttp.ClientSession, url: str, db: Database, kind: Kind,
                     times: int = 3) -> list[int]:
    """Statements each of `times` requests of `kind` ran, after one unmeasured."""
    counts = []
    for _ in range(times + 1):
        before = db.query_count
        await _answer(session, url, kind)
        counts.append(db.query_count - before)
    return counts[1:]


async def explain_summary(dsn: str, written: Written, today: date) -> list[str]:
    """Where C's time goes, with this checkout's own functions as graph/lists.py's
    `rsvp_summary` calls them: each statement's execution time (EXPLAIN ANALYZE, by
    bench/scale.py's `_Explaining`), each statement as a client sees it, and the
    expansion and bucketing in Python (`dashboard.summarize`); medians of 5 after one."""
    from zoneinfo import ZoneInfo

    from scale import _Explaining

    from db import events as event_store
    from domain import dashboard, expansion
    from graph import lists

    first = _midnight(today - timedelta(days=SUMMARY_DAYS // 2))
    r = dashboard.Range(first, first + timedelta(days=SUMMARY_DAYS))
    tz = ZoneInfo("Europe/Paris")
    profile = written.summary_profile
    db = await Database.connect(dsn, min_size=1, max_size=2)
    try:
        notes: list[str] = []
        explaining: Any = _Explaining(db, notes)
        await event_store.summary_one_off(explaining, profile, r.start, r.end, tz.key, "week",
                                          "scheduled")
        await event_store.summary_recurring(explaining, profile, r.end, "scheduled",
                                            dashboard.MAX_SUMMARY_RECURRING)
        timings: dict[str, list[float]] = {"one_off": [], "recurring": [], "summarize": []}
        for _ in range(6):
            t0 = time.perf_counter()
            grouped = await event_store.summary_one_off(db, profile, r.start, r.end, tz.key,
                                                        "week", "scheduled")
            t1 = time.perf_counter()
            recurring = await event_store.summary_recurring(db, profile, r.end, "scheduled",
                                                            dashboard.MAX_SUMMARY_RECURRING)
            changes = await expansion.changes(db, recurring, r.start, r.end, r.start.date(),
                                              r.end.date())
            t2 = time.perf_counter()
            dashboard.summarize(
                dashboard.bucket_starts(r, tz, "week"),
                ((g["bucket"], g["events"], lists._counts(g)) for g in grouped),
                ((row, lists._counts(row)) for row in recurring), r, tz, "week",
                expansion.request_budget(), changes, "scheduled")
            t3 = time.perf_counter()
            for name, took in zip(timings, (t1 - t0, t2 - t1, t3 - t2), strict=True):
                timings[name].append(took * 1000)
    finally:
        await db.close()
    medians = {k: statistics.median(v[1:]) for k, v in timings.items()}
    return ["C's parts (EXPLAIN ANALYZE of its statements, second run):", *notes[-2:],
            f"  as a client, median ms: summary_one_off {medians['one_off']:.1f}, "
            f"summary_recurring {medians['recurring']:.1f} ({len(recurring)} recurring "
            f"events), dashboard.summarize (expansion, buckets) {medians['summarize']:.1f}"]


# ---------------------------------------------------------------------------
# The run


def _errors_seen(found: list[str]) -> harness.OnResponse:
    def check(i: int, status: int, data: bytes) -> None:
        if status == 200 and b'"errors":' in data[:2000] and not found:
            found.append(data[:400].decode(errors="replace"))
    return check


async def _measure(session: aiohttp.ClientSession, kinds: list[Kind], args: argparse.Namespace
                   ) -> list[Result]:
    results: list[Result] = []
    errors: list[str] = []
    for round_ in range(args.rounds):
        for kind in kinds:
            s = kind.scenario
            named = Scenario(f"{s.name} #{round_ + 1}", s.url_for, s.method, s.body_for,
                             headers=s.headers)
            results.append(await harness.measure(
                session, named, args.warmup, args.requests, args.concurrency,
                on_response=_errors_seen(errors), profiled=False))
    if errors:
        raise RuntimeError(f"a measured GraphQL request answered errors: {errors[0]}")
    return results


def _pooled(results: list[Result], label: str) -> Result:
    pooled = Result(label)
    for r in results:
        if r.name.startswith(f"{label} "):
            pooled.latencies += r.latencies
    return pooled


def _report(kinds: list[Kind], results: list[Result], counts: dict[str, list[int]]) -> None:
    print("\nover all rounds, one request at a time:")
    for kind in kinds:
        pooled = _pooled(results, kind.label)
        rounds = [f"{r.percentile(50):.1f}" for r in results
                  if r.name.startswith(f"{kind.label} ")]
        p50_goal, statement_goal = GOALS.get(kind.label, (None, None))
        goal = []
        if p50_goal is not None:
            goal.append(f"p50 <= {p50_goal:g} ms")
        if statement_goal is not None:
            goal.append(f"<= {statement_goal} statements")
        print(f"  {kind.scenario.name:<38} p50 {pooled.percentile(50):6.1f} ms  "
              f"p99 {pooled.percentile(99):6.1f} ms  (round p50s {', '.join(rounds)})  "
              f"SQL statements {'/'.join(map(str, counts[kind.label]))}"
              + (f"  goal: {', '.join(goal)}" if goal else ""))


async def _benchmark(session: aiohttp.ClientSession, url: str, args: argparse.Namespace
                     ) -> list[Result]:
    dashboard = await _dashboard_profiles(session, url, args.profiles)
    today = datetime.now(UTC).date()
    own = sum(OUTSIDE_WINDOW + sum(_in_window(k)) for k in range(args.profiles))
    layout = Layout(today, dashboard, args.summary_events, args.summary_rsvps,
                    max(0, args.events - args.summary_events - own))
    async with harness.database_url() as dsn:
        written = await seed_database(dsn, layout)
        print(f"seeded {written.events:,} events and {written.rsvps:,} RSVPs "
              f"(seconds: {written.seconds})", flush=True)
        kinds = _kinds(url, written, today)
        await harness.check_page(session, url, "/v1/events?limit=100", 100)
        for kind in kinds:
            print(f"{kind.scenario.name}: {_describe(kind, await _answer(session, url, kind))}")
        async with counting_app(dsn) as (counting_url, db):
            counts = {k.label: await statements(session, counting_url, db, k) for k in kinds}
        if args.explain:
            print("\n".join(await explain_summary(dsn, written, today)))
    args.concurrency = 1  # seeding is done: one request at a time (the table says so)
    loads = [os.getloadavg()[0]]
    results = await _measure(session, kinds, args)
    loads.append(os.getloadavg()[0])
    print(f"load average (1 min) before / after measuring: {loads[0]:.2f} / {loads[1]:.2f}")
    _report(kinds, results, counts)
    return results


_COUNTS = {"events": (100_000, "events in the database in all"),
           "profiles": (20, "the bench user's dashboard profiles"),
           "summary_events": (5000, "events of the summary profile"),
           "summary_rsvps": (50_000, "RSVPs on the summary profile's events"),
           "rounds": (2, "A B C rounds"),
           "requests": (200, "measured requests per kind and round"),
           "warmup": (20, "warm-up requests per kind and round"),
           "concurrency": (4, "clients while seeding through the API")}


def _options() -> argparse.Namespace:
    args = harness.options(__doc__ or "", _COUNTS, {
        "quick": "a smaller run: " + ", ".join(f"{k} {v}" for k, v in QUICK.items()),
        "explain": "print where the RSVP summary's time goes (SQL, Python)",
    })
    if args.quick:
        for name, value in QUICK.items():
            if getattr(args, name) == _COUNTS[name][0]:
                setattr(args, name, value)
    if not 1 <= args.profiles <= 20:
        sys.exit("--profiles must be 1..20 (one page of the organization's profiles)")
    if args.summary_rsvps > args.summary_events * ATTENDEES:
        sys.exit(f"--summary_rsvps must be at most {ATTENDEES} per summary event")
    return args


def main() -> int:
    args = _options()
    return harness.run(_benchmark, args,
                       f"{args.events:,} events, {args.rounds} A B C rounds, "
                       f"{args.requests} requests each")


if __name__ == "__main__":
    sys.exit(main())
