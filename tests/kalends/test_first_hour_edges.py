"""Edges a newcomer meets in the first hour: an API key sent to /mcp, a header over
aiohttp's limit, what `kalends serve` logs when it stops (SIGTERM and Ctrl-C), who
made each request in the access log, MCP calls counted per tool, where `serve -h`
says the data lives, and an un-encoded `+` in a query-string time."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from conftest import LiveServer, User, assert_error
from processes import (
    ROOT,
    STOP_TIMEOUT,
    Service,
    json_lines,
    request,
    service_env,
    start,
    wait_listening,
)
from prometheus_client.parser import text_string_to_metric_families
from test_rest_conventions import _raw

from domain import times

# -- helpers --------------------------------------------------------------------------




Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


async def _samples(server: LiveServer) -> Samples:
    async with aiohttp.ClientSession() as session, \
            session.get(server.url + "/metrics") as response:
        assert response.status == 200
        text = await response.text()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def _rise(before: Samples, after: Samples, name: str, **labels: str) -> float:
    key = (name, frozenset(labels.items()))
    return after.get(key, 0.0) - before.get(key, 0.0)


async def _rpc(server: LiveServer, path: str, token: str, method: str,
               params: dict[str, Any] | None = None) -> tuple[int, Any, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params or {}}
    async with aiohttp.ClientSession() as session, session.post(
            server.url + path, data=orjson.dumps(body),
            headers={"Content-Type": "application/json",
                     "Authorization": f"Bearer {token}"}) as response:
        return response.status, await response.json(), response.headers


# -- 3. an API key sent to /mcp ---------------------------------------------------------


async def test_an_api_key_sent_to_mcp_is_told_where_it_belongs(
        live_server: LiveServer, user: User) -> None:
    status, body, headers = await _rpc(live_server, "/mcp", user.api_key, "tools/list")
    # As any refused token: 401, JSON-RPC -32001, the envelope as its data.
    assert status == 401, body
    error = body["error"]
    assert body["id"] is None and error["code"] == -32001, body
    assert error["data"]["code"] == "not_authenticated"
    assert error["data"]["type"] == "authentication_error"
    message = error["message"]
    assert message == error["data"]["message"]
    assert "API key" in message and "/mcp-developer" in message, message
    assert "OAuth" in message, message
    assert 'error="invalid_token"' in headers["WWW-Authenticate"]
    assert "/mcp-developer" in headers["WWW-Authenticate"]
    # Any other bearer that is no JWT is still told just that.
    status, body, _ = await _rpc(live_server, "/mcp", "not-a-token", "tools/list")
    assert status == 401
    assert body["error"]["message"] == "The access token is not a JWT.", body
    # The same key where it belongs is served.
    status, body, _ = await _rpc(live_server, "/mcp-developer", user.api_key, "tools/list")
    assert status == 200 and body["result"]["tools"], body


# -- 4. a header over aiohttp's limit -------------------------------------------------


@pytest.mark.parametrize("raw", [
    b"GET /healthz HTTP/1.1\r\nHost: kalends\r\nX-Long: " + b"b" * 9000 + b"\r\n\r\n",
    b"GET /healthz HTTP/1.1\r\nHost: kalends\r\nCookie: " + b"c=" * 4100 + b"\r\n\r\n",
    b"GET /v1/profiles?q=" + b"a" * 8200 + b" HTTP/1.1\r\nHost: kalends\r\n\r\n",
], ids=["header", "cookie", "request line"])
async def test_a_line_over_8190_bytes_is_431_header_too_large(
        live_server: LiveServer, raw: bytes, caplog: Any) -> None:
    caplog.set_level(logging.INFO)
    before = await _samples(live_server)
    status, headers, body = await _raw(live_server.url, raw)
    assert headers["content-type"] == "application/json", body
    error = assert_error(status, orjson.loads(body), 431, "header_too_large")
    assert error["type"] == "invalid_request_error"
    assert "8,190 bytes" in error["message"], error
    assert "header" in error["message"] and "request line" in error["message"], error
    assert headers["x-request-id"] == error["request_id"]
    after = await _samples(live_server)
    assert _rise(before, after, "kalends_http_requests_total",
                 operation="malformed", method="other", status="431") == 1
    lines = [r for r in caplog.records if r.name.startswith(("aiohttp", "kalends.http",
                                                              "kalends.access"))
             and getattr(r, "path", None) != "/metrics"]
    assert [(r.levelno, getattr(r, "status", None), r.exc_info) for r in lines] \
        == [(logging.INFO, 431, None)], lines


async def test_other_malformed_requests_stay_400_invalid_json(live_server: LiveServer) -> None:
    status, _, body = await _raw(
        live_server.url, b"GET /healthz HTTP/1.1\r\nHost: kalends\r\nX-Note: a\x00b\r\n\r\n")
    assert_error(status, orjson.loads(body), 400, "invalid_json")


# -- 5. the consumer in the access log, MCP calls counted per tool -----------------------


async def test_access_lines_name_the_consumer(live_server: LiveServer, user: User,
                                             caplog: Any) -> None:
    caplog.set_level(logging.INFO)
    async with aiohttp.ClientSession() as session:
        for headers in (user.headers, {}):
            async with session.get(live_server.url + "/v1/profiles", headers=headers) as r:
                await r.read()
    await _rpc(live_server, "/mcp-developer", user.api_key, "tools/call",
               {"name": "getContext", "arguments": {}})
    lines = [r for r in caplog.records if r.name == "kalends.access"
             and getattr(r, "path", None) in ("/v1/profiles", "/mcp-developer")]
    assert [(r.path, r.status, getattr(r, "consumer", None))
            for r in lines] == [("/v1/profiles", 200, user.consumer),
                                ("/v1/profiles", 401, None),
                                ("/mcp-developer", 200, user.consumer)]


async def test_mcp_tool_calls_are_counted_per_tool(live_server: LiveServer, user: User) -> None:
    before = await _samples(live_server)
    for _ in range(2):
        status, body, _ = await _rpc(live_server, "/mcp-developer", user.api_key, "tools/call",
                                     {"name": "getContext", "arguments": {}})
        assert status == 200 and body["result"]["isError"] is False, body
    status, _, _ = await _rpc(live_server, "/mcp-developer", user.api_key, "tools/list")
    assert status == 200
    after = await _samples(live_server)
    requests = "kalends_http_requests_total"
    assert _rise(before, after, requests, operation="getContext", method="POST",
                 status="200") == 2
    # A call that names no tool stays under the route.
    assert _rise(before, after, requests, operation="/mcp-developer", method="POST",
                 status="200") == 1


# -- 5. what `kalends serve` logs when it stops -------------------------------------------


def _entries(service: Service, msg: str) -> list[dict[str, Any]]:
    return [e for e in json_lines(service.stderr) if e.get("msg") == msg]


def _assert_stopped_once(service: Service, name: str) -> None:
    received = _entries(service, "stop signal received")
    assert [e["signal"] for e in received] == [name], service.stderr[-4000:]
    assert len(_entries(service, "draining")) == 1, service.stderr[-4000:]
    stopped = _entries(service, "stopped")
    assert len(stopped) == 1, service.stderr[-4000:]
    assert stopped[0]["signal"] == name and stopped[0]["seconds"] >= 0, stopped
    assert [e for e in json_lines(service.stderr) if e.get("level") in ("error", "critical")
            or "Traceback" in str(e)] == []


@pytest.mark.slow
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_serve_logs_the_stop_signal_and_when_it_has_stopped(
        data_dir: Path, tmp_path: Path, services: list[Service], stop: signal.Signals) -> None:
    """Ctrl-C stops the service as SIGTERM does: drains (/readyz 503) and stops, once."""
    service = start(services, data_dir, tmp_path,
                    env=service_env(data_dir, KALENDS_DRAIN_SECONDS="1"))
    assert request(service.port, "GET", "/readyz")[0] == 200
    service.proc.send_signal(stop)
    time.sleep(0.3)
    assert request(service.port, "GET", "/readyz")[0] == 503
    assert service.proc.wait(timeout=STOP_TIMEOUT) == 0
    _assert_stopped_once(service, stop.name)
    assert _entries(service, "stopped")[0]["seconds"] >= 1  # the drain


@pytest.mark.slow
def test_ctrl_c_stops_every_worker_once(data_dir: Path, tmp_path: Path,
                                        services: list[Service]) -> None:
    """A terminal's Ctrl-C signals the whole process group: the supervisor and each
    worker. Each worker still drains and stops once, and the supervisor logs its stop."""
    service = start(services, data_dir, tmp_path, "--workers", "2")
    workers = wait_listening(service, 2)
    os.killpg(service.proc.pid, signal.SIGINT)
    assert service.proc.wait(timeout=STOP_TIMEOUT) == 0, service.stderr[-4000:]
    pids = {w.pid for w in workers}
    lines = json_lines(service.stderr)
    for pid in pids:
        mine = [e for e in lines if e.get("pid") == pid]
        assert [e["msg"] for e in mine if e["msg"] in ("stop signal received", "draining")] \
            == ["stop signal received", "draining"], service.stderr[-4000:]
    supervisor = [e for e in lines if e.get("pid") == service.proc.pid]
    assert [e["msg"] for e in supervisor if e["msg"] in ("stop signal received", "stopped")] \
        == ["stop signal received", "stopped"], service.stderr[-4000:]
    assert [e for e in lines if e.get("level") in ("error", "critical")] == []
    assert "Traceback" not in service.stderr


# -- 6. where `serve -h` says the data lives ------------------------------------------------


def test_serve_help_says_where_the_data_lives() -> None:
    result = subprocess.run([sys.executable, "-m", "kalends", "serve", "-h"], cwd=ROOT,
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())  # argparse wraps lines where it likes
    for words in ("KALENDS_DATA_DIR", "/var/lib/kalends", "~/.local/share/kalends",
                  "DATABASE_URL", "embedded PostgreSQL"):
        assert words in text, (words, result.stdout)


# -- 7. an un-encoded + in a query-string time ---------------------------------------------


@pytest.mark.parametrize(("text", "sent"), [
    ("2026-03-09T09:00:00 01:00", "2026-03-09T09:00:00%2B01:00"),
    ("2026-03-09T09:00 01:00", "2026-03-09T09:00%2B01:00"),
    ("2026-03-09t09:00:00.5 0100", "2026-03-09T09:00:00.5%2B0100"),
    ("2026-03-09 09:00:00 05:30", "2026-03-09T09:00:00%2B05:30"),
])
def test_the_hint_for_a_space_where_the_sign_was(text: str, sent: str) -> None:
    hint = times.space_for_plus_hint(text)
    assert hint is not None
    assert "write + as %2B" in hint, hint
    assert f"({sent})" in hint, hint  # the value as it should be sent


@pytest.mark.parametrize("text", [
    "2026-03-09T09:00:00+01:00", "2026-03-09T09:00:00-01:00", "2026-03-09T09:00:00Z",
    "2026-03-09T09:00:00", "tomorrow 01:00", "2026-03-09 09:00", "",
])
def test_no_hint_where_no_sign_was_lost(text: str) -> None:
    assert times.space_for_plus_hint(text) is None


async def test_free_busy_says_to_encode_the_plus(live_server: LiveServer, user: User) -> None:
    async with aiohttp.ClientSession() as session, session.get(
            live_server.url + "/v1/free-busy?start=2026-03-09T09:00:00+01:00"
                              "&end=2026-03-09T18:00:00%2B01:00",
            headers=user.headers) as response:
        status, body = response.status, await response.json()
    error = assert_error(status, body, 400, "invalid_field", param="start")
    assert "%2B" in error["message"], error
