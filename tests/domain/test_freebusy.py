"""Free/busy and meeting times (docs/api-choices.md, "Free/busy and meeting times") through REST:
an oracle built from each person's own agenda (`GET /v1/agenda`) minute by minute, exact slot
lists on DST days, visibility without an existence oracle, sources and warnings, errors,
and the SQL statement budget."""

from __future__ import annotations

import asyncio
import secrets
import time as clock
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import aiohttp
import pytest
from conftest import (
    Api,
    LiveServer,
    User,
    assert_error,
    insert_connected_calendar,
    new_profile,
    published,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from db import connected as connected_store
from domain import accounts, freebusy, ids
from domain.connected import components
from domain.connected.provider import Component

ZONES = ("Europe/Paris", "America/New_York", "Asia/Kolkata", "Australia/Adelaide",
         "America/St_Johns", "Australia/Lord_Howe", "UTC")
WEEKDAYS = ("MO", "TU", "WE", "TH", "FR", "SA", "SU")
TOP_KEYS = {"start", "end", "people", "sources", "warnings", "complete", "incomplete_reason"}
SLOT_KEYS = {"data", "unavailable", "time_zone", "warnings", "complete", "incomplete_reason"}
MINUTE = timedelta(minutes=1)
SYNC_SECONDS = 30


# ---------------------------------------------------------------------------
# Helpers


def today(zone: str = "UTC") -> date:
    return datetime.now(ZoneInfo(zone)).date()


def z(instant: datetime) -> str:
    return instant.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def midnight(day: date, zone: str = "UTC") -> datetime:
    """Local midnight of `day` in `zone` (none of ZONES changes its clocks at midnight)."""
    return datetime.combine(day, time(), ZoneInfo(zone)).astimezone(UTC)


def day_length(day: date, zone: str) -> timedelta:
    return midnight(day + timedelta(days=1), zone) - midnight(day, zone)


def changes(zone: str, first: int = -27, last: int = 362) -> tuple[date | None, date | None]:
    """The first days from `first` to `last` days from today that the clocks of
    `zone` spring forward and fall back (None: not in that range)."""
    short = long = None
    for n in range(first, last + 1):
        day = today(zone) + timedelta(days=n)
        length = day_length(day, zone)
        if length < timedelta(days=1) and short is None:
            short = day
        if length > timedelta(days=1) and long is None:
            long = day
    return short, long


async def free_busy(api: Api, user: User, **params: Any) -> dict[str, Any]:
    status, body, _ = await api.get("/v1/free-busy", user,
                                    params={k: str(v) for k, v in params.items()})
    return published(status, body, "getFreeBusy", TOP_KEYS)


async def meeting_times(api: Api, user: User, **fields: Any) -> dict[str, Any]:
    status, body, _ = await api.post("/v1/meeting-times", user, json=fields)
    return published(status, body, "findMeetingTimes", SLOT_KEYS)


async def cal_event(api: Api, user: User, **fields: Any) -> dict[str, Any]:
    status, created, _ = await api.post(f"/v1/calendars/{user.calendar_id}/events", user,
                                        json={"title": "Busy", **fields})
    assert status == 201, created
    return created  # type: ignore[no-any-return]


async def cal_event_on(api: Api, publisher: User, profile: dict[str, Any], title: str,
                       start: datetime, hours: int, **fields: Any) -> dict[str, Any]:
    status, event, _ = await api.post(f"/v1/profiles/{profile['id']}/events", publisher, json={
        "title": title, **timed(start, start + timedelta(hours=hours)), **fields})
    assert status == 201, event
    return event  # type: ignore[no-any-return]


def timed(start: datetime, end: datetime | None, zone: str = "UTC",
          end_zone: str | None = None) -> dict[str, Any]:
    """Times sent as their wall clock with its offset: any instant, gaps and folds too."""
    fields = {"start_time": start.astimezone(ZoneInfo(zone)).isoformat(),
              "start_timezone": zone}
    if end is not None:
        fields |= {"end_time": end.astimezone(ZoneInfo(end_zone or zone)).isoformat(),
                   "end_timezone": end_zone or zone}
    return fields


def member(live_server: LiveServer, of: User, *people: User) -> None:
    """`people` join `of`'s default organization."""
    for someone in people:
        live_server.admin(accounts.add_member, of.organization_id, someone.email, "member")


async def new_user(live_server: LiveServer, timezone: str | None = None) -> User:
    """`LiveServer.create_user` for code already running on the server's loop."""
    data = await accounts.create_user(
        live_server.db, f"user-{secrets.token_hex(6)}@example.com", None, timezone)
    return User(data["email"], data["api_key"], data["organization_id"], data["calendar_id"],
                data["consumer"])


def interval(start: datetime, end: datetime, status: str = "busy") -> dict[str, str]:
    return {"start": z(start), "end": z(end), "status": status}


async def copies_made(live_server: LiveServer, calendar_id: str, event_ids: list[str]) -> None:
    """Wait until the subscription jobs copied every one of `event_ids` into `calendar_id`."""
    deadline = clock.monotonic() + SYNC_SECONDS
    while await live_server.db.fetchval(
            "SELECT count(*) FROM calendar_events WHERE calendar_id = $1"
            " AND source_event_id = ANY($2::text[])", calendar_id, event_ids) < len(event_ids):
        assert clock.monotonic() < deadline, "subscription copies not made"
        await asyncio.sleep(0.05)


# ---------------------------------------------------------------------------
# The oracle: each person's agenda, minute by minute


@st.composite
def items(draw: st.DrawFn, span: int) -> dict[str, Any]:
    """An item near a window of `span` minutes: starting up to half a day before it."""
    kind = draw(st.sampled_from(["timed"] * 10 + ["all_day", "point"]))
    rule = draw(st.sampled_from([
        None, None, None, None, "FREQ=DAILY;COUNT=3", "FREQ=DAILY;INTERVAL=2",
        "FREQ=WEEKLY;BYDAY=MO,WE,FR", "FREQ=HOURLY;INTERVAL=7;COUNT=9"]))
    if kind == "all_day" and rule is not None and "HOURLY" in rule:
        rule = "FREQ=DAILY;COUNT=2"
    return {
        "kind": kind,
        "zone": draw(st.sampled_from(ZONES)),
        "end_zone": draw(st.sampled_from([None, None, "UTC", "Asia/Kolkata"])),
        "at": draw(st.integers(-144, span // 5)) * 5,
        "minutes": draw(st.sampled_from([5, 15, 30, 45, 60, 90, 120] if rule else
                                        [5, 15, 30, 45, 60, 90, 120, 180, 300, 600])),
        "days": draw(st.integers(1, 3)),
        "rule": rule,
        "transparent": draw(st.sampled_from([False, False, False, True])),
    }


@st.composite
def worlds(draw: st.DrawFn) -> dict[str, Any]:
    span = draw(st.integers(12 * 60, 4 * 1440))
    events = draw(st.lists(items(span), min_size=1, max_size=4))
    working_start = draw(st.integers(0, 60)) * 15
    return {
        "anchor": draw(st.integers(0, 10**6)),
        "zones": [draw(st.sampled_from(ZONES)) for _ in range(3)],
        "own": [draw(st.lists(items(span), min_size=2, max_size=6)) for _ in range(3)],
        "events": events,
        "cancelled": [draw(st.sampled_from([False, False, True])) for _ in events],
        "answers": [[draw(st.sampled_from(["going", "maybe", "maybe", "not_going", None]))
                     for _ in events] for _ in range(3)],
        "subscriber": draw(st.sampled_from([None, None, 0, 1, 2])),
        "window_start": draw(st.integers(0, 1439)),
        "window_minutes": span,
        "meeting": {
            "time_zone": draw(st.sampled_from(ZONES)),
            "start": working_start,
            "end": min(24 * 60, working_start + draw(st.integers(4, 96)) * 15),
            "days": draw(st.lists(st.sampled_from(WEEKDAYS), min_size=3, max_size=7,
                                  unique=True)),
            "duration_minutes": draw(st.sampled_from([5, 15, 30, 45, 60, 90, 150])),
            "step_minutes": draw(st.sampled_from([5, 10, 15, 30, 60])),
            "limit": draw(st.integers(3, 30)),
        },
    }


def anchors() -> list[date]:
    """Days just before DST changes in the zones generated, and two plain days: a
    window from one of them crosses (or not) a change of the clocks."""
    found = [today() + timedelta(days=40), today() + timedelta(days=150)]
    for zone in ("Europe/Paris", "America/New_York", "Australia/Lord_Howe",
                 "Australia/Adelaide", "America/St_Johns"):
        # Far enough from both ends of the allowed window for its agenda.
        found += [day - timedelta(days=1) for day in changes(zone, 5, 350) if day is not None]
    return found


def body_of(item: dict[str, Any], origin: datetime, title: str) -> dict[str, Any]:
    """The REST body of `item`, placed from the window's start `origin`."""
    body: dict[str, Any] = {"title": title,
                            "transparency": "transparent" if item["transparent"] else "opaque"}
    if item["rule"] is not None:
        body["recurrence_rule"] = item["rule"]
    start = origin + timedelta(minutes=item["at"])
    if item["kind"] == "all_day":
        first = start.astimezone(ZoneInfo(item["zone"])).date()
        return body | {"is_all_day": True, "start_date": str(first),
                       "end_date": str(first + timedelta(days=item["days"])),
                       "start_timezone": item["zone"]}
    end = None if item["kind"] == "point" else start + timedelta(minutes=item["minutes"])
    return body | timed(start, end, item["zone"], item["end_zone"])


@dataclass
class Minutes:
    """Minute by minute over [start, end): 0 free, 1 tentative, 2 busy."""

    start: datetime
    end: datetime
    marks: bytearray = field(init=False)

    def __post_init__(self) -> None:
        self.marks = bytearray((self.end - self.start) // MINUTE)

    def mark(self, start: datetime, end: datetime, value: int) -> None:
        first = max(0, (start - self.start) // MINUTE)
        last = min(len(self.marks), -((self.start - end) // MINUTE))
        for i in range(first, last):
            self.marks[i] = max(self.marks[i], value)

    def intervals(self) -> list[dict[str, str]]:
        out: list[dict[str, str]] = []
        i = 0
        while i < len(self.marks):
            j = i
            while j < len(self.marks) and self.marks[j] == self.marks[i]:
                j += 1
            if self.marks[i]:
                out.append(interval(self.start + i * MINUTE, self.start + j * MINUTE,
                                    "busy" if self.marks[i] == 2 else "tentative"))
            i = j
        return out


def occurrences(agenda_body: dict[str, Any], zones: dict[str, str]
                ) -> Iterator[tuple[str, datetime, datetime]]:
    """(title, start, end) of every agenda item that blocks time; all-day items on
    their dates' midnights in their own zone."""
    for item in agenda_body["items"]:
        if not item["busy"]:
            continue
        if item["is_all_day"]:
            zone = zones[item["title"]]
            yield (item["title"], midnight(date.fromisoformat(item["start_date"]), zone),
                   midnight(date.fromisoformat(item["end_date"]), zone))
        elif item["end"] is not None:
            yield (item["title"], datetime.fromisoformat(item["start"]),
                   datetime.fromisoformat(item["end"]))


async def agenda_of(api: Api, user: User, start: datetime, end: datetime) -> dict[str, Any]:
    """`user`'s own agenda, in UTC days, around [start, end) by two days each side."""
    first = (start - timedelta(days=2)).date()
    days = ((end + timedelta(days=2)).date() - first).days + 1
    status, body, _ = await api.get("/v1/agenda", user, params={
        "date": str(first), "days": str(days), "timezone": "UTC"})
    assert status == 200, body
    assert body["complete"], body["incomplete_reason"]
    return body  # type: ignore[no-any-return]


def expected_slots(blocked: Minutes, zone: str, meeting: dict[str, Any]) -> list[dict[str, str]]:
    """Every slot by brute force: wall clocks read minute by minute, each wall time's
    first instant; then the grid of each working day, kept where all its minutes are
    free and it ends by the working day's end and the window's."""
    tz = ZoneInfo(zone)
    minutes = [blocked.start - timedelta(days=2) + i * MINUTE
               for i in range(((blocked.end - blocked.start) // MINUTE) + 4 * 1440)]
    walls = [(m, m.astimezone(tz).replace(tzinfo=None)) for m in minutes]
    first: dict[datetime, datetime] = {}
    for m, wall in walls:
        first.setdefault(wall, m)
    opening = timedelta(minutes=meeting["start"])
    closing = timedelta(minutes=meeting["end"])
    step = timedelta(minutes=meeting["step_minutes"])
    length = timedelta(minutes=meeting["duration_minutes"])
    found = []
    day = blocked.start.astimezone(tz).date()
    while day <= blocked.end.astimezone(tz).date():
        if WEEKDAYS[day.weekday()] in meeting["days"]:
            wall = datetime.combine(day, time()) + opening
            last_wall = datetime.combine(day, time()) + closing
            close = next(m for m, w in walls if w >= last_wall)
            while wall < last_wall:
                start = first.get(wall)
                wall += step
                if start is None or start < blocked.start:
                    continue
                end = start + length
                if end > close or end > blocked.end:
                    continue
                i = (start - blocked.start) // MINUTE
                if any(blocked.marks[i:i + length // MINUTE]):
                    continue
                found.append(start)
        day += timedelta(days=1)
    found.sort()
    return [{"start": z(s), "end": z(s + length), "local_start": s.astimezone(tz).isoformat(),
             "local_end": (s + length).astimezone(tz).isoformat()}
            for s in found[:meeting["limit"]]]


async def _check_world(live: LiveServer, world: dict[str, Any]) -> None:
    chosen = anchors()
    anchor = chosen[world["anchor"] % len(chosen)]
    start = midnight(anchor) + timedelta(minutes=world["window_start"])
    end = start + timedelta(minutes=world["window_minutes"])
    async with aiohttp.ClientSession() as session:
        api = Api(session, live.url)
        people = [await new_user(live, zone) for zone in world["zones"]]
        caller, others = people[0], people[1:]
        stranger, publisher, mirror = [await new_user(live) for _ in range(3)]
        for someone in others:
            await accounts.add_member(live.db, caller.organization_id, someone.email, "member")
        zones: dict[str, str] = {}

        for n, (someone, own) in enumerate(zip(people, world["own"], strict=True)):
            for k, item in enumerate(own):
                title = f"P{n}-{k}"
                zones[title] = item["zone"]
                await cal_event(api, someone, **body_of(item, start, title))
        # A stranger's time is never anyone else's business.
        for item in world["own"][0]:
            await cal_event(api, stranger, **body_of(item, start, "S"))

        profile = await new_profile(api, publisher)
        created = []
        for k, item in enumerate(world["events"]):
            title = f"E{k}"
            zones[title] = item["zone"]
            status, event, _ = await api.post(f"/v1/profiles/{profile['id']}/events", publisher,
                                              json=body_of(item, start, title))
            assert status == 201, event
            created.append(event)
        answered: list[list[tuple[str, int]]] = [[] for _ in people]
        for n, someone in enumerate(people):
            for k, answer in enumerate(world["answers"][n]):
                if answer is None:
                    continue
                status, rsvp, _ = await api.post(f"/v1/events/{created[k]['id']}/rsvps",
                                                 someone, json={"status": answer})
                assert status == 201, rsvp
                if answer != "not_going":
                    answered[n].append((f"E{k}", 2 if answer == "going" else 1))
        for event, cancelled in zip(created, world["cancelled"], strict=True):
            if cancelled:
                status, body, _ = await api.post(f"/v1/events/{event['id']}/cancel", publisher)
                assert status == 200, body
        subscribers = [mirror] + ([people[world["subscriber"]]]
                                  if world["subscriber"] is not None else [])
        for someone in subscribers if created else []:
            status, sub, _ = await api.post("/v1/subscriptions", someone, json={
                "subscription_type": "profile", "profile_id": profile["id"]})
            assert status == 201, sub
            await copies_made(live, someone.calendar_id, [e["id"] for e in created])

        ghost = f"ghost-{ids.new_id('usr')[-8:]}@example.com"
        emails = [others[0].email, stranger.email, others[1].email.upper(), ghost]
        body = await free_busy(api, caller, start=z(start), end=z(end), emails=",".join(emails))

        # The oracle: each person's own agenda, and the profile's through the mirror.
        published = await agenda_of(api, mirror, start, end)
        expected = []
        for n, someone in enumerate(people):
            marks = Minutes(start, end)
            own_agenda = await agenda_of(api, someone, start, end)
            for _, s, e in occurrences(own_agenda, zones):
                marks.mark(s, e, 2)
            for title, value in answered[n]:
                for t, s, e in occurrences(published, zones):
                    if t == title:
                        marks.mark(s, e, value)
            expected.append(marks)
            if n == 0:
                assert body["sources"] == own_agenda["sources"]
                assert body["warnings"] == own_agenda["warnings"] == []
        assert body["start"] == z(start) and body["end"] == z(end)
        assert body["complete"] is True and body["incomplete_reason"] is None
        hidden = {"busy": [], "error": "not_visible"}
        assert body["people"] == [
            {"email": caller.email, "busy": expected[0].intervals(), "error": None},
            {"email": others[0].email, "busy": expected[1].intervals(), "error": None},
            {"email": stranger.email, **hidden},
            {"email": others[1].email.upper(), "busy": expected[2].intervals(), "error": None},
            {"email": ghost, **hidden},
        ]

        # Meeting times: every slot free for everyone visible, none missing before it.
        meeting = world["meeting"]
        blocked = Minutes(start, end)
        for marks in expected:
            for i, value in enumerate(marks.marks):
                blocked.marks[i] = max(blocked.marks[i], value)
        clock_text = {"start": f"{meeting['start'] // 60:02d}:{meeting['start'] % 60:02d}",
                      "end": f"{meeting['end'] // 60:02d}:{meeting['end'] % 60:02d}"}
        found = await meeting_times(
            api, caller, start=z(start), end=z(end), emails=emails,
            time_zone=meeting["time_zone"], working_hours={**clock_text, "days": meeting["days"]},
            duration_minutes=meeting["duration_minutes"], step_minutes=meeting["step_minutes"],
            limit=meeting["limit"])
        assert found["unavailable"] == [stranger.email, ghost]
        assert found["time_zone"] == meeting["time_zone"]
        assert found["data"] == expected_slots(blocked, meeting["time_zone"], meeting)


@pytest.mark.slow
@given(worlds())
@settings(max_examples=30, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                 HealthCheck.data_too_large])
def test_free_busy_and_slots_match_each_persons_agenda_minute_by_minute(
    live_server: LiveServer, world: dict[str, Any],
) -> None:
    live_server.call(_check_world(live_server, world))


# ---------------------------------------------------------------------------
# Merging and clipping


async def test_intervals_are_merged_clipped_and_busy_wins_over_tentative(
    api: Api, live_server: LiveServer, make_user: Any,
) -> None:
    caller = await make_user(timezone="Asia/Kolkata")
    publisher = await make_user()
    day = today() + timedelta(days=20)
    at = midnight(day)
    # Touching, overlapping, and running past either end of the window.
    await cal_event(api, caller, **timed(at + timedelta(hours=8), at + timedelta(hours=9)))
    await cal_event(api, caller, **timed(at + timedelta(hours=9), at + timedelta(hours=10)))
    await cal_event(api, caller, **timed(at + timedelta(hours=9, minutes=30),
                                         at + timedelta(hours=11)))
    await cal_event(api, caller, **timed(at - timedelta(hours=2), at + timedelta(hours=1)))
    await cal_event(api, caller, **timed(at + timedelta(hours=23), at + timedelta(hours=26)))
    # Takes no time: transparent, or a point.
    await cal_event(api, caller, transparency="transparent",
                    **timed(at + timedelta(hours=13), at + timedelta(hours=14)))
    await cal_event(api, caller, **timed(at + timedelta(hours=15), None))
    # Maybe: tentative where nothing busy is, and cut around busy time.
    profile = await new_profile(api, publisher)
    for title, start, hours, answer in (("Talk", 10, 3, "maybe"), ("Party", 18, 2, "maybe"),
                                        ("Dinner", 19, 2, "going")):
        event = await cal_event_on(api, publisher, profile, title,
                                   at + timedelta(hours=start), hours)
        status, rsvp, _ = await api.post(f"/v1/events/{event['id']}/rsvps", caller,
                                         json={"status": answer})
        assert status == 201, rsvp
    body = await free_busy(api, caller, start=z(at), end=z(at + timedelta(days=1)))
    assert body["people"] == [{"email": caller.email, "error": None, "busy": [
        interval(at, at + timedelta(hours=1)),
        interval(at + timedelta(hours=8), at + timedelta(hours=11)),
        interval(at + timedelta(hours=11), at + timedelta(hours=13), "tentative"),
        interval(at + timedelta(hours=18), at + timedelta(hours=19), "tentative"),
        interval(at + timedelta(hours=19), at + timedelta(hours=21)),
        interval(at + timedelta(hours=23), at + timedelta(days=1)),
    ]}]
    # Offsets in the window are instants like any other.
    body2 = await free_busy(api, caller, start=f"{day}T05:30:00+05:30",
                            end=f"{day + timedelta(days=1)}T05:30:00+05:30")
    assert body2["people"] == body["people"] and body2["start"] == z(at)


async def test_all_day_items_take_their_local_days_in_their_own_zone(
    api: Api, make_user: Any,
) -> None:
    caller = await make_user(timezone="America/New_York")
    day = today() + timedelta(days=30)
    await cal_event(api, caller, is_all_day=True, start_date=str(day),
                    end_date=str(day + timedelta(days=2)), start_timezone="Australia/Adelaide")
    await cal_event(api, caller, is_all_day=True, start_date=str(day + timedelta(days=4)),
                    start_timezone="America/St_Johns")
    body = await free_busy(api, caller, start=z(midnight(day) - timedelta(days=1)),
                           end=z(midnight(day) + timedelta(days=6)))
    assert body["people"][0]["busy"] == [
        interval(midnight(day, "Australia/Adelaide"),
                 midnight(day + timedelta(days=2), "Australia/Adelaide")),
        interval(midnight(day + timedelta(days=4), "America/St_Johns"),
                 midnight(day + timedelta(days=5), "America/St_Johns")),
    ]


async def test_cancelled_and_declined_events_take_no_time(
    api: Api, make_user: Any,
) -> None:
    caller, publisher = await make_user(), await make_user()
    at = midnight(today() + timedelta(days=12))
    profile = await new_profile(api, publisher)
    kept = await cal_event_on(api, publisher, profile, "Kept", at + timedelta(hours=9), 1)
    called_off = await cal_event_on(api, publisher, profile, "Off", at + timedelta(hours=11), 1)
    declined = await cal_event_on(api, publisher, profile, "No", at + timedelta(hours=13), 1)
    see_through = await cal_event_on(api, publisher, profile, "Free", at + timedelta(hours=15),
                                     1, transparency="transparent")
    for event, answer in ((kept, "going"), (called_off, "going"), (declined, "not_going"),
                          (see_through, "going")):
        status, rsvp, _ = await api.post(f"/v1/events/{event['id']}/rsvps", caller,
                                         json={"status": answer})
        assert status == 201, rsvp
    # An answer given for a guest is theirs, not the caller's.
    guest = await cal_event_on(api, publisher, profile, "Guest", at + timedelta(hours=17), 1)
    status, rsvp, _ = await api.post(f"/v1/events/{guest['id']}/rsvps", caller, json={
        "status": "going", "attendee_email": "guest@example.com"})
    assert status == 201, rsvp
    status, body, _ = await api.post(f"/v1/events/{called_off['id']}/cancel", publisher)
    assert status == 200, body
    body = await free_busy(api, caller, start=z(at), end=z(at + timedelta(days=1)))
    assert body["people"][0]["busy"] == [interval(at + timedelta(hours=9),
                                                  at + timedelta(hours=10))]


async def test_expansion_bounded_as_the_agenda_bounds_it_is_said(
    api: Api, live_server: LiveServer, make_user: Any,
) -> None:
    caller = await make_user()
    day = today() + timedelta(days=6)
    at = midnight(day)
    # More than the agenda's 500 items of one event in the window: free/busy takes all
    # of them (its bound is 10,000 occurrences a person, not the agenda's page).
    await cal_event(api, caller, recurrence_rule="FREQ=HOURLY;INTERVAL=2",
                    **timed(at, at + timedelta(minutes=30)))
    body = await free_busy(api, caller, start=z(at), end=z(at + timedelta(days=50)))
    assert (body["complete"], body["incomplete_reason"]) == (True, None)
    assert len(body["people"][0]["busy"]) == 600
    # A stored rule that no longer expands is left out, and said (it outranks the cut).
    broken = await cal_event(api, caller, recurrence_rule="FREQ=DAILY",
                             **timed(at + timedelta(hours=1), at + timedelta(hours=2)))
    live_server.call(live_server.db.execute(
        "UPDATE calendar_events SET recurrence_rule = 'FREQ=DAILY;RRULE:FREQ=WEEKLY'"
        " WHERE id = $1", broken["id"]))
    body = await free_busy(api, caller, start=z(at), end=z(at + timedelta(days=1)))
    assert (body["complete"], body["incomplete_reason"]) == (False, "expansion_limit")
    assert len(body["people"][0]["busy"]) == 12
    status, agenda, _ = await api.get("/v1/agenda", caller, params={"date": str(day), "days": "1"})
    assert status == 200
    assert (agenda["complete"], agenda["incomplete_reason"]) == (False, "expansion_limit")


# ---------------------------------------------------------------------------
# Meeting times on the days the clocks change


async def _dst_slots(api: Api, user: User, zone: str, day: date, opening: str, closing: str,
                     step: int, minutes: int) -> list[str]:
    body = await meeting_times(
        api, user, start=z(midnight(day, zone)), end=z(midnight(day + timedelta(days=1), zone)),
        duration_minutes=minutes, step_minutes=step, time_zone=zone, limit=50,
        working_hours={"start": opening, "end": closing, "days": [WEEKDAYS[day.weekday()]]})
    assert body["time_zone"] == zone
    for slot in body["data"]:
        start, end = (datetime.fromisoformat(slot[k]) for k in ("start", "end"))
        assert end - start == timedelta(minutes=minutes)
        assert datetime.fromisoformat(slot["local_start"]) == start
        assert datetime.fromisoformat(slot["local_end"]) == end
    return [slot["local_start"].removeprefix(f"{day}T") for slot in body["data"]]


@pytest.mark.parametrize("zone", ["Europe/Paris", "America/New_York", "Australia/Lord_Howe"])
async def test_slots_on_the_days_the_clocks_change(api: Api, make_user: Any, zone: str) -> None:
    user = await make_user()
    spring, autumn = changes(zone)
    assert spring is not None and autumn is not None
    if zone == "Europe/Paris":  # 02:00 -> 03:00, then 03:00 -> 02:00
        assert await _dst_slots(api, user, zone, spring, "01:00", "05:00", 30, 60) == [
            "01:00:00+01:00", "01:30:00+01:00", "03:00:00+02:00", "03:30:00+02:00",
            "04:00:00+02:00"]
        assert await _dst_slots(api, user, zone, autumn, "01:00", "05:00", 30, 60) == [
            "01:00:00+02:00", "01:30:00+02:00", "02:00:00+02:00", "02:30:00+02:00",
            "03:00:00+01:00", "03:30:00+01:00", "04:00:00+01:00"]
    elif zone == "America/New_York":  # 02:00 -> 03:00, then 02:00 -> 01:00
        assert await _dst_slots(api, user, zone, spring, "00:00", "04:00", 30, 30) == [
            "00:00:00-05:00", "00:30:00-05:00", "01:00:00-05:00", "01:30:00-05:00",
            "03:00:00-04:00", "03:30:00-04:00"]
        assert await _dst_slots(api, user, zone, autumn, "00:00", "04:00", 30, 30) == [
            "00:00:00-04:00", "00:30:00-04:00", "01:00:00-04:00", "01:30:00-04:00",
            "02:00:00-05:00", "02:30:00-05:00", "03:00:00-05:00", "03:30:00-05:00"]
        # The 25-hour day: a slot of two hours across the repeated hour.
        assert await _dst_slots(api, user, zone, autumn, "00:00", "03:00", 60, 120) == [
            "00:00:00-04:00", "01:00:00-04:00"]
    else:  # half an hour: 02:00 -> 02:30 in October, 02:00 -> 01:30 in April
        assert await _dst_slots(api, user, zone, spring, "01:00", "04:00", 15, 30) == [
            "01:00:00+10:30", "01:15:00+10:30", "01:30:00+10:30", "01:45:00+10:30",
            "02:30:00+11:00", "02:45:00+11:00", "03:00:00+11:00", "03:15:00+11:00",
            "03:30:00+11:00"]
        assert await _dst_slots(api, user, zone, autumn, "01:00", "03:00", 15, 30) == [
            "01:00:00+11:00", "01:15:00+11:00", "01:30:00+11:00", "01:45:00+11:00",
            "02:00:00+10:30", "02:15:00+10:30", "02:30:00+10:30"]
    # A working day ending inside the skipped hour ends when the clocks jump it.
    if zone == "Europe/Paris":
        assert await _dst_slots(api, user, zone, spring, "01:00", "02:30", 30, 30) == [
            "01:00:00+01:00", "01:30:00+01:00"]


async def test_slots_skip_busy_time_and_keep_to_the_window_and_limit(
    api: Api, live_server: LiveServer, make_user: Any,
) -> None:
    caller, colleague = await make_user(timezone="Europe/Paris"), await make_user()
    member(live_server, caller, colleague)
    monday = today("Europe/Paris") + timedelta(days=14)
    monday -= timedelta(days=monday.weekday())
    paris = ZoneInfo("Europe/Paris")

    def local(day: date, clock: str) -> datetime:
        return datetime.combine(day, time.fromisoformat(clock), paris).astimezone(UTC)

    await cal_event(api, caller, **timed(local(monday, "09:00"), local(monday, "10:15")))
    await cal_event(api, colleague, **timed(local(monday, "10:30"), local(monday, "12:00")))
    body = await meeting_times(api, caller, start=z(local(monday, "00:00")),
                               end=z(local(monday + timedelta(days=7), "00:00")),
                               emails=[colleague.email], duration_minutes=30, limit=3)
    assert body["time_zone"] == "Europe/Paris"  # the caller's saved zone
    assert body["data"] == [
        {"start": z(local(monday, c)), "end": z(local(monday, c) + timedelta(minutes=30)),
         "local_start": local(monday, c).astimezone(paris).isoformat(),
         "local_end": (local(monday, c) + timedelta(minutes=30)).astimezone(paris).isoformat()}
        for c in ("12:00", "12:30", "13:00")]
    # From Saturday 16:45 to Monday 10:00, in UTC, whole hours round the clock.
    saturday = monday + timedelta(days=5)
    body = await meeting_times(api, caller, start=z(midnight(saturday) + timedelta(hours=16.75)),
                               end=z(midnight(saturday + timedelta(days=2)) + timedelta(hours=10)),
                               duration_minutes=60, step_minutes=60, time_zone="UTC",
                               working_hours={"start": "00:00", "end": "24:00",
                                              "days": ["SA", "SU", "MO"]}, limit=50)
    starts = [s["start"] for s in body["data"]]
    assert starts[0] == z(midnight(saturday) + timedelta(hours=17))
    assert starts[-1] == z(midnight(saturday + timedelta(days=2)) + timedelta(hours=9))
    assert len(starts) == 7 + 24 + 10 and body["time_zone"] == "UTC"
    # The limit keeps the earliest.
    body = await meeting_times(api, caller, start=z(midnight(saturday)),
                               end=z(midnight(saturday + timedelta(days=2))),
                               duration_minutes=60, step_minutes=60, time_zone="UTC",
                               working_hours={"start": "00:00", "end": "24:00",
                                              "days": ["SA", "SU"]}, limit=2)
    assert [s["start"] for s in body["data"]] == [
        z(midnight(saturday)), z(midnight(saturday) + timedelta(hours=1))]


# ---------------------------------------------------------------------------
# Who may see whom


async def test_strangers_and_unknown_addresses_get_the_same_bytes(
    api: Api, live_server: LiveServer, make_user: Any,
) -> None:
    caller = await make_user()
    day = today() + timedelta(days=9)
    address = f"later-{ids.new_id('usr')[-10:]}@example.com"
    query = {"start": f"{day}T00:00:00Z", "end": f"{day}T12:00:00Z", "emails": address}

    async def raw() -> bytes:
        async with aiohttp.ClientSession() as session, session.get(
                f"{live_server.url}/v1/free-busy", params=query, headers=caller.headers) as r:
            assert r.status == 200
            return await r.read()

    before = await raw()  # no such user
    stranger = await make_user(address, timezone="Asia/Kolkata")
    await cal_event(api, stranger, **timed(midnight(day) + timedelta(hours=2),
                                           midnight(day) + timedelta(hours=3)))
    assert await raw() == before  # a user now, sharing no organization with the caller
    assert b'"busy":[],"error":"not_visible"' in before
    meeting = {"start": query["start"], "end": query["end"], "duration_minutes": 30,
               "emails": [address], "working_hours": {"days": list(WEEKDAYS)}}
    status, found, _ = await api.post("/v1/meeting-times", caller, json=meeting)
    assert status == 200 and found["unavailable"] == [address], found
    # The slots reflect only the others, and the answer says so.
    assert (found["complete"], found["incomplete_reason"]) == (False, "people_unavailable")
    # Sharing an organization makes them visible (either way round).
    member(live_server, stranger, caller)
    body = await free_busy(api, caller, **query)
    assert body["people"][1] == {"email": address, "error": None, "busy": [
        interval(midnight(day) + timedelta(hours=2), midnight(day) + timedelta(hours=3))]}
    status, found, _ = await api.post("/v1/meeting-times", caller, json=meeting)
    assert found["unavailable"] == []
    assert (found["complete"], found["incomplete_reason"]) == (True, None)
    assert z(midnight(day) + timedelta(hours=2)) not in [s["start"] for s in found["data"]]


async def test_emails_are_answered_once_each_in_the_order_given(
    api: Api, live_server: LiveServer, make_user: Any,
) -> None:
    caller, ann, bob = await make_user(), await make_user(), await make_user()
    member(live_server, caller, ann, bob)
    day = today() + timedelta(days=3)
    emails = [bob.email, ann.email.upper(), caller.email.upper(), "x@example.com", bob.email,
              "X@EXAMPLE.COM"]
    body = await free_busy(api, caller, start=f"{day}T00:00:00Z", end=f"{day}T01:00:00Z",
                           emails=",".join(emails))
    assert [(p["email"], p["error"]) for p in body["people"]] == [
        (caller.email, None), (bob.email, None), (ann.email.upper(), None),
        ("x@example.com", "not_visible")]
    # An empty list is nobody else.
    body = await free_busy(api, caller, start=f"{day}T00:00:00Z", end=f"{day}T01:00:00Z",
                           emails="")
    assert [p["email"] for p in body["people"]] == [caller.email]


# ---------------------------------------------------------------------------
# Sources: the caller's calendars as the agenda lists them, and stale ones


def _put_external(live_server: LiveServer, calendar_id: str, *found: Component) -> None:
    rows = []
    for c in found:
        span = components.span(c)
        rows.append({
            "id": ids.new_id("xcev"), "remote_key": c.uid, "etag": None, "uid": c.uid,
            "recurrence_key": components.recurrence_key(c), "title": c.title,
            "description": None, "location": None, "cancelled": c.cancelled,
            "transparent": c.transparent, "times": components.times_json(c),
            "span_start": span[0], "span_end": span[1],
        })

    async def put() -> None:
        async with live_server.db.transaction() as tx:
            await connected_store.put_events(tx, calendar_id, rows)

    live_server.call(put())


async def test_connected_calendars_count_and_stale_ones_are_said(
    api: Api, live_server: LiveServer, make_user: Any,
) -> None:
    caller = await make_user(timezone="America/St_Johns")
    colleague = await make_user(timezone="Asia/Kolkata")
    member(live_server, caller, colleague)
    ids_of = {u.email: live_server.call(live_server.db.fetchval(
        "SELECT id FROM users WHERE email = $1", u.email)) for u in (caller, colleague)}
    mine = insert_connected_calendar(live_server, ids_of[caller.email], "Work")
    theirs = insert_connected_calendar(live_server, ids_of[colleague.email], "Theirs")
    # Synced long ago: stale, yet what was synced still counts.
    live_server.call(live_server.db.execute(
        "UPDATE external_calendars SET last_success_at = now() - interval '2 days'"
        " WHERE id = ANY($1::text[])", [mine, theirs]))
    day = today() + timedelta(days=25)
    paris = "Europe/Paris"
    wall = datetime.combine(day, time(9))
    _put_external(
        live_server, mine,
        # Daily at 09:00 Paris, the second day taken out, the third moved to 14:00.
        Component(uid="daily", start=wall, zone=paris, end=wall + timedelta(hours=1),
                  end_zone=paris, title="Daily", rrule="FREQ=DAILY;COUNT=4",
                  exdates=(wall + timedelta(days=1),)),
        Component(uid="daily", start=wall + timedelta(days=2, hours=5), zone=paris,
                  end=wall + timedelta(days=2, hours=6), end_zone=paris, title="Moved",
                  recurrence_id=wall + timedelta(days=2)),
        Component(uid="see-through", start=wall, zone=paris, end=wall + timedelta(hours=8),
                  end_zone=paris, title="Free", transparent=True),
        Component(uid="gone", start=wall, zone=paris, end=wall + timedelta(hours=8),
                  end_zone=paris, title="Off", cancelled=True),
        # A floating date: the caller's own days.
        Component(uid="holiday", start=day + timedelta(days=5), title="Holiday"),
    )
    _put_external(live_server, theirs,
                  Component(uid="floating", start=wall, end=wall + timedelta(hours=1),
                            title="Floating"))
    start = midnight(day) - timedelta(hours=12)
    end = midnight(day + timedelta(days=7))
    body = await free_busy(api, caller, start=z(start), end=z(end), emails=colleague.email)
    status, agenda, _ = await api.get("/v1/agenda", caller, params={
        "date": str(day - timedelta(days=1)), "days": "8"})
    assert status == 200
    assert body["sources"] == agenda["sources"] and body["warnings"] == agenda["warnings"]
    assert [(s["calendar_id"], s["status"]) for s in body["sources"]] == [
        (caller.calendar_id, "ok"), (mine, "warning")]
    assert [(w["calendar_id"], w["code"]) for w in body["warnings"]] == [(mine, "sync_stale")]
    tz = ZoneInfo(paris)

    def paris_at(d: date, hours: int) -> datetime:
        return datetime.combine(d, time(hours), tz).astimezone(UTC)

    assert body["people"][0]["busy"] == [
        interval(paris_at(day, 9), paris_at(day, 10)),
        interval(paris_at(day + timedelta(days=2), 14), paris_at(day + timedelta(days=2), 15)),
        interval(paris_at(day + timedelta(days=3), 9), paris_at(day + timedelta(days=3), 10)),
        interval(midnight(day + timedelta(days=5), "America/St_Johns"),
                 midnight(day + timedelta(days=6), "America/St_Johns")),
    ]
    # Someone else's stale calendar counts for them, on their clock, and is not listed.
    kolkata = datetime.combine(day, time(9), ZoneInfo("Asia/Kolkata")).astimezone(UTC)
    assert body["people"][1]["busy"] == [interval(kolkata, kolkata + timedelta(hours=1))]
    assert theirs not in str(body)
    # Meeting times say the same.
    found = await meeting_times(api, caller, start=z(start), end=z(end), duration_minutes=30)
    assert found["warnings"] == body["warnings"]


# ---------------------------------------------------------------------------
# Errors


async def test_errors_name_their_parameter(api: Api, user: User) -> None:
    day = today() + timedelta(days=5)
    ok = {"start": f"{day}T00:00:00Z", "end": f"{day}T08:00:00Z"}

    async def refused(params: dict[str, str], code: str, param: str | None) -> dict[str, Any]:
        status, body, _ = await api.get("/v1/free-busy", user, params=params)
        return assert_error(status, body, 400, code, param)

    for bad in ("tomorrow", f"{day}T00:00:00", f"{day}T25:00:00Z", f"{day.year}-02-30T00:00Z",
                f"{day}T00:00:00+24:00"):
        error = await refused({**ok, "start": bad}, "invalid_field", "start")
        assert error["details"] == {"value": bad}
    await refused({**ok, "end": ok["start"]}, "invalid_time_range", "end")
    error = await refused({**ok, "end": f"{day + timedelta(days=62)}T00:00:01Z"},
                          "invalid_time_range", "end")
    assert error["details"] == {"start": ok["start"],
                                "end": f"{day + timedelta(days=62)}T00:00:01Z"}
    await free_busy(api, user, start=ok["start"], end=f"{day + timedelta(days=62)}T00:00:00Z")
    error = await refused({"start": f"{today() - timedelta(days=31)}T00:00:00Z",
                           "end": ok["end"]}, "agenda_window_out_of_range", None)
    assert error["details"] == {"start": f"{today() - timedelta(days=30)}T00:00:00Z",
                                "end": f"{today() + timedelta(days=365)}T00:00:00Z"}
    await refused({"start": f"{today() + timedelta(days=364)}T00:00:00Z",
                   "end": f"{today() + timedelta(days=365)}T00:00:01Z"},
                  "agenda_window_out_of_range", None)
    for emails in ("ann", "a@b.c,,", ",".join(f"p{i}@example.com" for i in range(21))):
        await refused({**ok, "emails": emails}, "invalid_field", "emails")
    await refused({**ok, "calendar_ids": "cal_1"}, "invalid_id", "calendar_ids")
    status, body, _ = await api.get("/v1/free-busy", user,
                                    params={**ok, "calendar_ids": ids.new_id("cal")})
    assert_error(status, body, 404, "resource_not_found", "calendar_ids")
    await refused({"end": ok["end"]}, "invalid_query_parameter", "start")
    await refused({**ok, "bogus": "1"}, "invalid_query_parameter", "bogus")

    meeting = {**ok, "duration_minutes": 30}

    async def refused_body(fields: dict[str, Any], code: str, param: str) -> dict[str, Any]:
        status, body, _ = await api.post("/v1/meeting-times", user, json=fields)
        return assert_error(status, body, 400, code, param)

    for fields, code, param in (
        ({**meeting, "duration_minutes": 4}, "invalid_field", "duration_minutes"),
        ({**meeting, "duration_minutes": 481}, "invalid_field", "duration_minutes"),
        ({**meeting, "step_minutes": 20}, "invalid_field", "step_minutes"),
        ({**meeting, "limit": 51}, "invalid_field", "limit"),
        ({**meeting, "time_zone": "Mars/Olympus"}, "invalid_field", "time_zone"),
        ({**meeting, "start": "soon"}, "invalid_field", "start"),
        ({**meeting, "emails": "a@b.cd"}, "invalid_field", "emails"),
        ({**meeting, "emails": ["nobody"]}, "invalid_field", "emails"),
        ({**meeting, "working_hours": {"days": ["XX"]}}, "invalid_field", "working_hours.days.0"),
        ({**meeting, "working_hours": {"days": []}}, "invalid_field", "working_hours.days"),
        ({**meeting, "working_hours": {"days": ["MO", "MO"]}}, "invalid_field",
         "working_hours.days"),
        ({**meeting, "working_hours": {"start": "9am"}}, "invalid_field", "working_hours.start"),
        ({**meeting, "working_hours": {"start": "24:00"}}, "invalid_field",
         "working_hours.start"),
        ({**meeting, "working_hours": {"end": "17:60"}}, "invalid_field", "working_hours.end"),
        ({**meeting, "working_hours": {"start": "17:00", "end": "09:00"}}, "invalid_time_range",
         "working_hours.end"),
        ({**meeting, "working_hours": {"lunch": "12:00"}}, "unknown_field",
         "working_hours.lunch"),
        ({**meeting, "colour": "red"}, "unknown_field", "colour"),
        ({"start": ok["start"], "end": ok["end"]}, "missing_field", "duration_minutes"),
        ({**meeting, "end": ok["start"]}, "invalid_time_range", "end"),
    ):
        await refused_body(fields, code, param)
    await meeting_times(api, user, **meeting, working_hours={"start": "22:00", "end": "24:00"})


# ---------------------------------------------------------------------------
# Cost


async def test_a_constant_number_of_sql_statements(
    api: Api, live_server: LiveServer, make_user: Any,
) -> None:
    caller = await make_user()
    people = [await make_user() for _ in range(5)]
    member(live_server, caller, *people)
    day = today() + timedelta(days=7)
    publisher = await make_user()
    profile = await new_profile(api, publisher)
    window = {"start": f"{day}T00:00:00Z", "end": f"{day + timedelta(days=7)}T00:00:00Z"}

    async def statements(**params: Any) -> int:
        before = live_server.query_count
        await free_busy(api, caller, **window, **params)
        return live_server.query_count - before

    async def slot_statements(emails: list[str]) -> int:
        before = live_server.query_count
        await meeting_times(api, caller, **window, emails=emails, duration_minutes=30)
        return live_server.query_count - before

    # Authentication, calendars, their events, everyone's answers; and who is visible.
    assert await statements() == 4
    assert await statements(emails=people[0].email) == 5
    for n, someone in enumerate([caller, *people]):
        for i in range(6):
            start = midnight(day) + timedelta(hours=n + i * 7)
            await cal_event(api, someone, recurrence_rule="FREQ=DAILY" if i % 3 == 0 else None,
                            **timed(start, start + timedelta(minutes=45)))
        event = await cal_event_on(api, publisher, profile, f"E{n}",
                                   midnight(day) + timedelta(hours=12 + n), 1)
        status, _, _ = await api.post(f"/v1/events/{event['id']}/rsvps", someone,
                                      json={"status": "maybe"})
        assert status == 201
    everyone = ",".join(p.email for p in people)
    assert await statements(emails=people[0].email) == 5
    assert await statements(emails=everyone) == 5
    assert await slot_statements([p.email for p in people]) == 5
    # A connected calendar adds one read, whoever's and however many.
    user_id = live_server.call(live_server.db.fetchval(
        "SELECT id FROM users WHERE email = $1", people[2].email))
    insert_connected_calendar(live_server, user_id)
    assert await statements(emails=everyone) == 6
    # Chosen calendars are one more read of the caller's.
    assert await statements(emails=everyone, calendar_ids=caller.calendar_id) == 7
    body = await free_busy(api, caller, **window, emails=everyone)
    assert all(len(p["busy"]) > 6 for p in body["people"])


async def test_needs_an_api_key(api: Api) -> None:
    status, body, _ = await api.get("/v1/free-busy", None, params={"start": "x", "end": "y"})
    assert_error(status, body, 401, "not_authenticated")


async def test_graphql_answers_alike(api: Api, user: User) -> None:
    day = today() + timedelta(days=4)
    await cal_event(api, user, **timed(midnight(day) + timedelta(hours=9),
                                       midnight(day) + timedelta(hours=10)))
    query = """query($s: String!, $e: String!, $in: MeetingTimesInput!) {
      free_busy(start: $s, end: $e) { people { email busy { start end status } error } }
      meeting_times(input: $in) { data { start } time_zone }
    }"""
    meeting: dict[str, Any] = {"start": f"{day}T00:00:00Z", "end": f"{day}T12:00:00Z",
                               "duration_minutes": 60, "limit": 2,
                               "working_hours": {"start": "08:00", "days": list(WEEKDAYS)}}
    variables = {"s": f"{day}T00:00:00Z", "e": f"{day}T12:00:00Z", "in": meeting}
    status, body, _ = await api.post("/graphql", user, json={"query": query,
                                                            "variables": variables})
    assert status == 200 and "errors" not in body, body
    assert body["data"]["free_busy"]["people"][0]["busy"] == [
        interval(midnight(day) + timedelta(hours=9), midnight(day) + timedelta(hours=10))]
    assert body["data"]["meeting_times"] == {"time_zone": "UTC", "data": [
        {"start": f"{day}T08:00:00Z"}, {"start": f"{day}T10:00:00Z"}]}
    meeting["step_minutes"] = 7
    status, body, _ = await api.post("/graphql", user, json={"query": query,
                                                            "variables": variables})
    extensions = body["errors"][0]["extensions"]
    assert (extensions["code"], extensions["param"]) == ("invalid_field", "step_minutes")


def test_the_rules_of_merging() -> None:
    at = datetime(2030, 1, 1, tzinfo=UTC)

    def h(n: float) -> datetime:
        return at + timedelta(hours=n)

    merged = freebusy.merge([
        (h(1), h(2), "tentative"), (h(1.5), h(3), "busy"), (h(2.5), h(5), "tentative"),
        (h(4), h(4.5), "busy"), (h(6), h(7), "tentative"), (h(7), h(8), "tentative"),
        (h(-1), h(0.5), "busy"), (h(9), h(9), "busy"), (h(23), h(30), "tentative"),
    ], at, h(24))
    assert [(i.start, i.end, i.status) for i in merged] == [
        (h(0), h(0.5), "busy"), (h(1), h(1.5), "tentative"), (h(1.5), h(3), "busy"),
        (h(3), h(4), "tentative"), (h(4), h(4.5), "busy"), (h(4.5), h(5), "tentative"),
        (h(6), h(8), "tentative"), (h(23), h(24), "tentative"),
    ]


# ---------------------------------------------------------------------------
# Work bounded per person, and declines that free


async def test_a_flood_of_occurrences_is_expansion_limit_for_that_person_alone(
    api: Api, live_server: LiveServer, make_user: Any,
) -> None:
    caller, colleague = await make_user(), await make_user()
    member(live_server, caller, colleague)
    at = midnight(today() + timedelta(days=1))
    # 900 items six times an hour (any user may make them): 1.3 million occurrences in
    # 59 days, where each person may cost at most 10,000.
    flood = await cal_event(api, caller, recurrence_rule="FREQ=HOURLY;BYMINUTE=0,10,20,30,40,50",
                            **timed(at, at + timedelta(minutes=5)))

    async def copy() -> None:
        columns = [c for c in await live_server.db.fetchval(
            "SELECT array_agg(column_name::text) FROM information_schema.columns"
            " WHERE table_name = 'calendar_events'") if c != "id"]
        listed = ", ".join(columns)
        await live_server.db.execute(
            f"INSERT INTO calendar_events (id, {listed})"
            f" SELECT 'cev_' || md5(n::text || random()::text), {listed}"
            " FROM calendar_events, generate_series(1, 899) n WHERE id = $1", flood["id"])

    live_server.call(copy())
    await cal_event(api, colleague, **timed(at + timedelta(hours=9), at + timedelta(hours=10)))
    body = await free_busy(api, caller, start=z(at), end=z(at + timedelta(days=59)),
                           emails=colleague.email)
    assert body["people"] == [
        {"email": caller.email, "busy": [], "error": "expansion_limit"},
        {"email": colleague.email, "error": None,
         "busy": [interval(at + timedelta(hours=9), at + timedelta(hours=10))]},
    ]
    assert (body["complete"], body["incomplete_reason"]) == (False, "expansion_limit")
    # The colleague's own view is whole; the caller is unavailable to meeting times.
    body = await free_busy(api, colleague, start=z(at), end=z(at + timedelta(days=59)))
    assert body["people"][0]["error"] is None and body["complete"] is True
    found = await meeting_times(api, colleague, start=z(at), end=z(at + timedelta(days=14)),
                                emails=[caller.email], duration_minutes=30, time_zone="UTC")
    assert found["unavailable"] == [caller.email] and len(found["data"]) == 10
    # The agenda shows what its budget reached and says it is not complete.
    status, agenda, _ = await api.get("/v1/agenda", caller,
                                      params={"date": str(at.date()), "days": "31"})
    assert status == 200, agenda
    assert (agenda["complete"], agenda["incomplete_reason"]) == (False, "expansion_limit")
    assert 0 < len(agenda["items"]) <= 500


async def test_a_declined_subscription_copy_frees_its_time(
    api: Api, live_server: LiveServer, make_user: Any,
) -> None:
    subscriber, publisher = await make_user(), await make_user()
    at = midnight(today() + timedelta(days=9))
    profile = await new_profile(api, publisher)
    declined = await cal_event_on(api, publisher, profile, "No", at + timedelta(hours=9), 1)
    weekly = await cal_event_on(api, publisher, profile, "Weekly", at + timedelta(hours=13), 1,
                                recurrence_rule="FREQ=WEEKLY;COUNT=3")
    kept = await cal_event_on(api, publisher, profile, "Kept", at + timedelta(hours=11), 1)
    status, sub, _ = await api.post("/v1/subscriptions", subscriber, json={
        "subscription_type": "profile", "profile_id": profile["id"]})
    assert status == 201, sub
    live_server.call(copies_made(live_server, subscriber.calendar_id,
                                 [declined["id"], weekly["id"], kept["id"]]))
    window = {"start": z(at), "end": z(at + timedelta(days=15))}
    body = await free_busy(api, subscriber, **window)
    assert len(body["people"][0]["busy"]) == 5  # 9:00, 11:00, and three weekly 13:00s
    for event in (declined, weekly):
        status, rsvp, _ = await api.post(f"/v1/events/{event['id']}/rsvps", subscriber,
                                         json={"status": "not_going"})
        assert status == 201, rsvp
    # An answer for a guest is the guest's: it frees nobody.
    status, rsvp, _ = await api.post(f"/v1/events/{kept['id']}/rsvps", subscriber, json={
        "status": "not_going", "attendee_email": "guest@example.com"})
    assert status == 201, rsvp
    body = await free_busy(api, subscriber, **window)
    assert body["people"][0]["busy"] == [interval(at + timedelta(hours=11),
                                                  at + timedelta(hours=12))]
    found = await meeting_times(api, subscriber, **window, duration_minutes=60,
                                time_zone="UTC", working_hours={
                                    "start": "09:00", "end": "15:00",
                                    "days": [WEEKDAYS[at.weekday()]]}, limit=3)
    assert [s["start"] for s in found["data"]] == [
        z(at + timedelta(hours=9)), z(at + timedelta(hours=9, minutes=30)),
        z(at + timedelta(hours=10))]
    # Changing one's mind back makes one busy again.
    status, rsvp, _ = await api.post(f"/v1/events/{declined['id']}/rsvps", subscriber,
                                     json={"status": "going"})
    assert status == 200, rsvp
    body = await free_busy(api, subscriber, **window)
    assert body["people"][0]["busy"][0] == interval(at + timedelta(hours=9),
                                                    at + timedelta(hours=10))
