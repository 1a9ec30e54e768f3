"""Periodic upkeep that a service process runs beside its requests."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

log = logging.getLogger("kalends.housekeeping")


async def every(seconds: float, what: str, task: Callable[[], Awaitable[Any]], *,
                first: float | None = None) -> None:
    """Run `task` every `seconds` (the first time after `first`, by default
    `seconds`) until cancelled. A round that fails (the database away, say) is
    logged; the next one tries again."""
    wait = seconds if first is None else first
    while True:
        await asyncio.sleep(wait)
        wait = seconds
        try:
            await task()
        except Exception:
            log.warning("could not %s", what, exc_info=True)
