"""Follows, and the followers of a profile.

A follow keeps its target's ID even when the target goes away or out of sight;
reads compute, per row and in the same statement, whether the viewer may still
see the target (db/visibility.py), so a page costs one query whatever its size.
"""

from __future__ import annotations

from datetime import datetime

import asyncpg

from db import nested, visibility
from db.database import Database, Tx

_COLUMNS = "f.id, f.following_type, f.target_id, f.created_at"


def _target_visible(viewer: str) -> str:
    """Whether `viewer` may see the target of follow `f`: events and series by
    the rule of what a profile owns, a profile by its own `profile_visible`."""
    return f"""
    CASE f.following_type
      WHEN 'event' THEN EXISTS (
        SELECT 1 FROM events e {visibility.join_profile('e', viewer)}
        WHERE e.id = f.target_id AND {visibility.visible('e', viewer)})
      WHEN 'series' THEN EXISTS (
        SELECT 1 FROM series s {visibility.join_profile('s', viewer)}
        WHERE s.id = f.target_id AND {visibility.visible('s', viewer)})
      ELSE EXISTS (
        SELECT 1 FROM (
          SELECT {visibility.columns(viewer)}
          FROM (VALUES (f.target_id)) AS t (profile_id) {visibility.join_profile('t', viewer)}
        ) target WHERE target.profile_visible)
    END AS target_visible
    """


async def page(
    db: Database, user_id: str, after: tuple[datetime, str] | None, limit: int, *,
    following_type: str | None = None,
) -> list[asyncpg.Record]:
    """The user's follows by (created_at, id), optionally of one type."""
    after_ts, after_id = after if after else (None, None)
    return await db.fetch(
        f"""
        SELECT {_COLUMNS}, {_target_visible('$1')}
        FROM follows f
        WHERE f.user_id = $1
          AND ($5::text IS NULL OR f.following_type = $5)
          AND ($2::timestamptz IS NULL OR (f.created_at, f.id) > ($2, $3))
        ORDER BY f.created_at, f.id
        LIMIT $4
        """,
        user_id, after_ts, after_id, limit, following_type,
    )


async def insert(db: Database | Tx, follow_id: str, user_id: str, following_type: str,
                 target_id: str) -> asyncpg.Record | None:
    """The new follow, or None when the user already follows the target. The
    caller has just checked that the target is visible."""
    return await db.fetchrow(
        f"""
        INSERT INTO follows AS f (id, user_id, following_type, target_id)
        VALUES ($1, $2, $3, $4)
        ON CONFLICT (user_id, following_type, target_id) DO NOTHING
        RETURNING {_COLUMNS}, true AS target_visible
        """,
        follow_id, user_id, following_type, target_id,
    )


async def by_target(db: Database | Tx, user_id: str, following_type: str, target_id: str
                    ) -> asyncpg.Record | None:
    """The user's follow of the target, if any (its visibility checked by the caller)."""
    return await db.fetchrow(
        f"""
        SELECT {_COLUMNS}, true AS target_visible FROM follows f
        WHERE f.user_id = $1 AND f.following_type = $2 AND f.target_id = $3
        """,
        user_id, following_type, target_id,
    )


async def delete(db: Database | Tx, follow_id: str, user_id: str) -> bool:
    """Only the user's own follow; False when there is none such."""
    status = await db.execute(
        "DELETE FROM follows WHERE id = $1 AND user_id = $2", follow_id, user_id
    )
    return status != "DELETE 0"


FOLLOWERS = nested.Listing("""
    SELECT f.id, f.created_at, u.display_name
    FROM follows f JOIN users u ON u.id = f.user_id
    WHERE f.following_type = 'profile' AND f.target_id = k.parent
""", "f.created_at")
"""Follows of a profile by (created_at, id), with each follower's display name and
nothing else about them."""
