"""Follows per docs/api-choices.md, "Follows": follow a profile, series or event once,
list and filter the caller's follows, unfollow, a target gone from sight, and the
followers of a profile (who may see them, and what they show)."""

from __future__ import annotations

import asyncio
import secrets
from typing import Any

import orjson
import pytest
from conftest import assert_error, new_event, new_profile, new_series, org_profile, walk
from mcp_clients import list_tools, result_body, sdk_client

FOLLOW_KEYS = {"id", "following_type", "target_id", "created_at"}
FOLLOWER_KEYS = {"follow_id", "display_name", "followed_at"}
MISSING = {"profile": "prf_" + "0" * 32, "series": "ser_" + "0" * 32, "event": "evt_" + "0" * 32}


async def follow(api: Any, user: Any, following_type: str, target_id: str
                 ) -> tuple[int, Any, Any]:
    return await api.post(  # type: ignore[no-any-return]
        "/v1/follows", user, json={"following_type": following_type, "target_id": target_id}
    )


async def followed(api: Any, user: Any, following_type: str, target_id: str) -> dict[str, Any]:
    status, body, _ = await follow(api, user, following_type, target_id)
    assert status == 201, body
    return body  # type: ignore[no-any-return]


async def targets(api: Any, owner: Any) -> dict[str, dict[str, Any]]:
    """A public profile with a public event and a public series."""
    profile = await new_profile(api, owner)
    event = await new_event(api, owner, profile)
    series = await new_series(api, owner, profile)
    return {"profile": profile, "event": event, "series": series}


async def my_follows(api: Any, user: Any, following_type: str | None = None
                     ) -> list[dict[str, Any]]:
    path = "/v1/follows" + (f"?following_type={following_type}" if following_type else "")
    return await walk(api, path, user)


async def followers(api: Any, user: Any, profile_id: str) -> list[dict[str, Any]]:
    return await walk(api, f"/v1/profiles/{profile_id}/followers", user)


# --- create ---------------------------------------------------------------


async def test_create_returns_the_follow_and_its_location(api: Any, make_user: Any) -> None:
    owner, fan = await make_user(), await make_user()
    profile = await new_profile(api, owner)
    status, created, headers = await follow(api, fan, "profile", profile["id"])
    assert status == 201, created
    assert set(created) == FOLLOW_KEYS
    assert created["id"].startswith("fol_") and len(created["id"]) == 36
    assert headers["Location"] == f"/v1/follows/{created['id']}"
    assert created["following_type"] == "profile"
    assert created["target_id"] == profile["id"]
    assert created["created_at"].endswith("Z")


@pytest.mark.parametrize("kind", ["profile", "series", "event"])
async def test_each_kind_of_target_can_be_followed(api: Any, make_user: Any, kind: str) -> None:
    owner, fan = await make_user(), await make_user()
    target = (await targets(api, owner))[kind]
    # IDs are matched case-insensitively and shown lower-case.
    created = await followed(api, fan, kind, target["id"].upper())
    assert (created["following_type"], created["target_id"]) == (kind, target["id"])
    assert await my_follows(api, fan) == [created]


async def test_following_again_returns_the_existing_follow_with_200(
    api: Any, make_user: Any
) -> None:
    owner, fan = await make_user(), await make_user()
    event = (await targets(api, owner))["event"]
    first = await followed(api, fan, "event", event["id"])
    status, again, headers = await follow(api, fan, "event", event["id"].upper())
    assert (status, again) == (200, first)
    assert "Location" not in headers
    assert await my_follows(api, fan) == [first]


async def test_the_same_target_followed_by_two_users_is_two_follows(
    api: Any, make_user: Any
) -> None:
    owner, fan, other = await make_user(), await make_user(), await make_user()
    profile = await new_profile(api, owner)
    mine = await followed(api, fan, "profile", profile["id"])
    theirs = await followed(api, other, "profile", profile["id"])
    assert mine["id"] != theirs["id"]


async def test_following_ones_own_profile_is_allowed(api: Any, user: Any) -> None:
    profile = await new_profile(api, user, is_private=True)
    created = await followed(api, user, "profile", profile["id"])
    assert created["target_id"] == profile["id"]
    assert [f["follow_id"] for f in await followers(api, user, profile["id"])] == [created["id"]]


async def test_simultaneous_identical_follows_make_one(api: Any, make_user: Any) -> None:
    owner, fan = await make_user(), await make_user()
    series = (await targets(api, owner))["series"]
    results = await asyncio.gather(*(follow(api, fan, "series", series["id"]) for _ in range(10)))
    statuses = sorted(status for status, _, _ in results)
    assert statuses == [200] * 9 + [201], [body for _, body, _ in results]
    assert len({body["id"] for _, body, _ in results}) == 1
    assert len(await my_follows(api, fan)) == 1


@pytest.mark.parametrize(
    ("kind", "target"),
    [
        ("profile", "evt_" + "a" * 32),  # docs/http.md, "Errors", `invalid_id`'s own example
        ("profile", "ser_" + "a" * 32),
        ("series", "prf_" + "a" * 32),
        ("event", "ser_" + "a" * 32),
        ("event", "evt_" + "a" * 31),
        ("profile", "my-handle"),  # a platform_id is not a prf_ ID
        ("profile", 42),
        ("profile", None),
    ],
)
async def test_target_id_must_carry_the_prefix_of_its_type(
    api: Any, user: Any, kind: str, target: Any
) -> None:
    status, body, _ = await follow(api, user, kind, target)
    assert_error(status, body, 400, "invalid_id", param="target_id")


@pytest.mark.parametrize(
    ("body", "code", "param"),
    [
        ({"target_id": "prf_" + "a" * 32}, "missing_field", "following_type"),
        ({"following_type": "profile"}, "missing_field", "target_id"),
        ({"following_type": "user", "target_id": "prf_" + "a" * 32}, "invalid_field",
         "following_type"),
        ({"following_type": "profile", "target_id": "prf_" + "a" * 32, "notify": True},
         "unknown_field", "notify"),
    ],
)
async def test_body_is_checked(api: Any, user: Any, body: dict[str, Any], code: str,
                               param: str) -> None:
    status, error, _ = await api.post("/v1/follows", user, json=body)
    assert_error(status, error, 400, code, param=param)


@pytest.mark.parametrize("kind", ["profile", "series", "event"])
async def test_an_unknown_target_is_not_found(api: Any, user: Any, kind: str) -> None:
    status, body, _ = await follow(api, user, kind, MISSING[kind])
    assert_error(status, body, 404, "resource_not_found", param="target_id")
    assert await my_follows(api, user) == []


async def test_a_target_hidden_from_the_caller_is_not_found(api: Any, make_user: Any) -> None:
    owner, stranger = await make_user(), await make_user()
    private = await new_profile(api, owner, is_private=True)
    public = await new_profile(api, owner)
    hidden = {
        "profile": private["id"],
        "event": (await new_event(api, owner, public, is_private=True))["id"],
        "series": (await new_series(api, owner, public, is_private=True))["id"],
    }
    in_private = {
        "event": (await new_event(api, owner, private))["id"],
        "series": (await new_series(api, owner, private))["id"],
    }
    deleted = await new_profile(api, owner)
    assert (await api.delete(f"/v1/profiles/{deleted['id']}", owner))[0] == 204
    cases = [*hidden.items(), *in_private.items(), ("profile", deleted["id"])]
    for kind, target_id in cases:
        status, body, _ = await follow(api, stranger, kind, target_id)
        assert_error(status, body, 404, "resource_not_found", param="target_id")
    # The owner sees (and so may follow) all but the deleted profile.
    for kind, target_id in [*hidden.items(), *in_private.items()]:
        assert (await follow(api, owner, kind, target_id))[0] == 201
    status, body, _ = await follow(api, owner, "profile", deleted["id"])
    assert_error(status, body, 404, "resource_not_found", param="target_id")


async def test_an_organization_member_may_follow_its_private_profile(
    live_server: Any, api: Any, make_user: Any
) -> None:
    profile, _, _, member = await org_profile(live_server, api, make_user, is_private=True)
    created = await followed(api, member, "profile", profile["id"])
    assert created["target_id"] == profile["id"]


# --- list -----------------------------------------------------------------


async def test_list_is_the_callers_follows_oldest_first(api: Any, make_user: Any) -> None:
    owner, fan, other = await make_user(), await make_user(), await make_user()
    made = []
    for _ in range(3):
        for kind, target in (await targets(api, owner)).items():
            made.append(await followed(api, fan, kind, target["id"]))
    await followed(api, other, "profile", made[0]["target_id"])
    for limit in (1, 2, 4, 100):
        assert await walk(api, "/v1/follows", fan, limit=limit) == made
    assert len(await my_follows(api, other)) == 1


async def test_list_filters_by_type(api: Any, make_user: Any) -> None:
    owner, fan = await make_user(), await make_user()
    made: dict[str, list[str]] = {"profile": [], "series": [], "event": []}
    for _ in range(2):
        for kind, target in (await targets(api, owner)).items():
            made[kind].append((await followed(api, fan, kind, target["id"]))["id"])
    for kind, expected in made.items():
        listed = await walk(api, f"/v1/follows?following_type={kind}", fan, limit=1)
        assert [f["id"] for f in listed] == expected
        assert {f["following_type"] for f in listed} == {kind}


@pytest.mark.parametrize("value", ["user", "Profile", "", "profile,event"])
async def test_an_unknown_type_filter_is_refused(api: Any, user: Any, value: str) -> None:
    status, body, _ = await api.get("/v1/follows", user, params={"following_type": value})
    assert_error(status, body, 400, "invalid_query_parameter", param="following_type")


async def test_a_cursor_belongs_to_its_list(api: Any, make_user: Any) -> None:
    owner, fan, other = await make_user(), await make_user(), await make_user()
    for _ in range(2):
        profile = await new_profile(api, owner)
        await followed(api, fan, "profile", profile["id"])
        await followed(api, other, "profile", profile["id"])
    status, page, _ = await api.get("/v1/follows", fan, params={"limit": "1"})
    assert status == 200 and page["has_more"], page
    cursor = page["next_cursor"]
    status, body, _ = await api.get(
        "/v1/follows", fan, params={"cursor": cursor, "following_type": "profile"}
    )
    assert_error(status, body, 400, "invalid_cursor", param="cursor")
    status, body, _ = await api.get("/v1/follows", other, params={"cursor": cursor})
    assert_error(status, body, 400, "invalid_cursor", param="cursor")
    # The last character alone: where base64 leaves bits unread (such an edit was taken
    # for the cursor it came from, one run in a few hundred).
    edited = cursor[:-1] + ("x" if cursor[-1] != "x" else "y")
    status, body, _ = await api.get("/v1/follows", fan, params={"cursor": edited})
    assert_error(status, body, 400, "invalid_cursor", param="cursor")


async def test_target_id_is_null_once_the_target_is_out_of_sight(
    api: Any, make_user: Any
) -> None:
    owner, fan = await make_user(), await make_user()
    made = {kind: await followed(api, fan, kind, t["id"])
            for kind, t in (await targets(api, owner)).items()}
    turned_private = await new_profile(api, owner)
    deleted = await new_profile(api, owner)
    made["private"] = await followed(api, fan, "profile", turned_private["id"])
    made["deleted"] = await followed(api, fan, "profile", deleted["id"])

    assert (await api.delete(f"/v1/events/{made['event']['target_id']}", owner))[0] == 204
    assert (await api.delete(f"/v1/series/{made['series']['target_id']}", owner))[0] == 200
    status, _, _ = await api.patch(f"/v1/profiles/{turned_private['id']}", owner,
                                   json={"is_private": True})
    assert status == 200
    assert (await api.delete(f"/v1/profiles/{deleted['id']}", owner))[0] == 204

    listed = {f["id"]: f for f in await my_follows(api, fan)}
    assert set(listed) == {f["id"] for f in made.values()}  # the follows stay
    for key, original in made.items():
        expected = original["target_id"] if key == "profile" else None
        assert listed[original["id"]] == {**original, "target_id": expected}, key
    # The owner still sees the private profile: their own follow of it shows it.
    mine = await followed(api, owner, "profile", turned_private["id"])
    assert (await my_follows(api, owner))[0]["target_id"] == turned_private["id"] == mine["target_id"]
    # Gone from sight, the target cannot be followed anew; its follow can still go.
    status, body, _ = await follow(api, fan, "profile", turned_private["id"])
    assert_error(status, body, 404, "resource_not_found", param="target_id")
    assert (await api.delete(f"/v1/follows/{made['deleted']['id']}", fan))[0] == 204
    # Public again: the follow shows its target again.
    assert (await api.patch(f"/v1/profiles/{turned_private['id']}", owner,
                            json={"is_private": False}))[0] == 200
    listed = {f["id"]: f for f in await my_follows(api, fan)}
    assert listed[made["private"]["id"]]["target_id"] == turned_private["id"]
    assert made["deleted"]["id"] not in listed


async def test_a_follow_list_page_costs_the_same_whatever_its_size(
    live_server: Any, api: Any, make_user: Any
) -> None:
    owner, fan = await make_user(), await make_user()
    made = await asyncio.gather(*(targets(api, owner) for _ in range(10)))
    for group in made:
        for kind, target in group.items():
            await followed(api, fan, kind, target["id"])

    async def queries(limit: int, **params: str) -> int:
        before = live_server.query_count
        status, page, _ = await api.get("/v1/follows", fan,
                                        params={"limit": str(limit), **params})
        assert status == 200 and len(page["data"]) == min(limit, 30 if not params else 10)
        return live_server.query_count - before  # type: ignore[no-any-return]

    # Authentication, then the page (target visibility included).
    assert await queries(1) == 2
    assert await queries(30) == 2
    assert await queries(100, following_type="event") == 2


# --- delete ---------------------------------------------------------------


async def test_delete_removes_the_follow(api: Any, make_user: Any) -> None:
    owner, fan = await make_user(), await make_user()
    profile = await new_profile(api, owner)
    first = await followed(api, fan, "profile", profile["id"])
    status, body, _ = await api.delete(f"/v1/follows/{first['id'].upper()}", fan)
    assert (status, body) == (204, None)
    assert await my_follows(api, fan) == []
    assert await followers(api, owner, profile["id"]) == []
    status, body, _ = await api.delete(f"/v1/follows/{first['id']}", fan)
    assert_error(status, body, 404, "resource_not_found", param="follow_id")
    # Following again is a new follow.
    again = await followed(api, fan, "profile", profile["id"])
    assert again["id"] != first["id"]


async def test_another_users_follow_cannot_be_deleted(api: Any, make_user: Any) -> None:
    owner, fan = await make_user(), await make_user()
    profile = await new_profile(api, owner)
    theirs = await followed(api, fan, "profile", profile["id"])
    # Not even by the owner of the followed profile.
    status, body, _ = await api.delete(f"/v1/follows/{theirs['id']}", owner)
    assert_error(status, body, 404, "resource_not_found", param="follow_id")
    status, body, _ = await api.delete("/v1/follows/fol_" + "0" * 32, fan)
    assert_error(status, body, 404, "resource_not_found", param="follow_id")
    assert await my_follows(api, fan) == [theirs]


@pytest.mark.parametrize("bad", ["prf_" + "0" * 32, "fol_123", "nope"])
async def test_delete_checks_the_id(api: Any, user: Any, bad: str) -> None:
    status, body, _ = await api.delete(f"/v1/follows/{bad}", user)
    assert_error(status, body, 400, "invalid_id", param="follow_id")


# --- followers --------------------------------------------------------------


async def test_followers_show_a_display_name_and_when_only(
    api: Any, make_user: Any
) -> None:
    owner = await make_user()
    fans = [await make_user(name=f"Fan {i}") for i in range(3)]
    nameless = await make_user()
    profile = await new_profile(api, owner)
    made = [await followed(api, u, "profile", profile["id"]) for u in [*fans, nameless]]
    # Follows of its events or series are not follows of the profile.
    await followed(api, fans[0], "event", (await new_event(api, owner, profile))["id"])

    for limit in (1, 3, 100):
        listed = await walk(api, f"/v1/profiles/{profile['id']}/followers", owner, limit=limit)
        assert [f["follow_id"] for f in listed] == [f["id"] for f in made]
    assert all(set(f) == FOLLOWER_KEYS for f in listed)
    assert [f["display_name"] for f in listed] == ["Fan 0", "Fan 1", "Fan 2", None]
    assert [f["followed_at"] for f in listed] == [f["created_at"] for f in made]
    text = orjson.dumps(listed).decode()
    assert all(u.email not in text for u in [*fans, nameless])
    assert "usr_" not in text
    # Anyone who can see a public profile sees its followers.
    assert await followers(api, nameless, profile["id"]) == listed


async def test_followers_of_a_private_profile_are_for_its_administrators(
    live_server: Any, api: Any, make_user: Any
) -> None:
    profile, owner, admin, member = await org_profile(live_server, api, make_user,
                                                      is_private=True)
    stranger = await make_user()
    made = await followed(api, member, "profile", profile["id"])
    for who in (owner, admin):
        assert [f["follow_id"] for f in await followers(api, who, profile["id"])] == [made["id"]]
    for who in (member, stranger):
        status, body, _ = await api.get(f"/v1/profiles/{profile['id']}/followers", who)
        assert_error(status, body, 404, "resource_not_found", param="profile_id")


async def test_followers_of_a_missing_or_deleted_profile_are_not_found(
    api: Any, make_user: Any
) -> None:
    owner, fan = await make_user(), await make_user()
    profile = await new_profile(api, owner)
    await followed(api, fan, "profile", profile["id"])
    assert (await api.delete(f"/v1/profiles/{profile['id']}", owner))[0] == 204
    for path in (f"/v1/profiles/{profile['id']}/followers", f"/v1/profiles/{MISSING['profile']}/followers"):
        for who in (owner, fan):
            status, body, _ = await api.get(path, who)
            assert_error(status, body, 404, "resource_not_found", param="profile_id")
    status, body, _ = await api.get("/v1/profiles/evt_" + "0" * 32 + "/followers", owner)
    assert_error(status, body, 400, "invalid_id", param="profile_id")


async def test_a_followers_page_costs_the_same_whatever_its_size(
    live_server: Any, api: Any, make_user: Any
) -> None:
    owner = await make_user()
    fans = await asyncio.gather(*(make_user() for _ in range(25)))
    profile = await new_profile(api, owner)
    await asyncio.gather(*(followed(api, u, "profile", profile["id"]) for u in fans))
    path = f"/v1/profiles/{profile['id']}/followers"

    async def queries(limit: int) -> int:
        before = live_server.query_count
        status, page, _ = await api.get(path, owner, params={"limit": str(limit)})
        assert status == 200 and len(page["data"]) == limit
        return live_server.query_count - before  # type: ignore[no-any-return]

    # Authentication, the profile (visibility), then the page.
    assert await queries(1) == 3
    assert await queries(25) == 3


# --- GraphQL and MCP ----------------------------------------------------------


async def test_graphql_checks_the_type_filter_too(api: Any, user: Any) -> None:
    query = "query($t: String) { follows(following_type: $t) { has_more } }"
    status, body, _ = await api.post("/graphql", user, json={"query": query,
                                                             "variables": {"t": "user"}})
    assert status == 200, body
    [error] = body["errors"]
    assert error["extensions"]["code"] == "invalid_query_parameter"
    assert error["extensions"]["param"] == "following_type"


async def test_follows_as_tools(live_server: Any, api: Any, make_user: Any) -> None:
    owner, fan = await make_user(), await make_user()
    profile = await new_profile(api, owner, platform_id="mcp-fol-" + secrets.token_hex(4))
    async with sdk_client(live_server, fan, toolsets="follows,profiles") as client:
        tools = await list_tools(client)
        names = ["listFollows", "createFollow", "deleteFollow", "listProfileFollowers"]
        assert set(names) <= set(tools)
        assert tools["listFollows"].annotations.read_only_hint is True
        assert tools["listProfileFollowers"].annotations.read_only_hint is True
        assert tools["createFollow"].annotations.idempotent_hint is True
        assert tools["deleteFollow"].annotations.destructive_hint is True
        assert set(tools["createFollow"].input_schema["required"]) == {"following_type",
                                                                       "target_id"}

        args = {"following_type": "profile", "target_id": profile["id"]}
        created = result_body(await client.call_tool("createFollow", args))
        assert result_body(await client.call_tool("createFollow", args)) == created
        listed = result_body(await client.call_tool("listFollows", {"following_type": "profile"}))
        assert listed == {"data": [created], "has_more": False, "next_cursor": None}
        wrong = await client.call_tool("createFollow", {**args, "following_type": "event"})
        assert wrong.is_error is True
        assert result_body(wrong)["error"]["code"] == "invalid_id"
        done = result_body(await client.call_tool("deleteFollow", {"follow_id": created["id"]}))
        assert done == {"status": "deleted"}
