"""A hand-written aiohttp + asyncpg handler for three of the API's pages: the
baseline that bench/overhead.py measures Kalends against (issue: "the GraphQL
core at the cost of a hand-written handler"). A benchmark fixture, not
product code: it serves only the success paths, runs the project's own SQL
(`db.accounts.key_owner`, `db.events.page`, `db.events.by_ids`) and cursor
codec, and writes bodies byte-identical to the service's (bench/overhead.py
checks that before it measures).

    python bench/handwritten.py --port PORT --dsn DSN
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import asyncpg
import orjson
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from db import accounts, events
from db.database import Database
from domain import config, instance_secrets
from domain.auth import hash_key
from domain.connected.engine import open_vault
from domain.pagination import Cursors
from domain.times import utc_text

DB = web.AppKey("db", Database)
CURSORS = web.AppKey("cursors", Cursors)
DSN = web.AppKey("dsn", str)
# The service's limit (KALENDS_RATE_LIMIT, else its default), charged as the service
# charges: the bench gives both the same one, so neither refuses what the other takes.
_RATE = config.load().rate_limit or config.Rate(6000, 60)
CHARGE = (_RATE.interval, _RATE.window)


def _time(value: Any) -> str | None:
    return None if value is None else utc_text(value)


def _event(row: asyncpg.Record) -> dict[str, Any]:
    """The EventFields selection, in its order."""
    return {
        "id": row["id"],
        "profile_id": row["profile_id"] if row["profile_visible"] else None,
        "title": row["title"], "description": row["description"], "location": row["location"],
        "start_time": _time(row["start_time"]), "end_time": _time(row["end_time"]),
        "start_timezone": row["start_timezone"], "end_timezone": row["end_timezone"],
        "recurrence_rule": row["recurrence_rule"], "status": row["status"], "slug": row["slug"],
        "image_url": row["image_url"], "is_all_day": row["is_all_day"],
        "is_private": row["is_private"], "require_rsvp": row["require_rsvp"],
        "require_payment": row["require_payment"],
        "cancellation_reason": row["cancellation_reason"],
        "cancelled_at": _time(row["cancelled_at"]), "is_rescheduled": row["is_rescheduled"],
        "created_at": _time(row["created_at"]), "updated_at": _time(row["updated_at"]),
        "transparency": row["transparency"],
    }


async def _viewer(request: web.Request) -> str:
    key = request.headers.get("Authorization", "").removeprefix("Bearer ")
    row = await accounts.key_owner(request.app[DB], hash_key(key), CHARGE)
    if row is None or row["user_id"] is None or not row["allowed"]:
        raise web.HTTPUnauthorized()
    return str(row["user_id"])


async def list_events(request: web.Request) -> web.Response:
    viewer = await _viewer(request)
    limit = int(request.query.get("limit", "20"))
    cursor = request.query.get("cursor")
    key = f"events:{viewer}"
    cursors = request.app[CURSORS]
    after = cursors.decode(key, cursor) if cursor else None
    rows = await events.page(request.app[DB], viewer, after, limit + 1)
    rows, has_more, next_cursor = cursors.page(key, rows, limit, order="start_time")
    body = {"data": [_event(r) for r in rows], "has_more": has_more, "next_cursor": next_cursor}
    return web.Response(body=orjson.dumps(body), content_type="application/json")


async def get_event(request: web.Request) -> web.Response:
    viewer = await _viewer(request)
    rows = await events.by_ids(request.app[DB], [request.match_info["event_id"]], viewer)
    if not rows:
        raise web.HTTPNotFound()
    return web.Response(body=orjson.dumps(_event(rows[0])), content_type="application/json")


async def _database(app: web.Application) -> Any:
    db = await Database.connect(app[DSN], max_size=10)
    app[DB] = db
    # Sealed with the service key: run with the service's environment
    # (KALENDS_SECRET_KEY, or the KALENDS_DATA_DIR that holds its key file).
    vault = open_vault(config.load())
    app[CURSORS] = Cursors(await instance_secrets.get(db, vault, "cursor"))
    yield
    await db.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--dsn", required=True)
    args = parser.parse_args()
    app = web.Application()
    app[DSN] = args.dsn
    app.cleanup_ctx.append(_database)
    app.router.add_get("/v1/events", list_events)
    app.router.add_get("/v1/events/{event_id}", get_event)
    web.run_app(app, host="127.0.0.1", port=args.port, access_log=None, print=None)


if __name__ == "__main__":
    main()
