"""Profiles per docs/api-choices.md (opening list) and docs/http.md: create, read, update,
soft delete, visibility, roles, pages."""

from __future__ import annotations

import asyncio
import re
import secrets
from typing import Any
from urllib.parse import urlsplit

import pytest
from conftest import assert_error, assert_refused_values, handle, new_profile
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from domain import accounts
from domain.validation import HTTP_URL_PATTERN, Url

MISSING = "prf_" + "0" * 32


async def test_create_returns_the_profile_and_its_organization(api: Any, user: Any) -> None:
    body = {
        "platform_id": handle("Mixed.Case_h"), "display_name": "Jazz Club",
        "description": "Live music", "profile_image_url": "https://img.example/p.png",
        "header_image_url": None, "is_private": True,
    }
    status, created, _ = await api.post("/v1/profiles", user, json=body)
    assert status == 201
    assert created["id"].startswith("prf_") and len(created["id"]) == 36
    assert created["organization_id"] == user.organization_id
    for key, value in body.items():
        assert created[key] == value
    assert created["default_event_duration_minutes"] is None
    status, fetched, _ = await api.get(f"/v1/profiles/{created['id']}", user)
    assert status == 200
    assert "organization_id" not in fetched
    assert fetched == {k: v for k, v in created.items() if k != "organization_id"}


async def test_ids_are_case_insensitive(api: Any, user: Any) -> None:
    created = await new_profile(api, user)
    status, fetched, _ = await api.get(f"/v1/profiles/{created['id'].upper()}", user)
    assert status == 200 and fetched["id"] == created["id"]


@pytest.mark.parametrize("bad", ["ab", "has space", "slash/x", "ü-nicode", "x" * 65])
async def test_platform_id_pattern(api: Any, user: Any, bad: str) -> None:
    status, body, _ = await api.post("/v1/profiles", user, json={"platform_id": bad, "display_name": "x"})
    assert_error(status, body, 400, "invalid_field", param="platform_id")


async def test_platform_id_is_unique_across_the_platform(api: Any, make_user: Any) -> None:
    alice, bob = await make_user(), await make_user()
    taken = handle()
    await new_profile(api, alice, platform_id=taken)
    status, body, _ = await api.post(
        "/v1/profiles", bob, json={"platform_id": taken.upper(), "display_name": "x"}
    )
    assert_error(status, body, 409, "conflict", param="platform_id")


async def test_concurrent_creates_of_one_handle_make_one_profile(api: Any, make_user: Any) -> None:
    users = [await make_user() for _ in range(5)]
    taken = handle("race")
    results = await asyncio.gather(*(
        api.post("/v1/profiles", u, json={"platform_id": taken, "display_name": "x"}) for u in users
    ))
    statuses = sorted(status for status, _, _ in results)
    assert statuses == [201, 409, 409, 409, 409]


async def test_organization_must_be_one_of_the_callers(live_server: Any, api: Any, make_user: Any) -> None:
    owner, stranger = await make_user(), await make_user()
    org = live_server.admin(accounts.create_organization, "Team", owner.email, None)["organization_id"]
    status, body, _ = await api.post(
        "/v1/profiles", stranger,
        json={"platform_id": handle(), "display_name": "x", "organization_id": org},
    )
    assert_error(status, body, 404, "resource_not_found", param="organization_id")
    status, body, _ = await api.post(
        "/v1/profiles", stranger,
        json={"platform_id": handle(), "display_name": "x", "organization_id": "prf_" + "1" * 32},
    )
    assert_error(status, body, 400, "invalid_id", param="organization_id")
    created = await new_profile(api, owner, organization_id=org.upper())
    assert created["organization_id"] == org


async def test_private_profiles_are_hidden_from_strangers(api: Any, make_user: Any) -> None:
    owner, stranger = await make_user(), await make_user()
    private = await new_profile(api, owner, is_private=True)
    public = await new_profile(api, owner)
    status, body, _ = await api.get(f"/v1/profiles/{private['id']}", stranger)
    assert_error(status, body, 404, "resource_not_found")
    assert (await api.get(f"/v1/profiles/{public['id']}", stranger))[0] == 200
    # Not in the stranger's list either: the list is what one administers.
    assert (await api.get("/v1/profiles", stranger))[1]["data"] == []


async def test_another_users_profile_is_404_on_writes(api: Any, make_user: Any) -> None:
    owner, stranger = await make_user(), await make_user()
    public = await new_profile(api, owner, display_name="A profile")
    path = f"/v1/profiles/{public['id']}"
    status, body, _ = await api.patch(path, stranger, json={"display_name": "hijacked"})
    assert_error(status, body, 404, "resource_not_found")
    status, body, _ = await api.delete(path, stranger)
    assert_error(status, body, 404, "resource_not_found")
    assert (await api.get(path, owner))[1]["display_name"] == "A profile"


async def test_organization_roles(live_server: Any, api: Any, make_user: Any) -> None:
    owner, admin, member = await make_user(), await make_user(), await make_user()
    org = live_server.admin(accounts.create_organization, "Venue", owner.email, None)["organization_id"]
    live_server.admin(accounts.add_member, org, admin.email, "admin")
    live_server.admin(accounts.add_member, org, member.email, "member")
    profile = await new_profile(api, owner, organization_id=org, is_private=True)
    path = f"/v1/profiles/{profile['id']}"

    # Members see the organization's private profile but may not change it.
    assert (await api.get(path, member))[0] == 200
    status, body, _ = await api.patch(path, member, json={"display_name": "m"})
    error = assert_error(status, body, 403, "forbidden")
    assert error["type"] == "permission_error"
    status, body, _ = await api.delete(path, member)
    assert_error(status, body, 403, "forbidden")

    # Admins administer it, and see it in their list.
    status, body, _ = await api.patch(path, admin, json={"display_name": "By admin"})
    assert status == 200 and body["display_name"] == "By admin"
    assert [p["id"] for p in (await api.get("/v1/profiles", admin))[1]["data"]] == [profile["id"]]
    assert (await api.get("/v1/profiles", member))[1]["data"] == []


async def test_update_changes_only_what_is_sent(api: Any, user: Any) -> None:
    profile = await new_profile(api, user, description="keep me", profile_image_url="https://a.example/x")
    path = f"/v1/profiles/{profile['id']}"
    status, same, _ = await api.patch(path, user, json={})
    assert status == 200 and same == {k: v for k, v in profile.items() if k != "organization_id"}

    status, changed, _ = await api.patch(path, user, json={"profile_image_url": None, "is_private": True})
    assert status == 200
    assert changed["profile_image_url"] is None
    assert changed["is_private"] is True
    assert changed["description"] == "keep me"


@pytest.mark.parametrize(
    ("body", "code", "param"),
    [
        ({"platform_id": "new-handle"}, "unknown_field", "platform_id"),
        ({"organization_id": "org_" + "1" * 32}, "unknown_field", "organization_id"),
        ({"display_name": None}, "invalid_field", "display_name"),
        ({"is_private": None}, "invalid_field", "is_private"),
        ({"display_name": ""}, "invalid_field", "display_name"),
        ({"profile_image_url": "javascript:alert(1)"}, "invalid_field", "profile_image_url"),
        ({"description": 5}, "invalid_field", "description"),
    ],
)
async def test_bad_updates_change_nothing(
    api: Any, user: Any, body: dict[str, Any], code: str, param: str
) -> None:
    profile = await new_profile(api, user)
    path = f"/v1/profiles/{profile['id']}"
    status, error, _ = await api.patch(path, user, json=body)
    assert_error(status, error, 400, code, param=param)
    assert (await api.get(path, user))[1] == {k: v for k, v in profile.items() if k != "organization_id"}


NOT_URLS = [
    "http://[", "http://:@", "http://d5g)y]vQr#8j",  # each made urlsplit raise in clients
    "http://", "http:///path", "https://@/", "http://[::1/", "http://[1::2::3]/",
    "http://a.test:99999/", "http://a.test:port/", "http://a b.test/", "http://a.test/%zz",
    "https://a.test/<script>", "https://a.test/p?q=[1]", "//a.test/x", "ftp://a.test/",
    "javascript:alert(1)", "https://a.test/\u00e9",
]


@pytest.mark.parametrize("url", NOT_URLS)
async def test_urls_are_checked_against_rfc_3986(api: Any, user: Any, url: str) -> None:
    before = (await api.get("/v1/profiles", user))[1]["data"]
    status, error, _ = await api.post("/v1/profiles", user, json={
        "platform_id": handle(), "display_name": "Bad URL", "header_image_url": url})
    error = assert_error(status, error, 400, "invalid_field", param="header_image_url")
    assert error["details"] == {"value": url}
    assert "RFC 3986" in error["message"]
    assert (await api.get("/v1/profiles", user))[1]["data"] == before


@pytest.mark.parametrize("url", [
    "https://img.example/e.png", "http://127.0.0.1:8080/a/b;c?d=e&f=g#h",
    "http://[::1]/x", "https://user:pw@a.test/%20x/(1)?q=a/b?c#/frag",
])
async def test_good_urls_are_kept_as_sent(api: Any, user: Any, url: str) -> None:
    profile = await new_profile(api, user, profile_image_url=url)
    assert profile["profile_image_url"] == url


_ACCEPT = TypeAdapter(Url)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.one_of(st.from_regex(HTTP_URL_PATTERN, fullmatch=True),
                 st.text(max_size=40).map(lambda tail: "http://" + tail)))
def test_every_accepted_url_is_one_clients_can_split(url: str) -> None:
    """Whatever is accepted has a host Python's own parser finds, and matches the
    pattern the OpenAPI document advertises."""
    try:
        _ACCEPT.validate_python(url)
    except ValidationError:
        return
    parts = urlsplit(url)
    assert parts.scheme in ("http", "https") and parts.hostname
    parts.port  # noqa: B018  (raises on a port out of range)
    assert re.fullmatch(HTTP_URL_PATTERN, url, re.ASCII)


async def test_delete_is_soft_idempotent_and_frees_the_handle(api: Any, user: Any) -> None:
    taken = handle()
    profile = await new_profile(api, user, platform_id=taken)
    path = f"/v1/profiles/{profile['id']}"
    assert (await api.delete(path, user))[:2] == (204, None)
    assert (await api.delete(path, user))[:2] == (204, None)
    status, body, _ = await api.get(path, user)
    assert_error(status, body, 404, "resource_not_found")
    status, body, _ = await api.patch(path, user, json={"display_name": "zombie"})
    assert_error(status, body, 404, "resource_not_found")
    assert profile["id"] not in [p["id"] for p in (await api.get("/v1/profiles", user))[1]["data"]]
    assert (await new_profile(api, user, platform_id=taken))["id"] != profile["id"]


async def test_missing_and_malformed_ids(api: Any, user: Any) -> None:
    status, body, _ = await api.get(f"/v1/profiles/{MISSING}", user)
    assert_error(status, body, 404, "resource_not_found")
    for bad in ("myhandle", "evt_" + "0" * 32, "prf_" + "0" * 31):
        status, body, _ = await api.get(f"/v1/profiles/{bad}", user)
        assert_error(status, body, 400, "invalid_id", param="profile_id")
        status, body, _ = await api.delete(f"/v1/profiles/{bad}", user)
        assert_error(status, body, 400, "invalid_id", param="profile_id")


async def test_pages_walk_every_profile_once(api: Any, user: Any) -> None:
    made = [(await new_profile(api, user))["id"] for _ in range(7)]
    seen: list[str] = []
    cursor = None
    while True:
        params = {"limit": "3", **({"cursor": cursor} if cursor else {})}
        status, page, _ = await api.get("/v1/profiles", user, params=params)
        assert status == 200
        assert set(page) == {"data", "has_more", "next_cursor"}
        assert len(page["data"]) <= 3
        seen += [p["id"] for p in page["data"]]
        assert (page["next_cursor"] is None) == (not page["has_more"])
        if not page["has_more"]:
            break
        cursor = page["next_cursor"]
        # Inserted mid-walk: it sorts after everything seen, so nothing is skipped or repeated.
        made.append((await new_profile(api, user))["id"])
    assert seen == made


async def test_default_and_bounded_limits(api: Any, user: Any) -> None:
    for _ in range(21):
        await new_profile(api, user)
    status, page, _ = await api.get("/v1/profiles", user)
    assert status == 200 and len(page["data"]) == 20 and page["has_more"]
    await assert_refused_values(api, "/v1/profiles", user, "limit", ["0", "101", "ten", "-1"],
                                "invalid_query_parameter")
    await assert_refused_values(api, "/v1/profiles", user, "color", ["red"],
                                "invalid_query_parameter")


async def test_cursors_are_tamper_evident_and_bound_to_their_list(api: Any, make_user: Any) -> None:
    alice, bob = await make_user(), await make_user()
    for u in (alice, bob):
        for _ in range(2):
            await new_profile(api, u)
    _, page, _ = await api.get("/v1/profiles", alice, params={"limit": "1"})
    cursor = page["next_cursor"]
    flipped = cursor[:-2] + ("A" if cursor[-2] != "A" else "B") + cursor[-1]
    await assert_refused_values(api, "/v1/profiles", alice, "cursor",
                                [flipped, "garbage", cursor + "x"], "invalid_cursor")
    # Alice's cursor is not Bob's list.
    await assert_refused_values(api, "/v1/profiles", bob, "cursor", [cursor], "invalid_cursor")


async def test_list_page_costs_a_constant_number_of_queries(
    live_server: Any, api: Any, make_user: Any
) -> None:
    small, large = await make_user(), await make_user()
    await new_profile(api, small)
    await asyncio.gather(*(new_profile(api, large) for _ in range(100)))

    async def queries(u: Any, limit: int) -> int:
        before = live_server.query_count
        status, page, _ = await api.get("/v1/profiles", u, params={"limit": str(limit)})
        assert status == 200 and len(page["data"]) == min(limit, 100 if u is large else 1)
        return live_server.query_count - before  # type: ignore[no-any-return]

    # One to authenticate, one for the page: whatever the page size.
    assert await queries(small, 20) == 2
    assert await queries(large, 100) == 2


async def test_retrieve_costs_two_queries(live_server: Any, api: Any, user: Any) -> None:
    profile = await new_profile(api, user)
    before = live_server.query_count
    assert (await api.get(f"/v1/profiles/{profile['id']}", user))[0] == 200
    assert live_server.query_count - before == 2


async def test_organizations_list(live_server: Any, api: Any, make_user: Any) -> None:
    owner, member = await make_user(), await make_user()
    org = live_server.admin(accounts.create_organization, "Club", owner.email, "club-" + secrets.token_hex(3))
    live_server.admin(accounts.add_member, org["organization_id"], member.email, "member")
    status, page, _ = await api.get("/v1/organizations", member)
    assert status == 200
    assert page["has_more"] is False and page["next_cursor"] is None
    by_id = {o["id"]: o for o in page["data"]}
    assert by_id[member.organization_id]["is_default"] is True
    assert by_id[member.organization_id]["role"] == "owner"
    shared = by_id[org["organization_id"]]
    assert shared["role"] == "member" and shared["is_default"] is False
    assert shared["name"] == "Club" and shared["handle"].startswith("club-")
    assert [o["is_default"] for o in page["data"]].count(True) == 1
