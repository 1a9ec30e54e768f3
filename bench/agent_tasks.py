"""What ten everyday requests cost an agent over MCP: each scripted as the calls a
competent agent makes from a cold start, with the tokens (`o200k_base`) of everything
the model reads, the tool list included; before and after in one run.

    python bench/agent_tasks.py [--only before|after]

One `kalends serve` process. The bench user lives in Europe/Paris (their saved zone) and
has a week of personal events (a recurring standup on weekdays, today's 3 pm design
review, tomorrow's lunch and dentist, three meetings on the coming 24th), a profile
"Community workshops" with Saturday's pottery workshop (four RSVPs), and two colleagues
(made in the database) with busy mornings next week, one of whom hosts Thursday's jazz
night.

Each task runs twice, on /mcp-developer:
- after: the default (core) tool list, `getContext` for what the task needs of it (the
  date, the zone, calendars, profiles), `fields`, arrays for lists, and the answers'
  local times. "Who is coming" asks for the rsvps toolset too (`?toolsets=core,rsvps`),
  as the instructions say how.
- before, as an agent met the service before them: `?toolsets=all` (the whole catalogue,
  counted as tools/list listed it then: schemas compacted without loss, patterns and
  resources' output properties included), no `getContext` (`getAgenda` of today read for
  its window's date and zone, `listCalendars`, `listProfiles` instead), answers without
  local times (left out of what is counted).

What the model reads, counted per task: the tool list (the `tools` of `tools/list`, as
JSON), the instructions, the request, and for each call its name and arguments (the
model wrote them; they stay in its context) and the text block of its result (what
hosts show the model; structuredContent is the same JSON again). Goals: the default
tool list at most 8,000 tokens, the tasks' median at most 12,000, and no call made only
to learn the date or the zone.
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import aiohttp
import harness
import token_count
from harness import Result

MCP = "/mcp-developer"
MODERN = "2026-07-28"
ZONE = ZoneInfo("Europe/Paris")
MAX_TOOL_LIST = 8_000
MAX_MEDIAN = 12_000
LOCAL_TIMES = ("local_start_time", "local_end_time")


# ---------------------------------------------------------------------------
# The agent: one MCP session as a host holds it, and what its model reads


@dataclass
class Call:
    name: str
    arguments: dict[str, Any]
    result: str
    only_for_the_date: bool


@dataclass
class Agent:
    """One task's session: the tools it lists, the calls its model makes."""

    http: aiohttp.ClientSession
    url: str
    before: bool
    toolsets: str
    tool_list: str = ""
    instructions: str = ""
    calls: list[Call] = field(default_factory=list)

    async def start(self) -> None:
        self.instructions = (await self._rpc("server/discover", {}))["instructions"]
        listed = (await self._rpc("tools/list", {}))["tools"]
        if self.before:
            listed = _as_listed_before(listed)
        self.tool_list = _json(listed)

    async def call(self, name: str, arguments: dict[str, Any], *,
                   only_for_the_date: bool = False) -> Any:
        """The tool's answer; what the model reads of it is kept."""
        result = await self._rpc("tools/call", {"name": name, "arguments": arguments})
        text = result["content"][0]["text"]
        if result.get("isError"):
            raise RuntimeError(f"{name} {arguments}: {text}")
        answer = json.loads(text)
        if self.before:  # answers had no local times then
            text = _json(_without_local_times(answer))
        self.calls.append(Call(name, arguments, text, only_for_the_date))
        return answer

    async def _rpc(self, method: str, params: dict[str, Any]) -> Any:
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {
            **params, "_meta": {
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"},
                "io.modelcontextprotocol/clientCapabilities": {}}}}
        headers = {"MCP-Protocol-Version": MODERN, "Mcp-Method": method,
                   "Accept": "application/json"}
        if "name" in params:
            headers["Mcp-Name"] = params["name"]
        query = f"?toolsets={self.toolsets}" if self.toolsets else ""
        async with self.http.post(f"{self.url}{MCP}{query}", json=body,
                                  headers=headers) as response:
            answer = await response.json(content_type=None)
        if "result" not in answer:
            raise RuntimeError(f"{method} answered {response.status}: {answer}")
        return answer["result"]


def _json(value: Any) -> str:
    """JSON as the server sends it: compact, UTF-8 as is."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _as_listed_before(listed: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tools as tools/list listed them before it left input patterns and resources'
    output properties out: their schemas compacted without loss (bench/mcp_catalogue.py's
    `lossless`)."""
    import kalends.service.app  # noqa: F401  (registers and prepares every operation)
    from mcp_bridge import schemas, tools
    from registry import OPERATIONS

    out = []
    for tool in listed:
        op = OPERATIONS[tool["name"]]
        entry = {**tool, "inputSchema": schemas.compact(tools.input_schema(op))}
        output = tools.output_schema(op)
        if output is not None:
            entry["outputSchema"] = schemas.compact(output)
        out.append(entry)
    return out


def _without_local_times(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_local_times(v) for k, v in value.items() if k not in LOCAL_TIMES}
    if isinstance(value, list):
        return [_without_local_times(v) for v in value]
    return value


# ---------------------------------------------------------------------------
# The world the tasks run in


@dataclass(frozen=True)
class World:
    today: date
    calendar_id: str
    colleagues: tuple[str, ...]
    """Ana's and Ben's addresses."""

    def next(self, weekday: int) -> date:
        """The next such weekday after today (Monday 0)."""
        return self.today + timedelta(days=(weekday - self.today.weekday() - 1) % 7 + 1)

    @property
    def the_24th(self) -> date:
        """The coming 24th, after today."""
        day = self.today.replace(day=24)
        if day <= self.today:
            day = (day.replace(day=1) + timedelta(days=32)).replace(day=24)
        return day


def _at(day: date, hour: int, minute: int = 0) -> str:
    return datetime.combine(day, time(hour, minute)).strftime("%Y-%m-%dT%H:%M")


def _timed(day: date, start: tuple[int, int], minutes: int) -> dict[str, str]:
    begin = datetime.combine(day, time(*start))
    return {"start_time": begin.strftime("%Y-%m-%dT%H:%M"), "start_timezone": ZONE.key,
            "end_time": (begin + timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M"),
            "end_timezone": ZONE.key}


async def _people(url: str) -> list[dict[str, Any]]:
    """The user and three colleagues in the user's organization, all in Paris, made in the
    database with their keys."""
    from db.database import Database
    from domain import accounts

    tag = secrets.token_hex(3)
    async with harness.database_url() as dsn:
        db = await Database.connect(dsn, min_size=1, max_size=2)
        try:
            people = [dict(await accounts.create_user(db, f"{name}-{tag}@example.com",
                                                      name.title(), ZONE.key))
                      for name in ("me", "ana", "ben", "chloe")]
            for person in people[1:]:
                await accounts.add_member(db, people[0]["organization_id"], person["email"],
                                          "member")
        finally:
            await db.close()
    return people


async def _seed(url: str) -> tuple[World, str]:
    """A world of its own (a run changes it), and the key of the user it is for."""
    people = await _people(url)
    me = people[0]
    world = World(datetime.now(ZONE).date(), str(me["calendar_id"]),
                  (str(people[1]["email"]), str(people[2]["email"])))
    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {me['api_key']}"}) as http:
        await _seed_my_calendar(http, url, world)
        await _seed_colleagues(http, url, world, [
            (str(p["email"]), str(p["api_key"]), str(p["calendar_id"])) for p in people[1:]])
    return world, str(me["api_key"])


async def _seed_my_calendar(http: aiohttp.ClientSession, url: str, world: World) -> None:
    events = f"{url}/v1/calendars/{world.calendar_id}/events"
    tomorrow = world.today + timedelta(days=1)
    mine = [
        ("Standup", world.today, (9, 0), 15, "FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR"),
        ("Design review", world.today, (15, 0), 60, None),
        ("Gym", world.today, (18, 30), 60, None),
        ("Lunch with Ana", tomorrow, (12, 30), 60, None),
        ("Dentist", tomorrow, (16, 0), 45, None),
        ("Quarterly planning", world.next(3), (10, 0), 120, None),
        ("Vendor call", world.next(4), (11, 0), 30, None),
        ("Budget review", world.the_24th, (10, 0), 60, None),
        ("Team lunch", world.the_24th, (13, 0), 90, None),
        ("Interview: backend candidate", world.the_24th, (16, 0), 60, None),
    ]
    for title, day, start, minutes, rule in mine:
        body = {"title": title, **_timed(day, start, minutes), "location": "Office"}
        if rule:
            body["recurrence_rule"] = rule
        await harness.call(http, "POST", events, 201, body)


async def _seed_colleagues(http: aiohttp.ClientSession, url: str, world: World,
                           people: list[tuple[str, str, str]]) -> None:
    monday = world.next(0)
    for (_, key, calendar), hours in zip(people[:2], ((9, 12), (10, 13)), strict=True):
        for offset in range(5):  # busy mornings, each a different span
            body = {"title": "Focus", **_timed(monday + timedelta(days=offset),
                                               (hours[0], 0), 60 * (hours[1] - hours[0]))}
            await harness.call(http, "POST", f"{url}/v1/calendars/{calendar}/events", 201,
                               body, key=key)
    profile = await harness.call(http, "POST", f"{url}/v1/profiles", 201, {
        "platform_id": f"workshops-{secrets.token_hex(3)}", "display_name": "Community workshops"})
    workshop = await harness.call(http, "POST", f"{url}/v1/profiles/{profile['id']}/events", 201, {
        "title": "Saturday pottery workshop", "location": "Studio 4",
        "description": "Hands-on wheel throwing for beginners; clay and aprons provided.",
        **_timed(world.next(5), (10, 0), 120)})
    answers = (("going", 1), ("maybe", 1), ("going", 2))
    for (email, key, _), (status, guests) in zip(people, answers, strict=True):
        name = email.split("-")[0].title()
        await harness.call(http, "POST", f"{url}/v1/events/{workshop['id']}/rsvps", 201, {
            "status": status, "num_guests": guests, "attendee_first_name": name,
            "attendee_last_name": "Martin"}, key=key)
    await harness.call(http, "POST", f"{url}/v1/events/{workshop['id']}/rsvps", 201, {
        "status": "going", "attendee_email": "dana@example.com",
        "attendee_first_name": "Dana", "attendee_last_name": "Roux"})
    ben_key = people[1][1]
    club = await harness.call(http, "POST", f"{url}/v1/profiles", 201, {
        "platform_id": f"jazz-{secrets.token_hex(3)}", "display_name": "Jazz club"}, key=ben_key)
    await harness.call(http, "POST", f"{url}/v1/profiles/{club['id']}/events", 201, {
        "title": "Jazz night", "location": "The cellar", **_timed(world.next(3), (20, 0), 180)},
        key=ben_key)


# ---------------------------------------------------------------------------
# The ten tasks, as a competent agent calls the tools


Task = Callable[[Agent, World], Awaitable[None]]


async def _today(agent: Agent) -> tuple[date, str]:
    """Before getContext: the date and zone, read off today's agenda window."""
    agenda = await agent.call("getAgenda", {"days": 1}, only_for_the_date=True)
    return date.fromisoformat(agenda["window"]["date"]), agenda["window"]["timezone"]


async def _context(agent: Agent) -> dict[str, Any]:
    return dict(await agent.call("getContext", {}))


async def _day_zone_and_calendar(agent: Agent) -> tuple[date, str, str]:
    """Today, the caller's zone and their first calendar: from getContext, or
    before it, from today's agenda and listCalendars."""
    if agent.before:
        today, zone = await _today(agent)
        calendar = (await agent.call("listCalendars", {"fields": ["name", "is_default"]})
                    )["data"][0]["id"]
        return today, zone, calendar
    context = await _context(agent)
    return (date.fromisoformat(context["local_now"][:10]), context["time_zone"],
            context["calendars"]["data"][0]["id"])


async def tomorrow(agent: Agent, world: World) -> None:
    # Today's agenda window says the date: two days from today hold tomorrow.
    await agent.call("getAgenda", {"days": 2})


async def move_the_3pm(agent: Agent, world: World) -> None:
    agenda = await agent.call("getAgenda", {"days": 1})
    today = date.fromisoformat(agenda["window"]["date"])
    zone = agenda["window"]["timezone"]
    [item] = [i for i in agenda["items"] if i["local_start"][11:16] == "15:00"]
    friday = today + timedelta(days=(4 - today.weekday() - 1) % 7 + 1)
    start = datetime.fromisoformat(item["local_start"])
    end = datetime.fromisoformat(item["local_end"])
    await agent.call("updateCalendarEvent", {
        "calendar_id": item["calendar_id"], "event_id": item["event_id"],
        "start_time": _at(friday, start.hour, start.minute), "start_timezone": zone,
        "end_time": _at(friday, end.hour, end.minute), "end_timezone": zone,
        "fields": ["title", "start_time" if agent.before else "local_start_time"]})


async def who_is_coming(agent: Agent, world: World) -> None:
    found = await agent.call("search", {"q": "workshop", "type": "event",
                                        "fields": ["title", "date_info"], "limit": 5})
    event = found["data"][0]
    await agent.call("listEventRsvps", {"event_id": event["id"], "fields": [
        "attendee_first_name", "attendee_last_name", "status", "num_guests"]})


async def an_hour_with_two_colleagues(agent: Agent, world: World) -> None:
    today, zone, calendar = await _day_zone_and_calendar(agent)
    monday = today + timedelta(days=7 - today.weekday())
    offset = datetime.combine(monday, time(), ZoneInfo(zone)).isoformat()
    found = await agent.call("findMeetingTimes", {
        "emails": list(world.colleagues), "duration_minutes": 60, "start": offset,
        "end": datetime.combine(monday + timedelta(days=5), time(),
                                ZoneInfo(zone)).isoformat(),
        "time_zone": zone, "limit": 1})
    slot = found["data"][0]
    await agent.call("createCalendarEvent", {
        "calendar_id": calendar, "title": "Sync with Ana and Ben",
        "start_time": slot["local_start"][:16], "start_timezone": zone,
        "end_time": slot["local_end"][:16], "end_timezone": zone,
        "fields": ["title", "start_time" if agent.before else "local_start_time"]})


async def cancel_the_24th(agent: Agent, world: World) -> None:
    if agent.before:
        today, _ = await _today(agent)
    else:
        today = date.fromisoformat((await _context(agent))["local_now"][:10])
    day = today.replace(day=24) if today.day < 24 else (
        today.replace(day=1) + timedelta(days=32)).replace(day=24)
    agenda = await agent.call("getAgenda", {"date": day.isoformat(), "days": 1})
    # The standup repeats: deleting it would delete every day's; it stays, and is said.
    for item in agenda["items"]:
        if item["editable"] and not item["is_recurring"]:
            await agent.call("deleteCalendarEvent", {"calendar_id": item["calendar_id"],
                                                     "event_id": item["event_id"]})


async def the_week(agent: Agent, world: World) -> None:
    await agent.call("getAgenda", {"days": 7})


async def free_thursday_at_2(agent: Agent, world: World) -> None:
    # The week's agenda answers it, the date included: no call for the date alone.
    await agent.call("getAgenda", {"days": 7})


async def rsvp_to_the_jazz_night(agent: Agent, world: World) -> None:
    found = await agent.call("search", {"q": "jazz night", "type": "event",
                                        "fields": ["title", "date_info"], "limit": 5})
    await agent.call("createEventRsvp", {"event_id": found["data"][0]["id"], "status": "going",
                                         "fields": ["status"]})


async def call_mum_tomorrow(agent: Agent, world: World) -> None:
    today, zone, calendar = await _day_zone_and_calendar(agent)
    day = today + timedelta(days=1)
    await agent.call("createCalendarEvent", {
        "calendar_id": calendar, "title": "Call mum", "start_time": _at(day, 18),
        "start_timezone": zone, "end_time": _at(day, 18, 30), "end_timezone": zone,
        "fields": ["title", "start_time" if agent.before else "local_start_time"]})


async def publish_a_workshop(agent: Agent, world: World) -> None:
    if agent.before:
        today, zone = await _today(agent)
        profiles = (await agent.call("listProfiles", {"fields": ["display_name"]}))["data"]
    else:
        context = await _context(agent)
        today, zone = date.fromisoformat(context["local_now"][:10]), context["time_zone"]
        profiles = context["profiles"]["data"]
    [profile] = [p for p in profiles if p["display_name"] == "Community workshops"]
    saturday = today + timedelta(days=(5 - today.weekday() - 1) % 7 + 8)
    await agent.call("createProfileEvent", {
        "profile_id": profile["id"], "title": "Pottery basics",
        "start_time": _at(saturday, 10), "start_timezone": zone,
        "end_time": _at(saturday, 12), "end_timezone": zone,
        "fields": ["title", "start_time" if agent.before else "local_start_time"]})


TASKS: list[tuple[str, Task, str]] = [
    ("What's on tomorrow?", tomorrow, ""),
    ("Move my 3 pm today to Friday, same time.", move_the_3pm, ""),
    ("Who is coming to Saturday's workshop?", who_is_coming, "core,rsvps"),
    ("Find an hour with Ana and Ben next week and put it in my calendar.",
     an_hour_with_two_colleagues, ""),
    ("Cancel everything on the 24th.", cancel_the_24th, ""),
    ("How does my week look?", the_week, ""),
    ("Am I free Thursday at 2 pm?", free_thursday_at_2, ""),
    ("RSVP yes to the jazz night on Thursday.", rsvp_to_the_jazz_night, ""),
    ("Put 'Call mum' in my calendar tomorrow at 6 pm for half an hour.", call_mum_tomorrow, ""),
    ("Publish a 'Pottery basics' workshop on our Community workshops profile, Saturday "
     "week, 10:00 to 12:00.", publish_a_workshop, ""),
]


# ---------------------------------------------------------------------------
# The run


@dataclass
class Run:
    request: str
    mode: str
    agent: Agent


async def _benchmark(http: aiohttp.ClientSession, url: str, args: argparse.Namespace
                     ) -> list[Result]:
    modes = [m for m in ("before", "after") if args.only in (None, m)]
    runs: list[Run] = []
    for mode in modes:
        world, key = await _seed(url)  # each mode in a world of its own, made alike
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {key}"}) as mine:
            for request, task, toolsets in TASKS:
                chosen = "all" if mode == "before" else toolsets
                agent = Agent(mine, url, before=mode == "before", toolsets=chosen)
                await agent.start()
                await task(agent, world)
                runs.append(Run(request, mode, agent))
    _report(runs)
    return []


def _texts(run: Run) -> list[str]:
    """What the model reads, in order: tool list, instructions, request, each call."""
    calls = [f"{c.name} {_json(c.arguments)}\n{c.result}"
             for c in run.agent.calls]
    return [run.agent.tool_list, run.agent.instructions, run.request, *calls]


def _report(runs: list[Run]) -> None:
    counted = iter(token_count.count([t for run in runs for t in _texts(run)]))
    totals: dict[str, list[int]] = {}
    lists: dict[str, int] = {}
    dated: dict[str, int] = {}
    for n, run in enumerate(runs):
        tool_list, instructions, request = next(counted), next(counted), next(counted)
        calls = [next(counted) for _ in run.agent.calls]
        total = tool_list + instructions + request + sum(calls)
        totals.setdefault(run.mode, []).append(total)
        if not run.agent.toolsets or run.agent.toolsets == "all":
            lists[run.mode] = tool_list
        dated[run.mode] = dated.get(run.mode, 0) + sum(
            c.only_for_the_date for c in run.agent.calls)
        print(f"\n[{run.mode}] {n % len(TASKS) + 1}. {run.request}")
        print(f"  tools: {run.agent.toolsets or 'core (default)'}: {tool_list:,} tokens; "
              f"instructions {instructions:,}; request {request:,}")
        for call, tokens in zip(run.agent.calls, calls, strict=True):
            shown = _json(call.arguments)
            shown = shown if len(shown) <= 90 else shown[:87] + "..."
            flag = "  (only for the date and zone)" if call.only_for_the_date else ""
            print(f"    {call.name:<20} {shown:<90} {tokens:>6,}{flag}")
        print(f"  total {total:,} tokens in {len(calls)} calls")
    _summary(totals, lists, dated)


def _summary(totals: dict[str, list[int]], lists: dict[str, int], dated: dict[str, int]
             ) -> None:
    print(f"\n{'task':<72} " + " ".join(f"{m:>9}" for m in totals))
    for i, (request, _, _) in enumerate(TASKS):
        shown = request if len(request) <= 70 else request[:67] + "..."
        print(f"{i + 1:>2}. {shown:<68} " + " ".join(f"{t[i]:>9,}" for t in totals.values()))
    print(f"{'median':<72} " + " ".join(
        f"{statistics.median(t):>9,.0f}" for t in totals.values()))
    for mode, tokens in lists.items():
        print(f"tool list, {mode}: {tokens:,} tokens"
              + (f" (goal: at most {MAX_TOOL_LIST:,})" if mode == "after" else ""))
    for mode, count in dated.items():
        print(f"calls only to learn the date or the zone, {mode}: {count}")
    if "after" in totals:
        print(f"after: median {statistics.median(totals['after']):,.0f} tokens a task (goal: "
              f"at most {MAX_MEDIAN:,}); {dated['after']} calls for the date alone (goal: 0)")


def main() -> int:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--only", choices=("before", "after"))
    known, rest = parser.parse_known_args()
    sys.argv[1:] = rest
    args = harness.options(__doc__ or "", {"concurrency": (1, "HTTP connections")})
    args.only = known.only
    return harness.run(_benchmark, args, "ten agent tasks")


if __name__ == "__main__":
    sys.exit(main())
