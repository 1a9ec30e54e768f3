"""RSVPs and RSVP settings: who may answer, who may see, and capacity.

Capacity holds under concurrency because every RSVP write first locks its
event's row (`db.events.lock`): the writes to one event run one after another,
each counting attendees no one else is changing, and each decides on the event
and the RSVP as they stand under that lock (docs/api-choices.md, "Events, RSVPs and series"): an
event deleted or cancelled meanwhile, or an RSVP withdrawn meanwhile, answers as if the other
change had come first.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import asyncpg
from pydantic import Field, StringConstraints

from core.errors import ApiError, not_found
from db import events as event_store
from db import rsvps as store
from db.database import Database, Tx
from domain import ids
from domain.auth import Viewer
from domain.notify import webhooks
from domain.profiles import administers
from domain.validation import Body, Omittable

Status = Literal["going", "maybe", "not_going", "waitlist"]
Email = Annotated[
    str, StringConstraints(max_length=254, pattern=r"^[^@\s]+@[^@\s]+$"),
    Field(json_schema_extra={"format": "email"}),
]
Name = Annotated[str, StringConstraints(max_length=200)]
Guests = Annotated[int, Field(ge=1, le=10_000)]


class RsvpUpdate(Body):
    status: Omittable[Status] = None
    num_guests: Omittable[Guests] = None


class RsvpCreate(Body):
    """The caller's answer. Posting again with the same attendee_email (or none)
    replaces the caller's earlier answer; the caller's own address counts as none."""

    status: Status
    attendee_email: Email | None = None
    attendee_first_name: Name | None = None
    attendee_last_name: Name | None = None
    rsvp_type: Annotated[str, StringConstraints(max_length=100)] | None = None
    num_guests: Guests = 1


class RsvpSettingsUpdate(Body):
    enable_capacity_limit: Omittable[bool] = None
    capacity_limit: Annotated[int, Field(ge=0, le=1_000_000)] | None = None
    allow_waitlist: Omittable[bool] = None
    allow_multiple_attendees: Omittable[bool] = None
    allow_notifications: Omittable[bool] = None


SETTINGS = ("enable_capacity_limit", "capacity_limit", "allow_waitlist",
            "allow_multiple_attendees", "allow_notifications")


def may_manage(rsvp: asyncpg.Record, event: asyncpg.Record, viewer: Viewer) -> bool:
    """The attendee who answered, and whoever administers the event."""
    return rsvp["user_id"] == viewer.user_id or administers(event, viewer)


def check_manageable(rsvp: asyncpg.Record | None, event: asyncpg.Record, viewer: Viewer
                     ) -> asyncpg.Record:
    # The event in the URL is respected: an RSVP of another event is not found.
    if rsvp is None or rsvp["event_id"] != event["id"] or not may_manage(rsvp, event, viewer):
        raise not_found("RSVP", param="rsvp_id")
    return rsvp


async def answer(db: Database, viewer: Viewer, event_id: str, data: RsvpCreate
                 ) -> tuple[asyncpg.Record, bool]:
    """Create or replace the caller's RSVP; returns it and whether it is new."""
    async with db.transaction() as tx:
        event = await _lock(tx, event_id)
        found = await store.by_keys(tx, event_id, viewer.user_id,
                                    answer_keys(viewer, data.attendee_email))
        existing = found[0] if found else None
        for twin in found[1:]:
            # The caller's answer with no address and the one with their own
            # address, both written before the two were one key: the oldest remains.
            await _record(tx, "rsvp.deleted", event, twin)
            await store.delete(tx, twin["id"])
        status = await _admit(tx, event, data.status, data.num_guests, existing)
        values = data.model_dump()
        values["status"] = status
        if existing is None:
            row = await store.insert(tx, ids.new_id("rsvp"), event_id, viewer.user_id, values)
        else:
            row = await store.update(tx, existing["id"], values)
        await _record(tx, "rsvp.updated" if existing else "rsvp.created", event, row)
        return row, existing is None


def answer_keys(viewer: Viewer, attendee_email: str | None) -> tuple[str, ...]:
    """The keys (lower(attendee_email), '' for none) of the answers an answer
    replaces. The caller's own address, in any case, is the caller's own answer
    as no address is: the two are one RSVP, never two answers of one person."""
    key = attendee_email.lower() if attendee_email is not None else ""
    own = viewer.email.lower() if viewer.email else None
    return ("", own) if own is not None and key in ("", own) else (key,)


async def change(db: Database, rsvp: asyncpg.Record, data: RsvpUpdate) -> asyncpg.Record:
    changes = data.model_dump(exclude_unset=True)
    if not changes:
        return rsvp
    async with db.transaction() as tx:
        event = await _lock(tx, rsvp["event_id"])
        current = await store.by_id(tx, rsvp["id"])
        if current is None:
            raise not_found("RSVP", param="rsvp_id")
        changes["status"] = await _admit(
            tx, event, changes.get("status", current["status"]),
            changes.get("num_guests", current["num_guests"]), current,
        )
        row = await store.update(tx, current["id"], changes)
        await _record(tx, "rsvp.updated", event, row)
        return row


async def withdraw(db: Database, rsvp: asyncpg.Record) -> None:
    async with db.transaction() as tx:
        event = await _lock(tx, rsvp["event_id"])
        # Read again under the event's lock: withdrawn (or gone with its event)
        # since it was read, it is not found, and sends nothing a second time.
        current = await store.by_id(tx, rsvp["id"])
        if current is None:
            raise not_found("RSVP", param="rsvp_id")
        await _record(tx, "rsvp.deleted", event, current)  # as it was
        await store.delete(tx, current["id"])


async def _record(tx: Tx, event_type: webhooks.EventType,
                  event: asyncpg.Record, rsvp: asyncpg.Record) -> None:
    await webhooks.record(tx, event_type, event["profile_id"], "rsvp",
                          {"event_id": event["id"], "rsvp_id": rsvp["id"]})


async def _lock(tx: Tx, event_id: str) -> asyncpg.Record:
    event = await event_store.lock(tx, event_id)
    if event is None:  # deleted since it was read
        raise not_found("event", param="event_id")
    return event


async def _admit(tx: Tx, event: asyncpg.Record, status: str, guests: int,
                 existing: asyncpg.Record | None) -> str:
    """The status an answer gets: `going` becomes `waitlist` on a full event
    whose waitlist is open; with the waitlist closed it is refused."""
    if event["status"] == "cancelled" and status in ("going", "maybe") and not (
        existing is not None and existing["status"] == status
        and guests <= existing["num_guests"]
    ):
        raise ApiError("event_cancelled", "The event is cancelled; it takes no new answers.")
    # A party already held is kept when the setting is turned off (like a seat
    # when capacity is lowered): only a new or larger party is refused, so a
    # status-only change of an existing party still goes through.
    held_guests = existing["num_guests"] if existing is not None else 1
    if guests > max(1, held_guests) and not event["allow_multiple_attendees"]:
        raise ApiError(
            "multiple_attendees_not_allowed", "This event admits one attendee per RSVP.",
            param="num_guests", details={"value": guests},
        )
    if status != "going" or not event["enable_capacity_limit"]:
        return status
    if existing is not None and existing["status"] == "going" and guests <= existing["num_guests"]:
        return status  # a seat already held is kept, even above a lowered capacity
    taken = await store.attendees_going(
        tx, event["id"], excluding=existing["id"] if existing is not None else None
    )
    if taken + guests <= event["capacity_limit"]:
        return status
    if event["allow_waitlist"]:
        return "waitlist"
    raise ApiError(
        "capacity_reached", "The event is full and its waitlist is closed.",
        param="status", details={"value": status},
    )


async def update_settings(db: Database, event: asyncpg.Record, data: RsvpSettingsUpdate
                          ) -> None:
    """Lowering capacity below the attendees keeps their RSVPs; it only refuses new ones."""
    changes = data.model_dump(exclude_unset=True)
    async with db.transaction() as tx:
        # Judged on the settings as they stand, locked: a concurrent change to
        # the other half of a rule is seen, and RSVP writes (which take the same
        # lock) decide on the settings before or after this change, never half.
        current = await _lock(tx, event["id"])
        merged: dict[str, Any] = {k: current[k] for k in SETTINGS} | changes
        if merged["enable_capacity_limit"] and merged["capacity_limit"] is None:
            raise ApiError(
                "field_dependency", "A capacity limit needs `capacity_limit`.",
                param="capacity_limit",
            )
        await event_store.update(tx, event["id"], changes)
