"""Google Calendar and Microsoft Graph accounts, through the same engine, CLI
commands and agenda as CalDAV, against protocol fakes (tests/fakes/): the
real services cannot be reached from the test machines (see the README for
what a first run against them must check)."""

from __future__ import annotations

import asyncio
import dataclasses
import secrets
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aiohttp import web
from conftest import Api, LiveServer, User, new_event, new_profile, own_server
from connected_world import (
    PARIS,
    agenda,
    eventually,
    external,
    in_days,
    provider_settings,
    settled,
    sync,
)
from connected_world import world_api as world_api  # registers the fixture `api`
from fakes import google, microsoft

from domain import config
from domain.connected import admin


@dataclasses.dataclass
class World:
    server: LiveServer
    google: google.GoogleState
    graph: microsoft.GraphState
    settings: config.Settings


class Fake:
    """A protocol fake served on a loopback port from a thread of its own."""

    def __init__(self, application: web.Application) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._runner = web.AppRunner(application, access_log=None)
        self.url = self._call(self._start())

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=30)

    async def _start(self) -> str:
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        return f"http://127.0.0.1:{self._runner.addresses[0][1]}"

    def close(self) -> None:
        self._call(self._runner.cleanup())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)


@pytest.fixture(scope="module")
def world(database_url: str) -> Iterator[World]:
    g, m = google.GoogleState(), microsoft.GraphState()
    g_fake, m_fake = Fake(google.app(g)), Fake(microsoft.app(m))
    # The providers' URLs and OAuth clients are configuration: here, the fakes.
    settings = provider_settings(g_fake.url, m_fake.url)
    try:
        with own_server(database_url, "kalends_providers", settings=settings) as server:
            yield World(server, g, m, settings)
    finally:
        g_fake.close()
        m_fake.close()


@pytest.fixture(autouse=True)
def one_mailbox(world: World) -> None:
    """The fakes serve one mailbox: each test gets it empty, so that no account
    of an earlier test (still synced by the scheduler) sees this test's calendars."""
    world.google.reset()
    world.graph.reset()


def connect(world: World, user: User, provider: str, secret: str) -> dict[str, Any]:
    return world.server.call(admin.connect(world.server.db, world.settings, user.email,
                                           provider, None, None, secret))


def g_time(day: Any, hour: int, zone: str = "Europe/Paris") -> dict[str, str]:
    local = datetime(day.year, day.month, day.day, hour, tzinfo=PARIS)
    return {"dateTime": local.isoformat(), "timeZone": zone}


async def _connected(world: World, provider: str, token: str | None = None
                     ) -> tuple[Any, User, str, str, dict[str, str]]:
    """A new user's account of `provider` (its fake's fresh calendars, granted `token` or a
    new one) connected and synced once: (the fake's state, the user, the main calendar's ID
    at the fake, the account's ID, the IDs of its connected calendars by name)."""
    if provider == "google":
        state: Any = world.google
        cal = google_calendars(world.google, secrets.token_hex(4))
    else:
        state = world.graph
        cal = graph_calendars(world.graph, secrets.token_hex(4))
    user = world.server.create_user()
    out = connect(world, user, provider, token or state.grant())
    await settled(world, out["account_id"])
    return state, user, cal, out["account_id"], {c["name"]: c["id"] for c in out["calendars"]}


async def _hosted(world: World, api: Api, **fields: Any
                  ) -> tuple[User, dict[str, Any], dict[str, Any]]:
    """An event (`fields`) of a new host's new profile: (the host, the profile, the event)."""
    host = world.server.create_user()
    profile = await new_profile(api, host)
    return host, profile, await new_event(api, host, profile, **fields)


async def _pushed_to(api: Api, user: User, profile: dict[str, Any], xcal: str) -> dict[str, Any]:
    """The user's subscription to the profile, its copies pushed to the connected `xcal`."""
    status, sub, _ = await api.post("/v1/subscriptions", user, json={
        "subscription_type": "profile", "profile_id": profile["id"],
        "external_calendar_ids": [xcal]})
    assert status == 201, sub
    return sub  # type: ignore[no-any-return]


def _failed_wait(world: World, account: str) -> timedelta:
    """How long the failed account waits for its next sync."""
    row = world.server.call(world.server.db.fetchrow(
        "SELECT status, next_sync_at - now() AS wait FROM external_accounts WHERE id = $1",
        account))
    assert row["status"] == "failed", row
    return row["wait"]  # type: ignore[no-any-return]


async def _warnings(api: Api, user: User, xcal: str) -> set[str]:
    """The codes of the agenda's warnings about the connected calendar `xcal`."""
    body = await agenda(api, user)
    return {w["code"] for w in body["warnings"] if w["calendar_id"] == xcal}


# -- Google ---------------------------------------------------------------------------


def google_calendars(state: google.GoogleState, prefix: str) -> str:
    """Four calendars (two pages): a writable primary one, a read-only one, two more."""
    main = f"{prefix}@example.com"
    state.add_calendar(main, "Main", primary=True, backgroundColor="#9fe1e7",
                       timeZone="Europe/Paris")
    state.add_calendar(f"{prefix}-holidays", "Holidays", role="reader")
    state.add_calendar(f"{prefix}-a", "A")
    state.add_calendar(f"{prefix}-b", "B", summaryOverride="B (mine)")
    return main


async def test_google_connect_sync_and_agenda(world: World, api: Api) -> None:
    g = world.google
    user = world.server.create_user(timezone="Europe/Paris")
    cal = google_calendars(g, secrets.token_hex(4))
    d = in_days(3)
    g.put(cal, {"id": "single1", "summary": "Dentist", "start": g_time(d, 9),
                "end": g_time(d, 10)})
    g.put(cal, {"id": "allday1", "summary": "Trip", "start": {"date": d.isoformat()},
                "end": {"date": (d + timedelta(days=2)).isoformat()}})
    first = in_days(-6)
    g.put(cal, {"id": "weekly1", "summary": "Standup", "start": g_time(first, 9),
                "end": g_time(first, 10), "iCalUID": "weekly1@google.com",
                "recurrence": ["RRULE:FREQ=WEEKLY;COUNT=5",
                               f"EXDATE;TZID=Europe/Paris:{(first + timedelta(days=7)):%Y%m%d}"
                               "T090000"]})
    moved, dropped = first + timedelta(days=14), first + timedelta(days=21)
    g.put(cal, {"id": "weekly1_moved", "summary": "Standup (late)", "start": g_time(moved, 11),
                "end": g_time(moved, 12), "iCalUID": "weekly1@google.com",
                "recurringEventId": "weekly1", "originalStartTime": g_time(moved, 9)})
    g.put(cal, {"id": "weekly1_dropped", "status": "cancelled", "iCalUID": "weekly1@google.com",
                "recurringEventId": "weekly1", "originalStartTime": g_time(dropped, 9),
                "start": g_time(dropped, 9), "end": g_time(dropped, 10)})

    out = connect(world, user, "google", g.grant())
    assert out["provider"] == "google"
    calendars = {c["name"]: c for c in out["calendars"]}
    assert set(calendars) == {"Main", "Holidays", "A", "B (mine)"}
    assert calendars["Holidays"]["can_edit"] is False and calendars["Main"]["can_edit"] is True
    account, xcal = out["account_id"], calendars["Main"]["id"]
    await settled(world, account)
    status, page, _ = await api.get("/v1/external-calendars", user)
    assert status == 200
    main = next(c for c in page["data"] if c["id"] == xcal)
    assert (main["is_primary"], main["color"], main["time_zone"]) == \
        (True, "#9fe1e7", "Europe/Paris")

    body = await agenda(api, user, date=first.isoformat())
    got = sorted((i["title"], i["local_start"][:16]) for i in external(body))
    assert got == sorted([
        ("Standup", f"{first.isoformat()}T09:00"),
        ("Standup (late)", f"{moved.isoformat()}T11:00"),
        ("Standup", f"{(first + timedelta(days=28)).isoformat()}T09:00"),
        ("Dentist", f"{d.isoformat()}T09:00"),
        ("Trip", f"{d.isoformat()}T00:00"),
    ])
    source = next(s for s in body["sources"] if s["calendar_id"] == xcal)
    assert source["provider"] == "google" and source["status"] == "ok"

    # Incremental: the sync token brings only the changes; a tombstone deletes.
    g.put(cal, {**g.events[cal]["single1"], "summary": "Dentist (moved)",
                "start": g_time(d, 15), "end": g_time(d, 16)})
    g.remove(cal, "allday1")
    g.put(cal, {"id": "new1", "summary": "Gym", "start": g_time(d, 18), "end": g_time(d, 19)})
    g.requests.clear()
    await sync(world, account)
    assert any("/events" in r for r in g.requests)
    titles = {i["title"] for i in external(await agenda(api, user))}
    assert {"Dentist (moved)", "Gym"} <= titles and "Trip" not in titles and "Dentist" not in titles

    # An expired sync token (410): everything again, and what vanished meanwhile goes.
    del g.events[cal]["new1"]
    g.expire_sync_tokens()
    # An expired access token is renewed on the way, unseen.
    g.access_tokens.clear()
    await sync(world, account)
    titles = {i["title"] for i in external(await agenda(api, user))}
    assert "Gym" not in titles and "Dentist (moved)" in titles
    assert await _warnings(api, user, xcal) == set()


async def test_google_rate_limit_and_revoked_grant(world: World, api: Api) -> None:
    token = world.google.grant()
    g, user, cal, account, xcals = await _connected(world, "google", token)
    xcal = xcals["Main"]
    g.put(cal, {"id": "x1", "summary": "Later", "start": g_time(in_days(2), 9),
                "end": g_time(in_days(2), 10)})

    g.limited, g.limit_status = 1, 403
    await sync(world, account)
    # Retry-After: 120 is honoured over the 30 s first back-off.
    assert _failed_wait(world, account) > timedelta(seconds=100)
    assert await _warnings(api, user, xcal) == {"sync_failed"}
    await sync(world, account)
    assert "Later" in {i["title"] for i in external(await agenda(api, user))}

    g.refresh_tokens.discard(token)
    g.access_tokens.clear()
    await sync(world, account)
    assert await _warnings(api, user, xcal) == {"sync_disabled"}


async def test_google_copies_of_subscribed_events(world: World, api: Api) -> None:
    g, user, cal, account, xcals = await _connected(world, "google")
    xcal, readonly = xcals["Main"], xcals["Holidays"]
    host, profile, event = await _hosted(
        world, api, title="Talk", start_time=f"{in_days(5).isoformat()}T18:00",
        end_time=f"{in_days(5).isoformat()}T19:00", end_timezone="Europe/Paris",
        recurrence_rule="FREQ=WEEKLY;COUNT=3")
    status, err, _ = await api.post("/v1/subscriptions", user, json={
        "subscription_type": "profile", "profile_id": profile["id"],
        "external_calendar_ids": [readonly]})
    assert status == 400 and err["error"]["code"] == "invalid_field"
    sub = await _pushed_to(api, user, profile, xcal)

    def copies() -> list[dict[str, Any]]:
        return [e for e in g.live(cal) if e.get("iCalUID") == f"{event['id']}@kalends"]

    async def copy_is(title: str) -> bool:
        await settled(world, account)
        found = copies()
        return len(found) == 1 and found[0]["summary"] == title

    await eventually(lambda: copy_is("Talk"), "copy pushed")
    [copy] = copies()
    assert copy["recurrence"] == ["RRULE:FREQ=WEEKLY;COUNT=3"]
    assert copy["start"] == {"dateTime": f"{in_days(5).isoformat()}T18:00:00",
                             "timeZone": "Europe/Paris"}
    # A lost answer to the insert: the engine forgets its mapping, pushes again, and
    # Google's 409 on the derived id turns it into an update, not a second copy.
    world.server.call(world.server.db.execute(
        "DELETE FROM external_pushes WHERE event_id = $1", event["id"]))
    await sync(world, account)
    assert len(copies()) == 1
    status, _, _ = await api.patch(f"/v1/events/{event['id']}", host, json={"title": "Talk 2"})
    await eventually(lambda: copy_is("Talk 2"), "copy updated")
    status, _, _ = await api.delete(f"/v1/subscriptions/{sub['id']}", user)
    assert status == 204

    async def gone() -> bool:
        await settled(world, account)
        return copies() == []

    await eventually(gone, "copy deleted on unsubscribe")


async def test_google_copies_carry_cancelled_and_changed_occurrences(
        world: World, api: Api) -> None:
    """docs/api-choices.md, "Connected calendars": a cancelled occurrence is an EXDATE of
    the copy's `recurrence`, a changed one its instance (`<id>_<original start>`) with its
    own values; a restored one is put back as the rule makes it."""
    g, user, cal, account, xcals = await _connected(world, "google")
    first = in_days(5)
    host, profile, event = await _hosted(
        world, api, title="Talk", start_time=f"{first.isoformat()}T18:00",
        end_time=f"{first.isoformat()}T19:00", end_timezone="Europe/Paris",
        recurrence_rule="FREQ=WEEKLY;COUNT=3")
    status, listed, _ = await api.get(f"/v1/events/{event['id']}/occurrences", host, params={
        "from": f"{first.isoformat()}T00:00:00Z",
        "to": f"{(first + timedelta(days=20)).isoformat()}T00:00:00Z"})
    assert status == 200 and len(listed["data"]) == 3, listed
    second, third = (o["occurrence_id"] for o in listed["data"][1:])
    path = f"/v1/events/{event['id']}/occurrences/"
    status, _, _ = await api.post(path + second + "/cancel", host, json={})
    assert status == 200
    status, _, _ = await api.patch(path + third, host, json={
        "title": "Talk (moved)", "start_time": f"{(first + timedelta(days=15)).isoformat()}T09:00",
        "end_time": f"{(first + timedelta(days=15)).isoformat()}T10:00",
        "start_timezone": "Europe/Paris", "end_timezone": "Europe/Paris"})
    assert status == 200
    sub = await _pushed_to(api, user, profile, xcals["Main"])
    uid = f"{event['id']}@kalends"

    def copies() -> dict[str, dict[str, Any]]:
        return {e["id"]: e for e in g.live(cal) if e.get("iCalUID") == uid}

    async def pushed(count: int, title: str) -> bool:
        await settled(world, account)
        instances = [e for e in copies().values() if "recurringEventId" in e]
        return len(copies()) == count and all(e["summary"] == title for e in instances)

    await eventually(lambda: pushed(2, "Talk (moved)"), "copy and instance pushed")
    [master] = [e for e in copies().values() if "recurringEventId" not in e]
    second_day = first + timedelta(days=7)
    assert master["recurrence"] == [
        "RRULE:FREQ=WEEKLY;COUNT=3", f"EXDATE;TZID=Europe/Paris:{second_day:%Y%m%d}T180000"]
    slot = third.split(":")[1]
    instance = copies()[f"{master['id']}_{slot}"]
    assert instance["recurringEventId"] == master["id"]
    assert instance["start"] == {"dateTime": f"{(first + timedelta(days=15)).isoformat()}T09:00:00",
                                 "timeZone": "Europe/Paris"}
    assert instance["originalStartTime"] == {
        "dateTime": f"{(first + timedelta(days=14)).isoformat()}T18:00:00",
        "timeZone": "Europe/Paris"}
    assert "recurrence" not in instance

    status, _, _ = await api.post(path + third + "/restore", host, json={})
    assert status == 200
    await eventually(lambda: pushed(2, "Talk"), "instance put back")
    restored = copies()[f"{master['id']}_{slot}"]
    assert restored["start"] == restored["originalStartTime"]
    status, _, _ = await api.delete(f"/v1/subscriptions/{sub['id']}", user)
    assert status == 204


# -- Microsoft ------------------------------------------------------------------------


def graph_calendars(state: microsoft.GraphState, prefix: str) -> str:
    main = f"{prefix}-main"
    state.add_calendar(main, "Calendar", isDefaultCalendar=True, hexColor="#e3008c")
    state.add_calendar(f"{prefix}-shared", "Shared", can_edit=False)
    state.add_calendar(f"{prefix}-x", "X")
    state.add_calendar(f"{prefix}-y", "Y")
    return main


def m_time(day: Any, hour: int) -> dict[str, str]:
    local = datetime(day.year, day.month, day.day, hour, tzinfo=PARIS).astimezone(UTC)
    return {"dateTime": local.replace(tzinfo=None).isoformat() + ".0000000", "timeZone": "UTC"}


async def test_microsoft_connect_delta_sync_and_rotation(world: World, api: Api) -> None:
    m = world.graph
    user = world.server.create_user(timezone="Europe/Paris")
    cal = graph_calendars(m, secrets.token_hex(4))
    d = in_days(2)
    m.put(cal, {"id": "s1", "subject": "Review", "start": m_time(d, 9), "end": m_time(d, 10),
                "originalStartTimeZone": "Europe/Paris"})
    series = "040000008200E00074C5B7101A82E008SERIES"
    for n in range(4):
        day = d + timedelta(days=7 * n)
        kind = "exception" if n == 1 else "occurrence"
        hour = 11 if n == 1 else 8
        m.put(cal, {"id": f"occ{n}", "type": kind, "subject": "1:1" if n != 1 else "1:1 (moved)",
                    "iCalUId": series, "seriesMasterId": "master1",
                    "originalStart": m_time(day, 8)["dateTime"][:19] + "Z",
                    "start": m_time(day, hour), "end": m_time(day, hour + 1),
                    "isCancelled": n == 2, "originalStartTimeZone": "Europe/Paris"})
    m.put(cal, {"id": "master1", "type": "seriesMaster", "subject": "1:1", "iCalUId": series,
                "start": m_time(d, 8), "end": m_time(d, 9)})
    m.put(cal, {"id": "ad1", "subject": "Offsite", "isAllDay": True,
                "start": {"dateTime": f"{d.isoformat()}T00:00:00.0000000", "timeZone": "UTC"},
                "end": {"dateTime": f"{(d + timedelta(days=1)).isoformat()}T00:00:00.0000000",
                        "timeZone": "UTC"}})

    first_token = m.grant()
    out = connect(world, user, "microsoft", first_token)
    calendars = {c["name"]: c for c in out["calendars"]}
    assert set(calendars) == {"Calendar", "Shared", "X", "Y"}
    assert calendars["Shared"]["can_edit"] is False
    account, xcal = out["account_id"], calendars["Calendar"]["id"]
    # The refresh token rotated at connect time; the old one is dead, the new one kept.
    assert first_token not in m.refresh_tokens
    await settled(world, account)

    body = await agenda(api, user)
    got = sorted((i["title"], i["local_start"][:16], i["is_recurring"]) for i in external(body))
    assert got == sorted([
        ("Review", f"{d.isoformat()}T09:00", False),
        ("1:1", f"{d.isoformat()}T08:00", True),
        ("1:1 (moved)", f"{(d + timedelta(days=7)).isoformat()}T11:00", True),
        ("1:1", f"{(d + timedelta(days=21)).isoformat()}T08:00", True),
        ("Offsite", f"{d.isoformat()}T00:00", False),
    ])
    source = next(s for s in body["sources"] if s["calendar_id"] == xcal)
    assert source["provider"] == "microsoft" and source["status"] == "ok"

    m.put(cal, {**m.events[cal]["s1"], "subject": "Review (moved)", "start": m_time(d, 14),
                "end": m_time(d, 15)})
    m.remove(cal, "ad1")
    await sync(world, account)
    titles = {i["title"] for i in external(await agenda(api, user))}
    assert "Review (moved)" in titles and "Offsite" not in titles and "Review" not in titles

    # syncStateNotFound: a full sync; an event gone meanwhile is deleted.
    m.events[cal].pop("s1")
    m.expire_delta_tokens()
    m.access_tokens.clear()
    await sync(world, account)
    titles = {i["title"] for i in external(await agenda(api, user))}
    assert "Review (moved)" not in titles and "1:1" in titles

    m.limited = 1
    await sync(world, account)
    assert _failed_wait(world, account) > timedelta(seconds=80)
    await sync(world, account)
    assert await _warnings(api, user, xcal) == set()

    m.refresh_tokens.clear()
    m.access_tokens.clear()
    await sync(world, account)
    assert await _warnings(api, user, xcal) == {"sync_disabled"}


async def test_microsoft_copies_use_transaction_ids(world: World, api: Api) -> None:
    m, user, cal, account, xcals = await _connected(world, "microsoft")
    host, profile, event = await _hosted(
        world, api, title="Meetup", start_time=f"{in_days(4).isoformat()}T19:00",
        end_time=f"{in_days(4).isoformat()}T21:00", end_timezone="Europe/Paris")
    await _pushed_to(api, user, profile, xcals["Calendar"])

    def copies() -> list[dict[str, Any]]:
        return [e for e in m.events[cal].values() if e.get("subject", "").startswith("Meetup")]

    async def copy_count(n: int) -> bool:
        await settled(world, account)
        return len(copies()) == n

    await eventually(lambda: copy_count(1), "copy pushed")
    assert copies()[0]["start"] == {"dateTime": f"{in_days(4).isoformat()}T19:00:00",
                                    "timeZone": "Europe/Paris"}
    world.server.call(world.server.db.execute(
        "DELETE FROM external_pushes WHERE event_id = $1", event["id"]))
    await sync(world, account)
    assert len(copies()) == 1  # the repeated transactionId made nothing new
    status, _, _ = await api.post(f"/v1/events/{event['id']}/cancel", host, json={})
    assert status == 200
    await eventually(lambda: copy_count(0), "cancelled copy removed")


@pytest.mark.slow
async def test_many_accounts_sync_at_once_without_starving_the_pool(
        world: World, api: Api) -> None:
    # More accounts than the job pool has connections (4), all synced at once: each
    # sync holds its account's lock on a connection of its own while it talks to the
    # provider, so none waits on another.
    g = world.google
    users = [world.server.create_user() for _ in range(8)]
    accounts = []
    for n, user in enumerate(users):
        cal = google_calendars(g, secrets.token_hex(4))
        g.put(cal, {"id": f"e{n}", "summary": f"Event {n}", "start": g_time(in_days(1), 9),
                    "end": g_time(in_days(1), 10)})
        accounts.append(connect(world, user, "google", g.grant())["account_id"])
    world.server.call(admin.sync_now(world.server.db, None))
    for account in accounts:
        await settled(world, account)
    for n, user in enumerate(users):
        assert f"Event {n}" in {i["title"] for i in external(await agenda(api, user))}
