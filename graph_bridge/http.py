"""`/graphql` for internal dashboards (docs/graphql.md, "Dashboards: `/graphql`").

`POST` runs a document with the same API keys as REST, through the cache of
graph/documents.py: parsed, validated and compiled once, then run as a plan,
with graphql-core's exact results, errors and null propagation. It speaks
Apollo's automatic persisted queries. `GET` is a WebSocket upgrade
(subscriptions, graph_bridge/ws.py), GraphiQL for a browser (graph_bridge/ide.py), or else
the GraphQL-over-HTTP GET: the same request as POST's body in the query string
(`query`, `operationName`, JSON `variables` and `extensions`, so a hash alone
for Apollo's `useGETForHashedQueries`), run the same way but for queries only.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web
from graphql import ExecutionResult, GraphQLError, OperationType

import registry
from core.errors import ApiError
from graph import documents
from graph.documents import DOCUMENTS, Document, Documents
from graph.schema import reported, schema
from graph_bridge import ide, ws
from registry import calls
from web import bodies
from web.responses import error_response, json_response
from web.services import REQUEST_ID, SERVICES, VIEWER

# What a GET names in its query string to run a document rather than get the page.
_DOCUMENT_PARAMETERS = ("query", "extensions")


def setup(app: web.Application) -> None:
    app[DOCUMENTS] = Documents(schema._schema)


async def post(request: web.Request) -> web.StreamResponse:
    query, variables, operation_name, extensions = _fields(await bodies.json_object(request))
    found = await _document(request.app[DOCUMENTS], query, extensions)
    return await _run(request, found, variables, operation_name)


async def get(request: web.Request) -> web.StreamResponse:
    if _upgrade(request):
        return await ws.websocket(request)
    if _page(request):
        return await ide.page(request)
    query, variables, operation_name, extensions = _fields(_parameters(request))
    found = await _document(request.app[DOCUMENTS], query, extensions)
    kind = _kind(found, operation_name)
    if kind is None or kind is OperationType.QUERY:
        response = await _run(request, found, variables, operation_name)
    else:
        response = _not_over_get(request, kind)
    response.headers["Vary"] = _vary(request)
    return response


def runs_document(request: web.Request) -> bool:
    """A GET that runs a document, and so takes an API key as POST does (the page
    and the WebSocket upgrade take none)."""
    return not _upgrade(request) and not _page(request)


def error_body(request: web.Request, error: ApiError) -> web.Response:
    """GET's errors, in the envelope: their answer too depends on the key sent."""
    response = error_response(error, request.get(REQUEST_ID))
    response.headers["Vary"] = _vary(request)
    return response


async def _run(request: web.Request, found: Document | GraphQLError,
               variables: dict[str, Any] | None, operation_name: str | None) -> web.Response:
    services, viewer, request_id = request.app[SERVICES], request[VIEWER], request[REQUEST_ID]
    kind = _kind(found, operation_name)
    if isinstance(found, Document) and kind is OperationType.MUTATION:
        with calls.writing(services, viewer, request_id) as context:
            result = await documents.run(schema._schema, found, context, variables,
                                         operation_name)
    else:
        context = registry.context(services, viewer, request_id,
                                   read_only=kind is OperationType.QUERY)
        result = (ExecutionResult(None, [found]) if isinstance(found, GraphQLError) else
                  await documents.run(schema._schema, found, context, variables,
                                      operation_name))
    if result.errors:
        result.errors = reported(result.errors, context)
    return json_response(result.formatted)


def _upgrade(request: web.Request) -> bool:
    return request.headers.get("Upgrade", "").lower() == "websocket"


def _page(request: web.Request) -> bool:
    return _wants_html(request) and not _names_document(request)


def _names_document(request: web.Request) -> bool:
    return any(name in request.query for name in _DOCUMENT_PARAMETERS)


def _vary(request: web.Request) -> str:
    """Without a document in the URL, Accept chose JSON over the page."""
    return "Authorization" if _names_document(request) else "Accept, Authorization"


def _wants_html(request: web.Request) -> bool:
    accept = request.headers.get("Accept", "")
    return any(part.split(";")[0].strip() == "text/html" for part in accept.split(","))


def _parameters(request: web.Request) -> dict[str, Any]:
    """GET's query string as the body POST would send; an empty parameter is absent."""
    found = request.query
    body: dict[str, Any] = {name: found[name] for name in ("query", "operationName")
                            if found.get(name)}
    for name in ("variables", "extensions"):
        if found.get(name):
            body[name] = _json_object(name, found[name])
    return body


def _json_object(name: str, text: str) -> dict[str, Any] | None:
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        value = text  # refused below, as any other value but an object
    if value is not None and not isinstance(value, dict):
        raise ApiError("invalid_query_parameter", f"`{name}` must be a JSON object.",
                       param=name, details={"value": text})
    return value


def _kind(found: Document | GraphQLError, operation_name: str | None) -> OperationType | None:
    """What the request's operation does; None when it runs nothing (refused, not
    found, or no single operation named: the run answers why)."""
    if isinstance(found, GraphQLError) or found.refused:
        return None
    operation = found.operation(operation_name)
    return None if operation is None else operation.operation


def _not_over_get(request: web.Request, kind: OperationType) -> web.Response:
    """Only queries run over GET (GraphQL over HTTP): a link or a prefetch must never write."""
    where = "over WebSocket" if kind is OperationType.SUBSCRIPTION else "with POST"
    error = ApiError("method_not_allowed",
                     f"GET /graphql runs queries only: send a {kind.value} {where}.",
                     param="query")
    response = error_response(error, request[REQUEST_ID])
    response.headers["Allow"] = "POST"
    return response


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


async def _document(cache: Documents, query: str | None, extensions: dict[str, Any] | None
                    ) -> Document | GraphQLError:
    persisted = _persisted(extensions)
    if persisted is None:
        assert query is not None
        return await cache.load(query)
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
    return await cache.load(query)
