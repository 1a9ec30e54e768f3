"""Per-request dataloaders: one SQL statement per batch of keys, whatever the page size.

They are created by the context factory, so a cache never outlives the request
or leaks one caller's view of a row to another.
"""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg
from strawberry.dataloader import DataLoader

from db import profiles
from db.database import Database
from kalends.auth import Viewer


class Loaders:
    def __init__(self, db: Database, viewer: Viewer) -> None:
        self._db = db
        self._viewer = viewer
        # Rows carry the viewer's role in the owning organization.
        self.profile = DataLoader[str, asyncpg.Record | None](load_fn=self._profiles)

    async def _profiles(self, keys: Sequence[str]) -> list[asyncpg.Record | None]:
        rows = await profiles.by_ids(self._db, keys, self._viewer.user_id)
        by_id = {r["id"]: r for r in rows}
        return [by_id.get(k) for k in keys]
