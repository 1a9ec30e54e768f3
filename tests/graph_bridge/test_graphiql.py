"""GraphiQL at `GET /graphql` for browsers (docs/graphql.md, "Dashboards: `/graphql`"): the page
and its assets over HTTP (served from the package, headers that lock the page to its
own files, only known files), then the page in headless Chromium with
JavaScript on: a query typed with an API key in the headers editor shows the
server's data, and the browser never asks another origin for anything."""

from __future__ import annotations

import asyncio
import gzip
import json
import re
import secrets
import shutil
from collections.abc import AsyncIterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import pytest
from cdp import Event, Page, needs_chromium, png_size
from conftest import (
    BROWSER_HEIGHT,
    BROWSER_WIDTH,
    Api,
    LiveServer,
    User,
    assert_error,
    new_event,
    new_profile,
)
from yarl import URL

from graph_bridge.ws import FEED

# slow: headless Chromium (the fast loop, pytest -m 'not slow', leaves it out)
pytestmark = pytest.mark.slow

ASSETS = Path(__file__).resolve().parents[2] / "graph_bridge" / "graphiql"
BROWSER_ACCEPT = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
LOOK_AT = Path("/tmp/graphiql.png")  # a copy for a human to look at
A_KEY = re.compile(r"kal_[A-Za-z0-9_-]{8,}")  # what a real API key looks like
YEAR = 365 * 24 * 3600


class _References(HTMLParser):
    """What a page loads: scripts (and whether any is inline), stylesheets, style attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.scripts: list[str] = []
        self.styles: list[str] = []
        self.inline: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if "style" in a or tag == "style":
            self.inline.append(tag)
        if tag == "script":
            self._in_script = True
            if a.get("src"):
                self.scripts.append(str(a["src"]))
        if tag == "link" and a.get("rel") == "stylesheet":
            self.styles.append(str(a["href"]))

    def handle_endtag(self, tag: str) -> None:
        self._in_script = self._in_script and tag != "script"

    def handle_data(self, data: str) -> None:
        if self._in_script and data.strip():
            self.inline.append("script")


def references(page: str) -> _References:
    found = _References()
    found.feed(page)
    return found


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    """A plain client: the page and its assets are no JSON."""
    async with aiohttp.ClientSession() as session:
        yield session


async def fetch_page(http: aiohttp.ClientSession, server: LiveServer,
                     **headers: str) -> tuple[int, str, Any]:
    async with http.get(server.url + "/graphql",
                        headers={"Accept": BROWSER_ACCEPT, **headers}) as response:
        return response.status, await response.text(), response.headers


# ---------------------------------------------------------------------------
# Over HTTP


async def test_the_page_for_a_browser_needs_no_key(http: aiohttp.ClientSession,
                                                   live_server: LiveServer, user: User) -> None:
    status, page, headers = await fetch_page(http, live_server)
    assert status == 200, page
    assert headers["Content-Type"] == "text/html; charset=utf-8"
    policy = {d.split()[0]: d.split()[1:] for d in headers["Content-Security-Policy"].split("; ")}
    assert policy["default-src"] == ["'none'"], policy
    assert policy["script-src"] == ["'self'"], policy
    # Styles: the service's files, and one inline <style> of GraphiQL's by its hash.
    assert policy["style-src"][0] == "'self'", policy
    assert all(re.fullmatch(r"'sha256-[A-Za-z0-9+/]{43}='", h) for h in policy["style-src"][1:])
    assert policy["connect-src"] == ["'self'"] and policy["frame-ancestors"] == ["'none'"]
    assert "unsafe" not in headers["Content-Security-Policy"]
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert headers["Referrer-Policy"] == "no-referrer"
    assert headers["Cache-Control"] == "no-cache"
    assert "Accept" in headers["Vary"]
    assert "<title>Kalends GraphiQL</title>" in page
    # No credential in it, whoever asks.
    assert not A_KEY.search(page), page
    _, with_key, _ = await fetch_page(http, live_server, **user.headers)
    assert with_key == page and user.api_key not in with_key
    # Nothing inline for the policy to refuse, nothing from another origin.
    found = references(page)
    assert found.inline == [], found.inline
    assert found.scripts and found.styles, page
    for url in (*found.scripts, *found.styles):
        assert url.startswith("/graphql/graphiql/"), url
    assert "//" not in page, page  # no absolute or scheme-relative URL at all


async def test_every_asset_the_page_references_is_served(http: aiohttp.ClientSession,
                                                        live_server: LiveServer) -> None:
    _, page, _ = await fetch_page(http, live_server)
    found = references(page)
    kinds = [(url, "text/javascript") for url in found.scripts] + \
            [(url, "text/css") for url in found.styles]
    assert [urlsplit(u).path.rsplit("/", 1)[1] for u, _ in kinds] == [
        "react.production.min.js", "react-dom.production.min.js", "graphiql.min.js", "init.js",
        "graphiql.min.css", "page.css"]
    for url, kind in kinds:
        name = urlsplit(url).path.rsplit("/", 1)[1]
        expected = (ASSETS / name).read_bytes()
        # The URL carries the file's version: cached for good under it.
        assert re.fullmatch(r"v=[0-9a-f]{16}", urlsplit(url).query), url
        async with http.get(live_server.url + url, auto_decompress=False,
                            headers={"Accept-Encoding": "gzip, br"}) as response:
            assert response.status == 200, url
            assert response.headers["Content-Type"] == f"{kind}; charset=utf-8", url
            assert response.headers["X-Content-Type-Options"] == "nosniff"
            assert response.headers["Cache-Control"] == f"public, max-age={YEAR}, immutable"
            assert response.headers["Content-Encoding"] == "gzip"
            assert response.headers["Vary"] == "Accept-Encoding"
            assert gzip.decompress(await response.read()) == expected, url
        async with http.get(live_server.url + url,
                            headers={"Accept-Encoding": "identity"}) as response:
            assert "Content-Encoding" not in response.headers
            assert await response.read() == expected, url
    # GraphiQL's own bundle, the one a CDN would have served, is the pinned one.
    assert b"graphiql@3.8.3" in (ASSETS / "VERSIONS").read_bytes()
    assert not A_KEY.search((ASSETS / "init.js").read_text())


@pytest.mark.parametrize(("accept", "gzipped"), [
    ("gzip;q=0, deflate", False), ("*", True), ("*, gzip;q=0", False), ("br;q=1, gzip;q=0.1", True),
    ("", False), ("GZIP", True),
])
async def test_gzip_only_for_a_client_that_takes_it(http: aiohttp.ClientSession,
                                                    live_server: LiveServer, accept: str,
                                                    gzipped: bool) -> None:
    async with http.get(live_server.url + "/graphql/graphiql/page.css", auto_decompress=False,
                        headers={"Accept-Encoding": accept}) as response:
        body = await response.read()
        assert response.headers.get("Content-Encoding") == ("gzip" if gzipped else None)
    assert (gzip.decompress(body) if gzipped else body) == (ASSETS / "page.css").read_bytes()


async def test_an_asset_under_another_version_is_not_cached_for_good(
        http: aiohttp.ClientSession, live_server: LiveServer) -> None:
    for url in ("/graphql/graphiql/init.js", "/graphql/graphiql/init.js?v=0123456789abcdef"):
        async with http.get(live_server.url + url) as response:
            assert response.status == 200
            assert response.headers["Cache-Control"] == "no-cache"


async def test_licences_and_versions_are_served_as_text(http: aiohttp.ClientSession,
                                                        live_server: LiveServer) -> None:
    for name in ("LICENSE.graphiql", "LICENSE.react", "LICENSE.react-dom", "VERSIONS"):
        async with http.get(f"{live_server.url}/graphql/graphiql/{name}") as response:
            assert response.status == 200, name
            assert response.headers["Content-Type"] == "text/plain; charset=utf-8"
            text = await response.text()
        assert text == (ASSETS / name).read_text()
        if name.startswith("LICENSE"):
            assert text.startswith("MIT License"), name


@pytest.mark.parametrize("path", [
    "/graphql/graphiql/nope.js",
    "/graphql/graphiql/graphiql.min.js.map",  # named by the bundle, not shipped
    "/graphql/graphiql/",
    "/graphql/graphiql/init.js/",
    "/graphql/graphiql/..%2Fide.py",
    "/graphql/graphiql/%2e%2e%2fide.py",
    "/graphql/graphiql/%2E%2E/ide.py",
    "/graphql/graphiql/../ide.py",
    "/graphql/graphiql/../../pyproject.toml",
    "/graphql/graphiql/..%5Cide.py",
    "/graphql/graphiql/.%2Finit.js",
    "/graphql/graphiql/init.js%00",
    "/graphql/graphiql/INIT.JS",
])
async def test_only_the_known_files(http: aiohttp.ClientSession, live_server: LiveServer,
                                    path: str) -> None:
    # Sent exactly as written: no client-side normalisation of `..` or escapes.
    async with http.get(URL(live_server.url + path, encoded=True)) as response:
        status, body = response.status, await response.json(content_type=None)
    assert_error(status, body, 404, "route_not_found")


async def test_the_page_s_script_subscribes_over_its_own_websocket(
        http: aiohttp.ClientSession, live_server: LiveServer) -> None:
    """Where no browser runs it (the test below does): GraphiQL's fetcher is given
    the page's own /graphql over ws: or wss:, and the bundle's graphql-ws client
    puts the headers editor's headers in connection_init's payload."""
    _, page, _ = await fetch_page(http, live_server)
    init = next(url for url in references(page).scripts if "/init.js?" in url)
    async with http.get(live_server.url + init) as response:
        script = await response.text()
    assert "subscriptionUrl: socketUrl()" in script, script
    assert 'window.location.protocol === "https:" ? "wss:" : "ws:"' in script, script
    assert 'scheme + "//" + window.location.host + window.location.pathname' in script
    bundle = (ASSETS / "graphiql.min.js").read_text()
    assert "createWebsocketsFetcherFromUrl(options.subscriptionUrl" in bundle
    assert "fetcherOpts == null ? void 0 : fetcherOpts.headers" in bundle
    assert "const GRAPHQL_TRANSPORT_WS_PROTOCOL = exports.GRAPHQL_TRANSPORT_WS_PROTOCOL = " \
        "'graphql-transport-ws'" in bundle


@pytest.mark.parametrize("accept", [None, "application/json", "*/*", "text/plain",
                                    "application/graphql-response+json", BROWSER_ACCEPT])
async def test_a_get_naming_a_query_runs_it_whoever_asks(api: Api, user: User,
                                                        accept: str | None) -> None:
    """Not the page: a browser too gets JSON for a URL that names a document."""
    headers = {"Accept": accept} if accept else {}
    status, body, response = await api.get("/graphql?query=%7B__typename%7D", user,
                                            headers=headers)
    assert (status, body) == (200, {"data": {"__typename": "Query"}})
    assert response["Content-Type"] == "application/json"
    assert response["Vary"] == "Authorization"


async def test_a_method_graphql_lacks_is_405(api: Api, user: User) -> None:
    status, body, response = await api.delete("/graphql", user)
    assert_error(status, body, 405, "method_not_allowed")
    assert set(response["Allow"].split(",")) == {"GET", "POST"}


# ---------------------------------------------------------------------------
# In a browser


async def until(page: Page, expression: str, timeout: float = 20) -> Any:
    """The value of `expression` once it is truthy."""
    async def poll() -> Any:
        while not (value := await page.evaluate(expression)):
            await asyncio.sleep(0.1)
        return value
    return await asyncio.wait_for(poll(), timeout)


async def replace_text(page: Page, editor: str, text: str) -> None:
    """As a user does: click into the CodeMirror editor, select all, paste over it."""
    await page.click(editor)
    await page.press("a", "KeyA", 65, modifiers=2)  # Ctrl-A
    await page.send("Input.insertText", text=text)


def problems(page: Page) -> list[Event]:
    """Exceptions, console errors and anything the page's policy refused."""
    return [e["params"] for e in page.events
            if e.get("method") == "Runtime.exceptionThrown"
            or (e.get("method") == "Runtime.consoleAPICalled" and e["params"]["type"] == "error")
            or (e.get("method") == "Log.entryAdded"
                and "Content Security Policy" in e["params"]["entry"]["text"])]


def requests_sent(page: Page) -> list[Event]:
    return [e["params"] for e in page.events if e.get("method") == "Network.requestWillBeSent"]


QUERY_EDITOR = ".graphiql-query-editor .CodeMirror"
HEADERS_EDITOR = 'section.graphiql-editor-tool .graphiql-editor:not(.hidden) .CodeMirror'
RESULT = "section.result-window"


@needs_chromium
async def test_a_query_with_a_key_typed_in_the_headers_editor(
        browser: Page, live_server: LiveServer, api: Api, user: User, tmp_path: Path) -> None:
    name = f"Seen through GraphiQL {secrets.token_hex(4)}"
    profile = await new_profile(api, user, display_name=name)
    page = browser
    await page.navigate(live_server.url + "/graphql", timeout=30)
    await until(page, f"document.querySelector({QUERY_EDITOR!r}) !== null")
    # The headers editor shows, with a hint and no credential.
    hint = await until(page, f"document.querySelector({HEADERS_EDITOR!r})?.innerText")
    assert "Bearer kal_..." in hint and not A_KEY.search(hint), hint

    await replace_text(page, QUERY_EDITOR, "{\n"
                       f'  profile(profile_id: "{profile["id"]}") {{\n'
                       "    id\n    display_name\n  }\n}\n")
    await replace_text(page, HEADERS_EDITOR,
                       f'{{\n  "Authorization": "Bearer {user.api_key}"\n}}')
    await page.click(".graphiql-execute-button")
    shown = await until(page, f"""(() => {{
        const text = document.querySelector({RESULT!r}).innerText;
        return text.includes({name!r}) && text;
    }})()""")
    assert profile["id"] in shown, shown

    # The key went in the request's header, from the headers editor.
    ran = [r for r in requests_sent(page) if r["request"]["method"] == "POST"
           and "display_name" in r["request"].get("postData", "")]
    assert len(ran) == 1, ran
    assert ran[0]["request"]["url"] == live_server.url + "/graphql"
    assert ran[0]["request"]["headers"]["Authorization"] == f"Bearer {user.api_key}"
    # ... and, once typed, the schema was fetched again with it (docs, completion).
    introspection = await page.wait_for(
        "Network.requestWillBeSent", lambda p: "IntrospectionQuery" in p["request"].get(
            "postData", "") and p["request"]["headers"].get(
            "Authorization") == f"Bearer {user.api_key}")
    schema = await page.wait_for("Network.responseReceived",
                                 lambda p: p["requestId"] == introspection["requestId"])
    assert schema["response"]["status"] == 200, schema
    # GraphiQL keeps its tabs and history in localStorage, but never the headers.
    stored = await page.evaluate("JSON.stringify(Object.assign({}, localStorage))")
    assert "graphiql:queries" in stored and profile["id"] in stored, stored  # the history
    assert user.api_key not in stored and not A_KEY.search(stored), stored

    data = await page.screenshot()
    shot = tmp_path / "graphiql.png"  # tests/artifacts/ is not git-ignored
    shot.write_bytes(data)
    shutil.copyfile(shot, LOOK_AT)
    assert png_size(data) == (BROWSER_WIDTH, BROWSER_HEIGHT)

    # Everything came from the service itself (GraphiQL's fonts are data: URLs).
    origin = live_server.url
    for sent in requests_sent(page):
        url = sent["request"]["url"]
        assert url.startswith("data:") or url == origin + "/graphql" or \
            url.startswith(origin + "/graphql/graphiql/"), url
    # The policy refused nothing GraphiQL needs, and nothing went wrong in the page.
    assert problems(page) == []


@needs_chromium
async def test_graphiql_s_dialogs_stay_within_the_policy(browser: Page,
                                                         live_server: LiveServer) -> None:
    await browser.navigate(live_server.url + "/graphql", timeout=30)
    await until(browser, f"document.querySelector({QUERY_EDITOR!r}) !== null")
    for opener in ("Open settings dialog", "Open short keys dialog"):
        await browser.click(f'button[aria-label="{opener}"]')
        text = await until(browser, "document.querySelector('[role=dialog]')?.innerText")
        # The style that locks scrolling while a dialog is open does apply.
        assert await browser.evaluate("getComputedStyle(document.body).position") == "relative"
        # No way to have the browser keep the headers, the API key with them.
        assert "Persist headers" not in text, text
        await browser.press("Escape", "Escape", 27)
        await until(browser, "document.querySelector('[role=dialog]') === null")
    assert problems(browser) == []


@needs_chromium
async def test_no_error_before_a_key_and_the_service_s_own_answer_after(
        browser: Page, live_server: LiveServer) -> None:
    """As first opened, with the hint's placeholder, the schema is not asked for
    (the service could only refuse it); a query run with it shows the refusal."""
    await browser.navigate(live_server.url + "/graphql", timeout=30)
    await until(browser, f"document.querySelector({QUERY_EDITOR!r}) !== null")
    await asyncio.sleep(1)  # what a fetch of the schema would have taken, and more
    shown = await browser.evaluate(f"document.querySelector({RESULT!r}).innerText")
    assert shown.replace("\u200b", "").strip() == "", shown  # CodeMirror's empty line
    assert [r for r in requests_sent(browser) if r["request"]["method"] == "POST"] == []
    await browser.click(".graphiql-execute-button")
    shown = await until(browser, f"""(() => {{
        const text = document.querySelector({RESULT!r})?.innerText || "";
        return text.includes("not_authenticated") && text;
    }})()""")
    assert "The API key is unknown or revoked." in shown, shown
    assert problems(browser) == []


def socket_frames(page: Page, kind: str) -> list[dict[str, Any]]:
    """The JSON messages the page sent (kind `Sent`) or received over WebSockets."""
    return [json.loads(e["params"]["response"]["payloadData"]) for e in page.events
            if e.get("method") == f"Network.webSocketFrame{kind}"]


@needs_chromium
async def test_a_subscription_runs_over_the_page_s_own_websocket(
        browser: Page, live_server: LiveServer, api: Api, user: User) -> None:
    event = await new_event(api, user, await new_profile(api, user))
    page = browser
    await page.navigate(live_server.url + "/graphql", timeout=30)
    await until(page, f"document.querySelector({QUERY_EDITOR!r}) !== null")
    await replace_text(page, HEADERS_EDITOR,
                       f'{{\n  "Authorization": "Bearer {user.api_key}"\n}}')
    # Once the schema, fetched with the key, is in (so no new render comes mid-run).
    introspection = await page.wait_for(
        "Network.requestWillBeSent", lambda p: "IntrospectionQuery" in p["request"].get(
            "postData", ""))
    await page.wait_for("Network.loadingFinished",
                        lambda p: p["requestId"] == introspection["requestId"])
    await replace_text(page, QUERY_EDITOR, "subscription {\n"
                       f'  rsvp_stats(event_id: "{event["id"]}") {{\n'
                       "    event_id\n    going\n  }\n}\n")
    # GraphiQL reads what the document does (a subscription: over the socket) 100 ms
    # after the last edit, when it also stores the text: run it once stored.
    await until(page, "(localStorage.getItem('graphiql:query') || '').includes('rsvp_stats')")
    await page.click(".graphiql-execute-button")

    def showing(going: int) -> str:
        return f"""(() => {{
            const text = document.querySelector({RESULT!r}).innerText;
            return text.includes({event["id"]!r}) && /"going": {going}\\b/.test(text) && text;
        }})()"""

    await until(page, showing(0))  # the stats as they are ...
    status, rsvp, _ = await api.post(f"/v1/events/{event['id']}/rsvps", user,
                                     json={"status": "going"})
    assert status == 201, rsvp
    await until(page, showing(1))  # ... then as they change

    # To the page's own /graphql, the headers editor's key in connection_init.
    opened = await page.wait_for("Network.webSocketCreated")
    assert opened["url"] == live_server.url.replace("http://", "ws://") + "/graphql"
    sent = socket_frames(page, "Sent")
    assert sent[0] == {"type": "connection_init",
                       "payload": {"Authorization": f"Bearer {user.api_key}"}}, sent
    assert sent[1]["type"] == "subscribe" and "rsvp_stats" in sent[1]["payload"]["query"]
    assert [m["type"] for m in socket_frames(page, "Received")][:3] == [
        "connection_ack", "next", "next"]

    # Stopped, the socket closes and the service lets go of the subscription.
    await page.click(".graphiql-execute-button")
    await page.wait_for("Network.webSocketClosed",
                        lambda p: p["requestId"] == opened["requestId"])
    feed = live_server.app[FEED]
    for _ in range(100):
        if not feed.watches:
            break
        await asyncio.sleep(0.1)
    assert feed.watches == 0
    # The policy let the socket through ('self' covers ws: to the page's host).
    assert problems(page) == []


async def test_the_page_without_javascript_says_it_needs_it(http: aiohttp.ClientSession,
                                                            live_server: LiveServer) -> None:
    _, page, _ = await fetch_page(http, live_server)
    assert "<noscript>GraphiQL needs JavaScript." in page

