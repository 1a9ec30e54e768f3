"""RSVPs and RSVP settings over REST: answers, replacement, who sees and
changes what, counts, capacity and waitlist, and capacity under a burst of
simultaneous answers."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import pytest
from conftest import assert_error, new_event, new_profile

from domain import accounts

RSVP_KEYS = {
    "id", "event_id", "attendee_email", "attendee_first_name", "attendee_last_name",
    "status", "rsvp_type", "num_guests", "created_at", "updated_at",
}
STATS_KEYS = {"event_id", "going", "maybe", "not_going", "waitlist", "total_attendees"}
SETTINGS_KEYS = {
    "enable_capacity_limit", "capacity_limit", "allow_waitlist", "allow_multiple_attendees",
    "allow_notifications",
}
# The defaults of a new event (docs/api-choices.md):
# no capacity limit, waitlist open, several attendees per RSVP, notifications on.
DEFAULT_SETTINGS = {
    "enable_capacity_limit": False,
    "capacity_limit": None,
    "allow_waitlist": True,
    "allow_multiple_attendees": True,
    "allow_notifications": True,
}
TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")
RSVP_ID = re.compile(r"^rsvp_[0-9a-f]{32}$")


def shown(value: Any) -> str:
    """How `details.value` shows a client's value: strings as sent, others as JSON."""
    return value if isinstance(value, str) else json.dumps(value)


def assert_value(error: dict[str, Any], value: Any) -> None:
    if value is None:  # nothing to show
        assert "value" not in error.get("details", {}), error
    elif len(shown(value)) <= 200:
        assert error["details"]["value"] == shown(value), error


async def make_event(api: Any, owner: Any, profile: dict[str, Any] | None = None,
                     **fields: Any) -> dict[str, Any]:
    """An event on `profile`, or on a new profile of the owner's."""
    return await new_event(api, owner, profile or await new_profile(api, owner), **fields)


def rsvps_path(event: dict[str, Any]) -> str:
    return f"/v1/events/{event['id']}/rsvps"


async def answer(api: Any, user: Any, event: dict[str, Any], status: str = "going",
                 expected: int = 201, **fields: Any) -> dict[str, Any]:
    code, body, _ = await api.post(rsvps_path(event), user, json={"status": status, **fields})
    assert code == expected, body
    return body  # type: ignore[no-any-return]


async def stats(api: Any, user: Any, event: dict[str, Any]) -> dict[str, Any]:
    status, body, _ = await api.get(f"{rsvps_path(event)}/stats", user)
    assert status == 200, body
    assert set(body) == STATS_KEYS and body["event_id"] == event["id"]
    return body  # type: ignore[no-any-return]


def counts(going: int = 0, maybe: int = 0, not_going: int = 0, waitlist: int = 0,
           total: int | None = None) -> dict[str, int]:
    return {"going": going, "maybe": maybe, "not_going": not_going, "waitlist": waitlist,
            "total_attendees": going if total is None else total}


async def assert_counts(api: Any, user: Any, event: dict[str, Any], **expected: int) -> None:
    got = await stats(api, user, event)
    del got["event_id"]
    assert got == counts(**expected)


async def settings(api: Any, owner: Any, event: dict[str, Any], **changes: Any) -> dict[str, Any]:
    status, body, _ = await api.patch(f"/v1/events/{event['id']}/rsvp-settings", owner,
                                      json=changes)
    assert status == 200, body
    return body  # type: ignore[no-any-return]


async def read_settings(api: Any, user: Any, event: dict[str, Any]) -> dict[str, Any]:
    status, body, _ = await api.get(f"/v1/events/{event['id']}/rsvp-settings", user)
    assert status == 200, body
    return body  # type: ignore[no-any-return]


async def everyone(api: Any, owner: Any, event: dict[str, Any]) -> list[dict[str, Any]]:
    """All RSVPs as the event's owner sees them (one big page)."""
    status, page, _ = await api.get(rsvps_path(event), owner, params={"limit": 100})
    assert status == 200, page
    assert page["has_more"] is False
    return page["data"]  # type: ignore[no-any-return]


async def users(make_user: Any, n: int) -> list[Any]:
    return list(await asyncio.gather(*(make_user() for _ in range(n))))


async def owner_guest_event(api: Any, make_user: Any) -> tuple[Any, Any, dict[str, Any]]:
    """Two users and an event of the first's (`make_event`): (owner, guest, event)."""
    owner, guest = await users(make_user, 2)
    return owner, guest, await make_event(api, owner)


# ---------------------------------------------------------------------------
# Create and replace


async def test_create_returns_the_rsvp_without_user_ids(api: Any, make_user: Any) -> None:
    owner, guest, event = await owner_guest_event(api, make_user)
    status, rsvp, headers = await api.post(rsvps_path(event), guest, json={"status": "going"})
    assert status == 201, rsvp
    assert set(rsvp) == RSVP_KEYS  # no attendee/user id of any kind
    assert RSVP_ID.match(rsvp["id"])
    assert headers["Location"] == f"/v1/events/{event['id']}/rsvps/{rsvp['id']}"
    assert rsvp["event_id"] == event["id"]
    assert rsvp["status"] == "going"
    assert rsvp["num_guests"] == 1
    assert rsvp["attendee_email"] is None and rsvp["rsvp_type"] is None
    assert rsvp["attendee_first_name"] is None and rsvp["attendee_last_name"] is None
    assert TIMESTAMP.match(rsvp["created_at"]) and TIMESTAMP.match(rsvp["updated_at"])
    # The owner's list holds exactly that record, same shape.
    assert await everyone(api, owner, event) == [rsvp]


async def test_create_keeps_the_attendee_fields(api: Any, make_user: Any) -> None:
    owner, guest, event = await owner_guest_event(api, make_user)
    body = {"status": "maybe", "attendee_email": "Ann@Example.com", "attendee_first_name": "Ann",
            "attendee_last_name": "Lee", "rsvp_type": "vip", "num_guests": 3}
    rsvp = await answer(api, guest, event, **body)
    for key, value in body.items():
        assert rsvp[key] == value, key
    assert await everyone(api, owner, event) == [rsvp]


async def test_posting_again_replaces_the_callers_rsvp(api: Any, make_user: Any) -> None:
    owner, guest, event = await owner_guest_event(api, make_user)
    first = await answer(api, guest, event, "going")
    status, again, headers = await api.post(rsvps_path(event), guest,
                                            json={"status": "maybe", "num_guests": 2})
    assert status == 200, again
    assert "Location" not in headers
    assert again["id"] == first["id"]
    assert again["status"] == "maybe" and again["num_guests"] == 2
    assert again["created_at"] == first["created_at"]
    await assert_counts(api, owner, event, maybe=1)
    assert [r["id"] for r in await everyone(api, owner, event)] == [first["id"]]


async def test_same_email_in_another_case_replaces(api: Any, make_user: Any) -> None:
    owner, guest, event = await owner_guest_event(api, make_user)
    first = await answer(api, guest, event, "going", attendee_email="friend@example.com")
    again = await answer(api, guest, event, "not_going", expected=200,
                         attendee_email="FRIEND@Example.COM")
    assert again["id"] == first["id"] and again["status"] == "not_going"
    await assert_counts(api, owner, event, not_going=1)


async def test_another_email_is_a_second_rsvp(api: Any, make_user: Any) -> None:
    owner, guest, event = await owner_guest_event(api, make_user)
    mine = await answer(api, guest, event, "going")
    friend = await answer(api, guest, event, "going", attendee_email="friend@example.com")
    other = await answer(api, guest, event, "maybe", attendee_email="other@example.com")
    assert len({mine["id"], friend["id"], other["id"]}) == 3
    await assert_counts(api, owner, event, going=2, maybe=1)
    # Each key is replaced on its own.
    again = await answer(api, guest, event, "not_going", expected=200,
                         attendee_email="friend@example.com")
    assert again["id"] == friend["id"]
    await assert_counts(api, owner, event, going=1, maybe=1, not_going=1)


async def test_two_users_answering_make_two_rsvps(api: Any, make_user: Any) -> None:
    owner, ann, bob = await users(make_user, 3)
    event = await make_event(api, owner)
    a = await answer(api, ann, event)
    b = await answer(api, bob, event)
    assert a["id"] != b["id"]
    await assert_counts(api, owner, event, going=2)


@pytest.mark.parametrize(
    ("body", "code", "param"),
    [
        ({"status": "going", "attendee_user_id": "usr_" + "1" * 32}, "unknown_field", "attendee_user_id"),
        ({"status": "going", "user_id": "x"}, "unknown_field", "user_id"),
        ({}, "missing_field", "status"),
        ({"status": "attending"}, "invalid_field", "status"),
        ({"status": None}, "invalid_field", "status"),
        ({"status": "Going"}, "invalid_field", "status"),
        ({"status": "going", "num_guests": 0}, "invalid_field", "num_guests"),
        ({"status": "going", "num_guests": -1}, "invalid_field", "num_guests"),
        ({"status": "going", "num_guests": 10_001}, "invalid_field", "num_guests"),
        ({"status": "going", "num_guests": "2"}, "invalid_field", "num_guests"),
        ({"status": "going", "num_guests": 1.5}, "invalid_field", "num_guests"),
        ({"status": "going", "num_guests": None}, "invalid_field", "num_guests"),
        ({"status": "going", "attendee_email": "no-at-sign"}, "invalid_field", "attendee_email"),
        ({"status": "going", "attendee_email": "a@b@c"}, "invalid_field", "attendee_email"),
        ({"status": "going", "attendee_email": "a" * 250 + "@x.io"}, "invalid_field", "attendee_email"),
        ({"status": "going", "attendee_first_name": 5}, "invalid_field", "attendee_first_name"),
    ],
)
async def test_create_validation(api: Any, make_user: Any, body: dict[str, Any], code: str,
                                 param: str) -> None:
    owner, guest, event = await owner_guest_event(api, make_user)
    status, error, _ = await api.post(rsvps_path(event), guest, json=body)
    found = assert_error(status, error, 400, code, param=param)
    if code == "invalid_field":
        assert_value(found, body[param])
    await assert_counts(api, owner, event)
    assert await everyone(api, owner, event) == []


async def test_rsvp_to_an_event_the_caller_cannot_see(api: Any, make_user: Any) -> None:
    owner, stranger = await users(make_user, 2)
    private_event = await make_event(api, owner, is_private=True)
    hidden_profile = await new_profile(api, owner, is_private=True)
    on_private_profile = await make_event(api, owner, hidden_profile)
    for event in (private_event, on_private_profile):
        status, body, _ = await api.post(rsvps_path(event), stranger, json={"status": "going"})
        assert_error(status, body, 404, "resource_not_found")
        await assert_counts(api, owner, event)
    missing = {"id": "evt_" + "0" * 32}
    status, body, _ = await api.post(rsvps_path(missing), stranger, json={"status": "going"})
    assert_error(status, body, 404, "resource_not_found")
    status, body, _ = await api.post("/v1/events/prf_" + "0" * 32 + "/rsvps", stranger,
                                     json={"status": "going"})
    assert_error(status, body, 400, "invalid_id", param="event_id")


async def test_rsvp_ids_and_event_ids_are_case_insensitive(api: Any, make_user: Any) -> None:
    _, guest, event = await owner_guest_event(api, make_user)
    rsvp = await answer(api, guest, event)
    upper = f"/v1/events/{event['id'].upper()}/rsvps/{rsvp['id'].upper()}"
    status, body, _ = await api.patch(upper, guest, json={"status": "maybe"})
    assert status == 200 and body["id"] == rsvp["id"] and body["event_id"] == event["id"]


async def test_cancelled_event_takes_only_not_going(api: Any, make_user: Any) -> None:
    owner, guest, early = await users(make_user, 3)
    event = await make_event(api, owner)
    held = await answer(api, early, event, "going")
    status, body, _ = await api.post(f"/v1/events/{event['id']}/cancel", owner, json={})
    assert status == 200, body
    for answer_status in ("going", "maybe"):
        status, body, _ = await api.post(rsvps_path(event), guest, json={"status": answer_status})
        assert_error(status, body, 409, "event_cancelled")
    # The existing attendee is kept (so they can be notified), and can withdraw.
    await assert_counts(api, owner, event, going=1)
    declined = await answer(api, guest, event, "not_going")
    assert declined["status"] == "not_going"
    changed = await answer(api, early, event, "not_going", expected=200)
    assert changed["id"] == held["id"]
    # Going back to going is a new going answer on a cancelled event.
    status, body, _ = await api.post(rsvps_path(event), early, json={"status": "going"})
    assert_error(status, body, 409, "event_cancelled")
    status, body, _ = await api.patch(f"{rsvps_path(event)}/{held['id']}", early,
                                      json={"status": "maybe"})
    assert_error(status, body, 409, "event_cancelled")
    await assert_counts(api, owner, event, not_going=2)
    # A reschedule reopens it.
    status, body, _ = await api.post(
        f"/v1/events/{event['id']}/reschedule", owner,
        json={"start_time": "2031-06-06T10:00", "start_timezone": "Europe/Paris"},
    )
    assert status == 200, body
    assert (await answer(api, guest, event, "going", expected=200))["status"] == "going"


# ---------------------------------------------------------------------------
# Lists


async def test_owner_sees_all_others_only_their_own(api: Any, make_user: Any) -> None:
    owner, ann, bob, carl = await users(make_user, 4)
    event = await make_event(api, owner)
    a = await answer(api, ann, event, "going", attendee_first_name="Ann",
                     attendee_email="ann@example.com")
    a2 = await answer(api, ann, event, "maybe", attendee_email="ann-friend@example.com")
    b = await answer(api, bob, event, "maybe", attendee_first_name="Bob")
    full = await everyone(api, owner, event)
    assert full == [a, a2, b]  # attendee details included, creation order
    assert full[0]["attendee_first_name"] == "Ann"
    assert full[0]["attendee_email"] == "ann@example.com"

    status, page, _ = await api.get(rsvps_path(event), ann)
    assert status == 200
    assert page == {"data": [a, a2], "has_more": False, "next_cursor": None}
    status, page, _ = await api.get(rsvps_path(event), bob)
    assert status == 200 and page["data"] == [b]
    # Someone who can see the event but has not answered: an empty page.
    status, page, _ = await api.get(rsvps_path(event), carl)
    assert status == 200
    assert page == {"data": [], "has_more": False, "next_cursor": None}


async def test_list_of_an_event_the_caller_cannot_see(api: Any, make_user: Any) -> None:
    owner, stranger = await users(make_user, 2)
    event = await make_event(api, owner, is_private=True)
    status, body, _ = await api.get(rsvps_path(event), stranger)
    assert_error(status, body, 404, "resource_not_found")


async def test_organization_roles_on_the_list(live_server: Any, api: Any, make_user: Any) -> None:
    owner, admin, member, guest = await users(make_user, 4)
    org = live_server.admin(accounts.create_organization, "Venue", owner.email, None)["organization_id"]
    live_server.admin(accounts.add_member, org, admin.email, "admin")
    live_server.admin(accounts.add_member, org, member.email, "member")
    profile = await new_profile(api, owner, organization_id=org)
    event = await make_event(api, owner, profile)
    g = await answer(api, guest, event)
    m = await answer(api, member, event, "maybe")
    status, page, _ = await api.get(rsvps_path(event), admin, params={"limit": 100})
    assert status == 200 and page["data"] == [g, m]
    status, page, _ = await api.get(rsvps_path(event), member, params={"limit": 100})
    assert status == 200 and page["data"] == [m]


async def test_list_pages_by_creation(api: Any, make_user: Any) -> None:
    owner, guest, event = await owner_guest_event(api, make_user)
    created = []
    for i in range(5):
        created.append(await answer(api, guest, event, attendee_email=f"g{i}@example.com"))
    # Replacing an early RSVP does not move it in the list.
    created[1] = await answer(api, guest, event, "maybe", expected=200,
                              attendee_email="g1@example.com")
    seen: list[dict[str, Any]] = []
    params: dict[str, Any] = {"limit": 1}
    pages = 0
    while True:
        status, page, _ = await api.get(rsvps_path(event), owner, params=params)
        assert status == 200, page
        pages += 1
        assert len(page["data"]) == 1
        seen.extend(page["data"])
        if not page["has_more"]:
            assert page["next_cursor"] is None
            break
        assert isinstance(page["next_cursor"], str) and page["next_cursor"]
        params = {"limit": 1, "cursor": page["next_cursor"]}
    assert pages == 5
    assert seen == created
    # Pages of two, too; and the attendee's own view pages the same way.
    status, page, _ = await api.get(rsvps_path(event), guest, params={"limit": 2})
    assert status == 200 and page["data"] == created[:2] and page["has_more"] is True
    status, page, _ = await api.get(rsvps_path(event), guest,
                                    params={"limit": 2, "cursor": page["next_cursor"]})
    assert status == 200 and page["data"] == created[2:4] and page["has_more"] is True


async def test_list_cursor_of_another_list_is_refused(api: Any, make_user: Any) -> None:
    owner = await make_user()
    first, second = await make_event(api, owner), await make_event(api, owner)
    for i in range(2):
        await answer(api, owner, first, attendee_email=f"x{i}@example.com")
    status, page, _ = await api.get(rsvps_path(first), owner, params={"limit": 1})
    assert status == 200 and page["has_more"] is True
    status, body, _ = await api.get(rsvps_path(second), owner,
                                    params={"limit": 1, "cursor": page["next_cursor"]})
    assert_error(status, body, 400, "invalid_cursor", param="cursor")
    status, body, _ = await api.get(rsvps_path(first), owner, params={"limit": 0})
    assert_error(status, body, 400, "invalid_query_parameter", param="limit")


# ---------------------------------------------------------------------------
# PATCH and DELETE


async def test_patch_by_the_rsvp_owner_and_the_event_owner(api: Any, make_user: Any) -> None:
    owner, guest, event = await owner_guest_event(api, make_user)
    rsvp = await answer(api, guest, event, "going", attendee_first_name="Gus")
    path = f"{rsvps_path(event)}/{rsvp['id']}"
    status, body, _ = await api.patch(path, guest, json={"status": "maybe", "num_guests": 4})
    assert status == 200, body
    assert set(body) == RSVP_KEYS
    assert body["id"] == rsvp["id"] and body["status"] == "maybe" and body["num_guests"] == 4
    assert body["attendee_first_name"] == "Gus" and body["created_at"] == rsvp["created_at"]
    status, body, _ = await api.patch(path, owner, json={"status": "going"})
    assert status == 200, body
    assert body["status"] == "going" and body["num_guests"] == 4
    await assert_counts(api, owner, event, going=1, total=4)
    # {} changes nothing.
    status, same, _ = await api.patch(path, guest, json={})
    assert status == 200 and same == body


@pytest.mark.parametrize(
    ("body", "code", "param"),
    [
        ({"status": "yes"}, "invalid_field", "status"),
        ({"status": None}, "invalid_field", "status"),
        ({"num_guests": 0}, "invalid_field", "num_guests"),
        ({"num_guests": None}, "invalid_field", "num_guests"),
        ({"attendee_email": "a@example.com"}, "unknown_field", "attendee_email"),
        ({"event_id": "evt_" + "1" * 32}, "unknown_field", "event_id"),
    ],
)
async def test_patch_validation(api: Any, make_user: Any, body: dict[str, Any], code: str,
                                param: str) -> None:
    owner, guest, event = await owner_guest_event(api, make_user)
    rsvp = await answer(api, guest, event)
    status, error, _ = await api.patch(f"{rsvps_path(event)}/{rsvp['id']}", guest, json=body)
    assert_error(status, error, 400, code, param=param)
    assert await everyone(api, owner, event) == [rsvp]


async def test_third_user_gets_404_and_nothing_changes(api: Any, make_user: Any) -> None:
    owner, guest, third = await users(make_user, 3)
    event = await make_event(api, owner)
    rsvp = await answer(api, guest, event)
    path = f"{rsvps_path(event)}/{rsvp['id']}"
    status, body, _ = await api.patch(path, third, json={"status": "not_going"})
    assert_error(status, body, 404, "resource_not_found")
    status, body, _ = await api.delete(path, third)
    assert_error(status, body, 404, "resource_not_found")
    # A third user who has their own RSVP on the event is no different.
    await answer(api, third, event, "maybe")
    status, body, _ = await api.patch(path, third, json={"status": "not_going"})
    assert_error(status, body, 404, "resource_not_found")
    assert (await everyone(api, owner, event))[0] == rsvp


async def test_organization_member_cannot_manage_others_rsvps(
    live_server: Any, api: Any, make_user: Any
) -> None:
    owner, admin, member, guest = await users(make_user, 4)
    org = live_server.admin(accounts.create_organization, "Club", owner.email, None)["organization_id"]
    live_server.admin(accounts.add_member, org, admin.email, "admin")
    live_server.admin(accounts.add_member, org, member.email, "member")
    event = await make_event(api, owner, await new_profile(api, owner, organization_id=org))
    rsvp = await answer(api, guest, event)
    path = f"{rsvps_path(event)}/{rsvp['id']}"
    status, body, _ = await api.patch(path, member, json={"status": "maybe"})
    assert_error(status, body, 404, "resource_not_found")
    status, body, _ = await api.patch(path, admin, json={"status": "maybe"})
    assert status == 200 and body["status"] == "maybe"


async def test_rsvp_addressed_under_another_event_is_not_found(api: Any, make_user: Any) -> None:
    owner, guest = await users(make_user, 2)
    event_a = await make_event(api, owner)
    event_b = await make_event(api, owner)
    await answer(api, guest, event_a, "maybe")
    of_b = await answer(api, guest, event_b, "going")
    wrong = f"{rsvps_path(event_a)}/{of_b['id']}"
    for caller in (guest, owner):  # the RSVP's owner and the owner of both events
        status, body, _ = await api.patch(wrong, caller, json={"status": "not_going"})
        assert_error(status, body, 404, "resource_not_found")
        status, body, _ = await api.delete(wrong, caller)
        assert_error(status, body, 404, "resource_not_found")
    assert await everyone(api, owner, event_b) == [of_b]
    await assert_counts(api, owner, event_b, going=1)
    await assert_counts(api, owner, event_a, maybe=1)


async def test_missing_or_malformed_rsvp_id(api: Any, make_user: Any) -> None:
    owner = await make_user()
    event = await make_event(api, owner)
    status, body, _ = await api.patch(f"{rsvps_path(event)}/rsvp_{'0' * 32}", owner,
                                      json={"status": "going"})
    assert_error(status, body, 404, "resource_not_found")
    status, body, _ = await api.delete(f"{rsvps_path(event)}/evt_{'0' * 32}", owner)
    assert_error(status, body, 400, "invalid_id", param="rsvp_id")


@pytest.mark.parametrize("who", ["attendee", "event_owner"])
async def test_delete_removes_the_record_from_the_counts(api: Any, make_user: Any, who: str) -> None:
    owner, guest, other = await users(make_user, 3)
    event = await make_event(api, owner)
    rsvp = await answer(api, guest, event, "going", num_guests=3)
    kept = await answer(api, other, event, "going")
    await assert_counts(api, owner, event, going=2, total=4)
    path = f"{rsvps_path(event)}/{rsvp['id']}"
    status, body, _ = await api.delete(path, guest if who == "attendee" else owner)
    assert status == 204 and body is None
    await assert_counts(api, owner, event, going=1, total=1)
    assert await everyone(api, owner, event) == [kept]
    status, body, _ = await api.delete(path, owner)
    assert_error(status, body, 404, "resource_not_found")
    # Answering again after a withdrawal is a new RSVP.
    again = await answer(api, guest, event, "maybe")
    assert again["id"] != rsvp["id"]


# ---------------------------------------------------------------------------
# Stats


async def test_stats_count_records_and_sum_going_guests(api: Any, make_user: Any) -> None:
    owner, ann, bob, carl, dora, stranger = await users(make_user, 6)
    event = await make_event(api, owner)
    await assert_counts(api, owner, event)
    await answer(api, ann, event, "going", num_guests=3)
    await answer(api, ann, event, "going", attendee_email="plus@example.com", num_guests=2)
    await answer(api, bob, event, "maybe", num_guests=5)
    await answer(api, carl, event, "not_going", num_guests=7)
    await answer(api, dora, event, "waitlist", num_guests=4)
    expected = counts(going=2, maybe=1, not_going=1, waitlist=1, total=5)
    # Anyone who can see the event reads the same counts, not only the owner.
    for viewer in (owner, ann, stranger):
        got = await stats(api, viewer, event)
        assert {k: v for k, v in got.items() if k != "event_id"} == expected


async def test_stats_of_an_event_the_caller_cannot_see(api: Any, make_user: Any) -> None:
    owner, stranger = await users(make_user, 2)
    event = await make_event(api, owner, is_private=True)
    await answer(api, owner, event)
    status, body, _ = await api.get(f"{rsvps_path(event)}/stats", stranger)
    assert_error(status, body, 404, "resource_not_found")
    await assert_counts(api, owner, event, going=1)


async def test_deleting_the_event_removes_its_rsvps(api: Any, make_user: Any) -> None:
    owner, guest, event = await owner_guest_event(api, make_user)
    rsvp = await answer(api, guest, event)
    status, _, _ = await api.delete(f"/v1/events/{event['id']}", owner)
    assert status == 204
    status, body, _ = await api.patch(f"{rsvps_path(event)}/{rsvp['id']}", guest,
                                      json={"status": "maybe"})
    assert_error(status, body, 404, "resource_not_found")
    status, body, _ = await api.get(f"{rsvps_path(event)}/stats", owner)
    assert_error(status, body, 404, "resource_not_found")


# ---------------------------------------------------------------------------
# Settings


async def test_settings_defaults(api: Any, make_user: Any) -> None:
    owner, stranger = await users(make_user, 2)
    event = await make_event(api, owner)
    assert await read_settings(api, owner, event) == DEFAULT_SETTINGS
    # Readable by anyone who can see the event.
    assert await read_settings(api, stranger, event) == DEFAULT_SETTINGS
    hidden = await make_event(api, owner, is_private=True)
    status, body, _ = await api.get(f"/v1/events/{hidden['id']}/rsvp-settings", stranger)
    assert_error(status, body, 404, "resource_not_found")


async def test_settings_patch_by_owner(api: Any, make_user: Any) -> None:
    owner = await make_user()
    event = await make_event(api, owner)
    changed = await settings(api, owner, event, enable_capacity_limit=True, capacity_limit=25,
                             allow_waitlist=False, allow_notifications=False)
    expected = {**DEFAULT_SETTINGS, "enable_capacity_limit": True, "capacity_limit": 25,
                "allow_waitlist": False, "allow_notifications": False}
    assert changed == expected
    assert await read_settings(api, owner, event) == expected
    # Omitted fields are kept; a later partial PATCH changes just its own field.
    assert await settings(api, owner, event, capacity_limit=30) == {**expected, "capacity_limit": 30}
    # {} changes nothing.
    assert await settings(api, owner, event) == {**expected, "capacity_limit": 30}
    assert await read_settings(api, owner, event) == {**expected, "capacity_limit": 30}
    # Turning the limit off may clear the capacity.
    off = await settings(api, owner, event, enable_capacity_limit=False, capacity_limit=None)
    assert off["enable_capacity_limit"] is False and off["capacity_limit"] is None


async def test_settings_patch_empty_keeps_defaults(api: Any, make_user: Any) -> None:
    owner = await make_user()
    event = await make_event(api, owner)
    assert await settings(api, owner, event) == DEFAULT_SETTINGS
    assert await read_settings(api, owner, event) == DEFAULT_SETTINGS


async def test_settings_patch_by_others(live_server: Any, api: Any, make_user: Any) -> None:
    owner, admin, member, stranger = await users(make_user, 4)
    org = live_server.admin(accounts.create_organization, "Hall", owner.email, None)["organization_id"]
    live_server.admin(accounts.add_member, org, admin.email, "admin")
    live_server.admin(accounts.add_member, org, member.email, "member")
    event = await make_event(api, owner, await new_profile(api, owner, organization_id=org))
    path = f"/v1/events/{event['id']}/rsvp-settings"
    status, body, _ = await api.patch(path, stranger, json={"allow_waitlist": False})
    assert_error(status, body, 404, "resource_not_found")
    status, body, _ = await api.patch(path, member, json={"allow_waitlist": False})
    assert_error(status, body, 403, "forbidden")
    assert await read_settings(api, owner, event) == DEFAULT_SETTINGS
    assert await read_settings(api, member, event) == DEFAULT_SETTINGS
    changed = await settings(api, admin, event, allow_waitlist=False)
    assert changed == {**DEFAULT_SETTINGS, "allow_waitlist": False}


async def test_settings_patch_of_an_invisible_event(api: Any, make_user: Any) -> None:
    owner, stranger = await users(make_user, 2)
    event = await make_event(api, owner, is_private=True)
    status, body, _ = await api.patch(f"/v1/events/{event['id']}/rsvp-settings", stranger,
                                      json={"allow_waitlist": False})
    assert_error(status, body, 404, "resource_not_found")
    assert await read_settings(api, owner, event) == DEFAULT_SETTINGS


async def test_capacity_limit_needs_a_capacity(api: Any, make_user: Any) -> None:
    owner = await make_user()
    event = await make_event(api, owner)
    path = f"/v1/events/{event['id']}/rsvp-settings"
    for body in ({"enable_capacity_limit": True},
                 {"enable_capacity_limit": True, "capacity_limit": None}):
        status, error, _ = await api.patch(path, owner, json=body)
        assert_error(status, error, 400, "field_dependency", param="capacity_limit")
    assert await read_settings(api, owner, event) == DEFAULT_SETTINGS
    # Once the limit is on, clearing the capacity alone is the same dependency.
    await settings(api, owner, event, enable_capacity_limit=True, capacity_limit=5)
    status, error, _ = await api.patch(path, owner, json={"capacity_limit": None})
    assert_error(status, error, 400, "field_dependency", param="capacity_limit")
    assert (await read_settings(api, owner, event))["capacity_limit"] == 5


@pytest.mark.parametrize(
    ("body", "code", "param"),
    [
        ({"capacity_limit": -1}, "invalid_field", "capacity_limit"),
        ({"capacity_limit": "10"}, "invalid_field", "capacity_limit"),
        ({"capacity_limit": 2.5}, "invalid_field", "capacity_limit"),
        ({"allow_waitlist": None}, "invalid_field", "allow_waitlist"),
        ({"allow_waitlist": "yes"}, "invalid_field", "allow_waitlist"),
        ({"enable_capacity_limit": 1}, "invalid_field", "enable_capacity_limit"),
        ({"max_attendees": 3}, "unknown_field", "max_attendees"),
        ({"event_id": "evt_" + "1" * 32}, "unknown_field", "event_id"),
    ],
)
async def test_settings_validation(api: Any, make_user: Any, body: dict[str, Any], code: str,
                                   param: str) -> None:
    owner = await make_user()
    event = await make_event(api, owner)
    status, error, _ = await api.patch(f"/v1/events/{event['id']}/rsvp-settings", owner, json=body)
    found = assert_error(status, error, 400, code, param=param)
    if code == "invalid_field":
        assert_value(found, body[param])
    assert await read_settings(api, owner, event) == DEFAULT_SETTINGS


async def test_settings_are_shown_by_event_expand(api: Any, make_user: Any) -> None:
    owner = await make_user()
    event = await make_event(api, owner)
    await settings(api, owner, event, enable_capacity_limit=True, capacity_limit=7)
    await answer(api, owner, event, num_guests=2)
    status, body, _ = await api.get(f"/v1/events/{event['id']}", owner,
                                    params={"expand": "rsvp_settings,rsvp_stats"})
    assert status == 200, body
    assert body["rsvp_settings"] == {**DEFAULT_SETTINGS, "enable_capacity_limit": True,
                                     "capacity_limit": 7}
    assert body["rsvp_stats"] == {"event_id": event["id"], **counts(going=1, total=2)}


# ---------------------------------------------------------------------------
# Capacity


async def capped_event(api: Any, owner: Any, capacity: int, **more: Any) -> dict[str, Any]:
    event = await make_event(api, owner)
    await settings(api, owner, event, enable_capacity_limit=True, capacity_limit=capacity, **more)
    return event


async def test_full_event_waitlists_new_going(api: Any, make_user: Any) -> None:
    owner, a, b, c, d = await users(make_user, 5)
    event = await capped_event(api, owner, 2)
    assert (await answer(api, a, event))["status"] == "going"
    assert (await answer(api, b, event))["status"] == "going"
    third = await answer(api, c, event)
    assert third["status"] == "waitlist"
    # maybe and not_going are not limited.
    assert (await answer(api, d, event, "maybe"))["status"] == "maybe"
    await assert_counts(api, owner, event, going=2, maybe=1, waitlist=1)
    # The waitlisted attendee asking again stays waitlisted, same record.
    again = await answer(api, c, event, expected=200)
    assert again["id"] == third["id"] and again["status"] == "waitlist"
    # A PATCH to going on a full event is waitlisted too.
    status, body, _ = await api.patch(f"{rsvps_path(event)}/{third['id']}", owner,
                                      json={"status": "going"})
    assert status == 200 and body["status"] == "waitlist"
    # A freed seat is not handed out automatically; the next going takes it.
    first = (await everyone(api, owner, event))[0]
    status, _, _ = await api.delete(f"{rsvps_path(event)}/{first['id']}", a)
    assert status == 204
    await assert_counts(api, owner, event, going=1, maybe=1, waitlist=1)
    promoted = await answer(api, c, event, expected=200)
    assert promoted["status"] == "going"
    await assert_counts(api, owner, event, going=2, maybe=1)


async def test_full_event_without_waitlist_refuses(api: Any, make_user: Any) -> None:
    owner, a, b, c = await users(make_user, 4)
    event = await capped_event(api, owner, 2, allow_waitlist=False)
    await answer(api, a, event)
    await answer(api, b, event)
    status, body, _ = await api.post(rsvps_path(event), c, json={"status": "going"})
    assert_error(status, body, 409, "capacity_reached")
    await assert_counts(api, owner, event, going=2)
    status, page, _ = await api.get(rsvps_path(event), c)
    assert status == 200 and page["data"] == []
    # A maybe is still taken, and turning it into going is refused and keeps it.
    maybe = await answer(api, c, event, "maybe")
    status, body, _ = await api.post(rsvps_path(event), c, json={"status": "going"})
    assert_error(status, body, 409, "capacity_reached")
    status, body, _ = await api.patch(f"{rsvps_path(event)}/{maybe['id']}", c,
                                      json={"status": "going"})
    assert_error(status, body, 409, "capacity_reached")
    status, page, _ = await api.get(rsvps_path(event), c)
    assert page["data"] == [maybe]
    await assert_counts(api, owner, event, going=2, maybe=1)


async def test_guests_count_toward_capacity(api: Any, make_user: Any) -> None:
    owner, a, b = await users(make_user, 3)
    event = await capped_event(api, owner, 2)
    pair = await answer(api, a, event, num_guests=2)
    assert pair["status"] == "going"
    await assert_counts(api, owner, event, going=1, total=2)
    assert (await answer(api, b, event))["status"] == "waitlist"
    # Too many guests for the seats left is waitlisted too, even on an empty event.
    other = await capped_event(api, owner, 2)
    assert (await answer(api, a, other, num_guests=3))["status"] == "waitlist"
    # Growing one's own party past capacity is not a held seat.
    growing = await capped_event(api, owner, 3, allow_waitlist=False)
    held = await answer(api, a, growing, num_guests=2)
    await answer(api, b, growing)
    status, body, _ = await api.patch(f"{rsvps_path(growing)}/{held['id']}", a,
                                      json={"num_guests": 3})
    assert_error(status, body, 409, "capacity_reached")
    shrunk = await answer(api, a, growing, num_guests=1, expected=200)
    assert shrunk["status"] == "going" and shrunk["num_guests"] == 1
    await assert_counts(api, owner, growing, going=2, total=2)


async def test_multiple_attendees_off(api: Any, make_user: Any) -> None:
    owner, guest, event = await owner_guest_event(api, make_user)
    await settings(api, owner, event, allow_multiple_attendees=False)
    status, body, _ = await api.post(rsvps_path(event), guest,
                                     json={"status": "going", "num_guests": 2})
    found = assert_error(status, body, 400, "multiple_attendees_not_allowed", param="num_guests")
    assert_value(found, 2)
    await assert_counts(api, owner, event)
    single = await answer(api, guest, event)
    status, body, _ = await api.patch(f"{rsvps_path(event)}/{single['id']}", guest,
                                      json={"num_guests": 2})
    assert_error(status, body, 400, "multiple_attendees_not_allowed", param="num_guests")
    assert await everyone(api, owner, event) == [single]


async def test_lowering_capacity_keeps_the_seats_held(api: Any, make_user: Any) -> None:
    owner, a, b, c, d = await users(make_user, 5)
    event = await capped_event(api, owner, 3)
    held = [await answer(api, u, event) for u in (a, b, c)]
    assert all(r["status"] == "going" for r in held)
    lowered = await settings(api, owner, event, capacity_limit=1)
    assert lowered["capacity_limit"] == 1
    await assert_counts(api, owner, event, going=3)
    # A holder re-sending going keeps the seat.
    again = await answer(api, b, event, expected=200)
    assert again["id"] == held[1]["id"] and again["status"] == "going"
    status, body, _ = await api.patch(f"{rsvps_path(event)}/{held[2]['id']}", c,
                                      json={"status": "going"})
    assert status == 200 and body["status"] == "going"
    # A new going is waitlisted; with the waitlist closed, refused.
    assert (await answer(api, d, event))["status"] == "waitlist"
    await assert_counts(api, owner, event, going=3, waitlist=1)
    await settings(api, owner, event, allow_waitlist=False)
    status, body, _ = await api.patch(f"{rsvps_path(event)}/{held[0]['id']}", a,
                                      json={"status": "maybe"})
    assert status == 200
    # a left the seat: coming back now is a new going on a full event.
    status, body, _ = await api.post(rsvps_path(event), a, json={"status": "going"})
    assert_error(status, body, 409, "capacity_reached")
    await assert_counts(api, owner, event, going=2, maybe=1, waitlist=1)


async def test_capacity_off_admits_everyone(api: Any, make_user: Any) -> None:
    owner, a, b = await users(make_user, 3)
    event = await make_event(api, owner)
    # A capacity alone, with the limit disabled, limits nothing.
    await settings(api, owner, event, capacity_limit=1)
    assert (await answer(api, a, event, num_guests=5))["status"] == "going"
    assert (await answer(api, b, event))["status"] == "going"
    await assert_counts(api, owner, event, going=2, total=6)


# ---------------------------------------------------------------------------
# Concurrency: the requirement


async def test_simultaneous_going_never_exceed_capacity_waitlist_on(
    api: Any, make_user: Any
) -> None:
    owner = await make_user()
    crowd = await users(make_user, 50)
    event = await capped_event(api, owner, 10)
    results = await asyncio.gather(*(
        api.post(rsvps_path(event), u, json={"status": "going"}) for u in crowd
    ))
    assert all(status == 201 for status, _, _ in results), [b for s, b, _ in results if s != 201]
    answered = sorted(body["status"] for _, body, _ in results)
    assert answered == ["going"] * 10 + ["waitlist"] * 40
    await assert_counts(api, owner, event, going=10, waitlist=40)
    stored = await everyone(api, owner, event)
    assert len(stored) == 50
    assert sum(r["status"] == "going" for r in stored) == 10


async def test_simultaneous_going_never_exceed_capacity_waitlist_off(
    api: Any, make_user: Any
) -> None:
    owner = await make_user()
    crowd = await users(make_user, 50)
    event = await capped_event(api, owner, 10, allow_waitlist=False)
    results = await asyncio.gather(*(
        api.post(rsvps_path(event), u, json={"status": "going"}) for u in crowd
    ))
    admitted = [body for status, body, _ in results if status == 201]
    refused = [(status, body) for status, body, _ in results if status != 201]
    assert len(admitted) == 10 and all(b["status"] == "going" for b in admitted)
    assert len(refused) == 40
    for status, body in refused:
        assert_error(status, body, 409, "capacity_reached")
    await assert_counts(api, owner, event, going=10)
    assert sorted(r["id"] for r in await everyone(api, owner, event)) == sorted(
        b["id"] for b in admitted
    )


async def test_turning_multiple_attendees_off_keeps_existing_parties(api: Any, make_user: Any) -> None:
    owner, guest, other = await users(make_user, 3)
    event = await make_event(api, owner)
    party = await answer(api, guest, event, num_guests=3)
    await settings(api, owner, event, allow_multiple_attendees=False)
    # A status-only change does not send num_guests: it must not be refused for it.
    status, body, _ = await api.patch(f"{rsvps_path(event)}/{party['id']}", guest,
                                      json={"status": "maybe"})
    assert status == 200, body
    assert body["status"] == "maybe" and body["num_guests"] == 3
    # Growing the party, or a new party, is refused.
    status, body, _ = await api.patch(f"{rsvps_path(event)}/{party['id']}", guest,
                                      json={"num_guests": 4})
    assert_error(status, body, 400, "multiple_attendees_not_allowed", param="num_guests")
    status, body, _ = await api.post(rsvps_path(event), other,
                                     json={"status": "going", "num_guests": 2})
    assert_error(status, body, 400, "multiple_attendees_not_allowed", param="num_guests")
    # Shrinking to one is always fine.
    status, body, _ = await api.patch(f"{rsvps_path(event)}/{party['id']}", owner,
                                      json={"num_guests": 1})
    assert status == 200 and body["num_guests"] == 1
    await assert_counts(api, owner, event, maybe=1)


async def test_same_user_answering_at_once_makes_one_rsvp(api: Any, make_user: Any) -> None:
    owner, guest, event = await owner_guest_event(api, make_user)
    results = await asyncio.gather(*(
        api.post(rsvps_path(event), guest, json={"status": "going"}) for _ in range(8)
    ))
    assert sorted(status for status, _, _ in results) == [200] * 7 + [201]
    assert len({body["id"] for _, body, _ in results}) == 1
    await assert_counts(api, owner, event, going=1)


async def test_a_held_answer_can_be_resent_on_a_cancelled_event(api: Any, make_user: Any) -> None:
    # Choice: re-sending the answer one already holds is not a *new* going/maybe.
    owner, guest, event = await owner_guest_event(api, make_user)
    held = await answer(api, guest, event, "going", num_guests=2)
    status, _, _ = await api.post(f"/v1/events/{event['id']}/cancel", owner, json={})
    assert status == 200
    again = await answer(api, guest, event, "going", expected=200, num_guests=2)
    assert again["id"] == held["id"] and again["status"] == "going"
    status, body, _ = await api.post(rsvps_path(event), guest,
                                     json={"status": "going", "num_guests": 3})
    assert_error(status, body, 409, "event_cancelled")
    await assert_counts(api, owner, event, going=1, total=2)


async def test_create_checks_the_idempotency_key(api: Any, make_user: Any) -> None:
    owner, guest, event = await owner_guest_event(api, make_user)
    status, body, _ = await api.post(rsvps_path(event), guest, json={"status": "going"},
                                     headers={"Idempotency-Key": "short"})
    assert_error(status, body, 400, "invalid_idempotency_key", param="Idempotency-Key")
    await assert_counts(api, owner, event)
    status, body, _ = await api.post(rsvps_path(event), guest, json={"status": "going"},
                                     headers={"Idempotency-Key": "rsvp-key-12345"})
    assert status == 201, body


async def test_whole_numbers_written_with_a_fraction_are_integers(api: Any, make_user: Any) -> None:
    """JSON Schema calls 12.0 an integer, and so do generated clients and JSON encoders
    that write every number as a float; 12.5 is still refused, and changes nothing."""
    [owner] = await users(make_user, 1)
    event = await make_event(api, owner, await new_profile(api, owner))
    changed = await settings(api, owner, event, enable_capacity_limit=True, capacity_limit=12.0)
    assert changed["capacity_limit"] == 12 and isinstance(changed["capacity_limit"], int)
    path = f"/v1/events/{event['id']}/rsvp-settings"
    for bad in (12.5, 1e300, True, "12"):
        status, body, _ = await api.patch(path, owner, json={"capacity_limit": bad})
        assert_error(status, body, 400, "invalid_field", param="capacity_limit")
    assert (await read_settings(api, owner, event))["capacity_limit"] == 12
