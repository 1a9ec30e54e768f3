"""One execution per change for every subscription that would execute it alike.

A key's thousand subscriptions to one profile's changes are a thousand graphql-core
executions of the same document over the same change for the same user, a second of
the event loop per change (bench/sockets.py: a PATCH 5x to 13x slower with them open).
The subscription sources hand every subscription of one user the same payload object
for a change (`Change.read_once` in graph/live.py), so the result is executed once per
(payload, document, variables, operation, user) and shared; `subscribe` is
graphql-core's own, with that as its per-event executor.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterable, AsyncIterator, Hashable
from typing import Any, cast

import orjson
from graphql import (
    DocumentNode,
    ExecutionResult,
    Executor,
    GraphQLError,
    GraphQLSchema,
    create_source_event_stream,
    execute_subscription_event,
)
from graphql.execution import map_source_to_response_event
from graphql.language import OperationType
from graphql.pyutils import AwaitableOrValue, is_awaitable

_Renders = dict[Hashable, "asyncio.Future[ExecutionResult]"]
_RENDERED: dict[int, _Renders] = {}
"""By the payload's id(), while the payload lives: its executions by what they depend on."""


async def subscribe(schema: GraphQLSchema, document: DocumentNode, context: Any,
                    variables: dict[str, Any] | None, operation_name: str | None,
                    user: Hashable) -> AsyncIterator[ExecutionResult] | ExecutionResult:
    """As graphql-core's `subscribe`, each event's result shared with the other
    subscriptions of `user` to the same document, variables and operation."""
    executor = Executor.build(
        schema, document, None, context, variables, operation_name)
    if isinstance(executor, list):
        return ExecutionResult(None, errors=executor)
    if executor.operation.operation is not OperationType.SUBSCRIPTION:
        raise GraphQLError("Expected subscription operation.")
    started = create_source_event_stream(executor)
    stream = await started if is_awaitable(started) else started
    if isinstance(stream, ExecutionResult):
        return stream
    assert isinstance(stream, AsyncIterable)
    key = (id(document), orjson.dumps(variables or {}, option=orjson.OPT_SORT_KEYS),
           operation_name, user)

    def execute_once(event: Executor[Any]) -> AwaitableOrValue[ExecutionResult]:
        renders = _renders(event.root_value)
        if renders is None:  # a payload that cannot be tracked: executed for itself
            return execute_subscription_event(event)
        found = renders.get(key)
        if found is None or (found.done() and not found.cancelled() and found.exception()):
            found = renders[key] = asyncio.ensure_future(_result(event))
        # Shielded: one subscriber gone does not cancel the execution for the others.
        return asyncio.shield(found)

    return map_source_to_response_event(executor, stream, execute_once)


async def _result(event: Executor[Any]) -> ExecutionResult:
    result = execute_subscription_event(event)
    return cast(ExecutionResult, await result if is_awaitable(result) else result)


def _renders(payload: object) -> _Renders | None:
    key = id(payload)
    found = _RENDERED.get(key)
    if found is None:
        try:
            weakref.finalize(payload, _RENDERED.pop, key, None)
        except TypeError:
            return None
        found = _RENDERED[key] = {}
    return found
