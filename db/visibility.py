"""Who sees what, written once in SQL for everything a profile owns (events, series).

Queries join the owning profile as `p` and the viewer's membership of its
organization as `m` (`JOIN_PROFILE`). An item is seen by the people who run its
profile (owner and organization members; once the profile is deleted, only its
owner and administrators), and by everyone else only when the item and its
profile are public and the profile is live. `viewer` names the query parameter
that holds the viewer's user id.
"""

from __future__ import annotations


def select(columns_: str, table: str, item: str, viewer: str) -> str:
    """`SELECT columns_ + visibility columns FROM table item` joined to its profile."""
    return f"SELECT {columns_}, {columns(viewer)} FROM {table} {item} {join_profile(item, viewer)}"


def join_profile(item: str, viewer: str) -> str:
    return f"""
    JOIN profiles p ON p.id = {item}.profile_id
    LEFT JOIN organization_members m
      ON m.organization_id = p.organization_id AND m.user_id = {viewer}
    """


def columns(viewer: str) -> str:
    """What permission checks and `profile_id: null` need, alongside each row."""
    return f"""
    p.owner_user_id, m.role AS viewer_role, {profile_visible(viewer)} AS profile_visible
    """


def profile_visible(viewer: str) -> str:
    """Whether the viewer may see the profile `p` itself."""
    return f"""(p.deleted_at IS NULL
    AND (NOT p.is_private OR p.owner_user_id = {viewer} OR m.role IS NOT NULL))"""


def administered(viewer: str) -> str:
    """Whether the viewer runs the live profile `p`: its owner, or an owner or admin
    of its organization (`GET /v1/profiles` and `GET /v1/series` list these)."""
    return f"""(p.deleted_at IS NULL
    AND (p.owner_user_id = {viewer} OR m.role IN ('owner', 'admin')))"""


def visible(item: str, viewer: str) -> str:
    return f"""(
    (p.deleted_at IS NULL
     AND ((NOT {item}.is_private AND NOT p.is_private)
          OR p.owner_user_id = {viewer} OR m.role IS NOT NULL))
    OR (p.deleted_at IS NOT NULL
        AND (p.owner_user_id = {viewer} OR m.role IN ('owner', 'admin')))
    )"""
