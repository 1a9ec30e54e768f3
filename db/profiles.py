"""Profiles. Every read returns the caller's role in the owning organization
alongside the row, so visibility and permission need no second query."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import asyncpg

from db import nested, rows, visibility
from db.database import Database, Tx

_COLUMNS = """
    p.id, p.organization_id, p.owner_user_id, p.platform_id::text AS platform_id,
    p.display_name, p.description, p.profile_image_url, p.header_image_url, p.is_private,
    p.default_event_duration_minutes, p.created_at, p.updated_at, p.deleted_at
"""

# The viewer's membership rides along with every row; `viewer` names the
# query parameter that holds the viewer's user id.
_FROM = """
    FROM profiles p
    LEFT JOIN organization_members m
      ON m.organization_id = p.organization_id AND m.user_id = {viewer}
"""

# Columns a caller may write through create/update.
WRITABLE = (
    "display_name", "description", "profile_image_url", "header_image_url", "is_private",
)


async def by_ids(db: Database, ids: Sequence[str], viewer_id: str) -> list[asyncpg.Record]:
    return await db.fetch(
        f"""
        SELECT {_COLUMNS}, m.role AS viewer_role {_FROM.format(viewer="$2")}
        WHERE p.id = ANY($1::text[])
        """,
        list(ids), viewer_id,
    )


async def administered_page(
    db: Database, viewer_id: str, after: tuple[datetime, str] | None, limit: int
) -> list[asyncpg.Record]:
    """Live profiles the viewer owns or administers, by (created_at, id)."""
    after_ts, after_id = after if after else (None, None)
    return await db.fetch(
        f"""
        SELECT {_COLUMNS}, m.role AS viewer_role {_FROM.format(viewer="$1")}
        WHERE {visibility.administered("$1")}
          AND ($2::timestamptz IS NULL OR (p.created_at, p.id) > ($2, $3))
        ORDER BY p.created_at, p.id
        LIMIT $4
        """,
        viewer_id, after_ts, after_id, limit,
    )


OF_ORGANIZATION = nested.Listing(f"""
    SELECT {_COLUMNS}, m.role AS viewer_role {_FROM.format(viewer="$5")}
    WHERE p.organization_id = k.parent AND {visibility.administered("$5")}
""", "p.created_at")
"""An organization's profiles as `administered_page` lists them ($5: the viewer)."""


async def insert(
    tx: Database | Tx, profile_id: str, organization_id: str, owner_user_id: str,
    platform_id: str, fields: dict[str, Any],
) -> None:
    """Raises asyncpg.UniqueViolationError when the handle is taken."""
    await rows.insert(tx, "profiles", WRITABLE, {
        "id": profile_id, "organization_id": organization_id, "owner_user_id": owner_user_id,
        "platform_id": platform_id,
    }, fields)


async def update(db: Database | Tx, profile_id: str, fields: dict[str, Any]) -> None:
    await rows.update(db, "profiles", WRITABLE, profile_id, fields, condition="deleted_at IS NULL")


async def soft_delete(db: Database | Tx, profile_id: str) -> bool:
    """False when it was deleted already."""
    status = await db.execute(
        "UPDATE profiles SET deleted_at = now() WHERE id = $1 AND deleted_at IS NULL", profile_id
    )
    return status != "UPDATE 0"
