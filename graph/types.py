"""GraphQL object types. Leaf fields are plain attributes: resolving them is a
synchronous getattr, never a coroutine per field."""

from __future__ import annotations

from typing import Generic, TypeVar

import asyncpg
import strawberry

from graph.scalars import Timestamp

T = TypeVar("T")


@strawberry.type(description="A page of a list, in the list's stable order.")
class Page(Generic[T]):
    data: list[T]
    has_more: bool
    next_cursor: str | None


@strawberry.type
class Organization:
    id: strawberry.ID
    name: str
    handle: str | None
    role: str = strawberry.field(description="The caller's role: owner, admin or member.")
    is_default: bool

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

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> Profile:
        return cls(
            id=strawberry.ID(row["id"]), platform_id=row["platform_id"],
            display_name=row["display_name"], description=row["description"],
            profile_image_url=row["profile_image_url"], header_image_url=row["header_image_url"],
            is_private=row["is_private"],
            default_event_duration_minutes=row["default_event_duration_minutes"],
            organization_id=strawberry.ID(row["organization_id"]),
            created_at=row["created_at"], updated_at=row["updated_at"],
        )
