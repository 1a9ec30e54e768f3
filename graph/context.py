"""The per-request GraphQL context: who is asking, and request-scoped loaders."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from db.database import Database
from graph.dataloaders import Loaders
from kalends.auth import Viewer
from kalends.pagination import Cursors


@dataclass(frozen=True)
class Services:
    """Process-wide dependencies, built once at start-up."""

    db: Database
    cursors: Cursors
    sync_interval: timedelta = timedelta(seconds=300)
    """Connected calendars' sync interval: the agenda's `sync_stale` threshold."""


@dataclass
class Context:
    services: Services
    viewer: Viewer
    request_id: str
    loaders: Loaders = field(init=False)

    def __post_init__(self) -> None:
        self.loaders = Loaders(self.services.db, self.viewer)

    @property
    def db(self) -> Database:
        return self.services.db
