"""Webhook endpoint URLs (docs/api-choices.md, "Webhooks"): a URL with userinfo is refused
(credentials belong in the signature, and a stored URL is shown back in full), and names that are
loopback by definition are refused with any number of trailing dots; on creation and
on a PATCH of the url alike. Delivery's own check reads trailing dots the same way.
"""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp import web
from conftest import Api, assert_error, new_profile

from core.errors import ApiError
from domain import outbound
from domain.notify import webhooks

GOOD = "https://hooks.invalid/kalends"

REFUSED = [
    # Userinfo, in each of its shapes.
    "https://user:pw@hooks.invalid/x",
    "https://user@hooks.invalid/x",
    "https://:pw@hooks.invalid/x",
    "https://user:@hooks.invalid/x",
    "https://@hooks.invalid/x",
    "https://user%40example.com:p%3Aw@hooks.invalid/x",
    # Loopback by definition, with any number of trailing dots, in any case.
    "https://localhost../x",
    "https://localhost.../x",
    "https://LocalHost..:8443/x",
    "https://sub.localhost../x",
    "https://a.b.LOCALHOST..../x",
    # And IP literals followed by dots.
    "https://127.0.0.1../x",
    "https://10.0.0.1.../x",
]


def _path(profile: dict[str, Any]) -> str:
    return f"/v1/profiles/{profile['id']}/webhook-endpoints"


@pytest.mark.parametrize("url", REFUSED)
def test_the_rule_refuses(url: str) -> None:
    # KALENDS_WEBHOOK_ALLOW_HTTP lets loopback names through (local development),
    # and nothing else here.
    loopback_name = "localhost" in url.lower()
    for allow_http in (False,) if loopback_name else (False, True):
        with pytest.raises(ApiError) as raised:
            webhooks.check_url(url, allow_http=allow_http)
        assert raised.value.code == "invalid_field"
        assert raised.value.param == "url"


def test_userinfo_is_named_in_the_message() -> None:
    with pytest.raises(ApiError) as raised:
        webhooks.check_url("https://user:pw@hooks.invalid/x", allow_http=False)
    assert "credentials" in str(raised.value.message).lower()
    assert "signature" in str(raised.value.message).lower()


def test_loopback_names_read_any_number_of_trailing_dots() -> None:
    for host in ("localhost", "localhost.", "localhost..", "LOCALHOST...", "a.localhost..."):
        assert outbound.is_loopback_name(host), host
        assert outbound.is_loopback_host(host), host
        assert outbound.is_refused_host(host), host
    for host in ("localhost.example", "notlocalhost", "localhost-x..", "example.com.."):
        assert not outbound.is_loopback_name(host), host
    # Delivery's check: http to loopback (when allowed) reads them alike, and an
    # IP literal with dots after it is no name to resolve.
    assert outbound.check_url("http://localhost../x", allow_http=True)
    assert outbound.is_refused_literal("127.0.0.1..")
    assert outbound.is_refused_literal("169.254.169.254...")


@pytest.mark.parametrize("url", REFUSED)
async def test_refused_on_create_and_on_patch(api: Api, make_user: Any, url: str) -> None:
    owner = await make_user()
    profile = await new_profile(api, owner)
    status, kept, _ = await api.post(_path(profile), owner, json={"url": GOOD})
    assert status == 201, kept
    status, answer, _ = await api.post(_path(profile), owner, json={"url": url})
    assert_error(status, answer, 400, "invalid_field", "url")
    status, answer, _ = await api.patch(f"/v1/webhook-endpoints/{kept['id']}", owner,
                                        json={"url": url})
    assert_error(status, answer, 400, "invalid_field", "url")
    status, listed, _ = await api.get(_path(profile), owner)
    assert [e["url"] for e in listed["data"]] == [GOOD]
    status, shown, _ = await api.get(f"/v1/webhook-endpoints/{kept['id']}", owner)
    assert shown["url"] == GOOD


async def test_delivery_reaches_no_loopback_listener_by_a_dotted_name() -> None:
    """At delivery every name is resolved and held to the public-address rule; the
    dotted spellings get nowhere near a listener on loopback."""
    hits: list[str] = []

    async def handler(request: web.Request) -> web.Response:
        hits.append(request.host)
        return web.json_response({})

    app = web.Application()
    app.router.add_get("/x", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    session = outbound.guarded_session()
    try:
        for host in ("127.0.0.1.", "127.0.0.1..", "127.0.0.1...", "localhost.", "localhost..",
                     "localhost..."):
            with pytest.raises(outbound.OutboundError):
                await outbound.fetch_json(session, f"http://{host}:{port}/x", max_bytes=100,
                                          allow_http=True)
    finally:
        await session.close()
        await runner.cleanup()
    assert hits == []
