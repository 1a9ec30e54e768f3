"""Follow resolvers; the rules are in `domain.follows`."""

from __future__ import annotations

import asyncpg
import strawberry

from db import follows as store
from domain import follows as domain
from domain import ids
from graph.context import Context
from graph.inputs import input_type, parse_input
from graph.paging import page
from graph.scalars import Timestamp
from graph.types import Page

FollowCreateInput = input_type(domain.FollowCreate, "FollowCreateInput")

Info = strawberry.Info[Context, None]


@strawberry.type(description="The caller's follow of a profile, a series or an event.")
class Follow:
    id: strawberry.ID
    following_type: str = strawberry.field(description="profile, series or event.")
    target_id: strawberry.ID | None = strawberry.field(
        description="The followed resource; null when it is no longer visible to the caller."
    )
    created_at: Timestamp | None

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> Follow:
        return cls(
            id=strawberry.ID(row["id"]), following_type=row["following_type"],
            target_id=strawberry.ID(row["target_id"]) if row["target_visible"] else None,
            created_at=row["created_at"],
        )


@strawberry.type(description="Someone who follows a profile: their display name, no more.")
class Follower:
    follow_id: strawberry.ID
    display_name: str | None
    followed_at: Timestamp

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> Follower:
        return cls(follow_id=strawberry.ID(row["id"]), display_name=row["display_name"],
                   followed_at=row["created_at"])


@strawberry.type(description="The caller's follow, and whether this call created it.")
class FollowAnswer:
    follow: Follow
    created: bool


async def _target(ctx: Context, following_type: str, target_id: str) -> asyncpg.Record | None:
    loaders = ctx.loaders
    loader = {"profile": loaders.profile, "series": loaders.series, "event": loaders.event}
    return await loader[following_type].load(target_id)


@strawberry.type
class FollowQueries:
    @strawberry.field(description="The caller's follows, oldest first.")
    async def follows(self, info: Info, following_type: str | None = None, limit: int = 20,
                      cursor: str | None = None) -> Page[Follow]:
        ctx = info.context
        kind = domain.check_type_filter(following_type)
        return await page(
            ctx, f"follows:{kind or '*'}", limit, cursor,
            lambda after, n: store.page(ctx.db, ctx.viewer.user_id, after, n,
                                        following_type=kind),
            Follow.from_row,
        )

    @strawberry.field(description=(
        "Who follows a profile: shown for a public profile, or to those who administer it."
    ))
    async def profile_followers(self, info: Info, profile_id: strawberry.ID, limit: int = 20,
                                cursor: str | None = None) -> Page[Follower]:
        ctx = info.context
        key = ids.parse("prf", profile_id, param="profile_id")
        domain.check_followers_visible(await ctx.loaders.profile.load(key), ctx.viewer)
        return await page(
            ctx, f"profile-followers:{key}", limit, cursor,
            lambda after, n: store.FOLLOWERS.page(ctx.db, key, after, n),
            Follower.from_row,
        )


@strawberry.type
class FollowMutations:
    @strawberry.mutation(description=(
        "Follow a visible profile, series or event; following it again returns the same follow."
    ))
    async def create_follow(self, info: Info, input: FollowCreateInput) -> FollowAnswer:
        ctx = info.context
        data = parse_input(domain.FollowCreate, input)
        target = await _target(ctx, data.following_type, data.target_id)
        domain.check_target(data.following_type, target, ctx.viewer)
        row, created = await domain.follow(ctx.db, ctx.viewer, data)
        return FollowAnswer(follow=Follow.from_row(row), created=created)

    @strawberry.mutation(description="Stop following: the caller's own follows only.")
    async def delete_follow(self, info: Info, follow_id: strawberry.ID) -> bool:
        ctx = info.context
        key = ids.parse("fol", follow_id, param="follow_id")
        await domain.unfollow(ctx.db, ctx.viewer, key)
        return True
