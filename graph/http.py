"""POST /graphql for internal dashboards: the same API keys, no IDE."""

from __future__ import annotations

from typing import Any

from aiohttp import web
from strawberry.aiohttp.views import GraphQLView

from graph.context import Context
from kalends.service.services import REQUEST_ID, SERVICES, VIEWER


class KalendsGraphQLView(GraphQLView[Context, None]):
    allow_queries_via_get = False

    async def get_context(self, request: web.Request, response: Any) -> Context:
        # The guard middleware has authenticated the key, as on REST.
        return Context(request.app[SERVICES], request[VIEWER], request[REQUEST_ID])
