"""Concurrent transitions (docs/api-choices.md, "Events, RSVPs and series"): each state change is
decided on its row as it stands when the change commits, so requests that race for
one transition answer as if they had run one after the other, and one transition
queues one webhook message, one change notification and one round of attendee mail.

Every test starts its requests at once (asyncio.gather against the live server),
most behind a gate (`_gated`: the test share-locks the contested row until every
request waits for it, so each has read what it reads before any commits), and
checks the outcome against what some serial order would give. The outbox
(`webhook_messages`, ordered by its deliveries' `seq`) and the change channel
(`kalends_changes`, listened to on a connection of the test's own) show what each
transition sent.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any

import asyncpg
import orjson
import pytest
from conftest import Api, LiveServer, User, assert_error, new_event, new_profile

from db.changes import CHANNEL
from domain.notify import attendee_mail

HOOK_URL = "https://hooks.invalid/race"  # never resolved: the worker's delivery fails fast
RACERS = 6


# ---------------------------------------------------------------------------
# helpers


async def _connect(live: LiveServer) -> asyncpg.Connection:
    assert live.db.dsn is not None
    return await asyncpg.connect(live.db.dsn)  # the service's pool lives on its own loop


async def _hooked_profile(api: Api, owner: User) -> dict[str, Any]:
    """A profile with a webhook endpoint for every type, so each change is queued."""
    profile = await new_profile(api, owner)
    status, body, _ = await api.post(f"/v1/profiles/{profile['id']}/webhook-endpoints", owner,
                                     json={"url": HOOK_URL})
    assert status == 201, body
    return profile


async def _messages(live: LiveServer, event_id: str) -> list[tuple[str, dict[str, Any]]]:
    """The event's messages (its own and its RSVPs'), (type, data), in outbox order;
    its creation left out."""
    conn = await _connect(live)
    try:
        rows = await conn.fetch(
            """
            SELECT m.type, m.body FROM webhook_messages m
            WHERE CASE WHEN m.type LIKE 'rsvp.%' THEN m.body::jsonb -> 'data' ->> 'event_id'
                       ELSE m.body::jsonb -> 'data' ->> 'id' END = $1
              AND m.type <> 'event.created'
            ORDER BY (SELECT min(d.seq) FROM webhook_deliveries d WHERE d.message_id = m.id)
            """,
            event_id)
    finally:
        await conn.close()
    return [(r["type"], orjson.loads(r["body"])["data"]) for r in rows]


class Changes:
    """The change notifications (GraphQL subscriptions' feed) seen while listening."""

    def __init__(self) -> None:
        self.payloads: list[str] = []

    def of(self, event_id: str) -> Counter[str]:
        return Counter(p.split()[0] for p in self.payloads if p.split()[-1] == event_id)


@pytest.fixture
async def changes(live_server: LiveServer) -> AsyncIterator[Changes]:
    seen = Changes()
    conn = await _connect(live_server)
    await conn.add_listener(CHANNEL, lambda *args: seen.payloads.append(args[-1]))
    try:
        yield seen
    finally:
        await conn.close()


async def _settle() -> None:
    """Notifications of the last commits on their way to the listening connection."""
    await asyncio.sleep(0.3)


@pytest.fixture
def mail_rounds(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Attendee-mail jobs queued, by event (the live server runs in this process)."""
    queued: Counter[str] = Counter()
    queue = attendee_mail.queue

    async def counting(tx: Any, event: Any) -> None:
        await queue(tx, event)
        if event["allow_notifications"]:
            queued[event["id"]] += 1

    monkeypatch.setattr(attendee_mail, "queue", counting)
    return queued


async def _together(*requests: Awaitable[tuple[int, Any, Any]]) -> list[tuple[int, Any]]:
    """Start every request at once; (status, body) of each, in the order given."""
    return [(status, body) for status, body, _ in await asyncio.gather(*requests)]


async def _gated(live: LiveServer, table: str, key: str,
                 *requests: Awaitable[tuple[int, Any, Any]]) -> list[tuple[int, Any]]:
    """Like `_together`, with the row `key` of `table` share-locked by the test until
    every request waits for it (or two seconds have passed): whatever each request
    read before its write, it read it before any of them committed. Then they go,
    as the row's lock hands them on one after another."""
    conn = await _connect(live)
    try:
        gate = conn.transaction()
        await gate.start()
        await conn.execute(f"SELECT 1 FROM {table} WHERE id = $1 FOR SHARE", key)
        racing = asyncio.ensure_future(_together(*requests))
        for _ in range(200):
            await conn.execute("SELECT pg_stat_clear_snapshot()")  # else one per transaction
            waiting = await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()")
            if waiting >= len(requests) or racing.done():
                break
            await asyncio.sleep(0.01)
        await gate.commit()
        return await racing
    finally:
        await conn.close()


def _parse(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


async def _notified_event(api: Api, owner: User, profile: dict[str, Any]) -> dict[str, Any]:
    event = await new_event(api, owner, profile, end_time="2031-05-06T11:00",
                            end_timezone="Europe/Paris")
    status, body, _ = await api.patch(f"/v1/events/{event['id']}/rsvp-settings", owner,
                                      json={"allow_notifications": True})
    assert status == 200, body
    return event


# ---------------------------------------------------------------------------
# events


async def test_concurrent_cancels_one_wins(
    api: Api, live_server: LiveServer, make_user: Callable[..., Awaitable[User]],
    changes: Changes, mail_rounds: Counter[str],
) -> None:
    owner = await make_user()
    profile = await _hooked_profile(api, owner)
    event = await _notified_event(api, owner, profile)
    path = f"/v1/events/{event['id']}/cancel"

    answers = await _gated(live_server, "events", event["id"],
                           *(api.post(path, owner, json={"reason": f"r{i}"})
                             for i in range(RACERS)))

    assert sorted(s for s, _ in answers) == [200] + [409] * (RACERS - 1), answers
    for status, body in answers:
        if status == 409:
            assert_error(status, body, 409, "event_cancelled")
    won = next(body for status, body in answers if status == 200)
    status, stored, _ = await api.get(f"/v1/events/{event['id']}", owner)
    assert stored["status"] == "cancelled"
    assert stored["cancellation_reason"] == won["cancellation_reason"]
    assert [t for t, _ in await _messages(live_server, event["id"])].count("event.cancelled") == 1
    await _settle()
    assert changes.of(event["id"])["event.cancelled"] == 1
    assert mail_rounds[event["id"]] == 1


async def test_concurrent_reschedules_each_see_the_one_before(
    api: Api, live_server: LiveServer, make_user: Callable[..., Awaitable[User]],
    changes: Changes, mail_rounds: Counter[str],
) -> None:
    """One reschedule sets a 3-hour span, the others keep the duration they find. In
    any serial order the last one leaves 3 hours (it either is that one or came after
    it); a reschedule that kept the duration of a row read before the others
    committed may leave 1."""
    owner = await make_user()
    profile = await _hooked_profile(api, owner)
    for _ in range(3):
        event = await _notified_event(api, owner, profile)  # 10:00-11:00
        path = f"/v1/events/{event['id']}/reschedule"
        explicit = api.post(path, owner, json={
            "start_time": "2031-06-01T09:00", "start_timezone": "Europe/Paris",
            "end_time": "2031-06-01T12:00", "end_timezone": "Europe/Paris"})
        keeping = [api.post(path, owner, json={
            "start_time": f"2031-06-{2 + i:02d}T09:00", "start_timezone": "Europe/Paris"})
            for i in range(RACERS - 1)]

        answers = await _gated(live_server, "events", event["id"], explicit, *keeping)

        assert [s for s, _ in answers] == [200] * RACERS, answers
        _, stored, _ = await api.get(f"/v1/events/{event['id']}", owner)
        assert _parse(stored["end_time"]) - _parse(stored["start_time"]) == timedelta(hours=3)
        sent = [data for t, data in await _messages(live_server, event["id"])
                if t == "event.rescheduled"]
        assert len(sent) == RACERS
        # In outbox order, every message after the 3-hour one keeps 3 hours.
        spans = [_parse(d["end_time"]) - _parse(d["start_time"]) for d in sent]
        assert spans == sorted(spans), spans
        assert spans[-1] == timedelta(hours=3)
        assert mail_rounds[event["id"]] == RACERS
    await _settle()
    assert changes.of(event["id"])["event.rescheduled"] == RACERS


async def test_cancel_and_patches_race_as_if_serial(
    api: Api, live_server: LiveServer, make_user: Callable[..., Awaitable[User]],
) -> None:
    """A PATCH that answers 200 ran before the cancel: its event.updated shows the
    event still scheduled and precedes event.cancelled; the others are 409."""
    owner = await make_user()
    profile = await _hooked_profile(api, owner)
    for _ in range(3):
        event = await new_event(api, owner, profile)
        path = f"/v1/events/{event['id']}"
        patches = [api.patch(path, owner, json={"title": f"Title {i}"})
                   for i in range(RACERS - 1)]
        cancel = api.post(f"{path}/cancel", owner, json={})

        answers = await _gated(live_server, "events", event["id"],
                               *patches[:2], cancel, *patches[2:])

        assert answers[2][0] == 200, answers
        patched = [a for i, a in enumerate(answers) if i != 2]
        for status, body in patched:
            if status != 200:
                assert_error(status, body, 409, "event_cancelled")
        sent = await _messages(live_server, event["id"])
        types = [t for t, _ in sent]
        assert types[-1] == "event.cancelled", types
        assert types.count("event.cancelled") == 1
        updated = [data for t, data in sent if t == "event.updated"]
        assert len(updated) == sum(1 for s, _ in patched if s == 200)
        assert all(d["status"] == "scheduled" for d in updated), updated


@pytest.mark.slow
@pytest.mark.parametrize("hooked", [False, True], ids=["no-endpoint", "endpoint"])
async def test_concurrent_deletes_one_wins(
    api: Api, live_server: LiveServer, make_user: Callable[..., Awaitable[User]],
    changes: Changes, hooked: bool,
) -> None:
    """With an endpoint or without: a profile without one renders no message, so
    nothing in the transaction reads the event again but the decision itself."""
    owner = await make_user()
    profile = await (_hooked_profile(api, owner) if hooked else new_profile(api, owner))
    events = [await new_event(api, owner, profile) for _ in range(3)]
    for event in events:
        path = f"/v1/events/{event['id']}"

        answers = await _gated(live_server, "events", event["id"],
                               *(api.delete(path, owner) for _ in range(RACERS)))

        assert sorted(s for s, _ in answers) == [204] + [404] * (RACERS - 1), answers
        for status, body in answers:
            if status == 404:
                assert_error(status, body, 404, "resource_not_found", "event_id")
        assert [t for t, _ in await _messages(live_server, event["id"])] == (
            ["event.deleted"] if hooked else [])
    await _settle()
    for event in events:
        assert changes.of(event["id"])["event.deleted"] == 1


async def test_delete_and_rsvps_race_as_if_serial(
    api: Api, live_server: LiveServer, make_user: Callable[..., Awaitable[User]],
) -> None:
    """An RSVP either came before the delete (201, its message before event.deleted,
    and gone with the event) or after it (404)."""
    owner = await make_user()
    attendees = [await make_user() for _ in range(RACERS - 1)]
    profile = await _hooked_profile(api, owner)
    for _ in range(3):
        event = await new_event(api, owner, profile)
        path = f"/v1/events/{event['id']}"
        rsvps = [api.post(f"{path}/rsvps", who, json={"status": "going"}) for who in attendees]

        answers = await _gated(live_server, "events", event["id"],
                               *rsvps[:2], api.delete(path, owner), *rsvps[2:])

        assert answers[2][0] == 204, answers
        answered = [a for i, a in enumerate(answers) if i != 2]
        for status, body in answered:
            if status != 201:
                assert_error(status, body, 404, "resource_not_found", "event_id")
        types = [t for t, _ in await _messages(live_server, event["id"])]
        assert types[-1] == "event.deleted", types
        assert types.count("event.deleted") == 1
        assert types.count("rsvp.created") == sum(1 for s, _ in answered if s == 201)


async def test_concurrent_rsvps_race_for_the_last_seat(
    api: Api, live_server: LiveServer, make_user: Callable[..., Awaitable[User]],
) -> None:
    owner = await make_user()
    attendees = [await make_user() for _ in range(RACERS)]
    profile = await _hooked_profile(api, owner)
    for waitlist in (False, True):
        event = await new_event(api, owner, profile)
        path = f"/v1/events/{event['id']}"
        status, body, _ = await api.patch(f"{path}/rsvp-settings", owner, json={
            "enable_capacity_limit": True, "capacity_limit": 1, "allow_waitlist": waitlist})
        assert status == 200, body

        answers = await _gated(live_server, "events", event["id"],
                               *(api.post(f"{path}/rsvps", who, json={"status": "going"})
                                 for who in attendees))

        going = [b for s, b in answers if s == 201 and b["status"] == "going"]
        assert len(going) == 1, answers
        for status, body in answers:
            if waitlist:
                assert status == 201 and body["status"] in ("going", "waitlist"), body
            elif status != 201:
                assert_error(status, body, 409, "capacity_reached")
        status, stats, _ = await api.get(f"{path}/rsvps/stats", owner)
        assert stats["going"] == 1 and stats["waitlist"] == (RACERS - 1 if waitlist else 0)


@pytest.mark.parametrize("hooked", [False, True], ids=["no-endpoint", "endpoint"])
async def test_concurrent_withdrawals_of_one_rsvp_one_wins(
    api: Api, live_server: LiveServer, make_user: Callable[..., Awaitable[User]],
    changes: Changes, hooked: bool,
) -> None:
    owner, attendee = await make_user(), await make_user()
    profile = await (_hooked_profile(api, owner) if hooked else new_profile(api, owner))
    event = await new_event(api, owner, profile)
    path = f"/v1/events/{event['id']}/rsvps"
    for round_ in range(1, 4):
        status, rsvp, _ = await api.post(path, attendee, json={"status": "going"})
        assert status == 201, rsvp

        answers = await _gated(live_server, "events", event["id"],
                               *(api.delete(f"{path}/{rsvp['id']}", who)
                                 for who in [attendee, owner] * (RACERS // 2)))

        assert sorted(s for s, _ in answers) == [204] + [404] * (RACERS - 1), answers
        for status, body in answers:
            if status == 404:
                assert_error(status, body, 404, "resource_not_found", "rsvp_id")
        types = [t for t, _ in await _messages(live_server, event["id"])]
        assert types.count("rsvp.deleted") == (round_ if hooked else 0), types
    await _settle()
    assert changes.of(event["id"])["rsvp.deleted"] == 3


async def test_concurrent_rsvp_settings_are_judged_on_the_stored_settings(
    api: Api, live_server: LiveServer, make_user: Callable[..., Awaitable[User]],
) -> None:
    """Turning the limit on and clearing it: whichever comes second breaks the rule
    that a limit needs a number, so it is refused (400), never a server error."""
    owner = await make_user()
    profile = await new_profile(api, owner)
    for _ in range(3):
        event = await new_event(api, owner, profile)
        path = f"/v1/events/{event['id']}/rsvp-settings"
        status, body, _ = await api.patch(path, owner, json={
            "enable_capacity_limit": False, "capacity_limit": 10})
        assert status == 200, body

        answers = await _gated(
            live_server, "events", event["id"],
            api.patch(path, owner, json={"enable_capacity_limit": True}),
            api.patch(path, owner, json={"capacity_limit": None}))

        assert sorted(s for s, _ in answers) == [200, 400], answers
        assert_error(*next(a for a in answers if a[0] == 400), 400, "field_dependency")
        status, stored, _ = await api.get(path, owner)
        assert stored["enable_capacity_limit"] is False or stored["capacity_limit"] == 10


# ---------------------------------------------------------------------------
# series


async def _series(api: Api, owner: User, profile: dict[str, Any], *events: dict[str, Any]
                  ) -> dict[str, Any]:
    status, series, _ = await api.post(f"/v1/profiles/{profile['id']}/series", owner, json={
        "name": "Season", "slug": f"season-{events[0]['id'][-8:] if events else 'x'}"})
    assert status == 201, series
    for event in events:
        status, body, _ = await api.post(f"/v1/series/{series['id']}/events", owner,
                                         json={"event_id": event["id"]})
        assert status == 204, body
    return series  # type: ignore[no-any-return]


async def test_concurrent_series_deletes_one_wins(
    api: Api, live_server: LiveServer, make_user: Callable[..., Awaitable[User]],
) -> None:
    owner = await make_user()
    profile = await _hooked_profile(api, owner)
    event = await new_event(api, owner, profile)
    series = await _series(api, owner, profile, event)

    answers = await _gated(live_server, "series", series["id"],
                           *(api.delete(f"/v1/series/{series['id']}", owner,
                                        params={"cascade_exclusive_events": "true"})
                             for _ in range(RACERS)))

    assert sorted(s for s, _ in answers) == [200] + [404] * (RACERS - 1), answers
    for status, body in answers:
        if status == 404:
            assert_error(status, body, 404, "resource_not_found", "series_id")
        else:
            assert body["member_count"] == 1 and body["deleted_event_count"] == 1
    assert [t for t, _ in await _messages(live_server, event["id"])] == ["event.deleted"]


async def test_series_cascade_and_event_deletes_delete_each_event_once(
    api: Api, live_server: LiveServer, make_user: Callable[..., Awaitable[User]],
    changes: Changes,
) -> None:
    owner = await make_user()
    profile = await _hooked_profile(api, owner)
    for _ in range(3):
        events = [await new_event(api, owner, profile) for _ in range(2)]
        series = await _series(api, owner, profile, *events)
        event_deletes = [api.delete(f"/v1/events/{e['id']}", owner)
                         for e in events for _ in range(2)]

        answers = await _together(
            *event_deletes[:2],
            api.delete(f"/v1/series/{series['id']}", owner,
                       params={"cascade_exclusive_events": "true"}),
            *event_deletes[2:])

        status, deletion = answers[2]
        assert status == 200, answers
        deleted_alone = [s for i, (s, _) in enumerate(answers) if i != 2]
        assert set(deleted_alone) <= {204, 404}, answers
        assert deletion["deleted_event_count"] + deleted_alone.count(204) == len(events)
        assert deletion["member_count"] == deletion["deleted_event_count"]
        for event in events:
            assert [t for t, _ in await _messages(live_server, event["id"])] == ["event.deleted"]
    await _settle()
    for event in events:
        assert changes.of(event["id"])["event.deleted"] == 1
