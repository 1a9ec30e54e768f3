"""Subscriptions over WebSocket at `/graphql` (docs/graphql.md, "Dashboards: `/graphql`"), in the
`graphql-transport-ws` protocol (the `graphql-ws` library's PROTOCOL.md).

The upgrade itself takes no key; the client sends it in `connection_init`,
`{"Authorization": "Bearer kal_..."}`, checked and charged to its consumer as a
request's key is (refused: close 4403). Then `subscribe` runs a subscription
document, with the bounds POST has (graph/limits.py), through graphql-core, one
task per subscription and at most `MAX_SUBSCRIPTIONS` per connection; queries and
mutations go to POST. Every error carries `extensions` as on POST: an ApiError's
own, anything else masked (and logged as a bug).

Sockets close with 1001 (going away) when the service drains or stops
(`web.draining`), so none holds a graceful stop back.

A socket lives no longer than its key. Revoking a key
(`kalends admin revoke-key`) announces its hash on `db.accounts.KEYS_CHANNEL` as it
commits; each process's `Registry` listens there and closes the key's sockets with
4403. Every `subscribe` re-checks the key and is charged to its consumer's rate limit
as a request is (one transaction: `db.accounts.reserve_live`). A key holds at most
`Limits.sockets_per_key` sockets and `Limits.subscriptions_per_key` subscriptions
across every process: each process keeps a row per key with what it holds
(`live_sockets`, migration 0024), and a reservation checks the total under the key's
row lock. A process counts while its registry connection holds its advisory lock, so
a process that crashed (its connection closed, its lock released) stops counting at
once; its rows are deleted when another process next starts or reconnects.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import os
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn, cast

import asyncpg
import orjson
from aiohttp import WSCloseCode, WSMsgType, web
from graphql import (
    DocumentNode,
    ExecutionResult,
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    GraphQLError,
    InlineFragmentNode,
    OperationType,
    SelectionSetNode,
    get_operation_ast,
)
from graphql.pyutils import is_awaitable
from prometheus_client import Gauge

from core.errors import ApiError
from db import accounts
from db.database import Database, unavailable
from domain.auth import Viewer, authenticate_key, hash_key
from domain.config import ConfigError, Rate
from domain.notify import changes
from domain.notify.changes import Feed
from domain.ratelimit import Decision
from graph import fanout
from graph.documents import DOCUMENTS
from graph.live import LiveContext
from graph.schema import MASKED, reported, schema
from web.services import DRAIN, REQUEST_ID, SERVICES, SETTINGS

log = logging.getLogger("kalends.graphql")

PROTOCOL = "graphql-transport-ws"
INIT_TIMEOUT = 10.0
"""Seconds a client has to send `connection_init` (then: close 4408)."""
MAX_SUBSCRIPTIONS = 32
"""Subscriptions one connection may run at once."""
MAX_MESSAGE = 1024 * 1024
HEARTBEAT = 30.0
"""Seconds between WebSocket pings, which find a peer gone without a word."""
SOCKETS_PER_KEY = 100
"""Open sockets one API key may hold across every process."""
SUBSCRIPTIONS_PER_KEY = 1000
"""Subscriptions one API key may run at once across every process."""
APPLICATION_NAME = "kalends socket registry"
"""How each process's registry connection shows in pg_stat_activity."""
FEED = web.AppKey("change_feed", Feed)

# Close codes of graphql-transport-ws.
_BAD_MESSAGE, _UNAUTHORIZED, _FORBIDDEN = 4400, 4401, 4403
_SUBPROTOCOL, _INIT_TIMEOUT, _DUPLICATE, _TOO_MANY_INITS = 4406, 4408, 4409, 4429

# livesum: under --workers N, the processes together.
_SOCKETS = Gauge("kalends_graphql_websockets", "Open GraphQL WebSocket connections.",
                 multiprocess_mode="livesum")
_RUNNING = Gauge("kalends_graphql_subscriptions",
                 "GraphQL subscriptions running (one task each).", multiprocess_mode="livesum")
_WATCHES = Gauge("kalends_change_feed_watches",
                 "Subscribers' buffers of the change feed.", multiprocess_mode="livesum")


@dataclass(frozen=True)
class Limits:
    """How many sockets and subscriptions a key may hold (docs/graphql.md, "Dashboards:
    `/graphql`")."""

    sockets_per_key: int = SOCKETS_PER_KEY
    subscriptions_per_key: int = SUBSCRIPTIONS_PER_KEY
    subscriptions_per_socket: int = MAX_SUBSCRIPTIONS

    @classmethod
    def from_environment(cls, env: Mapping[str, str] | None = None) -> Limits:
        """The defaults, or KALENDS_GRAPHQL_SOCKETS_PER_KEY,
        KALENDS_GRAPHQL_SUBSCRIPTIONS_PER_KEY and KALENDS_GRAPHQL_SUBSCRIPTIONS_PER_SOCKET."""
        env = os.environ if env is None else env

        def number(name: str, default: int) -> int:
            value = env.get(name, "").strip()
            if not value:
                return default
            if not value.isdigit() or not 1 <= int(value) <= 1_000_000:
                raise ConfigError(f"{name} is not valid: {value[:40]!r} "
                                  "(expected a whole number from 1 to 1000000)")
            return int(value)

        return cls(number("KALENDS_GRAPHQL_SOCKETS_PER_KEY", SOCKETS_PER_KEY),
                   number("KALENDS_GRAPHQL_SUBSCRIPTIONS_PER_KEY", SUBSCRIPTIONS_PER_KEY),
                   number("KALENDS_GRAPHQL_SUBSCRIPTIONS_PER_SOCKET", MAX_SUBSCRIPTIONS))


def setup(app: web.Application) -> None:
    """The process's change feed and socket registry for the app's lifetime (after
    its services), and sockets told to leave when the service stops."""
    limits = Limits.from_environment()  # a bad value stops the start, here

    async def feed(app: web.Application) -> AsyncIterator[None]:
        db = app[SERVICES].db
        assert db.dsn is not None, "the pool's DSN (db.database.Database.connect)"
        feed = Feed(db.dsn, on_count=_WATCHES.set)
        await feed.start()
        app[FEED] = feed
        registry = Registry(db, db.dsn, limits)
        await registry.start()
        app[REGISTRY] = registry
        yield
        await registry.stop()
        await feed.stop()

    app.cleanup_ctx.append(feed)
    app.on_shutdown.append(_release)


async def _release(app: web.Application) -> None:
    app[DRAIN].release()


async def websocket(request: web.Request) -> web.StreamResponse:
    ws = web.WebSocketResponse(protocols=(PROTOCOL,), heartbeat=HEARTBEAT,
                               max_msg_size=MAX_MESSAGE)
    await ws.prepare(request)
    if ws.ws_protocol != PROTOCOL:
        await ws.close(code=_SUBPROTOCOL, message=b"Subprotocol not acceptable")
        return ws
    _SOCKETS.inc()
    try:
        await _Connection(request, ws).serve()
    finally:
        _SOCKETS.dec()
    return ws


class _Closed(Exception):
    """The connection was closed (by the protocol's rules, or its peer)."""


_CONNECT_TIMEOUT = 5.0
_PING_EVERY = 10.0
_RETRY_FIRST, _RETRY_MOST = 0.2, 5.0
_ANCHOR_SETTINGS = {
    "application_name": APPLICATION_NAME,
    # A host that vanished without closing its connections: the server ends the
    # session (and releases the lock) within about a minute.
    "tcp_keepalives_idle": "30", "tcp_keepalives_interval": "10",
    "tcp_keepalives_count": "3",
}


class Outcome(enum.Enum):
    RESERVED = "reserved"
    REVOKED = "revoked"
    """The key no longer authenticates."""
    LIMITED = "limited"
    """Its consumer's rate limit refused the charge."""
    FULL = "full"
    """Charged, but the key holds as many sockets or subscriptions as it may."""


@dataclass
class _Held:
    """What this process holds of one key."""

    key_id: str | None = None
    sockets: int = 0
    subscriptions: int = 0

    @property
    def counts(self) -> tuple[int, int]:
        return self.sockets, self.subscriptions


class Registry:
    """This process's sockets by key: their revocation, and their share of each
    key's limits (published in `live_sockets`).

    Reservations of one key are made one at a time in this process (and under the
    key's row lock across processes) and publish what the process then holds;
    releases only change what it holds, and a flusher publishes it soon after, in
    one write per key however many were released. A process's connection of its own
    holds its advisory lock (it counts while it does) and listens for revocations;
    when it reconnects it restores its rows (deleted meanwhile if it seemed gone) and
    closes the sockets of keys revoked while it was not listening.
    """

    def __init__(self, db: Database, dsn: str, limits: Limits) -> None:
        self.limits = limits
        self.instance = 0
        self._db = db
        self._dsn = dsn
        self._held: dict[bytes, _Held] = {}
        self._locks: dict[bytes, tuple[asyncio.Lock, list[int]]] = {}
        self._dirty: set[bytes] = set()
        self._wake = asyncio.Event()
        self._sockets: dict[bytes, set[_Connection]] = {}
        self._connected = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def connected(self) -> bool:
        return self._connected.is_set()

    async def start(self, wait: float = _CONNECT_TIMEOUT) -> None:
        self.instance = await accounts.instance(self._db)
        self._tasks = [asyncio.create_task(self._anchor(), name="socket registry"),
                       asyncio.create_task(self._flush(), name="socket registry flush")]
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._connected.wait(), wait)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        # Without its lock the rows count for nothing already; this only tidies up.
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._db.execute(
                "DELETE FROM live_sockets WHERE instance = $1", self.instance), 2)

    # -- sockets ------------------------------------------------------------------

    def add(self, key_hash: bytes, connection: _Connection) -> None:
        """Close `connection` if its key is revoked (from now on)."""
        self._sockets.setdefault(key_hash, set()).add(connection)

    def discard(self, key_hash: bytes, connection: _Connection) -> None:
        connections = self._sockets.get(key_hash)
        if connections is not None:
            connections.discard(connection)
            if not connections:
                del self._sockets[key_hash]

    def _revoked(self, key_hash: bytes) -> None:
        for connection in list(self._sockets.get(key_hash, ())):
            connection.revoke()

    # -- limits -------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _key(self, key_hash: bytes) -> AsyncIterator[None]:
        """The key's turn in this process."""
        entry = self._locks.get(key_hash)
        if entry is None:
            entry = self._locks[key_hash] = (asyncio.Lock(), [0])
        entry[1][0] += 1
        try:
            async with entry[0]:
                yield
        finally:
            entry[1][0] -= 1
            if not entry[1][0]:
                del self._locks[key_hash]

    async def reserve(self, key_hash: bytes, sockets: int, subscriptions: int,
                      rate: Rate | None) -> tuple[Outcome, Decision | None]:
        """Check the key, charge it with `rate` (None: no charge), and if allowed
        reserve `sockets` and `subscriptions` more for it."""
        limits = self.limits
        async with self._key(key_hash):
            held = self._held.get(key_hash) or _Held()
            row = await accounts.reserve_live(
                self._db, key_hash, self.instance, held.counts, (sockets, subscriptions),
                (limits.sockets_per_key, limits.subscriptions_per_key),
                None if rate is None else (rate.interval, rate.window))
            if row is None:
                return Outcome.REVOKED, None
            decision = None if rate is None else Decision.from_row(rate, row)
            if decision is not None and not decision.allowed:
                return Outcome.LIMITED, decision
            if not row["reserved"]:
                return Outcome.FULL, decision
            if sockets or subscriptions:
                held = self._held.setdefault(key_hash, _Held())
                held.key_id = row["key_id"]
                held.sockets += sockets
                held.subscriptions += subscriptions
            return Outcome.RESERVED, decision

    def release(self, key_hash: bytes, sockets: int, subscriptions: int) -> None:
        """Give back what `reserve` reserved (published soon, by the flusher)."""
        held = self._held.get(key_hash)
        if held is None:
            return
        held.sockets = max(0, held.sockets - sockets)
        held.subscriptions = max(0, held.subscriptions - subscriptions)
        self._dirty.add(key_hash)
        self._wake.set()

    async def _flush(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            failed = False
            for key_hash in list(self._dirty):
                async with self._key(key_hash):
                    if key_hash not in self._dirty:
                        continue
                    self._dirty.discard(key_hash)
                    held = self._held.get(key_hash)
                    if held is None or held.key_id is None:
                        continue
                    published = held.counts
                    try:
                        await accounts.publish_live(self._db, held.key_id, self.instance,
                                                    published)
                    except Exception as exc:  # the database is away: again, later
                        log.warning("socket registry cannot publish", extra={
                            "error": repr(exc)})
                        self._dirty.add(key_hash)
                        failed = True
                        continue
                    # Releases meanwhile made it dirty again, to publish next round. No
                    # reservation came (it waits for the key's turn): nothing held at
                    # all, nothing more to publish.
                    if published == (0, 0):
                        del self._held[key_hash]
            if failed:
                await asyncio.sleep(1.0)
                self._wake.set()

    # -- the registry's own connection ---------------------------------------------

    async def _anchor(self) -> None:
        retry = _RETRY_FIRST
        while True:
            lost = asyncio.Event()
            conn: asyncpg.Connection | None = None
            try:
                conn = await asyncpg.connect(self._dsn, timeout=_CONNECT_TIMEOUT,
                                             server_settings=_ANCHOR_SETTINGS)
                conn.add_termination_listener(lambda _conn, lost=lost: lost.set())
                await accounts.hold_instance(conn, self.instance, timeout=_CONNECT_TIMEOUT)
                await conn.add_listener(accounts.KEYS_CHANNEL, self._notified)
                await accounts.forget_dead_instances(conn, self.instance)
                # While this process seemed gone its rows may have been deleted, and
                # revocations announced that it did not hear.
                self._dirty.update(self._held)
                self._wake.set()
                for key_hash in await accounts.revoked_keys(conn, list(self._sockets)):
                    self._revoked(key_hash)
                self._connected.set()
                retry = _RETRY_FIRST
                await changes.hold(conn, lost)
                log.warning("socket registry lost its database connection; reconnecting")
            except (*changes.CONNECTION_ERRORS, TimeoutError) as exc:
                log.warning("socket registry cannot connect", extra={
                    "error": repr(exc), "retry_seconds": retry})
            finally:
                self._connected.clear()
                if conn is not None and not conn.is_closed():
                    conn.terminate()
            await asyncio.sleep(retry)
            retry = min(2 * retry, _RETRY_MOST)

    def _notified(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        try:
            key_hash = bytes.fromhex(payload)
        except ValueError:
            log.warning("unreadable key notification", extra={"payload": payload[:200]})
            return
        self._revoked(key_hash)


REGISTRY = web.AppKey("socket_registry", Registry)


class _Connection:
    def __init__(self, request: web.Request, ws: web.WebSocketResponse) -> None:
        self._request = request
        self._ws = ws
        self._viewer: Viewer | None = None
        self._initialised = False
        self._running: dict[str, asyncio.Task[None]] = {}
        self._sending = asyncio.Lock()
        self._registry = request.app[REGISTRY]
        self._limits = self._registry.limits
        self._key_hash: bytes | None = None
        self._socket_held = False
        self._revoked = asyncio.Event()

    def revoke(self) -> None:
        """Its key was revoked: close with 4403 (its watcher does, at once)."""
        self._revoked.set()

    async def serve(self) -> None:
        watchers = [asyncio.create_task(self._close_after_init_timeout()),
                    asyncio.create_task(self._close_when_released()),
                    asyncio.create_task(self._close_when_revoked())]
        try:
            async for message in self._ws:
                if message.type is WSMsgType.TEXT:
                    await self._receive(message.data)
                elif message.type is WSMsgType.BINARY:
                    await self._close(_BAD_MESSAGE, "Binary messages are not supported")
                else:  # an error: the connection is gone
                    break
        except (_Closed, ConnectionError):
            pass  # closed by the protocol's rules, a watcher, or the peer
        finally:
            # Before any await: the handler may be cancelled once its peer is gone.
            if self._key_hash is not None:
                self._registry.discard(self._key_hash, self)
                if self._socket_held:
                    self._socket_held = False
                    self._registry.release(self._key_hash, 1, 0)
            tasks = [*watchers, *self._running.values()]
            for task in tasks:
                task.cancel()  # each subscription gives its place back as it ends
            await asyncio.gather(*tasks, return_exceptions=True)
            if not self._ws.closed:
                await self._ws.close()

    async def _close(self, code: int, reason: str) -> NoReturn:
        # A close reason is at most 123 bytes.
        await self._ws.close(code=code, message=reason.encode()[:123])
        raise _Closed

    async def _close_after_init_timeout(self) -> None:
        await asyncio.sleep(INIT_TIMEOUT)
        if not self._initialised:
            with contextlib.suppress(_Closed):
                await self._close(_INIT_TIMEOUT, "Connection initialisation timeout")

    async def _close_when_released(self) -> None:
        await self._request.app[DRAIN].released()
        with contextlib.suppress(_Closed):
            await self._close(WSCloseCode.GOING_AWAY, "The service is stopping")

    async def _close_when_revoked(self) -> None:
        await self._revoked.wait()
        with contextlib.suppress(_Closed):
            await self._close(_FORBIDDEN, "Forbidden: the API key has been revoked")

    async def _send(self, message: dict[str, Any]) -> None:
        async with self._sending:
            await self._ws.send_str(orjson.dumps(message).decode())

    async def _receive(self, text: str) -> None:
        try:
            message = orjson.loads(text)
        except orjson.JSONDecodeError:
            message = None
        if not isinstance(message, dict) or not isinstance(message.get("type"), str):
            await self._close(_BAD_MESSAGE, "Invalid message received")
        kind = message["type"]
        if kind == "connection_init":
            await self._init(message.get("payload"))
        elif kind == "ping":
            await self._send({"type": "pong"})
        elif kind == "pong":
            pass
        elif kind == "subscribe":
            await self._subscribe(message.get("id"), message.get("payload"))
        elif kind == "complete":
            task = self._running.pop(str(message.get("id")), None)
            if task is not None:
                task.cancel()
        else:
            await self._close(_BAD_MESSAGE, f"Invalid message type {kind[:40]!r}")

    async def _init(self, payload: Any) -> None:
        if self._initialised:
            await self._close(_TOO_MANY_INITS, "Too many initialisation requests")
        self._initialised = True
        if payload is not None and not isinstance(payload, dict):
            await self._close(_BAD_MESSAGE, "The connection_init payload must be an object")
        authorization = _header(payload or {}, "Authorization")
        app = self._request.app
        try:
            caller = await authenticate_key(app[SERVICES].db, authorization,
                                            app[SETTINGS].rate_limit)
            if caller.limit is not None:
                caller.limit.enforce()
            viewer = caller.claimed()
            # A valid header (authenticate_key checked it): the key's hash.
            key_hash = hash_key(cast(str, authorization).partition(" ")[2].strip())
            # Told of a revocation from before the socket is counted, so none is missed.
            self._key_hash = key_hash
            self._registry.add(key_hash, self)
            outcome, _ = await self._registry.reserve(key_hash, 1, 0, None)
        except ApiError as exc:
            await self._close(_FORBIDDEN, f"Forbidden: {exc.message}")
        if outcome is Outcome.REVOKED:
            await self._close(_FORBIDDEN, "Forbidden: The API key is unknown or revoked.")
        if outcome is Outcome.FULL:
            await self._close(_TOO_MANY_INITS, "Too many open sockets for this API key "
                              f"(at most {self._limits.sockets_per_key})")
        self._socket_held = True
        self._viewer = viewer
        await self._send({"type": "connection_ack"})

    async def _subscribe(self, id_: Any, payload: Any) -> None:
        if self._viewer is None:
            await self._close(_UNAUTHORIZED, "Unauthorized")
        if not isinstance(id_, str) or not id_ or not isinstance(payload, dict):
            await self._close(_BAD_MESSAGE, "A subscribe message needs an id and a payload")
        query, variables = payload.get("query"), payload.get("variables")
        operation_name = payload.get("operationName")
        if not isinstance(query, str) or not isinstance(variables, dict | None) \
                or not isinstance(operation_name, str | None):
            await self._close(_BAD_MESSAGE, "Invalid subscribe payload")
        if id_ in self._running:
            await self._close(_DUPLICATE, f"Subscriber for {id_[:80]} already exists")
        assert self._key_hash is not None
        context = LiveContext(self._request.app[SERVICES], self._viewer,
                              self._request[REQUEST_ID], feed=self._request.app[FEED])
        per_socket = self._limits.subscriptions_per_socket
        socket_full = len(self._running) >= per_socket
        document = await _document(self._request.app, query, operation_name)
        # Every subscribe is charged, as a request is, and re-checks the key; only
        # one that can run reserves a place among the key's subscriptions.
        wanted = 0 if socket_full or isinstance(document, list) else 1
        try:
            outcome, decision = await self._registry.reserve(
                self._key_hash, 0, wanted, self._request.app[SETTINGS].rate_limit)
        except ApiError as exc:  # the database is away
            await self._send_error(id_, exc)
            return
        if outcome is Outcome.REVOKED:
            await self._close(_FORBIDDEN, "Forbidden: The API key is unknown or revoked.")
        if outcome is Outcome.LIMITED:
            assert decision is not None
            try:
                decision.enforce()
            except ApiError as exc:
                await self._send_error(id_, exc)
            return
        if socket_full:
            await self._send({"id": id_, "type": "error", "payload": [{
                "message": f"A connection runs at most {per_socket} subscriptions; "
                           "complete one first.",
                "extensions": {"code": "too_many_subscriptions", "limit": per_socket},
            }]})
            return
        if isinstance(document, list):
            await self._send({"id": id_, "type": "error",
                              "payload": self._shown(document, context)})
            return
        if outcome is Outcome.FULL:
            limit = self._limits.subscriptions_per_key
            await self._send_error(id_, ApiError(
                "rate_limit_exceeded", f"This API key runs at most {limit} subscriptions at "
                "once, across every connection; complete one first.", retry_after=1))
            return
        task = asyncio.create_task(
            self._run(id_, context, _root_name(document, operation_name), lambda: fanout.subscribe(
                schema._schema, document, context, variables, operation_name,
                context.viewer.user_id)),
            name=f"graphql subscription {id_[:40]}")
        self._running[id_] = task

    async def _send_error(self, id_: str, exc: ApiError) -> None:
        error = GraphQLError(exc.message, original_error=exc)
        await self._send({"id": id_, "type": "error", "payload": [error.formatted]})

    async def _run(self, id_: str, context: LiveContext, root: str,
                   start: Callable[[], Any]) -> None:
        _RUNNING.inc()
        try:
            await self._stream(id_, context, root, start)
        except (ConnectionError, _Closed):
            pass  # the socket is gone: nobody to tell
        except Exception as exc:
            lost = unavailable(exc)
            if lost is None:
                log.exception("graphql subscription failed",
                              extra={"request_id": context.request_id})
            payload = GraphQLError(lost.message, original_error=lost).formatted \
                if lost is not None else {"message": MASKED}
            with contextlib.suppress(ConnectionError, _Closed):
                await self._send({"id": id_, "type": "error", "payload": [payload]})
        finally:
            context.close()
            if self._running.get(id_) is asyncio.current_task():
                del self._running[id_]
            assert self._key_hash is not None
            self._registry.release(self._key_hash, 0, 1)
            _RUNNING.dec()

    async def _stream(self, id_: str, context: LiveContext, root: str,
                      start: Callable[[], Any]) -> None:
        started = start()
        if is_awaitable(started):
            started = await started
        if isinstance(started, ExecutionResult):
            await self._send({"id": id_, "type": "error",
                              "payload": self._shown(started.errors or [], context)})
            return
        results = cast(AsyncGenerator[ExecutionResult, None], started)
        try:
            async for result in results:
                if result.errors:  # a copy: the result may be shared (graph/fanout.py)
                    result = ExecutionResult(result.data, reported(result.errors, context),
                                             result.extensions)
                await self._send({"id": id_, "type": "next", "payload": result.formatted})
        except ApiError as exc:
            # The source ended the subscription: access lost, the event gone, changes missed.
            error = GraphQLError(exc.message, path=[root], original_error=exc)
            await self._send({"id": id_, "type": "error", "payload": [error.formatted]})
            return
        finally:
            with contextlib.suppress(Exception):
                await results.aclose()
        await self._send({"id": id_, "type": "complete"})

    def _shown(self, errors: list[GraphQLError], context: LiveContext
               ) -> list[dict[str, Any]]:
        return [dict(e.formatted) for e in reported(errors, context)]


def _header(payload: dict[str, Any], name: str) -> str | None:
    """A header-like key of the payload, matched as HTTP matches header names."""
    for key, value in payload.items():
        if isinstance(key, str) and key.lower() == name.lower():
            return value if isinstance(value, str) else None
    return None


async def _document(app: web.Application, query: str, operation_name: str | None
                    ) -> DocumentNode | list[GraphQLError]:
    """The document, parsed and validated as POST does (its cache, graph/documents.py),
    if it names one subscription; else why not."""
    document = await app[DOCUMENTS].load(query)
    if document.node is None:
        return document.errors
    operation = get_operation_ast(document.node, operation_name)
    if operation is not None and operation.operation is not OperationType.SUBSCRIPTION:
        return [GraphQLError(
            "Only subscriptions are served over WebSocket; send queries and mutations "
            "with POST /graphql.", operation)]
    return document.node


def _root_name(document: DocumentNode, operation_name: str | None) -> str:
    """The response name of the subscription's one root field (validation has
    made sure there is exactly one)."""
    fragments = {d.name.value: d for d in document.definitions
                 if isinstance(d, FragmentDefinitionNode)}

    def first(selection_set: SelectionSetNode) -> str | None:
        for node in selection_set.selections:
            if isinstance(node, FieldNode):
                return (node.alias or node.name).value
            inner = (node.selection_set if isinstance(node, InlineFragmentNode) else
                     fragments[node.name.value].selection_set
                     if isinstance(node, FragmentSpreadNode) else None)
            if inner is not None and (name := first(inner)) is not None:
                return name
        return None

    operation = get_operation_ast(document, operation_name)
    return (first(operation.selection_set) if operation else None) or ""


__all__ = ["FEED", "INIT_TIMEOUT", "MAX_SUBSCRIPTIONS", "PROTOCOL", "REGISTRY",
           "SOCKETS_PER_KEY", "SUBSCRIPTIONS_PER_KEY", "Limits", "Registry", "setup",
           "websocket"]
