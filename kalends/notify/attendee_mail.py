"""Attendee e-mail (docs/api-choices.md, "ICS feeds and attendee e-mail"): iMIP (RFC 6047) on
cancel and reschedule.

When an event whose RSVP settings allow notifications is cancelled or moved, a
job is queued in the same transaction (`queue`). The job (`send`) reads the event
as it is then and writes to every RSVP with an e-mail address that is going,
maybe or on the waitlist: a readable text part, and a `text/calendar` part that
calendar applications act on, `METHOD:CANCEL` for a cancelled event and
`METHOD:REQUEST` otherwise, with the feed's `UID` and the event's `SEQUENCE`
(kalends/notify/feeds.py), so the newest message wins whatever order they arrive in.

Sent over SMTP with `aiosmtplib` (`KALENDS_SMTP_URL`); without it nothing is sent
and a warning is logged once per process; a refused or failed exchange is logged
with the server's reply, and the job is retried. Each address is recorded once
sent (migration 0011), and the jobs of one event take turns, so a job that runs
again (a retry, a worker lost mid-way) or beside another writes to no one twice
for the same method and revision.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from email.headerregistry import Address
from email.message import EmailMessage
from email.utils import format_datetime, make_msgid
from typing import Any
from urllib.parse import unquote, urlsplit
from zoneinfo import ZoneInfo

import aiosmtplib
import asyncpg
from icalendar import vCalAddress

from db import events as event_store
from db import rsvps as rsvp_store
from db.database import Database, Tx
from kalends import expansion
from kalends.notify import feeds, ics
from kalends.service import jobs

log = logging.getLogger("kalends.mail")

ENTRYPOINT = "attendee_mail"
_PARTSTAT = {"going": "ACCEPTED", "maybe": "TENTATIVE", "waitlist": "NEEDS-ACTION"}
_TIMEOUT = 30.0


async def queue(tx: Tx, event: asyncpg.Record) -> None:
    """In the transaction of a cancel or reschedule: tell the attendees, if allowed."""
    if event["allow_notifications"]:
        await jobs.enqueue(tx, ENTRYPOINT, {"event_id": event["id"]})


def handlers(smtp_url: str | None, sender: str) -> dict[str, jobs.Handler]:
    warned = False

    async def send(db: Database, payload: dict[str, Any]) -> None:
        nonlocal warned
        if smtp_url is None:
            if not warned:
                warned = True
                log.warning("attendee e-mail is not sent: KALENDS_SMTP_URL is not set")
            return
        await _send(db, payload["event_id"], _smtp(smtp_url), sender)

    return {ENTRYPOINT: send}


async def _send(db: Database, event_id: str,
                deliver: Callable[[EmailMessage], Awaitable[object]], sender: str) -> None:
    # Jobs of one event take turns (several may be queued by quick changes and
    # run at once): each sees what the one before it sent, so that an address gets
    # one message per method and SEQUENCE. Sent addresses are recorded outside the
    # lock's transaction, at once, so a job that fails half-way keeps its record.
    async with db.transaction() as lock:
        await event_store.lock_mail(lock, event_id)
        event = await event_store.for_mail(db, event_id)
        if event is None or not event["allow_notifications"]:
            return  # deleted since, or notifications turned off since
        method = "CANCEL" if event["status"] == "cancelled" else "REQUEST"
        done = await event_store.mail_sent(db, event_id, event["sequence"], method)
        for rsvp in await rsvp_store.to_notify(db, event_id):
            address = rsvp["attendee_email"].lower()
            if address in done:
                continue
            try:
                # Rendering walks the event's rule: beside the event loop.
                await deliver(await expansion.run(message, event, rsvp, method, sender))
            except (aiosmtplib.SMTPException, OSError) as exc:
                log.warning("attendee e-mail for event %s (%s, SEQUENCE %s) to %s failed: %s",
                            event_id, method, event["sequence"], address, _reply(exc))
                raise
            await event_store.record_mail(db, event_id, event["sequence"], method, address)
            done.add(address)


def _reply(exc: Exception) -> str:
    """What the SMTP server answered, as it said it."""
    if isinstance(exc, aiosmtplib.SMTPRecipientsRefused):
        return "; ".join(_reply(refused) for refused in exc.recipients)
    if isinstance(exc, aiosmtplib.SMTPResponseException):
        return f"{exc.code} {exc.message}"
    return str(exc) or type(exc).__name__


def _smtp(url: str) -> Callable[[EmailMessage], Awaitable[object]]:
    parts = urlsplit(url)
    implicit_tls = parts.scheme == "smtps"
    options: dict[str, Any] = {
        "hostname": parts.hostname, "port": parts.port or (465 if implicit_tls else 25),
        "use_tls": implicit_tls, "timeout": _TIMEOUT,
        # STARTTLS when the server offers it (aiosmtplib's default: None).
        "start_tls": False if implicit_tls else None,
    }
    if parts.username:
        options["username"] = unquote(parts.username)
        options["password"] = unquote(parts.password or "")

    async def deliver(message: EmailMessage) -> object:
        return await aiosmtplib.send(message, **options)
    return deliver


def message(event: asyncpg.Record, rsvp: asyncpg.Record, method: str, sender: str
            ) -> EmailMessage:
    """One attendee's message: text, then the iCalendar part (RFC 6047 2.4)."""
    name = " ".join(filter(None, (rsvp["attendee_first_name"], rsvp["attendee_last_name"])))
    msg = EmailMessage()
    msg["From"] = Address(event["profile_name"], addr_spec=sender)
    msg["To"] = Address(name, addr_spec=rsvp["attendee_email"])
    verb = "Cancelled" if method == "CANCEL" else "Updated"
    msg["Subject"] = f"{verb}: {event['title']}"
    msg["Date"] = format_datetime(event["updated_at"])
    msg["Message-ID"] = make_msgid(domain=sender.rpartition("@")[2])
    msg.set_content(_text(event, method))
    msg.add_alternative(_calendar(event, rsvp, method, sender, name), subtype="calendar",
                        params={"method": method})
    return msg


def _text(event: asyncpg.Record, method: str) -> str:
    when = _when(event)
    if method == "CANCEL":
        lines = [f"{event['title']} ({when}) has been cancelled."]
        if event["cancellation_reason"]:
            lines.append(f"Reason: {event['cancellation_reason']}")
    else:
        lines = [f"{event['title']} is now on {when}."]
    if event["location"]:
        lines.append(f"Where: {event['location']}")
    lines.append("Your calendar application can update its copy from the attached invitation.")
    return "\n\n".join(lines) + "\n"


def _when(event: asyncpg.Record) -> str:
    if event["is_all_day"]:
        return f"{event['start_date']:%A %d %B %Y}"
    zone = event["start_timezone"]
    local = event["start_time"].astimezone(ZoneInfo(zone))
    return f"{local.strftime('%A %d %B %Y, %H:%M')} ({zone})"


def _calendar(event: asyncpg.Record, rsvp: asyncpg.Record, method: str, sender: str,
              name: str) -> str:
    vevent = feeds.vevent(event)
    organizer = vCalAddress(f"mailto:{sender}")
    organizer.params["CN"] = event["profile_name"]
    vevent.add("organizer", organizer)
    attendee = vCalAddress(f"mailto:{rsvp['attendee_email']}")
    if name:
        attendee.params["CN"] = name
    attendee.params["ROLE"] = "REQ-PARTICIPANT"
    attendee.params["PARTSTAT"] = _PARTSTAT[rsvp["status"]]
    attendee.params["RSVP"] = "FALSE"
    vevent.add("attendee", attendee)
    return ics.document([vevent], properties=[("method", method, None)]).decode()
