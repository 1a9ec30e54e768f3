"""Graceful stop: after SIGTERM the service says it is no longer ready, finishes
what it is doing, and only then closes its port.

aiohttp's own stop closes the listening socket at once, so a load balancer that
has not yet seen the instance leave still sends it connections, which are then
refused. Here SIGTERM first marks the process draining: `/readyz` answers 503,
responses carry `Connection: close` so keep-alive clients reconnect elsewhere,
and requests are still served, for at least `KALENDS_DRAIN_SECONDS` and until
none is in flight. aiohttp's shutdown follows.

Connections that stay open as long as their client likes (WebSockets) would hold
the stop back to its timeout: they wait on `released()` and close when it
returns, once the drain has lingered, or when the service stops at once
(`release()`, from aiohttp's shutdown hooks).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

# Probes and scrapes do not hold the stop back.
UNCOUNTED_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})


class Drain:
    def __init__(self) -> None:
        self.draining = False
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._released = asyncio.Event()

    @contextlib.contextmanager
    def serving(self) -> Iterator[None]:
        """Count one request as in flight while the block runs."""
        self._in_flight += 1
        self._idle.clear()
        try:
            yield
        finally:
            self._in_flight -= 1
            if not self._in_flight:
                self._idle.set()

    async def drain(self, linger: float, timeout: float) -> None:
        """Mark draining; return after `linger` seconds once nothing is in flight,
        or after `timeout` at most."""
        self.draining = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        await asyncio.sleep(min(linger, timeout))
        self.release()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), max(0.0, deadline - loop.time()))

    def release(self) -> None:
        """Ask long-lived connections to close now."""
        self._released.set()

    async def released(self) -> None:
        """Returns once long-lived connections should close."""
        await self._released.wait()
