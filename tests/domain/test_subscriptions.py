"""Subscriptions per docs/api-choices.md, "Subscriptions and sync": subscribe,
re-subscribe, pause, unsubscribe with its cleanup, consolidation, targets, and the background sync
that keeps the subscriber's default calendar in step with the source.

Sync runs in the service's own job worker; the tests wait (a few seconds at
most) for its result to show through the calendar API, as a client would.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any

import asyncpg
import pytest
from conftest import (
    assert_error,
    handle,
    insert_connected_calendar,
    new_event,
    new_profile,
    poll_until,
    walk,
)

from db import sync as sync_store
from db.database import Tx
from domain import ids

SUB_KEYS = {"id", "profile_id", "series_id", "subscription_type", "is_active", "access_valid",
            "include_personal_calendar", "created_at", "updated_at"}
SYNC_SECONDS = 15


eventually = functools.partial(poll_until, seconds=SYNC_SECONDS)
"""Poll until `check()` holds; fail after SYNC_SECONDS."""


async def copies(api: Any, user: Any) -> dict[str, dict[str, Any]]:
    """The subscriber's default-calendar events, by title."""
    items = await walk(api, f"/v1/calendars/{user.calendar_id}/events", user)
    return {item["title"]: item for item in items}


async def until_titles(api: Any, user: Any, expected: set[str], among: set[str]) -> dict[str, Any]:
    """Wait until exactly `expected` of the titles `among` are in the calendar."""
    found: dict[str, Any] = {}

    async def check() -> bool:
        nonlocal found
        found = await copies(api, user)
        return {t for t in found if t in among} == expected

    await eventually(check, f"calendar titles {sorted(expected)}")
    return found


async def subscribe(api: Any, user: Any, expected: int = 201, **body: Any) -> dict[str, Any]:
    status, created, headers = await api.post("/v1/subscriptions", user, json=body)
    assert status == expected, created
    assert set(created) == SUB_KEYS
    if expected == 201:
        assert headers["Location"] == f"/v1/subscriptions/{created['id']}"
    return created  # type: ignore[no-any-return]


async def sql(live_server: Any, method: str, query: str, *args: Any) -> Any:
    """A statement through the service's own pool, on the service's loop."""
    return await asyncio.to_thread(live_server.call, getattr(live_server.db, method)(query, *args))


async def publisher(api: Any, make_user: Any, **profile: Any) -> tuple[Any, dict[str, Any]]:
    owner = await make_user()
    return owner, await new_profile(api, owner, **profile)


async def _one_event_synced(api: Any, make_user: Any, subscription_type: str = "profile"
                            ) -> tuple[Any, dict[str, Any], dict[str, Any], Any, dict[str, Any]]:
    """A publisher's profile with one event titled with a fresh tag, and a fan subscribed to
    the profile (or to a series of it that has the event) once the copy is in the fan's
    calendar: (owner, profile, event, fan, subscription)."""
    owner, profile = await publisher(api, make_user)
    event = await new_event(api, owner, profile, title=handle("t"))
    target = {"profile_id": profile["id"]}
    if subscription_type == "series":
        series = await _series(api, owner, profile)
        await _link(api, owner, series, event)
        target = {"series_id": series["id"]}
    fan = await make_user()
    sub = await subscribe(api, fan, subscription_type=subscription_type, **target)
    await until_titles(api, fan, {event["title"]}, {event["title"]})
    return owner, profile, event, fan, sub


async def _cut_off(api: Any, fan: Any, sub: dict[str, Any], tag: str, source: str
                   ) -> dict[str, Any]:
    """Once the copy of `tag` has left the fan's calendar: the subscription, its access
    invalid and its `source` (profile_id, series_id) gone."""
    await until_titles(api, fan, set(), {tag})
    status, got, _ = await api.get(f"/v1/subscriptions/{sub['id']}", fan)
    assert status == 200, got
    assert (got["access_valid"], got[source]) == (False, None)
    return got  # type: ignore[no-any-return]


# --- subscribe and sync ---------------------------------------------------------


async def test_a_profile_subscription_copies_the_visible_events(api: Any, make_user: Any) -> None:
    owner, profile = await publisher(api, make_user)
    tag = handle("t")
    public = await new_event(api, owner, profile, title=f"{tag} public", location="Hall",
                             end_time="2031-05-06T12:00", end_timezone="Europe/Paris",
                             transparency="transparent")
    await new_event(api, owner, profile, title=f"{tag} private", is_private=True)
    fan = await make_user()
    sub = await subscribe(api, fan, subscription_type="profile", profile_id=profile["id"])
    assert sub["profile_id"] == profile["id"] and sub["series_id"] is None
    assert sub["subscription_type"] == "profile"
    assert (sub["is_active"], sub["access_valid"], sub["include_personal_calendar"]) == (True, True, True)

    found = await until_titles(api, fan, {f"{tag} public"}, {f"{tag} public", f"{tag} private"})
    copy = found[f"{tag} public"]
    assert copy["calendar_id"] == fan.calendar_id
    assert copy["id"].startswith("cev_")
    for key in ("location", "start_time", "end_time", "start_timezone", "end_timezone",
                "is_all_day", "recurrence_rule", "transparency", "description"):
        assert copy[key] == public[key], key
    assert copy["status"] == "confirmed"


async def test_synced_copies_are_read_only(api: Any, make_user: Any) -> None:
    _, _, event, fan, _ = await _one_event_synced(api, make_user)
    tag = event["title"]
    copy = (await copies(api, fan))[tag]
    path = f"/v1/calendars/{fan.calendar_id}/events/{copy['id']}"
    status, body, _ = await api.patch(path, fan, json={"title": "Mine now"})
    assert_error(status, body, 409, "calendar_event_read_only")
    status, body, _ = await api.delete(path, fan)
    assert_error(status, body, 409, "calendar_event_read_only")
    assert (await copies(api, fan))[tag]["title"] == tag


async def test_changes_at_the_source_reach_the_copies(api: Any, make_user: Any) -> None:
    owner, profile = await publisher(api, make_user)
    tag = handle("t")
    first = await new_event(api, owner, profile, title=f"{tag} a")
    second = await new_event(api, owner, profile, title=f"{tag} b")
    fan = await make_user()
    await subscribe(api, fan, subscription_type="profile", profile_id=profile["id"])
    among = {f"{tag} {x}" for x in ("a", "b", "c", "a2")}
    await until_titles(api, fan, {f"{tag} a", f"{tag} b"}, among)

    # new
    await new_event(api, owner, profile, title=f"{tag} c")
    await until_titles(api, fan, {f"{tag} a", f"{tag} b", f"{tag} c"}, among)
    # updated: title and time
    status, body, _ = await api.patch(f"/v1/events/{first['id']}", owner, json={
        "title": f"{tag} a2", "start_time": "2031-07-01T09:30", "start_timezone": "America/New_York"})
    assert status == 200, body
    found = await until_titles(api, fan, {f"{tag} a2", f"{tag} b", f"{tag} c"}, among)
    assert found[f"{tag} a2"]["start_time"] == "2031-07-01T13:30:00Z"
    assert found[f"{tag} a2"]["start_timezone"] == "America/New_York"
    # cancelled: the copy stays, cancelled
    status, body, _ = await api.post(f"/v1/events/{second['id']}/cancel", owner, json={})
    assert status == 200, body

    async def cancelled() -> bool:
        return bool((await copies(api, fan))[f"{tag} b"]["status"] == "cancelled")

    await eventually(cancelled, "copy cancelled")
    # rescheduled: confirmed again
    status, body, _ = await api.post(f"/v1/events/{second['id']}/reschedule", owner, json={
        "start_time": "2031-08-01T10:00", "start_timezone": "Europe/Paris"})
    assert status == 200, body

    async def confirmed() -> bool:
        copy = (await copies(api, fan))[f"{tag} b"]
        return copy["status"] == "confirmed" and copy["start_time"] == "2031-08-01T08:00:00Z"

    await eventually(confirmed, "copy rescheduled")
    # deleted
    status, _, _ = await api.delete(f"/v1/events/{first['id']}", owner)
    assert status == 204
    await until_titles(api, fan, {f"{tag} b", f"{tag} c"}, among)


async def test_an_event_made_private_leaves_the_calendar(api: Any, make_user: Any) -> None:
    owner, _, event, fan, _ = await _one_event_synced(api, make_user)
    tag = event["title"]
    await api.patch(f"/v1/events/{event['id']}", owner, json={"is_private": True})
    await until_titles(api, fan, set(), {tag})
    await api.patch(f"/v1/events/{event['id']}", owner, json={"is_private": False})
    await until_titles(api, fan, {tag}, {tag})


async def test_a_profile_made_private_invalidates_access(api: Any, make_user: Any) -> None:
    owner, profile, event, fan, sub = await _one_event_synced(api, make_user)
    tag = event["title"]

    status, body, _ = await api.patch(f"/v1/profiles/{profile['id']}", owner, json={"is_private": True})
    assert status == 200, body
    got = await _cut_off(api, fan, sub, tag, "profile_id")
    assert got["subscription_type"] == "profile"

    await api.patch(f"/v1/profiles/{profile['id']}", owner, json={"is_private": False})
    await until_titles(api, fan, {tag}, {tag})
    status, got, _ = await api.get(f"/v1/subscriptions/{sub['id']}", fan)
    assert (got["access_valid"], got["profile_id"]) == (True, profile["id"])


@pytest.mark.parametrize(("subscription_type", "collection", "deleted"),
                         [("profile", "profiles", 204), ("series", "series", 200)],
                         ids=["profile", "series"])
async def test_a_deleted_profile_or_series_leaves_the_calendar(
    api: Any, make_user: Any, subscription_type: str, collection: str, deleted: int
) -> None:
    owner, _, event, fan, sub = await _one_event_synced(api, make_user, subscription_type)
    source = f"{subscription_type}_id"
    status, _, _ = await api.delete(f"/v1/{collection}/{sub[source]}", owner)
    assert status == deleted
    await _cut_off(api, fan, sub, event["title"], source)


async def test_members_of_the_organization_get_its_private_events(
    api: Any, make_user: Any, live_server: Any
) -> None:
    from domain import accounts

    owner, profile = await publisher(api, make_user)
    member = await make_user()
    live_server.admin(accounts.add_member, owner.organization_id, member.email, "member")
    tag = handle("t")
    await new_event(api, owner, profile, title=f"{tag} private", is_private=True)
    await subscribe(api, member, subscription_type="profile", profile_id=profile["id"])
    await until_titles(api, member, {f"{tag} private"}, {f"{tag} private"})


async def test_every_subscriber_gets_a_copy(api: Any, make_user: Any) -> None:
    owner, profile = await publisher(api, make_user)
    fans = [await make_user() for _ in range(5)]
    for fan in fans:
        await subscribe(api, fan, subscription_type="profile", profile_id=profile["id"])
    tag = handle("t")
    await new_event(api, owner, profile, title=tag)
    for fan in fans:
        await until_titles(api, fan, {tag}, {tag})


async def test_without_the_personal_calendar_nothing_is_copied(api: Any, make_user: Any) -> None:
    owner, profile = await publisher(api, make_user)
    tag = handle("t")
    await new_event(api, owner, profile, title=tag)
    fan = await make_user()
    sub = await subscribe(api, fan, subscription_type="profile", profile_id=profile["id"],
                          include_personal_calendar=False)
    assert sub["include_personal_calendar"] is False
    # A later subscription of the same user is synced: by then this one has been too.
    other_owner, other = await publisher(api, make_user)
    await new_event(api, other_owner, other, title=f"{tag} marker")
    await subscribe(api, fan, subscription_type="profile", profile_id=other["id"])
    await until_titles(api, fan, {f"{tag} marker"}, {tag, f"{tag} marker"})


# --- series subscriptions --------------------------------------------------------


async def _series(api: Any, owner: Any, profile: dict[str, Any], **fields: Any) -> dict[str, Any]:
    status, series, _ = await api.post(f"/v1/profiles/{profile['id']}/series", owner,
                                       json={"name": "Season", "slug": handle("s"), **fields})
    assert status == 201, series
    return series  # type: ignore[no-any-return]


async def _link(api: Any, owner: Any, series: dict[str, Any], event: dict[str, Any]) -> None:
    status, body, _ = await api.post(f"/v1/series/{series['id']}/events", owner,
                                     json={"event_id": event["id"]})
    assert status == 204, body


async def test_a_series_subscription_follows_membership(api: Any, make_user: Any) -> None:
    owner, profile = await publisher(api, make_user)
    series = await _series(api, owner, profile)
    tag = handle("t")
    inside = await new_event(api, owner, profile, title=f"{tag} in")
    outside = await new_event(api, owner, profile, title=f"{tag} out")
    await _link(api, owner, series, inside)
    fan = await make_user()
    sub = await subscribe(api, fan, subscription_type="series", series_id=series["id"])
    assert (sub["series_id"], sub["profile_id"], sub["subscription_type"]) == (series["id"], None, "series")
    among = {f"{tag} in", f"{tag} out"}
    await until_titles(api, fan, {f"{tag} in"}, among)
    await _link(api, owner, series, outside)
    await until_titles(api, fan, among, among)
    status, _, _ = await api.delete(f"/v1/series/{series['id']}/events/{inside['id']}", owner)
    assert status == 204
    await until_titles(api, fan, {f"{tag} out"}, among)
    # A series made private: nothing left, access invalid.
    await api.patch(f"/v1/series/{series['id']}", owner, json={"is_private": True})
    await until_titles(api, fan, set(), among)
    status, got, _ = await api.get(f"/v1/subscriptions/{sub['id']}", fan)
    assert (got["access_valid"], got["series_id"]) == (False, None)


async def test_profile_and_series_subscriptions_never_copy_twice(
    api: Any, make_user: Any, live_server: Any
) -> None:
    owner, profile = await publisher(api, make_user)
    series = await _series(api, owner, profile)
    tag = handle("t")
    event = await new_event(api, owner, profile, title=tag)
    await _link(api, owner, series, event)
    fan = await make_user()
    by_series = await subscribe(api, fan, subscription_type="series", series_id=series["id"])
    await subscribe(api, fan, subscription_type="profile", profile_id=profile["id"])
    await until_titles(api, fan, {tag}, {tag})
    await api.patch(f"/v1/events/{event['id']}", owner, json={"title": f"{tag} 2"})
    await until_titles(api, fan, {f"{tag} 2"}, {tag, f"{tag} 2"})
    items = await walk(api, f"/v1/calendars/{fan.calendar_id}/events", fan)
    assert [i["title"] for i in items].count(f"{tag} 2") == 1
    # Unsubscribing from the series keeps the copy the profile subscription covers.
    status, _, _ = await api.delete(f"/v1/subscriptions/{by_series['id']}", fan)
    assert status == 204

    async def cleaned() -> bool:
        return (await api.get(f"/v1/subscriptions/{by_series['id']}", fan))[0] == 404

    await eventually(cleaned, "series subscription removed")

    async def gone() -> bool:
        status, _, _ = await api.patch(f"/v1/subscriptions/{by_series['id']}", fan, json={})
        return status == 404  # the cleanup job has finished and removed the row

    await eventually(gone, "cleanup finished")
    assert f"{tag} 2" in await copies(api, fan)
    count = await sql(live_server, "fetchval", "SELECT count(*) FROM calendar_events WHERE source_event_id = $1", event["id"])
    assert count == 1


# --- re-subscribe, pause, unsubscribe -------------------------------------------------


async def test_subscribing_again_reactivates_the_same_subscription(api: Any, make_user: Any) -> None:
    _, profile = await publisher(api, make_user)
    fan = await make_user()
    sub = await subscribe(api, fan, subscription_type="profile", profile_id=profile["id"])
    status, paused, _ = await api.patch(f"/v1/subscriptions/{sub['id']}", fan, json={"is_active": False})
    assert (status, paused["is_active"]) == (200, False)
    again = await subscribe(api, fan, expected=200, subscription_type="profile",
                            profile_id=profile["id"], include_personal_calendar=True)
    assert again["id"] == sub["id"] and again["is_active"] is True
    assert again["created_at"] == sub["created_at"]
    ids_listed = [s["id"] for s in await walk(api, "/v1/subscriptions", fan)]
    assert ids_listed == [sub["id"]]


async def test_a_paused_subscription_keeps_its_copies_and_adds_none(api: Any, make_user: Any) -> None:
    owner, profile = await publisher(api, make_user)
    tag = handle("t")
    await new_event(api, owner, profile, title=f"{tag} before")
    fan = await make_user()
    sub = await subscribe(api, fan, subscription_type="profile", profile_id=profile["id"])
    among = {f"{tag} before", f"{tag} during", f"{tag} marker"}
    await until_titles(api, fan, {f"{tag} before"}, among)
    status, body, _ = await api.patch(f"/v1/subscriptions/{sub['id']}", fan, json={"is_active": False})
    assert (status, body["is_active"]) == (200, False)
    await new_event(api, owner, profile, title=f"{tag} during")
    # A marker from another source, synced after the event above was.
    other_owner, other = await publisher(api, make_user)
    await new_event(api, other_owner, other, title=f"{tag} marker")
    await subscribe(api, fan, subscription_type="profile", profile_id=other["id"])
    await until_titles(api, fan, {f"{tag} before", f"{tag} marker"}, among)
    # PATCH {} changes nothing.
    status, body, _ = await api.patch(f"/v1/subscriptions/{sub['id']}", fan, json={})
    assert (status, body["is_active"]) == (200, False)
    # Resuming catches up.
    status, body, _ = await api.patch(f"/v1/subscriptions/{sub['id']}", fan, json={"is_active": True})
    assert (status, body["is_active"]) == (200, True)
    await until_titles(api, fan, among, among)


async def _hold_sync_lock(database_url: str, profile_id: str, db: Any) -> asyncpg.Connection:
    """A connection holding the profile's sync lock: sync jobs for it wait."""
    conn = await asyncpg.connect(database_url)
    await conn.execute("BEGIN")
    await sync_store.lock_profile(Tx(conn, db), profile_id)
    return conn


_LOCK_WAITERS = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"


async def test_sync_jobs_of_a_locked_profile_hold_no_connection_and_run_once_it_is_free(
    api: Any, make_user: Any, live_server: Any, database_url: str
) -> None:
    owner, profile = await publisher(api, make_user)
    tag = handle("t")
    events = [await new_event(api, owner, profile, title=f"{tag} {i}") for i in range(8)]
    before = {f"{tag} {i}" for i in range(8)}
    after = {f"{tag} {i} moved" for i in range(8)}
    fan = await make_user()
    await subscribe(api, fan, subscription_type="profile", profile_id=profile["id"])
    other_owner, other = await publisher(api, make_user)
    among = before | after | {f"{tag} elsewhere"}
    await until_titles(api, fan, before, among)

    held = await _hold_sync_lock(database_url, profile["id"], live_server.db)
    try:
        # More changes than the jobs' pool has connections (4), each a sync job
        # that finds its profile locked.
        for i, event in enumerate(events):
            status, _, _ = await api.patch(f"/v1/events/{event['id']}", owner,
                                           json={"title": f"{tag} {i} moved"})
            assert status == 200

        async def picked() -> bool:
            return bool(await held.fetchval(
                "SELECT count(*) FROM pgqueuer WHERE entrypoint = 'sync' AND status = 'picked'"))

        await eventually(picked, "the sync jobs taken by the worker")
        # They wait without a connection: none waits for the lock in the database...
        for _ in range(10):
            assert await held.fetchval(_LOCK_WAITERS) == 0
            await asyncio.sleep(0.05)
        # ...so another profile's changes are synced meanwhile.
        await new_event(api, other_owner, other, title=f"{tag} elsewhere")
        await subscribe(api, fan, subscription_type="profile", profile_id=other["id"])
        await until_titles(api, fan, before | {f"{tag} elsewhere"}, among)
    finally:
        await held.close()
    # Once the lock is free, every change is applied.
    await until_titles(api, fan, after | {f"{tag} elsewhere"}, among)


async def test_unsubscribe_removes_the_copies_through_a_cleanup_job(
    api: Any, make_user: Any, live_server: Any, database_url: str
) -> None:
    _, profile, event, fan, sub = await _one_event_synced(api, make_user)
    tag = event["title"]

    held = await _hold_sync_lock(database_url, profile["id"], live_server.db)
    try:
        status, body, _ = await api.delete(f"/v1/subscriptions/{sub['id']}", fan)
        assert (status, body) == (204, None)
        # While the cleanup waits: the subscription is gone from reads, and
        # PATCH or POST of it is 409 until the cleanup finishes.
        status, body, _ = await api.patch(f"/v1/subscriptions/{sub['id']}", fan, json={"is_active": True})
        assert_error(status, body, 409, "subscription_cleanup_in_progress")
        status, body, _ = await api.post("/v1/subscriptions", fan, json={
            "subscription_type": "profile", "profile_id": profile["id"]})
        assert_error(status, body, 409, "subscription_cleanup_in_progress")
        status, body, _ = await api.get(f"/v1/subscriptions/{sub['id']}", fan)
        assert_error(status, body, 404, "resource_not_found")
        assert await walk(api, "/v1/subscriptions", fan) == []
        status, body, _ = await api.delete(f"/v1/subscriptions/{sub['id']}", fan)
        assert status == 204  # asking again changes nothing
        assert tag in await copies(api, fan)
    finally:
        await held.close()
    await until_titles(api, fan, set(), {tag})

    async def finished() -> bool:
        status, _, _ = await api.patch(f"/v1/subscriptions/{sub['id']}", fan, json={})
        return status == 404

    await eventually(finished, "cleanup finished")
    again = await subscribe(api, fan, subscription_type="profile", profile_id=profile["id"])
    assert again["id"] != sub["id"]
    await until_titles(api, fan, {tag}, {tag})


# --- consolidate -------------------------------------------------------------------


async def test_consolidate_retires_the_series_subscriptions_of_the_profile(
    api: Any, make_user: Any
) -> None:
    _, profile, event, fan, child = await _one_event_synced(api, make_user, "series")
    tag = event["title"]

    # Without consolidate nothing is retired.
    plain = await subscribe(api, fan, subscription_type="profile", profile_id=profile["id"])
    listed = {s["id"] for s in await walk(api, "/v1/subscriptions", fan)}
    assert listed == {child["id"], plain["id"]}
    # With it, the child is adopted and retired; the copy stays, once.
    again = await subscribe(api, fan, expected=200, subscription_type="profile",
                            profile_id=profile["id"], consolidate=True)
    assert again["id"] == plain["id"]
    listed = {s["id"] for s in await walk(api, "/v1/subscriptions", fan)}
    assert listed == {plain["id"]}
    status, body, _ = await api.get(f"/v1/subscriptions/{child['id']}", fan)
    assert_error(status, body, 404, "resource_not_found")
    await until_titles(api, fan, {tag}, {tag})
    items = await walk(api, f"/v1/calendars/{fan.calendar_id}/events", fan)
    assert [i["title"] for i in items].count(tag) == 1


async def test_consolidate_leaves_other_profiles_series_alone(api: Any, make_user: Any) -> None:
    owner, profile = await publisher(api, make_user)
    _, other_profile = await publisher(api, make_user)
    other_owner_series = await _series(api, owner, await new_profile(api, owner))
    fan = await make_user()
    kept = await subscribe(api, fan, subscription_type="series", series_id=other_owner_series["id"])
    await subscribe(api, fan, subscription_type="profile", profile_id=profile["id"], consolidate=True)
    listed = {s["id"] for s in await walk(api, "/v1/subscriptions", fan)}
    assert kept["id"] in listed and len(listed) == 2
    assert other_profile  # a second publisher exists and is untouched


# --- targets and validation -----------------------------------------------------------


async def test_external_calendar_targets(api: Any, make_user: Any, live_server: Any) -> None:
    _, profile = await publisher(api, make_user)
    fan, stranger = await make_user(), await make_user()
    user_ids = await sql(live_server, "fetch", "SELECT id, email FROM users WHERE email = ANY($1::citext[])", [fan.email, stranger.email])
    by_email = {r["email"]: r["id"] for r in user_ids}
    mine = insert_connected_calendar(live_server, by_email[fan.email])
    theirs = insert_connected_calendar(live_server, by_email[stranger.email])
    base = {"subscription_type": "profile", "profile_id": profile["id"]}

    status, body, _ = await api.post("/v1/subscriptions", fan, json={
        **base, "external_calendar_ids": [fan.calendar_id]})
    assert_error(status, body, 400, "invalid_id")
    status, body, _ = await api.post("/v1/subscriptions", fan, json={
        **base, "external_calendar_ids": [theirs]})
    assert_error(status, body, 404, "resource_not_found", param="external_calendar_ids")
    status, body, _ = await api.post("/v1/subscriptions", fan, json={
        **base, "external_calendar_ids": [mine, mine]})
    assert_error(status, body, 400, "invalid_field", param="external_calendar_ids")
    many = [ids.new_id("xcal") for _ in range(101)]
    status, body, _ = await api.post("/v1/subscriptions", fan, json={**base, "external_calendar_ids": many})
    assert_error(status, body, 400, "invalid_field", param="external_calendar_ids")
    assert await walk(api, "/v1/subscriptions", fan) == []  # nothing was saved

    sub = await subscribe(api, fan, **base, external_calendar_ids=[mine.upper().replace("XCAL", "xcal")])
    stored = await sql(live_server, "fetchval", "SELECT external_calendar_ids FROM subscriptions WHERE id = $1", sub["id"])
    assert stored == [mine]
    # Re-subscribing replaces the selection; omitted selects none.
    await subscribe(api, fan, expected=200, **base)
    stored = await sql(live_server, "fetchval", "SELECT external_calendar_ids FROM subscriptions WHERE id = $1", sub["id"])
    assert stored == []


@pytest.mark.parametrize(("body", "code", "param"), [
    ({"subscription_type": "profile"}, "missing_field", "profile_id"),
    ({"subscription_type": "series"}, "missing_field", "series_id"),
    ({"subscription_type": "profile", "profile_id": "PROFILE", "x": 1}, "unknown_field", "x"),
    ({"subscription_type": "calendar", "profile_id": None}, "invalid_field", "subscription_type"),
    ({"subscription_type": "profile", "profile_id": "some-handle"}, "invalid_id", "profile_id"),
    ({"subscription_type": "series", "series_id": "evt_" + "0" * 32}, "invalid_id", "series_id"),
    ({"subscription_type": "profile", "profile_id": "PROFILE", "series_id": "ser_" + "0" * 32},
     "field_dependency", "series_id"),
    ({"subscription_type": "profile", "profile_id": "PROFILE", "consolidate": "yes"},
     "invalid_field", "consolidate"),
])
async def test_bad_bodies_are_refused_and_change_nothing(
    api: Any, make_user: Any, body: dict[str, Any], code: str, param: str
) -> None:
    _, profile = await publisher(api, make_user)
    fan = await make_user()
    body = {k: profile["id"] if v == "PROFILE" else v for k, v in body.items()}
    status, got, _ = await api.post("/v1/subscriptions", fan, json=body)
    assert_error(status, got, 400, code, param=param)
    assert await walk(api, "/v1/subscriptions", fan) == []


async def test_sources_must_be_visible(api: Any, make_user: Any) -> None:
    owner, private = await publisher(api, make_user, is_private=True)
    hidden_series = await _series(api, owner, await new_profile(api, owner), is_private=True)
    fan = await make_user()
    status, body, _ = await api.post("/v1/subscriptions", fan, json={
        "subscription_type": "profile", "profile_id": private["id"]})
    assert_error(status, body, 404, "resource_not_found", param="profile_id")
    status, body, _ = await api.post("/v1/subscriptions", fan, json={
        "subscription_type": "series", "series_id": hidden_series["id"]})
    assert_error(status, body, 404, "resource_not_found", param="series_id")


async def test_subscriptions_are_their_owners_alone(api: Any, make_user: Any) -> None:
    _, profile = await publisher(api, make_user)
    fan, other = await make_user(), await make_user()
    sub = await subscribe(api, fan, subscription_type="profile", profile_id=profile["id"])
    path = f"/v1/subscriptions/{sub['id']}"
    for status, body, _ in (await api.get(path, other),
                            await api.patch(path, other, json={"is_active": False}),
                            await api.delete(path, other)):
        assert_error(status, body, 404, "resource_not_found")
    status, body, _ = await api.get(path, fan)
    assert (status, body["is_active"]) == (200, True)
    status, body, _ = await api.patch(path, fan, json={"is_active": "no"})
    assert_error(status, body, 400, "invalid_field", param="is_active")
    status, body, _ = await api.get("/v1/subscriptions/sub_nope", fan)
    assert_error(status, body, 400, "invalid_id", param="subscription_id")


async def test_the_list_pages_in_creation_order(api: Any, make_user: Any, live_server: Any) -> None:
    fan = await make_user()
    made = []
    for _ in range(5):
        _, profile = await publisher(api, make_user)
        made.append((await subscribe(api, fan, subscription_type="profile", profile_id=profile["id"]))["id"])
    assert [s["id"] for s in await walk(api, "/v1/subscriptions", fan, limit=2)] == made
    before = live_server.query_count
    status, page, _ = await api.get("/v1/subscriptions", fan, params={"limit": "100"})
    assert status == 200 and len(page["data"]) == 5
    assert live_server.query_count - before == 2  # authentication, the page
