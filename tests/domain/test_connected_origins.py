"""Where connected-account traffic may go (docs/api-choices.md, "Connected calendars"), for
CalDAV, Google and Microsoft alike: the account's own origin, or another https origin of its
registrable domain at public addresses; an href, a link or a redirect anywhere
else is not followed. Provider XML is parsed without entities.

"Another host" is `OtherHost`, a TCP listener on 127.0.0.2: a different origin
from the providers on 127.0.0.1. It records every connection and every byte it
is sent, and answers like a CalDAV server, so that a client that does go there
has something to print; the tests check that it saw no connection and no
credentials. The CalDAV server is Radicale behind a `Relay` that lies on cue;
Google and Microsoft are the protocol fakes of tests/fakes/, with a middleware
that does the same.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import re
import secrets
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from caldav_server import Radicale, Relay, Rewrite, Served
from conftest import Api, LiveServer, User, own_server
from connected_world import Person, agenda, provider_settings, settled, sync
from connected_world import world_api as world_api  # registers the fixture `api`
from connected_world import world_person as world_person  # registers the fixture `person`
from fake_dns import Names
from fakes import google, microsoft

from core.errors import AdminError
from domain import config, outbound
from domain.connected import admin, engine
from domain.connected.caldav import CalDavAdapter
from domain.connected.provider import (
    Component,
    Credentials,
    OriginRefused,
    ProviderSettings,
    RemoteCalendar,
)

# slow: real CalDAV and HTTP servers per test (the fast loop, pytest -m 'not slow', leaves it out)
pytestmark = pytest.mark.slow

OTHER = "127.0.0.2"
OTHER_REPLY = b"OTHER-HOST-REPLY"


class OtherHost:
    """A listener on 127.0.0.2 that records connections and what it is sent."""

    def __init__(self) -> None:
        self.connections = 0
        self.received = bytearray()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._accepted, OTHER, 0), self._loop).result(10)
        self.port = self._server.sockets[0].getsockname()[1]
        self.origin = f"http://{OTHER}:{self.port}"

    async def _accepted(self, reader: asyncio.StreamReader,
                        writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        with contextlib.suppress(TimeoutError):
            self.received += await asyncio.wait_for(reader.read(65536), 2)
        body = (b'<?xml version="1.0"?><multistatus xmlns="DAV:"><response><href>/</href>'
                b"<propstat><prop><current-user-principal><href>/" + OTHER_REPLY +
                b"/</href></current-user-principal></prop><status>HTTP/1.1 200 OK</status>"
                b"</propstat></response></multistatus>")
        writer.write(b"HTTP/1.1 207 Multi-Status\r\nContent-Type: application/xml\r\n"
                     b"Content-Length: " + str(len(body)).encode() +
                     b"\r\nConnection: close\r\n\r\n" + body)
        await writer.drain()
        writer.close()

    def reset(self) -> None:
        self.connections = 0
        self.received.clear()

    def assert_untouched(self) -> None:
        time.sleep(0.05)  # a connection in flight is counted too
        assert self.connections == 0, bytes(self.received)[:300]
        assert b"authorization" not in bytes(self.received).lower()

    def close(self) -> None:
        async def stop() -> None:
            self._server.close()
            await self._server.wait_closed()
        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)


# The Microsoft and Google fakes, with a hook to answer or rewrite as a test wants.
Hook = Callable[[web.Request, web.StreamResponse | None], web.StreamResponse | None]


@dataclasses.dataclass
class Faked:
    served: Served
    hooks: dict[str, Hook]
    """"before": may answer instead of the fake; "after": may replace its answer."""


def _with_hooks(application: web.Application) -> Faked:
    hooks: dict[str, Hook] = {}

    @web.middleware
    async def hooked(request: web.Request, handler: Any) -> web.StreamResponse:
        before = hooks.get("before")
        if before is not None and (answered := before(request, None)) is not None:
            return answered
        response: web.StreamResponse = await handler(request)
        after = hooks.get("after")
        if after is not None and (changed := after(request, response)) is not None:
            return changed
        return response

    # Inside the fake's own middleware, which checks the access token first.
    application.middlewares.append(hooked)
    return Faked(Served(application), hooks)


@dataclasses.dataclass
class World:
    server: LiveServer
    radicale: Radicale
    relay: Relay
    other: OtherHost
    google: google.GoogleState
    g_fake: Faked
    graph: microsoft.GraphState
    m_fake: Faked
    settings: config.Settings


@pytest.fixture(scope="module")
def world(database_url: str) -> Iterator[World]:
    folder = Path(tempfile.mkdtemp(prefix="kalends-origins-"))
    radicale = Radicale(folder)
    radicale.start()
    relay = Relay(radicale)
    other = OtherHost()
    g, m = google.GoogleState(), microsoft.GraphState()
    g_fake, m_fake = _with_hooks(google.app(g)), _with_hooks(microsoft.app(m))
    settings = provider_settings(g_fake.served.url, m_fake.served.url, timeout_seconds=5)
    try:
        with own_server(database_url, "kalends_origins", settings=settings) as server:
            yield World(server, radicale, relay, other, g, g_fake, m, m_fake, settings)
    finally:
        for closing in (relay, g_fake.served, m_fake.served, other):
            closing.close()
        radicale.stop()


@pytest.fixture(autouse=True)
def clean(world: World) -> Iterator[None]:
    world.relay.reset()
    world.other.reset()
    world.google.reset()
    world.graph.reset()
    world.g_fake.hooks.clear()
    world.m_fake.hooks.clear()
    yield
    world.relay.reset()
    world.g_fake.hooks.clear()
    world.m_fake.hooks.clear()


def connect_caldav(world: World, p: Person) -> dict[str, Any]:
    return world.server.call(admin.connect(
        world.server.db, world.settings, p.user.email, "ios", world.relay.url, p.login,
        p.password))


async def _connected_and_settled(world: World, p: Person) -> str:
    """`p`'s CalDAV account connected through the relay, its first sync done: its ID."""
    account: str = connect_caldav(world, p)["account_id"]
    await settled(world, account)
    return account


def _on_report(world: World, answer: Callable[[web.Request], web.Response]) -> None:
    """The relay answers each REPORT (a sync) with `answer`, and passes the rest on."""
    world.relay.answer = lambda request, body: answer(
        request) if request.method == "REPORT" else None


def refused_connect(world: World, connect: Callable[[], Any]) -> str:
    """The connect fails, names the other host, shows nothing of its reply, and
    sent it nothing."""
    with pytest.raises(AdminError) as raised:
        connect()
    message = str(raised.value)
    assert OTHER in message, message
    assert OTHER_REPLY.decode() not in message
    world.other.assert_untouched()
    return message


def redirect_to(location: str, status: int = 307) -> web.Response:
    return web.Response(status=status, headers={"Location": location})


def account_row(world: World, account_id: str) -> Any:
    return world.server.call(world.server.db.fetchrow(
        "SELECT status, last_error FROM external_accounts WHERE id = $1", account_id))


async def sync_failed(world: World, api: Api, user: User, account_id: str) -> str:
    """Sync the account now; it records `sync_failed` and says why."""
    await sync(world, account_id)
    row = account_row(world, account_id)
    assert row["status"] == "failed", row
    body = await agenda(api, user)
    assert {w["code"] for w in body["warnings"]} == {"sync_failed"}
    return str(row["last_error"])


# -- CalDAV discovery --------------------------------------------------------------------


def _absolute(pattern: str, origin: str) -> Rewrite:
    """Radicale's answers with the first `<href>` after `pattern` made absolute
    on `origin`."""
    def rewrite(request: web.Request, body: bytes) -> bytes:
        return re.sub(pattern.encode() + rb"(<href>)(/)", rb"\g<1>\g<2>" + origin.encode() +
                      rb"\g<3>", body)
    return rewrite



def _principal_href(world: World, p: Person, origin: str) -> None:
    world.relay.rewrite = _absolute(r"(<current-user-principal>)", origin)


def _home_href(world: World, p: Person, origin: str) -> None:
    world.relay.rewrite = _absolute(r"(<C?:?calendar-home-set[^>]*>)", origin)


def _calendar_href(world: World, p: Person, origin: str) -> None:
    def rewrite(request: web.Request, body: bytes) -> bytes:
        work = f"/{p.login}/work/".encode()
        return body.replace(b"<href>" + work, b"<href>" + origin.encode() + work)
    world.relay.rewrite = rewrite


def _well_known_redirect(world: World, p: Person, origin: str) -> None:
    world.relay.answer = lambda request, body: redirect_to(
        origin + "/", 301) if request.path == "/.well-known/caldav" else None


def _principal_redirect(world: World, p: Person, origin: str) -> None:
    world.relay.answer = lambda request, body: redirect_to(
        origin + request.path) if request.path == f"/{p.login}/" else None


_DISCOVERY = [_principal_href, _home_href, _calendar_href, _well_known_redirect,
              _principal_redirect]


@pytest.mark.parametrize("lie", _DISCOVERY, ids=lambda f: f.__name__.strip("_"))
async def test_caldav_discovery_goes_nowhere_else(world: World, person: Person,
                                                  lie: Callable[[World, Person, str], None]
                                                  ) -> None:
    lie(world, person, world.other.origin)
    refused_connect(world, lambda: connect_caldav(world, person))
    assert world.server.call(world.server.db.fetchval(
        "SELECT count(*) FROM external_accounts a JOIN users u ON u.id = a.user_id "
        "WHERE u.email = $1", person.user.email)) == 0


@pytest.mark.parametrize("lie", _DISCOVERY, ids=lambda f: f.__name__.strip("_"))
async def test_caldav_hrefs_and_redirects_on_the_accounts_origin_are_followed(
        world: World, person: Person, lie: Callable[[World, Person, str], None]) -> None:
    # The control for the refusals above: the same answers, on the account's own
    # origin, connect the account.
    if lie is _principal_redirect:
        # To the same place, absolute, three times; then the answer.
        hops = iter(range(3))

        def answer(request: web.Request, body: bytes) -> web.Response | None:
            if request.path == f"/{person.login}/" and next(hops, None) is not None:
                return redirect_to(world.relay.url + request.path)
            return None

        world.relay.answer = answer
    else:
        lie(world, person, world.relay.url)
    out = connect_caldav(world, person)
    assert [c["name"] for c in out["calendars"]] == ["Work"]


async def test_caldav_same_site_host_at_a_private_address_is_refused(
        world: World, person: Person) -> None:
    # Another https host of the account's registrable domain is followed only to
    # public addresses; the account's own host may be anywhere (here, loopback).
    names = Names({"caldav.example.test": "127.0.0.1", "p42-caldav.example.test": OTHER})
    account_url = f"http://caldav.example.test:{world.relay.port}"
    same_site = f"https://p42-caldav.example.test:{world.other.port}"
    async with outbound.account_session(resolver=names) as session:
        adapter = CalDavAdapter(session, Credentials("ios", person.password, account_url,
                                                     person.login), ProviderSettings())
        await adapter.verify()  # the account's own host, at a loopback address
        world.relay.rewrite = _absolute(r"(<current-user-principal>)", same_site)
        with pytest.raises(OriginRefused, match=re.escape("p42-caldav.example.test")):
            await adapter.verify()
    world.other.assert_untouched()


# -- CalDAV sync, push and delete ------------------------------------------------------------


async def test_caldav_sync_redirected_elsewhere_is_sync_failed(
        world: World, person: Person, api: Api) -> None:
    account = await _connected_and_settled(world, person)
    _on_report(world, lambda request: redirect_to(world.other.origin + request.path, 302))
    error = await sync_failed(world, api, person.user, account)
    assert OTHER in error
    world.other.assert_untouched()


def _component() -> Component:
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(days=2)
    return Component(uid=f"{secrets.token_hex(4)}@kalends", start=start,
                     end=start + timedelta(hours=1), title="Copy")


@pytest.mark.parametrize("how", ["stored href", "redirect"])
@pytest.mark.parametrize("operation", ["changes", "put", "delete"])
async def test_caldav_sync_push_and_delete_go_nowhere_else(
        world: World, person: Person, operation: str, how: str) -> None:
    own = f"{world.relay.url}/{person.login}/work/"
    if how == "stored href":
        # As a row written before this rule would hold it.
        calendar = RemoteCalendar(remote_id=f"{world.other.origin}/{person.login}/work/",
                                  name="Work", can_edit=True)
    else:
        calendar = RemoteCalendar(remote_id=own, name="Work", can_edit=True)
        world.relay.answer = lambda request, body: redirect_to(
            world.other.origin + request.path) if request.method != "PROPFIND" else None
    key = f"/{person.login}/work/gone.ics"
    async with engine.new_session() as session:
        adapter = CalDavAdapter(session, Credentials("ios", person.password, world.relay.url,
                                                     person.login), world.settings.providers)
        with pytest.raises(OriginRefused, match=re.escape(OTHER)):
            if operation == "changes":
                await adapter.changes(calendar, None)
            elif operation == "put":
                await adapter.put(calendar, None, _component(), None)
            else:
                await adapter.delete(calendar, key, None)
    world.other.assert_untouched()


async def test_caldav_writes_still_work_on_the_accounts_origin(
        world: World, person: Person) -> None:
    # The control: the same adapter writes and deletes on the account's server.
    calendar = RemoteCalendar(remote_id=f"{world.relay.url}/{person.login}/work/",
                              name="Work", can_edit=True)
    async with engine.new_session() as session:
        adapter = CalDavAdapter(session, Credentials("ios", person.password, world.relay.url,
                                                     person.login), world.settings.providers)
        written = await adapter.put(calendar, None, _component(), None)
        changes = await adapter.changes(calendar, None)
        assert [e.key for e in changes.upserts] == [written.key]
        await adapter.delete(calendar, written.key, written.etag)


# -- provider XML ----------------------------------------------------------------------------

_LAUGHS = "".join(
    f'<!ENTITY lol{i} "{("&lol" + str(i - 1) + ";") * 10}">' for i in range(1, 10))
BILLION_LAUGHS = (
    '<?xml version="1.0"?><!DOCTYPE multistatus [<!ENTITY lol0 "lol">' + _LAUGHS + "]>"
    '<multistatus xmlns="DAV:"><response><href>/</href><propstat><prop>'
    "<current-user-principal><href>/&lol9;/</href></current-user-principal></prop>"
    "<status>HTTP/1.1 200 OK</status></propstat></response></multistatus>")


def _principal_through_entity(login: str) -> str:
    # Small and harmless in itself: it is the expansion that must not happen.
    return (f'<?xml version="1.0"?><!DOCTYPE multistatus [<!ENTITY me "/{login}/">]>'
            '<multistatus xmlns="DAV:"><response><href>/</href><propstat><prop>'
            "<current-user-principal><href>&me;</href></current-user-principal></prop>"
            "<status>HTTP/1.1 200 OK</status></propstat></response></multistatus>")


def _external_entity(origin: str) -> str:
    return (f'<?xml version="1.0"?><!DOCTYPE multistatus [<!ENTITY x SYSTEM "{origin}/x">]>'
            '<multistatus xmlns="DAV:"><response><href>/</href><propstat><prop>'
            "<current-user-principal><href>&x;</href></current-user-principal></prop>"
            "<status>HTTP/1.1 200 OK</status></propstat></response></multistatus>")


def _xml_answer(text: str) -> web.Response:
    return web.Response(status=207, text=text, content_type="application/xml")


@pytest.mark.parametrize("kind", ["billion laughs", "internal entity", "external entity"])
async def test_caldav_xml_with_entities_fails_connect_cleanly(
        world: World, person: Person, kind: str) -> None:
    text = {"billion laughs": BILLION_LAUGHS,
            "internal entity": _principal_through_entity(person.login),
            "external entity": _external_entity(world.other.origin)}[kind]
    world.relay.answer = lambda request, body: _xml_answer(
        text) if request.method == "PROPFIND" else None
    started = time.monotonic()
    with pytest.raises(AdminError, match="unreadable XML"):
        connect_caldav(world, person)
    assert time.monotonic() - started < 5
    world.other.assert_untouched()


async def test_caldav_billion_laughs_in_a_sync_is_sync_failed(
        world: World, person: Person, api: Api) -> None:
    account = await _connected_and_settled(world, person)
    _on_report(world, lambda request: _xml_answer(
        BILLION_LAUGHS.replace("current-user-principal", "sync-token")))
    started = time.monotonic()
    error = await sync_failed(world, api, person.user, account)
    assert "unreadable XML" in error
    assert time.monotonic() - started < 10


# -- Google ----------------------------------------------------------------------------------


def _google_calendar(world: World) -> None:
    world.google.add_calendar(f"{secrets.token_hex(4)}@example.com", "Main", primary=True)


def connect_oauth(world: World, provider: str, secret: str,
                  settings: config.Settings | None = None) -> dict[str, Any]:
    user = world.server.create_user(timezone="Europe/Paris")
    return world.server.call(admin.connect(world.server.db, settings or world.settings,
                                           user.email, provider, None, None, secret))


async def test_google_redirect_elsewhere_is_not_followed(world: World) -> None:
    _google_calendar(world)
    world.g_fake.hooks["before"] = lambda request, _: redirect_to(
        world.other.origin + request.path_qs) if request.path != "/token" else None
    message = refused_connect(world, lambda: connect_oauth(world, "google",
                                                           world.google.grant()))
    assert "pointed elsewhere" in message


async def test_google_redirect_on_its_own_origin_is_followed(world: World) -> None:
    # The control: the API answers from a moved path with 308, method and body kept.
    _google_calendar(world)
    world.g_fake.hooks["before"] = lambda request, _: redirect_to(
        str(request.rel_url).removeprefix("/moved"), 308) if request.path.startswith(
        "/moved/") else None
    moved = dataclasses.replace(world.settings, providers=dataclasses.replace(
        world.settings.providers, google_api_url=world.g_fake.served.url + "/moved"))
    out = connect_oauth(world, "google", world.google.grant(), moved)
    assert [c["name"] for c in out["calendars"]] == ["Main"]
    world.other.assert_untouched()


# -- Microsoft -------------------------------------------------------------------------------


def _links_elsewhere(world: World, *keys: str) -> Hook:
    """Rewrites the fake's `@odata.*Link`s named by `keys` to the other host."""
    def after(request: web.Request, response: web.StreamResponse | None) -> web.Response | None:
        if not isinstance(response, web.Response) or not isinstance(response.body, bytes):
            return None
        body = response.body
        for key in keys:
            body = re.sub(rb'("' + re.escape(key.encode()) + rb'":\s*")http://127\.0\.0\.1:\d+',
                          rb"\g<1>" + world.other.origin.encode(), body)
        return web.Response(status=response.status, body=body,
                            content_type="application/json")
    return after


def _graph_calendars(world: World, count: int) -> None:
    for n in range(count):
        world.graph.add_calendar(f"cal{n}-{secrets.token_hex(3)}", f"Calendar {n}")


async def test_microsoft_next_link_elsewhere_is_not_followed(world: World) -> None:
    _graph_calendars(world, microsoft.PAGE + 1)  # two pages: the second one by link
    world.m_fake.hooks["after"] = _links_elsewhere(world, "@odata.nextLink")
    refused_connect(world, lambda: connect_oauth(world, "microsoft", world.graph.grant()))


async def test_microsoft_delta_link_elsewhere_is_sync_failed(world: World, api: Api) -> None:
    _graph_calendars(world, 1)
    user = world.server.create_user(timezone="Europe/Paris")
    out = world.server.call(admin.connect(world.server.db, world.settings, user.email,
                                          "microsoft", None, None, world.graph.grant()))
    account = out["account_id"]
    # The first sync stores the delta link it is given; the next one would use it.
    world.m_fake.hooks["after"] = _links_elsewhere(world, "@odata.deltaLink")
    await settled(world, account)
    await sync(world, account)
    world.m_fake.hooks.clear()
    error = await sync_failed(world, api, user, account)
    assert OTHER in error
    world.other.assert_untouched()


# -- the OAuth token endpoint (Google and Microsoft) -----------------------------------------


def _oauth_fake(world: World, provider: str) -> tuple[Faked, str]:
    """The provider's fake, with one calendar, and a refresh token it grants."""
    if provider == "google":
        _google_calendar(world)
        return world.g_fake, world.google.grant()
    _graph_calendars(world, 1)
    return world.m_fake, world.graph.grant()


@pytest.mark.parametrize("provider", ["google", "microsoft"])
async def test_token_endpoint_redirect_elsewhere_names_the_host(world: World,
                                                                provider: str) -> None:
    fake, grant = _oauth_fake(world, provider)
    fake.hooks["before"] = lambda request, _: redirect_to(
        world.other.origin + "/token") if request.path == "/token" else None
    message = refused_connect(world, lambda: connect_oauth(world, provider, grant))
    assert "pointed elsewhere" in message


@pytest.mark.parametrize("provider", ["google", "microsoft"])
async def test_token_endpoint_redirect_on_its_own_origin_is_followed(world: World,
                                                                     provider: str) -> None:
    # The control: a token endpoint that moved answers 308; the form is sent again there.
    fake, grant = _oauth_fake(world, provider)
    fake.hooks["before"] = lambda request, _: redirect_to(
        "/token", 308) if request.path == "/token" and "moved" in request.query else None
    token_url = f"{fake.served.url}/token?moved=1"
    moved = dataclasses.replace(world.settings, providers=dataclasses.replace(
        world.settings.providers, **{f"{provider}_token_url": token_url}))
    out = connect_oauth(world, provider, grant, moved)
    assert len(out["calendars"]) == 1
    world.other.assert_untouched()
