"""Events: request shapes, permission, slugs, and the state machine of cancel
and reschedule. Time input belongs to `domain.times`, rules to
`domain.recurrence`; this module puts them together."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

import asyncpg
from pydantic import Field, StringConstraints

from core.errors import ApiError, conflict, not_found
from db import events as store
from db import occurrences as occurrence_store
from db.database import Database, Tx
from domain import expansion, ids, profiles, recurrence, sync, times
from domain.auth import Viewer
from domain.notify import attendee_mail, webhooks
from domain.profiles import Description
from domain.validation import Body, Omittable, Url, id_of

RESERVED_SLUGS = frozenset({"history", "previous", "s"})
EXPANDABLE = ("profile", "series", "rsvp_settings", "rsvp_stats")
MAX_EXPAND = 3

Title = Annotated[str, StringConstraints(min_length=1, max_length=500, pattern=r"\S")]
Location = Annotated[str, StringConstraints(max_length=1000)]
# Shapes and zones are checked by domain.times, which owns their error codes.
TimeText = Annotated[str, Field(
    description="`YYYY-MM-DD[T ]HH:MM[:SS[.f]][Z|±HH:MM|±HHMM]`.",
    json_schema_extra={"pattern": times.TIME_PATTERN})]
DateText = Annotated[str, Field(description="`YYYY-MM-DD`.",
                                json_schema_extra={"pattern": times.DATE_PATTERN})]
Zone = Annotated[str, Field(description="An IANA time zone name, e.g. `Europe/Paris`.")]
Rule = Annotated[
    str,
    Field(
        description="One RRULE, optional `RRULE:` prefix; SECONDLY and MINUTELY are refused.",
        json_schema_extra={"maxLength": recurrence.MAX_RULE_LENGTH},
    ),
]
Slug = Annotated[
    str,
    StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$"),
    Field(description="Letters, digits, `_` and `-`; unique within the profile."),
]
Transparency = Literal["opaque", "transparent"]


class OccurrenceUpdate(Body):
    """Changes to one occurrence of a recurring event (docs/occurrences.md): its
    title, place and time, each as an event takes it. All optional; `null` clears
    a nullable field."""

    # Omittable: may be omitted, never sent as null (domain.validation).
    title: Omittable[Title] = None
    description: Description | None = None
    location: Location | None = None
    start_time: Omittable[TimeText] = None
    end_time: TimeText | None = None
    start_timezone: Omittable[Zone] = None
    end_timezone: Omittable[Zone] = None
    start_date: Omittable[DateText] = None
    end_date: Omittable[DateText] = None


class ScheduleFields(OccurrenceUpdate):
    """What profile events and personal calendar events share: their title, place
    and time. All optional; `null` clears a nullable field."""

    recurrence_rule: Rule | None = None
    is_all_day: Omittable[bool] = None
    transparency: Omittable[Transparency] = None


class EventUpdate(ScheduleFields):
    """Fields of an event; all optional. `null` clears a nullable field."""

    slug: Omittable[Slug] = None
    image_url: Url | None = None
    is_private: Omittable[bool] = None
    require_rsvp: Omittable[bool] = None


class ProfileEventCreate(EventUpdate, json_schema_extra=times.CREATE_FIELD_RULES):
    """A new event; the profile comes from the path."""

    title: Title
    require_payment: Omittable[bool] = None


class EventCreate(ProfileEventCreate):
    """A new event on one of the caller's profiles."""

    profile_id: id_of("prf")  # type: ignore[valid-type]


class EventCancel(Body):
    """Why the event is cancelled, for its attendees."""

    reason: Omittable[Description] = None


class EventReschedule(Body, json_schema_extra=times.RESCHEDULE_FIELD_RULES):
    """The new time; an omitted end keeps the event's duration."""

    start_time: TimeText
    start_timezone: Zone
    end_time: Omittable[TimeText] = None
    end_timezone: Omittable[Zone] = None


# ---------------------------------------------------------------------------
# expand (docs/api-choices.md, "Events, RSVPs and series")


_EXPAND_NAME = "(?:" + "|".join(EXPANDABLE) + ")"
EXPAND_PATTERN = f"^{_EXPAND_NAME}(?:,{_EXPAND_NAME}){{0,{MAX_EXPAND - 1}}}$"
"""What `parse_expand` accepts, as the documents advertise it."""


def parse_expand(value: str | None) -> dict[str, bool]:
    """`expand=profile,series` as one GraphQL variable per relationship."""
    asked: list[str] = []
    if value is not None:
        asked = value.split(",")
        unknown = [name for name in asked if name not in EXPANDABLE]
        if unknown:
            raise ApiError(
                "invalid_expand",
                f"Unknown relationship `{unknown[0]}`; expand any of {', '.join(EXPANDABLE)}.",
                param="expand", details={"value": value},
            )
        if len(asked) > MAX_EXPAND:
            raise ApiError(
                "invalid_expand", f"At most {MAX_EXPAND} relationships can be expanded.",
                param="expand", details={"value": value},
            )
    return {f"expand_{name}": name in asked for name in EXPANDABLE}


# ---------------------------------------------------------------------------
# Permission


def check_administrable(row: asyncpg.Record | None, viewer: Viewer) -> asyncpg.Record:
    """Writes: those who administer the event's profile (domain.profiles)."""
    return profiles.check_administrable(row, viewer, what="event", param="event_id")


def check_visible(row: asyncpg.Record | None) -> asyncpg.Record:
    """Rows come from loaders that return visible events only."""
    if row is None:
        raise not_found("event", param="event_id")
    return row


def check_open(row: asyncpg.Record) -> None:
    if row["status"] == "cancelled":
        raise ApiError(
            "event_cancelled",
            "The event is cancelled; reschedule it to change it again.",
        )


# ---------------------------------------------------------------------------
# Writes


def check_slug(slug: str) -> None:
    if slug.lower() in RESERVED_SLUGS:
        raise ApiError(
            "reserved_slug", f"The slug `{slug}` is reserved.", param="slug",
            details={"value": slug},
        )


def slugify(title: str, t: times.EventTimes) -> str:
    """`title-words-YYYY-MM-DD`, the date taken in the event's own zone."""
    ascii_title = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode()
    words = re.sub(r"[^a-z0-9]+", "-", ascii_title.lower()).strip("-")[:80].rstrip("-")
    return f"{words or 'event'}-{t.local_start.date().isoformat()}"


AS_SENT = ("title", "description", "location", "image_url", "is_private", "require_rsvp",
                "require_payment", "transparency")


async def create(
    db: Database, profile: asyncpg.Record, data: ProfileEventCreate
) -> str:
    fields = data.model_dump(exclude_unset=True)
    values: dict[str, Any] = {k: fields[k] for k in AS_SENT if k in fields}
    values.update(times.create_columns(fields, fill_end_timezone=True))
    event_id = ids.new_id("evt")
    if "slug" in fields:
        check_slug(fields["slug"])
        try:
            async with db.transaction() as tx:
                await store.insert(tx, event_id, profile["id"], {**values, "slug": fields["slug"]})
                await changed(tx, profile["id"], event_id, "event.created")
        except asyncpg.UniqueViolationError:
            raise slug_taken(fields["slug"]) from None
        return event_id
    # An explicit slug or a PATCH, which take no lock, may still take the one
    # `insert_derived` chose: then look again.
    for _ in range(5):
        try:
            async with db.transaction() as tx:
                await insert_derived(tx, profile["id"], event_id, values)
                await changed(tx, profile["id"], event_id, "event.created")
            return event_id
        except asyncpg.UniqueViolationError:
            continue
    raise slug_taken(slugify(fields["title"], times.of_row(values)))


async def insert_derived(tx: Tx, profile_id: str, event_id: str, values: dict[str, Any]
                         ) -> None:
    """Insert event `values` with a slug derived from its title and date, taking the
    first free suffix: -2, -3, ... Derivations of one base in a profile run one at a
    time (an advisory lock on profile and base), so concurrent creates of one title
    and day do not race for a suffix while other titles and days go on in parallel.
    Raises asyncpg.UniqueViolationError when a write that took no lock took it."""
    base = slugify(values["title"], times.of_row(values))
    await store.lock_derived_slugs(tx, profile_id, base)
    taken = await store.slugs_with_prefix(tx, profile_id, base)
    slug, n = base, 1
    while slug.lower() in taken:
        n += 1
        slug = f"{base}-{n}"
    await store.insert(tx, event_id, profile_id, {**values, "slug": slug})


def slug_taken(slug: str) -> ApiError:
    return conflict(f"The slug `{slug}` is already used by an event of this profile.",
                    param="slug")


async def update(db: Database, row: asyncpg.Record, data: EventUpdate) -> None:
    changes = data.model_dump(exclude_unset=True)

    async def write(tx: Tx, current: asyncpg.Record) -> None:
        check_open(current)
        values: dict[str, Any] = {k: changes[k] for k in AS_SENT if k in changes}
        values.update(times.update_columns(current, changes))
        if "slug" in changes:
            check_slug(changes["slug"])
            values["slug"] = changes["slug"]
        await store.update(tx, current["id"], values)
        await prune_occurrences(tx, current, values)
    try:
        await _transition(db, row, write, "event.updated")
    except asyncpg.UniqueViolationError:
        raise slug_taken(changes["slug"]) from None


async def cancel(db: Database, row: asyncpg.Record, data: EventCancel) -> None:
    """RSVPs stay, so attendees can be told."""
    async def write(tx: Tx, current: asyncpg.Record) -> None:
        check_open(current)
        await store.update(tx, current["id"], {
            "status": "cancelled", "cancelled_at": datetime.now(UTC),
            "cancellation_reason": data.reason,
        })
        await attendee_mail.queue(tx, current)
    await _transition(db, row, write, "event.cancelled")


async def reschedule(db: Database, row: asyncpg.Record, data: EventReschedule) -> None:
    """A new time, allowed on a cancelled event too: it reopens it. An omitted
    end keeps the duration the event has when the reschedule commits."""
    fields = data.model_dump(exclude_unset=True)

    async def write(tx: Tx, current: asyncpg.Record) -> None:
        t = times.resolve_reschedule(times.of_row(current), fields)
        times.check_rule(current["recurrence_rule"], t)
        await store.update(tx, current["id"], {
            **times.columns(t), "status": "scheduled", "cancelled_at": None,
            "cancellation_reason": None, "is_rescheduled": True,
        })
        await prune_occurrences(tx, current, times.columns(t))
        await attendee_mail.queue(tx, current)
    await _transition(db, row, write, "event.rescheduled")


async def delete(db: Database, row: asyncpg.Record) -> None:
    await _transition(db, row, lambda tx, current: store.delete(tx, current["id"]),
                      "event.deleted")


async def _transition(db: Database, row: asyncpg.Record,
                      write: Callable[[Tx, asyncpg.Record], Awaitable[None]],
                      event_type: webhooks.EventType) -> None:
    """A change to an existing event, decided at commit (docs/api-choices.md, "Events, RSVPs and
    series").

    `row` is the event as the caller's permission was checked on. The change
    itself decides on the row as it stands, locked in its own transaction
    (`db.events.lock`): of concurrent changes, each sees the ones that committed
    before it, as if they had run one after the other; an event deleted since it
    was read is not found, one cancelled since is `event_cancelled`. Only a
    change that is made queues what follows from it, in the same transaction:
    one webhook message, one subscription change (sync and the live feed), and
    the attendee mail its `write` queues."""
    async with db.transaction() as tx:
        current = await store.lock(tx, row["id"])
        if current is None:  # deleted since it was read
            raise not_found("event", param="event_id")
        if event_type == "event.deleted":  # the payload is the event as it was
            await webhooks.record(tx, event_type, row["profile_id"], "event",
                                  {"event_id": row["id"]})
            await write(tx, current)
            await sync.event_changed(tx, row["id"])
            return
        await write(tx, current)
        await changed(tx, row["profile_id"], row["id"], event_type)


async def changed(tx: Tx, profile_id: str, event_id: str,
                  event_type: webhooks.EventType) -> None:
    """Subscribers' copies are synced, and webhooks told."""
    await sync.event_changed(tx, event_id)
    await webhooks.record(tx, event_type, profile_id, "event", {"event_id": event_id})


_SLOT_SHAPING = ("start_time", "start_timezone", "recurrence_rule", "is_all_day", "start_date")


async def prune_occurrences(tx: Tx, current: Mapping[str, Any], values: Mapping[str, Any]
                            ) -> None:
    """After `values` are written to event `current`: when they change what its slots
    are (its start, zone, rule or kind), the changes of its own of each occurrence
    whose slot the event no longer makes go (docs/occurrences.md, "Pruning")."""
    if all(values.get(k, current[k]) == current[k] for k in _SLOT_SHAPING):
        return
    slots = await occurrence_store.slots(tx, current["id"])
    if not slots:
        return
    after = {**current, **values}
    kept = set(await expansion.run(expansion.still_made, after, slots)) \
        if after["recurrence_rule"] else set()
    await occurrence_store.remove(tx, current["id"], [s for s in slots if s not in kept])
