"""Rate limits (docs/operations.md, "Service behaviour"): per consumer across REST, /graphql and
MCP, per client address without a valid credential, shared by every process on one database.

Each test runs a service with small limits on a database of its own, so that
its buckets never touch the session's service.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from conftest import Api, LiveServer, User, assert_error, handle, migrated_database, own_server
from processes import (
    ROOT,
    Service,
    request,
    service_env,
    start,
    wait_listening,
)

from domain import config
from domain.config import Rate, Settings

QUOTA = 5
WINDOW = 3600
ANONYMOUS = 3
SETTINGS = Settings(rate_limit=Rate(QUOTA, WINDOW), anonymous_rate_limit=Rate(ANONYMOUS, WINDOW))


@pytest.fixture
def limited(database_url: str) -> Iterator[LiveServer]:
    with own_server(database_url, "kalends_rl", settings=SETTINGS, run_jobs=False) as server:
        yield server


@pytest.fixture
async def limited_api(limited: LiveServer) -> Any:
    async with aiohttp.ClientSession() as session:
        yield Api(session, limited.url)


def _state(headers: Any) -> tuple[int, int]:
    """(remaining, reset) from the RateLimit header, after checking the policy header."""
    assert headers["RateLimit-Policy"] == f'"default";q={QUOTA};w={WINDOW}'
    match = re.fullmatch(r'"default";r=(\d+);t=(\d+)', headers["RateLimit"])
    assert match, headers["RateLimit"]
    return int(match[1]), int(match[2])


def _mcp_call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": name, "arguments": arguments}}


async def _mcp(api: Api, user: User, body: dict[str, Any]) -> tuple[int, Any, Any]:
    # The handshake-era transport: no routing headers needed.
    return await api.post("/mcp-developer", user, data=orjson.dumps(body),
                          headers={"Content-Type": "application/json"})


async def test_every_response_carries_the_headers_and_the_quota_runs_down(
    limited: LiveServer, limited_api: Api
) -> None:
    user = await asyncio.to_thread(limited.create_user)
    seen = []
    for _ in range(QUOTA):
        status, body, headers = await limited_api.get("/v1/organizations", user)
        assert status == 200, body
        seen.append(_state(headers))
    assert [r for r, _ in seen] == [4, 3, 2, 1, 0]
    # The whole quota comes back one interval per request used.
    assert all(abs(t - (QUOTA - r) * WINDOW // QUOTA) <= 1 for r, t in seen), seen

    status, body, headers = await limited_api.get("/v1/organizations", user)
    assert_error(status, body, 429, "rate_limit_exceeded")
    assert body["error"]["type"] == "rate_limit_error"
    # One request more is allowed after one interval (720 s), less the time spent.
    assert WINDOW // QUOTA - 5 <= int(headers["Retry-After"]) <= WINDOW // QUOTA
    assert _state(headers)[0] == 0
    # An error answered by the handler carries them too: a 404 of an unknown profile.
    other = await asyncio.to_thread(limited.create_user)
    status, body, headers = await limited_api.get(
        "/v1/profiles/prf_" + "0" * 32, other)
    assert_error(status, body, 404, "resource_not_found")
    assert _state(headers)[0] == QUOTA - 1


async def test_a_refused_write_changes_nothing(limited: LiveServer, limited_api: Api) -> None:
    user = await asyncio.to_thread(limited.create_user)
    for _ in range(QUOTA):
        assert (await limited_api.get("/v1/profiles", user))[0] == 200
    platform_id = handle()
    status, body, _ = await limited_api.post(
        "/v1/profiles", user, json={"platform_id": platform_id, "display_name": "Refused"})
    assert_error(status, body, 429, "rate_limit_exceeded")
    count = await asyncio.to_thread(
        limited.call,
        limited.db.fetchval("SELECT count(*) FROM profiles WHERE platform_id = $1", platform_id))
    assert count == 0


async def test_one_quota_across_rest_graphql_and_mcp(
    limited: LiveServer, limited_api: Api
) -> None:
    user = await asyncio.to_thread(limited.create_user)
    assert (await limited_api.get("/v1/organizations", user))[0] == 200
    query = {"query": "{ organizations { data { id } } }"}
    status, body, headers = await limited_api.post("/graphql", user, json=query)
    assert status == 200 and "errors" not in body, body
    assert _state(headers)[0] == QUOTA - 2
    status, body, headers = await _mcp(limited_api, user, _mcp_call("getContext", {}))
    assert status == 200 and body["result"]["isError"] is False, body
    assert _state(headers)[0] == QUOTA - 3
    for _ in range(2):
        assert (await limited_api.get("/v1/organizations", user))[0] == 200

    # Past the limit: MCP answers the tool call with an isError result carrying the
    # envelope (tools.mdx: the model sees it), REST and GraphQL with a 429.
    status, body, headers = await _mcp(limited_api, user, _mcp_call("getContext", {}))
    assert status == 200, body
    result = body["result"]
    assert result["isError"] is True and "structuredContent" not in result
    error = orjson.loads(result["content"][0]["text"])["error"]
    assert error["code"] == "rate_limit_exceeded" and error["type"] == "rate_limit_error"
    assert _state(headers)[0] == 0
    status, body, headers = await limited_api.post("/graphql", user, json=query)
    assert_error(status, body, 429, "rate_limit_exceeded")
    assert int(headers["Retry-After"]) >= 1


async def test_the_limit_is_per_consumer(limited: LiveServer, limited_api: Api) -> None:
    from domain import accounts

    ann = await asyncio.to_thread(limited.create_user)
    bob = await asyncio.to_thread(limited.create_user)
    second_key = (await asyncio.to_thread(limited.admin, accounts.create_key, ann.email))["api_key"]
    ann_again = User(ann.email, second_key, ann.organization_id, ann.calendar_id, ann.consumer)
    for who in (ann, ann_again) * 2 + (ann,):
        assert (await limited_api.get("/v1/calendars", who))[0] == 200
    # Two keys of one consumer share its quota; another consumer has its own.
    assert (await limited_api.get("/v1/calendars", ann_again))[0] == 429
    status, _, headers = await limited_api.get("/v1/calendars", bob)
    assert status == 200 and _state(headers)[0] == QUOTA - 1


async def test_concurrent_requests_never_exceed_the_quota(
    limited: LiveServer, limited_api: Api
) -> None:
    user = await asyncio.to_thread(limited.create_user)
    answers = await asyncio.gather(
        *(limited_api.get("/v1/organizations", user) for _ in range(4 * QUOTA)))
    statuses = sorted(status for status, _, _ in answers)
    assert statuses == [200] * QUOTA + [429] * (3 * QUOTA)


async def test_unauthenticated_requests_are_limited_by_address(
    limited: LiveServer, limited_api: Api
) -> None:
    # No credential, a bad one, and an unknown route all draw on the address's bucket.
    assert (await limited_api.get("/openapi.json"))[0] == 200
    status, body, _ = await limited_api.get(
        "/v1/profiles", headers={"Authorization": "Bearer kal_nope"})
    assert_error(status, body, 401, "not_authenticated")
    assert_error(*(await limited_api.get("/v1/nowhere"))[:2], 404, "route_not_found")
    for attempt in (
        limited_api.get("/openapi.json"),
        limited_api.get("/v1/profiles", headers={"Authorization": "Bearer kal_nope"}),
    ):
        status, body, headers = await attempt
        assert_error(status, body, 429, "rate_limit_exceeded")
        assert headers["RateLimit-Policy"] == f'"default";q={ANONYMOUS};w={WINDOW}'
        assert int(headers["Retry-After"]) >= 1
    # Probes answer whatever the address has used; valid keys have quotas of their own.
    for path in ("/healthz", "/readyz"):
        assert (await limited_api.get(path))[0] == 200
    user = await asyncio.to_thread(limited.create_user)
    assert (await limited_api.get("/v1/profiles", user))[0] == 200


async def test_a_valid_key_is_charged_to_its_consumer_on_routes_that_take_none(
    limited: LiveServer, limited_api: Api
) -> None:
    """`DELETE /graphql` (405) and an unknown path (404) with a valid key: the key's
    consumer pays, as on every authenticated request, not the address."""
    user = await asyncio.to_thread(limited.create_user)
    status, body, headers = await limited_api.delete("/graphql", user)
    assert_error(status, body, 405, "method_not_allowed")
    assert _state(headers)[0] == QUOTA - 1
    status, body, headers = await limited_api.get("/v1/nowhere", user)
    assert_error(status, body, 404, "route_not_found")
    assert _state(headers)[0] == QUOTA - 2
    # The address's bucket is whole; an unknown key is the address's to pay.
    for _ in range(ANONYMOUS):
        assert (await limited_api.get("/openapi.json"))[0] == 200
    status, body, headers = await limited_api.delete(
        "/graphql", headers={"Authorization": "Bearer kal_nope"})
    assert_error(status, body, 429, "rate_limit_exceeded")
    assert headers["RateLimit-Policy"] == f'"default";q={ANONYMOUS};w={WINDOW}'
    # The consumer's quota runs out on such routes as on any other.
    for _ in range(QUOTA - 2):
        assert (await limited_api.delete("/graphql", user))[0] == 405
    assert_error(*(await limited_api.delete("/graphql", user))[:2], 429, "rate_limit_exceeded")


def test_two_processes_share_one_quota(database_url: str) -> None:
    """Two services (pools of their own, as separate processes have) on one database."""
    with migrated_database(database_url, prefix="kalends_rl") as dsn:
        first = LiveServer(dsn, settings=SETTINGS, run_jobs=False)
        second = LiveServer(dsn, settings=SETTINGS, run_jobs=False)
        try:
            user = first.create_user()
            ports = [int(server.url.rsplit(":", 1)[1]) for server in (first, second)]
            statuses = [request(ports[index % 2], "GET", "/v1/organizations", user.headers)[0]
                        for index in range(2 * QUOTA)]
            assert statuses == [200] * QUOTA + [429] * QUOTA
        finally:
            first.close()
            second.close()


@pytest.mark.slow
def test_serve_with_four_workers_holds_the_limit(
    data_dir: Path, tmp_path: Path, services: list[Service]
) -> None:
    env = service_env(data_dir, KALENDS_RATE_LIMIT="8/3600")
    service = start(services, data_dir, tmp_path, "--workers", "4", env=env)
    wait_listening(service, 4)
    admin = subprocess.run(
        [sys.executable, "-m", "kalends", "admin", "create-user", "--email", "rl@example.com"],
        cwd=ROOT, env=env, capture_output=True, timeout=60, check=True)
    headers = {"Authorization": f"Bearer {orjson.loads(admin.stdout)['api_key']}"}
    # All at once, so that the processes race for the one bucket; then one after another.
    with ThreadPoolExecutor(max_workers=12) as pool:
        racing = list(pool.map(
            lambda _: request(service.port, "GET", "/v1/organizations", headers)[0], range(12)))
    assert sorted(racing) == [200] * 8 + [429] * 4
    assert request(service.port, "GET", "/v1/organizations", headers)[0] == 429
    assert service.stop() == 0


@pytest.mark.slow
@pytest.mark.parametrize(("variable", "value"), [
    ("KALENDS_RATE_LIMIT", "lots"),
    ("KALENDS_RATE_LIMIT", "0/60"),
    ("KALENDS_RATE_LIMIT_ANONYMOUS", "10/0"),
    ("KALENDS_JOBS", "sometimes"),
    ("KALENDS_JOB_HEARTBEAT_SECONDS", "-3"),
    ("KALENDS_MCP_ALLOWED_ORIGINS", "not an origin"),
    ("KALENDS_METRICS_TOKEN", "short"),
    ("DATABASE_URL", "mysql://db.example.com/kalends"),
    ("KALENDS_READ_DATABASE_URL", "postgresql://u:p@db/k,postgresql://kal:p@ss@replica/k"),
])
def test_bad_configuration_is_refused_with_one_line(
    tmp_path: Path, variable: str, value: str
) -> None:
    env = service_env(tmp_path / "data", **{variable: value})
    proc = subprocess.run([sys.executable, "-m", "kalends", "serve", "--port", "1"],
                          cwd=ROOT, env=env, capture_output=True, timeout=60, check=False)
    lines = proc.stderr.decode().splitlines()
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1 and lines[0].startswith("kalends: invalid configuration: "), lines
    assert variable in lines[0]
    if variable in ("KALENDS_METRICS_TOKEN", "DATABASE_URL", "KALENDS_READ_DATABASE_URL"):
        assert value not in lines[0]  # secrets are never echoed
        assert "p@ss" not in lines[0]
    assert proc.stdout == b""
    assert not (tmp_path / "data").exists()  # refused before anything started


@pytest.mark.slow
@pytest.mark.parametrize("args", [["--port", "0"], ["--port", "http"], ["--workers", "0"]])
def test_bad_arguments_are_refused(args: list[str]) -> None:
    proc = subprocess.run([sys.executable, "-m", "kalends", "serve", *args], cwd=ROOT,
                          capture_output=True, timeout=60, check=False)
    assert proc.returncode == 2
    assert b"Traceback" not in proc.stderr and b"expected a whole number" in proc.stderr


def test_settings_from_the_environment() -> None:
    assert config.load({}) == config.DEFAULTS
    loaded = config.load({
        "KALENDS_RATE_LIMIT": "120/60", "KALENDS_RATE_LIMIT_ANONYMOUS": "off",
        "KALENDS_JOBS": "OFF", "KALENDS_JOB_HEARTBEAT_SECONDS": "2.5",
        "KALENDS_MCP_ALLOWED_ORIGINS": "https://app.example.com/, http://x.example:8080",
        "DATABASE_URL": "postgresql://u:p@db/k",
    })
    assert loaded.rate_limit == Rate(120, 60) and loaded.anonymous_rate_limit is None
    assert loaded.jobs_in_process is False and loaded.job_heartbeat.total_seconds() == 2.5
    assert loaded.mcp_allowed_origins == {"https://app.example.com", "http://x.example:8080"}
    assert loaded.rate_limit.interval.total_seconds() == 0.5
