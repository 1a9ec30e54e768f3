"""GraphQL object types. Leaf fields are plain attributes: resolving them is a
synchronous getattr, never a coroutine per field."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, Any, Generic, TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import asyncpg
import strawberry

from domain.pagination import COUNT_CAP
from graph.context import Context
from graph.scalars import Timestamp

if TYPE_CHECKING:
    from graph.follows import Follower

T = TypeVar("T")
Info = strawberry.Info[Context, None]


class Count:
    """A list's total, read on first demand and then shared by `total_count` and
    `total_count_is_capped`: `read` counts up to COUNT_CAP + 1."""

    def __init__(self, read: Callable[[], Awaitable[int]]) -> None:
        self._read = read
        self._task: asyncio.Future[int] | None = None

    async def value(self) -> int:
        if self._task is None:
            self._task = asyncio.ensure_future(self._read())
        return await self._task


@strawberry.type(description="A page of a list, in the list's stable order.")
class Page(Generic[T]):
    data: list[T]
    has_more: bool
    next_cursor: str | None
    count: strawberry.Private[Count | None] = None

    @strawberry.field(description=(
        f"How many items the list and its filters page through, exact up to {COUNT_CAP:,}."
    ))
    async def total_count(self) -> int:
        return min(await self._total(), COUNT_CAP)

    @strawberry.field(description=f"True when `total_count` stopped at {COUNT_CAP:,}.")
    async def total_count_is_capped(self) -> bool:
        return await self._total() > COUNT_CAP

    async def _total(self) -> int:
        if self.count is None:  # a list that is never paged: it is all here
            return len(self.data)
        return await self.count.value()


LOCAL_START = "`start_time` on the clock of `start_timezone`, RFC 3339 with its offset; " \
    "null for an all-day item (its dates are local)."
LOCAL_END = "`end_time` on the clock of `end_timezone`, RFC 3339 with its offset; null for " \
    "an all-day item or a point in time."


def on_its_clock(instant: dt.datetime | None, zone: str | None, all_day: bool
                 ) -> dt.datetime | None:
    """`instant` on `zone`'s clock, with the offset it has then, in whole seconds: an
    item's local time (docs/mcp.md, "Local times"). None for an all-day item, whose
    dates are local already, and where there is no time or no zone one can read."""
    if instant is None or zone is None or all_day:
        return None
    try:
        tz = ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError):
        return None
    return instant.astimezone(tz).replace(microsecond=0)


@strawberry.type
class Organization:
    id: strawberry.ID
    name: str
    handle: str | None
    role: str = strawberry.field(description="The caller's role: owner, admin or member.")
    is_default: bool

    @strawberry.field(description=(
        "The organization's profiles the caller may list, as `profiles` lists them: "
        "those the caller owns or administers."
    ))
    async def profiles(self, info: Info, limit: int = 20, cursor: str | None = None
                       ) -> Page[Profile]:
        from graph import lists
        return await lists.organization_profiles(info.context, str(self.id), limit, cursor)

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> Organization:
        return cls(
            id=strawberry.ID(row["id"]), name=row["name"], handle=row["handle"],
            role=row["role"], is_default=row["is_default"],
        )


@strawberry.type
class Profile:
    id: strawberry.ID
    platform_id: str
    display_name: str
    description: str | None
    profile_image_url: str | None
    header_image_url: str | None
    is_private: bool
    default_event_duration_minutes: int | None
    organization_id: strawberry.ID
    created_at: Timestamp | None
    updated_at: Timestamp | None
    row: strawberry.Private[asyncpg.Record]

    @strawberry.field(description=(
        "The profile's events as `profile_events` shows them to the caller, by start "
        "time: with `from` and `to` (RFC 3339 with an offset, both or neither, at most "
        "366 days apart) those that meet [from, to) (a one-off event by its span, a "
        "recurring one by any occurrence); with `status`, scheduled or cancelled ones."
    ))
    async def events(
        self, info: Info, limit: int = 20, cursor: str | None = None,
        from_: Annotated[str | None, strawberry.argument(name="from")] = None,
        to: str | None = None, status: str | None = None,
    ) -> Page[Event]:
        from graph import lists
        return await lists.profile_events(info.context, str(self.id), limit, cursor,
                                          from_, to, status)

    @strawberry.field(description="The profile's series visible to the caller.")
    async def series(self, info: Info, limit: int = 20, cursor: str | None = None
                     ) -> Page[Series]:
        from graph import lists
        return await lists.profile_series(info.context, str(self.id), limit, cursor)

    @strawberry.field(description=(
        "Who follows the profile: for a public profile, or for those who administer it "
        "(null with a resource_not_found error otherwise, as profile_followers)."
    ))
    async def followers(self, info: Info, limit: int = 20, cursor: str | None = None
                        ) -> Page[Annotated[Follower, strawberry.lazy("graph.follows")]] | None:
        from graph import lists
        return await lists.profile_followers(info.context, self.row, limit, cursor)

    @strawberry.field(description=(
        "RSVP counts per `bucket` (day, week (ISO, from Monday) or month) of [from, to) "
        "on `timezone`'s calendar (default the caller's, else UTC), every bucket listed: "
        "the profile's events that start in it (each occurrence of a recurring event "
        "one event; its RSVPs counted once, in the bucket of its first occurrence in the "
        "window) and their RSVPs; `status` (default scheduled, null for all) keeps "
        "scheduled or cancelled events. Every occurrence is counted: past the request's "
        "expansion budget (or more than 500 recurring events) the field is the error "
        "`expansion_limit`, never a smaller count. For the profile's administrators "
        "(forbidden otherwise)."
    ))
    async def rsvp_summary(
        self, info: Info, from_: Annotated[str, strawberry.argument(name="from")], to: str,
        bucket: str = "week", timezone: str | None = None, status: str | None = "scheduled",
    ) -> list[RsvpBucket]:
        from graph import lists
        return await lists.rsvp_summary(info.context, self.row, from_, to, bucket, timezone,
                                        status)

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> Profile:
        return cls(
            row=row,
            id=strawberry.ID(row["id"]), platform_id=row["platform_id"],
            display_name=row["display_name"], description=row["description"],
            profile_image_url=row["profile_image_url"], header_image_url=row["header_image_url"],
            is_private=row["is_private"],
            default_event_duration_minutes=row["default_event_duration_minutes"],
            organization_id=strawberry.ID(row["organization_id"]),
            created_at=row["created_at"], updated_at=row["updated_at"],
        )


@strawberry.type(description="RSVP settings of an event; addressed through the event.")
class RsvpSettings:
    enable_capacity_limit: bool
    capacity_limit: int | None
    allow_waitlist: bool
    allow_multiple_attendees: bool
    allow_notifications: bool

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> RsvpSettings:
        return cls(
            enable_capacity_limit=row["enable_capacity_limit"],
            capacity_limit=row["capacity_limit"], allow_waitlist=row["allow_waitlist"],
            allow_multiple_attendees=row["allow_multiple_attendees"],
            allow_notifications=row["allow_notifications"],
        )


@strawberry.type(description="Counts of an event's RSVPs; total_attendees sums going guests.")
class RsvpStats:
    event_id: strawberry.ID
    going: int = strawberry.field(
        description="Going RSVPs: records, one per answer whatever its num_guests.")
    maybe: int
    not_going: int
    waitlist: int
    total_attendees: int = strawberry.field(
        description="People going: each going RSVP with its guests (the sum of num_guests), "
        "as capacity counts them.")

    @classmethod
    def from_row(cls, event_id: str, row: asyncpg.Record | None) -> RsvpStats:
        counts = ("going", "maybe", "not_going", "waitlist", "total_attendees")
        values = {k: int(row[k]) if row is not None else 0 for k in counts}
        return cls(event_id=strawberry.ID(event_id), **values)


@strawberry.type
class Rsvp:
    id: strawberry.ID
    event_id: strawberry.ID
    attendee_email: str | None
    attendee_first_name: str | None
    attendee_last_name: str | None
    status: str
    rsvp_type: str | None
    num_guests: int
    created_at: Timestamp
    updated_at: Timestamp

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> Rsvp:
        return cls(
            id=strawberry.ID(row["id"]), event_id=strawberry.ID(row["event_id"]),
            attendee_email=row["attendee_email"],
            attendee_first_name=row["attendee_first_name"],
            attendee_last_name=row["attendee_last_name"], status=row["status"],
            rsvp_type=row["rsvp_type"], num_guests=row["num_guests"],
            created_at=row["created_at"], updated_at=row["updated_at"],
        )


@strawberry.type(description="The caller's RSVP, and whether this answer created it.")
class RsvpAnswer:
    rsvp: Rsvp
    created: bool


@strawberry.type
class Series:
    id: strawberry.ID
    profile_id: strawberry.ID | None = strawberry.field(
        description="Null when the profile is no longer visible to the caller."
    )
    name: str
    slug: str
    description: str | None
    is_private: bool
    created_at: Timestamp | None
    updated_at: Timestamp | None

    @strawberry.field(description="The series' events visible to the caller, by start time.")
    async def events(self, info: Info, limit: int = 20, cursor: str | None = None
                     ) -> Page[Event]:
        from graph import lists
        return await lists.series_events(info.context, str(self.id), limit, cursor)

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> Series:
        return cls(
            id=strawberry.ID(row["id"]),
            profile_id=strawberry.ID(row["profile_id"]) if row["profile_visible"] else None,
            name=row["name"], slug=row["slug"], description=row["description"],
            is_private=row["is_private"], created_at=row["created_at"],
            updated_at=row["updated_at"],
        )


@strawberry.type
class SeriesDeletion:
    member_count: int
    deleted_event_count: int
    preserved_event_count: int


@strawberry.type
class SeriesDeletionPreview:
    series_name: str
    member_count: int
    exclusive_count: int
    shared_count: int
    member_recurring_count: int
    exclusive_recurring_count: int
    shared_recurring_count: int


@strawberry.type
class Event:
    id: strawberry.ID
    profile_id: strawberry.ID | None = strawberry.field(
        description="Null when the profile is no longer visible to the caller."
    )
    title: str
    description: str | None
    location: str | None
    start_time: Timestamp
    end_time: Timestamp | None
    start_timezone: str | None
    end_timezone: str | None
    recurrence_rule: str | None
    status: str | None = strawberry.field(description="scheduled or cancelled.")
    slug: str
    image_url: str | None
    is_all_day: bool
    is_private: bool
    require_rsvp: bool
    require_payment: bool
    cancellation_reason: str | None
    cancelled_at: Timestamp | None
    is_rescheduled: bool | None
    created_at: Timestamp | None
    updated_at: Timestamp | None
    transparency: str = strawberry.field(description="opaque (busy) or transparent (free).")
    row: strawberry.Private[asyncpg.Record]

    @strawberry.field
    def rsvp_settings(self) -> RsvpSettings:
        return RsvpSettings.from_row(self.row)

    @strawberry.field(description=LOCAL_START)
    def local_start_time(self) -> dt.datetime | None:
        return on_its_clock(self.start_time, self.start_timezone, self.is_all_day)

    @strawberry.field(description=LOCAL_END)
    def local_end_time(self) -> dt.datetime | None:
        return on_its_clock(self.end_time, self.end_timezone, self.is_all_day)

    @strawberry.field(description=(
        "The event's RSVPs as `event_rsvps` shows them: all of them to whoever "
        "administers the event, the caller's own to anyone else; with `status`, of "
        "that status only."
    ))
    async def rsvps(self, info: Info, limit: int = 20, cursor: str | None = None,
                    status: str | None = None) -> Page[Rsvp]:
        from graph import lists
        return await lists.event_rsvps(info.context, self.row, limit, cursor, status)

    @strawberry.field(description=(
        "The event's occurrences that meet [from, to) (RFC 3339 with an offset, at most "
        "62 days apart), as the agenda expands it: sorted, the first 500; `timezone` "
        "(default the caller's, else UTC) sets `local_*`. Drawn from the request's "
        "expansion budget: past it, the error `expansion_limit`."
    ))
    async def occurrences(
        self, info: Info, from_: Annotated[str, strawberry.argument(name="from")], to: str,
        timezone: str | None = None,
    ) -> list[EventOccurrence]:
        from graph import lists
        return await lists.event_occurrences(info.context, self.row, from_, to, timezone)

    @strawberry.field(description="The owning profile, when visible (expand=profile).")
    async def profile(self, info: strawberry.Info) -> Profile | None:
        if self.profile_id is None:
            return None
        row = await info.context.loaders.profile.load(str(self.profile_id))
        return Profile.from_row(row) if row is not None else None

    @strawberry.field(description="The visible series the event is in (expand=series).")
    async def series(self, info: strawberry.Info) -> list[Series]:
        rows = await info.context.loaders.series_of_event.load(str(self.id))
        return [Series.from_row(r) for r in rows]

    @strawberry.field(description="Counts of the event's RSVPs (expand=rsvp_stats).")
    async def rsvp_stats(self, info: strawberry.Info) -> RsvpStats:
        row = await info.context.loaders.rsvp_stats.load(str(self.id))
        return RsvpStats.from_row(str(self.id), row)

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> Event:
        # The hottest constructor of every event list (20 to 100 per request): the
        # dataclass's keyword __init__ cost four times this (bench/overhead.py).
        event = cls.__new__(cls)
        values = event.__dict__
        for name in _EVENT_COLUMNS:
            values[name] = row[name]
        values["profile_id"] = row["profile_id"] if row["profile_visible"] else None
        values["row"] = row
        return event


_EVENT_COLUMNS = (
    "id", "title", "description", "location", "start_time", "end_time", "start_timezone",
    "end_timezone", "recurrence_rule", "status", "slug", "image_url", "is_all_day",
    "is_private", "require_rsvp", "require_payment", "cancellation_reason", "cancelled_at",
    "is_rescheduled", "created_at", "updated_at", "transparency",
)
"""Event's fields that are its row's columns as they are (`strawberry.ID` is `str`)."""


@strawberry.type(description=(
    "One occurrence of a recurring event as it stands (docs/occurrences.md): the event's "
    "values where it has no change of its own."))
class Occurrence:
    occurrence_id: str = strawberry.field(
        description="`<event_id>:<original start YYYYMMDDTHHMMSSZ>`, or `<event_id>:<YYYYMMDD>` "
        "for all-day occurrences: where the event's rule puts it, whether or not it moved."
    )
    event_id: strawberry.ID
    original_start: str = strawberry.field(
        description="Its slot under the rule: an instant (UTC), a date for all-day ones.")
    start_time: Timestamp
    end_time: Timestamp | None = strawberry.field(description="Null for a point in time.")
    start_timezone: str | None
    end_timezone: str | None
    start_date: dt.date | None = strawberry.field(description="All-day occurrences only.")
    end_date: dt.date | None = strawberry.field(
        description="All-day occurrences only, exclusive.")
    is_all_day: bool
    status: str = strawberry.field(
        description="scheduled or cancelled (the occurrence, or its whole event).")
    is_exception: bool = strawberry.field(
        description="True when it has changes of its own or is cancelled on its own.")
    title: str
    description: str | None
    location: str | None

    @classmethod
    def of(cls, view: Any) -> Any:
        """From a `domain.occurrences.View` (field for field), without the keyword
        __init__: Event.occurrences makes hundreds of them."""
        made = cls.__new__(cls)
        made.__dict__.update(view._asdict())
        return made


@strawberry.type(description="One occurrence of an event, as the agenda expands it.")
class EventOccurrence(Occurrence):
    start: Timestamp
    end: Timestamp | None = strawberry.field(description="Null for a point in time.")
    local_start: dt.datetime = strawberry.field(description="`start` in the asked zone.")
    local_end: dt.datetime | None = strawberry.field(description="`end` in the asked zone.")

    @strawberry.field(description=LOCAL_START.replace("`start_time`", "`start`")
                      .replace("`start_timezone`", "the event's `start_timezone`"))
    def local_start_time(self) -> dt.datetime | None:
        return on_its_clock(self.start, self.start_timezone, self.is_all_day)

    @strawberry.field(description=LOCAL_END.replace("`end_time`", "`end`")
                      .replace("`end_timezone`", "the event's `end_timezone`"))
    def local_end_time(self) -> dt.datetime | None:
        return on_its_clock(self.end, self.end_timezone, self.is_all_day)


@strawberry.type(description=(
    "RSVP counts of one day, ISO week or month: the events that start in it and their "
    "RSVPs."
))
class RsvpBucket:
    start: dt.date = strawberry.field(description="The bucket's first day.")
    events: int
    going: int = strawberry.field(description="Going RSVPs (records, as RsvpStats counts).")
    maybe: int
    not_going: int
    waitlist: int
    total_attendees: int = strawberry.field(
        description="People going, each RSVP with its guests (num_guests), as capacity "
        "counts them.")
