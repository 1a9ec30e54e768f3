"""Organizations and their members."""

from __future__ import annotations

import asyncpg

from db.database import Database, Tx


async def insert(tx: Database | Tx, org_id: str, name: str, handle: str | None) -> None:
    await tx.execute(
        "INSERT INTO organizations (id, name, handle) VALUES ($1, $2, $3)", org_id, name, handle
    )


async def add_member(
    tx: Database | Tx, org_id: str, user_id: str, role: str, *, is_default: bool = False
) -> None:
    await tx.execute(
        """
        INSERT INTO organization_members (organization_id, user_id, role, is_default)
        VALUES ($1, $2, $3, $4)
        ON CONFLICT (organization_id, user_id) DO UPDATE SET role = EXCLUDED.role
        """,
        org_id, user_id, role, is_default,
    )


async def exists(db: Database | Tx, org_id: str) -> bool:
    return bool(await db.fetchval("SELECT true FROM organizations WHERE id = $1", org_id))


async def of_user(db: Database | Tx, user_id: str) -> list[asyncpg.Record]:
    return await db.fetch(
        """
        SELECT o.id, o.name, o.handle, m.role, m.is_default
        FROM organization_members m JOIN organizations o ON o.id = m.organization_id
        WHERE m.user_id = $1
        ORDER BY m.created_at, o.id
        """,
        user_id,
    )


async def membership(db: Database | Tx, org_id: str, user_id: str) -> asyncpg.Record | None:
    return await db.fetchrow(
        "SELECT role, is_default FROM organization_members"
        " WHERE organization_id = $1 AND user_id = $2",
        org_id, user_id,
    )


async def default_of_user(db: Database | Tx, user_id: str) -> str | None:
    return await db.fetchval(  # type: ignore[no-any-return]
        "SELECT organization_id FROM organization_members WHERE user_id = $1 AND is_default",
        user_id,
    )
