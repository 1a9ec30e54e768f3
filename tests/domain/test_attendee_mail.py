"""Attendee e-mail (iMIP; docs/api-choices.md, "ICS feeds and attendee e-mail"): a real SMTP
server (aiosmtpd) on loopback receives what a cancel or reschedule sends; each message is parsed
with the standard `email` package and `icalendar`, as a mail client and a calendar would."""

from __future__ import annotations

import asyncio
import email
import socket
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import UTC, datetime
from email.message import EmailMessage
from email.policy import default
from typing import Any
from zoneinfo import ZoneInfo

import aiohttp
import pytest
from aiosmtpd.controller import Controller
from conftest import Api, LiveServer, migrated_database, new_event, new_profile
from icalendar import Calendar

from domain import config
from web.services import SETTINGS

SENDER = "events@kalends.test"
PARIS = "Europe/Paris"


class Inbox:
    """An SMTP server's message handler: keeps what it accepts; refuses the first
    `refuse` deliveries with a temporary failure."""

    def __init__(self) -> None:
        self.received: list[tuple[list[str], bytes]] = []
        self.refuse = 0

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        if self.refuse:
            self.refuse -= 1
            return "451 4.3.0 Try again later"
        self.received.append((list(envelope.rcpt_tos), envelope.original_content))
        return "250 OK"

    def wait_for(self, count: int, timeout: float = 30) -> list[EmailMessage]:
        deadline = time.monotonic() + timeout
        while len(self.received) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        return [email.message_from_bytes(raw, policy=default)  # type: ignore[misc]
                for _, raw in self.received]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def mail(database_url: str) -> Iterator[tuple[LiveServer, Inbox]]:
    inbox = Inbox()
    controller = Controller(inbox, hostname="127.0.0.1", port=_free_port())
    controller.start()
    settings = replace(config.load(), smtp_url=f"smtp://127.0.0.1:{controller.port}",
                       mail_from=SENDER)
    # A database of its own: no other test's worker takes these jobs.
    with migrated_database(database_url, "kalends_mail") as dsn:
        live = LiveServer(dsn, settings=settings)
        try:
            yield live, inbox
        finally:
            live.close()
            controller.stop()


async def _attendees(api: Api, live: LiveServer, event: dict[str, Any]) -> dict[str, str]:
    """Five RSVPs; three of them (with an address, going, maybe or waitlist) hear of changes."""
    answers = {"ada@example.com": "going", "bob@example.com": "maybe",
               "cy@example.com": "waitlist", "dee@example.com": "not_going", None: "going"}
    for address, status in answers.items():
        user = live.create_user()
        body = {"status": status, "attendee_first_name": "Guest"}
        if address:
            body["attendee_email"] = address
        code, answer, _ = await api.post(f"/v1/events/{event['id']}/rsvps", user, json=body)
        assert code == 201, answer
    return {a: s for a, s in answers.items() if a and s != "not_going"}


@asynccontextmanager
async def _organizer(mail: tuple[LiveServer, Inbox]
                     ) -> AsyncIterator[tuple[LiveServer, Inbox, Api, Any]]:
    """The mail-sending service, its inbox emptied, a client of it and an organizer."""
    live, inbox = mail
    inbox.received.clear()
    async with aiohttp.ClientSession() as session:
        yield live, inbox, Api(session, live.url), live.create_user()


async def _evensong(api: Api, live: LiveServer, owner: Any, **fields: Any
                    ) -> tuple[dict[str, Any], dict[str, str]]:
    """The chamber choir's Evensong in the Chapel, 20 March 2031 18:00 to 19:00 in Paris
    (`fields` over that), answered by its attendees: the event, and each address's answer."""
    profile = await new_profile(api, owner, display_name="Chamber choir")
    event = await new_event(api, owner, profile, title="Evensong", location="Chapel",
                            start_time="2031-03-20T18:00", end_time="2031-03-20T19:00",
                            start_timezone=PARIS, end_timezone=PARIS, **fields)
    return event, await _attendees(api, live, event)


def _parts(message: EmailMessage) -> tuple[str, Calendar, Any]:
    text = message.get_body(preferencelist=("plain",))
    calendar = message.get_body(preferencelist=("calendar",))
    assert text is not None and calendar is not None
    return text.get_content(), Calendar.from_ical(calendar.get_content()), calendar


@pytest.mark.slow
async def test_reschedule_then_cancel_reach_each_attendee_as_imip(
    mail: tuple[LiveServer, Inbox],
) -> None:
    async with _organizer(mail) as (live, inbox, api, owner):
        event, told = await _evensong(api, live, owner)

        code, _, _ = await api.post(f"/v1/events/{event['id']}/reschedule", owner, json={
            "start_time": "2031-04-03T18:30", "start_timezone": PARIS})
        assert code == 200
        moved = inbox.wait_for(3)
        assert len(moved) == 3
        assert sorted(rcpt for rcpts, _ in inbox.received for rcpt in rcpts) == sorted(told)
        for message in moved:
            assert message["From"].addresses[0].addr_spec == SENDER
            assert message["Subject"] == "Updated: Evensong"
            text, cal, part = _parts(message)
            assert "Evensong is now on Thursday 03 April 2031, 18:30 (Europe/Paris)" in text
            assert part.get_content_type() == "text/calendar"
            assert part.get_param("method") == "REQUEST" and str(cal["METHOD"]) == "REQUEST"
            [vevent] = cal.walk("VEVENT")
            assert str(vevent["UID"]) == f"{event['id']}@kalends"
            assert vevent.decoded("SEQUENCE") == 1
            assert vevent["DTSTART"].params["TZID"] == PARIS
            assert vevent.decoded("DTSTART") == datetime(2031, 4, 3, 18, 30,
                                                         tzinfo=ZoneInfo(PARIS))
            assert vevent.decoded("DTEND") == datetime(2031, 4, 3, 17, 30, tzinfo=UTC)
            assert {str(z["TZID"]) for z in cal.walk("VTIMEZONE")} == {PARIS}
            attendee = vevent["ATTENDEE"]
            address = str(attendee).removeprefix("mailto:")
            assert message["To"].addresses[0].addr_spec == address
            expected = {"going": "ACCEPTED", "maybe": "TENTATIVE", "waitlist": "NEEDS-ACTION"}
            assert attendee.params["PARTSTAT"] == expected[told[address]]
            assert str(vevent["ORGANIZER"]) == f"mailto:{SENDER}"

        inbox.received.clear()
        code, _, _ = await api.post(f"/v1/events/{event['id']}/cancel", owner,
                                    json={"reason": "The organist is ill"})
        assert code == 200
        cancelled = inbox.wait_for(3)
        assert len(cancelled) == 3
        for message in cancelled:
            assert message["Subject"] == "Cancelled: Evensong"
            text, cal, part = _parts(message)
            assert "has been cancelled" in text and "The organist is ill" in text
            assert part.get_param("method") == "CANCEL" and str(cal["METHOD"]) == "CANCEL"
            [vevent] = cal.walk("VEVENT")
            assert str(vevent["UID"]) == f"{event['id']}@kalends"
            assert vevent.decoded("SEQUENCE") == 2
            assert str(vevent["STATUS"]) == "CANCELLED"
        await asyncio.sleep(1)  # nothing more arrives: one message per attendee and change
        assert len(inbox.received) == 3


@pytest.mark.slow
async def test_no_mail_without_allow_notifications_and_retries_after_a_refusal(
    mail: tuple[LiveServer, Inbox],
) -> None:
    async with _organizer(mail) as (live, inbox, api, owner):
        profile = await new_profile(api, owner)
        quiet = await new_event(api, owner, profile, title="Quiet")
        code, _, _ = await api.patch(f"/v1/events/{quiet['id']}/rsvp-settings", owner,
                                     json={"allow_notifications": False})
        assert code == 200
        await _attendees(api, live, quiet)
        loud = await new_event(api, owner, profile, title="Loud")
        await _attendees(api, live, loud)

        inbox.refuse = 1  # the first delivery fails: the job runs again, nobody twice
        for event in (quiet, loud):
            code, _, _ = await api.post(f"/v1/events/{event['id']}/cancel", owner, json={})
            assert code == 200
        received = inbox.wait_for(3, timeout=60)
        assert len(received) == 3
        assert {m["Subject"] for m in received} == {"Cancelled: Loud"}
        await asyncio.sleep(1)
        recipients = [r for rcpts, _ in inbox.received for r in rcpts]
        assert len(recipients) == len(set(recipients)) == 3


async def test_without_an_smtp_url_nothing_is_sent_and_one_warning_says_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from domain.notify import attendee_mail

    [send] = attendee_mail.handlers(None, SENDER).values()
    with caplog.at_level("WARNING", logger="kalends.mail"):
        for _ in range(3):
            await send(None, {"event_id": "evt_" + "0" * 32})  # type: ignore[arg-type]
    warnings = [r for r in caplog.records if r.name == "kalends.mail"]
    assert [r.getMessage() for r in warnings] == [
        "attendee e-mail is not sent: KALENDS_SMTP_URL is not set"]


async def _cancelled_with_attendees(mail: tuple[LiveServer, Inbox], api: Api, owner: Any
                                    ) -> dict[str, Any]:
    """An event cancelled, its three messages delivered by the worker, then its
    record of them forgotten (as if its jobs had not run yet) and the inbox emptied."""
    live, inbox = mail
    profile = await new_profile(api, owner)
    event = await new_event(api, owner, profile, title="Recital")
    await _attendees(api, live, event)
    code, _, _ = await api.post(f"/v1/events/{event['id']}/cancel", owner, json={})
    assert code == 200
    assert len(inbox.wait_for(3)) == 3
    await asyncio.sleep(0.5)  # the job has recorded its last address
    live.call(live.db.execute("DELETE FROM attendee_mail_sent WHERE event_id = $1",
                              event["id"]))
    inbox.received.clear()
    return event


@pytest.mark.slow
async def test_jobs_of_one_event_running_at_once_write_to_each_address_once(
    mail: tuple[LiveServer, Inbox],
) -> None:
    from domain.notify import attendee_mail

    async with _organizer(mail) as (live, inbox, api, owner):
        event = await _cancelled_with_attendees(mail, api, owner)
        smtp = attendee_mail._smtp(str(live.app[SETTINGS].smtp_url))

        async def slow(message: EmailMessage) -> object:
            await asyncio.sleep(0.2)  # long enough for the other jobs to start meanwhile
            return await smtp(message)

        async def three_jobs() -> None:
            await asyncio.gather(*(attendee_mail._send(live.db, event["id"], slow, SENDER)
                                   for _ in range(3)))

        live.call(three_jobs())
        recipients = [r for rcpts, _ in inbox.received for r in rcpts]
        assert len(recipients) == 3, recipients  # not 9
        assert len(set(recipients)) == 3


async def test_a_refused_smtp_exchange_is_logged_with_the_servers_reply(
    mail: tuple[LiveServer, Inbox], caplog: pytest.LogCaptureFixture,
) -> None:
    import aiosmtplib

    from domain.notify import attendee_mail

    async with _organizer(mail) as (live, inbox, api, owner):
        event = await _cancelled_with_attendees(mail, api, owner)
        inbox.refuse = 1
        smtp = attendee_mail._smtp(str(live.app[SETTINGS].smtp_url))
        with caplog.at_level("WARNING", logger="kalends.mail"), \
                pytest.raises(aiosmtplib.SMTPResponseException):
            live.call(attendee_mail._send(live.db, event["id"], smtp, SENDER))
        [warning] = [r.getMessage() for r in caplog.records if r.name == "kalends.mail"]
        assert f"event {event['id']} (CANCEL, SEQUENCE 1)" in warning
        assert warning.endswith("451 4.3.0 Try again later"), warning


@pytest.mark.slow
async def test_one_occurrence_changed_cancelled_and_restored_reaches_each_attendee(
    mail: tuple[LiveServer, Inbox],
) -> None:
    """docs/api-choices.md, "ICS feeds and attendee e-mail": a message per attendee about
    the one occurrence (RECURRENCE-ID in DTSTART's form), CANCEL or REQUEST, each change
    with a higher SEQUENCE than the last about it (a restore too, though it leaves no
    row), and a job run again sends nothing."""
    from domain.notify import attendee_mail

    async with _organizer(mail) as (live, inbox, api, owner):
        event, told = await _evensong(api, live, owner, recurrence_rule="FREQ=WEEKLY;COUNT=4")
        path = f"/v1/events/{event['id']}/occurrences/{event['id']}:"
        # 27 March 18:00 is winter time in Paris (17:00 UTC), 3 April summer (16:00).
        steps = [("20310327T170000Z/cancel", {"reason": "Easter"}, "CANCEL", 1),
                 ("20310327T170000Z/restore", {}, "REQUEST", 2),
                 ("20310327T170000Z/cancel", {}, "CANCEL", 3)]
        for step, body, method, sequence in steps:
            inbox.received.clear()
            code, answer, _ = await api.post(path + step, owner, json=body)
            assert code == 200, answer
            messages = inbox.wait_for(3)
            assert sorted(r for rcpts, _ in inbox.received for r in rcpts) == sorted(told)
            for message in messages:
                text, cal, part = _parts(message)
                assert part.get_param("method") == method and str(cal["METHOD"]) == method
                [vevent] = cal.walk("VEVENT")
                assert str(vevent["UID"]) == f"{event['id']}@kalends"
                assert vevent.decoded("RECURRENCE-ID") == datetime(2031, 3, 27, 18,
                                                                   tzinfo=ZoneInfo(PARIS))
                assert vevent["RECURRENCE-ID"].params["TZID"] == PARIS
                assert vevent.decoded("SEQUENCE") == sequence, (step, sequence)
                assert "RRULE" not in vevent
                assert str(vevent["STATUS"]) == ("CANCELLED" if method == "CANCEL"
                                                 else "CONFIRMED")
            subject = "Cancelled" if method == "CANCEL" else "Updated"
            assert messages[0]["Subject"] == \
                f"{subject}: Evensong (Thursday 27 March 2031, 18:00 (Europe/Paris))"
            if step.endswith("cancel") and body:
                assert "Reason: Easter" in _parts(messages[0])[0]

        inbox.received.clear()
        code, answer, _ = await api.patch(path + "20310403T160000Z", owner, json={
            "title": "Evensong (cathedral)", "location": None, "start_time": "2031-04-03T19:30",
            "end_time": "2031-04-03T20:30", "start_timezone": PARIS, "end_timezone": PARIS})
        assert code == 200, answer
        for message in inbox.wait_for(3):
            text, cal, _ = _parts(message)
            assert "Evensong (cathedral), one date of Evensong, is now on Thursday 03 April " \
                   "2031, 19:30 (Europe/Paris)" in text and "Where:" not in text
            [vevent] = cal.walk("VEVENT")
            assert vevent.decoded("RECURRENCE-ID") == datetime(2031, 4, 3, 18,
                                                               tzinfo=ZoneInfo(PARIS))
            assert vevent.decoded("DTSTART") == datetime(2031, 4, 3, 19, 30,
                                                         tzinfo=ZoneInfo(PARIS))
            assert (vevent.decoded("SEQUENCE"), str(vevent["SUMMARY"])) == \
                (1, "Evensong (cathedral)")
            assert "LOCATION" not in vevent

        # Jobs run again (a retry, a lost worker): nobody hears twice.
        smtp = attendee_mail._smtp(str(live.app[SETTINGS].smtp_url))
        for slot in ("20310327T170000Z", "20310403T160000Z"):
            live.call(attendee_mail._send(live.db, event["id"], smtp, SENDER, slot))
        await asyncio.sleep(0.5)
        assert len(inbox.received) == 3
