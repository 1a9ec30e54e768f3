"""The scale bench's data set, written into an empty, migrated database by the product's own
code (bench/scale.py runs this script with a checkout's code first on PYTHONPATH, so a
baseline checkout seeds its own schema with its own functions).

    python bench/seed.py --dsn postgresql://... --size 100000

What it writes, the same at every size but for the number of events:
- users through `domain.accounts.create_user` (each with its organization, personal calendar,
  consumer and key, as `kalends admin create-user` makes them): the bench user (BENCH_EMAIL),
  OWNERS profile owners and ATTENDEES attendees;
- PROFILES profiles through `db.profiles.insert`: profile 0 is the bench user's, profiles 1 to
  SUBSCRIBED are public ones the bench user subscribes to, one in PRIVATE_EVERY is private;
- `size` events, event i in profile i mod PROFILES (about 950 a profile at 1M), by COPY. Each
  row is what `domain.events.create` stores for the request body `_event_body` builds: the
  fields as sent, the time columns of `domain.times.create_columns`, the slug of
  `domain.events.slugify` with the first free suffix, an id of `domain.ids.new_id`. Columns
  the body does not set (status, sequence, RSVP settings, generated search columns, created_at)
  come from the table's own defaults, triggers and generated expressions, as for an INSERT.
  Starts spread over YEARS_BEFORE years before today to YEARS_AFTER after it; one in
  RECURRING_EVERY weekly recurring (open, COUNT or UNTIL); titles and descriptions of filler
  words (a Zipf-like vocabulary), COMMON_WORD in the title of one event in COMMON_EVERY,
  RARE_WORD in RARE_COUNT events;
- RSVPs on one event in RSVP_EVERY (1 to 4 attendees), rows as `domain.rsvps.answer` writes
  them for a `RsvpCreate` body, by COPY;
- the bench user's subscriptions to profiles 1 to SUBSCRIBED through
  `db.subscriptions.insert_new`, each then synced by the sync job's own handler
  (`domain.sync.run_sync`), which writes the copies into the user's calendar as the service
  does (and whatever it derives for them, e.g. the series ends of migration 0017);
- a connected calendar of the bench user (`_connect`): CONNECTED_EVENTS CalDAV events,
  CONNECTED_RECURRING of them weekly, and its history: one past event every 2 hours for one
  in HISTORY_EVERY of `size` (500 at 10k, 50,000 at 1M, about 11 years), so that what the
  agenda reads of it can be seen not to grow; the iCalendar text of `connected_event` parsed by
  `domain.connected.ical.parse` and stored by the sync's own row builder and store
  (`engine.event_rows`, `db.connected.put_events`), as a CalDAV sync stores them. It is not
  selected, so the default agenda is unchanged; bench/scale.py names it in `calendar_ids`;
- then every settle step the checkout has (`SETTLE_STEPS`), ANALYZE, and the steps that
  follow it (`ANALYZED_STEPS`).

Ids are those of `domain.ids.new_id`, made reproducible by drawing the uuid4 it calls from a
seeded generator: the same size gives the same ids in every database, so a baseline's
database answers the same URLs.

A column a later migration adds is seeded the way the service fills it: a default, trigger or
generated column fills itself during COPY; a value the service computes in Python on write
(as `domain.events.create` does for slugs) goes into `_event_row` through the product's
function, only when the column exists (COPY writes the columns of a row that the table has);
a value a job or a settle function fills afterwards goes into SETTLE_STEPS.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import random
import sys
import time
import uuid
from bisect import bisect
from collections.abc import Iterator, Sequence
from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import asyncpg

from db import connected as connected_store
from db import profiles as profile_store
from db import subscriptions as subscription_store
from db.database import Database
from domain import accounts, events, ids, rsvps, sync, times
from domain.connected import engine, ical
from domain.connected.provider import RemoteCalendar, RemoteEvent

PROFILES = 1050
OWNERS = 50
ATTENDEES = 1000
SUBSCRIBED = 20
PRIVATE_EVERY = 50
"""One profile in this many is private (never one the bench user owns or subscribes to);
one event in this many too."""
YEARS_BEFORE, YEARS_AFTER = 3, 2
RECURRING_EVERY = 20
"""5 % of events recur weekly."""
ALL_DAY_EVERY = 40
COMMON_WORD = "concert"
COMMON_EVERY = 100
"""COMMON_WORD is in the title of 1 % of events."""
RARE_WORD = "quokka"
RARE_COUNT = 5
RSVP_EVERY = 5
VOCABULARY = 5000
ZONES = ("Europe/Paris", "America/New_York", "Asia/Tokyo", "UTC", "Australia/Sydney",
         "America/Los_Angeles")
BENCH_EMAIL = "scale@example.com"
BENCH_ZONE = "Europe/Paris"
BATCH = 20_000
"""Rows per COPY."""
CONNECTED_EVENTS = 5000
CONNECTED_RECURRING = 500
CONNECTED_ZONES = ("Europe/Paris", "America/New_York", "Asia/Tokyo")
HISTORY_EVERY = 20
SETTLE_STEPS = (("domain.agenda", "settle_recurrence_ends"),)
"""(module, function(db)) run once everything is written, when the checkout has them: what
the service fills after a write rather than in it."""
ANALYZED_STEPS = (("db.search", "refresh_words"),)
"""Likewise, run after ANALYZE: what the service derives from the statistics."""


def reproducible_ids(seed: str) -> None:
    """`ids.new_id` draws `uuid.uuid4()`: from here on, from a generator seeded with `seed`
    (still version-4 UUIDs, the same format)."""
    draw = random.Random(seed)

    def uuid4() -> uuid.UUID:
        return uuid.UUID(int=draw.getrandbits(128), version=4)

    uuid.uuid4 = uuid4


# ---------------------------------------------------------------------------
# Words


def _vocabulary(rng: random.Random) -> list[str]:
    """VOCABULARY distinct made-up words (never COMMON_WORD or RARE_WORD)."""
    onsets = ("b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v",
              "w", "z", "br", "dr", "gr", "pl", "st", "tr")
    vowels = ("a", "e", "i", "o", "u", "ai", "ea", "io")
    words: set[str] = set()
    while len(words) < VOCABULARY:
        word = "".join(rng.choice(onsets) + rng.choice(vowels)
                       for _ in range(rng.randint(2, 3)))
        if word not in (COMMON_WORD, RARE_WORD):
            words.add(word)
    return sorted(words)


class _Words:
    """Filler text: word k drawn with weight 1/(k+1)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.words = _vocabulary(rng)
        self.cumulative = list(itertools.accumulate(1 / (k + 1) for k in range(VOCABULARY)))

    def text(self, count: int) -> list[str]:
        top = self.cumulative[-1]
        return [self.words[min(bisect(self.cumulative, self.rng.random() * top), VOCABULARY - 1)]
                for _ in range(count)]


# ---------------------------------------------------------------------------
# Events


def _rule(i: int, rng: random.Random, start: date) -> str:
    kind = i // RECURRING_EVERY % 3
    if kind == 0:
        return "FREQ=WEEKLY"
    if kind == 1:
        return f"FREQ=WEEKLY;COUNT={rng.randint(4, 52)}"
    until = start + timedelta(weeks=rng.randint(4, 104))
    return f"FREQ=WEEKLY;UNTIL={until:%Y%m%d}T235959Z"


def _event_body(i: int, rng: random.Random, words: _Words, today: date,
                rare: frozenset[int]) -> dict[str, Any]:
    """The request body of event i, as a client would send it."""
    title = words.text(rng.randint(2, 5))
    description = words.text(rng.randint(8, 30))
    if i % COMMON_EVERY == 7:
        title.insert(rng.randrange(len(title) + 1), COMMON_WORD)
    if i in rare:  # a title for most, a description for the others: two ranking tiers
        (title if i % 3 else description).append(RARE_WORD)
    day = today - timedelta(days=365 * YEARS_BEFORE) + timedelta(
        days=rng.randrange(365 * (YEARS_BEFORE + YEARS_AFTER)))
    zone = ZONES[i % len(ZONES)]
    body: dict[str, Any] = {"title": " ".join(title).capitalize(),
                            "description": " ".join(description).capitalize() + ".",
                            "is_private": i % PRIVATE_EVERY == 3}
    if i % 4:
        body["location"] = f"Room {rng.randint(1, 40)}"
    if i % ALL_DAY_EVERY == 5:
        body.update(is_all_day=True, start_date=str(day), start_timezone=zone)
        return body
    minutes = rng.randrange(7 * 60, 21 * 60, 15)
    start = datetime(day.year, day.month, day.day) + timedelta(minutes=minutes)
    end = start + timedelta(minutes=rng.choice((30, 45, 60, 90, 120, 180)))
    body.update(start_time=start.isoformat(timespec="minutes"), start_timezone=zone,
                end_time=end.isoformat(timespec="minutes"), end_timezone=zone)
    if i % RECURRING_EVERY == 11:
        body["recurrence_rule"] = _rule(i, rng, day)
    return body


_AS_SENT: Sequence[str] = getattr(events, "_AS_SENT", (
    "title", "description", "location", "image_url", "is_private", "require_rsvp",
    "require_payment", "transparency"))
"""The fields `domain.events.create` stores as sent."""


def _event_row(body: dict[str, Any], profile_id: str, taken: set[str]) -> dict[str, Any]:
    """What `domain.events.create` inserts for `body` with a derived slug; `taken` is the
    profile's slugs so far, lower-cased (the first free suffix is taken, as there)."""
    values: dict[str, Any] = {k: body[k] for k in _AS_SENT if k in body}
    values.update(times.create_columns(body, fill_end_timezone=True))
    base = events.slugify(body["title"], times.of_row(values))
    slug, n = base, 1
    while slug.lower() in taken:
        n += 1
        slug = f"{base}-{n}"
    taken.add(slug.lower())
    return {"id": ids.new_id("evt"), "profile_id": profile_id, **values, "slug": slug}


# ---------------------------------------------------------------------------
# Writing


async def _columns(conn: asyncpg.Connection, table: str) -> list[str]:
    rows = await conn.fetch(
        "SELECT column_name FROM information_schema.columns WHERE table_name = $1", table)
    return [r[0] for r in rows]


async def _copy(conn: asyncpg.Connection, table: str, rows: Iterator[dict[str, Any]]) -> int:
    """COPY `rows` into `table` in batches. Each row gets the columns it names that the table
    has, and the table's defaults for the others, as an INSERT of those columns would: rows
    naming different columns go in different COPYs."""
    existing = set(await _columns(conn, table))
    count = 0
    while batch := list(itertools.islice(rows, BATCH)):
        groups: dict[tuple[str, ...], list[tuple[Any, ...]]] = {}
        for row in batch:
            columns = tuple(c for c in row if c in existing)
            groups.setdefault(columns, []).append(tuple(row[c] for c in columns))
        for columns, records in groups.items():
            await conn.copy_records_to_table(table, records=records, columns=list(columns))
        count += len(batch)
    return count


async def _users(db: Database) -> tuple[dict[str, Any], list[str], list[str]]:
    """The bench user (its create_user answer and id), owners' and attendees' ids."""
    bench = await accounts.create_user(db, BENCH_EMAIL, "Scale bench", BENCH_ZONE)
    owners, attendees = [], []
    for k in range(OWNERS):
        await accounts.create_user(db, f"owner{k}@scale.example", f"Owner {k}", ZONES[k % 6])
    for k in range(ATTENDEES):
        await accounts.create_user(db, f"attendee{k}@scale.example", None, None)
    rows = await db.fetch("SELECT id, email::text AS email FROM users")
    by_email = {r["email"]: r["id"] for r in rows}
    owners = [by_email[f"owner{k}@scale.example"] for k in range(OWNERS)]
    attendees = [by_email[f"attendee{k}@scale.example"] for k in range(ATTENDEES)]
    bench["user_id"] = by_email[BENCH_EMAIL]
    return bench, owners, attendees


async def _profiles(db: Database, bench: dict[str, Any], owners: list[str]) -> list[str]:
    orgs = {r["user_id"]: r["organization_id"] for r in await db.fetch(
        "SELECT user_id, organization_id FROM organization_members WHERE is_default")}
    profile_ids = []
    for j in range(PROFILES):
        owner = bench["user_id"] if j == 0 else owners[j % OWNERS]
        profile_id = ids.new_id("prf")
        fields: dict[str, Any] = {"display_name": f"Scale profile {j}",
                                  "description": f"Profile {j} of the scale bench."}
        if j > SUBSCRIBED and j % PRIVATE_EVERY == 0:
            fields["is_private"] = True
        await profile_store.insert(db, profile_id, orgs[owner], owner, f"scale-{j:04d}", fields)
        profile_ids.append(profile_id)
    return profile_ids


def _event_rows(size: int, profile_ids: list[str], seed: str) -> Iterator[dict[str, Any]]:
    rng = random.Random(f"{seed}:events")
    words = _Words(rng)
    today = datetime.now(UTC).date()
    rare = frozenset(rng.sample(range(size), min(RARE_COUNT, size)))
    taken: dict[str, set[str]] = {p: set() for p in profile_ids}
    for i in range(size):
        profile_id = profile_ids[i % PROFILES]
        yield _event_row(_event_body(i, rng, words, today, rare), profile_id, taken[profile_id])


def _rsvp_rows(event_ids: list[str], attendees: list[str], seed: str
               ) -> Iterator[dict[str, Any]]:
    rng = random.Random(f"{seed}:rsvps")
    answers = {s: rsvps.RsvpCreate.model_validate({"status": s}).model_dump()
               for s in ("going", "maybe", "not_going")}
    for n, event_id in enumerate(event_ids):
        if n % RSVP_EVERY:
            continue
        for user_id in rng.sample(attendees, rng.randint(1, 4)):
            status = rng.choices(("going", "maybe", "not_going"), (6, 2, 2))[0]
            yield {"id": ids.new_id("rsvp"), "event_id": event_id, "user_id": user_id,
                   **answers[status]}


async def _subscribe(db: Database, user_id: str, profile_ids: list[str]) -> None:
    """As `domain.subscriptions.subscribe`, then its sync job, run here."""
    for profile_id in profile_ids[1:SUBSCRIBED + 1]:
        subscription_id = ids.new_id("sub")
        async with db.transaction() as tx:
            await subscription_store.insert_new(tx, subscription_id, user_id, "profile",
                                                profile_id, True, [])
        await sync.run_sync(db, {"scope": "subscription", "id": subscription_id})


def _ics(uid: str, title: str, start: datetime, zone: str, rule: str | None) -> str:
    stamp = start.strftime("%Y%m%dT%H%M%S")
    end = (start + timedelta(minutes=45)).strftime("%Y%m%dT%H%M%S")
    lines = ["BEGIN:VCALENDAR", "VERSION:2.0", "PRODID:-//bench//EN", "BEGIN:VEVENT",
             f"UID:{uid}", "DTSTAMP:20260101T000000Z", f"SUMMARY:{title}",
             f"DTSTART;TZID={zone}:{stamp}", f"DTEND;TZID={zone}:{end}"]
    if rule:
        lines.append(f"RRULE:{rule}")
    return "\r\n".join([*lines, "END:VEVENT", "END:VCALENDAR", ""])


def connected_event(i: int, recurring: int, today: date) -> tuple[str, str]:
    """(uid, iCalendar text) of a connected calendar's i-th event: the first `recurring`
    weekly from a week before `today`; the rest one-off, spread over 30 days back to 335
    ahead (bench/connected.py puts the same events on a CalDAV server)."""
    zone = CONNECTED_ZONES[i % len(CONNECTED_ZONES)]
    hour = 7 + i % 12
    if i < recurring:
        day = today - timedelta(days=7 - i % 7)
        start = datetime(day.year, day.month, day.day, hour)
        return f"weekly-{i}@bench", _ics(f"weekly-{i}@bench", f"Remote weekly {i}", start,
                                         zone, "FREQ=WEEKLY")
    day = today + timedelta(days=-30 + i % 365)
    start = datetime(day.year, day.month, day.day, hour)
    return f"one-{i}@bench", _ics(f"one-{i}@bench", f"Remote {i}", start, zone, None)


def _history_event(k: int, today: date) -> tuple[str, str]:
    """(uid, iCalendar text) of the k-th past event, 2k hours before the 30 days of
    `connected_event`'s."""
    start = datetime(today.year, today.month, today.day, 8) - timedelta(days=31, hours=2 * k)
    uid = f"past-{k}@bench"
    return uid, _ics(uid, f"Remote past {k}", start, CONNECTED_ZONES[k % len(CONNECTED_ZONES)],
                     None)


async def _connect(db: Database, user_id: str, timezone: str, history: int) -> str:
    """The bench user's connected calendar, as a CalDAV account's first sync leaves it.

    Never synced by the service: there is no server behind it, so its account's next sync
    is at infinity (the scheduler never claims it) and its secret is not a sealed
    credential (nothing reads it). Marked synced now, as a sync that succeeded marks it."""
    account_id, calendar_id = ids.new_id("xac"), ids.new_id("xcal")
    today = datetime.now(ZoneInfo(timezone)).date()
    made = [connected_event(i, CONNECTED_RECURRING, today) for i in range(CONNECTED_EVENTS)]
    made += [_history_event(k, today) for k in range(history)]
    found = [RemoteEvent(key=f"{uid}.ics", etag=f'"{i}"', components=ical.parse(text))
             for i, (uid, text) in enumerate(made)]
    async with db.transaction() as tx:
        await connected_store.insert_account(tx, account_id, user_id, "ios",
                                             "https://caldav.scale.example/", "scale", b"-")
        await tx.execute("UPDATE external_accounts SET next_sync_at = 'infinity' WHERE id = $1",
                         account_id)
        await connected_store.put_calendars(
            tx, account_id, user_id, "ios",
            [RemoteCalendar(remote_id="/scale/big/", name="Big", can_edit=True)], [calendar_id])
        await connected_store.put_events(tx, calendar_id, engine.event_rows(found))
        await connected_store.synced(tx, calendar_id, "seeded")
    await connected_store.succeeded(db, account_id, None)
    await connected_store.select(db, calendar_id, False)
    return calendar_id


async def _settle(db: Database, steps: tuple[tuple[str, str], ...] = SETTLE_STEPS
                  ) -> list[str]:
    done = []
    for module_name, name in steps:
        module = __import__(module_name, fromlist=[name])
        step = getattr(module, name, None)
        if step is not None:
            await step(db)
            done.append(f"{module_name}.{name}")
    return done


async def seed(dsn: str, size: int) -> dict[str, Any]:
    seed_text = f"kalends-scale-{size}"
    reproducible_ids(seed_text)
    started = time.perf_counter()
    db = await Database.connect(dsn, min_size=1, max_size=2)
    conn = await asyncpg.connect(dsn)
    steps: dict[str, float] = {}

    def lap(name: str) -> None:
        steps[name] = round(time.perf_counter() - started - sum(steps.values()), 1)
    try:
        await conn.execute("SET TIME ZONE 'UTC'")
        # citext's binary form is text's: UTF-8 bytes.
        await conn.set_type_codec("citext", encoder=str.encode, decoder=bytes.decode,
                                  format="binary")
        bench, owners, attendees = await _users(db)
        profile_ids = await _profiles(db, bench, owners)
        lap("users_profiles")
        event_ids: list[str] = []

        def kept(rows: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
            for row in rows:
                event_ids.append(row["id"])
                yield row
        async with conn.transaction():
            events_written = await _copy(conn, "events", kept(
                _event_rows(size, profile_ids, seed_text)))
            lap("events")
            rsvps_written = await _copy(conn, "rsvps", _rsvp_rows(event_ids, attendees,
                                                                   seed_text))
        lap("rsvps")
        await _subscribe(db, bench["user_id"], profile_ids)
        connected = await _connect(db, bench["user_id"], BENCH_ZONE, size // HISTORY_EVERY)
        settled = await _settle(db)
        lap("subscriptions")
        await conn.execute("VACUUM ANALYZE")
        settled += await _settle(db, ANALYZED_STEPS)
        lap("vacuum_analyze")
        copies = await conn.fetchval(
            "SELECT count(*) FROM calendar_events WHERE calendar_id = $1", bench["calendar_id"])
        connected_rows = await conn.fetchval(
            "SELECT count(*) FROM external_events WHERE calendar_id = $1", connected)
    finally:
        await conn.close()
        await db.close()
    return {"size": size, "events": events_written, "rsvps": rsvps_written,
            "copies": copies, "connected_rows": connected_rows, "profiles": len(profile_ids),
            "settled": settled,
            "steps": steps, "seconds": round(time.perf_counter() - started, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--size", type=int, required=True)
    args = parser.parse_args()
    import json

    print(json.dumps(asyncio.run(seed(args.dsn, args.size))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
