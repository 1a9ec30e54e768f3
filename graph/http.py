"""`/graphql` for internal dashboards (contract §14).

`POST` runs a document with the same API keys as REST. `GET` is a WebSocket
upgrade (subscriptions, graph/ws.py) or, for a browser, GraphiQL (graph/ide.py);
anything else is refused as a method the route does not take.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web
from strawberry.aiohttp.views import GraphQLView

from graph import ide, ws
from graph.context import Context
from kalends.service.services import REQUEST_ID, SERVICES, VIEWER


class KalendsGraphQLView(GraphQLView[Context, None]):
    allow_queries_via_get = False

    async def get_context(self, request: web.Request, response: Any) -> Context:
        # The guard middleware has authenticated the key, as on REST.
        return Context(request.app[SERVICES], request[VIEWER], request[REQUEST_ID])


async def get(request: web.Request) -> web.StreamResponse:
    if request.headers.get("Upgrade", "").lower() == "websocket":
        return await ws.websocket(request)
    if _wants_html(request):
        return await ide.page(request)
    raise web.HTTPMethodNotAllowed("GET", ["POST"])


def _wants_html(request: web.Request) -> bool:
    accept = request.headers.get("Accept", "")
    return any(part.split(";")[0].strip() == "text/html" for part in accept.split(","))
