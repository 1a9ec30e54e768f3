"""When PostgreSQL goes away the service says so (503 service_unavailable, with
Retry-After) rather than 500, and recovers by itself when it returns."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

import aiohttp
from conftest import LiveServer, assert_error

from db import embedded
from db.migrate import migrate


async def test_outage_is_503_and_the_service_recovers() -> None:
    data = Path(tempfile.mkdtemp(prefix="kalends-outage-"))
    dsn, server = await asyncio.to_thread(embedded.start, data)
    live = None
    try:
        await migrate(dsn)
        live = await asyncio.to_thread(LiveServer, dsn)
        user = await asyncio.to_thread(live.create_user)
        async with aiohttp.ClientSession() as http:

            async def get(path: str) -> tuple[int, Any, Any]:
                async with http.get(live.url + path, headers=user.headers) as resp:
                    return resp.status, await resp.json(), resp.headers

            assert (await get("/readyz"))[0] == 200
            await asyncio.to_thread(embedded.stop, server)

            for path in ("/readyz", "/v1/profiles", "/v1/organizations"):
                status, body, headers = await get(path)
                error = assert_error(status, body, 503, "service_unavailable")
                assert error["type"] == "service_unavailable"
                assert int(headers["Retry-After"]) >= 1
                assert "asyncpg" not in error["message"]
            assert (await get("/healthz"))[0] == 200  # the process itself is up
            # What needs no database answers, though its rate limit cannot be counted.
            async with http.get(live.url + "/openapi.json") as resp:
                assert resp.status == 200
            status, body, _ = await get("/v1/no-such-route")
            assert_error(status, body, 404, "route_not_found")

            dsn_again, server = await asyncio.to_thread(embedded.start, data)
            assert dsn_again == dsn
            assert (await get("/readyz"))[0] == 200
            assert (await get("/v1/profiles"))[0] == 200
    finally:
        if live is not None:
            await asyncio.to_thread(live.close)
        await asyncio.to_thread(embedded.stop, server)
