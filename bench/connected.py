"""Connected calendars: sync and agenda cost with a large CalDAV calendar.

    python bench/connected.py [--events 5000] [--recurring 500] [--changes 10]
                              [--weekly 100] [--single 1000] [--requests 300]
                              [--warmup 30] [--concurrency 1]

Starts Radicale (a real CalDAV server) on a loopback port and fills one
calendar with `--events` events, `--recurring` of them weekly (written as files
while Radicale is stopped: seeding through HTTP would measure Radicale). Then
starts `kalends serve`, seeds the bench user's personal calendar as
bench/agenda.py does (`--weekly` + `--single` events), and measures:

- initial sync: `kalends admin connect-calendars` returning, to the calendar's
  events all visible in the agenda;
- incremental sync: `--changes` events changed on the server by a CalDAV client,
  `kalends admin sync-calendars`, to the changes visible in the agenda;
- `GET /v1/agenda?days=31` with the connected calendar (A) and with the personal
  calendar only (B), alternated A B A B.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import harness
from agenda import one_off_body, recurring_body
from harness import Result, Scenario
from seed import connected_event

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from caldav_server import Radicale

_SYNC_TIMEOUT = 600.0


def _fill(radicale: Radicale, login: str, password: str, events: int, recurring: int) -> None:
    radicale.client(login, password).principal().make_calendar(name="Big", cal_id="big")
    radicale.stop()
    folder = radicale.folder / "collections" / "collection-root" / login / "big"
    today = datetime.now(UTC).date()
    for i in range(events):
        uid, text = connected_event(i, recurring, today)
        (folder / f"{uid}.ics").write_text(text)
    radicale.start()
    # Radicale parses and caches every item on first access: done here, so that
    # what is measured is Kalends, not Radicale's cold cache.
    started = time.monotonic()
    _warm(radicale, login, password)
    print(f"Radicale's first full listing took {time.monotonic() - started:.1f} s", flush=True)


def _warm(radicale: Radicale, login: str, password: str) -> None:
    request = urllib.request.Request(
        f"{radicale.url}/{login}/big/", method="REPORT",
        data=b'<?xml version="1.0"?><D:sync-collection xmlns:D="DAV:"><D:sync-token/>'
             b"<D:sync-level>1</D:sync-level><D:prop><D:getetag/></D:prop></D:sync-collection>",
        headers={"Authorization": aiohttp.encode_basic_auth(login, password),
                 "Content-Type": "application/xml"},
    )
    with urllib.request.urlopen(request, timeout=1800) as response:
        response.read()


def _admin(*args: str, stdin: str = "") -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-m", "kalends", "admin", *args], input=stdin.encode(),
        env=harness._SERVICE_ENV, capture_output=True, timeout=300, check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"kalends admin {args[0]} failed: {done.stderr.decode()[-500:]}")
    return json.loads(done.stdout)  # type: ignore[no-any-return]


async def _agenda(session: aiohttp.ClientSession, url: str, query: str) -> dict[str, Any]:
    async with session.get(f"{url}/v1/agenda?{query}") as response:
        body = await response.json(content_type=None)
    if response.status != 200:
        raise RuntimeError(f"GET /v1/agenda?{query} answered {response.status}: {body}")
    return body  # type: ignore[no-any-return]


async def _until(session: aiohttp.ClientSession, url: str, query: str,
                 done: Callable[[dict[str, Any]], bool]) -> float:
    started = time.monotonic()
    while time.monotonic() - started < _SYNC_TIMEOUT:
        body = await _agenda(session, url, query)
        if done(body):
            return time.monotonic() - started
        await asyncio.sleep(0.05)
    raise RuntimeError("the sync did not finish in time")


async def _user(session: aiohttp.ClientSession, url: str, args: argparse.Namespace
                ) -> tuple[str, str]:
    """A user of our own (connect-calendars needs its email), its personal calendar
    seeded as bench/agenda.py seeds it; the session acts as that user from now on."""
    email = f"bench-connected-{secrets.token_hex(4)}@example.com"
    created = _admin("create-user", "--email", email, "--name", "Bench")
    session.headers["Authorization"] = f"Bearer {created['api_key']}"
    personal = str(created["calendar_id"])
    today = datetime.now(UTC).date()
    events = f"{url}/v1/calendars/{personal}/events"
    await harness.seed(session, Scenario(
        "POST /v1/calendars/{id}/events", lambda i: events, method="POST",
        body_for=lambda i: recurring_body(i, today), expected=201), args.weekly, 16)
    await harness.seed(session, Scenario(
        "POST /v1/calendars/{id}/events", lambda i: events, method="POST",
        body_for=lambda i: one_off_body(i, today), expected=201), args.single, 16)
    return email, personal


async def _benchmark(session: aiohttp.ClientSession, url: str, args: argparse.Namespace
                     ) -> list[Result]:
    email, personal = await _user(session, url, args)
    folder = Path(harness._SERVICE_ENV.get("KALENDS_DATA_DIR", "/tmp")).parent / "radicale"
    folder.mkdir(parents=True, exist_ok=True)
    radicale = Radicale(folder)
    login, password = "bench", secrets.token_urlsafe(12)
    radicale.set_password(login, password)
    radicale.start()
    try:
        started = time.monotonic()
        _fill(radicale, login, password, args.events, args.recurring)
        print(f"Radicale filled with {args.events} events ({args.recurring} weekly) in "
              f"{time.monotonic() - started:.1f} s", flush=True)
        started = time.monotonic()
        out = _admin("connect-calendars", "--email", email, "--provider", "ios", "--url",
                     radicale.url, "--username", login, stdin=password + "\n")
        connect = time.monotonic() - started
        xcal = out["calendars"][0]["id"]  # type: ignore[index]
        query = f"days=31&calendar_ids={xcal}"

        def synced(body: dict[str, Any]) -> bool:
            return body["sources"][0]["last_sync_at"] is not None  # type: ignore[no-any-return]

        initial = await _until(session, url, query, synced)
        first = await _agenda(session, url, query)
        print(f"connect-calendars: {connect:.2f} s; initial sync of {args.events} events "
              f"visible {initial:.2f} s later ({len(first['items'])} items in 31 days)",
              flush=True)

        # One-off events in the next 31 days, changed by another CalDAV client.
        shown = sorted(int(i["title"].split()[1]) for i in first["items"]
                       if i["title"].startswith("Remote ") and "weekly" not in i["title"])
        changed = shown[:args.changes]
        calendar = radicale.client(login, password).principal().calendar(cal_id="big")
        for i in changed:
            obj = calendar.event_by_uid(f"one-{i}@bench")
            obj.data = obj.data.replace(f"SUMMARY:Remote {i}", f"SUMMARY:Changed {i}")
            obj.save()
        started = time.monotonic()
        _admin("sync-calendars", "--account", str(out["account_id"]))
        queued = time.monotonic() - started
        wanted = {f"Changed {i}" for i in changed}

        def updated(body: dict[str, Any]) -> bool:
            return wanted <= {i["title"] for i in body["items"]}

        incremental = await _until(session, url, query, updated)
        print(f"sync-calendars: {queued:.2f} s; {len(changed)} changes visible "
              f"{incremental:.2f} s later", flush=True)
        both = f"days=31&calendar_ids={personal},{xcal}"
        alone = f"days=31&calendar_ids={personal}"
        for name, q in (("with connected", both), ("personal only", alone)):
            body = await _agenda(session, url, q)
            print(f"GET /v1/agenda?days=31 {name}: {len(body['items'])} items, complete "
                  f"{body['complete']}", flush=True)
        results = []
        for round_ in (1, 2):
            for name, q in (("A: with connected", both), ("B: personal only", alone)):
                results.append(await harness.measure(session, Scenario(
                    f"{name} ({round_})", _fixed(f"{url}/v1/agenda?{q}")),
                    args.warmup, args.requests, args.concurrency))
        return results
    finally:
        radicale.stop()


def _fixed(target: str) -> Callable[[int], str]:
    return lambda i: target


def main() -> int:
    args = harness.options(__doc__ or "", {
        "events": (5000, "events in the CalDAV calendar"),
        "recurring": (500, "of them weekly"),
        "changes": (10, "events changed for the incremental sync"),
        "weekly": (100, "weekly personal events"),
        "single": (1000, "one-off personal events"),
    })
    os.environ.setdefault("KALENDS_SECRET_KEY", secrets.token_urlsafe(32))
    return harness.run(_benchmark, args,
                       f"CalDAV calendar of {args.events} events ({args.recurring} weekly) + "
                       f"{args.weekly} weekly + {args.single} one-off personal events")


if __name__ == "__main__":
    sys.exit(main())
