"""Test fixtures: a real PostgreSQL and the real service on a real port.

With no DATABASE_URL the tests start the embedded PostgreSQL, exactly as the
service does. Each session gets a database of its own, migrated from nothing.
The service runs in a thread with its own event loop, so synchronous clients
(schemathesis, subprocesses such as the MCP conformance suite) and async tests
can all call it over TCP.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import os
import secrets
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import asyncpg
import plan_oracle
import pytest
from aiohttp import web
from cdp import Page, chromium
from processes import Service, kill_postgres

import graph.schema as _graph_schema
from db import embedded
from db.database import Database
from db.migrate import migrate
from domain import accounts
from web.services import SERVICES

T = TypeVar("T")

TESTS = Path(__file__).resolve().parent
"""tests/: the helpers and this file; the tests in a folder per part (docs/layout.md, "Tests")."""

# A test module imports another's helpers by its name, whichever folder it is in
# (`from test_cli import run_admin`): every folder of tests is on the path from the start,
# where pytest's import mode would add each only once it collects a module from it.
# Module names are unique across tests/ (tests/repository/test_layout.py).
for _folder in sorted({path.parent for path in TESTS.glob("*/test_*.py")}):
    if str(_folder) not in sys.path:
        sys.path.append(str(_folder))

# Every registry call in this process is checked against graphql-core (tests/plan_oracle.py).
plan_oracle.install(_graph_schema.schema._schema)


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def pytest_configure(config: pytest.Config) -> None:
    # One Ctrl-C stops the run (tests/repository/test_suite_interrupt.py). asyncio.Runner, when
    # it finds Python's own SIGINT handler, replaces it with one that only cancels the
    # task it runs, leaving the second Ctrl-C to stop; it leaves any other handler
    # alone, and this one raises KeyboardInterrupt at once wherever the run is, so the
    # session's fixtures still stop the servers they started.
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _interrupt)


_NODE_PEERS = ("icaljs", "oidc_server", "test_apollo_cache", "test_mcp_conformance",
               "test_mcp_core", "test_mcp_sdks")
"""The modules whose npm packages (tests/npm_cache.py) a whole run needs, each by its
`install` or `ensure_installed`."""


def pytest_sessionstart(session: pytest.Session) -> None:
    """A run of the whole suite across workers installs the npm packages it will need
    in the background from its start: on a fresh machine they are several hundred MB
    downloaded, and each test that needs them would otherwise wait for its own on the
    worker it holds. A test that comes first waits on the cache's lock; what fails
    here is left for that test to install again and report."""
    config = session.config
    if hasattr(config, "workerinput") or not config.getoption("numprocesses", None) \
            or "slow" in (config.option.markexpr or "") or config.args not in (
                [], ["tests"], [str(Path(__file__).parent)]):
        return

    def install(name: str) -> None:
        try:
            module = importlib.import_module(name)
            (getattr(module, "install", None) or module.ensure_installed)()
        except BaseException:  # a skip too: the test that needs it tries again, and says
            pass

    for name in _NODE_PEERS:
        threading.Thread(target=install, args=(name,), name=f"npm {name}", daemon=True).start()


MAX_WORKERS = 4
"""At most this many xdist workers by default: one per core the run may use and one more,
up to this."""


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """The suite on every core by default (pytest-xdist): a plain `pytest`, or one given
    more than one file or a folder, runs on one worker per core and one more (at most
    MAX_WORKERS), each test file whole on one worker (`--dist loadfile`: a module's
    fixtures are made once).
    Whatever says otherwise wins: `-n N` (`-n0`: in this process), `--tx`, `--dist`,
    `-p no:xdist`; and so do `--pdb`, `-s`, `--collect-only` and a single file, which
    run here. Runs before xdist's own hook (tryfirst, registered after it)."""
    if not config.pluginmanager.hasplugin("xdist") or hasattr(config, "workerinput"):
        return
    option = config.option
    if option.numprocesses is not None or option.tx:
        return
    if option.usepdb or option.capture == "no" or option.collectonly:
        return
    files = {arg.split("::", 1)[0] for arg in config.args}
    if len(files) < 2 and not any(Path(file).is_dir() for file in files):
        return
    # One more than the cores: with one a core, the cores stood idle a third of the run
    # (waiting on servers, subprocesses and the database); on 2 cores a clean run took
    # 548 s with 3 workers against 715 s with 2 in the same hour.
    workers = min(len(os.sched_getaffinity(0)) + 1, MAX_WORKERS)
    if workers >= 2:
        option.numprocesses = workers
        if option.dist == "no" and not option.distload:
            option.dist = "loadfile"


_PROCESS_FIXTURES = frozenset({"services", "browser"})
"""Fixtures that start processes of their own (kalends serve, Chromium): a test that
uses one is marked slow, so the fast loop (`pytest -m "not slow"`) stays fast."""


_UNMARKED = pytest.StashKey[set[str]]()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    unmarked = [item.nodeid for item in items
                if _PROCESS_FIXTURES & set(getattr(item, "fixturenames", ()))
                and item.get_closest_marker("slow") is None]
    if unmarked and not hasattr(config, "workerinput"):
        raise pytest.UsageError("these tests start processes: mark them @pytest.mark.slow: "
                                + ", ".join(unmarked))
    # On an xdist worker a UsageError is lost in the controller's INTERNALERROR: each such
    # test fails instead, saying why.
    config.stash[_UNMARKED] = set(unmarked)


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.nodeid in item.config.stash.get(_UNMARKED, set()):
        pytest.fail("this test starts processes: mark it @pytest.mark.slow", pytrace=False)


@pytest.fixture(autouse=True)
def _plan_matches_graphql_core() -> Iterator[None]:
    before = len(plan_oracle.MISMATCHES)
    yield
    assert plan_oracle.MISMATCHES[before:] == []


@contextmanager
def migrated_database(server_dsn: str, prefix: str = "kalends_test") -> Iterator[str]:
    """A fresh database on the server of `server_dsn`, migrated from nothing, dropped after."""
    name = f"{prefix}_{secrets.token_hex(4)}"

    async def admin(sql: str) -> None:
        conn = await asyncpg.connect(server_dsn)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    asyncio.run(admin(f"CREATE DATABASE {name}"))
    dsn = urlunsplit(urlsplit(server_dsn)._replace(path="/" + name))
    try:
        asyncio.run(migrate(dsn))
        yield dsn
    finally:
        asyncio.run(admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))


READ_REPLICA: list[Any] = []
"""With KALENDS_TEST_READ_REPLICA=1: the streaming replica (tests/replica.py) every
live server of the session reads from, as KALENDS_READ_DATABASE_URL would make it."""


def data_root() -> Path:
    """Where tests make their servers' directories: KALENDS_TEST_DATA_DIR, else the
    system's temporary directory; never under /root, since the embedded server widens
    its data directory's parents and a replica's own user must reach its directory."""
    base = Path(os.environ.get("KALENDS_TEST_DATA_DIR", tempfile.gettempdir())).resolve()
    assert base != Path("/root") and Path("/root") not in base.parents
    base.mkdir(parents=True, exist_ok=True)
    return base


@pytest.fixture(scope="session")
def database_url() -> Iterator[str]:
    server = None
    base = os.environ.get("DATABASE_URL")
    root = data_root()
    if not base:
        base, server = embedded.start(Path(tempfile.mkdtemp(prefix="kalends-test-", dir=root)))
    try:
        with ExitStack() as stack:
            if os.environ.get("KALENDS_TEST_READ_REPLICA") == "1":
                from replica import replica_of

                workdir = Path(tempfile.mkdtemp(prefix="kalends-test-replica-", dir=root))
                READ_REPLICA.append(stack.enter_context(replica_of(base, workdir)))
                stack.callback(READ_REPLICA.clear)
            with migrated_database(base) as dsn:
                yield dsn
    finally:
        if server is not None:
            embedded.stop(server)


@dataclass
class User:
    email: str
    api_key: str
    organization_id: str
    calendar_id: str
    consumer: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"}


class LiveServer:
    """The real application on 127.0.0.1, in a thread with its own loop."""

    def __init__(self, dsn: str, **options: Any) -> None:
        from domain import config
        from kalends.service.app import create_app

        if READ_REPLICA and "settings" not in options:
            name = urlsplit(dsn).path.lstrip("/")
            options["settings"] = dataclasses.replace(
                config.load(), read_database_urls=(READ_REPLICA[0].dsn_for(name),))
        self.app = create_app(dsn, **options)
        self.loop = asyncio.new_event_loop()
        self._runner = web.AppRunner(self.app, access_log=None)
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self.call(self._start())

    async def _start(self) -> None:
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"

    def call(self, coro: Awaitable[T]) -> T:
        """Run a coroutine on the server's loop and wait for it."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=60)  # type: ignore[arg-type]

    @property
    def db(self) -> Database:
        return self.app[SERVICES].db

    @property
    def query_count(self) -> int:
        """Statements run by the service's requests: on the primary and on the read
        replicas it may be reading from (KALENDS_TEST_READ_REPLICA)."""
        services = self.app[SERVICES]
        replicas = services.reads.replicas if services.reads is not None else []
        return services.db.query_count + sum(r.db.query_count for r in replicas
                                             if r.db is not None)

    def create_user(self, email: str | None = None, *, name: str | None = None,
                    timezone: str | None = None) -> User:
        email = email or f"user-{secrets.token_hex(6)}@example.com"
        data = self.call(accounts.create_user(self.db, email, name, timezone))
        return User(data["email"], data["api_key"], data["organization_id"],
                    data["calendar_id"], data["consumer"])

    def admin(self, action: Callable[..., Awaitable[dict[str, Any]]], *args: Any) -> dict[str, Any]:
        return self.call(action(self.db, *args))

    def close(self) -> None:
        self.call(self._runner.cleanup())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)


@contextmanager
def own_server(database_url: str, prefix: str, **options: Any) -> Iterator[LiveServer]:
    """A live server of its own (`options`: its settings, ...) on a fresh database of
    the session's server, for tests that must not share the session's (quotas)."""
    with migrated_database(database_url, prefix=prefix) as dsn:
        server = LiveServer(dsn, **options)
        try:
            yield server
        finally:
            server.close()


@pytest.fixture(scope="session")
def live_server(database_url: str) -> Iterator[LiveServer]:
    server = LiveServer(database_url)
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def make_user(live_server: LiveServer) -> Callable[..., Awaitable[User]]:
    async def make(email: str | None = None, **kwargs: Any) -> User:
        return await asyncio.to_thread(live_server.create_user, email, **kwargs)

    return make


@pytest.fixture
def user(live_server: LiveServer) -> User:
    return live_server.create_user()


class Api:
    """A thin REST client: JSON in, (status, body, headers) out."""

    def __init__(self, session: aiohttp.ClientSession, base: str) -> None:
        self._session = session
        self.base = base

    async def request(
        self, method: str, path: str, user: User | None = None, *, json: Any = None,
        data: Any = None, headers: dict[str, str] | None = None, params: Any = None,
    ) -> tuple[int, Any, Any]:
        all_headers = dict(user.headers if user else {})
        all_headers.update(headers or {})
        async with self._session.request(
            method, self.base + path, json=json, data=data, headers=all_headers, params=params
        ) as resp:
            raw = await resp.read()
            body = await resp.json(content_type=None) if raw else None
            return resp.status, body, resp.headers

    async def get(self, path: str, user: User | None = None, **kw: Any) -> tuple[int, Any, Any]:
        return await self.request("GET", path, user, **kw)

    async def post(self, path: str, user: User | None = None, **kw: Any) -> tuple[int, Any, Any]:
        return await self.request("POST", path, user, **kw)

    async def patch(self, path: str, user: User | None = None, **kw: Any) -> tuple[int, Any, Any]:
        return await self.request("PATCH", path, user, **kw)

    async def delete(self, path: str, user: User | None = None, **kw: Any) -> tuple[int, Any, Any]:
        return await self.request("DELETE", path, user, **kw)


@pytest.fixture
async def api(live_server: LiveServer) -> Any:
    async with aiohttp.ClientSession() as session:
        yield Api(session, live_server.url)


def assert_error(status: int, body: Any, expected_status: int, code: str,
                 param: str | None = None) -> dict[str, Any]:
    """The error envelope (docs/http.md, "Errors"), exactly: no other keys, the status its type
    implies."""
    assert status == expected_status, body
    assert set(body) == {"error"}, body
    error = body["error"]
    assert error["code"] == code, error
    assert set(error) <= {"type", "code", "message", "param", "request_id", "details"}, error
    assert error["request_id"]
    if param is not None:
        assert error.get("param") == param, error
    return error  # type: ignore[no-any-return]


# ---------------------------------------------------------------------------
# REST helpers shared by the test modules: import them, `from conftest import ...`.


def handle(prefix: str = "p") -> str:
    """A fresh platform handle (or slug): `prefix` plus ten random hex digits."""
    return f"{prefix}-{secrets.token_hex(5)}"


async def new_profile(api: Api, user: User, **fields: Any) -> dict[str, Any]:
    """A profile made through `POST /v1/profiles`; `fields` go over the default body."""
    body = {"platform_id": handle(), "display_name": "A profile", **fields}
    status, created, _ = await api.post("/v1/profiles", user, json=body)
    assert status == 201, created
    return created  # type: ignore[no-any-return]


async def new_event(api: Api, user: User, profile: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """An event made through `POST /v1/profiles/{id}/events`; `fields` go over the default body."""
    body = {"title": "Concert", "start_time": "2031-05-06T10:00", "start_timezone": "Europe/Paris",
            **fields}
    status, created, _ = await api.post(f"/v1/profiles/{profile['id']}/events", user, json=body)
    assert status == 201, created
    return created  # type: ignore[no-any-return]


async def new_series(api: Api, user: User, profile: dict[str, Any], **fields: Any
                     ) -> dict[str, Any]:
    """A series made through `POST /v1/profiles/{id}/series`; `fields` go over the default body."""
    body = {"name": "Season", "slug": handle("season"), **fields}
    status, created, _ = await api.post(f"/v1/profiles/{profile['id']}/series", user, json=body)
    assert status == 201, created
    return created  # type: ignore[no-any-return]


async def org_with(live_server: LiveServer, make_user: Callable[..., Awaitable[User]]
                   ) -> tuple[str, User, User, User]:
    """An organization with its owner, an admin and a member: (its ID, owner, admin, member)."""
    owner, admin, member = await make_user(), await make_user(), await make_user()
    org = live_server.admin(accounts.create_organization, "Venue", owner.email, None)
    live_server.admin(accounts.add_member, org["organization_id"], admin.email, "admin")
    live_server.admin(accounts.add_member, org["organization_id"], member.email, "member")
    return org["organization_id"], owner, admin, member


async def org_profile(live_server: LiveServer, api: Api,
                      make_user: Callable[..., Awaitable[User]], **fields: Any
                      ) -> tuple[dict[str, Any], User, User, User]:
    """A profile of an organization (`org_with`): (the profile, the organization's owner,
    admin and member); `fields` go into the profile's body."""
    org, owner, admin, member = await org_with(live_server, make_user)
    return await new_profile(api, owner, organization_id=org, **fields), owner, admin, member


def published(status: int, body: Any, operation: str, keys: set[str]) -> dict[str, Any]:
    """A 200 whose body the published response schema of `operation` holds, with exactly
    `keys` at the top."""
    import jsonschema  # type: ignore[import-untyped]

    from registry import OPERATIONS

    assert status == 200, body
    jsonschema.Draft202012Validator(OPERATIONS[operation].response_schema).validate(body)
    assert set(body) == keys
    return body  # type: ignore[no-any-return]


async def assert_refused_unchanged(api: Api, user: User, path: str, before: dict[str, Any],
                                   code: str, param: str | None, *, json: Any,
                                   method: str = "PATCH", action: str = "") -> dict[str, Any]:
    """`method` of `json` to `path` + `action` is a 400 `code` (on `param`, when given), and
    `path` still reads as `before`: the error."""
    status, body, _ = await api.request(method, path + action, user, json=json)
    error = assert_error(status, body, 400, code, param=param)
    status, after, _ = await api.get(path, user)
    assert (status, after) == (200, before)
    return error


async def assert_refused_values(api: Api, path: str, user: User, param: str,
                                values: Iterable[str], code: str) -> None:
    """GET `path` with each of `values` as the query parameter `param` is a 400 `code` on it."""
    for value in values:
        status, body, _ = await api.get(path, user, params={param: value})
        assert_error(status, body, 400, code, param=param)


async def walk(api: Api, path: str, user: User | None, limit: int = 100) -> list[dict[str, Any]]:
    """Every item of a list, following `next_cursor` page by page to the end, and
    each page's envelope checked on the way."""
    items: list[dict[str, Any]] = []
    cursor = None
    while True:
        params = {"limit": str(limit), **({"cursor": cursor} if cursor else {})}
        status, page, _ = await api.get(path, user, params=params)
        assert status == 200, page
        assert set(page) == {"data", "has_more", "next_cursor"}, page
        assert len(page["data"]) <= limit, page
        assert (page["next_cursor"] is None) == (not page["has_more"]), page
        items += page["data"]
        if not page["has_more"]:
            return items
        cursor = page["next_cursor"]


async def poll_until(check: Callable[[], Awaitable[bool]], what: str, *, seconds: float,
                     interval: float = 0.05) -> None:
    """Poll `check()` every `interval` seconds until it holds; fail after `seconds`."""
    deadline = time.monotonic() + seconds
    while not await check():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {seconds} s: {what}")
        await asyncio.sleep(interval)


def insert_connected_calendar(live_server: LiveServer, user_id: str, name: str = "Work",
                              *, provider: str = "google", can_edit: bool = True) -> str:
    """A connected calendar as a provider account leaves it once connected and
    before its first sync, with no provider behind it: its account is never due
    for a sync (tests that sync use a real CalDAV server or a protocol fake)."""
    from domain import ids

    account, xcal = ids.new_id("xac"), ids.new_id("xcal")

    async def insert() -> None:
        async with live_server.db.transaction() as tx:
            await tx.execute(
                "INSERT INTO external_accounts (id, user_id, provider, secret, next_sync_at) "
                "VALUES ($1, $2, $3, '\\x00', 'infinity')", account, user_id, provider)
            await tx.execute(
                "INSERT INTO external_calendars (id, user_id, provider, name, account_id, "
                "remote_id, can_edit) VALUES ($1, $2, $3, $4, $5, $6, $7)",
                xcal, user_id, provider, name, account, name, can_edit)

    live_server.call(insert())
    return xcal


# ---------------------------------------------------------------------------
# Processes: fixtures for tests that run `kalends serve` itself (helpers in processes.py).


@pytest.fixture
def data_dir() -> Iterator[Path]:
    """A fresh KALENDS_DATA_DIR outside /root; any postgres left on it is killed at the end."""
    path = Path(tempfile.mkdtemp(prefix="kalends-svc-", dir=data_root()))
    try:
        yield path
    finally:
        kill_postgres(path / "pg")
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def services() -> Iterator[list[Service]]:
    """Collects started services; kills any still running, even when the test failed."""
    started: list[Service] = []
    try:
        yield started
    finally:
        for service in started:
            service.cleanup()


# ---------------------------------------------------------------------------
# In a browser: GraphiQL's pages (tests/graph_bridge/test_graphiql.py and
# tests/graph_bridge/test_graphiql_first_open.py).

BROWSER_WIDTH, BROWSER_HEIGHT = 1280, 900
"""The `browser` fixture's window, the size of its screenshots."""


@pytest.fixture
async def browser() -> AsyncIterator[Page]:
    """Headless Chromium (tests/cdp.py) with JavaScript on, as GraphiQL needs; a fresh
    one each test, so no test sees another's localStorage (GraphiQL keeps its tabs
    there). Tests that use it carry cdp.needs_chromium, which skips them where
    Chromium is not installed. (tests/oauth_bridge/test_consent_browser.py's `page` is one with
    scripts off.)"""
    async with chromium(BROWSER_WIDTH, BROWSER_HEIGHT) as tab:
        await tab.send("Runtime.enable")
        await tab.send("Log.enable")
        yield tab


# ---------------------------------------------------------------------------
# MCP's two routes: /mcp takes an OAuth access token, /mcp-developer the API key.


@pytest.fixture
async def bearer(live_server: LiveServer, user: User) -> User:
    """The user as /mcp sees them: an OAuth access token in place of the key."""
    from oauth_flow import tokens_for

    _, tokens = await tokens_for(live_server.url, user.api_key)
    return dataclasses.replace(user, api_key=tokens["access_token"])


def caller_on(route: str, user: User, bearer: User) -> User:
    """Who calls `route`: the user with an access token on /mcp, with the key elsewhere."""
    return bearer if route == "/mcp" else user
