"""The caller's context (`context`, REST `GET /v1/context`, MCP `getContext`); the
rules are in `domain.context`."""

from __future__ import annotations

import datetime as dt

import asyncpg
import strawberry

from domain import context as domain
from graph.context import Context
from graph.scalars import Timestamp

Info = strawberry.Info[Context, None]


@strawberry.type(description="A toolset of the MCP routes, and how many tools it holds.")
class Toolset:
    name: str
    tool_count: int


# Types of their own, holding what an agent starts with: the whole Organization,
# Profile and Calendar are a call away, and OpenAPI names a component per type.
@strawberry.type(description="An organization the caller belongs to.")
class ContextOrganization:
    id: strawberry.ID
    name: str
    role: str = strawberry.field(description="The caller's role: owner, admin or member.")

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> ContextOrganization:
        return cls(id=strawberry.ID(row["id"]), name=row["name"], role=row["role"])


@strawberry.type(description="A profile the caller owns or administers.")
class ContextProfile:
    id: strawberry.ID
    display_name: str
    organization_id: strawberry.ID

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> ContextProfile:
        return cls(id=strawberry.ID(row["id"]), display_name=row["display_name"],
                   organization_id=strawberry.ID(row["organization_id"]))


@strawberry.type(description="One of the caller's calendars.")
class ContextCalendar:
    id: strawberry.ID
    name: str
    is_default: bool = strawberry.field(description="The calendar created with the user.")

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> ContextCalendar:
        return cls(id=strawberry.ID(row["id"]), name=row["name"], is_default=row["is_default"])


@strawberry.type(description=(
    f"The first {domain.MAX_PROFILES} profiles the caller owns or administers, oldest first."
))
class FirstProfiles:
    data: list[ContextProfile]
    has_more: bool = strawberry.field(description="More than these: `profiles` lists them all.")


@strawberry.type(description=(
    f"The caller's first {domain.MAX_CALENDARS} calendars, oldest (the default) first."))
class FirstCalendars:
    data: list[ContextCalendar]
    has_more: bool = strawberry.field(description="More than these: `calendars` lists them all.")


@strawberry.type(description=(
    "What an agent needs before its first real call: the time now on the caller's clock, "
    "who they are and where they can write."
))
class CallerContext:
    now: Timestamp = strawberry.field(description="Now, in UTC.")
    time_zone: str = strawberry.field(description="The caller's saved zone, else UTC.")
    local_now: dt.datetime = strawberry.field(
        description="Now on `time_zone`'s clock, RFC 3339 with its offset.")
    email: str
    organizations: list[ContextOrganization] = strawberry.field(
        description="The organizations the caller belongs to, with their role.")
    profiles: FirstProfiles
    calendars: FirstCalendars
    toolsets: list[Toolset] = strawberry.field(description=(
        "The MCP toolsets, `core` first, each with its tool count."))


def _toolsets(ctx: Context) -> list[Toolset]:
    return [Toolset(name=name, tool_count=count) for name, count in ctx.services.toolsets]


@strawberry.type
class CallerQueries:
    @strawberry.field(description=(
        "The caller's context: now, their zone and local time, organizations, the "
        "profiles they administer, their calendars, and the MCP toolsets."
    ))
    async def context(self, info: Info) -> CallerContext:
        ctx = info.context
        found = await domain.read(ctx.db, ctx.viewer)
        return CallerContext(
            now=Timestamp(found.now), time_zone=found.zone.key, local_now=found.local_now,
            email=ctx.viewer.email,
            organizations=[ContextOrganization.from_row(r) for r in found.organizations],
            profiles=FirstProfiles(data=[ContextProfile.from_row(r) for r in found.profiles],
                                   has_more=found.more_profiles),
            calendars=FirstCalendars(
                data=[ContextCalendar.from_row(r) for r in found.calendars],
                has_more=found.more_calendars),
            toolsets=_toolsets(ctx),
        )
