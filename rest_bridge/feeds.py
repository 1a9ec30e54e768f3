"""`GET /v1/profiles/{profile_id}/events.ics`: a public profile's ICS feed, for any
calendar application (no credential; limited per client address like every
anonymous route). Not a registry operation: its body is iCalendar, not JSON, and
it is no tool for an agent."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from domain import ids, reads
from domain.notify import feeds
from web.services import OPERATION, SERVICES

PATH = "/v1/profiles/{profile_id}/events.ics"
OPERATION_ID = "getProfileEventsFeed"
_CACHE = f"public, max-age={int(feeds.REFRESH.total_seconds())}"


OPENAPI: dict[str, Any] = {PATH: {"get": {
    "operationId": OPERATION_ID,
    "summary": "A public profile's public events as an iCalendar (RFC 5545) feed",
    "tags": ["Events"],
    "security": [],
    "parameters": [
        {"name": "profile_id", "in": "path", "required": True,
         "schema": {"type": "string", "pattern": ids.pattern("prf")}},
        {"name": "If-None-Match", "in": "header", "required": False,
         "schema": {"type": "string"}},
    ],
    "responses": {
        "200": {"description": "The feed.",
                "headers": {"ETag": {"schema": {"type": "string"}},
                            "Cache-Control": {"schema": {"type": "string"}}},
                "content": {"text/calendar": {"schema": {"type": "string"}}}},
        "304": {"description": "Unchanged since the ETag sent in If-None-Match.",
                "headers": {"ETag": {"schema": {"type": "string"}}}},
        "400": {"$ref": "#/components/responses/Error"},
        "404": {"$ref": "#/components/responses/Error"},
        "429": {"$ref": "#/components/responses/RateLimited"},
    },
}}}
"""The route in the OpenAPI document (rest_bridge/openapi.py adds it)."""


def setup(app: web.Application) -> None:
    app.router.add_get(PATH, _feed, name=OPERATION_ID)


async def _feed(request: web.Request) -> web.StreamResponse:
    request[OPERATION] = OPERATION_ID
    services = request.app[SERVICES]
    # Public, and read by calendar clients on a schedule: a replica's, when one is up.
    db = reads.database(services.db, services.reads, None, read_only=True)
    profile, etag = await feeds.version(db, request.match_info["profile_id"])
    headers = {"ETag": etag, "Cache-Control": _CACHE}
    if _matches(request.headers.get("If-None-Match", ""), etag):
        return web.Response(status=304, headers=headers)
    body = await feeds.render(db, profile, etag)
    return web.Response(body=body, headers=headers, content_type="text/calendar",
                        charset="utf-8")


def _matches(header: str, etag: str) -> bool:
    """If-None-Match against the feed's tag: `*`, or the tag among those listed,
    compared weakly (RFC 9110 13.1.2)."""
    tags = {t.strip().removeprefix("W/") for t in header.split(",")}
    return "*" in tags or etag in tags
