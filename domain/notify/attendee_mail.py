"""Attendee e-mail (docs/api-choices.md, "ICS feeds and attendee e-mail"): iMIP (RFC 6047) on
cancel and reschedule.

When an event whose RSVP settings allow notifications is cancelled or moved, a
job is queued in the same transaction (`queue`). The job (`send`) reads the event
as it is then and writes to every RSVP with an e-mail address that is going,
maybe or on the waitlist: a readable text part, and a `text/calendar` part that
calendar applications act on, `METHOD:CANCEL` for a cancelled event and
`METHOD:REQUEST` otherwise, with the feed's `UID` and the event's `SEQUENCE`
(domain/notify/feeds.py), so the newest message wins whatever order they arrive in.
So it is when one occurrence of a recurring event is changed, cancelled or restored
(`queue_occurrence`): that job's message is about the occurrence alone, with its
`RECURRENCE-ID` and its `SEQUENCE` (`ics.occurrence_sequence`, the feed's override's).

Sent over SMTP with `aiosmtplib` (`KALENDS_SMTP_URL`); without it nothing is sent
and a warning is logged once per process; a refused or failed exchange is logged
with the server's reply, and the job is retried. Each address is recorded once
sent (migration 0011; an occurrence's, migration 0029, by its slot too), and the
jobs of one event take turns, so a job that runs again (a retry, a worker lost
mid-way) or beside another writes to no one twice for the same method and revision.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from email.headerregistry import Address
from email.message import EmailMessage
from email.utils import format_datetime, make_msgid
from typing import Any
from urllib.parse import unquote, urlsplit
from zoneinfo import ZoneInfo

import aiosmtplib
import asyncpg
from icalendar import Event, vCalAddress

from db import events as event_store
from db import ical as ical_store
from db import occurrences as occurrence_store
from db import rsvps as rsvp_store
from db.database import Database, Tx
from domain import expansion, jobs
from domain.connected import components
from domain.connected.provider import Component
from domain.notify import feeds, ics

log = logging.getLogger("kalends.mail")

ENTRYPOINT = "attendee_mail"
_PARTSTAT = {"going": "ACCEPTED", "maybe": "TENTATIVE", "waitlist": "NEEDS-ACTION"}
_TIMEOUT = 30.0


@dataclass(frozen=True)
class Occurrence:
    """The one occurrence a message is about: its slot (the occurrence_id after
    `<event_id>:`), its `event_occurrences` row (None: it has none, and is where and
    what the rule makes of it), and its VEVENT as sent."""

    slot: str
    row: Mapping[str, Any] | None
    component: Component


@dataclass(frozen=True)
class _Notice:
    """What one job tells every attendee: the method, the SEQUENCE, and the
    occurrence (None: the whole event) with what its message says (`fingerprint`)."""

    method: str
    sequence: int
    occurrence: Occurrence | None = None
    fingerprint: str = ""


async def queue(tx: Tx, event: asyncpg.Record) -> None:
    """In the transaction of a cancel or reschedule: tell the attendees, if allowed."""
    if event["allow_notifications"]:
        await jobs.enqueue(tx, ENTRYPOINT, {"event_id": event["id"]})


async def queue_occurrence(tx: Tx, event_row: asyncpg.Record, slot: str) -> None:
    """In the transaction of a change, cancel or restore of one occurrence (`slot`,
    as in `event_occurrences`) of `event_row`: tell the attendees, if allowed. The
    job reads the occurrence as it is when it runs."""
    if event_row["allow_notifications"]:
        await jobs.enqueue(tx, ENTRYPOINT, {"event_id": event_row["id"], "slot": slot})


def handlers(smtp_url: str | None, sender: str) -> dict[str, jobs.Handler]:
    warned = False

    async def send(db: Database, payload: dict[str, Any]) -> None:
        nonlocal warned
        if smtp_url is None:
            if not warned:
                warned = True
                log.warning("attendee e-mail is not sent: KALENDS_SMTP_URL is not set")
            return
        await _send(db, payload["event_id"], _smtp(smtp_url), sender, payload.get("slot"))

    return {ENTRYPOINT: send}


async def _send(db: Database, event_id: str,
                deliver: Callable[[EmailMessage], Awaitable[object]], sender: str,
                slot: str | None = None) -> None:
    # Jobs of one event take turns (several may be queued by quick changes and
    # run at once): each sees what the one before it sent, so that an address gets
    # one message per method and SEQUENCE (and occurrence). Sent addresses are
    # recorded outside the lock's transaction, at once, so a job that fails half-way
    # keeps its record.
    async with db.transaction() as lock:
        await event_store.lock_mail(lock, event_id)
        event = await event_store.for_mail(db, event_id)
        if event is None or not event["allow_notifications"]:
            return  # deleted since, or notifications turned off since
        notice = _whole(event) if slot is None else await _of_occurrence(db, event, slot)
        if notice is None:
            return
        done = await _sent(db, event, notice)
        for rsvp in await rsvp_store.to_notify(db, event_id):
            address = rsvp["attendee_email"].lower()
            if address in done:
                continue
            try:
                # Rendering walks the event's rule: beside the event loop.
                await deliver(await expansion.run(message, event, rsvp, notice.method, sender,
                                                  occurrence=notice.occurrence))
            except (aiosmtplib.SMTPException, OSError) as exc:
                log.warning("attendee e-mail for event %s%s (%s, SEQUENCE %s) to %s failed: %s",
                            event_id, f" occurrence {slot}" if slot else "", notice.method,
                            notice.sequence, address, _reply(exc))
                raise
            await _record(db, event, notice, address)
            done.add(address)


def _whole(event: asyncpg.Record) -> _Notice:
    method = "CANCEL" if event["status"] == "cancelled" else "REQUEST"
    return _Notice(method, event["sequence"], None)


async def _of_occurrence(db: Database, event: asyncpg.Record, slot: str) -> _Notice | None:
    """The notice about occurrence `slot` as it is now; None when there is nothing
    to say of it alone: the event is cancelled as a whole (its own message says so),
    no longer recurs, or its rule no longer makes the slot (a split or a new rule
    took it away: the event's own message covers that)."""
    if event["status"] == "cancelled" or not event["recurrence_rule"]:
        return None
    if not await expansion.run(expansion.still_made, event, [slot]):
        return None
    row = await occurrence_store.one(db, event["id"], slot)
    component = await expansion.run(ics.of_occurrence, event, slot, row)
    method = "CANCEL" if component.cancelled else "REQUEST"
    fingerprint = f"{method}:{components.digest(component)}"
    sequence = await _sequence(db, event["id"], slot, component.sequence, fingerprint)
    return _Notice(method, sequence,
                   Occurrence(slot, row, replace(component, sequence=sequence)), fingerprint)


async def _sequence(db: Database, event_id: str, slot: str, sequence: int,
                    fingerprint: str) -> int:
    """The SEQUENCE of a message about occurrence `slot`: the last one sent about it
    when nothing changed since (a job run again, or a second job after a quick
    second change, finds what the last message said: the addresses it missed get
    it, the others nothing), else the occurrence's own (the feed's), but above the
    last one sent: an occurrence restored to what its rule makes has no row, and
    one changed again after that a new row, whose SEQUENCE starts over
    (docs/api-choices.md, "ICS feeds and attendee e-mail")."""
    last = await ical_store.last_occurrence_mail(db, event_id, slot)
    if last is None:
        return sequence
    if last[1] == fingerprint:
        return last[0]
    return max(sequence, last[0] + 1)


async def _sent(db: Database, event: asyncpg.Record, notice: _Notice) -> set[str]:
    if notice.occurrence is None:
        return await event_store.mail_sent(db, event["id"], notice.sequence, notice.method)
    return await ical_store.occurrence_mail_sent(db, event["id"], notice.occurrence.slot,
                                                 notice.sequence, notice.method)


async def _record(db: Database, event: asyncpg.Record, notice: _Notice, address: str) -> None:
    if notice.occurrence is None:
        await event_store.record_mail(db, event["id"], notice.sequence, notice.method, address)
    else:
        await ical_store.record_occurrence_mail(db, event["id"], notice.occurrence.slot,
                                                notice.sequence, notice.method,
                                                notice.fingerprint, address)


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


def message(event: asyncpg.Record, rsvp: Mapping[str, Any], method: str, sender: str, *,
            occurrence: Occurrence | None = None) -> EmailMessage:
    """One attendee's message (about the whole event, or `occurrence` alone): text,
    then the iCalendar part (RFC 6047 2.4)."""
    name = " ".join(filter(None, (rsvp["attendee_first_name"], rsvp["attendee_last_name"])))
    component = None if occurrence is None else occurrence.component
    msg = EmailMessage()
    msg["From"] = Address(event["profile_name"], addr_spec=sender)
    msg["To"] = Address(name, addr_spec=rsvp["attendee_email"])
    verb = "Cancelled" if method == "CANCEL" else "Updated"
    what = event["title"] if component is None else f"{component.title} ({_on(component)})"
    msg["Subject"] = f"{verb}: {what}"
    stamped = event if occurrence is None or occurrence.row is None else occurrence.row
    msg["Date"] = format_datetime(stamped["updated_at"])
    msg["Message-ID"] = make_msgid(domain=sender.rpartition("@")[2])
    msg.set_content(_text(event, method) if component is None else
                    _occurrence_text(event, component, method, occurrence))
    vevent = feeds.vevent(stamped, component)
    msg.add_alternative(_calendar(event, vevent, rsvp, method, sender, name),
                        subtype="calendar", params={"method": method})
    return msg


def _text(event: asyncpg.Record, method: str) -> str:
    when = _when(event)
    if method == "CANCEL":
        lines = [f"{event['title']} ({when}) has been cancelled."]
        if event["cancellation_reason"]:
            lines.append(f"Reason: {event['cancellation_reason']}")
    else:
        lines = [f"{event['title']} is now on {when}."]
    return _closing(lines, event["location"])


def _occurrence_text(event: asyncpg.Record, c: Component, method: str,
                     occurrence: Occurrence | None) -> str:
    row = occurrence.row if occurrence is not None else None
    if method == "CANCEL":
        lines = [f"{c.title} on {_on(c)} has been cancelled; the other dates of "
                 f"{event['title']} stay as they were."]
        if row is not None and row["cancellation_reason"]:
            lines.append(f"Reason: {row['cancellation_reason']}")
    else:
        lines = [f"{c.title}, one date of {event['title']}, is now on {_on(c)}."]
    return _closing(lines, c.location)


def _closing(lines: list[str], location: str | None) -> str:
    if location:
        lines.append(f"Where: {location}")
    lines.append("Your calendar application can update its copy from the attached invitation.")
    return "\n\n".join(lines) + "\n"


def _when(event: asyncpg.Record) -> str:
    if event["is_all_day"]:
        return f"{event['start_date']:%A %d %B %Y}"
    zone = event["start_timezone"]
    local = event["start_time"].astimezone(ZoneInfo(zone))
    return f"{local.strftime('%A %d %B %Y, %H:%M')} ({zone})"


def _on(c: Component) -> str:
    """When an occurrence is, on its own clock."""
    if not isinstance(c.start, datetime):
        return f"{c.start:%A %d %B %Y}"
    return f"{c.start.strftime('%A %d %B %Y, %H:%M')} ({c.zone})"


def _calendar(event: asyncpg.Record, vevent: Event, rsvp: Mapping[str, Any], method: str,
              sender: str, name: str) -> str:
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
