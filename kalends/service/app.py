"""The aiohttp application: REST, GraphQL and MCP over one set of services."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from datetime import timedelta

from aiohttp import web

import mcp_bridge
import registry
import registry.operations
from core.errors import ApiError
from db import ratelimits
from db import search as search_store
from db import webhooks as webhook_store
from db.database import Database
from db.replicas import Reads
from domain import agenda, config, cpu, housekeeping, instance_secrets, jobs
from domain.connected.engine import open_vault
from domain.pagination import Cursors
from graph.context import Services
from graph.schema import schema
from graph_bridge import http as graph_http
from graph_bridge import ide
from graph_bridge import ws as graph_ws
from kalends.service import job_handlers
from oauth_bridge import http as oauth_routes
from registry import payloads as webhook_payloads
from registry.toolsets import toolsets
from rest_bridge import feeds, openapi, routes
from web import metrics, protocol
from web.draining import Drain
from web.guard import ERROR_BODIES, error_envelopes, guard, request_context, require_api_key
from web.responses import json_response
from web.services import DRAIN, SERVICES, SETTINGS

log = logging.getLogger("kalends.app")
MAX_BODY = 1024 * 1024
WEBHOOK_RETENTION = timedelta(days=7)

# Validated at import: a broken operation document stops the start.
registry.prepare(schema._schema)
webhook_payloads.prepare()
_OPENAPI = openapi.document()


def create_app(dsn: str, *, pool_size: int = 10, run_jobs: bool | None = None,
               settings: config.Settings | None = None) -> web.Application:
    """`settings`: by default read from the environment. `run_jobs`: run
    background jobs in this process (default: `settings.jobs_in_process`)."""
    settings = settings or config.load()
    cpu.configure()
    app = web.Application(
        middlewares=[request_context, error_envelopes, guard], client_max_size=MAX_BODY,
        # What aiohttp's HTTP parser refuses is answered in the envelope too.
        handler_args=protocol.handler_args(),
    )
    app[SETTINGS] = settings
    app[DRAIN] = Drain()

    async def services(app: web.Application) -> AsyncIterator[None]:
        db = await Database.connect(dsn, max_size=pool_size)
        cursor_secret = await instance_secrets.get(db, open_vault(settings), "cursor")
        read_replicas = None
        if settings.read_database_urls:
            read_replicas = Reads.of(db, settings.read_database_urls, settings.read_max_lag,
                                     pool_size)
            await read_replicas.start()
        services = Services(db=db, cursors=Cursors(cursor_secret),
                            sync_interval=settings.sync_interval,
                            vault=open_vault(settings),
                            webhook_allow_http=settings.webhook_allow_http,
                            reads=read_replicas,
                            toolsets=tuple((name, len(ops)) for name, ops in
                                           toolsets(registry.OPERATIONS.values()).items()))
        app[SERVICES] = services
        # Keep the rate-limit table as small as the set of recently active callers.
        sweeper = asyncio.create_task(housekeeping.every(
            600, "prune rate-limit buckets", lambda: ratelimits.forget_idle(db)))
        # Delivered webhook messages are kept a week, then forgotten.
        pruner = asyncio.create_task(housekeeping.every(
            3600, "prune delivered webhook messages",
            lambda: webhook_store.prune(db, WEBHOOK_RETENTION)))
        if run_jobs if run_jobs is not None else settings.jobs_in_process:
            # A pool of its own: jobs never take the connections requests need
            # (and webhook delivery has one of its own besides: job_handlers).
            jobs_db = await Database.connect(dsn, min_size=1, max_size=4)
            # Recurring rows whose series' end is not stored yet (written before
            # migration 0017, or in bulk) are read by every agenda until it is:
            # soon after start, then hourly; background work, so on the jobs' pool.
            # Safe in several processes (db/calendar_events.py: settle).
            settler = asyncio.create_task(housekeeping.every(
                3600, "store recurring series' ends",
                lambda: agenda.settle_recurrence_ends(jobs_db), first=1))
            # Which words search walks in rank order (db/search.py): from the title
            # statistics, which autovacuum's ANALYZE keeps current; copied again
            # whenever they are newer than the copy (a look is one row).
            watch = search_store.WordsWatch()
            words = asyncio.create_task(housekeeping.every(
                search_store.WATCH_SECONDS, "refresh search's common words",
                lambda: watch.check(jobs_db)))
            async with job_handlers.opened(dsn, settings, jobs_db) as handlers:
                worker = jobs.Worker(jobs_db, dsn, handlers, settings.job_heartbeat)
                task = asyncio.create_task(worker.run())
                yield
                worker.stop()
                await jobs.finish(task)
            settler.cancel()
            words.cancel()
            await jobs_db.close()
        else:
            yield
        sweeper.cancel()
        pruner.cancel()
        if read_replicas is not None:
            await read_replicas.stop()
        await db.close()

    app.cleanup_ctx.append(services)
    app.cleanup_ctx.append(metrics.pool_publisher)
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz)
    app.router.add_get("/metrics", metrics.scrape)
    app.router.add_get("/openapi.json", _openapi)
    graph_http.setup(app)
    require_api_key(app, app.router.add_post("/graphql", graph_http.post))
    # A query over GET takes a key as POST does; a browser's page takes none, nor a
    # WebSocket, which sends its key in connection_init.
    graph_get = app.router.add_get("/graphql", graph_http.get, allow_head=False)
    require_api_key(app, graph_get, when=graph_http.runs_document)
    app.setdefault(ERROR_BODIES, {})[graph_get] = graph_http.error_body
    graph_ws.setup(app)  # subscriptions' change feed, and sockets closed on stop
    ide.setup(app)
    routes.setup(app)
    feeds.setup(app)
    mcp_bridge.setup(app, settings)
    oauth_routes.setup(app, settings)
    return app


async def _healthz(request: web.Request) -> web.Response:
    return json_response({"status": "ok"})


async def _readyz(request: web.Request) -> web.Response:
    if request.app[DRAIN].draining:
        raise ApiError("service_unavailable", "Stopping: finishing the requests in flight.")
    # Raises service_unavailable (503) when the pool cannot reach PostgreSQL.
    await request.app[SERVICES].db.fetchval("SELECT 1")
    return json_response({"status": "ready"})


async def _openapi(request: web.Request) -> web.Response:
    return json_response(_OPENAPI)
