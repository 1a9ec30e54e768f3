"""Series: request shapes, permission, membership and deletion."""

from __future__ import annotations

from typing import Annotated

import asyncpg
from pydantic import StringConstraints

from core.errors import ApiError, conflict, not_found
from db import series as store
from db.database import Database
from domain import ids, profiles, sync
from domain.auth import Viewer
from domain.events import Slug
from domain.notify import webhooks
from domain.profiles import Description
from domain.validation import Body, Omittable, id_of

Name = Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=r"\S")]


class SeriesUpdate(Body):
    name: Omittable[Name] = None
    slug: Omittable[Slug] = None
    description: Description | None = None
    is_private: Omittable[bool] = None


class SeriesCreate(SeriesUpdate):
    name: Name
    slug: Slug


class SeriesEventLink(Body):
    event_id: id_of("evt")  # type: ignore[valid-type]


def check_visible(row: asyncpg.Record | None) -> asyncpg.Record:
    """Rows come from loaders that return visible series only."""
    if row is None:
        raise not_found("series", param="series_id")
    return row


def check_administrable(row: asyncpg.Record | None, viewer: Viewer) -> asyncpg.Record:
    """Writes: those who administer the series' profile (domain.profiles)."""
    return profiles.check_administrable(row, viewer, what="series", param="series_id")


def _slug_taken(slug: str) -> ApiError:
    return conflict(f"The slug `{slug}` is already used by a series of this profile.",
                    param="slug")


async def create(db: Database, profile: asyncpg.Record, data: SeriesCreate) -> str:
    series_id = ids.new_id("ser")
    try:
        await store.insert(db, series_id, profile["id"], data.model_dump(exclude_unset=True))
    except asyncpg.UniqueViolationError:
        raise _slug_taken(data.slug) from None
    return series_id


async def update(db: Database, row: asyncpg.Record, data: SeriesUpdate) -> None:
    changes = data.model_dump(exclude_unset=True)
    try:
        async with db.transaction() as tx:
            if not await store.lock(tx, row["id"]):  # deleted since it was read
                raise not_found("series", param="series_id")
            await store.update(tx, row["id"], changes)
            if "is_private" in changes:  # who may see it, and so its subscribers' copies
                await sync.series_changed(tx, row["id"])
    except asyncpg.UniqueViolationError:
        raise _slug_taken(changes.get("slug", row["slug"])) from None


async def delete(db: Database, row: asyncpg.Record, *,
                 cascade_exclusive_events: bool) -> dict[str, int]:
    """Events in no other series go too only with `cascade_exclusive_events`;
    events shared with another series always stay."""
    async with db.transaction() as tx:
        members = await store.lock_for_delete(tx, row["id"], events=cascade_exclusive_events)
        if members is None:  # deleted by a concurrent request: it was that one's
            raise not_found("series", param="series_id")
        doomed = await store.exclusive_events(tx, row["id"]) if cascade_exclusive_events else []
        await webhooks.record(tx, "event.deleted", row["profile_id"], "event",
                              *({"event_id": e} for e in doomed))  # each as it was
        await store.delete(tx, row["id"], doomed)
        # Its subscribers' copies, and the copies of any event deleted with it,
        # are all among the profile's.
        await sync.profile_changed(tx, row["profile_id"])
    return {"member_count": members, "deleted_event_count": len(doomed),
            "preserved_event_count": members - len(doomed)}


async def link(db: Database, series: asyncpg.Record, event: asyncpg.Record) -> None:
    if event["profile_id"] != series["profile_id"]:
        raise ApiError(
            "invalid_field", "A series holds events of its own profile only.",
            param="event_id", details={"value": event["id"]},
        )
    try:
        async with db.transaction() as tx:
            await store.link(tx, series["id"], event["id"])
            await sync.event_changed(tx, event["id"])
    except asyncpg.ForeignKeyViolationError as exc:
        # The series or the event was deleted between the check and the link.
        if exc.constraint_name == "series_events_series_id_fkey":
            raise not_found("series", param="series_id") from None
        raise not_found("event", param="event_id") from None


async def unlink(db: Database, series: asyncpg.Record, event_id: str) -> None:
    """Removes the link only, never the event."""
    async with db.transaction() as tx:
        if not await store.unlink(tx, series["id"], event_id):
            raise not_found("event in this series", param="event_id")
        await sync.event_changed(tx, event_id)
