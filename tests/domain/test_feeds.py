"""ICS feeds (docs/api-choices.md, "ICS feeds and attendee e-mail"):
`GET /v1/profiles/{profile_id}/events.ics`, read by anyone for a public profile, checked by parsing
it back with `icalendar`, by expanding it with `recurring-ical-events` (an independent
implementation) against the agenda's own expansion, and through ETag and 304."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from typing import Any
from zoneinfo import ZoneInfo

import aiohttp
import recurring_ical_events  # type: ignore[import-untyped]
from conftest import Api, LiveServer, assert_error, new_event, new_profile
from icalendar import Calendar

from domain import recurrence

PARIS = "Europe/Paris"


async def _feed(live_server: LiveServer, profile_id: str, **headers: str
                ) -> tuple[int, bytes, Any]:
    async with aiohttp.ClientSession() as session, session.get(
        f"{live_server.url}/v1/profiles/{profile_id}/events.ics", headers=headers
    ) as response:
        return response.status, await response.read(), response.headers


def _events(body: bytes) -> dict[str, Any]:
    return {str(e["UID"]): e for e in Calendar.from_ical(body).walk("VEVENT")}


async def test_a_public_profiles_feed_carries_its_public_events(
    api: Api, live_server: LiveServer,
) -> None:
    owner = live_server.create_user()
    profile = await new_profile(api, owner, display_name="Jazz club")
    timed = await new_event(api, owner, profile, title="Quartet", location="Cellar",
                            start_time="2031-03-20T21:00", end_time="2031-03-20T23:30",
                            start_timezone=PARIS, end_timezone=PARIS)
    weekly = await new_event(api, owner, profile, title="Jam", start_time="2031-03-20T19:30",
                             end_time="2031-03-20T22:00", start_timezone=PARIS,
                             end_timezone=PARIS, recurrence_rule="FREQ=WEEKLY;COUNT=4")
    status, day, _ = await api.post(f"/v1/profiles/{profile['id']}/events", owner, json={
        "title": "Festival", "is_all_day": True, "start_date": "2031-06-21",
        "end_date": "2031-06-23", "start_timezone": PARIS})
    assert status == 201, day
    point = await new_event(api, owner, profile, title="Doors", start_time="2031-04-01T18:00",
                            start_timezone="America/New_York")
    gone = await new_event(api, owner, profile, title="Cancelled gig",
                           start_time="2031-05-01T20:00", start_timezone=PARIS)
    status, _, _ = await api.post(f"/v1/events/{gone['id']}/cancel", owner,
                                  json={"reason": "Ill"})
    assert status == 200
    hidden = await new_event(api, owner, profile, title="Staff party", is_private=True)

    status, body, headers = await _feed(live_server, profile["id"])
    assert status == 200, body
    assert headers["Content-Type"] == "text/calendar; charset=utf-8"
    cal = Calendar.from_ical(body)
    assert str(cal["X-WR-CALNAME"]) == "Jazz club"
    assert cal["REFRESH-INTERVAL"].params["VALUE"] == "DURATION"
    assert cal.decoded("REFRESH-INTERVAL").total_seconds() == 3600
    assert cal["X-PUBLISHED-TTL"].to_ical() == b"PT1H"  # unknown to icalendar: raw
    zones = {str(z["TZID"]) for z in cal.walk("VTIMEZONE")}
    assert zones == {PARIS, "America/New_York"}

    events = _events(body)
    assert set(events) == {f"{e['id']}@kalends" for e in (timed, weekly, day, point, gone)}
    assert f"{hidden['id']}@kalends" not in events

    quartet = events[f"{timed['id']}@kalends"]
    assert quartet["DTSTART"].params["TZID"] == PARIS
    assert quartet.decoded("DTSTART") == datetime(2031, 3, 20, 21, 0, tzinfo=ZoneInfo(PARIS))
    assert quartet.decoded("DTEND") == datetime(2031, 3, 20, 22, 30, tzinfo=UTC)
    assert (str(quartet["SUMMARY"]), str(quartet["LOCATION"])) == ("Quartet", "Cellar")
    assert str(quartet["STATUS"]) == "CONFIRMED" and quartet.decoded("SEQUENCE") == 0

    festival = events[f"{day['id']}@kalends"]
    assert festival.decoded("DTSTART") == date(2031, 6, 21)
    assert festival.decoded("DTEND") == date(2031, 6, 23)
    doors = events[f"{point['id']}@kalends"]
    assert "DTEND" not in doors
    assert doors.decoded("DTSTART") == datetime(2031, 4, 1, 22, 0, tzinfo=UTC)
    assert str(events[f"{gone['id']}@kalends"]["STATUS"]) == "CANCELLED"


async def test_a_recurring_event_expands_as_the_agenda_expands_it(
    api: Api, live_server: LiveServer,
) -> None:
    owner = live_server.create_user()
    profile = await new_profile(api, owner)
    rules = ["FREQ=WEEKLY;COUNT=6", "FREQ=WEEKLY;BYDAY=MO,TH;UNTIL=20310420T000000Z",
             "FREQ=MONTHLY;BYDAY=-1SU;COUNT=4", "FREQ=DAILY;INTERVAL=3;COUNT=20"]
    created = [await new_event(api, owner, profile, title=f"Series {i}", recurrence_rule=rule,
                               start_time="2031-03-16T09:30", end_time="2031-03-16T10:30",
                               start_timezone=PARIS, end_timezone=PARIS)
               for i, rule in enumerate(rules)]
    # All-day, started on a day the rule skips: Kalends' first occurrence is the 19th.
    status, yearly, _ = await api.post(f"/v1/profiles/{profile['id']}/events", owner, json={
        "title": "Fair", "is_all_day": True, "start_date": "2031-03-16",
        "end_date": "2031-03-17", "start_timezone": PARIS,
        "recurrence_rule": "FREQ=WEEKLY;BYDAY=WE;COUNT=3"})
    assert status == 201, yearly
    status, body, _ = await _feed(live_server, profile["id"])
    assert status == 200
    fair = recurring_ical_events.of(Calendar.from_ical(body)).between(
        date(2031, 3, 1), date(2031, 5, 1))
    assert sorted(e.decoded("DTSTART") for e in fair if str(e["UID"]).startswith(
        yearly["id"])) == [date(2031, 3, 19), date(2031, 3, 26), date(2031, 4, 2)]
    window = (datetime(2031, 3, 1, tzinfo=UTC), datetime(2031, 8, 1, tzinfo=UTC))
    expanded: dict[str, list[datetime]] = {}
    for occurrence in recurring_ical_events.of(Calendar.from_ical(body)).between(*window):
        start = occurrence.decoded("DTSTART")
        if isinstance(start, datetime):
            expanded.setdefault(str(occurrence["UID"]), []).append(start.astimezone(UTC))
    for event, rule in zip(created, rules, strict=True):
        ours = recurrence.occurrences(rule, datetime(2031, 3, 16, 9, 30), ZoneInfo(PARIS),
                                      *window, limit=500)
        # Across the change to summer time on 30 March: 09:30 Paris stays 09:30.
        assert sorted(expanded[f"{event['id']}@kalends"]) == [o.start for o in ours.items]
        assert len(ours.items) > 2


async def test_etag_and_304_and_sequence(api: Api, live_server: LiveServer) -> None:
    owner = live_server.create_user()
    profile = await new_profile(api, owner)
    event = await new_event(api, owner, profile, title="Gig")
    status, first, headers = await _feed(live_server, profile["id"])
    etag = headers["ETag"]
    assert status == 200 and etag.startswith('"')
    assert "max-age=3600" in headers["Cache-Control"]

    for tag in (etag, f"W/{etag}", f'"other", {etag}', "*"):
        status, body, again = await _feed(live_server, profile["id"], **{"If-None-Match": tag})
        assert (status, body, again["ETag"]) == (304, b"", etag)
    status, body, _ = await _feed(live_server, profile["id"], **{"If-None-Match": '"other"'})
    assert (status, body) == (200, first)

    status, _, _ = await api.post(f"/v1/events/{event['id']}/reschedule", owner, json={
        "start_time": "2031-05-13T10:00", "start_timezone": PARIS})
    assert status == 200
    status, body, headers = await _feed(live_server, profile["id"], **{"If-None-Match": etag})
    assert status == 200 and headers["ETag"] != etag
    gig = _events(body)[f"{event['id']}@kalends"]
    assert gig.decoded("SEQUENCE") == 1
    assert gig.decoded("DTSTART") == datetime(2031, 5, 13, 10, tzinfo=ZoneInfo(PARIS))

    # RSVP settings live on the event row but are nothing a calendar shows.
    status, _, _ = await api.patch(f"/v1/events/{event['id']}/rsvp-settings", owner,
                                   json={"allow_waitlist": False})
    assert status == 200
    status, body, _ = await _feed(live_server, profile["id"])
    assert _events(body)[f"{event['id']}@kalends"].decoded("SEQUENCE") == 1
    status, _, _ = await api.post(f"/v1/events/{event['id']}/cancel", owner, json={})
    status, body, _ = await _feed(live_server, profile["id"])
    assert _events(body)[f"{event['id']}@kalends"].decoded("SEQUENCE") == 2

    status, _, _ = await api.delete(f"/v1/events/{event['id']}", owner)
    assert status == 204
    status, body, _ = await _feed(live_server, profile["id"])
    assert status == 200 and _events(body) == {}


async def test_only_public_live_profiles_have_a_feed(api: Api, live_server: LiveServer) -> None:
    owner = live_server.create_user()
    private = await new_profile(api, owner, is_private=True)
    await new_event(api, owner, private)
    gone = await new_profile(api, owner)
    status, _, _ = await api.delete(f"/v1/profiles/{gone['id']}", owner)
    assert status == 204
    for profile_id in (private["id"], gone["id"], "prf_" + "0" * 32):
        status, body, _ = await _feed(live_server, profile_id)
        assert_error(status, _json(body), 404, "resource_not_found", "profile_id")
    status, body, _ = await _feed(live_server, "nonsense")
    assert_error(status, _json(body), 400, "invalid_id", "profile_id")


def _json(body: bytes) -> Any:
    return json.loads(body)


async def test_occurrences_changed_alone_are_overrides_and_exdates_and_change_the_etag(
    api: Api, live_server: LiveServer,
) -> None:
    """docs/api-choices.md, "ICS feeds and attendee e-mail": a cancelled occurrence is an
    EXDATE of its event, a changed one a VEVENT of the same UID with its RECURRENCE-ID;
    each change (a restore too) is a new ETag, and the feed as it was its old one."""
    owner = live_server.create_user()
    profile = await new_profile(api, owner)
    event = await new_event(api, owner, profile, title="Jam", start_time="2031-03-20T19:30",
                            end_time="2031-03-20T22:00", start_timezone=PARIS,
                            end_timezone=PARIS, recurrence_rule="FREQ=WEEKLY;COUNT=4")
    uid = f"{event['id']}@kalends"
    path = f"/v1/events/{event['id']}/occurrences/{event['id']}:"
    etags: list[str] = []

    async def read() -> list[Any]:
        status, body, headers = await _feed(live_server, profile["id"])
        assert status == 200
        etags.append(headers["ETag"])
        return [e for e in Calendar.from_ical(body).walk("VEVENT") if str(e["UID"]) == uid]

    [master] = await read()
    # 27 March 19:30 is still winter time in Paris (18:30 UTC), 3 April summer (17:30).
    status, _, _ = await api.post(path + "20310327T183000Z/cancel", owner, json={})
    assert status == 200
    [master] = await read()
    assert master["EXDATE"].to_ical() == b"20310327T193000"
    assert master["EXDATE"].params["TZID"] == PARIS
    status, _, _ = await api.patch(path + "20310403T173000Z", owner, json={
        "title": "Jam (late)", "start_time": "2031-04-03T21:00", "end_time": "2031-04-03T23:00",
        "start_timezone": PARIS, "end_timezone": PARIS})
    assert status == 200, _
    master, moved = await read()
    assert "RRULE" in master and "RRULE" not in moved
    assert moved.decoded("RECURRENCE-ID") == datetime(2031, 4, 3, 19, 30, tzinfo=ZoneInfo(PARIS))
    assert moved.decoded("DTSTART") == datetime(2031, 4, 3, 21, tzinfo=ZoneInfo(PARIS))
    assert (str(moved["SUMMARY"]), moved.decoded("SEQUENCE")) == ("Jam (late)", 1)
    for slot in ("20310327T183000Z", "20310403T173000Z"):
        status, _, _ = await api.post(path + slot + "/restore", owner, json={})
        assert status == 200
        vevents = await read()
    assert len(vevents) == 1 and "EXDATE" not in vevents[0]
    assert len(set(etags[:-1])) == 4 and etags[-1] == etags[0], etags
