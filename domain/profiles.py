"""Profiles: request shapes, visibility, permission, and the writes themselves."""

from __future__ import annotations

from typing import Annotated, Any

import asyncpg
from pydantic import Field, StringConstraints

from core.errors import conflict, forbidden, not_found
from db import organizations
from db import profiles as store
from db.database import Database
from domain import ids, sync
from domain.auth import Viewer
from domain.validation import Body, Omittable, Url, id_of

PlatformId = Annotated[
    str,
    StringConstraints(pattern=r"^[A-Za-z0-9_.-]{3,}$", max_length=64),
    Field(description="Handle: letters, digits, `_`, `.`, `-`; 3 to 64 characters."),
]
DisplayName = Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=r"\S")]
Description = Annotated[str, StringConstraints(max_length=5000)]
class ProfileUpdate(Body):
    # Omittable: may be omitted, never sent as null (domain.validation).
    display_name: Omittable[DisplayName] = None
    description: Description | None = None
    profile_image_url: Url | None = None
    header_image_url: Url | None = None
    is_private: Omittable[bool] = None

    def changes(self) -> dict[str, Any]:
        """Fields the caller sent; `null` clears a nullable field."""
        return self.model_dump(exclude_unset=True)


class ProfileCreate(ProfileUpdate):
    platform_id: PlatformId
    display_name: DisplayName
    is_private: bool = False
    organization_id: id_of("org") | None = None  # type: ignore[valid-type]


def is_visible(row: asyncpg.Record, viewer: Viewer) -> bool:
    """Public live profiles, and private ones to their owner and organization."""
    if row["deleted_at"] is not None:
        return False
    if not row["is_private"]:
        return True
    return row["owner_user_id"] == viewer.user_id or row["viewer_role"] is not None


def administers(row: asyncpg.Record, viewer: Viewer) -> bool:
    """The profile's owner and its organization's owners and admins. Rows of a
    profile's events and series carry the same columns (db/visibility.py)."""
    return row["owner_user_id"] == viewer.user_id or row["viewer_role"] in ("owner", "admin")


def check_administrable(
    row: asyncpg.Record | None, viewer: Viewer, *, what: str = "profile",
    param: str = "profile_id",
) -> asyncpg.Record:
    """Writes to a profile, or to its events and series: those who administer
    it. A mere member learns that it exists (403); anyone else sees nothing (404)."""
    if row is None:
        raise not_found(what, param=param)
    if administers(row, viewer):
        return row
    # Event and series rows have no deleted_at: a member never loads those of a
    # deleted profile (db/visibility.py), so every one that reaches here is live.
    if row["viewer_role"] == "member" and row.get("deleted_at") is None:
        raise forbidden(
            "Only the profile's owner or its organization's owners and admins may change it."
        )
    raise not_found(what, param=param)


def check_live(row: asyncpg.Record) -> None:
    """Nothing new is made on a deleted profile."""
    if row["deleted_at"] is not None:
        raise not_found("profile", param="profile_id")


def check_visible(row: asyncpg.Record | None, viewer: Viewer) -> asyncpg.Record:
    if row is None or not is_visible(row, viewer):
        raise not_found("profile", param="profile_id")
    return row


async def create(db: Database, viewer: Viewer, data: ProfileCreate) -> str:
    if data.organization_id is None:
        org_id = await organizations.default_of_user(db, viewer.user_id)
        if org_id is None:  # every user has one; only an operator could have removed it
            raise not_found("default organization", param="organization_id")
    else:
        org_id = data.organization_id
        if await organizations.membership(db, org_id, viewer.user_id) is None:
            raise not_found("organization", param="organization_id")
    profile_id = ids.new_id("prf")
    fields = data.changes()
    fields.pop("platform_id")
    fields.pop("organization_id", None)
    try:
        await store.insert(db, profile_id, org_id, viewer.user_id, data.platform_id, fields)
    except asyncpg.UniqueViolationError:
        raise conflict(
            f"The handle `{data.platform_id}` is already taken.", param="platform_id"
        ) from None
    return profile_id


async def update(db: Database, row: asyncpg.Record, data: ProfileUpdate) -> None:
    check_live(row)
    changes = data.changes()
    async with db.transaction() as tx:
        await store.update(tx, row["id"], changes)
        if "is_private" in changes:  # who may see its events, and so subscribers' copies
            await sync.profile_changed(tx, row["id"])


async def delete(db: Database, row: asyncpg.Record) -> None:
    """Soft delete; a second delete of the same profile changes nothing. Its
    events leave subscribers' calendars (their owner still sees them)."""
    async with db.transaction() as tx:
        if await store.soft_delete(tx, row["id"]):
            await sync.profile_changed(tx, row["id"])
