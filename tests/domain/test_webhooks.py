"""Webhook endpoints (docs/api-choices.md, "Webhooks"): management, validation, permission, and the
outbox written in the transaction of the change. Delivery itself is in
test_webhook_delivery.py.

Endpoints here point at `.invalid` hosts (RFC 6761: never resolved), so the
shared service's worker fails fast and sends nothing anywhere.
"""

from __future__ import annotations

import base64
from typing import Any

import asyncpg
import orjson
import pytest
from conftest import Api, LiveServer, User, assert_error, new_event, new_profile

from db.database import Database
from domain import accounts, events
from domain.notify.webhooks import EVENT_TYPES

FIELDS = {"id", "profile_id", "url", "event_types", "is_active", "disabled_reason",
          "created_at", "updated_at"}
URL = "https://hooks.invalid/kalends"


def _path(profile: dict[str, Any]) -> str:
    return f"/v1/profiles/{profile['id']}/webhook-endpoints"


async def _create(api: Api, owner: User, profile: dict[str, Any], **fields: Any
                  ) -> dict[str, Any]:
    status, body, headers = await api.post(_path(profile), owner, json={"url": URL, **fields})
    assert status == 201, body
    assert headers["Location"].endswith(f"/v1/webhook-endpoints/{body['id']}")
    return dict(body)


async def _tool(api: Api, user: User, name: str, arguments: dict[str, Any],
                toolsets: str = "core") -> tuple[int, Any, Any]:
    """tools/call on /mcp-developer, which takes API keys."""
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": name, "arguments": arguments,
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                  "io.modelcontextprotocol/clientCapabilities": {},
                  "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"}}}}
    return await api.post("/mcp-developer", user, data=orjson.dumps(call), headers={
        "Content-Type": "application/json", "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "tools/call", "Mcp-Name": name, "X-MCP-Toolsets": toolsets})


async def _messages(live: LiveServer, profile_id: str) -> list[str]:
    assert live.db.dsn is not None
    conn = await asyncpg.connect(live.db.dsn)  # the service's pool lives on its own loop
    try:
        return [r["type"] for r in await conn.fetch(
            "SELECT type FROM webhook_messages WHERE profile_id = $1 ORDER BY created_at",
            profile_id)]
    finally:
        await conn.close()


async def test_create_shows_the_secret_once(api: Api, make_user: Any) -> None:
    owner = await make_user()
    profile = await new_profile(api, owner)
    created = await _create(api, owner, profile)
    assert set(created) == FIELDS | {"secret"}
    assert created["id"].startswith("whe_") and created["profile_id"] == profile["id"]
    assert created["url"] == URL and created["is_active"] is True
    assert created["disabled_reason"] is None
    assert created["event_types"] == list(EVENT_TYPES)  # all, by default
    secret = created["secret"]
    assert secret.startswith("whsec_")
    assert len(base64.b64decode(secret.removeprefix("whsec_"), validate=True)) == 32

    status, got, _ = await api.get(f"/v1/webhook-endpoints/{created['id']}", owner)
    assert status == 200
    assert got == {k: v for k, v in created.items() if k != "secret"}
    status, listed, _ = await api.get(_path(profile), owner)
    assert status == 200 and listed["data"] == [got] and listed["has_more"] is False
    # A second endpoint has a secret of its own.
    assert (await _create(api, owner, profile))["secret"] != secret


async def test_update_list_and_delete(api: Api, make_user: Any) -> None:
    owner = await make_user()
    profile = await new_profile(api, owner)
    first = await _create(api, owner, profile, event_types=["event.created"])
    second = await _create(api, owner, profile, is_active=False)
    assert first["event_types"] == ["event.created"] and second["is_active"] is False

    path = f"/v1/webhook-endpoints/{first['id']}"
    status, body, _ = await api.patch(path, owner, json={
        "url": "https://other.invalid/x?y=1", "event_types": ["rsvp.deleted", "event.deleted"]})
    assert status == 200, body
    assert body["url"] == "https://other.invalid/x?y=1"
    assert body["event_types"] == ["rsvp.deleted", "event.deleted"]
    assert body["updated_at"] >= first["updated_at"] and "secret" not in body

    status, page1, _ = await api.get(_path(profile) + "?limit=1", owner)
    assert status == 200 and page1["has_more"] and [e["id"] for e in page1["data"]] == [
        first["id"]]
    status, page2, _ = await api.get(_path(profile), owner,
                                     params={"limit": 1, "cursor": page1["next_cursor"]})
    assert status == 200 and [e["id"] for e in page2["data"]] == [second["id"]]

    status, _, _ = await api.delete(path, owner)
    assert status == 204
    status, body, _ = await api.get(path, owner)
    assert_error(status, body, 404, "resource_not_found", "endpoint_id")
    status, body, _ = await api.delete(path, owner)
    assert_error(status, body, 404, "resource_not_found", "endpoint_id")


@pytest.mark.parametrize(("body", "code", "param"), [
    ({"url": "http://hooks.invalid/x"}, "invalid_field", "url"),
    ({"url": "ftp://hooks.invalid/x"}, "invalid_field", "url"),
    ({"url": "https://10.1.2.3/x"}, "invalid_field", "url"),
    ({"url": "https://169.254.169.254/latest/meta-data"}, "invalid_field", "url"),
    ({"url": "https://127.0.0.1:8443/x"}, "invalid_field", "url"),
    ({"url": "https://[::1]/x"}, "invalid_field", "url"),
    ({"url": "https://[fe80::1]/x"}, "invalid_field", "url"),
    ({"url": "https://[::ffff:192.168.0.1]/x"}, "invalid_field", "url"),
    ({"url": "http://localhost:9000/x"}, "invalid_field", "url"),
    # Loopback by name (RFC 6761), and IPv4 in the spellings a URL parser or a
    # resolver (inet_aton) reads as an address: refused now, not only at delivery.
    ({"url": "https://localhost:8443/x"}, "invalid_field", "url"),
    ({"url": "https://LOCALHOST.:8443/x"}, "invalid_field", "url"),
    ({"url": "https://sub.localhost/x"}, "invalid_field", "url"),
    ({"url": "https://0x7f.0.0.1:8443/x"}, "invalid_field", "url"),
    ({"url": "https://0x7f000001/x"}, "invalid_field", "url"),
    ({"url": "https://0x7f.1/x"}, "invalid_field", "url"),
    ({"url": "https://127.1/x"}, "invalid_field", "url"),
    ({"url": "https://2130706433/x"}, "invalid_field", "url"),
    ({"url": "https://0177.0.0.1/x"}, "invalid_field", "url"),
    ({"url": "https://169.254.43518/latest/meta-data"}, "invalid_field", "url"),
    ({"url": "not a url"}, "invalid_field", "url"),
    ({}, "missing_field", "url"),
    ({"url": URL, "event_types": []}, "invalid_field", "event_types"),
    ({"url": URL, "event_types": ["event.exploded"]}, "invalid_field", "event_types.0"),
    ({"url": URL, "event_types": ["rsvp.created", "rsvp.created"]}, "invalid_field",
     "event_types"),
    ({"url": URL, "secret": "whsec_mine"}, "unknown_field", "secret"),
    ({"url": URL, "is_active": None}, "invalid_field", "is_active"),
])
async def test_bad_input_is_refused_and_changes_nothing(
    api: Api, make_user: Any, body: dict[str, Any], code: str, param: str,
) -> None:
    owner = await make_user()
    profile = await new_profile(api, owner)
    kept = await _create(api, owner, profile)
    status, answer, _ = await api.post(_path(profile), owner, json=body)
    error = assert_error(status, answer, 400, code, param)
    if param == "url" and code == "invalid_field":
        assert error["details"] == {"value": body["url"]}
    if code == "invalid_field":  # the same rule on update
        status, answer, _ = await api.patch(f"/v1/webhook-endpoints/{kept['id']}", owner,
                                            json={param.split(".")[0]: body[param.split(".")[0]]})
        assert_error(status, answer, 400, code, param)
    status, listed, _ = await api.get(_path(profile), owner)
    assert listed["data"] == [{k: v for k, v in kept.items() if k != "secret"}]


async def test_only_the_profiles_administrators_manage_its_endpoints(
    api: Api, live_server: LiveServer, make_user: Any,
) -> None:
    owner, admin, member, stranger = [await make_user() for _ in range(4)]
    org = live_server.admin(accounts.create_organization, "Hall", owner.email, None)[
        "organization_id"]
    live_server.admin(accounts.add_member, org, admin.email, "admin")
    live_server.admin(accounts.add_member, org, member.email, "member")
    profile = await new_profile(api, owner, organization_id=org)
    endpoint = await _create(api, admin, profile)  # an admin may
    path = f"/v1/webhook-endpoints/{endpoint['id']}"

    calls = [("GET", _path(profile), None), ("POST", _path(profile), {"url": URL}),
             ("GET", path, None), ("PATCH", path, {"is_active": False}),
             ("POST", path + "/rotate-secret", None), ("DELETE", path, None)]
    for method, target, body in calls:
        # A member learns it exists and may not touch it; anyone else sees nothing.
        status, answer, _ = await api.request(method, target, member, json=body)
        assert_error(status, answer, 403, "forbidden")
        status, answer, _ = await api.request(method, target, stranger, json=body)
        assert_error(status, answer, 404, "resource_not_found")
    status, answer, _ = await api.get(path, owner)
    assert status == 200 and answer["is_active"] is True

    status, answer, _ = await api.get("/v1/webhook-endpoints/whe_nope", owner)
    assert_error(status, answer, 400, "invalid_id", "endpoint_id")
    status, answer, _ = await api.get("/v1/profiles/prf_nope/webhook-endpoints", owner)
    assert_error(status, answer, 400, "invalid_id", "profile_id")


async def test_a_deleted_profile_takes_no_new_endpoint(api: Api, make_user: Any) -> None:
    owner = await make_user()
    profile = await new_profile(api, owner)
    assert (await api.delete(f"/v1/profiles/{profile['id']}", owner))[0] == 204
    status, answer, _ = await api.post(_path(profile), owner, json={"url": URL})
    assert_error(status, answer, 404, "resource_not_found", "profile_id")


async def test_the_outbox_is_written_with_the_change_or_not_at_all(
    api: Api, live_server: LiveServer, make_user: Any,
) -> None:
    owner, fan = await make_user(), await make_user()
    quiet = await new_profile(api, owner)
    await new_event(api, owner, quiet)
    assert await _messages(live_server, quiet["id"]) == []  # no endpoint, no message

    profile = await new_profile(api, owner)
    await _create(api, owner, profile, event_types=["event.created", "rsvp.created"])
    event = await new_event(api, owner, profile, slug="taken")
    # A change that fails (the slug is taken) leaves no message behind.
    status, answer, _ = await api.post(f"/v1/profiles/{profile['id']}/events", owner, json={
        "title": "Twin", "slug": "taken", "start_time": "2031-05-06T10:00",
        "start_timezone": "Europe/Paris"})
    assert_error(status, answer, 409, "conflict", "slug")
    # Neither does a refused RSVP (its event is cancelled).
    await api.post(f"/v1/events/{event['id']}/cancel", owner, json={})
    status, answer, _ = await api.post(f"/v1/events/{event['id']}/rsvps", fan,
                                       json={"status": "going"})
    assert_error(status, answer, 409, "event_cancelled")
    # Types nobody listens to are not recorded.
    await api.patch(f"/v1/events/{event['id']}", owner, json={"title": "Renamed"})
    assert await _messages(live_server, profile["id"]) == ["event.created"]


async def test_every_transport_writes_with_its_messages_and_a_bare_write_records_none(
    api: Api, live_server: LiveServer, make_user: Any,
) -> None:
    """REST, MCP and /graphql writes record their messages with the registry's reads
    (registry/calls.py). A write run outside that unit of work (a new path that forgot
    it) fails, and its change goes with it: no event without its message."""
    owner = await make_user()
    profile = await new_profile(api, owner)
    await new_profile(api, owner)  # one without endpoints
    await _create(api, owner, profile, event_types=["event.created"])
    await new_event(api, owner, profile, title="By REST")
    status, body, _ = await api.post("/graphql", owner, json={
        "query": "mutation($p: ID!) { create_profile_event(profile_id: $p, input: {"
                 "title: \"By GraphQL\", start_time: \"2031-05-06T10:00\", "
                 "start_timezone: \"Europe/Paris\"}) { id } }",
        "variables": {"p": profile["id"]}})
    assert status == 200 and "errors" not in body, body
    status, body, _ = await _tool(api, owner, "createProfileEvent", {
        "profile_id": profile["id"], "title": "By MCP", "start_time": "2031-05-07T10:00",
        "start_timezone": "Europe/Paris"})
    assert status == 200 and body["result"]["isError"] is False, body
    assert live_server.db.dsn is not None
    db = await Database.connect(live_server.db.dsn, min_size=1, max_size=1)
    try:
        await _bare_write_fails(db, profile["id"])
    finally:
        await db.close()


async def _bare_write_fails(db: Database, profile_id: str) -> None:
    titles = [orjson.loads(r["body"])["data"]["title"] for r in await db.fetch(
        "SELECT body FROM webhook_messages WHERE profile_id = $1 ORDER BY created_at",
        profile_id)]
    assert titles == ["By REST", "By GraphQL", "By MCP"]

    row = await db.fetchrow("SELECT * FROM profiles WHERE id = $1", profile_id)
    data = events.ProfileEventCreate(title="Bare", start_time="2031-05-08T10:00",
                                     start_timezone="Europe/Paris")
    with pytest.raises(RuntimeError, match="outside `rendered_by`"):
        await events.create(db, row, data)
    # A profile without endpoints too: the path, not the data, decides.
    quiet = await db.fetchrow("SELECT * FROM profiles WHERE id <> $1 AND owner_user_id = $2"
                              " AND deleted_at IS NULL LIMIT 1", profile_id, row["owner_user_id"])
    assert quiet is not None
    with pytest.raises(RuntimeError, match="outside `rendered_by`"):
        await events.create(db, quiet, data)
    assert await db.fetchval("SELECT count(*) FROM events WHERE profile_id = $1"
                             " AND title = 'Bare'", profile_id) == 0
    assert await db.fetchval("SELECT count(*) FROM events WHERE title = 'Bare'"
                             " AND profile_id = $1", quiet["id"]) == 0
    assert await db.fetchval("SELECT count(*) FROM webhook_messages WHERE profile_id = $1",
                             profile_id) == 3


async def test_graphql_and_mcp_see_the_same_endpoints(
    api: Api, make_user: Any,
) -> None:
    owner = await make_user()
    profile = await new_profile(api, owner)
    endpoint = await _create(api, owner, profile)
    query = """query($id: ID!) { webhook_endpoints(profile_id: $id) {
        data { id url event_types is_active } } }"""
    status, answer, _ = await api.post("/graphql", owner, json={
        "query": query, "variables": {"id": profile["id"]}})
    assert status == 200, answer
    assert answer["data"]["webhook_endpoints"]["data"] == [
        {k: endpoint[k] for k in ("id", "url", "event_types", "is_active")}]

    status, answer, _ = await _tool(api, owner, "getWebhookEndpoint",
                                    {"endpoint_id": endpoint["id"]}, toolsets="webhooks")
    assert status == 200, answer
    result = answer["result"]
    assert result.get("isError") is not True, result
    assert result["structuredContent"] == {k: v for k, v in endpoint.items() if k != "secret"}


async def _rows(live: LiveServer, sql: str, *args: Any) -> list[asyncpg.Record]:
    assert live.db.dsn is not None
    conn = await asyncpg.connect(live.db.dsn)
    try:
        return list(await conn.fetch(sql, *args))
    finally:
        await conn.close()


async def test_a_series_deleted_with_its_events_reports_each_event_deleted(
    api: Api, live_server: LiveServer, make_user: Any,
) -> None:
    owner = await make_user()
    profile = await new_profile(api, owner)
    await _create(api, owner, profile, event_types=["event.deleted"])
    only, shared = [await new_event(api, owner, profile, title=t) for t in ("Only", "Shared")]
    mine, other = [
        (await api.post(f"/v1/profiles/{profile['id']}/series", owner,
                        json={"name": n, "slug": n.lower()}))[1] for n in ("Mine", "Other")]
    for series, event in ((mine, only), (mine, shared), (other, shared)):
        status, _, _ = await api.post(f"/v1/series/{series['id']}/events", owner,
                                      json={"event_id": event["id"]})
        assert status == 204
    status, _, _ = await api.delete(f"/v1/series/{mine['id']}?cascade_exclusive_events=true",
                                    owner)
    assert status == 200
    rows = await _rows(live_server, "SELECT type, body FROM webhook_messages"
                       " WHERE profile_id = $1", profile["id"])
    assert [r["type"] for r in rows] == ["event.deleted"]
    assert orjson.loads(rows[0]["body"])["data"] == only  # as it was, all of it
    assert (await api.get(f"/v1/events/{shared['id']}", owner))[0] == 200


async def test_delivered_messages_are_pruned_and_pending_ones_kept(
    api: Api, live_server: LiveServer, make_user: Any,
) -> None:
    from datetime import timedelta

    from db import webhooks as store

    owner = await make_user()
    profile = await new_profile(api, owner)
    endpoint = await _create(api, owner, profile, is_active=True)
    for title in ("Old", "Waiting"):
        await new_event(api, owner, profile, title=title)
    [old, waiting] = await _rows(
        live_server, "SELECT m.id FROM webhook_messages m WHERE m.profile_id = $1"
        " ORDER BY m.created_at", profile["id"])
    await _rows(live_server, "UPDATE webhook_deliveries SET state = 'delivered',"
                " delivered_at = now() - interval '8 days' WHERE message_id = $1", old["id"])
    await _rows(live_server, "UPDATE webhook_messages SET created_at = now() - interval"
                " '8 days' WHERE profile_id = $1", profile["id"])
    live_server.call(store.prune(live_server.db, timedelta(days=7)))
    left = await _rows(live_server, "SELECT message_id FROM webhook_deliveries"
                       " WHERE endpoint_id = $1", endpoint["id"])
    assert [r["message_id"] for r in left] == [waiting["id"]]
    kept = await _rows(live_server, "SELECT id FROM webhook_messages WHERE profile_id = $1",
                       profile["id"])
    assert [r["id"] for r in kept] == [waiting["id"]]


async def test_messages_queued_before_ordering_per_event_keep_their_order_per_event(
    database_url: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Migration 0019 gives every queued delivery its event, from the stored body,
    and each endpoint a lane per event whose head is the oldest still pending."""
    import secrets
    from urllib.parse import urlsplit, urlunsplit

    import db.migrate

    name = f"kalends_lanes_{secrets.token_hex(4)}"
    server = urlunsplit(urlsplit(database_url)._replace(path="/postgres"))
    dsn = urlunsplit(urlsplit(database_url)._replace(path="/" + name))
    admin = await asyncpg.connect(server)
    await admin.execute(f"CREATE DATABASE {name}")
    try:
        every = db.migrate._migrations()
        monkeypatch.setattr(db.migrate, "_migrations",
                            lambda: [m for m in every if m[0] < "0019"])
        await db.migrate.migrate(dsn)
        conn = await asyncpg.connect(dsn)
        try:
            # Rows as the old code left them; no profile needed for that.
            await conn.execute("SET session_replication_role = replica")
            await conn.execute("INSERT INTO webhook_endpoints (id, profile_id, url, event_types,"
                               " secret) VALUES ('whe_a', 'prf_x', 'https://a.example', '{}',"
                               " ''::bytea)")
            queued = [("event.created", {"id": "evt_1"}), ("rsvp.created",
                       {"id": "rsv_1", "event_id": "evt_2"}), ("event.updated", {"id": "evt_1"}),
                      ("rsvp.deleted", {"id": "rsv_2", "event_id": "evt_1"})]
            for i, (kind, data) in enumerate(queued):
                body = orjson.dumps({"type": kind, "timestamp": "", "data": data}).decode()
                await conn.execute("INSERT INTO webhook_messages (id, profile_id, type, body)"
                                   " VALUES ($1, 'prf_x', $2, $3)", f"msg_{i}", kind, body)
                await conn.execute("INSERT INTO webhook_deliveries (endpoint_id, message_id,"
                                   " state) VALUES ('whe_a', $1, $2)", f"msg_{i}",
                                   "delivered" if i == 0 else "pending")
            monkeypatch.setattr(db.migrate, "_migrations", lambda: every)
            await db.migrate.migrate(dsn)
            rows = await conn.fetch("SELECT message_id, resource_id FROM webhook_deliveries"
                                    " ORDER BY seq")
            assert [(r["message_id"], r["resource_id"]) for r in rows] == [
                ("msg_0", "evt_1"), ("msg_1", "evt_2"), ("msg_2", "evt_1"), ("msg_3", "evt_1")]
            lanes = await conn.fetch("SELECT resource_id FROM webhook_lanes"
                                     " WHERE endpoint_id = 'whe_a' AND due_at <= now()"
                                     " ORDER BY resource_id")
            assert [r["resource_id"] for r in lanes] == ["evt_1", "evt_2"]
        finally:
            await conn.close()
    finally:
        await admin.execute(f"DROP DATABASE {name} WITH (FORCE)")
        await admin.close()
