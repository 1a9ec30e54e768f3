"""The per-request GraphQL context: who is asking, and request-scoped loaders."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import timedelta

from db.database import Database
from db.replicas import Reads
from domain import expansion, reads
from domain.auth import Viewer
from domain.connected.vault import Vault
from domain.pagination import Cursors
from graph.dataloaders import Loaders


@dataclass(frozen=True)
class Services:
    """Process-wide dependencies, built once at start-up."""

    db: Database
    cursors: Cursors
    sync_interval: timedelta = timedelta(seconds=300)
    """Connected calendars' sync interval: the agenda's `sync_stale` threshold."""
    vault: Vault | None = None
    """Seals webhook secrets (and connected accounts')."""
    webhook_allow_http: bool = False
    reads: Reads | None = None
    """Read replicas (db/replicas.py); None: everything on `db`."""
    toolsets: tuple[tuple[str, int], ...] = ()
    """The MCP toolsets and their tool counts, `core` first (registry/toolsets.py): the
    registry stands above this schema, so the app gives them when it starts."""


@dataclass
class Context:
    services: Services
    viewer: Viewer
    request_id: str
    read_only: bool = False
    """The request only reads: it may be served by a read replica."""
    budget: expansion.Budget = field(default_factory=expansion.request_budget)
    """What the request's expansions may still spend, every field's together
    (docs/api-choices.md, "Bounded work")."""
    expanding: asyncio.Lock = field(default_factory=asyncio.Lock)
    """Held by a field that reads rows only to expand them (an RSVP summary), so that
    the document's others wait and, once the budget is spent, read nothing."""
    loaders: Loaders = field(init=False)
    db: Database = field(init=False)

    def __post_init__(self) -> None:
        self.db = reads.database(self.services.db, self.services.reads, self.viewer,
                                 read_only=self.read_only)
        self.loaders = Loaders(self.db, self.viewer)

    @property
    def vault(self) -> Vault:
        assert self.services.vault is not None, "built by create_app"
        return self.services.vault
