"""MCP over Streamable HTTP: the registry's operations as tools (docs/mcp.md).

POST /mcp-developer authenticates with an API key; POST /mcp with an OAuth
access token (docs/mcp.md, "MCP clients and OAuth"; domain/oauth). Both speak
the stateless 2026-07-28 protocol and the handshake versions 2025-11-25,
2025-06-18 and 2025-03-26, and list the same tools: the core toolset unless a
request names others (mcp_bridge/toolsets.py).
"""

from __future__ import annotations

from aiohttp import web

import registry
from domain.config import Settings
from mcp_bridge import routes
from mcp_bridge.tools import Catalogues
from web import oauth
from web.guard import ERROR_BODIES, require_api_key, require_credential


def setup(app: web.Application, settings: Settings) -> None:
    app[routes.CATALOGUES] = Catalogues(registry.OPERATIONS)
    app[routes.ALLOWED_ORIGINS] = settings.mcp_allowed_origins
    # "*" so that GET and DELETE reach the handler and get the transport's 405.
    mcp = app.router.add_route("*", oauth.MCP_PATH, routes.oauth)
    require_credential(app, mcp, oauth.authenticate)
    # A tool call past the rate limit is an isError result (tools.call), not a 429.
    developer = app.router.add_route("*", "/mcp-developer", routes.developer)
    require_api_key(app, developer, defer_limit=True)
    app.setdefault(ERROR_BODIES, {}).update({mcp: routes.error_body,
                                             developer: routes.error_body})
    oauth.setup(app)
