"""Shared by the connected-calendar tests: waiting for sync jobs, reading the agenda."""

from __future__ import annotations

import asyncio
import dataclasses
import secrets
import time
from collections.abc import Awaitable, Callable
from datetime import date, datetime, timedelta
from typing import Any, Protocol
from zoneinfo import ZoneInfo

import pytest
from caldav_server import Radicale
from conftest import Api, LiveServer, User

from kalends.connected import admin, engine

SYNC_SECONDS = 30
PARIS = ZoneInfo("Europe/Paris")


class HasServer(Protocol):
    server: LiveServer


@dataclasses.dataclass
class Person:
    user: User
    login: str
    password: str


def new_person(server: LiveServer, radicale: Radicale) -> Person:
    """A Kalends user with a CalDAV login of their own and one calendar, "Work"."""
    user = server.create_user(timezone="Europe/Paris")
    login, password = f"u{secrets.token_hex(4)}", secrets.token_urlsafe(12)
    radicale.set_password(login, password)
    radicale.client(login, password).principal().make_calendar(name="Work", cal_id="work")
    return Person(user, login, password)


async def settled(world: HasServer, account_id: str) -> None:
    """Wait until no sync job of the account is queued or running."""
    deadline = time.monotonic() + SYNC_SECONDS
    while True:
        pending = world.server.call(world.server.db.fetchval(
            "SELECT count(*) FROM pgqueuer WHERE entrypoint = $1 "
            "AND status IN ('queued', 'picked') AND convert_from(payload, 'UTF8') LIKE $2",
            engine.SYNC_ACCOUNT, f"%{account_id}%"))
        if pending == 0:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"sync of {account_id} not finished within {SYNC_SECONDS} s")
        await asyncio.sleep(0.05)


async def sync(world: HasServer, account_id: str) -> None:
    await settled(world, account_id)
    world.server.call(admin.sync_now(world.server.db, account_id))
    await settled(world, account_id)


async def eventually(check: Callable[[], Awaitable[bool]], what: str) -> None:
    deadline = time.monotonic() + SYNC_SECONDS
    while not await check():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {SYNC_SECONDS} s: {what}")
        await asyncio.sleep(0.1)


def in_days(n: int) -> date:
    return datetime.now(PARIS).date() + timedelta(days=n)


async def agenda(api: Api, user: User, **params: Any) -> dict[str, Any]:
    query = {"days": "31", "timezone": "Europe/Paris", **params}
    status, body, _ = await api.get("/v1/agenda", user, params=query)
    assert status == 200, body
    return body  # type: ignore[no-any-return]


def external(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [i for i in body["items"] if i["source"]["type"] == "external"]
