"""What an agent needs before its first real call (`getContext`, docs/mcp.md, "getContext"):
the time now on the caller's clock, who they are, and where they can write. Three
statements, whatever the caller has: their organizations, the first profiles they
administer, their first calendars.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import asyncpg

from db import calendars as calendar_store
from db import organizations as organization_store
from db import profiles as profile_store
from db.database import Database
from domain import agenda
from domain.auth import Viewer

MAX_PROFILES = 20
MAX_CALENDARS = agenda.MAX_CALENDARS
"""As many as `getAgenda` takes in `calendar_ids`."""


@dataclass(frozen=True)
class Context:
    now: datetime
    """UTC, whole seconds."""
    zone: ZoneInfo
    """The caller's saved zone, else UTC."""
    organizations: list[asyncpg.Record]
    profiles: list[asyncpg.Record]
    more_profiles: bool
    calendars: list[asyncpg.Record]
    more_calendars: bool

    @property
    def local_now(self) -> datetime:
        return agenda.local(self.now, self.zone)


async def read(db: Database, viewer: Viewer, now: datetime | None = None) -> Context:
    """The caller's context at `now` (default: the clock's)."""
    now = (now or datetime.now(UTC)).replace(microsecond=0)
    organizations = await organization_store.of_user(db, viewer.user_id)
    # One more than shown: whether there are more.
    profiles = await profile_store.administered_page(db, viewer.user_id, None, MAX_PROFILES + 1)
    calendars = await calendar_store.page(db, viewer.user_id, None, MAX_CALENDARS + 1)
    return Context(
        now=now, zone=agenda.resolve_zone(None, viewer.timezone), organizations=organizations,
        profiles=profiles[:MAX_PROFILES], more_profiles=len(profiles) > MAX_PROFILES,
        calendars=calendars[:MAX_CALENDARS], more_calendars=len(calendars) > MAX_CALENDARS,
    )
