"""The occurrences differential (docs/api-choices.md, "ICS feeds and attendee
e-mail"): generated series (tests/domain/test_occurrences_ical_cases.py) made in a public profile through the real server, their occurrences moved, retitled, cancelled,
restored and split through the API, some before a subscriber's copies were first
pushed to their CalDAV calendar and some after; then, over the cases' whole span,
every reader must give the occurrences the subscriber's agenda shows, each under its
occurrence_id with its title:

- the agenda (`GET /v1/agenda`, the reference) and free/busy (`GET /v1/free-busy`: the
  agenda's occurrences as busy time);
- Mozilla's ical.js and `icalendar` + `recurring-ical-events` reading the profile's
  ICS feed;
- a CalDAV server, Radicale, expanding the copy pushed to the subscriber's calendar
  (`calendar-query` with `expand`, RFC 4791 9.6.5).

KALENDS_OCCURRENCE_CASES cases (default 30: well under a minute), from
KALENDS_OCCURRENCE_SEED; the figures are printed (`-s`). The acceptance run is 500.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any
from xml.etree import ElementTree
from zoneinfo import ZoneInfo

import aiohttp
import icalendar
import pytest
from conftest import Api, User, new_profile
from connected_world import World, caldav_world, connect, new_person, settled
from ical_readers import (
    Window,
    beside_changes,
    icaljs_occurrences,
    python_occurrences,
    slot_of,
    within,
)
from test_occurrences_ical_cases import LAST_DAY, MAX_SPAN, Case, Step, cases

from domain import times

# slow: a real CalDAV server, node (ical.js) and a service with its workers
pytestmark = pytest.mark.slow

CASES = int(os.environ.get("KALENDS_OCCURRENCE_CASES", "30"))
SEED = int(os.environ.get("KALENDS_OCCURRENCE_SEED", "20261129"))
ONLY = {int(n) for n in os.environ.get("KALENDS_OCCURRENCE_ONLY", "").split(",") if n}
"""Numbers of the cases to run again alone (of the same seed and day), to look into
their differences."""
BATCH = 15
"""Cases per profile: one subscription, one push and one read of each source serve them."""
_QUIET_SECONDS = 120
_AGENDA_DAYS = 7  # a week of 15 daily series is within the agenda's 500 items
_FREE_BUSY_DAYS = 62
_LISTED_DAYS = 62

Labelled = tuple[Any, ...]


@pytest.fixture(scope="module")
def world(database_url: str) -> Iterator[World]:
    with caldav_world(database_url, "kalends_occurrences") as made:
        yield made


@dataclass
class Run:
    """A case as made: its events (a split adds one) and the zones its times use."""

    case: Case
    events: list[str]
    zones: set[str]


@dataclass
class Tally:
    """Cases compared, the steps they took, the occurrences each source gave, and
    the cases each source differs on (with the first few differences)."""

    cases: int = 0
    steps: Counter[str] = field(default_factory=Counter)
    occurrences: Counter[str] = field(default_factory=Counter)
    differing: dict[str, list[int]] = field(default_factory=dict)
    first: list[str] = field(default_factory=list)

    def differ(self, source: str, case: Case, text: str) -> None:
        if case.number in self.differing.get(source, []):
            return  # one difference per case and source
        self.differing.setdefault(source, []).append(case.number)
        if len(self.first) < 20:
            self.first.append(f"{source}, case {case.number} ({case}): {text}")


def test_every_reader_reads_the_occurrences_the_agenda_shows(world: World) -> None:
    today = datetime.now(UTC).date()
    made = [c for c in cases(CASES, SEED, today) if not ONLY or c.number in ONLY]
    tally = Tally()
    began = time.monotonic()
    for first in range(0, len(made), BATCH):
        asyncio.run(_batch(world, made[first:first + BATCH], today, tally))
    seconds = time.monotonic() - began
    differences = sum(map(len, tally.differing.values()))
    print(f"\noccurrences differential: {tally.cases} cases (seed {SEED}, {today}), "
          f"{differences} differences (cases by source: {tally.differing}), {seconds:.0f} s; steps "
          f"{dict(tally.steps)}; occurrences read {dict(tally.occurrences)}")
    assert tally.cases == len(made) and tally.occurrences["agenda"] > 0
    assert not differences, "\n".join(tally.first)


async def _batch(world: World, batch: Sequence[Case], today: date, tally: Tally) -> None:
    async with aiohttp.ClientSession() as session:
        api = Api(session, world.server.url)
        host = world.server.create_user()
        profile = await new_profile(api, host)
        runs = [await _made(api, host, profile["id"], case) for case in batch]
        await _steps(api, host, runs, tally, phase=0)
        person = await asyncio.to_thread(new_person, world.server, world.radicale)
        account = await _subscribed(world, api, person.user, profile["id"], person)
        await _steps(api, host, runs, tally, phase=1)
        await _quiet(world, account)
        window = Window(datetime.combine(today + timedelta(days=1), datetime.min.time(), UTC),
                        datetime.combine(today + timedelta(days=LAST_DAY + 20),
                                         datetime.min.time(), UTC))
        sources = await _read(world, session, api, person, profile["id"], window)
    for run in runs:
        tally.cases += 1
        _compare(run, sources, window, tally)
    _compare_busy(runs, sources, window, tally)


# --- Making the cases --------------------------------------------------------------------


async def _made(api: Api, host: User, profile_id: str, case: Case) -> Run:
    status, event, _ = await api.post(f"/v1/profiles/{profile_id}/events", host,
                                      json=case.series.body())
    assert status == 201, (case, event)
    return Run(case, [event["id"]], {case.series.zone})


async def _steps(api: Api, host: User, runs: Sequence[Run], tally: Tally, *, phase: int
                 ) -> None:
    for run in runs:
        for step in run.case.steps:
            if step.phase == phase:
                taken = await _step(api, host, run, step)
                tally.steps[step.kind if taken else "none to " + step.kind] += 1


async def _step(api: Api, host: User, run: Run, step: Step) -> bool:
    """Take `step` on `run`; False when no occurrence fits it (nothing to restore)."""
    event_id = run.events[int(step.which * len(run.events))]
    listed = await _occurrences(api, host, event_id, run.case)
    live = [o for o in listed if o["status"] == "scheduled"]
    if step.kind == "restore":
        chosen = [o for o in listed if o["is_exception"]]
    elif step.kind == "split":
        chosen = listed[1:]
    else:
        chosen = live
    if not chosen:
        return False
    o = chosen[int(step.pick * len(chosen))]
    path = f"/v1/events/{event_id}/occurrences/{o['occurrence_id']}"
    if step.kind == "move":
        run.zones.add(step.zone or o["start_timezone"] or run.case.series.zone)
        status, body, _ = await api.patch(path, host, json=_moved(o, step, run))
    elif step.kind == "retitle":
        status, body, _ = await api.patch(path, host, json={"title": step.title})
    elif step.kind == "cancel":
        status, body, _ = await api.post(path + "/cancel", host, json={"reason": "Ill"})
    elif step.kind == "restore":
        status, body, _ = await api.post(path + "/restore", host, json={})
    else:
        split = {"occurrence_id": o["occurrence_id"], **({"title": step.title} if step.title
                                                         else {})}
        status, body, _ = await api.post(f"/v1/events/{event_id}/split", host, json=split)
        if status == 201:
            run.events.append(body["id"])
    assert status in (200, 201), (step, o, body)
    return True


def _moved(o: Mapping[str, Any], step: Step, run: Run) -> dict[str, Any]:
    """The body of a move: the occurrence shifted by the step, its length kept or set."""
    if o["is_all_day"]:
        first = date.fromisoformat(o["start_date"]) + timedelta(days=step.days)
        days = step.length or (date.fromisoformat(o["end_date"]) -
                               date.fromisoformat(o["start_date"])).days
        return {"start_date": first.isoformat(),
                "end_date": (first + timedelta(days=days)).isoformat()}
    zone = step.zone or o["start_timezone"] or run.case.series.zone
    start = _instant(o["start_time"]) + timedelta(days=step.days, minutes=step.minutes)
    body = {"start_time": _wall(start, zone), "start_timezone": zone}
    length = timedelta(minutes=step.length) if step.length else \
        _instant(o["end_time"]) - _instant(o["start_time"]) if o["end_time"] else None
    if length is not None:
        body |= {"end_time": _wall(start + length, zone), "end_timezone": zone}
    return body


def _instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _wall(instant: datetime, zone: str) -> str:
    return instant.astimezone(ZoneInfo(zone)).strftime("%Y-%m-%dT%H:%M")


async def _occurrences(api: Api, host: User, event_id: str, case: Case) -> list[dict[str, Any]]:
    """Every occurrence of the event over the case's span, by start, cancelled ones
    too (`GET /v1/events/{id}/occurrences`, 62 days and a page at a time)."""
    first = datetime.combine(case.series.first - timedelta(days=5), datetime.min.time(), UTC)
    last = first + MAX_SPAN + timedelta(days=20)
    found: dict[str, dict[str, Any]] = {}
    while first < last:
        end = min(first + timedelta(days=_LISTED_DAYS), last)
        cursor = None
        while True:
            params = {"from": times.utc_text(first), "to": times.utc_text(end), "limit": "100",
                      **({"cursor": cursor} if cursor else {})}
            status, page, _ = await api.get(f"/v1/events/{event_id}/occurrences", host,
                                            params=params)
            assert status == 200, page
            found |= {o["occurrence_id"]: o for o in page["data"]}
            cursor = page["next_cursor"]
            if not page["has_more"]:
                break
        first = end
    return sorted(found.values(), key=lambda o: (o["start_time"], o["occurrence_id"]))


async def _subscribed(world: World, api: Api, user: User, profile_id: str, person: Any) -> str:
    """`user` subscribed to the profile with copies pushed to their CalDAV calendar,
    every copy made and pushed; the account's ID."""
    out = await asyncio.to_thread(connect, world, person)
    account, cal_id = out["account_id"], out["calendars"][0]["id"]
    await settled(world, account)
    status, sub, _ = await api.post("/v1/subscriptions", user, json={
        "subscription_type": "profile", "profile_id": profile_id,
        "external_calendar_ids": [cal_id]})
    assert status == 201, sub
    await _quiet(world, account)
    return str(account)


async def _quiet(world: World, account: str) -> None:
    """Wait until no job is queued or running: the subscription's sync, the pushes it
    queues (and their own retries), attendee mail."""
    deadline = time.monotonic() + _QUIET_SECONDS
    while world.server.call(world.server.db.fetchval(
            "SELECT count(*) FROM pgqueuer WHERE status IN ('queued', 'picked')")):
        assert time.monotonic() < deadline, "jobs still running"
        await asyncio.sleep(0.1)
    await settled(world, account)


# --- Reading every source ----------------------------------------------------------------


@dataclass
class Sources:
    """What each source gives, by UID (the agenda's copies mapped to their events)."""

    agenda: dict[str, list[Labelled]]
    busy: list[tuple[datetime, datetime]]
    readers: dict[str, dict[str, list[Labelled]]]


async def _read(world: World, session: aiohttp.ClientSession, api: Api, person: Any,
                profile_id: str, window: Window) -> Sources:
    async with session.get(f"{api.base}/v1/profiles/{profile_id}/events.ics") as r:
        assert r.status == 200
        feed = await r.read()
    copies = await _radicale(world, person, window)
    [by_icaljs] = await asyncio.to_thread(icaljs_occurrences, [feed], window, labelled=True)
    return Sources(
        agenda=await _agenda(world, api, person.user, window),
        busy=await _free_busy(api, person.user, window),
        readers={"ical.js (feed)": by_icaljs,
                 "recurring-ical-events (feed)": python_occurrences(feed, window, labelled=True),
                 "Radicale (pushed copy)": copies})


async def _agenda(world: World, api: Api, user: User, window: Window
                  ) -> dict[str, list[Labelled]]:
    """The subscriber's agenda over the window, a week at a time, by the UID of the
    event each copy is of."""
    sources = dict(world.server.call(world.server.db.fetch(
        "SELECT id, source_event_id FROM calendar_events WHERE calendar_id = $1",
        user.calendar_id)))
    found: dict[str, Labelled] = {}
    day = window.first_day
    while day < window.end_day:
        status, body, _ = await api.get("/v1/agenda", user, params={
            "date": day.isoformat(), "days": str(_AGENDA_DAYS), "timezone": "UTC",
            "calendar_ids": user.calendar_id})
        assert status == 200 and body["complete"], body
        for item in body["items"]:
            uid = sources[item["event_id"]] + "@kalends"
            found[item["occurrence_id"]] = (uid, *_labelled(item))
        day += timedelta(days=_AGENDA_DAYS)
    out: dict[str, list[Labelled]] = {}
    for uid, *one in found.values():
        out.setdefault(uid, []).append(tuple(one))
    return out


def _labelled(item: Mapping[str, Any]) -> Labelled:
    slot = item["occurrence_id"].rsplit(":", 1)[1]
    if item["is_all_day"]:
        return ("day", date.fromisoformat(item["start_date"]),
                date.fromisoformat(item["end_date"]), slot, item["title"])
    end = _instant(item["end"]) if item["end"] else None
    return ("timed", _instant(item["start"]), end, slot, item["title"])


async def _free_busy(api: Api, user: User, window: Window) -> list[tuple[datetime, datetime]]:
    """The subscriber's busy time over the window, 62 days at a time, merged."""
    busy = []
    start = window.start
    while start < window.end:
        end = min(start + timedelta(days=_FREE_BUSY_DAYS), window.end)
        status, body, _ = await api.get("/v1/free-busy", user, params={
            "start": times.utc_text(start), "end": times.utc_text(end)})
        assert status == 200 and body["complete"], body
        [me] = body["people"]
        busy += [(_instant(b["start"]), _instant(b["end"])) for b in me["busy"]
                 if b["status"] == "busy"]
        start = end
    return _merged(busy)


def _merged(intervals: Iterable[tuple[datetime, datetime]]) -> list[tuple[datetime, datetime]]:
    """Overlapping or touching intervals as one, in order."""
    out: list[tuple[datetime, datetime]] = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


_EXPAND = """<?xml version="1.0" encoding="utf-8"?>
<C:calendar-query xmlns:D="DAV:" xmlns:C="urn:ietf:params:xml:ns:caldav">
  <D:prop><C:calendar-data><C:expand start="{start}" end="{end}"/></C:calendar-data></D:prop>
  <C:filter><C:comp-filter name="VCALENDAR"><C:comp-filter name="VEVENT">
    <C:time-range start="{start}" end="{end}"/>
  </C:comp-filter></C:comp-filter></C:filter>
</C:calendar-query>"""


async def _radicale(world: World, person: Any, window: Window) -> dict[str, list[Labelled]]:
    """The pushed copies as Radicale expands them (`calendar-query` with `expand`):
    one VEVENT per occurrence, its RECURRENCE-ID the slot, by UID."""
    stamp = "%Y%m%dT%H%M%SZ"
    body = _EXPAND.format(start=(window.start - timedelta(days=3)).strftime(stamp),
                          end=(window.end + timedelta(days=3)).strftime(stamp))
    headers = {"Depth": "1", "Content-Type": "application/xml",
               "Authorization": aiohttp.encode_basic_auth(person.login, person.password)}
    async with aiohttp.ClientSession() as session, session.request(
            "REPORT", f"{world.radicale.url}/{person.login}/work/", data=body,
            headers=headers) as r:
        assert r.status == 207, await r.text()
        text = await r.text()
    found: dict[str, list[Labelled]] = {}
    data = ElementTree.fromstring(text).iter("{urn:ietf:params:xml:ns:caldav}calendar-data")
    for element in data:
        for vevent in icalendar.Calendar.from_ical(element.text or "").walk("VEVENT"):
            if str(vevent.get("STATUS", "")).upper() == "CANCELLED":
                continue
            found.setdefault(str(vevent["UID"]), []).append(_expanded(vevent))
    return found


def _expanded(vevent: Any) -> Labelled:
    start = vevent["DTSTART"].dt
    end = vevent["DTEND"].dt if "DTEND" in vevent else None
    original = vevent["RECURRENCE-ID"].dt if "RECURRENCE-ID" in vevent else start
    title = str(vevent.get("SUMMARY", ""))
    if not isinstance(start, datetime):
        return ("day", start, end, slot_of(original), title)
    return ("timed", _utc(start), _utc(end) if end is not None else None, slot_of(original),
            title)


def _utc(value: datetime) -> datetime:
    # Radicale writes expanded instances in UTC, with or without the Z.
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


# --- Comparing -------------------------------------------------------------------------


def _compare(run: Run, sources: Sources, window: Window, tally: Tally) -> None:
    uids = [f"{e}@kalends" for e in run.events]
    want = {uid: within(sources.agenda.get(uid, []), window) for uid in uids}
    tally.occurrences["agenda"] += sum(map(len, want.values()))
    for name, found in sources.readers.items():
        # ical.js and Radicale (vobject) place a wall time that a change of offset skips
        # or repeats with the offset after it, RFC 5545 before (tests/ical_readers.py).
        gaps = not name.startswith("recurring-ical-events")
        tally.occurrences[name] += sum(len(found.get(uid, [])) for uid in uids)
        for uid in uids:
            here = beside_changes(want[uid], run.zones, starts_too=gaps)
            got = beside_changes(within(found.get(uid, []), window), run.zones,
                                 starts_too=gaps)
            if got != here:
                tally.differ(name, run.case, _difference(got, here))
                break


def _difference(got: list[Any], want: list[Any]) -> str:
    return (f"only the reader: {[o for o in got if o not in want][:3]}; "
            f"only the agenda: {[o for o in want if o not in got][:3]}")


def _case_busy(run: Run, shown: Iterable[list[Labelled]], window: Window
               ) -> list[tuple[datetime, datetime]]:
    """The case's occurrences as busy time: timed ones as they are (points block
    nothing), all-day ones their dates' days on the event's own clock."""
    tz = ZoneInfo(run.case.series.zone)
    intervals = []
    for occurrences in shown:
        for kind, first, last, *_ in occurrences:
            if kind == "day":
                intervals.append((datetime.combine(first, datetime.min.time(), tz),
                                  datetime.combine(last, datetime.min.time(), tz)))
            elif last is not None and last > first:
                intervals.append((first, last))
    return [(max(s, window.start), min(e, window.end)) for s, e in _merged(intervals)]


def _compare_busy(runs: Sequence[Run], sources: Sources, window: Window, tally: Tally) -> None:
    """Free/busy must be exactly the agenda's occurrences of every case as busy time.
    A difference is the doing of the cases whose busy time meets it and whose
    occurrences the agenda and the feed (`recurring-ical-events`) do not agree on;
    else of every case whose busy time meets it."""
    feed = sources.readers["recurring-ical-events (feed)"]
    shown = {run.case.number: _case_busy(run, [sources.agenda.get(f"{e}@kalends", [])
                                               for e in run.events], window) for run in runs}
    read = {run.case.number: _case_busy(run, [feed.get(f"{e}@kalends", [])
                                              for e in run.events], window) for run in runs}
    want = _merged(i for intervals in shown.values() for i in intervals)
    for ws, we in [*_minus(want, sources.busy), *_minus(sources.busy, want)]:
        meeting = [run for run in runs
                   if any(s < we and e > ws for s, e in (*shown[run.case.number],
                                                         *read[run.case.number]))]
        disagreeing = [run for run in meeting
                       if shown[run.case.number] != read[run.case.number]]
        for run in disagreeing or meeting:
            tally.differ("free/busy", run.case, f"busy time differs in [{ws}, {we})")


def _minus(a: Sequence[tuple[datetime, datetime]], b: Sequence[tuple[datetime, datetime]]
           ) -> list[tuple[datetime, datetime]]:
    """The time in `a` (merged intervals) and not in `b` (merged intervals)."""
    out = []
    for start, end in a:
        for bs, be in b:
            if be <= start or bs >= end:
                continue
            if bs > start:
                out.append((start, bs))
            start = max(start, be)
        if start < end:
            out.append((start, end))
    return out
