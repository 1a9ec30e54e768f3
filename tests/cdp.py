"""Headless Chromium driven over the Chrome DevTools Protocol, for the browser
tests (tests/oauth_bridge/test_consent_browser.py, tests/graph_bridge/test_graphiql.py):
a small client over aiohttp's websocket, nothing else to install but the Debian package
(apt-get install -y --no-install-recommends chromium)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import os
import shutil
import signal
import struct
import tempfile
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import pytest

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--no-proxy-server", "--remote-debugging-port=0"]

needs_chromium = pytest.mark.skipif(
    not os.access(CHROMIUM, os.X_OK),
    reason=f"{CHROMIUM} is not installed (Debian package chromium)")

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

    async def navigate(self, url: str, timeout: float = 10) -> None:
        self.events.clear()
        await self.send("Page.navigate", url=url)
        await self.wait_for("Page.loadEventFired", timeout=timeout)

    async def node(self, selector: str) -> int:
        """The node's id, 0 when nothing matches."""
        root = (await self.send("DOM.getDocument"))["root"]["nodeId"]
        return int((await self.send("DOM.querySelector", nodeId=root,
                                    selector=selector))["nodeId"])

    async def html(self) -> str:
        root = (await self.send("DOM.getDocument"))["root"]["nodeId"]
        return str((await self.send("DOM.getOuterHTML", nodeId=root))["outerHTML"])

    async def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (scripts on)."""
        result = await self.send("Runtime.evaluate", expression=expression,
                                 returnByValue=True, awaitPromise=True)
        assert "exceptionDetails" not in result, result
        return result["result"].get("value")

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

    async def press(self, key: str, code: str, key_code: int, *, modifiers: int = 0,
                    text: str | None = None) -> None:
        """One key pressed and released (`modifiers`: 2 is Ctrl, 8 is Shift)."""
        typed = {"text": text} if text is not None else {}
        for kind in ("keyDown" if text is not None else "rawKeyDown", "keyUp"):
            await self.send("Input.dispatchKeyEvent", type=kind, key=key, code=code,
                            windowsVirtualKeyCode=key_code, modifiers=modifiers,
                            **(typed if kind != "keyUp" else {}))


@contextlib.asynccontextmanager
async def chromium(width: int, height: int, flags: Sequence[str] = ()) -> AsyncIterator[Page]:
    """Headless Chromium with a fresh profile showing one tab (Page and Network
    events on), in its own process group, killed (group and all) on the way out
    whatever happened."""
    profile = Path(tempfile.mkdtemp(prefix="kalends-chromium-"))
    process = await asyncio.create_subprocess_exec(
        str(CHROMIUM), *FLAGS, *flags, f"--window-size={width},{height}",
        f"--user-data-dir={profile}", "about:blank",
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
                await tab.send("Emulation.setDeviceMetricsOverride", width=width,
                               height=height, deviceScaleFactor=1, mobile=False)
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
