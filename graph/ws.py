"""Subscriptions over WebSocket at `/graphql` (contract §14). Placeholder until built."""

from __future__ import annotations

from aiohttp import web


async def websocket(request: web.Request) -> web.StreamResponse:
    raise web.HTTPMethodNotAllowed("GET", ["POST"])
