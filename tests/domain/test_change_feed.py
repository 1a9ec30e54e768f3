"""The change feed's own connection (domain/notify/changes.py): whatever its connect or
its ping raises, the feed connects again and stops cleanly; it never ends for the life
of the process (seen: a postmaster killed while LISTEN was sent left asyncpg's
"cannot switch to state 11" error, the feed's task died of it, and `kalends serve`
exited 1 at its stop)."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import asyncpg
import pytest

from db import changes as store
from domain.notify import changes

BROKEN = asyncpg.InternalClientError(
    "cannot switch to state 11; another operation (2) is in progress")


async def _connected(feed: changes.Feed, seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while not feed.connected:
        assert time.monotonic() < deadline, "the feed did not connect"
        await asyncio.sleep(0.02)


def _failing_first(real: Any, error: Exception, calls: list[int]) -> Any:
    async def first_fails(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise error
        return await real(*args, **kwargs)
    return first_fails


@pytest.mark.parametrize(("error", "level"), [
    (BROKEN, logging.WARNING),  # what a dying server leaves: a connection error
    (RuntimeError("a fault of ours"), logging.ERROR),  # anything else: said in full
])
async def test_a_failed_connect_is_tried_again_and_stops_cleanly(
    database_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
    error: Exception, level: int,
) -> None:
    calls: list[int] = []
    monkeypatch.setattr(store, "listen", _failing_first(store.listen, error, calls))
    monkeypatch.setattr(changes, "_RETRY_FIRST", 0.01)
    feed = changes.Feed(database_url)
    with caplog.at_level(logging.WARNING, logger="kalends"):
        await feed.start(wait=0)
        await _connected(feed)
        await feed.stop()  # raises whatever killed the task, had one killed it
    assert len(calls) == 2
    said = [r for r in caplog.records if r.getMessage() == "change feed cannot connect"]
    assert [r.levelno for r in said] == [level]


async def test_a_ping_that_breaks_the_connection_reconnects(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    monkeypatch.setattr(store, "alive", _failing_first(store.alive, BROKEN, calls))
    monkeypatch.setattr(store, "listen", _counting(store.listen, listens := []))
    monkeypatch.setattr(changes, "_PING_EVERY", 0.02)
    feed = changes.Feed(database_url)
    await feed.start()
    deadline = time.monotonic() + 10
    while len(listens) < 2 or not feed.connected:
        assert time.monotonic() < deadline, "the feed did not connect again"
        await asyncio.sleep(0.02)
    await feed.stop()
    assert calls, "the ping never ran"


def _counting(real: Any, calls: list[int]) -> Any:
    async def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return await real(*args, **kwargs)
    return counted
