"""`/graphql` for internal dashboards (contract §14).

`POST` runs a document with the same API keys as REST, through the cache of
graph/documents.py: parsed, validated and compiled once, then run as a plan,
with graphql-core's exact results, errors and null propagation. It speaks
Apollo's automatic persisted queries. `GET` is a WebSocket upgrade
(subscriptions, graph/ws.py) or, for a browser, GraphiQL (graph/ide.py);
anything else is refused as a method the route does not take.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from graphql import ExecutionResult, GraphQLError

from graph import documents, ide, ws
from graph.context import Context
from graph.documents import DOCUMENTS, Document, Documents
from graph.schema import reported, schema
from kalends.errors import ApiError
from kalends.service.services import REQUEST_ID, SERVICES, VIEWER
from kalends.web import bodies
from kalends.web.responses import json_response


def setup(app: web.Application) -> None:
    app[DOCUMENTS] = Documents(schema._schema)


async def post(request: web.Request) -> web.StreamResponse:
    body = await bodies.json_object(request)
    query, variables, operation_name, extensions = _fields(body)
    context = Context(request.app[SERVICES], request[VIEWER], request[REQUEST_ID])
    found = _document(request.app[DOCUMENTS], query, extensions)
    if isinstance(found, GraphQLError):
        result = ExecutionResult(None, [found])
    else:
        result = await documents.run(schema._schema, found, context, variables, operation_name)
    if result.errors:
        result.errors = reported(result.errors, context)
    return json_response(result.formatted)


async def get(request: web.Request) -> web.StreamResponse:
    if request.headers.get("Upgrade", "").lower() == "websocket":
        return await ws.websocket(request)
    if _wants_html(request):
        return await ide.page(request)
    raise web.HTTPMethodNotAllowed("GET", ["POST"])


def _wants_html(request: web.Request) -> bool:
    accept = request.headers.get("Accept", "")
    return any(part.split(";")[0].strip() == "text/html" for part in accept.split(","))


def _fields(body: dict[str, Any]
            ) -> tuple[str | None, dict[str, Any] | None, str | None, dict[str, Any] | None]:
    """The GraphQL-over-HTTP request parameters; other keys are ignored, as clients
    send their own (`id`, `documentId`)."""
    query, variables = body.get("query"), body.get("variables")
    operation_name, extensions = body.get("operationName"), body.get("extensions")
    for name, value, kind in (("query", query, str), ("variables", variables, dict),
                              ("operationName", operation_name, str),
                              ("extensions", extensions, dict)):
        if value is not None and not isinstance(value, kind):
            expected = "a string" if kind is str else "an object"
            raise ApiError("invalid_field", f"`{name}` must be {expected} or null.",
                           param=name, details={"value": value})
    if query is None and not (extensions and "persistedQuery" in extensions):
        raise ApiError("missing_field", "Send the document as `query`.", param="query")
    return query, variables, operation_name, extensions


@dataclass(frozen=True)
class _PersistedQuery:
    sha256: str


def _persisted(extensions: dict[str, Any] | None) -> _PersistedQuery | None:
    """Apollo's `extensions.persistedQuery`, checked."""
    if not extensions or "persistedQuery" not in extensions:
        return None
    persisted = extensions["persistedQuery"]
    param = "extensions.persistedQuery"
    if not isinstance(persisted, dict):
        raise ApiError("invalid_field", "`persistedQuery` must be an object.", param=param,
                       details={"value": persisted})
    if persisted.get("version") != 1:
        raise ApiError("invalid_field", "Only version 1 of persisted queries is supported.",
                       param=f"{param}.version", details={"value": persisted.get("version")})
    sha256 = persisted.get("sha256Hash")
    if not isinstance(sha256, str) or len(sha256) != 64 \
            or any(c not in "0123456789abcdef" for c in sha256):
        raise ApiError("invalid_field", "`sha256Hash` must be 64 lowercase hex digits.",
                       param=f"{param}.sha256Hash", details={"value": sha256})
    return _PersistedQuery(sha256)


def _document(cache: Documents, query: str | None, extensions: dict[str, Any] | None
              ) -> Document | GraphQLError:
    persisted = _persisted(extensions)
    if persisted is None:
        assert query is not None
        return cache.get(query)
    if query is None:
        document = cache.by_hash(persisted.sha256)
        if document is None:
            # Apollo's protocol: the client sends the hash again with its query.
            return GraphQLError("PersistedQueryNotFound",
                                extensions={"code": "PERSISTED_QUERY_NOT_FOUND"})
        return document
    if hashlib.sha256(query.encode()).hexdigest() != persisted.sha256:
        raise ApiError("invalid_field", "`sha256Hash` is not the SHA-256 of `query`.",
                       param="extensions.persistedQuery.sha256Hash",
                       details={"value": persisted.sha256})
    return cache.get(query)
