"""The caller's own address as `attendee_email` is the caller's own RSVP: posting
with it (in any case) and posting with no attendee_email are the same key, so
the second answer replaces the first instead of standing beside it."""

from __future__ import annotations

from typing import Any

from test_rsvps import answer, assert_counts, everyone, owner_guest_event, rsvps_path


def other_case(email: str) -> str:
    local, _, domain = email.partition("@")
    return f"{local.upper()}@{domain.title()}"


async def test_no_email_then_own_email_replaces(api: Any, make_user: Any) -> None:
    owner, guest, event = await owner_guest_event(api, make_user)
    first = await answer(api, guest, event, "maybe")
    own = other_case(guest.email)
    status, again, headers = await api.post(
        rsvps_path(event), guest, json={"status": "not_going", "attendee_email": own})
    assert status == 200, again
    assert "Location" not in headers
    assert again["id"] == first["id"] and again["status"] == "not_going"
    assert again["created_at"] == first["created_at"]
    assert again["attendee_email"] == own  # replaced as sent
    await assert_counts(api, owner, event, not_going=1)
    assert await everyone(api, owner, event) == [again]
    status, page, _ = await api.get(rsvps_path(event), guest)
    assert status == 200 and page["data"] == [again]


async def test_own_email_then_no_email_replaces(api: Any, make_user: Any) -> None:
    owner, guest, event = await owner_guest_event(api, make_user)
    first = await answer(api, guest, event, "going", attendee_email=guest.email)
    again = await answer(api, guest, event, "maybe", expected=200)
    assert again["id"] == first["id"] and again["status"] == "maybe"
    assert again["attendee_email"] is None
    # And back again, in another case: still the one RSVP.
    third = await answer(api, guest, event, "not_going", expected=200,
                         attendee_email=other_case(guest.email))
    assert third["id"] == first["id"]
    await assert_counts(api, owner, event, not_going=1)
    assert [r["id"] for r in await everyone(api, owner, event)] == [first["id"]]


async def test_a_friends_address_is_still_a_second_rsvp(api: Any, make_user: Any) -> None:
    owner, guest, event = await owner_guest_event(api, make_user)
    mine = await answer(api, guest, event, "going", attendee_email=guest.email)
    friend = await answer(api, guest, event, "maybe", attendee_email="friend@example.com")
    assert friend["id"] != mine["id"]
    # Another user's own address is their own key only for them.
    await assert_counts(api, owner, event, going=1, maybe=1)
    theirs = await answer(api, owner, event, "going", attendee_email=guest.email)
    assert theirs["id"] not in (mine["id"], friend["id"])
    await assert_counts(api, owner, event, going=2, maybe=1)


async def test_two_written_before_the_fix_become_one(live_server: Any, api: Any,
                                                     make_user: Any) -> None:
    """Answers with no address and with the caller's own, both stored before the
    two were one key: the next answer replaces the older and removes the other."""
    owner, guest, event = await owner_guest_event(api, make_user)
    first = await answer(api, guest, event, "maybe")
    # The second row as it was written before: same person, own address.
    live_server.call(live_server.db.execute(
        """INSERT INTO rsvps (id, event_id, user_id, attendee_email, status)
           SELECT 'rsvp_' || md5(random()::text), event_id, user_id, $2, 'not_going'
           FROM rsvps WHERE id = $1""",
        first["id"], guest.email))
    assert len(await everyone(api, owner, event)) == 2
    again = await answer(api, guest, event, "going", expected=200,
                         attendee_email=guest.email.upper())
    assert again["id"] == first["id"] and again["status"] == "going"
    assert await everyone(api, owner, event) == [again]
    await assert_counts(api, owner, event, going=1)
