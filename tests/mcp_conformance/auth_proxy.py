"""A loopback proxy that adds an API key, for test tools that send no credentials.

The MCP conformance suite sends no credentials, and the product has no switch
that turns authentication off. This proxy forwards every request unchanged
(Host and Origin included, so the service's own Origin check is what gets
tested) except that it sets `Authorization: Bearer $KALENDS_PROXY_API_KEY`.

    KALENDS_PROXY_API_KEY=kal_... python auth_proxy.py http://127.0.0.1:8080

It prints `listening on http://127.0.0.1:PORT` once ready and serves until stopped.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
from collections.abc import AsyncIterator

from aiohttp import ClientSession, DummyCookieJar, web

# Connection-specific fields (RFC 9110 §7.6.1), what aiohttp recomputes, and
# the credential this proxy owns.
_NOT_FORWARDED = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "content-length",
        "authorization",
    }
)

UPSTREAM = web.AppKey("upstream", str)
API_KEY = web.AppKey("api_key", str)
SESSION = web.AppKey("session", ClientSession)


async def _forward(request: web.Request) -> web.Response:
    headers = {k: v for k, v in request.headers.items() if k.lower() not in _NOT_FORWARDED}
    headers["Authorization"] = f"Bearer {request.app[API_KEY]}"
    async with request.app[SESSION].request(
        request.method,
        request.app[UPSTREAM] + request.path_qs,
        headers=headers,
        data=await request.read(),
        allow_redirects=False,
    ) as upstream:
        body = await upstream.read()
        reply = {k: v for k, v in upstream.headers.items() if k.lower() not in _NOT_FORWARDED}
        return web.Response(status=upstream.status, headers=reply, body=body)


async def _client(app: web.Application) -> AsyncIterator[None]:
    # Bytes pass through as sent: no decompression, no cookies kept.
    async with ClientSession(auto_decompress=False, cookie_jar=DummyCookieJar()) as session:
        app[SESSION] = session
        yield


async def _serve(upstream: str, host: str, port: int) -> None:
    app = web.Application(client_max_size=8 * 1024**2)
    app[UPSTREAM] = upstream.rstrip("/")
    app[API_KEY] = os.environ["KALENDS_PROXY_API_KEY"]
    app.cleanup_ctx.append(_client)
    app.router.add_route("*", "/{tail:.*}", _forward)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    sock = socket.create_server((host, port))
    await web.SockSite(runner, sock).start()
    print(f"listening on http://{host}:{sock.getsockname()[1]}", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description="Forward to a Kalends service, adding an API key.")
    parser.add_argument("upstream", help="the service's base URL, e.g. http://127.0.0.1:8080")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    args = parser.parse_args()
    asyncio.run(_serve(args.upstream, args.host, args.port))


if __name__ == "__main__":
    main()
