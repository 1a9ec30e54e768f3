"""Which database a request reads from (docs/scaling.md, "Read replicas"), decided once per
request where its kind is known: a registry operation that only reads (REST and MCP), a GraphQL
query, the ICS feed. Everything else, and every request when no replica is
configured, uses the primary. A request that may write is remembered, and once it
is answered its user's position in the WAL is recorded (`db/replicas.py`), so that
none of their later reads, in any process, is served from a replica behind it.
"""

from __future__ import annotations

from contextvars import ContextVar, Token

from prometheus_client import Counter

from db.database import Database
from db.replicas import Reads
from domain.auth import Viewer

_WROTE: ContextVar[bool] = ContextVar("kalends_request_wrote", default=False)

_READS = Counter(
    "kalends_db_reads",
    "Requests that only read, by the database that served them (primary, replica1, ...).",
    ["target"],
)


def database(primary: Database, reads: Reads | None, viewer: Viewer | None, *,
             read_only: bool) -> Database:
    """The database for the request's work; a request that may write is remembered."""
    if not read_only:
        _WROTE.set(True)
        return primary
    if reads is None:
        return primary
    db, target = reads.choose(viewer.written if viewer is not None else None)
    _READS.labels(target).inc()
    return db


def begin() -> Token[bool]:
    """A request starts: it has written nothing yet."""
    return _WROTE.set(False)


async def record(reads: Reads | None, viewer: Viewer | None) -> None:
    """A request is answered: if it may have written and replicas are read, record
    where its user's writes end in the WAL."""
    if _WROTE.get() and reads is not None and viewer is not None:
        await reads.wrote(viewer.user_id)


def finish(token: Token[bool]) -> None:
    _WROTE.reset(token)
