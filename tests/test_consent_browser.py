"""The consent page in a real browser with JavaScript off: headless Chromium
renders it (a screenshot for a human to look at), its DOM says who asks for
what and where the answer goes, and the form, filled and submitted with
DevTools input events, sends the browser back to the client with a code.

Needs the Debian package: apt-get install -y --no-install-recommends chromium

Everything goes through the DevTools protocol: Chromium 150's headless mode
writes nothing for --screenshot or --dump-dom once scripts are disabled
(--blink-settings=scriptEnabled=false), so those one-shot switches cannot show
the page as a script-less browser sees it."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import itertools
import os
import re
import secrets
import shutil
import signal
import struct
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from html import unescape
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote

import aiohttp
import pytest
from conftest import LiveServer
from oauth_flow import REDIRECT_URI, Flow, pkce, query_of, register, serving

from kalends.oauth.server import SCOPE_WORDS

CHROMIUM = Path("/usr/bin/chromium")
LOOK_AT = Path("/tmp/consent.png")  # a copy for a human to look at
WIDTH, HEIGHT = 900, 1100
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--no-proxy-server", "--blink-settings=scriptEnabled=false",
         f"--window-size={WIDTH},{HEIGHT}", "--remote-debugging-port=0"]
STATE = "browser-state"

pytestmark = pytest.mark.skipif(not os.access(CHROMIUM, os.X_OK),
                                reason=f"{CHROMIUM} is not installed (Debian package chromium)")


@pytest.fixture(scope="module")
def server(database_url: str) -> Iterator[LiveServer]:
    with serving(database_url, "kalends_consent") as live:
        yield live


@dataclasses.dataclass
class Asking:
    """A registered client's authorization request."""

    flow: Flow
    verifier: str
    url: str
    client_name: str


@pytest.fixture
async def asking(server: LiveServer) -> Asking:
    name = f"Browser agent {secrets.token_hex(3)}"
    async with aiohttp.ClientSession() as session:
        status, client = await register(session, server.url, client_name=name)
    assert status == 201, client
    flow = Flow(server.url, client["client_id"])
    verifier, challenge = pkce()
    return Asking(flow, verifier, flow.authorization_url(challenge, state=STATE), name)


Event = dict[str, Any]


class Page:
    """One page target over the Chrome DevTools Protocol websocket."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.ids = itertools.count(1)
        self.events: list[Event] = []

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        mid = next(self.ids)
        await self.ws.send_json({"id": mid, "method": method, "params": params})
        while True:
            message: Event = await asyncio.wait_for(self.ws.receive_json(), 10)
            if message.get("id") == mid:
                assert "error" not in message, (method, message)
                result: dict[str, Any] = message.get("result", {})
                return result
            self.events.append(message)

    async def wait_for(self, method: str, where: Callable[[Event], bool] = lambda _: True,
                       timeout: float = 10) -> Event:
        """The params of the first event `method` since the last navigation
        (already received or still to come) for which `where` holds."""
        async def seek() -> Event:
            seen = 0
            while True:
                for event in self.events[seen:]:
                    params: Event = event.get("params", {})
                    if event.get("method") == method and where(params):
                        return params
                seen = len(self.events)
                self.events.append(await self.ws.receive_json())
        return await asyncio.wait_for(seek(), timeout)

    async def navigate(self, url: str) -> None:
        self.events.clear()
        await self.send("Page.navigate", url=url)
        await self.wait_for("Page.loadEventFired")

    async def node(self, selector: str) -> int:
        """The node's id, 0 when nothing matches."""
        root = (await self.send("DOM.getDocument"))["root"]["nodeId"]
        return int((await self.send("DOM.querySelector", nodeId=root,
                                    selector=selector))["nodeId"])

    async def html(self) -> str:
        root = (await self.send("DOM.getDocument"))["root"]["nodeId"]
        return str((await self.send("DOM.getOuterHTML", nodeId=root))["outerHTML"])

    async def screenshot(self) -> bytes:
        shot = await self.send("Page.captureScreenshot", format="png")
        return base64.b64decode(shot["data"])

    async def click(self, selector: str) -> None:
        """A real left click in the middle of the element, as a user's."""
        node = await self.node(selector)
        assert node, selector
        await self.send("DOM.scrollIntoViewIfNeeded", nodeId=node)
        quad = (await self.send("DOM.getBoxModel", nodeId=node))["model"]["content"]
        x, y = sum(quad[0::2]) / 4, sum(quad[1::2]) / 4
        for kind in ("mousePressed", "mouseReleased"):
            await self.send("Input.dispatchMouseEvent", type=kind, x=x, y=y,
                            button="left", clickCount=1)


@pytest.fixture
async def page() -> AsyncIterator[Page]:
    """Headless Chromium, fresh profile, scripts off; in its own process
    group, killed (group and all) on the way out whatever happened."""
    profile = Path(tempfile.mkdtemp(prefix="kalends-chromium-"))
    process = await asyncio.create_subprocess_exec(
        str(CHROMIUM), *FLAGS, f"--user-data-dir={profile}", "about:blank",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        start_new_session=True)
    try:
        active = profile / "DevToolsActivePort"  # "port\n/devtools/browser/…"
        for _ in range(150):
            if active.exists() and "\n" in active.read_text():
                break
            assert process.returncode is None, f"chromium exited: {process.returncode}"
            await asyncio.sleep(0.1)
        else:
            pytest.fail("chromium opened no DevTools port in 15 s")
        port = int(active.read_text().split("\n")[0])
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{port}/json/list") as response:
                targets = [t for t in await response.json() if t["type"] == "page"]
            async with session.ws_connect(targets[0]["webSocketDebuggerUrl"],
                                          max_msg_size=0) as ws:
                tab = Page(ws)
                await tab.send("Page.enable")
                await tab.send("Network.enable")
                await tab.send("Emulation.setScriptExecutionDisabled", value=True)
                await tab.send("Emulation.setDeviceMetricsOverride", width=WIDTH,
                               height=HEIGHT, deviceScaleFactor=1, mobile=False)
                # Scripts really are off: <noscript> shows, a script does nothing.
                await tab.navigate("data:text/html," + quote(
                    "<noscript><p id=off></p></noscript>"
                    "<script>document.write('<p id=ran></p>')</script>"))
                assert await tab.node("#off") and not await tab.node("#ran")
                yield tab
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        await process.wait()
        shutil.rmtree(profile, ignore_errors=True)


def png_size(data: bytes) -> tuple[int, int]:
    """Width and height from the IHDR chunk, which must come first."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", data[:8]
    assert data[12:16] == b"IHDR", data[12:16]
    width, height = struct.unpack(">II", data[16:24])
    return width, height


async def test_the_page_renders_without_javascript(page: Page, asking: Asking,
                                                   tmp_path: Path) -> None:
    await page.navigate(asking.url)
    data = await page.screenshot()
    # tests/artifacts/ is not git-ignored: the screenshot goes to tmp_path.
    shot = tmp_path / "consent.png"
    shot.write_bytes(data)
    shutil.copyfile(shot, LOOK_AT)
    assert png_size(data) == (WIDTH, HEIGHT)
    assert len(data) > 20_000, len(data)  # a blank page compresses to ~5 kB


async def test_the_page_says_who_asks_for_what(page: Page, asking: Asking) -> None:
    await page.navigate(asking.url)
    dom = await page.html()
    text = unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", dom)))
    assert f"{asking.client_name} wants to use your Kalends account" in text, text
    assert asking.flow.client_id in text
    for scope in ("kalends:read", "kalends:write"):
        assert f"{scope} : {SCOPE_WORDS[scope]}" in text, (scope, text)
    assert f"you go back to {REDIRECT_URI}" in text, text
    assert "application running on this computer" in text
    # A plain form that posts by itself: no script needed, and none on the page.
    assert '<form method="post" action="/oauth/authorize">' in dom, dom
    assert "<script" not in dom
    key = re.search(r'<input [^>]*\bid="api_key"[^>]*>', dom)
    assert key and 'type="password"' in key[0] and 'name="api_key"' in key[0], dom
    assert '<label for="api_key">Your Kalends API key</label>' in dom
    for value, label in (("deny", "Deny"), ("allow", "Allow")):
        assert re.search(rf'<button type="submit" name="decision" value="{value}"[^>]*>'
                         rf"{label}</button>", dom), dom


async def answer(page: Page, url: str, api_key: str | None, button: str) -> tuple[str, str]:
    """Open the page, type the key, press a button: the form the browser
    posted and the URL it then went to (nothing listens there)."""
    await page.navigate(url)
    if api_key is not None:
        await page.click("#api_key")
        await page.send("Input.insertText", text=api_key)
    if button == "enter":  # the key pasted, then Enter: the form's default button
        for kind in ("keyDown", "keyUp"):
            await page.send("Input.dispatchKeyEvent", type=kind, key="Enter", code="Enter",
                            windowsVirtualKeyCode=13, text="\r")
    else:
        await page.click(f'button[value="{button}"]')
    posted = await page.wait_for(
        "Network.requestWillBeSent",
        lambda p: p["request"]["method"] == "POST"
        and p["request"]["url"].endswith("/oauth/authorize"))
    back = await page.wait_for(
        "Network.requestWillBeSent",
        lambda p: p["request"]["url"].startswith(REDIRECT_URI + "?"))
    # The browser itself followed the POST's 303.
    assert back["redirectResponse"]["status"] == 303, back["redirectResponse"]
    assert back["redirectResponse"]["url"] == posted["request"]["url"]
    return posted["request"].get("postData", ""), back["request"]["url"]


async def test_allow_in_the_browser_sends_a_code_back(server: LiveServer, page: Page,
                                                      asking: Asking) -> None:
    person = server.create_user()
    posted, url = await answer(page, asking.url, person.api_key, "allow")
    form = {k: v[0] for k, v in parse_qs(posted).items()}
    assert form["decision"] == "allow" and form["api_key"] == person.api_key, form
    back = query_of(url)
    assert back["state"] == STATE and back["iss"] == server.url + "/", back
    async with aiohttp.ClientSession() as session:
        status, tokens = await asking.flow.token(
            session, grant_type="authorization_code", code=back["code"],
            redirect_uri=REDIRECT_URI, code_verifier=asking.verifier,
            resource=server.url + "/mcp")
    assert status == 200 and tokens["access_token"], tokens


async def test_enter_in_the_key_field_allows(server: LiveServer, page: Page,
                                             asking: Asking) -> None:
    person = server.create_user()
    posted, url = await answer(page, asking.url, person.api_key, "enter")
    assert parse_qs(posted)["decision"] == ["allow"], posted
    assert "code" in query_of(url)


async def test_deny_in_the_browser_needs_no_key(server: LiveServer, page: Page,
                                                asking: Asking) -> None:
    _, url = await answer(page, asking.url, None, "deny")
    back = query_of(url)
    assert back["error"] == "access_denied" and back["state"] == STATE, back
    assert "code" not in back and back["iss"] == server.url + "/", back
