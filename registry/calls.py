"""How a transport runs an operation (REST, MCP) or a document (/graphql).

A read runs on a context that may be served by a read replica. A write runs
`writing`: its changes record their webhook messages with this registry's reads
(registry/payloads.py), given for the write's duration, so the domain's write
functions take no callback and import nothing above them.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import registry
from domain.auth import Viewer
from domain.notify import webhooks
from graph.context import Context, Services
from registry import Operation, payloads


@contextmanager
def writing(services: Services, viewer: Viewer, request_id: str) -> Iterator[Context]:
    """The context of a write: on the primary, its messages rendered here."""
    with webhooks.rendered_by(payloads.renderer(services)):
        yield registry.context(services, viewer, request_id)


async def call(services: Services, viewer: Viewer, request_id: str, op: Operation,
               variables: dict[str, Any], fields: frozenset[str] | None = None
               ) -> tuple[Any, int]:
    """Run an operation: its REST body and status."""
    if not op.writes:
        ctx = registry.context(services, viewer, request_id, read_only=op.mcp.read_only)
        return await registry.run(op, variables, ctx, fields)
    with writing(services, viewer, request_id) as ctx:
        return await registry.run(op, variables, ctx, fields)


async def call_flat(services: Services, viewer: Viewer, op: Operation,
                    arguments: dict[str, Any], request_id: str,
                    fields: frozenset[str] | None = None) -> Any:
    """Run an operation from MCP's flat arguments; returns the REST body or None."""
    body, _ = await call(services, viewer, request_id, op, registry.bind_flat(op, arguments),
                         fields)
    return body
