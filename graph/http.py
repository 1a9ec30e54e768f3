"""POST /graphql for internal dashboards: the same API keys, no IDE."""

from __future__ import annotations

from typing import Any

from aiohttp import web
from strawberry.aiohttp.views import GraphQLView

from graph.context import Context
from kalends.auth import authenticate_key
from kalends.services import REQUEST_ID, SERVICES


class KalendsGraphQLView(GraphQLView[Context, None]):
    allow_queries_via_get = False

    async def get_context(self, request: web.Request, response: Any) -> Context:
        services = request.app[SERVICES]
        # An ApiError here reaches the error middleware: a 401 envelope, as on REST.
        viewer = await authenticate_key(services.db, request.headers.get("Authorization"))
        return Context(services, viewer, request[REQUEST_ID])
