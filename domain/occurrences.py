"""One occurrence of a recurring event (docs/occurrences.md): its ID, how it reads,
and the writes that change, cancel or restore it alone, or split its series.

An occurrence is named by its event and its slot, the start the event's rule gives
it (`<event_id>:<YYYYMMDDTHHMMSSZ>`, `<event_id>:<YYYYMMDD>` all-day). What differs
from the rule is one `event_occurrences` row (db/occurrences.py); every reader
applies the rows in `domain.expansion`, this module only decides what a row holds.
Writes follow the event's own (`domain.events`): the event's row is locked, and
everything is decided on it, inside the transaction that also queues the webhook
message, the change feed's notice, the subscribers' sync and the attendee mail.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, date, datetime, time, timedelta
from typing import Annotated, Any, NamedTuple

import asyncpg
from pydantic import StringConstraints

from core.errors import ApiError, not_found
from db import calendar_events as calendar_event_store
from db import events as event_store
from db import occurrences as store
from db import rsvps as rsvp_store
from db import series as series_store
from db.database import Database, Tx
from domain import dashboard, events, expansion, ids, recurrence, sync, times
from domain.notify import attendee_mail, webhooks

MAX_EXCEPTIONS = 1000
"""Occurrences of one event with changes of their own, cancelled ones included."""
_TEXT = ("title", "description", "location")
_COPIED = (
    "title", "description", "location", "image_url", "is_private", "require_rsvp",
    "require_payment", "transparency", "enable_capacity_limit", "capacity_limit",
    "allow_waitlist", "allow_multiple_attendees", "allow_notifications",
)
"""What the second part of a split event takes from the first: all but its times,
rule, slug and state."""

OccurrenceId = Annotated[str, StringConstraints(min_length=1, max_length=200)]


class EventSplit(events.EventUpdate):
    """This and following: the occurrence where the event's second part starts, and
    the fields that part changes (as an event update takes them)."""

    occurrence_id: OccurrenceId


class View(NamedTuple):
    """An occurrence as it stands: its event's values where it has none of its own."""

    occurrence_id: str
    event_id: str
    original_start: str
    start_time: datetime
    end_time: datetime | None
    start_timezone: str | None
    end_timezone: str | None
    start_date: date | None
    end_date: date | None
    is_all_day: bool
    status: str
    is_exception: bool
    title: str
    description: str | None
    location: str | None


# ---------------------------------------------------------------------------
# IDs and views


def _no_such() -> ApiError:
    return not_found("occurrence", param="occurrence_id")


async def named_slot(db: Database | Tx, event_id: str, occurrence_id: str) -> str:
    """The slot an occurrence ID names, if it names one of `event_id`'s: `<event_id>:`,
    or the agenda's `<calendar event>:` of a subscription copy of the event, then a
    slot's shape. Whether the rule makes that slot is `expansion.locate`'s to say."""
    prefix, sep, slot = occurrence_id.partition(":")
    prefix = prefix.lower()
    if not sep or expansion.parse_slot(slot) is None:
        raise _no_such()
    if prefix == event_id:
        return slot
    if ids.is_valid("cev", prefix) and await calendar_event_store.is_copy_of(db, prefix, event_id):
        return slot
    raise _no_such()


def original_start(slot: str) -> str:
    """A slot as the API writes an instant (`2027-03-08T19:00:00Z`) or a date."""
    parsed = expansion.parse_slot(slot)
    assert parsed is not None  # slots are checked before they are stored or shown
    return parsed.isoformat() if not isinstance(parsed, datetime) else times.utc_text(parsed)


def _original_instant(slot: str) -> datetime:
    """The slot's instant, as `event_occurrences.original_start` keeps it (an all-day
    one's: its date's midnight UTC)."""
    parsed = expansion.parse_slot(slot)
    assert parsed is not None
    return parsed if isinstance(parsed, datetime) else datetime.combine(parsed, time(), UTC)


def describe(row: Mapping[str, Any], span: expansion.Span) -> View:
    """Occurrence `span` of event `row` (found by `domain.expansion`) as the API
    shows it. An all-day one's instants are its dates' midnights on the event's
    zone, as the event's own are; cancelled: the occurrence, or its event."""
    c = span.changed
    slot = c.slot if c is not None else expansion.slot_of(span.start, span.start_date)
    values: Mapping[str, Any] = c if c is not None else row
    # A moved timed occurrence is on its own zones.
    zones = c.change if c is not None and c.change["start_time"] is not None else row
    start_tz, end_tz = zones["start_timezone"], zones["end_timezone"]
    start, end = span.start, span.end
    if span.start_date is not None and span.end_date is not None:
        tz = times.zone(row["start_timezone"], param="start_timezone")
        start, end = (times.local_midnight(span.start_date, tz),
                      times.local_midnight(span.end_date, tz))
    cancelled = row["status"] == "cancelled" or (c is not None and c.cancelled)
    return View(
        f"{row['id']}:{slot}", row["id"], original_start(slot), start, end, start_tz, end_tz,
        span.start_date, span.end_date, bool(row["is_all_day"]),
        "cancelled" if cancelled else "scheduled", c is not None,
        values["title"], values["description"], values["location"])


# ---------------------------------------------------------------------------
# Reads


async def read(db: Database | Tx, row: asyncpg.Record, occurrence_id: str,
               budget: expansion.Budget) -> View:
    """Occurrence `occurrence_id` of visible event `row`, as it stands."""
    slot = await named_slot(db, row["id"], occurrence_id)
    own = await store.one(db, row["id"], slot)
    changes = {row["id"]: [own]} if own is not None else expansion.NO_CHANGES
    span = await expansion.run(expansion.occurrence, row, slot, budget, changes=changes)
    if span is None:
        raise _no_such()
    return describe(row, span)


async def window(db: Database | Tx, row: asyncpg.Record, start: datetime, end: datetime,
                 budget: expansion.Budget) -> list[View]:
    """Every occurrence of event `row` that meets [start, end), cancelled ones
    included, by (start, occurrence_id); all-day ones meet it on the event's own
    calendar. Raises `expansion_limit` when they cannot all be told within the
    budget: a page of them is never a guess."""
    w = dashboard.instant_window(dashboard.Range(start, end),
                                 times.zone(row["start_timezone"], param="start_timezone"))
    changes = await expansion.changes(db, [row], w.start, w.end, w.first_day, w.end_date)
    return await expansion.run(_window, row, w, budget, changes)


def _window(row: asyncpg.Record, w: expansion.Window, budget: expansion.Budget,
            changes: expansion.Changes) -> list[View]:
    found, reason = expansion.spans(row, w, budget, limit=expansion.MAX_OCCURRENCES + 1,
                                    changes=changes, cancelled=True)
    if reason is not None or budget.exhausted:
        raise expansion.exhausted()
    return sorted((describe(row, s) for s in found),
                  key=lambda v: (v.start_time, v.occurrence_id))


# ---------------------------------------------------------------------------
# Writes


async def update(db: Database, row: asyncpg.Record, occurrence_id: str,
                 data: events.OccurrenceUpdate,
                 budget: expansion.Budget) -> str:
    """Change one occurrence; returns its slot. `{}` changes nothing."""
    sent = data.model_dump(exclude_unset=True)
    async with db.transaction() as tx:
        current, slot, found = await _locked(tx, row, occurrence_id, budget)
        own = await store.one(tx, current["id"], slot)
        if own is not None and own["status"] == "cancelled":
            raise _cancelled("it cannot be changed; restore it first")
        if not sent:
            return slot
        values = _changed(current, found, own, sent)
        if _as_the_rule_makes_it(values):
            # Moved back, say: nothing of its own is left, and no row is kept.
            if own is None or not await store.delete(tx, current["id"], slot):
                return slot
        else:
            await _save(tx, current, slot, own, values)
        await _told(tx, current, slot, "occurrence.updated")
    return slot


async def cancel(db: Database, row: asyncpg.Record, occurrence_id: str,
                 data: events.EventCancel,
                 budget: expansion.Budget) -> str:
    """Cancel one occurrence; its own changes stay, for a restore to drop."""
    async with db.transaction() as tx:
        current, slot, _ = await _locked(tx, row, occurrence_id, budget)
        own = await store.one(tx, current["id"], slot)
        if own is not None and own["status"] == "cancelled":
            raise _cancelled("it is cancelled already")
        values = _kept(own)
        values.update(status="cancelled", cancellation_reason=data.reason)
        await _save(tx, current, slot, own, values)
        await _told(tx, current, slot, "occurrence.cancelled")
    return slot


async def restore(db: Database, row: asyncpg.Record, occurrence_id: str,
                  budget: expansion.Budget) -> str:
    """One occurrence as the rule makes it again: its changes and cancellation go.
    One that has none is left as it is, and nothing is told."""
    async with db.transaction() as tx:
        current, slot, _ = await _locked(tx, row, occurrence_id, budget)
        if await store.delete(tx, current["id"], slot):
            await _told(tx, current, slot, "occurrence.restored")
    return slot


async def _locked(tx: Tx, row: asyncpg.Record, occurrence_id: str, budget: expansion.Budget
                  ) -> tuple[asyncpg.Record, str, expansion.Located]:
    """The event locked as it stands (`db.events.lock`: changes to one event run one
    after another), checked open and recurring, and the slot it makes."""
    current = await event_store.lock(tx, row["id"])
    if current is None:  # deleted since it was read
        raise not_found("event", param="event_id")
    events.check_open(current)
    if current["recurrence_rule"] is None:
        raise ApiError(
            "invalid_field",
            "The event does not recur: change or cancel the event itself.",
            param="occurrence_id")
    slot = await named_slot(tx, current["id"], occurrence_id)
    found = await expansion.run(expansion.locate, current, slot, budget)
    if found is None:
        raise _no_such()
    return current, slot, found


def _as_the_rule_makes_it(values: Mapping[str, Any]) -> bool:
    """No change of its own is left: not cancelled, no text, where the rule puts it."""
    return (values["status"] == "scheduled" and not values["changes"]
            and all(values[c] is None for c in _moved_to(None)))


def _cancelled(why: str) -> ApiError:
    return ApiError("occurrence_cancelled", f"The occurrence is cancelled: {why}.",
                    param="occurrence_id")


def _kept(own: asyncpg.Record | None) -> dict[str, Any]:
    """The row's values as they are (a new row's: none of its own)."""
    if own is None:
        return {"status": "scheduled", "cancellation_reason": None, "changes": {},
                **_moved_to(None)}
    values = {c: own[c] for c in store.WRITABLE}
    values["changes"] = store.changed_values(own)
    return values


def _changed(current: asyncpg.Record, found: expansion.Located, own: asyncpg.Record | None,
             sent: Mapping[str, Any]) -> dict[str, Any]:
    """The row with `sent` applied: its own texts, and its times resolved as an event
    update resolves them (from where it stands now), kept only where they differ
    from the rule's."""
    values = _kept(own)
    values["changes"].update({k: sent[k] for k in _TEXT if k in sent})
    placed = _placed(current, found)
    now = _stands(current, own, placed)
    t = times.resolve_update(now, sent)
    values.update(_moved_to(None if _same_place(t, placed) else t))
    return values


def _placed(current: Mapping[str, Any], found: expansion.Located) -> times.EventTimes:
    """Where the rule puts the occurrence, as an event's times."""
    span = found.span
    return times.EventTimes(
        is_all_day=bool(current["is_all_day"]), start_time=span.start, end_time=span.end,
        start_timezone=current["start_timezone"], end_timezone=current["end_timezone"],
        start_date=span.start_date, end_date=span.end_date)


def _stands(current: Mapping[str, Any], own: asyncpg.Record | None,
            placed: times.EventTimes) -> times.EventTimes:
    """Where the occurrence is now: moved by its row, or where the rule puts it."""
    if own is None:
        return placed
    if own["start_date"] is not None:
        tz = times.zone(current["start_timezone"], param="start_timezone")
        return times.EventTimes(
            is_all_day=True, start_time=times.local_midnight(own["start_date"], tz),
            end_time=times.local_midnight(own["end_date"], tz),
            start_timezone=placed.start_timezone, end_timezone=placed.end_timezone,
            start_date=own["start_date"], end_date=own["end_date"])
    if own["start_time"] is not None:
        return times.EventTimes(
            is_all_day=False, start_time=own["start_time"], end_time=own["end_time"],
            start_timezone=own["start_timezone"], end_timezone=own["end_timezone"],
            start_date=None, end_date=None)
    return placed


def _same_place(t: times.EventTimes, placed: times.EventTimes) -> bool:
    if t.is_all_day:  # floating dates: zones do not place them
        return (t.start_date, t.end_date) == (placed.start_date, placed.end_date)
    return t == placed


def _moved_to(t: times.EventTimes | None) -> dict[str, Any]:
    """The row's own time columns: none (where the rule puts it), instants and zones
    (timed), or dates (all-day)."""
    timed = t is not None and not t.is_all_day
    all_day = t is not None and t.is_all_day
    return {
        "start_time": t.start_time if timed and t else None,
        "end_time": t.end_time if timed and t else None,
        "start_timezone": t.start_timezone if timed and t else None,
        "end_timezone": t.end_timezone if timed and t else None,
        "start_date": t.start_date if all_day and t else None,
        "end_date": t.end_date if all_day and t else None,
    }


async def _save(tx: Tx, current: asyncpg.Record, slot: str, own: asyncpg.Record | None,
                values: Mapping[str, Any]) -> None:
    if own is None and await store.count(tx, current["id"]) >= MAX_EXCEPTIONS:
        raise ApiError(
            "too_many_exceptions",
            f"The event has {MAX_EXCEPTIONS} changed or cancelled occurrences, the most one "
            "event may have: restore some, or split the series.",
            param="occurrence_id")
    await store.save(tx, current["id"], slot, _original_instant(slot), values)


async def _told(tx: Tx, current: asyncpg.Record, slot: str,
                event_type: webhooks.EventType) -> None:
    """What follows from a change to one occurrence, in its transaction: the webhook
    message (in the event's lane, after its earlier ones) and the change feed's
    notice, the subscribers' sync, and the attendees' mail."""
    await sync.event_changed(tx, current["id"])
    await webhooks.record(tx, event_type, current["profile_id"], "occurrence",
                          {"event_id": current["id"],
                           "occurrence_id": f"{current['id']}:{slot}"})
    await attendee_mail.queue_occurrence(tx, current, slot)


# ---------------------------------------------------------------------------
# Split: this and following


async def split(db: Database, row: asyncpg.Record, data: EventSplit,
                budget: expansion.Budget) -> str:
    """End the event before occurrence `data.occurrence_id`, and start a new event of
    the same profile at it, with the rest of the rule and the fields sent; returns
    the new event's ID (docs/occurrences.md, "Split")."""
    fields = data.model_dump(exclude_unset=True)
    occurrence_id = fields.pop("occurrence_id")
    new_id = ids.new_id("evt")
    try:
        async with db.transaction() as tx:
            current, slot, found = await _locked(tx, row, occurrence_id, budget)
            before, after = await expansion.run(_rules, current, found, budget)
            await event_store.update(tx, current["id"], {"recurrence_rule": before})
            base = {"id": new_id, **{c: current[c] for c in _COPIED},
                    **times.columns(_placed(current, found)), "recurrence_rule": after}
            values = {**base, **{k: fields[k] for k in events.AS_SENT if k in fields},
                      **times.update_columns(base, fields)}
            await _insert(tx, current["profile_id"], new_id, values, fields.get("slug"))
            await series_store.copy_membership(tx, current["id"], new_id)
            await rsvp_store.copy(tx, current["id"], new_id)
            await store.move(tx, current["id"], new_id, _original_instant(slot))
            await events.prune_occurrences(tx, base, values)
            await events.changed(tx, current["profile_id"], current["id"],
                                 "event.updated")
            await events.changed(tx, current["profile_id"], new_id, "event.created")
    except asyncpg.UniqueViolationError:
        raise events.slug_taken(fields.get("slug") or str(fields.get("title", ""))) from None
    return new_id


def _rules(current: Mapping[str, Any], found: expansion.Located, budget: expansion.Budget
           ) -> tuple[str, str]:
    """The event's rule cut before the occurrence, and the rest of it from there;
    `invalid_field` at the series' first occurrence (the event itself is changed
    then, not split)."""
    t = times.of_row(current)
    tz = times.zone(t.start_timezone, param="start_timezone")
    rule = current["recurrence_rule"]
    start_local = datetime.combine(t.start_date, time()) if t.is_all_day and t.start_date \
        else t.local_start
    if expansion.first_start(rule, start_local, tz, t.start_time, found.span.start,
                             budget) is None:
        raise ApiError(
            "invalid_field",
            "The occurrence is the series' first: change the event itself (PATCH) instead.",
            param="occurrence_id")
    day = found.span.start_date
    last: datetime | date = found.span.start - timedelta(seconds=1) if day is None \
        else day - timedelta(days=1)
    return recurrence.split(rule, start_local, found.wall, last)


async def _insert(tx: Tx, profile_id: str, event_id: str, values: dict[str, Any],
                  slug: str | None) -> None:
    if slug is None:
        await events.insert_derived(tx, profile_id, event_id, values)
        return
    events.check_slug(slug)
    await event_store.insert(tx, event_id, profile_id, {**values, "slug": slug})
