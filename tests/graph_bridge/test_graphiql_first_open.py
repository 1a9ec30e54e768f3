"""GraphiQL as first opened, and opened again, before a key is typed: no
authentication error in the result pane (the schema is not asked for with the
placeholder key), the one-line hint where to put the key instead."""

from __future__ import annotations

import asyncio

import pytest
from cdp import Page, needs_chromium
from conftest import LiveServer
from test_graphiql import (
    HEADERS_EDITOR,
    QUERY_EDITOR,
    RESULT,
    problems,
    requests_sent,
    until,
)

# slow: headless Chromium (the fast loop, pytest -m 'not slow', leaves it out)
pytestmark = pytest.mark.slow

ERRORS = ("not_authenticated", "unknown or revoked", "error")


async def _opened(page: Page, url: str) -> str:
    await page.navigate(url, timeout=30)
    await until(page, f"document.querySelector({QUERY_EDITOR!r}) !== null")
    await asyncio.sleep(1)  # what a fetch of the schema would have taken, and more
    return str(await page.evaluate(f"document.querySelector({RESULT!r}).innerText"))


@needs_chromium
async def test_first_open_shows_no_error_and_the_hint(browser: Page,
                                                      live_server: LiveServer) -> None:
    shown = await _opened(browser, live_server.url + "/graphql")
    assert not any(word in shown for word in ERRORS), shown
    assert [r for r in requests_sent(browser) if r["request"]["method"] == "POST"] == []
    # The hint: the placeholder in the headers editor, and the query's first line.
    headers = await until(browser, f"document.querySelector({HEADERS_EDITOR!r})?.innerText")
    assert "Bearer kal_..." in headers, headers
    query = await browser.evaluate(f"document.querySelector({QUERY_EDITOR!r}).innerText")
    assert "put your API key in Headers below" in query, query
    assert problems(browser) == []


@needs_chromium
async def test_opened_again_after_a_refused_run_shows_no_error(
        browser: Page, live_server: LiveServer) -> None:
    """A run without a key is refused, as it should be; the page opened again
    (GraphiQL keeps its tabs in localStorage) does not greet with that refusal."""
    url = live_server.url + "/graphql"
    await _opened(browser, url)
    await browser.click(".graphiql-execute-button")
    await until(browser, f"""(() => {{
        const text = document.querySelector({RESULT!r})?.innerText || "";
        return text.includes("not_authenticated") && text;
    }})()""")
    shown = await _opened(browser, url)
    assert not any(word in shown for word in ERRORS), shown
    assert problems(browser) == []
