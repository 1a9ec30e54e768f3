"""Subscriptions: request shapes and the subscribe / pause / unsubscribe rules.
The copying itself is done by the sync jobs (domain.sync)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import asyncpg
from pydantic import Field, field_validator
from pydantic_core import PydanticCustomError

from core.errors import ApiError, not_found
from db import subscriptions as store
from db.database import Database, Tx
from domain import ids, sync
from domain.auth import Viewer
from domain.validation import Body, Omittable, id_of

MAX_EXTERNAL_CALENDARS = 100


# source_of's rule as JSON Schema: the ID that goes with subscription_type, alone.
_ONE_SOURCE: dict[str, Any] = {
    "if": {"properties": {"subscription_type": {"const": "profile"}}},
    "then": {"required": ["profile_id"],
             "properties": {"profile_id": {"type": "string"}, "series_id": {"type": "null"}}},
    "else": {"required": ["series_id"],
             "properties": {"series_id": {"type": "string"}, "profile_id": {"type": "null"}}},
}


class SubscriptionCreate(Body, json_schema_extra=_ONE_SOURCE):
    subscription_type: Literal["profile", "series"]
    profile_id: id_of("prf") | None = None  # type: ignore[valid-type]
    series_id: id_of("ser") | None = None  # type: ignore[valid-type]
    include_personal_calendar: bool = True
    external_calendar_ids: Annotated[
        list[id_of("xcal")],  # type: ignore[valid-type]
        # _unique refuses repeats: advertised, so that clients and models know.
        Field(max_length=MAX_EXTERNAL_CALENDARS, json_schema_extra={"uniqueItems": True}),
    ] = Field(default_factory=list)
    consolidate: bool = False

    @field_validator("external_calendar_ids")
    @classmethod
    def _unique(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise PydanticCustomError("not_unique", "must not repeat an ID")
        return value


class SubscriptionUpdate(Body):
    is_active: Omittable[bool] = None


def source_of(data: SubscriptionCreate) -> tuple[Literal["profile", "series"], str]:
    """The source's kind and ID: the field that goes with `subscription_type`, alone."""
    kind = data.subscription_type
    other = "series" if kind == "profile" else "profile"
    if getattr(data, f"{other}_id") is not None:
        raise ApiError(
            "field_dependency",
            f"`{other}_id` does not go with `subscription_type: {kind}`.",
            param=f"{other}_id",
        )
    source_id: str | None = getattr(data, f"{kind}_id")
    if source_id is None:
        raise ApiError("missing_field", f"`{kind}_id` is required for a {kind} subscription.",
                       param=f"{kind}_id")
    return kind, source_id


def check_owned(row: asyncpg.Record | None) -> asyncpg.Record:
    """Rows come from a loader of the caller's own subscriptions."""
    if row is None:
        raise not_found("subscription", param="subscription_id")
    return row


def check_live(row: asyncpg.Record) -> asyncpg.Record:
    if row["cleanup_requested_at"] is not None:
        raise ApiError(
            "subscription_cleanup_in_progress",
            "This subscription is being removed; retry once its cleanup has finished.",
        )
    return row


async def check_targets(db: Database, viewer: Viewer, calendar_ids: list[str]) -> list[str]:
    """Every target must be one of the caller's connected calendars, and one
    Kalends may write to: a copy that cannot be written is refused now, not
    lost later."""
    if not calendar_ids:
        return []
    found = await store.external_calendars_of(db, calendar_ids, viewer.user_id)
    missing = [c for c in calendar_ids if c not in found]
    if missing:
        raise ApiError("resource_not_found",
                       f"No connected calendar {missing[0]} is visible to you.",
                       param="external_calendar_ids")
    for index, calendar_id in enumerate(calendar_ids):
        if found[calendar_id] is not True:
            raise ApiError(
                "invalid_field",
                f"The connected calendar {calendar_id} is read-only (can_edit is not true); "
                "subscriptions can only copy events into calendars Kalends may write to.",
                param=f"external_calendar_ids.{index}", details={"value": calendar_id},
            )
    return calendar_ids


async def subscribe(db: Database, viewer: Viewer, data: SubscriptionCreate,
                    targets: list[str]) -> tuple[str, bool]:
    """(subscription id, created). Subscribing again to the same source
    reactivates the subscription and replaces its targets."""
    kind, source_id = source_of(data)
    # A concurrent cleanup may delete the existing row between the insert that
    # found it and the lock: then the insert succeeds on the next turn.
    for _ in range(3):
        async with db.transaction() as tx:
            new_id = ids.new_id("sub")
            if await store.insert_new(tx, new_id, viewer.user_id, kind, source_id,
                                      data.include_personal_calendar, targets):
                subscription_id, created = new_id, True
            else:
                row = await store.lock_by_source(tx, viewer.user_id, kind, source_id)
                if row is None:
                    continue
                check_live(row)
                subscription_id, created = row["id"], False
                await store.reactivate(tx, subscription_id, data.include_personal_calendar,
                                       targets)
            if data.consolidate and kind == "profile":
                await _consolidate(tx, viewer, source_id, subscription_id, targets)
            await sync.subscription_changed(tx, subscription_id)
            return subscription_id, created
    raise ApiError("service_unavailable", "The subscription is changing; retry.")


async def _consolidate(tx: Tx, viewer: Viewer, profile_id: str, subscription_id: str,
                       targets: list[str]) -> None:
    """Adopt the user's subscriptions to series of this profile: their copies
    and external targets move to the profile subscription, which covers all of
    them, and they are retired."""
    children = await store.lock_series_children(tx, viewer.user_id, profile_id)
    if not children:
        return
    merged = list(dict.fromkeys([*targets, *(c for r in children
                                             for c in r["external_calendar_ids"])]))
    await store.retire(tx, [r["id"] for r in children], subscription_id, merged)


async def update(db: Database, row: asyncpg.Record, data: SubscriptionUpdate) -> None:
    """Pausing keeps the copies; resuming catches up on what was missed."""
    if data.is_active is None:
        check_live(row)
        return
    async with db.transaction() as tx:
        locked = check_live(check_owned(await store.lock(tx, row["id"])))
        if locked["is_active"] == data.is_active:
            return
        await store.set_active(tx, row["id"], data.is_active)
        if data.is_active:
            await sync.subscription_changed(tx, row["id"])


async def unsubscribe(db: Database, row: asyncpg.Record) -> None:
    """Mark the subscription for removal; a cleanup job removes its copies and
    then the subscription. Asking again while that runs changes nothing."""
    async with db.transaction() as tx:
        locked = check_owned(await store.lock(tx, row["id"]))
        if locked["cleanup_requested_at"] is None:
            await store.request_cleanup(tx, row["id"])
            await sync.subscription_removed(tx, row["id"])
