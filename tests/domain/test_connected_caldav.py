"""Connected calendars against a real CalDAV server (Radicale, started here),
through the CLI and REST, as a user and an operator meet them: connect,
discover, sync in and out, warnings, recovery, disconnect. A second CalDAV
client (the `caldav` package) plays the user's other devices, and
`recurring-ical-events` is the independent oracle for recurrence."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from typing import Any

import aiohttp
import icalendar
import pytest
import recurring_ical_events
from conftest import Api, User, assert_error, new_event, new_profile
from connected_world import (
    PARIS,
    Person,
    World,
    agenda,
    caldav_world,
    connect,
    eventually,
    external,
    in_days,
    new_person,
    settled,
    sync,
)
from connected_world import world_api as world_api  # registers the fixture `api`
from connected_world import world_person as world_person  # registers the fixture `person`
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ical_readers import (
    agenda_occurrences,
    beside_changes,
    create_events,
    event_bodies,
    icaljs_occurrences,
    python_occurrences,
    window_of,
    within,
)

from domain.connected import engine

# slow: a real CalDAV server (Radicale) per test (the fast loop, pytest -m 'not slow', leaves it out)
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def world(database_url: str) -> Iterator[World]:
    with caldav_world(database_url, "kalends_caldav") as made:
        yield made


def other_device(world: World, p: Person, cal_id: str = "work") -> Any:
    return world.radicale.client(p.login, p.password).principal().calendar(cal_id=cal_id)


def cli(world: World, *args: str, stdin: str = "") -> tuple[int, dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, "-m", "kalends", "admin", *args], input=stdin.encode(),
        capture_output=True, env=world.env(), timeout=120,
    )
    out = done.stdout if done.returncode == 0 else done.stderr
    lines = [line for line in out.decode().splitlines() if line.startswith("{")]
    return done.returncode, json.loads(lines[-1]) if lines else {"raw": out.decode()}


def stamp(day: date, hour: int, minute: int = 0) -> str:
    return f"{day.strftime('%Y%m%d')}T{hour:02d}{minute:02d}00"


def vevent(uid: str, title: str, start: str, end: str, *extra: str, tz: str = "Europe/Paris"
           ) -> str:
    lines = [f"UID:{uid}", f"SUMMARY:{title}", f"DTSTART;TZID={tz}:{start}",
             f"DTEND;TZID={tz}:{end}", *extra]
    return "BEGIN:VEVENT\n" + "\n".join(lines) + "\nEND:VEVENT\n"


def vcalendar(*events: str) -> str:
    return "BEGIN:VCALENDAR\nVERSION:2.0\nPRODID:-//tests//EN\n" + "".join(events) + \
        "END:VCALENDAR\n"


# ---------------------------------------------------------------------------------------


async def test_connect_through_the_cli_lists_calendars_and_keeps_the_secret_sealed(
        world: World, person: Person, api: Api) -> None:
    code, out = cli(world, "connect-calendars", "--email", person.user.email, "--provider", "ios",
                    "--url", world.radicale.url, "--username", person.login,
                    stdin=person.password + "\n")
    assert code == 0, out
    assert set(out) == {"account_id", "provider", "calendars"}
    assert out["provider"] == "ios" and out["account_id"].startswith("xac_")
    assert [(c["name"], c["can_edit"]) for c in out["calendars"]] == [("Work", True)]
    cal_id = out["calendars"][0]["id"]

    status, page, _ = await api.get("/v1/external-calendars", person.user)
    assert status == 200, page
    assert page["has_more"] is False and page["next_cursor"] is None
    assert page["data"][0]["id"] == cal_id
    assert set(page["data"][0]) == {"id", "name", "description", "color", "can_edit",
                                    "time_zone", "is_primary", "created_at"}

    # Encrypted at rest: the stored bytes do not hold the password, and the key is not
    # in the database but in a file of the data directory, readable by its owner only.
    stored = world.server.call(world.server.db.fetchval(
        "SELECT secret FROM external_accounts WHERE id = $1", out["account_id"]))
    assert person.password.encode() not in bytes(stored)
    key_file = world.data_dir / "secret.key"
    assert key_file.stat().st_mode & 0o077 == 0

    # Someone else's calendars are not listed.
    stranger = world.server.create_user()
    status, page, _ = await api.get("/v1/external-calendars", stranger)
    assert page["data"] == []

    # Connecting again (a new password) re-enables the same account, no second copy.
    code, again = cli(world, "connect-calendars", "--email", person.user.email, "--provider",
                      "ios", "--url", world.radicale.url, "--username", person.login,
                      stdin=person.password + "\n")
    assert code == 0 and again["account_id"] == out["account_id"]
    assert again["calendars"][0]["id"] == cal_id


async def test_connect_refuses_wrong_credentials_and_secrets_on_the_command_line(
        world: World, person: Person) -> None:
    code, out = cli(world, "connect-calendars", "--email", person.user.email, "--provider", "ios",
                    "--url", world.radicale.url, "--username", person.login, stdin="wrong\n")
    assert code == 1 and "refused" in out["error"]
    code, out = cli(world, "connect-calendars", "--email", person.user.email, "--provider", "ios",
                    "--url", world.radicale.url, "--username", person.login, stdin="")
    assert code == 1 and "standard input" in out["error"]
    rows = world.server.call(world.server.db.fetchval(
        "SELECT count(*) FROM external_accounts a JOIN users u ON u.id = a.user_id "
        "WHERE u.email = $1", person.user.email))
    assert rows == 0


async def test_initial_and_incremental_sync_follow_the_other_device(
        world: World, person: Person, api: Api) -> None:
    device = other_device(world, person)
    d1, d2 = in_days(2), in_days(3)
    device.save_event(vcalendar(vevent("one@dev", "Dentist", stamp(d1, 9), stamp(d1, 10))))
    device.save_event(vcalendar(vevent("two@dev", "Lunch", stamp(d2, 12), stamp(d2, 13))))
    device.save_event(vcalendar(
        "BEGIN:VEVENT\nUID:day@dev\nSUMMARY:Holiday\n"
        f"DTSTART;VALUE=DATE:{d2.strftime('%Y%m%d')}\n"
        f"DTEND;VALUE=DATE:{(d2 + timedelta(days=2)).strftime('%Y%m%d')}\nEND:VEVENT\n"))
    out = connect(world, person)
    account, cal_id = out["account_id"], out["calendars"][0]["id"]
    await settled(world, account)

    body = await agenda(api, person.user)
    source = next(s for s in body["sources"] if s["calendar_id"] == cal_id)
    assert source["provider"] == "ios" and source["status"] == "ok"
    assert source["last_sync_at"] is not None
    assert not [w for w in body["warnings"] if w["calendar_id"] == cal_id]
    items = {i["title"]: i for i in external(body)}
    assert set(items) == {"Dentist", "Lunch", "Holiday"}
    dentist = items["Dentist"]
    assert dentist["calendar_id"] == cal_id and dentist["event_id"].startswith("xcev_")
    assert dentist["editable"] is False and dentist["profile"] is None
    assert dentist["source"] == {"type": "external", "subscription_id": None}
    assert dentist["local_start"].startswith(f"{d1.isoformat()}T09:00:00")
    holiday = items["Holiday"]
    assert holiday["is_all_day"] is True
    assert holiday["start_date"] == d2.isoformat()
    assert holiday["end_date"] == (d2 + timedelta(days=2)).isoformat()
    event_ids = {t: i["event_id"] for t, i in items.items()}

    # The other device changes one, deletes one, adds one.
    device.event_by_uid("two@dev").delete()
    changed = device.event_by_uid("one@dev")
    changed.data = vcalendar(vevent("one@dev", "Dentist (moved)", stamp(d1, 15), stamp(d1, 16)))
    changed.save()
    device.save_event(vcalendar(vevent("three@dev", "Gym", stamp(d2, 18), stamp(d2, 19))))
    # Added later: a recurring event with an excluded and an overridden instance, and
    # one event moved from before the spring DST change in Paris to after it.
    device.save_event(vcalendar(
        vevent("rec@dev", "Class", stamp(d1, 17), stamp(d1, 18), "RRULE:FREQ=DAILY;COUNT=4",
               f"EXDATE;TZID=Europe/Paris:{stamp(d1 + timedelta(days=1), 17)}"),
        vevent("rec@dev", "Class (room B)", stamp(d1 + timedelta(days=2), 19),
               stamp(d1 + timedelta(days=2), 20),
               f"RECURRENCE-ID;TZID=Europe/Paris:{stamp(d1 + timedelta(days=2), 17)}")))
    before_dst, after_dst = date(2027, 3, 20), date(2027, 4, 3)
    device.save_event(vcalendar(vevent("dst@dev", "Spring", stamp(before_dst, 9),
                                       stamp(before_dst, 10))))
    await sync(world, account)
    dst = device.event_by_uid("dst@dev")
    dst.data = vcalendar(vevent("dst@dev", "Spring", stamp(after_dst, 9), stamp(after_dst, 10)))
    dst.save()
    await sync(world, account)

    classes = sorted((i["title"], i["local_start"][:16]) for i in external(
        await agenda(api, person.user)) if i["title"].startswith("Class"))
    assert classes == sorted([
        ("Class", f"{d1.isoformat()}T17:00"),
        ("Class (room B)", f"{(d1 + timedelta(days=2)).isoformat()}T19:00"),
        ("Class", f"{(d1 + timedelta(days=3)).isoformat()}T17:00"),
    ])
    if after_dst <= in_days(330):
        spring = external(await agenda(api, person.user, date=before_dst.isoformat()))
        moved = [i for i in spring if i["title"] == "Spring"]
        assert [(i["local_start"], i["start"]) for i in moved] == [
            (f"{after_dst.isoformat()}T09:00:00+02:00", f"{after_dst.isoformat()}T07:00:00Z")]

    items = {i["title"]: i for i in external(await agenda(api, person.user))}
    assert set(items) == {"Dentist (moved)", "Gym", "Holiday", "Class", "Class (room B)"}
    assert items["Dentist (moved)"]["local_start"].startswith(f"{d1.isoformat()}T15:00:00")
    # Stable while the stored row exists.
    assert items["Dentist (moved)"]["event_id"] == event_ids["Dentist"]
    assert items["Holiday"]["event_id"] == event_ids["Holiday"]

    # Syncing again changes nothing, and two syncs at once make no duplicates.
    before = world.server.call(world.server.db.fetch(
        "SELECT id, title FROM external_events ORDER BY id"))
    await settled(world, account)
    eng = _engine(world)

    async def three_at_once() -> None:
        await asyncio.gather(*(eng.sync(account) for _ in range(3)))

    world.server.call(three_at_once())
    await settled(world, account)
    after = world.server.call(world.server.db.fetch(
        "SELECT id, title FROM external_events ORDER BY id"))
    assert [tuple(r) for r in after] == [tuple(r) for r in before]


def _engine(world: World) -> engine.Engine:
    session = world.server.call(_session())
    return engine.Engine(world.server.db, session, lambda: engine.open_vault(world.settings),
                         world.settings.providers, world.settings.sync_interval)


async def _session() -> aiohttp.ClientSession:
    return engine.new_session()


async def test_recurrence_matches_an_independent_expander_across_dst(
        world: World, person: Person, api: Api) -> None:
    # Weekly at 09:00 Paris time from a week before the window, through the DST
    # change at the end of March when the window covers it; one instance
    # excluded, one moved, one cancelled, one extra date.
    start = in_days(-7)
    rdate = in_days(10)
    excluded, moved, cancelled = start + timedelta(days=7), start + timedelta(days=14), \
        start + timedelta(days=21)
    weekly = (
        vevent("weekly@dev", "Standup", stamp(start, 9), stamp(start, 9, 30),
               "RRULE:FREQ=WEEKLY;COUNT=12", f"EXDATE;TZID=Europe/Paris:{stamp(excluded, 9)}",
               f"RDATE;TZID=Europe/Paris:{stamp(rdate, 14)}"),
        vevent("weekly@dev", "Standup (late)", stamp(moved, 11), stamp(moved, 11, 30),
               f"RECURRENCE-ID;TZID=Europe/Paris:{stamp(moved, 9)}"),
        vevent("weekly@dev", "Standup", stamp(cancelled, 9), stamp(cancelled, 9, 30),
               f"RECURRENCE-ID;TZID=Europe/Paris:{stamp(cancelled, 9)}", "STATUS:CANCELLED"),
    )
    # Across a DST change in New York: the wall clock stays at 08:00 there.
    new_york = vevent("ny@dev", "NY call", "20270301T080000", "20270301T083000",
                      "RRULE:FREQ=WEEKLY;COUNT=6", tz="America/New_York")
    # Floating: 07:00 on whatever clock the agenda uses.
    floating = ("BEGIN:VEVENT\nUID:float@dev\nSUMMARY:Wake up\n"
                f"DTSTART:{stamp(in_days(1), 7)}\nDTEND:{stamp(in_days(1), 7, 15)}\n"
                "RRULE:FREQ=DAILY;COUNT=3\nEND:VEVENT\n")
    text = vcalendar(*weekly, new_york, floating)
    device = other_device(world, person)
    for one in (vcalendar(*weekly), vcalendar(new_york), vcalendar(floating)):
        device.save_event(one)
    out = connect(world, person)
    await settled(world, out["account_id"])

    for first, days in ((in_days(-7), 31), (date(2027, 3, 1), 31)):
        if first < in_days(-30) or first > in_days(330):
            continue
        body = await agenda(api, person.user, date=first.isoformat(), days=str(days))
        got = sorted((i["title"], i["start"]) for i in external(body))
        window_start = datetime.fromisoformat(body["window"]["start"].replace("Z", "+00:00"))
        window_end = datetime.fromisoformat(body["window"]["end"].replace("Z", "+00:00"))
        oracle = recurring_ical_events.of(icalendar.Calendar.from_ical(text)).between(
            window_start.astimezone(PARIS), window_end.astimezone(PARIS))
        expected = sorted(
            (str(e["SUMMARY"]), _utc(e["DTSTART"].dt)) for e in oracle
            if str(e.get("STATUS", "")) != "CANCELLED")
        assert got == expected
        assert body["complete"] is True

    # Overrides are occurrences of their event.
    body = await agenda(api, person.user, date=in_days(-7).isoformat())
    late = [i for i in external(body) if i["title"] == "Standup (late)"]
    if late:
        assert late[0]["is_recurring"] is True
        assert late[0]["occurrence_id"].endswith(":" + _utc(
            datetime.combine(moved, datetime.min.time()).replace(hour=9, tzinfo=PARIS)
        ).replace("-", "").replace(":", ""))


def _utc(value: Any) -> str:
    if not isinstance(value, datetime):
        value = datetime.combine(value, datetime.min.time(), PARIS)
    if value.tzinfo is None:
        value = value.replace(tzinfo=PARIS)
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def test_invalid_sync_token_means_a_full_sync_that_still_sees_deletions(
        world: World, person: Person, api: Api) -> None:
    device = other_device(world, person)
    d = in_days(4)
    device.save_event(vcalendar(vevent("keep@dev", "Keep", stamp(d, 9), stamp(d, 10))))
    device.save_event(vcalendar(vevent("drop@dev", "Drop", stamp(d, 11), stamp(d, 12))))
    out = connect(world, person)
    account, cal_id = out["account_id"], out["calendars"][0]["id"]
    await settled(world, account)
    device.event_by_uid("drop@dev").delete()
    world.server.call(world.server.db.execute(
        "UPDATE external_calendars SET sync_token = 'http://radicale.org/ns/sync/forgotten' "
        "WHERE id = $1", cal_id))
    await sync(world, account)
    titles = {i["title"] for i in external(await agenda(api, person.user))}
    assert titles == {"Keep"}
    token = world.server.call(world.server.db.fetchval(
        "SELECT sync_token FROM external_calendars WHERE id = $1", cal_id))
    assert token and not token.endswith("forgotten")


async def test_connecting_queues_one_sync_not_two(world: World, person: Person) -> None:
    """Connecting queues the first sync itself, so the scheduler's next tick must
    not queue another: the account's next scheduled sync is a full interval away."""
    out = connect(world, person)
    account = out["account_id"]
    await settled(world, account)
    wait = world.server.call(world.server.db.fetchval(
        "SELECT next_sync_at - now() FROM external_accounts WHERE id = $1", account))
    assert wait > world.settings.sync_interval - timedelta(seconds=60)


async def test_refused_password_disables_until_connected_again(
        world: World, person: Person, api: Api) -> None:
    device = other_device(world, person)
    d = in_days(5)
    device.save_event(vcalendar(vevent("a@dev", "Kept while disabled", stamp(d, 9),
                                       stamp(d, 10))))
    out = connect(world, person)
    account, cal_id = out["account_id"], out["calendars"][0]["id"]
    await settled(world, account)

    world.radicale.set_password(person.login, "changed-" + person.password)
    await sync(world, account)
    body = await agenda(api, person.user)
    assert {w["code"] for w in body["warnings"] if w["calendar_id"] == cal_id} == \
        {"sync_disabled"}
    assert next(s for s in body["sources"] if s["calendar_id"] == cal_id)["status"] == "warning"
    # What was synced stays visible, with the warning.
    assert {i["title"] for i in external(body)} == {"Kept while disabled"}
    code, out2 = cli(world, "sync-calendars", "--account", account)
    assert code == 1 and "disabled" in out2["error"]
    # A disabled account is skipped by the scheduler.
    assert world.server.call(world.server.db.fetchval(
        "SELECT status FROM external_accounts WHERE id = $1", account)) == "disabled"

    person.password = "changed-" + person.password
    again = connect(world, person)
    assert again["account_id"] == account
    await settled(world, account)
    body = await agenda(api, person.user)
    assert not [w for w in body["warnings"] if w["calendar_id"] == cal_id]


async def test_server_down_is_sync_failed_then_recovers(
        world: World, person: Person, api: Api) -> None:
    out = connect(world, person)
    account, cal_id = out["account_id"], out["calendars"][0]["id"]
    await settled(world, account)
    world.radicale.stop()
    try:
        await sync(world, account)
        body = await agenda(api, person.user)
        assert {w["code"] for w in body["warnings"] if w["calendar_id"] == cal_id} == \
            {"sync_failed"}
        row = world.server.call(world.server.db.fetchrow(
            "SELECT status, failures, next_sync_at > now() AS later FROM external_accounts "
            "WHERE id = $1", account))
        assert row["status"] == "failed" and row["failures"] >= 1 and row["later"]
    finally:
        world.radicale.start()
    device = other_device(world, person)
    d = in_days(6)
    device.save_event(vcalendar(vevent("back@dev", "Back", stamp(d, 9), stamp(d, 10))))
    await sync(world, account)
    body = await agenda(api, person.user)
    assert not [w for w in body["warnings"] if w["calendar_id"] == cal_id]
    assert {i["title"] for i in external(body)} == {"Back"}


async def test_sync_states_unknown_unverified_and_stale(
        world: World, person: Person, api: Api) -> None:
    out = connect(world, person)
    account, cal_id = out["account_id"], out["calendars"][0]["id"]
    await settled(world, account)
    db = world.server.db

    async def code() -> set[str]:
        body = await agenda(api, person.user)
        return {w["code"] for w in body["warnings"] if w["calendar_id"] == cal_id}

    world.server.call(db.execute(
        "UPDATE external_accounts SET last_attempt_at = NULL, next_sync_at = now() + "
        "interval '1 day' WHERE id = $1", account))
    world.server.call(db.execute(
        "UPDATE external_calendars SET last_success_at = NULL WHERE id = $1", cal_id))
    assert await code() == {"sync_unknown"}
    world.server.call(db.execute(
        "UPDATE external_accounts SET last_attempt_at = now() WHERE id = $1", account))
    assert await code() == {"sync_unverified"}
    world.server.call(db.execute(
        "UPDATE external_calendars SET last_success_at = now() - interval '16 minutes' "
        "WHERE id = $1", cal_id))
    assert await code() == {"sync_stale"}
    world.server.call(db.execute(
        "UPDATE external_calendars SET last_success_at = now() - interval '14 minutes' "
        "WHERE id = $1", cal_id))
    assert await code() == set()


async def test_selection_and_calendar_ids(world: World, person: Person, api: Api) -> None:
    device = other_device(world, person)
    d = in_days(2)
    device.save_event(vcalendar(vevent("s@dev", "Selected?", stamp(d, 9), stamp(d, 10))))
    out = connect(world, person)
    account, cal_id = out["account_id"], out["calendars"][0]["id"]
    await settled(world, account)
    code, selected = cli(world, "select-calendar", "--id", cal_id, "--selected", "false")
    assert code == 0 and selected == {"id": cal_id, "selected": False}
    body = await agenda(api, person.user)
    assert cal_id not in {s["calendar_id"] for s in body["sources"]}
    assert external(body) == []
    # Asked for by ID, it is searched all the same, in the order asked.
    body = await agenda(api, person.user,
                        calendar_ids=f"{cal_id.upper()},{person.user.calendar_id}")
    assert [s["calendar_id"] for s in body["sources"]] == [cal_id, person.user.calendar_id]
    assert [i["title"] for i in external(body)] == ["Selected?"]
    # Another user's xcal_ is not found.
    stranger = world.server.create_user()
    status, err, _ = await api.get("/v1/agenda", stranger, params={"calendar_ids": cal_id})
    assert_error(status, err, 404, "resource_not_found", "calendar_ids")
    code, bad = cli(world, "select-calendar", "--id", "cal_" + "0" * 32, "--selected", "true")
    assert code == 1 and "xcal_" in bad["error"]


async def connected_beside_a_host(world: World, person: Person, api: Api
                                  ) -> tuple[str, str, User, dict[str, Any]]:
    """The person's account connected and synced (its account and first calendar),
    and another user with a profile to subscribe to."""
    out = connect(world, person)
    account, cal_id = out["account_id"], out["calendars"][0]["id"]
    await settled(world, account)
    host = world.server.create_user()
    return account, cal_id, host, await new_profile(api, host)


async def test_subscription_copies_are_kept_in_step_and_removed(
        world: World, person: Person, api: Api) -> None:
    account, cal_id, host, profile = await connected_beside_a_host(world, person, api)
    d = in_days(8)
    event = await new_event(api, host, profile, title="Concert",
                            start_time=f"{d.isoformat()}T20:00", end_time=f"{d.isoformat()}T22:00",
                            end_timezone="Europe/Paris")
    device = other_device(world, person)

    def remote() -> dict[str, Any]:
        found = {}
        for obj in device.events():
            for comp in icalendar.Calendar.from_ical(obj.data).walk("VEVENT"):
                found[str(comp["UID"])] = comp
        return found

    status, sub, _ = await api.post("/v1/subscriptions", person.user, json={
        "subscription_type": "profile", "profile_id": profile["id"],
        "external_calendar_ids": [cal_id]})
    assert status == 201, sub
    uid = f"{event['id']}@kalends"

    async def has_copy(title: str, status_: str = "CONFIRMED") -> bool:
        await settled(world, account)
        comp = remote().get(uid)
        return comp is not None and str(comp["SUMMARY"]) == title and \
            str(comp.get("STATUS")) == status_

    await eventually(lambda: has_copy("Concert"), "copy pushed")
    comp = remote()[uid]
    assert comp["DTSTART"].dt == datetime(d.year, d.month, d.day, 20, tzinfo=PARIS)
    assert len([u for u in remote() if u == uid]) == 1

    # Mirror removal: the copy comes back on the next sync, but an agenda that
    # shows its source event does not show it twice.
    await sync(world, account)
    body = await agenda(api, person.user)
    assert [i["title"] for i in body["items"]].count("Concert") == 1
    # Without the personal calendar the copy is the only one, and it shows.
    body = await agenda(api, person.user, calendar_ids=cal_id)
    assert [i["title"] for i in body["items"]] == ["Concert"]

    status, _, _ = await api.patch(f"/v1/events/{event['id']}", host,
                                   json={"title": "Concert (new hall)"})
    assert status == 200
    await eventually(lambda: has_copy("Concert (new hall)"), "copy updated")
    status, _, _ = await api.post(f"/v1/events/{event['id']}/reschedule", host,
                                  json={"start_time": f"{d.isoformat()}T21:00",
                                        "start_timezone": "Europe/Paris"})
    assert status == 200

    async def moved() -> bool:
        await settled(world, account)
        comp = remote().get(uid)
        return comp is not None and comp["DTSTART"].dt.hour == 21

    await eventually(moved, "copy rescheduled")
    status, _, _ = await api.post(f"/v1/events/{event['id']}/cancel", host, json={})
    assert status == 200
    await eventually(lambda: has_copy("Concert (new hall)", "CANCELLED"), "copy cancelled")

    # Unsubscribing removes the copy from the provider.
    status, _, _ = await api.delete(f"/v1/subscriptions/{sub['id']}", person.user)
    assert status == 204

    async def gone() -> bool:
        await settled(world, account)
        return uid not in remote()

    await eventually(gone, "copy removed on unsubscribe")


async def test_access_lost_and_deleted_events_remove_copies(
        world: World, person: Person, api: Api) -> None:
    account, cal_id, host, profile = await connected_beside_a_host(world, person, api)
    d = in_days(9)
    one = await new_event(api, host, profile, title="One", start_time=f"{d.isoformat()}T10:00")
    two = await new_event(api, host, profile, title="Two", start_time=f"{d.isoformat()}T12:00")
    status, sub, _ = await api.post("/v1/subscriptions", person.user, json={
        "subscription_type": "profile", "profile_id": profile["id"],
        "external_calendar_ids": [cal_id]})
    assert status == 201, sub
    device = other_device(world, person)

    async def uids() -> set[str]:
        await settled(world, account)
        return {str(c["UID"]) for o in device.events()
                for c in icalendar.Calendar.from_ical(o.data).walk("VEVENT")}

    async def exactly(expected: set[str]) -> bool:
        return await uids() == expected

    await eventually(lambda: exactly({f"{one['id']}@kalends", f"{two['id']}@kalends"}),
                     "both pushed")
    status, _, _ = await api.delete(f"/v1/events/{one['id']}", host)
    assert status == 204
    await eventually(lambda: exactly({f"{two['id']}@kalends"}), "deleted event removed")
    status, _, _ = await api.patch(f"/v1/profiles/{profile['id']}", host,
                                   json={"is_private": True})
    assert status == 200
    await eventually(lambda: exactly(set()), "copies removed when access is lost")


async def test_read_only_target_refused_at_subscribe(
        world: World, person: Person, api: Api) -> None:
    out = connect(world, person)
    cal_id = out["calendars"][0]["id"]
    await settled(world, out["account_id"])
    # As a provider reports a calendar shared read-only.
    world.server.call(world.server.db.execute(
        "UPDATE external_calendars SET can_edit = false WHERE id = $1", cal_id))
    host = world.server.create_user()
    profile = await new_profile(api, host)
    status, err, _ = await api.post("/v1/subscriptions", person.user, json={
        "subscription_type": "profile", "profile_id": profile["id"],
        "external_calendar_ids": [cal_id]})
    assert_error(status, err, 400, "invalid_field", "external_calendar_ids.0")
    status, page, _ = await api.get("/v1/subscriptions", person.user)
    assert page["data"] == []


async def test_disconnect_removes_everything_that_came_from_or_went_to_the_account(
        world: World, person: Person, api: Api) -> None:
    device = other_device(world, person)
    d = in_days(3)
    device.save_event(vcalendar(vevent("mine@dev", "Mine", stamp(d, 9), stamp(d, 10))))
    account, cal_id, host, profile = await connected_beside_a_host(world, person, api)
    event = await new_event(api, host, profile, title="Pushed",
                            start_time=f"{d.isoformat()}T18:00")
    status, sub, _ = await api.post("/v1/subscriptions", person.user, json={
        "subscription_type": "profile", "profile_id": profile["id"],
        "external_calendar_ids": [cal_id]})
    assert status == 201

    async def pushed() -> bool:
        await settled(world, account)
        return any(f"{event['id']}@kalends" in o.data for o in device.events())

    await eventually(pushed, "copy pushed")
    code, result = cli(world, "disconnect-calendars", "--account", account)
    assert code == 0, result
    assert result == {"account_id": account, "removed_calendars": [cal_id]}
    # The copy is gone from the provider; what the user made there stays.
    remaining = [o.data for o in device.events()]
    assert len(remaining) == 1 and "mine@dev" in remaining[0]
    db = world.server.db
    for table, column in (("external_calendars", "id"), ("external_events", "calendar_id"),
                          ("external_pushes", "calendar_id")):
        assert world.server.call(db.fetchval(
            f"SELECT count(*) FROM {table} WHERE {column} = $1", cal_id)) == 0
    # The subscription stays, without the target that is gone.
    status, sub_now, _ = await api.get(f"/v1/subscriptions/{sub['id']}", person.user)
    assert status == 200 and sub_now["is_active"] is True
    assert world.server.call(db.fetchval(
        "SELECT external_calendar_ids FROM subscriptions WHERE id = $1", sub["id"])) == []
    status, page, _ = await api.get("/v1/external-calendars", person.user)
    assert page["data"] == []
    body = await agenda(api, person.user)
    assert cal_id not in {s["calendar_id"] for s in body["sources"]}
    code, again = cli(world, "disconnect-calendars", "--account", account)
    assert code == 1 and "no connected account" in again["error"]


async def test_agenda_cap_and_complete_with_connected_items(
        world: World, person: Person, api: Api) -> None:
    device = other_device(world, person)
    start = in_days(1)
    device.save_event(vcalendar(vevent("many@dev", "Hourly", stamp(start, 0),
                                       stamp(start, 0, 30), "RRULE:FREQ=HOURLY;COUNT=400")))
    out = connect(world, person)
    await settled(world, out["account_id"])
    body = await agenda(api, person.user, date=start.isoformat(), days="31")
    assert len(external(body)) == 400 and body["complete"] is True
    # Personal events fill the rest: 150 more makes 550, cut at 500, sorted.
    await asyncio.gather(*(api.post(
        f"/v1/calendars/{person.user.calendar_id}/events", person.user, json={
            "title": f"Mine {n}", "start_time": f"{(start + timedelta(days=1)).isoformat()}T"
            f"{n % 24:02d}:{n // 24:02d}", "start_timezone": "Europe/Paris"})
        for n in range(150)))
    body = await agenda(api, person.user, date=start.isoformat(), days="31")
    assert len(body["items"]) == 500
    assert body["complete"] is False and body["incomplete_reason"] == "max_items"
    starts = [(i["start"], i["occurrence_id"]) for i in body["items"]]
    assert starts == sorted(starts)


async def test_mcp_tool_lists_the_same_calendars_as_rest(
        world: World, person: Person, api: Api) -> None:
    out = connect(world, person)
    headers = {"MCP-Protocol-Version": "2025-11-25", "Accept": "application/json",
               "X-MCP-Toolsets": "external-calendars"}
    status, listed, _ = await api.post("/mcp-developer", person.user, headers=headers, json={
        "jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}})
    assert status == 200, listed
    tool = next(t for t in listed["result"]["tools"] if t["name"] == "listExternalCalendars")
    assert tool["annotations"]["readOnlyHint"] is True
    status, called, _ = await api.post("/mcp-developer", person.user, headers=headers, json={
        "jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "listExternalCalendars", "arguments": {"limit": 10}}})
    assert status == 200, called
    _, rest, _ = await api.get("/v1/external-calendars", person.user, params={"limit": "10"})
    assert called["result"]["structuredContent"] == rest
    assert [c["id"] for c in rest["data"]] == [c["id"] for c in out["calendars"]]


async def test_calendars_added_and_removed_on_the_provider(
        world: World, person: Person, api: Api) -> None:
    principal = world.radicale.client(person.login, person.password).principal()
    out = connect(world, person)
    account = out["account_id"]
    await settled(world, account)
    side = principal.make_calendar(name="Side", cal_id="side")
    await sync(world, account)
    page = await api.get("/v1/external-calendars", person.user)
    names = {c["name"]: c["id"] for c in page[1]["data"]}
    assert set(names) == {"Work", "Side"}
    host = world.server.create_user()
    profile = await new_profile(api, host)
    status, sub, _ = await api.post("/v1/subscriptions", person.user, json={
        "subscription_type": "profile", "profile_id": profile["id"],
        "external_calendar_ids": [names["Side"], names["Work"]]})
    assert status == 201, sub
    side.delete()
    await sync(world, account)
    page = await api.get("/v1/external-calendars", person.user)
    assert [c["name"] for c in page[1]["data"]] == ["Work"]
    assert world.server.call(world.server.db.fetchval(
        "SELECT external_calendar_ids FROM subscriptions WHERE id = $1", sub["id"])) == \
        [names["Work"]]


# The cases test_ical_interop.py::test_the_cases_that_were_read_wrong reads in the feed and
# iMIP, and two zones more, as pushed copies (docs/api-choices.md, "ICS feeds and attendee
# e-mail"): (title, REST body).
_PUSHED_CASES: list[tuple[str, dict[str, Any]]] = [
    # A Sunday start that BYDAY=MO,TH does not select: the agenda has 8, from Monday.
    ("Off-rule start", {"start_time": "2027-03-07T09:00", "end_time": "2027-03-07T10:00",
                        "end_timezone": "Europe/Paris",
                        "recurrence_rule": "FREQ=WEEKLY;BYDAY=MO,TH;COUNT=8"}),
    # The `RRULE:` prefix a rule may be sent with (docs/api-choices.md, "Events, RSVPs and
    # series"), with UNTIL first.
    ("Prefixed rule", {"start_time": "2027-06-07T16:00", "end_time": "2027-06-07T17:00",
                       "end_timezone": "Europe/Paris",
                       "recurrence_rule": "RRULE:UNTIL=20270930T000000Z;BYDAY=MO;FREQ=WEEKLY"}),
    # Summer after 2038.
    ("After 2038", {"start_time": "2044-07-15T09:00", "recurrence_rule": "FREQ=YEARLY;COUNT=2"}),
    ("All days", {"is_all_day": True, "start_date": "2027-03-27", "end_date": "2027-03-29",
                  "recurrence_rule": "FREQ=WEEKLY;COUNT=3"}),
    ("New York", {"start_timezone": "America/New_York", "start_time": "2027-07-01T12:00",
                  "end_time": "2027-07-01T13:00", "end_timezone": "America/New_York",
                  "recurrence_rule": "FREQ=MONTHLY;BYDAY=1TH;COUNT=6"}),
    # A half-hour DST change.
    ("Lord Howe", {"start_timezone": "Australia/Lord_Howe", "start_time": "2027-09-20T10:00",
                   "end_time": "2027-09-20T11:00", "end_timezone": "Australia/Lord_Howe",
                   "recurrence_rule": "FREQ=DAILY;COUNT=30"}),
]


def _rrule_values(text: str) -> list[str]:
    """The values of every RRULE line of `text`, unfolded (RFC 5545 §3.1)."""
    lines = re.sub(r"\r?\n[ \t]", "", text).splitlines()
    return [line.split(":", 1)[1] for line in lines if re.match(r"(?i)RRULE[;:]", line)]


async def _pushed(world: World, person: Person, api: Api, bodies: list[dict[str, Any]],
                  renamed: str | None = None
                  ) -> tuple[list[dict[str, Any]], dict[str, str], dict[str, int]]:
    """The events of `bodies` that Kalends accepts, made in a host's profile (the
    first renamed `renamed`, a new revision), the person subscribed with a copy of
    each pushed to their CalDAV calendar; the events, each copy's text by UID as
    Radicale serves it, and the feed's SEQUENCE by UID."""
    account, cal_id, host, profile = await connected_beside_a_host(world, person, api)
    events = await create_events(api, host, profile["id"], bodies)
    if renamed is not None:
        status, events[0], _ = await api.patch(f"/v1/events/{events[0]['id']}", host,
                                               json={"title": renamed})
        assert status == 200, events[0]

    status, sub, _ = await api.post("/v1/subscriptions", person.user, json={
        "subscription_type": "profile", "profile_id": profile["id"],
        "external_calendar_ids": [cal_id]})
    assert status == 201, sub
    uids = [f"{e['id']}@kalends" for e in events]
    device = other_device(world, person)
    copies: dict[str, str] = {}  # by UID, the text Radicale serves
    titles: dict[str, str] = {}

    async def all_pushed() -> bool:
        await settled(world, account)
        copies.clear()
        for obj in device.events():
            for comp in icalendar.Calendar.from_ical(obj.data).walk("VEVENT"):
                copies[str(comp["UID"])] = obj.data
                titles[str(comp["UID"])] = str(comp["SUMMARY"])
        made = world.server.call(world.server.db.fetchval(
            "SELECT count(*) FROM calendar_events WHERE calendar_id = $1 AND source_event_id"
            " = ANY($2::text[])", person.user.calendar_id, [e["id"] for e in events]))
        return made == len(events) and set(uids) <= set(copies) and (
            renamed is None or titles[uids[0]] == renamed)

    await eventually(all_pushed, "every copy pushed, with the change")
    async with aiohttp.ClientSession() as session, session.get(
            f"{world.server.url}/v1/profiles/{profile['id']}/events.ics") as r:
        assert r.status == 200
        feed = icalendar.Calendar.from_ical(await r.read())
    sequences = {str(c["UID"]): int(c.get("SEQUENCE", 0)) for c in feed.walk("VEVENT")}
    return events, copies, sequences


async def _read_alike(world: World, person: Person, event: dict[str, Any], text: str,
                      sequences: dict[str, int]) -> list[Any]:
    """Check the copy of `event` (`text`, as Radicale serves it): the feed's SEQUENCE,
    the rule alone, and ical.js and `recurring-ical-events` reading the instants of
    the subscriber's agenda; the agenda's occurrences."""
    uid = f"{event['id']}@kalends"
    copy = next(c for c in icalendar.Calendar.from_ical(text).walk("VEVENT")
                if str(c["UID"]) == uid)
    assert int(copy.get("SEQUENCE", 0)) == sequences[uid], (event["title"], text)
    assert not [v for v in _rrule_values(text) if "RRULE:" in v.upper()], text

    window = window_of(event)
    expected, complete = world.server.call(agenda_occurrences(
        world.server.db, person.user.email, person.user.calendar_id, window))
    assert complete, "the agenda expanded everything"
    want = within(expected.get(event["title"], []), window)
    by_icaljs = await asyncio.to_thread(icaljs_occurrences, [text], window)
    readers = {"ical.js": by_icaljs[0],
               "recurring-ical-events": python_occurrences(text, window)}
    zones = {z for z in (event.get("start_timezone"), event.get("end_timezone")) if z}
    for name, found in readers.items():
        icaljs = name == "ical.js"
        got = beside_changes(within(found.get(uid, []), window), zones, starts_too=icaljs)
        here = beside_changes(want, zones, starts_too=icaljs)
        assert got == here, (
            f"{name} reads {len(got)} occurrences of the pushed {event['title']!r} "
            f"({event.get('recurrence_rule')}), the agenda {len(want)}; only the reader: "
            f"{[o for o in got if o not in here][:5]}; only the agenda: "
            f"{[o for o in here if o not in got][:5]}")
    return want


async def test_pushed_copies_read_alike_and_carry_the_feeds_sequence(
        world: World, person: Person, api: Api) -> None:
    """A copy pushed to CalDAV is read by ical.js and by `recurring-ical-events` to the
    instants of the subscriber's agenda, starts at its first occurrence, writes its rule
    alone and carries the feed's UID and SEQUENCE (docs/api-choices.md, "ICS feeds and attendee
    e-mail")."""
    events, copies, sequences = await _pushed(
        world, person, api,
        [{"title": title, "start_timezone": "Europe/Paris", **body}
         for title, body in _PUSHED_CASES],
        renamed="Off-rule start (moved room)")
    assert len(events) == len(_PUSHED_CASES)
    assert sequences[f"{events[0]['id']}@kalends"] == 1, "a title change is a new revision"
    for event in events:
        text = copies[f"{event['id']}@kalends"]
        assert _rrule_values(text), text
        want = await _read_alike(world, person, event, text, sequences)
        assert want, event["title"]
        if event is events[0]:  # from its first occurrence, a Monday; 8 all the same
            assert len(want) == 8, want
            [copy] = icalendar.Calendar.from_ical(text).walk("VEVENT")
            start = copy["DTSTART"]
            assert str(start.params.get("TZID")) == "Europe/Paris", text
            assert start.dt == datetime(2027, 3, 8, 9, 0, tzinfo=PARIS), text


@given(st.lists(st.integers(0, 10**6), min_size=3, max_size=6).flatmap(
    lambda keys: st.tuples(*(event_bodies(f"Generated {i}-{k}") for i, k in enumerate(keys)))))
@settings(max_examples=4, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
def test_generated_events_pushed_read_alike(
        world: World, bodies: tuple[dict[str, Any], ...]) -> None:
    """The generated events of test_ical_interop.py, pushed to CalDAV and read back
    (back since the writer gives ical.js yearly rules in a form it reads alike:
    tests/domain/test_ical_rule_forms.py)."""
    async def run() -> None:
        person = await asyncio.to_thread(new_person, world.server, world.radicale)
        async with aiohttp.ClientSession() as session:
            api = Api(session, world.server.url)
            events, copies, sequences = await _pushed(world, person, api, list(bodies))
            for event in events:
                await _read_alike(world, person, event, copies[f"{event['id']}@kalends"],
                                  sequences)

    asyncio.run(run())
