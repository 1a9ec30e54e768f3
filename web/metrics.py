"""Prometheus metrics: every definition, and `GET /metrics`.

The outermost middleware counts and times every request, the embedded
database's keeper counts its restarts, and the rest is read at scrape time:
the connection pool, and the job queue from PostgreSQL.

Under `kalends serve --workers N` a scrape reaches one of N processes, so each
writes its figures to files in `PROMETHEUS_MULTIPROC_DIR` (a fresh directory
the supervisor makes) and `/metrics` adds all of them up: prometheus_client's
multiprocess mode. A process alone keeps them in memory and needs no directory.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import logging
import os
from collections.abc import AsyncIterator, Iterator
from functools import lru_cache
from typing import Any

from aiohttp import web
from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
)
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from core.errors import ApiError
from db import jobs_stats
from db.database import Database
from db.replicas import Reads
from domain import sync
from web.services import OPERATION, SERVICES, SETTINGS

log = logging.getLogger("kalends.metrics")

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

# prometheus_client chose where values live from this variable when imported.
_MULTIPROCESS = "PROMETHEUS_MULTIPROC_DIR" in os.environ
# A scrape waits this long for the job-queue query, well within a scrape timeout.
_QUERY_TIMEOUT = 3.0
# How often each process of `--workers N` writes its pool figures for the others' scrapes.
_PUBLISH_EVERY = 5.0
# aiohttp takes any token as a method: others are labelled `other`, a bounded set.
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})

# A `_created` series beside each counter and histogram would double them, for a
# start time that multiprocess mode cannot give anyway.
disable_created_metrics()  # type: ignore[no-untyped-call]

# `status` 499: the client closed the connection before its answer (nginx's code), so
# that it is counted among requests yet never taken for a server error (5xx).
_REQUESTS = Counter(
    "kalends_http_requests",
    "HTTP requests answered, by operation, method and status (499: the client left first).",
    ["operation", "method", "status"],
)
_LATENCY = Histogram(
    "kalends_http_request_duration_seconds", "Time to answer an HTTP request.",
    ["operation", "method"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
# livesum: under --workers N, the connections of all the processes together.
_POOL = Gauge(
    "kalends_db_pool_connections", "Connections of the request pool to PostgreSQL, by state.",
    ["state"], multiprocess_mode="livesum",
)
_POOL_MAX = Gauge(
    "kalends_db_pool_max", "The most connections the request pool may open.",
    multiprocess_mode="livesum",
)
_EMBEDDED_RESTARTS = Counter(
    "kalends_embedded_db_restarts", "Times the embedded PostgreSQL was found down and restarted.",
)


def observe_request(request: web.Request, status: int, seconds: float) -> None:
    """Count and time one answered request (the outermost middleware calls it)."""
    count, latency = _series(_operation(request),
                             request.method if request.method in _METHODS else "other", status)
    count.inc()
    latency.observe(seconds)


@lru_cache(maxsize=4096)
def _series(operation: str, method: str, status: int) -> tuple[Any, Any]:
    """One request kind's counter and histogram, looked up once: their labels come
    from bounded sets (operations, route templates, methods, statuses)."""
    return _REQUESTS.labels(operation, method, str(status)), _LATENCY.labels(operation, method)


def observe_malformed(status: int) -> None:
    """Count a request that aiohttp's HTTP parser refused (web/protocol.py):
    no method or route was read. Not timed: it never reached a handler."""
    _REQUESTS.labels("malformed", "other", str(status)).inc()


def _operation(request: web.Request) -> str:
    """The operationId, else the route's template: never the raw path, which would
    make a new series of every URL anyone cares to request."""
    if OPERATION in request:
        return request[OPERATION]
    route = request.match_info.route
    if route.name is not None:  # REST routes bear their operation's name, even on a 401
        return route.name
    resource = route.resource
    return resource.canonical if resource is not None else "unmatched"


def embedded_db_restarted() -> None:
    """Count a restart of the embedded PostgreSQL by its keeper.

    Under `--workers N` the keeper runs in the supervisor, whose count reaches
    the children's scrapes only if PROMETHEUS_MULTIPROC_DIR was set there before
    prometheus_client was first imported; otherwise it stays in its memory.
    """
    _EMBEDDED_RESTARTS.inc()


def check_access(token: str | None, authorization: str | None, client: Address | None) -> None:
    """/metrics reveals the traffic. With a token configured, only its bearer may
    read it; without, only this machine, and to anyone else the route does not exist."""
    if token is not None:
        if not _bearer_matches(authorization or "", token):
            raise ApiError("not_authenticated",
                           "Send the metrics token as `Authorization: Bearer <token>`.")
    elif client is None or not client.is_loopback:
        raise web.HTTPNotFound()  # answered exactly as an unknown route is


def _bearer_matches(authorization: str, token: str) -> bool:
    scheme, _, supplied = authorization.partition(" ")
    # In constant time: how long a wrong guess takes tells nothing of the token.
    return scheme.lower() == "bearer" and hmac.compare_digest(
        supplied.strip().encode("utf-8", "surrogateescape"), token.encode())


def client_address(remote: str | None) -> Address | None:
    """The peer's IP address; None when it is not one (a Unix socket)."""
    try:
        address = ipaddress.ip_address(remote or "")
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped  # ::ffff:127.0.0.1 from a dual-stack socket
    return address


async def scrape(request: web.Request) -> web.Response:
    """GET /metrics, in the format the scraper asks for (Prometheus text by default)."""
    check_access(request.app[SETTINGS].metrics_token, request.headers.get("Authorization"),
                 client_address(request.remote))
    db = request.app[SERVICES].db
    _publish_pool(db.pool)
    snapshot = _Snapshot(_counted(), [*await _read_database(db),
                                      *_replicas(request.app[SERVICES].reads)])
    encode, content_type = choose_encoder(",".join(request.headers.getall("Accept", [])))
    return web.Response(body=encode(snapshot), headers={"Content-Type": content_type})


async def pool_publisher(app: web.Application) -> AsyncIterator[None]:
    """Cleanup context: under `--workers N` a scrape reaches one process, so each
    writes its pool figures for the others every few seconds. Alone, the scrape
    reads the pool itself."""
    task = asyncio.create_task(_publish_every(app[SERVICES].db.pool)) if _MULTIPROCESS else None
    yield
    if task is not None:
        task.cancel()


async def _publish_every(pool: Any) -> None:
    while True:
        _publish_pool(pool)
        await asyncio.sleep(_PUBLISH_EVERY)


def _publish_pool(pool: Any) -> None:
    size, idle = pool.get_size(), pool.get_idle_size()
    _POOL.labels("in_use").set(size - idle)
    _POOL.labels("idle").set(idle)
    _POOL_MAX.set(pool.get_max_size())


class _Snapshot:
    """One scrape: the metrics counted as requests went by, then those just read."""

    def __init__(self, counted: Collector, read: list[Metric]) -> None:
        self._counted = counted
        self._read = read

    def collect(self) -> Iterator[Metric]:
        yield from self._counted.collect()
        yield from self._read


def _counted() -> Collector:
    if not _MULTIPROCESS:
        return REGISTRY  # with the process's own CPU, memory and GC figures
    registry = CollectorRegistry()
    # The files of every process, added up (its constructor is not annotated).
    MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    return registry


async def _read_database(db: Database) -> list[Metric]:
    up = GaugeMetricFamily("kalends_db_up", "1 when this scrape could query PostgreSQL, else 0.")
    try:
        async with asyncio.timeout(_QUERY_TIMEOUT):
            counts = await jobs_stats.counts(db)
    except Exception as exc:  # an outage, say: the scrape still answers with the rest
        log.warning("job queue not measured: database unreachable", extra={"error": repr(exc)})
        up.add_metric([], 0)
        return [up]
    up.add_metric([], 1)
    return [up, *_job_metrics(counts)]


def _replicas(reads: Reads | None) -> list[Metric]:
    """Each read replica as this process's last check found it (db/replicas.py)."""
    up = GaugeMetricFamily(
        "kalends_db_replica_up", "1 when the last check reached the read replica and found it "
        "replaying this primary's WAL, else 0.", labels=["replica"])
    in_use = GaugeMetricFamily(
        "kalends_db_replica_in_use", "1 when reads are sent to the read replica (up, and no "
        "more than KALENDS_READ_MAX_LAG_SECONDS behind), else 0.", labels=["replica"])
    lag = GaugeMetricFamily(
        "kalends_db_replica_lag_seconds", "Seconds the read replica was behind the primary at "
        "its last check; absent while it is not up.", labels=["replica"])
    for replica in reads.replicas if reads is not None else ():
        up.add_metric([replica.name], 1 if replica.up else 0)
        in_use.add_metric([replica.name], 1 if replica.in_use else 0)
        if replica.lag is not None:
            lag.add_metric([replica.name], replica.lag)
    return [up, in_use, lag] if reads is not None else []


def _job_metrics(counts: dict[tuple[str, str], int]) -> list[Metric]:
    waiting = GaugeMetricFamily(
        "kalends_jobs_queued", "Jobs waiting (queued) or running (picked), by entrypoint.",
        labels=["entrypoint", "status"],
    )
    failed = GaugeMetricFamily(
        "kalends_jobs_failed", "Jobs held as failed after their last attempt, for an operator.",
        labels=["entrypoint"],
    )
    # Every known entrypoint, 0 when idle: an absent series cannot be alerted on.
    for entrypoint in sorted({*sync.JOBS, *(name for name, _ in counts)}):
        for status in ("queued", "picked"):
            waiting.add_metric([entrypoint, status], counts.get((entrypoint, status), 0))
        failed.add_metric([entrypoint], counts.get((entrypoint, "failed"), 0))
    return [waiting, failed]
