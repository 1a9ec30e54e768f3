"""Shared by the connected-calendar tests: a service beside a real CalDAV server
(`caldav_world`), waiting for sync jobs, reading the agenda."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import os
import secrets
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol
from zoneinfo import ZoneInfo

import aiohttp
import pytest
from caldav_server import Radicale
from conftest import Api, LiveServer, User, migrated_database, poll_until

from domain import config
from domain.connected import admin, engine
from domain.connected.provider import ProviderSettings

SYNC_SECONDS = 30
PARIS = ZoneInfo("Europe/Paris")


class HasServer(Protocol):
    server: LiveServer


class HasCalDav(HasServer, Protocol):
    radicale: Radicale


@dataclasses.dataclass
class World:
    """A service on a database of its own (no other test's worker takes its jobs)
    beside a real CalDAV server."""

    server: LiveServer
    radicale: Radicale
    dsn: str
    data_dir: Path
    settings: config.Settings

    def env(self) -> dict[str, str]:
        return {**os.environ, "DATABASE_URL": self.dsn, "KALENDS_DATA_DIR": str(self.data_dir)}


@contextmanager
def caldav_world(database_url: str, prefix: str) -> Iterator[World]:
    """Radicale, and a live server on a fresh database named after `prefix`, for as
    long as the block runs."""
    folder = Path(tempfile.mkdtemp(prefix="kalends-caldav-"))
    radicale = Radicale(folder)
    radicale.start()
    saved = os.environ.get("KALENDS_DATA_DIR")
    # The vault's key file lives here, for the server and the CLI alike.
    os.environ["KALENDS_DATA_DIR"] = str(folder / "data")
    settings = dataclasses.replace(config.load(), secret_key=None)
    try:
        with migrated_database(database_url, prefix) as dsn:
            server = LiveServer(dsn, settings=settings)
            try:
                yield World(server, radicale, dsn, folder / "data", settings)
            finally:
                server.close()
    finally:
        radicale.stop()
        if saved is None:
            os.environ.pop("KALENDS_DATA_DIR", None)
        else:
            os.environ["KALENDS_DATA_DIR"] = saved


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


# The fixtures `api` and `person` of a test module whose fixture `world` has a server of
# its own: importing one registers it in the module, and the redundant alias marks the
# import as wanted (`from connected_world import world_api as world_api`).


@pytest.fixture(name="api")
async def world_api(world: HasServer) -> AsyncIterator[Api]:
    """A REST client of the world's server."""
    async with aiohttp.ClientSession() as session:
        yield Api(session, world.server.url)


@pytest.fixture(name="person")
def world_person(world: HasCalDav) -> Person:
    """A user of the world's server with a CalDAV login on its Radicale (`new_person`)."""
    return new_person(world.server, world.radicale)


def connect(world: World, p: Person) -> dict[str, Any]:
    """`p`'s CalDAV account connected, as `kalends admin connect-calendars` does."""
    return world.server.call(admin.connect(
        world.server.db, world.settings, p.user.email, "ios", world.radicale.url, p.login,
        p.password))


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


eventually = functools.partial(poll_until, seconds=SYNC_SECONDS, interval=0.1)
"""Poll until `check()` holds; fail after SYNC_SECONDS."""


def provider_settings(google_url: str, microsoft_url: str, **options: Any) -> config.Settings:
    """The service's settings with a secret key of its own, and Google and Microsoft at
    `google_url` and `microsoft_url` (protocol fakes: their OAuth clients made up);
    `options` go over the providers' other settings."""
    providers = ProviderSettings(
        google_api_url=google_url, google_token_url=f"{google_url}/token",
        google_client_id="kalends-test", google_client_secret="s3cret",
        microsoft_api_url=microsoft_url, microsoft_token_url=f"{microsoft_url}/token",
        microsoft_client_id="kalends-test", microsoft_client_secret="s3cret", **options)
    return dataclasses.replace(config.load(), secret_key=secrets.token_urlsafe(32),
                               providers=providers)


def in_days(n: int) -> date:
    return datetime.now(PARIS).date() + timedelta(days=n)


async def agenda(api: Api, user: User, **params: Any) -> dict[str, Any]:
    query = {"days": "31", "timezone": "Europe/Paris", **params}
    status, body, _ = await api.get("/v1/agenda", user, params=query)
    assert status == 200, body
    return body  # type: ignore[no-any-return]


def external(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [i for i in body["items"] if i["source"]["type"] == "external"]
