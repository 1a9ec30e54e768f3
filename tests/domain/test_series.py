"""Series per docs/api-choices.md, "Events, RSVPs and series": create, list, read,
update, membership, the series' events, the deletion preview and deletion (with and without
cascade)."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest
from conftest import assert_error, handle, new_event, new_profile, org_with, walk

SERIES_KEYS = {"id", "profile_id", "name", "slug", "description", "is_private", "created_at", "updated_at"}
PREVIEW_KEYS = {
    "series_name", "member_count", "exclusive_count", "shared_count",
    "member_recurring_count", "exclusive_recurring_count", "shared_recurring_count",
}
MISSING_SERIES = "ser_" + "0" * 32
MISSING_EVENT = "evt_" + "0" * 32


async def make_series(api: Any, user: Any, profile_id: str, **fields: Any) -> dict[str, Any]:
    body = {"name": "Season", "slug": handle("season"), **fields}
    status, created, _ = await api.post(f"/v1/profiles/{profile_id}/series", user, json=body)
    assert status == 201, created
    return created  # type: ignore[no-any-return]


async def link(api: Any, user: Any, series_id: str, event_id: str) -> None:
    status, body, _ = await api.post(f"/v1/series/{series_id}/events", user, json={"event_id": event_id})
    assert (status, body) == (204, None)


async def _series_of_one_event(api: Any, user: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """A series of a new profile of `user`, with one event of the profile in it."""
    profile = await new_profile(api, user)
    series = await make_series(api, user, profile["id"])
    event = await new_event(api, user, profile)
    await link(api, user, series["id"], event["id"])
    return series, event


async def walk_ids(api: Any, path: str, user: Any, limit: int = 20) -> list[str]:
    """Every item's id, following the cursor to the end."""
    return [item["id"] for item in await walk(api, path, user, limit=limit)]


async def event_ids(api: Any, series_id: str, user: Any) -> list[str]:
    return await walk_ids(api, f"/v1/series/{series_id}/events", user, limit=100)


# --- create ---------------------------------------------------------------


async def test_create_returns_the_series_and_its_location(api: Any, user: Any) -> None:
    profile = await new_profile(api, user)
    body = {"name": "Summer tour", "slug": "Summer-2031", "description": "Ten cities", "is_private": True}
    status, created, headers = await api.post(f"/v1/profiles/{profile['id']}/series", user, json=body)
    assert status == 201, created
    assert set(created) == SERIES_KEYS
    assert created["id"].startswith("ser_") and len(created["id"]) == 36
    assert headers["Location"] == f"/v1/series/{created['id']}"
    assert created["profile_id"] == profile["id"]
    for key, value in body.items():
        assert created[key] == value
    assert created["created_at"].endswith("Z") and created["updated_at"].endswith("Z")
    status, fetched, _ = await api.get(f"/v1/series/{created['id']}", user)
    assert (status, fetched) == (200, created)


async def test_create_defaults(api: Any, user: Any) -> None:
    profile = await new_profile(api, user)
    created = await make_series(api, user, profile["id"], name="Course", slug="course")
    assert created["description"] is None
    assert created["is_private"] is False


@pytest.mark.parametrize("missing", ["name", "slug"])
async def test_name_and_slug_are_required(api: Any, user: Any, missing: str) -> None:
    profile = await new_profile(api, user)
    body = {"name": "Season", "slug": "season"}
    del body[missing]
    status, error, _ = await api.post(f"/v1/profiles/{profile['id']}/series", user, json=body)
    assert_error(status, error, 400, "missing_field", param=missing)
    assert (await api.get(f"/v1/profiles/{profile['id']}/series", user))[1]["data"] == []


@pytest.mark.parametrize(
    ("body", "code", "param"),
    [
        ({"name": "", "slug": "ok"}, "invalid_field", "name"),
        ({"name": None, "slug": "ok"}, "invalid_field", "name"),
        ({"name": "x", "slug": "has space"}, "invalid_field", "slug"),
        ({"name": "x", "slug": "-leading"}, "invalid_field", "slug"),
        ({"name": "x", "slug": "ok", "is_private": "yes"}, "invalid_field", "is_private"),
        ({"name": "x", "slug": "ok", "color": "red"}, "unknown_field", "color"),
        ({"name": "x", "slug": "ok", "profile_id": "prf_" + "1" * 32}, "unknown_field", "profile_id"),
    ],
)
async def test_bad_creates_make_nothing(api: Any, user: Any, body: dict[str, Any], code: str, param: str) -> None:
    profile = await new_profile(api, user)
    status, error, _ = await api.post(f"/v1/profiles/{profile['id']}/series", user, json=body)
    assert_error(status, error, 400, code, param=param)
    assert (await api.get(f"/v1/profiles/{profile['id']}/series", user))[1]["data"] == []


async def test_slug_is_unique_within_the_profile_case_insensitively(api: Any, user: Any) -> None:
    profile = await new_profile(api, user)
    first = await make_series(api, user, profile["id"], slug="Jazz-Nights")
    status, error, _ = await api.post(
        f"/v1/profiles/{profile['id']}/series", user, json={"name": "Again", "slug": "jazz-NIGHTS"}
    )
    error_obj = assert_error(status, error, 409, "conflict", param="slug")
    assert error_obj["type"] == "conflict_error"
    assert await walk_ids(api, f"/v1/profiles/{profile['id']}/series", user) == [first["id"]]

    # The same slug on another profile (even the caller's own) is fine.
    other = await new_profile(api, user)
    again = await make_series(api, user, other["id"], slug="Jazz-Nights")
    assert again["slug"] == "Jazz-Nights" and again["profile_id"] == other["id"]


async def test_concurrent_creates_of_one_slug_make_one_series(api: Any, user: Any) -> None:
    profile = await new_profile(api, user)
    results = await asyncio.gather(*(
        api.post(f"/v1/profiles/{profile['id']}/series", user, json={"name": f"Try {i}", "slug": "Race" if i % 2 else "race"})
        for i in range(5)
    ))
    assert sorted(status for status, _, _ in results) == [201, 409, 409, 409, 409]
    for status, body, _ in results:
        if status == 409:
            assert_error(status, body, 409, "conflict", param="slug")
    assert len(await walk_ids(api, f"/v1/profiles/{profile['id']}/series", user)) == 1


async def test_create_on_a_profile_the_caller_does_not_administer(api: Any, make_user: Any) -> None:
    owner, stranger = await make_user(), await make_user()
    profile = await new_profile(api, owner)
    status, error, _ = await api.post(
        f"/v1/profiles/{profile['id']}/series", stranger, json={"name": "Mine", "slug": "mine"}
    )
    assert_error(status, error, 404, "resource_not_found")
    assert (await api.get(f"/v1/profiles/{profile['id']}/series", owner))[1]["data"] == []

    status, error, _ = await api.post(
        f"/v1/profiles/{'prf_' + '0' * 32}/series", owner, json={"name": "x", "slug": "x"}
    )
    assert_error(status, error, 404, "resource_not_found")
    status, error, _ = await api.post(f"/v1/profiles/{profile['platform_id']}/series", owner,
                                      json={"name": "x", "slug": "x"})
    assert_error(status, error, 400, "invalid_id", param="profile_id")


async def test_create_on_a_deleted_profile_is_404(api: Any, user: Any) -> None:
    profile = await new_profile(api, user)
    assert (await api.delete(f"/v1/profiles/{profile['id']}", user))[0] == 204
    status, error, _ = await api.post(
        f"/v1/profiles/{profile['id']}/series", user, json={"name": "Late", "slug": "late"}
    )
    assert_error(status, error, 404, "resource_not_found")


async def test_organization_roles(live_server: Any, api: Any, make_user: Any) -> None:
    org, owner, admin, member = await org_with(live_server, make_user)
    profile = await new_profile(api, owner, organization_id=org)
    path = f"/v1/profiles/{profile['id']}/series"

    status, error, _ = await api.post(path, member, json={"name": "By member", "slug": "by-member"})
    assert assert_error(status, error, 403, "forbidden")["type"] == "permission_error"
    assert (await api.get(path, owner))[1]["data"] == []

    series = await make_series(api, admin, profile["id"], is_private=True)
    event = await new_event(api, owner, profile)
    # The member sees the organization's private series but may not change it.
    assert (await api.get(f"/v1/series/{series['id']}", member))[0] == 200
    for status, error, _ in (
        await api.patch(f"/v1/series/{series['id']}", member, json={"name": "m"}),
        await api.post(f"/v1/series/{series['id']}/events", member, json={"event_id": event["id"]}),
        await api.get(f"/v1/series/{series['id']}/deletion-preview", member),
        await api.delete(f"/v1/series/{series['id']}", member),
    ):
        assert_error(status, error, 403, "forbidden")
    assert (await api.get(f"/v1/series/{series['id']}", owner))[1] == series
    assert await event_ids(api, series["id"], owner) == []

    # Admins administer it: they see it in their list and may link and delete.
    assert series["id"] in await walk_ids(api, "/v1/series", admin, limit=100)
    assert series["id"] not in await walk_ids(api, "/v1/series", member, limit=100)
    await link(api, admin, series["id"], event["id"])
    status, body, _ = await api.delete(f"/v1/series/{series['id']}", admin)
    assert status == 200 and body["member_count"] == 1


# --- lists ------------------------------------------------------------------


async def test_series_list_is_what_the_caller_administers(
    live_server: Any, api: Any, make_user: Any
) -> None:
    alice, bob = await make_user(), await make_user()
    first, second = await new_profile(api, alice), await new_profile(api, alice, is_private=True)
    made = []
    for i in range(5):
        made.append((await make_series(api, alice, (first if i % 2 else second)["id"],
                                       is_private=i == 3))["id"])
    bobs = await new_profile(api, bob)
    bobs_public = await make_series(api, bob, bobs["id"])

    assert await walk_ids(api, "/v1/series", alice, limit=2) == made
    assert bobs_public["id"] not in await walk_ids(api, "/v1/series", alice, limit=100)
    assert await walk_ids(api, "/v1/series", bob) == [bobs_public["id"]]

    # Series in an organization the caller administers are listed too.
    org, owner, admin, member = await org_with(live_server, make_user)
    org_profile = await new_profile(api, owner, organization_id=org)
    org_series = await make_series(api, owner, org_profile["id"])
    assert await walk_ids(api, "/v1/series", admin) == [org_series["id"]]
    assert await walk_ids(api, "/v1/series", member) == []


async def test_series_list_cursor_survives_inserts_and_is_bound_to_its_list(api: Any, make_user: Any) -> None:
    alice, bob = await make_user(), await make_user()
    profile = await new_profile(api, alice)
    made = [(await make_series(api, alice, profile["id"]))["id"] for _ in range(3)]
    status, page, _ = await api.get("/v1/series", alice, params={"limit": "2"})
    assert status == 200 and [s["id"] for s in page["data"]] == made[:2] and page["has_more"]
    made.append((await make_series(api, alice, profile["id"]))["id"])
    status, rest, _ = await api.get("/v1/series", alice, params={"limit": "2", "cursor": page["next_cursor"]})
    assert status == 200 and [s["id"] for s in rest["data"]] == made[2:]
    assert rest["has_more"] is False and rest["next_cursor"] is None

    # Another list's (or caller's) cursor is refused.
    status, error, _ = await api.get("/v1/series", bob, params={"cursor": page["next_cursor"]})
    assert_error(status, error, 400, "invalid_cursor", param="cursor")
    status, error, _ = await api.get(f"/v1/profiles/{profile['id']}/series", alice,
                                     params={"cursor": page["next_cursor"]})
    assert_error(status, error, 400, "invalid_cursor", param="cursor")
    for bad in ("0", "101", "x"):
        status, error, _ = await api.get("/v1/series", alice, params={"limit": bad})
        assert_error(status, error, 400, "invalid_query_parameter", param="limit")


async def test_profile_series_list_shows_what_the_caller_may_see(api: Any, make_user: Any) -> None:
    owner, stranger = await make_user(), await make_user()
    profile = await new_profile(api, owner)
    public = [await make_series(api, owner, profile["id"]) for _ in range(2)]
    hidden = await make_series(api, owner, profile["id"], is_private=True)
    public.append(await make_series(api, owner, profile["id"]))
    path = f"/v1/profiles/{profile['id']}/series"

    assert await walk_ids(api, path, stranger, limit=1) == [s["id"] for s in public]
    assert await walk_ids(api, path, owner, limit=2) == [public[0]["id"], public[1]["id"], hidden["id"], public[2]["id"]]
    status, page, _ = await api.get(path, stranger)
    assert status == 200
    assert all(set(s) == SERIES_KEYS for s in page["data"])
    assert page["data"][0] == public[0]


async def test_a_private_profiles_series_list_is_404_for_strangers(api: Any, make_user: Any) -> None:
    owner, stranger = await make_user(), await make_user()
    profile = await new_profile(api, owner, is_private=True)
    series = await make_series(api, owner, profile["id"])
    path = f"/v1/profiles/{profile['id']}/series"
    status, error, _ = await api.get(path, stranger)
    assert_error(status, error, 404, "resource_not_found")
    assert await walk_ids(api, path, owner) == [series["id"]]
    # The series of a private profile is not visible on its own either.
    status, error, _ = await api.get(f"/v1/series/{series['id']}", stranger)
    assert_error(status, error, 404, "resource_not_found")


# --- retrieve ---------------------------------------------------------------


async def test_retrieve_follows_visibility(api: Any, make_user: Any) -> None:
    owner, stranger = await make_user(), await make_user()
    profile = await new_profile(api, owner)
    public = await make_series(api, owner, profile["id"])
    private = await make_series(api, owner, profile["id"], is_private=True)

    status, fetched, _ = await api.get(f"/v1/series/{public['id']}", stranger)
    assert (status, fetched) == (200, public)
    status, fetched, _ = await api.get(f"/v1/series/{public['id'].upper()}", stranger)
    assert (status, fetched) == (200, public)
    status, error, _ = await api.get(f"/v1/series/{private['id']}", stranger)
    assert_error(status, error, 404, "resource_not_found")
    assert (await api.get(f"/v1/series/{private['id']}", owner))[1] == private

    status, error, _ = await api.get(f"/v1/series/{MISSING_SERIES}", owner)
    assert_error(status, error, 404, "resource_not_found")
    for bad in ("season", "prf_" + "0" * 32, "ser_" + "0" * 31):
        status, error, _ = await api.get(f"/v1/series/{bad}", owner)
        assert_error(status, error, 400, "invalid_id", param="series_id")


async def test_a_deleted_profiles_series_stays_for_its_owner_only(api: Any, make_user: Any) -> None:
    owner, stranger = await make_user(), await make_user()
    profile = await new_profile(api, owner)
    series = await make_series(api, owner, profile["id"])
    assert (await api.delete(f"/v1/profiles/{profile['id']}", owner))[0] == 204

    status, error, _ = await api.get(f"/v1/series/{series['id']}", stranger)
    assert_error(status, error, 404, "resource_not_found")
    status, fetched, _ = await api.get(f"/v1/series/{series['id']}", owner)
    assert status == 200
    assert fetched == {**series, "profile_id": None}


# --- update -----------------------------------------------------------------


async def test_update_changes_what_is_sent(api: Any, user: Any) -> None:
    profile = await new_profile(api, user)
    series = await make_series(api, user, profile["id"], description="keep me")
    path = f"/v1/series/{series['id']}"

    status, same, _ = await api.patch(path, user, json={})
    assert (status, same) == (200, series)

    status, changed, _ = await api.patch(path, user, json={"name": "Renamed", "slug": "renamed", "is_private": True})
    assert status == 200, changed
    assert set(changed) == SERIES_KEYS
    assert changed["name"] == "Renamed" and changed["slug"] == "renamed" and changed["is_private"] is True
    assert changed["description"] == "keep me"
    assert changed["created_at"] == series["created_at"] and changed["id"] == series["id"]
    assert changed["updated_at"] >= series["updated_at"]
    assert (await api.get(path, user))[1] == changed

    status, cleared, _ = await api.patch(path, user, json={"description": None})
    assert status == 200 and cleared["description"] is None and cleared["name"] == "Renamed"

    # A series may change the case of its own slug.
    status, recased, _ = await api.patch(path, user, json={"slug": "RENAMED"})
    assert status == 200 and recased["slug"] == "RENAMED"


async def test_update_slug_conflict_changes_nothing(api: Any, user: Any) -> None:
    profile = await new_profile(api, user)
    taken = await make_series(api, user, profile["id"], slug="taken")
    series = await make_series(api, user, profile["id"], slug="mine")
    path = f"/v1/series/{series['id']}"
    status, error, _ = await api.patch(path, user, json={"name": "New name", "slug": "TAKEN"})
    assert_error(status, error, 409, "conflict", param="slug")
    assert (await api.get(path, user))[1] == series
    assert (await api.get(f"/v1/series/{taken['id']}", user))[1] == taken

    # The slug of a series of another profile is no conflict.
    other = await new_profile(api, user)
    elsewhere = await make_series(api, user, other["id"], slug="elsewhere")
    status, changed, _ = await api.patch(path, user, json={"slug": "elsewhere"})
    assert status == 200 and changed["slug"] == "elsewhere"
    assert (await api.get(f"/v1/series/{elsewhere['id']}", user))[1] == elsewhere


@pytest.mark.parametrize(
    ("body", "code", "param"),
    [
        ({"name": None}, "invalid_field", "name"),
        ({"name": ""}, "invalid_field", "name"),
        ({"slug": None}, "invalid_field", "slug"),
        ({"slug": "no/slash"}, "invalid_field", "slug"),
        ({"is_private": None}, "invalid_field", "is_private"),
        ({"profile_id": "prf_" + "1" * 32}, "unknown_field", "profile_id"),
    ],
)
async def test_bad_updates_change_nothing(api: Any, user: Any, body: dict[str, Any], code: str, param: str) -> None:
    profile = await new_profile(api, user)
    series = await make_series(api, user, profile["id"])
    path = f"/v1/series/{series['id']}"
    status, error, _ = await api.patch(path, user, json=body)
    assert_error(status, error, 400, code, param=param)
    assert (await api.get(path, user))[1] == series


async def test_update_by_a_stranger_is_404(api: Any, make_user: Any) -> None:
    owner, stranger = await make_user(), await make_user()
    profile = await new_profile(api, owner)
    series = await make_series(api, owner, profile["id"])
    path = f"/v1/series/{series['id']}"
    status, error, _ = await api.patch(path, stranger, json={"name": "Hijacked"})
    assert_error(status, error, 404, "resource_not_found")
    assert (await api.get(path, owner))[1] == series
    status, error, _ = await api.patch(f"/v1/series/{MISSING_SERIES}", owner, json={"name": "x"})
    assert_error(status, error, 404, "resource_not_found")


# --- membership -------------------------------------------------------------


async def test_link_is_204_and_idempotent(api: Any, user: Any) -> None:
    profile = await new_profile(api, user)
    series = await make_series(api, user, profile["id"])
    event = await new_event(api, user, profile)
    status, body, _ = await api.post(f"/v1/series/{series['id']}/events", user, json={"event_id": event["id"]})
    assert (status, body) == (204, None)
    # Linking again (even with an upper-case ID) is a no-op.
    status, body, _ = await api.post(f"/v1/series/{series['id']}/events", user,
                                     json={"event_id": event["id"].upper()})
    assert (status, body) == (204, None)
    status, page, _ = await api.get(f"/v1/series/{series['id']}/events", user)
    assert status == 200
    assert page["data"] == [event]
    assert page["has_more"] is False and page["next_cursor"] is None


async def test_an_event_may_be_in_several_series(api: Any, user: Any) -> None:
    profile = await new_profile(api, user)
    first, second = await make_series(api, user, profile["id"]), await make_series(api, user, profile["id"])
    event = await new_event(api, user, profile)
    await link(api, user, first["id"], event["id"])
    await link(api, user, second["id"], event["id"])
    assert await event_ids(api, first["id"], user) == [event["id"]]
    assert await event_ids(api, second["id"], user) == [event["id"]]


async def test_link_an_event_of_another_profile_is_invalid(api: Any, user: Any) -> None:
    profile, other = await new_profile(api, user), await new_profile(api, user)
    series = await make_series(api, user, profile["id"])
    foreign = await new_event(api, user, other)
    status, error, _ = await api.post(f"/v1/series/{series['id']}/events", user, json={"event_id": foreign["id"]})
    err = assert_error(status, error, 400, "invalid_field", param="event_id")
    assert err["type"] == "invalid_request_error"
    assert await event_ids(api, series["id"], user) == []


async def test_link_across_users_is_404(api: Any, make_user: Any) -> None:
    alice, bob = await make_user(), await make_user()
    alices_profile, bobs_profile = await new_profile(api, alice), await new_profile(api, bob)
    alices_series = await make_series(api, alice, alices_profile["id"])
    alices_event = await new_event(api, alice, alices_profile)
    bobs_series = await make_series(api, bob, bobs_profile["id"])
    bobs_event = await new_event(api, bob, bobs_profile)

    # Bob's public event into Alice's series.
    status, error, _ = await api.post(f"/v1/series/{alices_series['id']}/events", alice,
                                      json={"event_id": bobs_event["id"]})
    assert_error(status, error, 404, "resource_not_found", param="event_id")
    # Alice's event into Bob's public series.
    status, error, _ = await api.post(f"/v1/series/{bobs_series['id']}/events", alice,
                                      json={"event_id": alices_event["id"]})
    assert_error(status, error, 404, "resource_not_found")
    # Bob's event into Bob's series, by Alice.
    status, error, _ = await api.post(f"/v1/series/{bobs_series['id']}/events", alice,
                                      json={"event_id": bobs_event["id"]})
    assert_error(status, error, 404, "resource_not_found")
    status, error, _ = await api.post(f"/v1/series/{alices_series['id']}/events", alice,
                                      json={"event_id": MISSING_EVENT})
    assert_error(status, error, 404, "resource_not_found", param="event_id")
    assert await event_ids(api, alices_series["id"], alice) == []
    assert await event_ids(api, bobs_series["id"], bob) == []


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({}, "missing_field"),
        ({"event_id": "prf_" + "1" * 32}, "invalid_id"),
        ({"event_id": "concert"}, "invalid_id"),
        ({"event_id": "evt_" + "1" * 31}, "invalid_id"),
        ({"event_id": None}, "invalid_id"),
    ],
)
async def test_link_body_errors(api: Any, user: Any, body: dict[str, Any], code: str) -> None:
    profile = await new_profile(api, user)
    series = await make_series(api, user, profile["id"])
    status, error, _ = await api.post(f"/v1/series/{series['id']}/events", user, json=body)
    assert_error(status, error, 400, code, param="event_id")


async def test_link_unknown_field_and_bad_series_id(api: Any, user: Any) -> None:
    profile = await new_profile(api, user)
    series = await make_series(api, user, profile["id"])
    event = await new_event(api, user, profile)
    status, error, _ = await api.post(f"/v1/series/{series['id']}/events", user,
                                      json={"event_id": event["id"], "position": 1})
    assert_error(status, error, 400, "unknown_field", param="position")
    status, error, _ = await api.post("/v1/series/season/events", user, json={"event_id": event["id"]})
    assert_error(status, error, 400, "invalid_id", param="series_id")
    status, error, _ = await api.post(f"/v1/series/{MISSING_SERIES}/events", user, json={"event_id": event["id"]})
    assert_error(status, error, 404, "resource_not_found")
    assert await event_ids(api, series["id"], user) == []


async def test_remove_unlinks_only(api: Any, user: Any) -> None:
    profile = await new_profile(api, user)
    series, other = await make_series(api, user, profile["id"]), await make_series(api, user, profile["id"])
    kept = await new_event(api, user, profile, title="Kept", start_time="2031-05-07T10:00")
    removed = await new_event(api, user, profile, title="Removed", start_time="2031-05-06T10:00")
    for event in (kept, removed):
        await link(api, user, series["id"], event["id"])
    await link(api, user, other["id"], removed["id"])

    status, body, _ = await api.delete(f"/v1/series/{series['id']}/events/{removed['id'].upper()}", user)
    assert (status, body) == (204, None)
    status, fetched, _ = await api.get(f"/v1/events/{removed['id']}", user)
    assert (status, fetched) == (200, removed)
    assert await event_ids(api, series["id"], user) == [kept["id"]]
    assert await event_ids(api, other["id"], user) == [removed["id"]]

    # Not (or no longer) in the series: 404, nothing changes.
    status, error, _ = await api.delete(f"/v1/series/{series['id']}/events/{removed['id']}", user)
    assert_error(status, error, 404, "resource_not_found")
    status, error, _ = await api.delete(f"/v1/series/{series['id']}/events/{MISSING_EVENT}", user)
    assert_error(status, error, 404, "resource_not_found")
    status, error, _ = await api.delete(f"/v1/series/{series['id']}/events/concert", user)
    assert_error(status, error, 400, "invalid_id", param="event_id")
    assert await event_ids(api, series["id"], user) == [kept["id"]]


async def test_remove_by_a_stranger_is_404(api: Any, make_user: Any) -> None:
    owner, stranger = await make_user(), await make_user()
    series, event = await _series_of_one_event(api, owner)
    status, error, _ = await api.delete(f"/v1/series/{series['id']}/events/{event['id']}", stranger)
    assert_error(status, error, 404, "resource_not_found")
    assert await event_ids(api, series["id"], owner) == [event["id"]]


async def test_deleting_an_event_takes_it_out_of_its_series(api: Any, user: Any) -> None:
    profile = await new_profile(api, user)
    series = await make_series(api, user, profile["id"])
    gone = await new_event(api, user, profile, title="Gone")
    stays = await new_event(api, user, profile, title="Stays", start_time="2031-06-01T10:00")
    for event in (gone, stays):
        await link(api, user, series["id"], event["id"])
    assert (await api.delete(f"/v1/events/{gone['id']}", user))[0] == 204
    assert await event_ids(api, series["id"], user) == [stays["id"]]
    assert (await api.get(f"/v1/series/{series['id']}/deletion-preview", user))[1]["member_count"] == 1


# --- the series' events -------------------------------------------------------


async def test_series_events_are_ordered_by_start_time_then_id(api: Any, user: Any) -> None:
    profile = await new_profile(api, user)
    series = await make_series(api, user, profile["id"])
    late = await new_event(api, user, profile, title="Late", start_time="2031-09-01T20:00")
    early = await new_event(api, user, profile, title="Early", start_time="2031-03-01T09:00")
    tie_a = await new_event(api, user, profile, title="Tie A", start_time="2031-06-01T18:00")
    tie_b = await new_event(api, user, profile, title="Tie B", start_time="2031-06-01T18:00")
    # Same instant written in another zone: 18:00 in Paris is 17:00 in London (BST).
    tie_c = await new_event(api, user, profile, title="Tie C", start_time="2031-06-01T17:00",
                            start_timezone="Europe/London")
    unlinked = await new_event(api, user, profile, title="Not in it", start_time="2031-04-01T09:00")
    for event in (tie_b, late, tie_c, early, tie_a):
        await link(api, user, series["id"], event["id"])

    ties = sorted([tie_a["id"], tie_b["id"], tie_c["id"]])
    expected = [early["id"], *ties, late["id"]]
    assert await event_ids(api, series["id"], user) == expected
    assert await walk_ids(api, f"/v1/series/{series['id']}/events", user, limit=2) == expected
    assert unlinked["id"] not in expected

    status, page, _ = await api.get(f"/v1/series/{series['id']}/events", user, params={"limit": "2"})
    assert status == 200 and page["has_more"] is True
    # Cursors belong to their list.
    other = await make_series(api, user, profile["id"])
    status, error, _ = await api.get(f"/v1/series/{other['id']}/events", user, params={"cursor": page["next_cursor"]})
    assert_error(status, error, 400, "invalid_cursor", param="cursor")
    status, error, _ = await api.get(f"/v1/series/{series['id']}/events", user, params={"cursor": "garbage"})
    assert_error(status, error, 400, "invalid_cursor", param="cursor")


async def test_series_events_show_only_visible_events(api: Any, make_user: Any) -> None:
    owner, stranger = await make_user(), await make_user()
    profile = await new_profile(api, owner)
    series = await make_series(api, owner, profile["id"])
    public = await new_event(api, owner, profile, title="Public", start_time="2031-05-06T10:00")
    private = await new_event(api, owner, profile, title="Private", start_time="2031-05-05T10:00",
                              is_private=True)
    for event in (public, private):
        await link(api, owner, series["id"], event["id"])
    assert await event_ids(api, series["id"], stranger) == [public["id"]]
    assert await event_ids(api, series["id"], owner) == [private["id"], public["id"]]

    hidden = await make_series(api, owner, profile["id"], is_private=True)
    await link(api, owner, hidden["id"], public["id"])
    status, error, _ = await api.get(f"/v1/series/{hidden['id']}/events", stranger)
    assert_error(status, error, 404, "resource_not_found")
    status, error, _ = await api.get(f"/v1/series/{MISSING_SERIES}/events", owner)
    assert_error(status, error, 404, "resource_not_found")


# --- deletion preview and deletion -------------------------------------------


async def mixed_series(api: Any, user: Any) -> dict[str, Any]:
    """A series with two exclusive events (one recurring) and three shared ones
    (two recurring), plus a second and third series and an event outside it."""
    profile = await new_profile(api, user)
    pid = profile["id"]
    target = await make_series(api, user, pid, name="Spring season")
    second = await make_series(api, user, pid)
    third = await make_series(api, user, pid)
    weekly = {"recurrence_rule": "FREQ=WEEKLY;COUNT=5"}
    ev = {
        "exclusive": await new_event(api, user, profile, title="Exclusive",
                                     start_time="2031-05-01T10:00"),
        "exclusive_recurring": await new_event(api, user, profile, title="Exclusive weekly",
                                               start_time="2031-05-02T10:00", **weekly),
        "shared": await new_event(api, user, profile, title="Shared", start_time="2031-05-03T10:00"),
        "shared_recurring": await new_event(api, user, profile, title="Shared weekly",
                                            start_time="2031-05-04T10:00", **weekly),
        "shared_twice_recurring": await new_event(api, user, profile, title="Shared twice",
                                                  start_time="2031-05-05T10:00",
                                                  recurrence_rule="FREQ=DAILY;COUNT=3"),
        "second_only": await new_event(api, user, profile, title="Second only",
                                       start_time="2031-05-06T10:00", **weekly),
        "loose": await new_event(api, user, profile, title="In no series",
                                 start_time="2031-05-07T10:00"),
    }
    for name in ("exclusive", "exclusive_recurring", "shared", "shared_recurring", "shared_twice_recurring"):
        await link(api, user, target["id"], ev[name]["id"])
    for name in ("shared", "shared_recurring", "shared_twice_recurring", "second_only"):
        await link(api, user, second["id"], ev[name]["id"])
    await link(api, user, third["id"], ev["shared_twice_recurring"]["id"])
    return {"profile": profile, "target": target, "second": second, "third": third, "events": ev}


EXPECTED_PREVIEW = {
    "series_name": "Spring season", "member_count": 5, "exclusive_count": 2, "shared_count": 3,
    "member_recurring_count": 3, "exclusive_recurring_count": 1, "shared_recurring_count": 2,
}


async def all_events_exist(api: Any, user: Any, events: dict[str, Any]) -> None:
    for event in events.values():
        status, fetched, _ = await api.get(f"/v1/events/{event['id']}", user)
        assert status == 200 and fetched["id"] == event["id"], fetched


async def test_deletion_preview_counts_and_changes_nothing(api: Any, user: Any) -> None:
    world = await mixed_series(api, user)
    target = world["target"]
    before = await event_ids(api, target["id"], user)
    status, preview, _ = await api.get(f"/v1/series/{target['id']}/deletion-preview", user)
    assert status == 200, preview
    assert set(preview) == PREVIEW_KEYS
    assert preview == EXPECTED_PREVIEW
    # Twice, and nothing moved.
    assert (await api.get(f"/v1/series/{target['id']}/deletion-preview", user))[1] == EXPECTED_PREVIEW
    assert (await api.get(f"/v1/series/{target['id']}", user))[1] == target
    assert await event_ids(api, target["id"], user) == before
    await all_events_exist(api, user, world["events"])

    # The second series: four members, one exclusive (recurring), three shared (two recurring).
    status, preview, _ = await api.get(f"/v1/series/{world['second']['id']}/deletion-preview", user)
    assert status == 200
    assert {k: v for k, v in preview.items() if k != "series_name"} == {
        "member_count": 4, "exclusive_count": 1, "shared_count": 3,
        "member_recurring_count": 3, "exclusive_recurring_count": 1, "shared_recurring_count": 2,
    }


async def test_deletion_preview_of_an_empty_series(api: Any, user: Any) -> None:
    profile = await new_profile(api, user)
    series = await make_series(api, user, profile["id"], name="Empty")
    status, preview, _ = await api.get(f"/v1/series/{series['id']}/deletion-preview", user)
    assert status == 200
    assert preview == {"series_name": "Empty", **{k: 0 for k in PREVIEW_KEYS - {"series_name"}}}


async def test_deletion_preview_is_for_administrators(api: Any, make_user: Any) -> None:
    owner, stranger = await make_user(), await make_user()
    profile = await new_profile(api, owner)
    series = await make_series(api, owner, profile["id"])
    status, error, _ = await api.get(f"/v1/series/{series['id']}/deletion-preview", stranger)
    assert_error(status, error, 404, "resource_not_found")
    status, error, _ = await api.get(f"/v1/series/{MISSING_SERIES}/deletion-preview", owner)
    assert_error(status, error, 404, "resource_not_found")
    status, error, _ = await api.get("/v1/series/season/deletion-preview", owner)
    assert_error(status, error, 400, "invalid_id", param="series_id")


async def test_delete_without_cascade_keeps_every_event(api: Any, user: Any) -> None:
    world = await mixed_series(api, user)
    target, events = world["target"], world["events"]
    second_before = await event_ids(api, world["second"]["id"], user)
    status, body, _ = await api.delete(f"/v1/series/{target['id']}", user)
    assert status == 200, body
    assert body == {"member_count": 5, "deleted_event_count": 0, "preserved_event_count": 5}
    await all_events_exist(api, user, events)
    assert await event_ids(api, world["second"]["id"], user) == second_before

    for path in (f"/v1/series/{target['id']}", f"/v1/series/{target['id']}/events",
                 f"/v1/series/{target['id']}/deletion-preview"):
        status, error, _ = await api.get(path, user)
        assert_error(status, error, 404, "resource_not_found")
    status, error, _ = await api.delete(f"/v1/series/{target['id']}", user)
    assert_error(status, error, 404, "resource_not_found")
    assert target["id"] not in await walk_ids(api, f"/v1/profiles/{world['profile']['id']}/series", user)
    assert target["id"] not in await walk_ids(api, "/v1/series", user, limit=100)


async def test_delete_with_cascade_deletes_exactly_the_exclusive_events(api: Any, user: Any) -> None:
    world = await mixed_series(api, user)
    target, events = world["target"], world["events"]
    second_before = await event_ids(api, world["second"]["id"], user)
    third_before = await event_ids(api, world["third"]["id"], user)
    _, preview, _ = await api.get(f"/v1/series/{target['id']}/deletion-preview", user)

    status, body, _ = await api.delete(f"/v1/series/{target['id']}", user,
                                       params={"cascade_exclusive_events": "true"})
    assert status == 200, body
    assert body == {"member_count": 5, "deleted_event_count": 2, "preserved_event_count": 3}
    assert body == {"member_count": preview["member_count"],
                    "deleted_event_count": preview["exclusive_count"],
                    "preserved_event_count": preview["shared_count"]}

    for name in ("exclusive", "exclusive_recurring"):
        status, error, _ = await api.get(f"/v1/events/{events[name]['id']}", user)
        assert_error(status, error, 404, "resource_not_found")
    await all_events_exist(api, user, {k: v for k, v in events.items()
                                       if k not in ("exclusive", "exclusive_recurring")})
    assert await event_ids(api, world["second"]["id"], user) == second_before
    assert await event_ids(api, world["third"]["id"], user) == third_before
    status, error, _ = await api.get(f"/v1/series/{target['id']}", user)
    assert_error(status, error, 404, "resource_not_found")


async def test_delete_cascade_false_is_the_default(api: Any, user: Any) -> None:
    series, event = await _series_of_one_event(api, user)
    status, body, _ = await api.delete(f"/v1/series/{series['id']}", user,
                                       params={"cascade_exclusive_events": "false"})
    assert status == 200
    assert body == {"member_count": 1, "deleted_event_count": 0, "preserved_event_count": 1}
    assert (await api.get(f"/v1/events/{event['id']}", user))[0] == 200


async def test_refused_deletes_change_nothing(api: Any, make_user: Any) -> None:
    owner, stranger = await make_user(), await make_user()
    series, event = await _series_of_one_event(api, owner)
    path = f"/v1/series/{series['id']}"

    status, error, _ = await api.delete(path, stranger, params={"cascade_exclusive_events": "true"})
    assert_error(status, error, 404, "resource_not_found")
    status, error, _ = await api.delete(path, owner, params={"cascade_exclusive_events": "maybe"})
    assert_error(status, error, 400, "invalid_query_parameter", param="cascade_exclusive_events")
    status, error, _ = await api.delete(path, owner, params={"cascade": "true"})
    assert_error(status, error, 400, "invalid_query_parameter", param="cascade")
    status, error, _ = await api.delete(f"/v1/series/{MISSING_SERIES}", owner)
    assert_error(status, error, 404, "resource_not_found")
    status, error, _ = await api.delete("/v1/series/season", owner)
    assert_error(status, error, 400, "invalid_id", param="series_id")

    assert (await api.get(path, owner))[1] == series
    assert await event_ids(api, series["id"], owner) == [event["id"]]
    assert (await api.get(f"/v1/events/{event['id']}", owner))[0] == 200


# --- races ------------------------------------------------------------------


async def test_links_racing_a_delete_are_204_or_404(api: Any, user: Any) -> None:
    profile = await new_profile(api, user)
    events = [await new_event(api, user, profile, title=f"E{i}", start_time=f"2031-05-{i + 1:02d}T10:00")
              for i in range(12)]
    for _ in range(5):
        series = await make_series(api, user, profile["id"])
        path = f"/v1/series/{series['id']}/events"
        results = await asyncio.gather(
            *(api.post(path, user, json={"event_id": e["id"]}) for e in events[:6]),
            api.delete(f"/v1/series/{series['id']}", user),
            *(api.post(path, user, json={"event_id": e["id"]}) for e in events[6:]),
        )
        deleted = results[6]
        assert deleted[0] == 200, deleted[1]
        links = results[:6] + results[7:]
        for status, body, _ in links:
            if status != 204:
                assert_error(status, body, 404, "resource_not_found")
        # Every link that succeeded before the delete is counted in it.
        assert deleted[1]["member_count"] <= sum(1 for s, _, _ in links if s == 204)


async def test_cascade_spares_an_event_linked_elsewhere_meanwhile(
    api: Any, user: Any, database_url: str
) -> None:
    """A link into another series that commits while the cascade waits makes
    the event shared: it must survive."""
    profile = await new_profile(api, user)
    target, other = await make_series(api, user, profile["id"]), await make_series(api, user, profile["id"])
    event = await new_event(api, user, profile)
    await link(api, user, target["id"], event["id"])

    conn = await asyncpg.connect(database_url)
    try:
        tx = conn.transaction()
        await tx.start()
        await conn.execute("INSERT INTO series_events (series_id, event_id) VALUES ($1, $2)",
                           other["id"], event["id"])
        deleting = asyncio.ensure_future(api.delete(f"/v1/series/{target['id']}", user,
                                                    params={"cascade_exclusive_events": "true"}))
        # Wait until the delete is blocked on the link's lock, then commit the link.
        for _ in range(200):
            waiting = await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"
            )
            if waiting or deleting.done():
                break
            await asyncio.sleep(0.02)
        await tx.commit()
        status, body, _ = await deleting
    finally:
        await conn.close()
    assert status == 200, body
    assert body == {"member_count": 1, "deleted_event_count": 0, "preserved_event_count": 1}
    assert (await api.get(f"/v1/events/{event['id']}", user))[0] == 200
    assert await event_ids(api, other["id"], user) == [event["id"]]
