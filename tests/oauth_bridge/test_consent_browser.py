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

import dataclasses
import re
import secrets
import shutil
from collections.abc import AsyncIterator, Iterator
from html import unescape
from pathlib import Path
from urllib.parse import parse_qs, quote

import aiohttp
import pytest
from cdp import Page, chromium, needs_chromium, png_size
from conftest import LiveServer
from oauth_flow import REDIRECT_URI, Flow, pkce, query_of, register, serving

from domain.oauth.server import SCOPE_WORDS

LOOK_AT = Path("/tmp/consent.png")  # a copy for a human to look at
WIDTH, HEIGHT = 900, 1100
STATE = "browser-state"

# slow: headless Chromium (the fast loop, pytest -m 'not slow', leaves it out)
pytestmark = [pytest.mark.slow, needs_chromium]


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


@pytest.fixture
async def page() -> AsyncIterator[Page]:
    """Headless Chromium (tests/cdp.py), fresh profile, scripts off."""
    async with chromium(WIDTH, HEIGHT, ["--blink-settings=scriptEnabled=false"]) as tab:
        await tab.send("Emulation.setScriptExecutionDisabled", value=True)
        # Scripts really are off: <noscript> shows, a script does nothing.
        await tab.navigate("data:text/html," + quote(
            "<noscript><p id=off></p></noscript>"
            "<script>document.write('<p id=ran></p>')</script>"))
        assert await tab.node("#off") and not await tab.node("#ran")
        yield tab


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
