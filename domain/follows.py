"""Follows: what may be followed, the one follow per target, and who sees a
profile's followers.

A follow outlives its target's visibility: when the profile turns private or is
deleted, or the series or event is deleted, the follow stays and reads show its
`target_id` as null (db/follows.py), until its user deletes it.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

import asyncpg
from pydantic import Field, ValidationInfo, WithJsonSchema, field_validator
from pydantic_core import PydanticCustomError

from core.errors import ApiError, internal_error, not_found
from db import follows as store
from db.database import Database
from domain import ids
from domain.auth import Viewer
from domain.profiles import administers, is_visible
from domain.validation import Body

FollowingType = Literal["profile", "series", "event"]
FOLLOWING_TYPES: tuple[str, ...] = get_args(FollowingType)
PREFIXES = {"profile": "prf", "series": "ser", "event": "evt"}

# A repeat follow finds the existing row; only a delete racing with it can make
# that row vanish in between, so a couple of tries settle it.
_ATTEMPTS = 3

TargetId = Annotated[
    str,
    WithJsonSchema({
        "type": "string",
        "anyOf": [{"pattern": ids.pattern(p)} for p in PREFIXES.values()],
        "description": "The followed resource's ID: prf_ for a profile, ser_ for a series, "
                       "evt_ for an event, as following_type says.",
    }),
]


# The prefix of target_id that following_type names, as JSON Schema.
_TARGET_OF_TYPE: dict[str, Any] = {"allOf": [
    {"if": {"properties": {"following_type": {"const": kind}}},
     "then": {"properties": {"target_id": {"pattern": ids.pattern(prefix)}}}}
    for kind, prefix in PREFIXES.items()
]}


class FollowCreate(Body, json_schema_extra=_TARGET_OF_TYPE):
    following_type: FollowingType = Field(description="What is followed: profile, series or event.")
    target_id: TargetId

    @field_validator("target_id", mode="before")
    @classmethod
    def _prefix_of_type(cls, value: Any, info: ValidationInfo) -> str:
        # Runs after following_type: its value is known here when it was valid.
        kind = info.data.get("following_type")
        prefixes = [PREFIXES[kind]] if kind in PREFIXES else list(PREFIXES.values())
        if not any(ids.is_valid(p, value) for p in prefixes):
            if kind in PREFIXES:
                raise PydanticCustomError(
                    "invalid_id",
                    "must be an ID of the form {prefix}_ followed by 32 hex digits, as "
                    "following_type is {kind}",
                    {"prefix": PREFIXES[kind], "kind": kind},
                )
            raise PydanticCustomError(
                "invalid_id",
                "must be an ID of the form prf_, ser_ or evt_ followed by 32 hex digits",
            )
        assert isinstance(value, str)
        return value.lower()


def check_type_filter(value: str | None) -> str | None:
    """`following_type` as a list filter (REST checks it first, GraphQL here)."""
    if value is not None and value not in FOLLOWING_TYPES:
        raise ApiError(
            "invalid_query_parameter",
            f"`following_type` must be one of {', '.join(FOLLOWING_TYPES)}.",
            param="following_type", details={"value": value},
        )
    return value


def check_target(following_type: str, row: asyncpg.Record | None, viewer: Viewer
                 ) -> asyncpg.Record:
    """The target must exist and be visible to the caller. Event and series rows
    come from loaders that return visible ones only; a profile row is checked
    here. Following one's own profile is allowed."""
    if row is None or (following_type == "profile" and not is_visible(row, viewer)):
        raise not_found(following_type, param="target_id")
    return row


async def follow(db: Database, viewer: Viewer, data: FollowCreate
                 ) -> tuple[asyncpg.Record, bool]:
    """The caller's follow of the (visible) target, and whether this call made it.
    The unique index decides between concurrent identical follows."""
    for _ in range(_ATTEMPTS):
        row = await store.insert(db, ids.new_id("fol"), viewer.user_id, data.following_type,
                                 data.target_id)
        if row is not None:
            return row, True
        row = await store.by_target(db, viewer.user_id, data.following_type, data.target_id)
        if row is not None:
            return row, False
    raise internal_error()


async def unfollow(db: Database, viewer: Viewer, follow_id: str) -> None:
    """Only the caller's own follows; anyone else's is not found."""
    if not await store.delete(db, follow_id, viewer.user_id):
        raise not_found("follow", param="follow_id")


def check_followers_visible(row: asyncpg.Record | None, viewer: Viewer) -> asyncpg.Record:
    """A profile's followers are shown when it is public and live, or to those who
    administer it; a deleted profile has none to show."""
    if row is None or row["deleted_at"] is not None:
        raise not_found("profile", param="profile_id")
    if row["is_private"] and not administers(row, viewer):
        raise not_found("profile", param="profile_id")
    return row
