"""Subscriptions. Reads say whether the subscriber may still see the source
(`access_valid`), with the visibility rule of db/visibility.py applied to the
subscriber."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import asyncpg

from db import visibility
from db.database import Database, Tx

_SELECT = f"""
SELECT s.id, s.user_id, s.subscription_type, s.profile_id AS source_profile_id,
       s.series_id AS source_series_id, s.is_active, s.include_personal_calendar,
       s.external_calendar_ids, s.cleanup_requested_at, s.created_at, s.updated_at,
       coalesce(CASE s.subscription_type
           WHEN 'profile' THEN {visibility.profile_visible('s.user_id')}
           ELSE sr.id IS NOT NULL AND {visibility.visible('sr', 's.user_id')}
       END, false) AS access_valid
FROM subscriptions s
LEFT JOIN series sr ON sr.id = s.series_id
LEFT JOIN profiles p ON p.id = coalesce(s.profile_id, sr.profile_id)
LEFT JOIN organization_members m
  ON m.organization_id = p.organization_id AND m.user_id = s.user_id
"""


async def by_ids(db: Database | Tx, ids: Sequence[str], user_id: str) -> list[asyncpg.Record]:
    """The user's own subscriptions, those being removed included."""
    return await db.fetch(
        f"{_SELECT} WHERE s.id = ANY($1::text[]) AND s.user_id = $2", list(ids), user_id
    )


async def page(db: Database, user_id: str, after: tuple[datetime, str] | None, limit: int
               ) -> list[asyncpg.Record]:
    after_ts, after_id = after if after else (None, None)
    return await db.fetch(
        f"""
        {_SELECT}
        WHERE s.user_id = $1 AND s.cleanup_requested_at IS NULL
          AND ($2::timestamptz IS NULL OR (s.created_at, s.id) > ($2, $3))
        ORDER BY s.created_at, s.id
        LIMIT $4
        """,
        user_id, after_ts, after_id, limit,
    )


async def insert_new(
    tx: Tx, subscription_id: str, user_id: str, kind: str, source_id: str,
    include_personal_calendar: bool, external_calendar_ids: list[str],
) -> bool:
    """False when the user already has a subscription to this source."""
    inserted = await tx.fetchval(
        f"""
        INSERT INTO subscriptions (id, user_id, subscription_type, {kind}_id,
                                   include_personal_calendar, external_calendar_ids)
        VALUES ($1, $2, '{kind}', $3, $4, $5)
        ON CONFLICT (user_id, subscription_type, (coalesce(profile_id, series_id))) DO NOTHING
        RETURNING id
        """,
        subscription_id, user_id, source_id, include_personal_calendar, external_calendar_ids,
    )
    return inserted is not None


async def lock_by_source(tx: Tx, user_id: str, kind: str, source_id: str
                         ) -> asyncpg.Record | None:
    return await tx.fetchrow(
        f"""
        SELECT id, cleanup_requested_at FROM subscriptions
        WHERE user_id = $1 AND subscription_type = '{kind}' AND {kind}_id = $2
        FOR UPDATE
        """,
        user_id, source_id,
    )


async def lock(tx: Tx, subscription_id: str) -> asyncpg.Record | None:
    return await tx.fetchrow(
        "SELECT id, is_active, cleanup_requested_at FROM subscriptions WHERE id = $1 FOR UPDATE",
        subscription_id,
    )


async def reactivate(tx: Tx, subscription_id: str, include_personal_calendar: bool,
                     external_calendar_ids: list[str]) -> None:
    await tx.execute(
        """
        UPDATE subscriptions
        SET is_active = true, include_personal_calendar = $2, external_calendar_ids = $3,
            updated_at = now()
        WHERE id = $1
        """,
        subscription_id, include_personal_calendar, external_calendar_ids,
    )


async def set_active(tx: Tx, subscription_id: str, is_active: bool) -> None:
    await tx.execute(
        "UPDATE subscriptions SET is_active = $2, updated_at = now() WHERE id = $1",
        subscription_id, is_active,
    )


async def request_cleanup(tx: Tx, subscription_id: str) -> None:
    await tx.execute(
        "UPDATE subscriptions SET cleanup_requested_at = now(), updated_at = now() WHERE id = $1",
        subscription_id,
    )


async def lock_series_children(tx: Tx, user_id: str, profile_id: str) -> list[asyncpg.Record]:
    """The user's live subscriptions to series of this profile."""
    return await tx.fetch(
        """
        SELECT s.id, s.external_calendar_ids FROM subscriptions s
        JOIN series sr ON sr.id = s.series_id
        WHERE s.user_id = $1 AND sr.profile_id = $2 AND s.cleanup_requested_at IS NULL
        ORDER BY s.id
        FOR UPDATE OF s
        """,
        user_id, profile_id,
    )


async def retire(tx: Tx, child_ids: list[str], into: str, external_calendar_ids: list[str]
                 ) -> None:
    """Hand the children's copies and external targets to `into`, then drop them."""
    await tx.execute(
        "UPDATE calendar_events SET subscription_id = $2 WHERE subscription_id = ANY($1::text[])",
        child_ids, into,
    )
    await tx.execute(
        "UPDATE subscriptions SET external_calendar_ids = $2, updated_at = now() WHERE id = $1",
        into, external_calendar_ids,
    )
    await tx.execute("DELETE FROM subscriptions WHERE id = ANY($1::text[])", child_ids)


async def external_calendars_of(db: Database, ids: Sequence[str], user_id: str
                                ) -> dict[str, bool | None]:
    """Those of `ids` that are the user's connected calendars, with `can_edit`."""
    rows = await db.fetch(
        "SELECT id, can_edit FROM external_calendars WHERE id = ANY($1::text[]) AND user_id = $2",
        list(ids), user_id,
    )
    return {r["id"]: r["can_edit"] for r in rows}
