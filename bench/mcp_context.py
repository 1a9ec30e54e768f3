"""What an agent pays in context over MCP (docs/mcp.md, "Results"): a scripted session of typical
tasks with and without `fields`, and `listEvents` 100 with and without them, A B A B.

    python bench/mcp_context.py [--events 100] [--rounds 2] [--requests 200] [--warmup 20]

One `kalends serve` process. The bench user gets a profile with `--events` events (a
one-line description each, a week apart from tomorrow), two colleagues in its
organization (made in the database) and an event each of theirs to RSVP to.

The session, as an agent runs it through `tools/call` on /mcp-developer, "before" (the
answers as they come whole) and "after" (asking for what the task needs with `fields`):
the week's agenda, meeting times for three people over a week, create an event, RSVP
to a colleague's event, a search, and the first 100 events (after: `fields: [title,
start_time]`). Each result is counted as it is sent: its text block plus its
structuredContent as compact JSON, in characters; tokens are characters / 4 (no
tokenizer is installed). Goals: the 100-event list at most 4,000 tokens, the session at
most a third of before.

Then `tools/call listEvents {limit: 100}` (A: whole, B: `fields: [title, start_time]`),
`--requests` calls one at a time per side and round after `--warmup`, A B A B: requests
per second and p50, and B / A (goal: at least 1.5).
"""

from __future__ import annotations

import argparse
import secrets
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import harness
import orjson
from harness import Result

MCP = "/mcp-developer?toolsets=all"  # the session calls profiles' tools, not only core's
MODERN = "2026-07-28"
BYTES_PER_TOKEN = 4  # characters per token, as an estimate


async def _call(session: aiohttp.ClientSession, url: str, name: str,
                arguments: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """A tools/call; its result and the characters it holds as sent."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": name, "arguments": arguments, "_meta": {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {}}}}
    headers = {"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call", "Mcp-Name": name,
               "Accept": "application/json"}
    async with session.post(url + MCP, json=body, headers=headers) as response:
        answer = await response.json(content_type=None)
    if response.status != 200 or "result" not in answer:
        raise RuntimeError(f"tools/call {name} answered {response.status}: {answer}")
    result = answer["result"]
    if result.get("isError"):
        raise RuntimeError(f"tools/call {name}: {result['content'][0]['text']}")
    text = sum(len(b["text"]) for b in result["content"] if b["type"] == "text")
    return result["structuredContent"], text + len(
        orjson.dumps(result["structuredContent"]).decode())


async def _seed(session: aiohttp.ClientSession, url: str, events: int) -> dict[str, Any]:
    from db.database import Database
    from domain import accounts

    async with session.get(f"{url}/v1/organizations") as response:
        organization = (await response.json())["data"][0]["id"]
    colleagues = []
    async with harness.database_url() as dsn:
        db = await Database.connect(dsn, min_size=1, max_size=2)
        try:
            for i in range(2):
                email = f"colleague-{secrets.token_hex(3)}-{i}@example.com"
                made = await accounts.create_user(db, email, f"Colleague {i}", None)
                await accounts.add_member(db, organization, email, "member")
                colleagues.append((email, made["api_key"]))
        finally:
            await db.close()
    profile, _ = await _call(session, url, "createProfile", {
        "platform_id": f"ctx-{secrets.token_hex(4)}", "display_name": "Community talks"})
    start = datetime.now(UTC).replace(hour=18, minute=0, second=0, microsecond=0)
    for n in range(events):
        at = start + timedelta(days=1 + n // 3, hours=n % 3)
        await _call(session, url, "createProfileEvent", {
            "profile_id": profile["id"], "title": f"Community talk {n + 1}",
            "description": "An evening talk with questions afterwards, in the main hall.",
            "start_time": at.strftime("%Y-%m-%dT%H:%M:%SZ"), "start_timezone": "UTC",
            "location": "Main hall"})
    # A colleague's event to answer.
    email, key = colleagues[0]
    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {key}"}) as theirs:
        theirs_profile, _ = await _call(theirs, url, "createProfile", {
            "platform_id": f"ctx-{secrets.token_hex(4)}", "display_name": "Team"})
        event, _ = await _call(theirs, url, "createProfileEvent", {
            "profile_id": theirs_profile["id"], "title": "Team lunch",
            "start_time": (start + timedelta(days=2)).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "start_timezone": "UTC"})
    return {"profile": profile["id"], "colleagues": [c for c, _ in colleagues],
            "their_event": event["id"], "start": start}


def _session(seeded: dict[str, Any], after: bool) -> list[tuple[str, str, dict[str, Any]]]:
    start: datetime = seeded["start"]
    day = start.replace(hour=0)
    week = {"start": day.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "end": (day + timedelta(days=7)).strftime("%Y-%m-%dT%H:%M:%SZ")}
    narrow = (lambda f: {"fields": f}) if after else (lambda f: {})
    return [
        ("the week's agenda", "getAgenda", {"days": 7}),
        ("a meeting time for three", "findMeetingTimes", {
            **week, "emails": seeded["colleagues"], "duration_minutes": 30,
            "time_zone": "UTC", "limit": 3}),
        ("create an event", "createProfileEvent", {
            "profile_id": seeded["profile"], "title": "Planning",
            "start_time": (start + timedelta(days=3)).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "start_timezone": "UTC", **narrow(["title", "start_time"])}),
        ("RSVP", "createEventRsvp", {"event_id": seeded["their_event"], "status": "going",
                                    **narrow(["status"])}),
        ("search", "search", {"q": "talk", "limit": 10}),
        ("100 events", "listEvents", {"limit": 100, **narrow(["title", "start_time"])}),
    ]


async def _benchmark(session: aiohttp.ClientSession, url: str, args: argparse.Namespace
                     ) -> list[Result]:
    seeded = await _seed(session, url, args.events)
    totals = {}
    print("\nscripted session, characters sent (tokens = characters / 4):")
    print(f"  {'task':<26} {'before':>10} {'after':>10}")
    listed = {}
    for after in (False, True):
        total = 0
        for task, name, arguments in _session(seeded, after):
            _, sent = await _call(session, url, name, arguments)
            total += sent
            listed.setdefault(task, []).append(sent)
        totals[after] = total
    for task, (before, after) in listed.items():
        print(f"  {task:<26} {before:>10,} {after:>10,}  ({after / BYTES_PER_TOKEN:,.0f} tokens "
              f"after)")
    print(f"  {'session':<26} {totals[False]:>10,} {totals[True]:>10,}  after / before "
          f"{totals[True] / totals[False]:.2f} (goal: at most 0.33)")
    print(f"  100 events with fields: {listed['100 events'][1] / BYTES_PER_TOKEN:,.0f} tokens "
          f"counting both copies, {listed['100 events'][1] / 2 / BYTES_PER_TOKEN:,.0f} counting "
          "the text block alone, which is what hosts show the model (goal: at most 4,000)")

    results: list[Result] = []
    for round_ in range(args.rounds):
        for label, arguments in (("A listEvents 100 whole", {"limit": 100}),
                                 ("B listEvents 100 fields [title, start_time]",
                                  {"limit": 100, "fields": ["title", "start_time"]})):
            for _ in range(args.warmup):
                await _call(session, url, "listEvents", arguments)
            result = Result(f"{label} #{round_ + 1}")
            began = time.perf_counter()
            for _ in range(args.requests):
                t0 = time.perf_counter()
                await _call(session, url, "listEvents", arguments)
                result.latencies.append(time.perf_counter() - t0)
                result.statuses[200] += 1
            result.wall = time.perf_counter() - began
            results.append(result)
            print(f"measured {result.name}: {result.rps:.0f} calls/s", flush=True)
    ratios = [results[i + 1].rps / results[i].rps for i in range(0, len(results), 2)]
    print(f"\nlistEvents 100 calls/s, fields / whole, per round: "
          f"{', '.join(f'{r:.2f}' for r in ratios)} (median {statistics.median(ratios):.2f}; "
          "goal: at least 1.5)")
    return results


def main() -> int:
    args = harness.options(__doc__ or "", {
        "events": (100, "the profile's events"),
        "rounds": (2, "A B rounds"),
        "requests": (200, "measured calls per side and round"),
        "warmup": (20, "warm-up calls per side and round"),
        "concurrency": (1, "HTTP connections"),
    })
    return harness.run(_benchmark, args, f"{args.events} events, {args.rounds} A B rounds")


if __name__ == "__main__":
    sys.exit(main())
