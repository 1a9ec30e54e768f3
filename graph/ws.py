"""Subscriptions over WebSocket at `/graphql` (contract §14), in the
`graphql-transport-ws` protocol (the `graphql-ws` library's PROTOCOL.md).

The upgrade itself takes no key; the client sends it in `connection_init`,
`{"Authorization": "Bearer kal_..."}`, checked and charged to its consumer as a
request's key is (refused: close 4403). Then `subscribe` runs a subscription
document, with the bounds POST has (graph/limits.py), through graphql-core, one
task per subscription and at most `MAX_SUBSCRIPTIONS` per connection; queries and
mutations go to POST. Every error carries `extensions` as on POST: an ApiError's
own, anything else masked (and logged as a bug).

Sockets close with 1001 (going away) when the service drains or stops
(`kalends.web.draining`), so none holds a graceful stop back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any, NoReturn, cast

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
    subscribe,
)
from graphql.pyutils import is_awaitable
from prometheus_client import Gauge

from graph.documents import DOCUMENTS
from graph.live import LiveContext
from graph.schema import MASKED, reported, schema
from kalends.auth import Viewer, authenticate_key
from kalends.errors import ApiError
from kalends.notify.changes import Feed
from kalends.service.services import DRAIN, REQUEST_ID, SERVICES, SETTINGS

log = logging.getLogger("kalends.graphql")

PROTOCOL = "graphql-transport-ws"
INIT_TIMEOUT = 10.0
"""Seconds a client has to send `connection_init` (then: close 4408)."""
MAX_SUBSCRIPTIONS = 32
"""Subscriptions one connection may run at once."""
MAX_MESSAGE = 1024 * 1024
HEARTBEAT = 30.0
"""Seconds between WebSocket pings, which find a peer gone without a word."""
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


def setup(app: web.Application) -> None:
    """The process's change feed for the app's lifetime (after its services), and
    sockets told to leave when the service stops."""
    app.cleanup_ctx.append(_feed)
    app.on_shutdown.append(_release)


async def _feed(app: web.Application) -> AsyncIterator[None]:
    dsn = app[SERVICES].db.dsn
    assert dsn is not None, "the pool's DSN (db.database.Database.connect)"
    feed = Feed(dsn, on_count=_WATCHES.set)
    await feed.start()
    app[FEED] = feed
    yield
    await feed.stop()


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


class _Connection:
    def __init__(self, request: web.Request, ws: web.WebSocketResponse) -> None:
        self._request = request
        self._ws = ws
        self._viewer: Viewer | None = None
        self._initialised = False
        self._running: dict[str, asyncio.Task[None]] = {}
        self._sending = asyncio.Lock()

    async def serve(self) -> None:
        watchers = [asyncio.create_task(self._close_after_init_timeout()),
                    asyncio.create_task(self._close_when_released())]
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
            tasks = [*watchers, *self._running.values()]
            for task in tasks:
                task.cancel()
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
            self._viewer = caller.claimed()
        except ApiError as exc:
            await self._close(_FORBIDDEN, f"Forbidden: {exc.message}")
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
        context = LiveContext(self._request.app[SERVICES], self._viewer,
                              self._request[REQUEST_ID], feed=self._request.app[FEED])
        if len(self._running) >= MAX_SUBSCRIPTIONS:
            await self._send({"id": id_, "type": "error", "payload": [{
                "message": f"A connection runs at most {MAX_SUBSCRIPTIONS} subscriptions; "
                           "complete one first.",
                "extensions": {"code": "too_many_subscriptions", "limit": MAX_SUBSCRIPTIONS},
            }]})
            return
        document = _document(self._request.app, query, operation_name)
        if isinstance(document, list):
            await self._send({"id": id_, "type": "error",
                              "payload": self._shown(document, context)})
            return
        task = asyncio.create_task(
            self._run(id_, context, _root_name(document, operation_name), lambda: subscribe(
                schema._schema, document, context_value=context, variable_values=variables,
                operation_name=operation_name)),
            name=f"graphql subscription {id_[:40]}")
        self._running[id_] = task

    async def _run(self, id_: str, context: LiveContext, root: str,
                   start: Callable[[], Any]) -> None:
        _RUNNING.inc()
        try:
            await self._stream(id_, context, root, start)
        except (ConnectionError, _Closed):
            pass  # the socket is gone: nobody to tell
        except Exception:
            log.exception("graphql subscription failed", extra={"request_id": context.request_id})
            with contextlib.suppress(ConnectionError, _Closed):
                await self._send({"id": id_, "type": "error", "payload": [{"message": MASKED}]})
        finally:
            context.close()
            if self._running.get(id_) is asyncio.current_task():
                del self._running[id_]
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
                if result.errors:
                    result.errors = reported(result.errors, context)
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


def _document(app: web.Application, query: str, operation_name: str | None
              ) -> DocumentNode | list[GraphQLError]:
    """The document, parsed and validated as POST does (its cache, graph/documents.py),
    if it names one subscription; else why not."""
    document = app[DOCUMENTS].get(query)
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


__all__ = ["FEED", "INIT_TIMEOUT", "MAX_SUBSCRIPTIONS", "PROTOCOL", "setup", "websocket"]
