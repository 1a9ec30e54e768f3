"""Profile resolvers: load through the per-request loader, decide in `domain.profiles`."""

from __future__ import annotations

import strawberry

from db import profiles as store
from domain import ids
from domain import profiles as domain
from graph.context import Context
from graph.dataloaders import reload
from graph.inputs import input_type, parse_input
from graph.paging import page
from graph.types import Page, Profile

ProfileCreateInput = input_type(domain.ProfileCreate, "ProfileCreateInput")
ProfileUpdateInput = input_type(domain.ProfileUpdate, "ProfileUpdateInput")

Info = strawberry.Info[Context, None]


@strawberry.type
class ProfileQueries:
    @strawberry.field(description="Profiles the caller owns or administers.")
    async def profiles(
        self, info: Info, limit: int = 20, cursor: str | None = None
    ) -> Page[Profile]:
        ctx = info.context
        return await page(
            ctx, "profiles", limit, cursor,
            lambda after, n: store.administered_page(ctx.db, ctx.viewer.user_id, after, n),
            Profile.from_row,
        )

    @strawberry.field(description="A profile visible to the caller.")
    async def profile(self, info: Info, profile_id: strawberry.ID) -> Profile:
        ctx = info.context
        key = ids.parse("prf", profile_id, param="profile_id")
        row = domain.check_visible(await ctx.loaders.profile.load(key), ctx.viewer)
        return Profile.from_row(row)


@strawberry.type
class ProfileMutations:
    @strawberry.mutation(description="Create a profile in one of the caller's organizations.")
    async def create_profile(self, info: Info, input: ProfileCreateInput) -> Profile:
        ctx = info.context
        data = parse_input(domain.ProfileCreate, input)
        profile_id = await domain.create(ctx.db, ctx.viewer, data)
        row = await ctx.loaders.profile.load(profile_id)
        assert row is not None
        return Profile.from_row(row)

    @strawberry.mutation(description="Change a profile the caller administers.")
    async def update_profile(
        self, info: Info, profile_id: strawberry.ID, input: ProfileUpdateInput
    ) -> Profile:
        ctx = info.context
        key = ids.parse("prf", profile_id, param="profile_id")
        data = parse_input(domain.ProfileUpdate, input)
        row = domain.check_administrable(await ctx.loaders.profile.load(key), ctx.viewer)
        await domain.update(ctx.db, row, data)
        fresh = await reload(ctx.loaders.profile, key)
        assert fresh is not None
        return Profile.from_row(fresh)

    @strawberry.mutation(description="Soft-delete a profile; deleting it again is a no-op.")
    async def delete_profile(self, info: Info, profile_id: strawberry.ID) -> bool:
        ctx = info.context
        key = ids.parse("prf", profile_id, param="profile_id")
        row = domain.check_administrable(await ctx.loaders.profile.load(key), ctx.viewer)
        await domain.delete(ctx.db, row)
        return True
