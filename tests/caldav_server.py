"""A real CalDAV server for tests: Radicale (PyPI) on a loopback port, with
htpasswd authentication and its own storage folder; stopped and started again
at will (to test a provider that goes away), with the same data. `Relay` puts
it behind a relay that a test can make lie (hrefs to other hosts, redirects,
hostile XML)."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import caldav
from aiohttp import web
from processes import free_port, request

T = TypeVar("T")


class Radicale:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._users = folder / "users"
        self._config = folder / "config"
        self._log = folder / "radicale.log"
        self._process: subprocess.Popen[bytes] | None = None
        self._users.write_text("")
        self._config.write_text(
            f"""[server]
hosts = 127.0.0.1:{self.port}
[auth]
type = htpasswd
htpasswd_filename = {self._users}
htpasswd_encryption = plain
[storage]
filesystem_folder = {folder / "collections"}
[rights]
type = owner_only
[logging]
level = warning
"""
        )

    def set_password(self, user: str, password: str) -> None:
        lines = [line for line in self._users.read_text().splitlines()
                 if not line.startswith(user + ":")]
        lines.append(f"{user}:{password}")
        self._users.write_text("\n".join(lines) + "\n")

    def start(self) -> None:
        log = self._log.open("ab")
        self._process = subprocess.Popen(
            [sys.executable, "-m", "radicale", "--config", str(self._config)],
            stdout=log, stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                request(self.port, "GET", "/.web/", timeout=1)
                return
            if self._process.poll() is not None:
                break
            time.sleep(0.1)
        raise RuntimeError(f"Radicale did not start:\n{self._log.read_text()[-2000:]}")

    def stop(self) -> None:
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._process = None

    def client(self, user: str, password: str) -> caldav.DAVClient:
        """An independent CalDAV client: the "other device" of the tests."""
        return caldav.DAVClient(url=self.url + "/", username=user, password=password)


class Served:
    """An aiohttp application on a loopback address, served from a thread and
    loop of its own: the service under test runs on another loop, which the
    test's thread waits on."""

    def __init__(self, application: web.Application, host: str = "127.0.0.1") -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._runner = web.AppRunner(application, access_log=None)
        self.port: int = self.call(self._start(host))
        self.url = f"http://{host}:{self.port}"

    def call(self, coro: Awaitable[T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=30)  # type: ignore[arg-type]

    async def _start(self, host: str) -> int:
        await self._runner.setup()
        await web.TCPSite(self._runner, host, 0).start()
        return int(self._runner.addresses[0][1])

    def close(self) -> None:
        self.call(self._runner.cleanup())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)


# Hop-by-hop and framing headers: the relay's own HTTP stack sets them.
_NOT_RELAYED = {"host", "content-length", "transfer-encoding", "connection", "keep-alive",
                "accept-encoding", "content-encoding", "date", "server"}

Answer = Callable[[web.Request, bytes], web.StreamResponse | None]
Rewrite = Callable[[web.Request, bytes], bytes]


class Relay(Served):
    """Radicale behind a relay on a loopback port of its own: connect accounts
    to `url`. By default it passes everything through; a test sets `answer`
    to reply in Radicale's stead (a redirect, a hostile body; None passes the
    request on), or `rewrite` to edit what Radicale answered."""

    def __init__(self, radicale: Radicale) -> None:
        self.radicale = radicale
        self.answer: Answer | None = None
        self.rewrite: Rewrite | None = None
        self._client: aiohttp.ClientSession | None = None
        application = web.Application()
        application.router.add_route("*", "/{tail:.*}", self._handle)
        application.on_cleanup.append(self._close_client)
        super().__init__(application)

    def reset(self) -> None:
        self.answer = None
        self.rewrite = None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        if self.answer is not None:
            answered = self.answer(request, body)
            if answered is not None:
                return answered
        if self._client is None:
            self._client = aiohttp.ClientSession()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _NOT_RELAYED}
        async with self._client.request(
                request.method, self.radicale.url + request.path_qs, headers=headers,
                data=body, allow_redirects=False) as reply:
            answer = await reply.read()
            kept = {k: v for k, v in reply.headers.items() if k.lower() not in _NOT_RELAYED}
            status = reply.status
        if self.rewrite is not None:
            answer = self.rewrite(request, answer)
        return web.Response(status=status, body=answer, headers=kept)

    async def _close_client(self, _: Any) -> None:
        if self._client is not None:
            await self._client.close()
