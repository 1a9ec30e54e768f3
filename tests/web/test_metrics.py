"""GET /metrics: Prometheus text, who may read it, and figures added up across
`kalends serve --workers N`."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock
from urllib.parse import urlsplit

import aiohttp
import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request
from conftest import Api, LiveServer, User, assert_error
from processes import (
    START_TIMEOUT,
    Service,
    request,
    start,
    wait_listening,
)
from prometheus_client.parser import text_string_to_metric_families

from domain import sync
from domain.config import Settings
from web import metrics
from web.services import SETTINGS

TOKEN = "metrics-token-" + "x" * 16
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    return {(sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def value(samples: Samples, name: str, **labels: str) -> float:
    """A sample's value; 0 when absent (a labelled series appears at its first count)."""
    return samples.get((name, frozenset(labels.items())), 0.0)


async def scrape(base: str, headers: dict[str, str] | None = None) -> tuple[int, str, Any]:
    async with aiohttp.ClientSession() as session, session.get(
        base + "/metrics", headers=headers or {}
    ) as resp:
        return resp.status, await resp.text(), resp.headers


async def samples_of(server: LiveServer | str) -> Samples:
    """The /metrics samples of a live server, or of the service at a URL."""
    status, text, headers = await scrape(server if isinstance(server, str) else server.url)
    assert status == 200, text
    assert headers["Content-Type"].startswith("text/plain; version=0.0.4"), headers
    return parse(text)


@pytest.fixture
def server_with_token(database_url: str) -> Iterator[LiveServer]:
    server = LiveServer(database_url, settings=Settings(metrics_token=TOKEN), run_jobs=False)
    try:
        yield server
    finally:
        server.close()


async def test_scrape_counts_requests_and_reads_pool_and_queue(
    live_server: LiveServer, api: Api, user: User
) -> None:
    before = await samples_of(live_server)
    for _ in range(2):
        assert (await api.get("/v1/profiles", user))[0] == 200
    assert (await api.get("/v1/profiles"))[0] == 401
    assert (await api.get("/v1/no-such-route-" + user.consumer, user))[0] == 404
    metrics.embedded_db_restarted()
    after = await samples_of(live_server)

    def rise(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    requests = "kalends_http_requests_total"
    assert rise(requests, operation="listProfiles", method="GET", status="200") == 2
    # Refused before its handler ran, still named after its operation.
    assert rise(requests, operation="listProfiles", method="GET", status="401") == 1
    assert rise(requests, operation="unmatched", method="GET", status="404") == 1
    assert not [key for key in after if any(user.consumer in v for _, v in key[1])], \
        "a raw path became a label"
    latency = "kalends_http_request_duration_seconds"
    assert rise(latency + "_count", operation="listProfiles", method="GET") == 3
    assert rise(latency + "_bucket", operation="listProfiles", method="GET", le="+Inf") == 3
    assert rise(latency + "_sum", operation="listProfiles", method="GET") > 0
    assert rise("kalends_embedded_db_restarts_total") == 1

    in_use = value(after, "kalends_db_pool_connections", state="in_use")
    idle = value(after, "kalends_db_pool_connections", state="idle")
    most = value(after, "kalends_db_pool_max")
    assert most == 10, after  # create_app's default pool size
    assert 0 <= in_use <= most and idle >= 0 and in_use + idle <= most

    assert value(after, "kalends_db_up") == 1
    for entrypoint in sync.JOBS:
        for status in ("queued", "picked"):
            assert ("kalends_jobs_queued",
                    frozenset({"entrypoint": entrypoint, "status": status}.items())) in after
        assert ("kalends_jobs_failed", frozenset({"entrypoint": entrypoint}.items())) in after


async def _leave_mid_body(base: str, path: str, user: User) -> None:
    """Send the headers and half the announced body, then close the connection."""
    url = urlsplit(base)
    _, writer = await asyncio.open_connection(url.hostname, url.port)
    writer.write(f"POST {path} HTTP/1.1\r\nHost: kalends\r\nContent-Type: application/json\r\n"
                 f"Authorization: Bearer {user.api_key}\r\nContent-Length: 100\r\n\r\n"
                 '{"display_name": '.encode())
    await writer.drain()
    writer.close()
    await writer.wait_closed()


async def test_a_client_that_leaves_mid_request_is_counted_apart(
    live_server: LiveServer, user: User, caplog: Any
) -> None:
    """No 500 and no traceback: the client closed the connection. The access log
    and the metrics say 499 (the client left first)."""
    caplog.set_level(logging.INFO)
    before = await samples_of(live_server)
    for path in ("/v1/profiles", "/graphql", "/mcp-developer"):
        await _leave_mid_body(live_server.url, path, user)

    def access_lines() -> list[logging.LogRecord]:
        return [r for r in caplog.records if r.name == "kalends.access"
                and r.getMessage() == "request" and getattr(r, "path", None) != "/metrics"]

    deadline = time.monotonic() + 30
    while len(access_lines()) < 3:  # the server notices each close on its own time
        assert time.monotonic() < deadline, caplog.records
        await asyncio.sleep(0.05)
    lines = access_lines()
    assert sorted(r.path for r in lines) == ["/graphql", "/mcp-developer", "/v1/profiles"]  # type: ignore[attr-defined]
    assert {(r.levelno, r.status, getattr(r, "client_closed", False))  # type: ignore[attr-defined]
            for r in lines} == {(logging.INFO, 499, True)}
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []

    after = await samples_of(live_server)

    def rise(operation: str, status: str) -> float:
        labels = {"operation": operation, "method": "POST", "status": status}
        return (value(after, "kalends_http_requests_total", **labels)
                - value(before, "kalends_http_requests_total", **labels))

    for operation in ("createProfile", "/graphql", "/mcp-developer"):
        assert rise(operation, "499") == 1, operation
        assert rise(operation, "500") == 0, operation


async def test_requests_the_http_parser_refuses_are_counted(live_server: LiveServer) -> None:
    """Answered before any route is known (web/protocol.py): `malformed`."""
    before = await samples_of(live_server)
    url = urlsplit(live_server.url)
    reader, writer = await asyncio.open_connection(url.hostname, url.port)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: kalends\r\nX-Note: a\x00b\r\n\r\n")
    assert (await asyncio.wait_for(reader.read(), 30)).startswith(b"HTTP/1.0 400 ")
    writer.close()
    after = await samples_of(live_server)
    labels = {"operation": "malformed", "method": "other", "status": "400"}
    assert (value(after, "kalends_http_requests_total", **labels)
            - value(before, "kalends_http_requests_total", **labels)) == 1


async def test_a_configured_token_is_required(server_with_token: LiveServer) -> None:
    for headers in ({}, {"Authorization": "Bearer wrong-" + TOKEN}, {"Authorization": TOKEN},
                    {"Authorization": "Basic " + TOKEN}):
        status, text, resp_headers = await scrape(server_with_token.url, headers)
        assert_error(status, orjson.loads(text), 401, "not_authenticated")
        assert resp_headers["WWW-Authenticate"].startswith("Bearer")
    status, text, _ = await scrape(server_with_token.url, {"Authorization": "Bearer " + TOKEN})
    assert status == 200, text
    assert value(parse(text), "kalends_db_up") == 1


def test_without_a_token_only_loopback_clients_may_scrape() -> None:
    for loopback in ("127.0.0.1", "127.8.9.10", "::1", "::ffff:127.0.0.1"):
        metrics.check_access(None, None, metrics.client_address(loopback))
    for remote in ("203.0.113.5", "::ffff:203.0.113.5", "2001:db8::1", "", None):
        with pytest.raises(web.HTTPNotFound):  # rendered exactly as an unknown route
            metrics.check_access(None, None, metrics.client_address(remote))
    with pytest.raises(web.HTTPNotFound):
        metrics.check_access(None, "Bearer " + TOKEN, ipaddress.ip_address("198.51.100.7"))
    # With a token, the address does not matter.
    metrics.check_access(TOKEN, "bearer " + TOKEN, ipaddress.ip_address("203.0.113.5"))


async def test_the_handler_hides_metrics_from_other_hosts() -> None:
    app = web.Application()
    app[SETTINGS] = Settings()
    transport = mock.Mock()
    transport.get_extra_info.side_effect = lambda key, default=None: (
        ("203.0.113.5", 40000) if key == "peername" else default)
    req = make_mocked_request("GET", "/metrics", app=app, transport=transport)
    assert req.remote == "203.0.113.5"
    with pytest.raises(web.HTTPNotFound):
        await metrics.scrape(req)


async def test_scrape_answers_while_the_database_is_down(database_url: str) -> None:
    server = LiveServer(database_url, settings=Settings(), run_jobs=False)
    try:
        server.call(server.db.pool.close())  # every query now fails, as in an outage
        status, text, _ = await scrape(server.url)
    finally:
        server.close()
    assert status == 200, text
    samples = parse(text)
    assert value(samples, "kalends_db_up") == 0
    assert not [key for key in samples if key[0].startswith("kalends_jobs_")]
    assert ("kalends_db_pool_max", frozenset()) in samples


@pytest.mark.slow
def test_two_workers_add_up(
    data_dir: Path, tmp_path: Path, services: list[Service]
) -> None:
    service = start(services, data_dir, tmp_path, "--workers", "2")
    wait_listening(service, 2)

    def scraped() -> Samples:
        status, body, headers = request(service.port, "GET", "/metrics")
        assert status == 200, body
        assert headers["Content-Type"].startswith("text/plain; version=0.0.4"), headers
        return parse(body.decode())

    # Each process writes its pool figures when it starts: two pools of 10 once both run.
    deadline = time.monotonic() + START_TIMEOUT
    while value(scraped(), "kalends_db_pool_max") < 20:
        assert time.monotonic() < deadline, "the second worker never reported its pool"
        time.sleep(0.2)

    for _ in range(20):
        assert request(service.port, "GET", "/readyz")[0] == 200
    # Each scrape reaches either process (SO_REUSEPORT); every one must see all 20.
    for _ in range(8):
        samples = scraped()
        assert value(samples, "kalends_http_requests_total",
                     operation="/readyz", method="GET", status="200") == 20
        assert value(samples, "kalends_http_request_duration_seconds_count",
                     operation="/readyz", method="GET") == 20
        assert value(samples, "kalends_db_pool_max") == 20
        assert value(samples, "kalends_db_up") == 1
    assert service.stop() == 0, service.stderr[-4000:]
