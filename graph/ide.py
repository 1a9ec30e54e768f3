"""GraphiQL at `GET /graphql` for browsers (contract §14). Placeholder until built."""

from __future__ import annotations

from aiohttp import web


async def page(request: web.Request) -> web.StreamResponse:
    raise web.HTTPMethodNotAllowed("GET", ["POST"])


def setup(app: web.Application) -> None:
    """Routes for the page's assets (none yet)."""
