"""Calendars that every client reads alike (docs/api-choices.md, "ICS feeds and attendee e-mail"):
generated events are published, and the ICS feed and an iMIP message, read by Mozilla's ical.js
(with the VTIMEZONEs Kalends wrote) and by `icalendar` + `recurring-ical-events`, must
give exactly the instants the agenda gives a subscriber, over a year from each
event's start. The same for copies pushed to CalDAV: test_connected_caldav.py."""

from __future__ import annotations

import asyncio
import email
import time
import zoneinfo
from datetime import UTC, datetime, timedelta
from email.policy import default
from typing import Any
from zoneinfo import ZoneInfo

import aiohttp
import pytest
from conftest import Api, LiveServer, User, new_profile
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from ical_readers import (
    Window,
    agenda_occurrences,
    beside_changes,
    create_events,
    event_bodies,
    icaljs_each,
    icaljs_occurrences,
    imported_occurrences,
    python_occurrences,
    window_of,
    within,
)

from db import events as event_store
from domain import expansion
from domain.connected.provider import Component as RemoteComponent
from domain.notify import attendee_mail, ics

_SYNC_SECONDS = 30


async def _subscribed(live: LiveServer, api: Api, owner: User, reader: User,
                      bodies: list[dict[str, Any]]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A public profile with the events of `bodies` that Kalends accepts, and
    `reader` subscribed to it with every copy made."""
    profile = await new_profile(api, owner)
    created = await create_events(api, owner, profile["id"], bodies)
    status, sub, _ = await api.post("/v1/subscriptions", reader, json={
        "subscription_type": "profile", "profile_id": profile["id"]})
    assert status == 201, sub
    deadline = time.monotonic() + _SYNC_SECONDS
    while await live.db.fetchval(
            "SELECT count(*) FROM calendar_events WHERE calendar_id = $1 AND source_event_id"
            " = ANY($2::text[])", reader.calendar_id, [e["id"] for e in created]
    ) < len(created):
        assert time.monotonic() < deadline, "subscription copies not made"
        await asyncio.sleep(0.05)
    return profile, created


def _mime_calendar(message: email.message.EmailMessage) -> str:
    parsed = email.message_from_bytes(message.as_bytes(), policy=default)
    part = parsed.get_body(preferencelist=("calendar",))
    assert part is not None
    return str(part.get_content())


async def _compare(live: LiveServer, owner: User, reader: User,
                   bodies: list[dict[str, Any]]) -> None:
    async with aiohttp.ClientSession() as session:
        api = Api(session, live.url)
        profile, created = await _subscribed(live, api, owner, reader, bodies)
        async with session.get(f"{live.url}/v1/profiles/{profile['id']}/events.ics") as r:
            assert r.status == 200
            feed = await r.read()
    imips = []
    for event in created:
        row = await event_store.for_mail(live.db, event["id"])
        rsvp = {"attendee_first_name": "Ada", "attendee_last_name": None,
                "attendee_email": "ada@example.com", "status": "going"}
        imips.append(_mime_calendar(await expansion.run(attendee_mail.message, row, rsvp,
                                                        "REQUEST", "events@kalends.test")))
    # ical.js reads them all in one run of node: the feed and each iMIP, in each
    # event's window.
    by_icaljs = await asyncio.to_thread(icaljs_each, [
        (text, window_of(event)) for event, imip in zip(created, imips, strict=True)
        for text in (feed, imip)])
    for i, (event, imip) in enumerate(zip(created, imips, strict=True)):
        window = window_of(event)
        expected, complete = await agenda_occurrences(live.db, reader.email,
                                                      reader.calendar_id, window)
        assert complete, "the agenda expanded everything"
        want = within(expected.get(event["title"], []), window)
        uid = f"{event['id']}@kalends"  # docs/api-choices.md, "ICS feeds and attendee e-mail"
        readers = {"ical.js (feed)": by_icaljs[2 * i], "ical.js (iMIP)": by_icaljs[2 * i + 1],
                   "recurring-ical-events (feed)": python_occurrences(feed, window),
                   "recurring-ical-events (iMIP)": python_occurrences(imip, window)}
        zones = {z for z in (event.get("start_timezone"), event.get("end_timezone")) if z}
        for name, found in readers.items():
            got = within(found.get(uid, []), window)
            icaljs = name.startswith("ical.js")
            got = beside_changes(got, zones, starts_too=icaljs)
            expected_here = beside_changes(want, zones, starts_too=icaljs)
            assert got == expected_here, _difference(name, event, window, got, expected_here)


def _difference(reader: str, event: dict[str, Any], window: Window, got: list[Any],
                want: list[Any]) -> str:
    extra = [o for o in got if o not in want][:5]
    missing = [o for o in want if o not in got][:5]
    return (f"{reader} reads {len(got)} occurrences, the agenda {len(want)}, for "
            f"{ {k: event.get(k) for k in ('start_time', 'end_time', 'start_timezone', 'end_timezone', 'start_date', 'end_date', 'recurrence_rule')} }"
            f" in [{window.start:%Y-%m-%d}, {window.end:%Y-%m-%d}); only the reader: {extra};"
            f" only the agenda: {missing}")


@pytest.mark.slow
@given(st.lists(st.integers(0, 10**6), min_size=1, max_size=4).flatmap(
    lambda keys: st.tuples(*(event_bodies(f"Event {i}-{k}") for i, k in enumerate(keys)))))
@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
def test_feed_and_imip_read_alike_by_icaljs_recurring_ical_events_and_the_agenda(
    live_server: LiveServer, bodies: tuple[dict[str, Any], ...],
) -> None:
    owner, reader = live_server.create_user(), live_server.create_user()
    live_server.call(_compare(live_server, owner, reader, list(bodies)))


@pytest.mark.slow
@pytest.mark.parametrize("body", [
    # A Sunday start that BYDAY=MO,TH does not select: the agenda has 8.
    {"start_time": "2027-03-07T09:00", "end_time": "2027-03-07T10:00",
     "recurrence_rule": "FREQ=WEEKLY;BYDAY=MO,TH;COUNT=8"},
    # The `RRULE:` prefix a request may write (docs/api-choices.md, "Events, RSVPs and
    # series"), with UNTIL first.
    {"start_time": "2027-06-07T16:00", "end_time": "2027-06-07T17:00",
     "recurrence_rule": "RRULE:UNTIL=20270930T000000Z;BYDAY=MO;FREQ=WEEKLY"},
    # Summer after 2038, all-day and a DST gap.
    {"start_time": "2044-07-15T09:00", "recurrence_rule": "FREQ=YEARLY;COUNT=2"},
    {"is_all_day": True, "start_date": "2027-03-27", "end_date": "2027-03-29",
     "recurrence_rule": "FREQ=WEEKLY;COUNT=3"},
    {"start_time": "2027-03-27T02:30", "end_time": "2027-03-27T03:30",
     "recurrence_rule": "FREQ=DAILY;COUNT=3"},
], ids=["off-rule-start", "rrule-prefix", "after-2038", "all-day", "dst-gap"])
def test_the_cases_that_were_read_wrong(live_server: LiveServer, body: dict[str, Any]) -> None:
    owner, reader = live_server.create_user(), live_server.create_user()
    if "end_time" in body:
        body = {**body, "end_timezone": "Europe/Paris"}
    live_server.call(_compare(live_server, owner, reader, [
        {"title": "Case", "start_timezone": "Europe/Paris", **body}]))


# --- Imported events (connected calendars) ----------------------------------------


def _provider_text(body: dict[str, Any]) -> str:
    """`body` as a provider would hold it: DTSTART as given (on or off its rule)."""
    zone = body["start_timezone"]
    lines = ["BEGIN:VEVENT", "UID:imported@provider", "DTSTAMP:20260101T000000Z",
             f"SUMMARY:{body['title']}"]
    if body.get("is_all_day"):
        lines += [f"DTSTART;VALUE=DATE:{body['start_date'].replace('-', '')}",
                  f"DTEND;VALUE=DATE:{body['end_date'].replace('-', '')}"]
    else:
        local = body["start_time"].replace("-", "").replace(":", "") + "00"
        lines.append(f"DTSTART;TZID={zone}:{local}")
        if "end_time" in body:
            end = body["end_time"].replace("-", "").replace(":", "") + "00"
            lines.append(f"DTEND;TZID={body['end_timezone']}:{end}")
    if "recurrence_rule" in body:
        lines.append("RRULE:" + ics.rule_text(body["recurrence_rule"]))
    lines.append("END:VEVENT")
    return "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//provider//EN\r\n" + \
        "\r\n".join(lines) + "\r\nEND:VCALENDAR\r\n"


def _imported(text: str, window: Window) -> tuple[list[Any], str | None]:
    found, reason = imported_occurrences(text, window)
    return [o for occurrences in found.values() for o in occurrences], reason


@pytest.mark.slow
@given(event_bodies("Imported"))
@settings(max_examples=300, deadline=None, derandomize=True)
def test_imported_events_expand_as_recurring_ical_events_reads_them(
        body: dict[str, Any]) -> None:
    # DTSTART is the first instance even where the rule would not select it
    # (docs/api-choices.md, "Connected calendars"): an off-rule start is one of the generated cases.
    text = _provider_text(body)
    start = body.get("start_date") or body["start_time"][:10]
    window = window_of({"start_date": start})
    ours, reason = _imported(text, window)
    assume(reason is None)
    zones = {body["start_timezone"], body.get("end_timezone") or body["start_timezone"]}
    got = beside_changes(within(ours, window), zones, starts_too=False)
    want = beside_changes(within(python_occurrences(text, window).get("imported@provider", []),
                                 window), zones, starts_too=False)
    assert want == got, _difference("recurring-ical-events", body, window, want, got)


def test_an_imported_rule_that_does_not_expand_makes_the_agenda_incomplete() -> None:
    text = _provider_text({"title": "Broken", "start_timezone": "Europe/Paris",
                           "start_time": "2027-03-01T09:00"}).replace(
        "END:VEVENT", "RRULE:FREQ=WEEKLY;BYDAY=MO;COUNT=0\r\nEND:VEVENT")
    window = window_of({"start_date": "2027-03-01"})
    found, reason = _imported(text, window)
    assert found == [] and reason == "expansion_limit"  # left out, and said so


# --- VTIMEZONEs across zones and years --------------------------------------------


def _zones_to_check() -> list[str]:
    """Every ninth zone (by name), and zones whose rules changed or follow none."""
    every = sorted(zoneinfo.available_timezones())
    named = {"Europe/Paris", "America/New_York", "Asia/Kolkata", "Pacific/Chatham",
             "Australia/Lord_Howe", "Africa/Casablanca", "Asia/Jerusalem", "America/Santiago",
             "Europe/Moscow", "America/Sao_Paulo", "Asia/Tehran", "Pacific/Apia",
             "America/Mexico_City", "Europe/Dublin", "Antarctica/Troll", "Asia/Gaza"}
    return sorted(named | set(every[::9]) - {"Factory"})


@pytest.mark.slow
def test_vtimezones_read_by_icaljs_give_zoneinfos_offsets_from_2005_to_2045() -> None:
    # A weekly 12:00 in each zone, 2005 to 2045, through the rule changes of
    # those years (the US in 2007, Russia in 2011 and 2014, Morocco's changes,
    # Mexico's end of DST in 2022, ...): ical.js, reading the VTIMEZONE written,
    # must place every one where zoneinfo does.
    first = datetime(2005, 1, 3, 12)
    weeks = 2140
    texts = []
    zones = _zones_to_check()
    for zone in zones:
        c = RemoteComponent(uid=zone, start=first, zone=zone, rrule=f"FREQ=WEEKLY;COUNT={weeks}")
        texts.append(ics.document([ics.vevent(c, stamp=first.replace(tzinfo=UTC))]))
    window = Window(datetime(2005, 1, 1, tzinfo=UTC), datetime(2046, 1, 1, tzinfo=UTC))
    read = icaljs_occurrences(texts, window)
    wrong = {}
    for zone, found in zip(zones, read, strict=True):
        tz = ZoneInfo(zone)
        want = []
        for week in range(weeks):
            wall = first + timedelta(weeks=week)
            instant = wall.replace(tzinfo=tz).astimezone(UTC)
            if instant < window.end and instant.astimezone(tz).replace(tzinfo=None) == wall:
                want.append(instant)
        got = [o[1] for o in found.get(zone, [])]
        differing = sorted(set(got) ^ set(want))
        if differing:
            wrong[zone] = differing[:3]
    assert not wrong, wrong
