"""docs/http.md ("HTTP conventions", "Pages", "Errors") on the REST surface: envelopes, statuses,
headers, auth."""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any
from urllib.parse import urlsplit

import orjson
import pytest
from conftest import assert_error

from domain import accounts
from registry import OPERATIONS
from rest_bridge import feeds

BAD = "prf_" + "z" * 32


async def test_request_id_is_echoed_or_generated(api: Any, user: Any) -> None:
    status, _, headers = await api.get("/v1/organizations", user, headers={"X-Request-Id": "abc.1-2_3"})
    assert status == 200
    assert headers["X-Request-Id"] == "abc.1-2_3"
    _, body, headers = await api.get("/v1/profiles/" + BAD, user, headers={"X-Request-Id": "bad id!"})
    generated = headers["X-Request-Id"]
    assert generated != "bad id!" and re.fullmatch(r"[A-Za-z0-9_.-]{1,128}", generated)
    assert body["error"]["request_id"] == generated


async def test_unknown_route_and_wrong_method(api: Any, user: Any) -> None:
    status, body, _ = await api.get("/v1/nothing-here", user)
    assert_error(status, body, 404, "route_not_found")
    status, body, headers = await api.request("PUT", "/v1/profiles", user, json={})
    assert_error(status, body, 405, "method_not_allowed")
    assert set(headers["Allow"].split(",")) == {"GET", "HEAD", "POST"}


def _example_path(path: str) -> str:
    """`path` with each parameter replaced by a well-formed ID of its kind."""
    def fill(match: re.Match[str]) -> str:
        name = match[1]
        prefix = {"profile_id": "prf", "event_id": "evt", "series_id": "ser", "rsvp_id": "rsv",
                  "calendar_id": "cal", "subscription_id": "sub", "follow_id": "fol",
                  "organization_id": "org"}.get(name, "xxx")
        return f"{prefix}_{'0' * 32}"
    return re.sub(r"\{(\w+)\}", fill, path)


async def test_every_route_answers_405_for_a_method_it_lacks(api: Any, user: Any) -> None:
    """A literal segment is never taken for an ID: PATCH /v1/events/{id}/rsvps/stats
    is 405 (naming GET), not updateRsvp's 400 invalid_id for the ID "stats"."""
    methods: dict[str, set[str]] = {}
    for op in OPERATIONS.values():
        methods.setdefault(op.path, set()).add(op.method)
    assert "/v1/events/{event_id}/rsvps/stats" in methods
    for path, allowed in methods.items():
        allowed = allowed | ({"HEAD"} if "GET" in allowed else set())
        for method in sorted({"GET", "POST", "PATCH", "PUT", "DELETE"} - allowed):
            status, body, headers = await api.request(method, _example_path(path), user,
                                                      json={})
            assert_error(status, body, 405, "method_not_allowed")
            assert set(headers["Allow"].split(",")) == allowed, (method, path)


async def test_head_is_get_without_the_body(api: Any, user: Any) -> None:
    profile = (await api.post("/v1/profiles", user, json={
        "platform_id": f"head-{os_token()}", "display_name": "Head"}))[1]
    for path in ("/v1/profiles", f"/v1/profiles/{profile['id']}", "/v1/profiles/" + BAD,
                 f"/v1/profiles/{MISSING}"):
        got, _, got_headers = await api.get(path, user)
        async with api._session.head(api.base + path, headers=user.headers) as response:
            assert response.status == got, path
            assert await response.read() == b""
            assert response.headers["Content-Type"] == got_headers["Content-Type"]
            assert "RateLimit" in response.headers
    status, _, _ = await api.request("HEAD", "/v1/profiles")
    assert status == 401


MISSING = "prf_" + "0" * 32


async def test_authentication_failures(live_server: Any, api: Any, user: Any) -> None:
    for headers in ({}, {"Authorization": "Basic abc"}, {"Authorization": "Bearer "},
                    {"Authorization": "Bearer kal_unknown"}):
        status, body, resp_headers = await api.get("/v1/profiles", headers=headers)
        assert_error(status, body, 401, "not_authenticated")
        assert body["error"]["type"] == "authentication_error"
        assert resp_headers["WWW-Authenticate"].startswith("Bearer")


async def test_revoked_key_stops_working(live_server: Any, api: Any, user: Any) -> None:
    from db import accounts as store
    from domain.auth import hash_key

    assert (await api.get("/v1/profiles", user))[0] == 200
    assert live_server.call(store.revoke_key(live_server.db, hash_key(user.api_key)))
    status, body, _ = await api.get("/v1/profiles", user)
    assert_error(status, body, 401, "not_authenticated")


async def test_unclaimed_consumer(live_server: Any, api: Any) -> None:
    made = live_server.admin(accounts.create_consumer, "unclaimed-" + os_token())
    status, body, _ = await api.get("/v1/profiles", headers={"Authorization": "Bearer " + made["api_key"]})
    error = assert_error(status, body, 403, "consumer_not_claimed")
    assert error["type"] == "permission_error"


def os_token() -> str:
    import secrets

    return secrets.token_hex(4)


async def test_body_must_be_a_json_object(api: Any, user: Any) -> None:
    for raw in (b"{not json", b"[1, 2]", b'"text"', b"null"):
        status, body, _ = await api.post(
            "/v1/profiles", user, data=raw, headers={"Content-Type": "application/json"}
        )
        assert_error(status, body, 400, "invalid_json")


async def test_body_must_be_declared_json(api: Any, user: Any) -> None:
    status, body, _ = await api.post(
        "/v1/profiles", user, data=b"platform_id=abc", headers={"Content-Type": "text/plain"}
    )
    assert_error(status, body, 415, "unsupported_media_type")


async def test_body_larger_than_one_mebibyte(api: Any, user: Any) -> None:
    huge = b'{"display_name": "' + b"x" * (1024 * 1024) + b'"}'
    status, body, _ = await api.post(
        "/v1/profiles", user, data=huge, headers={"Content-Type": "application/json"}
    )
    assert_error(status, body, 413, "payload_too_large")


async def test_unknown_and_nested_unknown_fields(api: Any, user: Any) -> None:
    status, body, _ = await api.post(
        "/v1/profiles", user, json={"platform_id": "abcd", "display_name": "x", "featured_event_id": 1}
    )
    assert_error(status, body, 400, "unknown_field", param="featured_event_id")


async def test_missing_and_invalid_fields(api: Any, user: Any) -> None:
    status, body, _ = await api.post("/v1/profiles", user, json={"display_name": "x"})
    assert_error(status, body, 400, "missing_field", param="platform_id")
    status, body, _ = await api.post(
        "/v1/profiles", user, json={"platform_id": "abcd", "display_name": "x", "is_private": "yes"}
    )
    error = assert_error(status, body, 400, "invalid_field", param="is_private")
    assert error["details"] == {"value": "yes"}


async def test_idempotency_key_is_validated_not_deduplicated(api: Any, user: Any) -> None:
    status, body, _ = await api.post(
        "/v1/profiles", user, json={"platform_id": "idem-" + os_token(), "display_name": "x"},
        headers={"Idempotency-Key": "short"},
    )
    assert_error(status, body, 400, "invalid_idempotency_key", param="Idempotency-Key")
    assert (await api.get("/v1/profiles", user))[1]["data"] == []  # nothing was created

    key = {"Idempotency-Key": "retry_" + os_token() + "-abc"}
    first = await api.post("/v1/profiles", user, json={"platform_id": "idem-" + os_token(), "display_name": "x"}, headers=key)
    second = await api.post("/v1/profiles", user, json={"platform_id": "idem-" + os_token(), "display_name": "x"}, headers=key)
    assert first[0] == second[0] == 201
    assert first[1]["id"] != second[1]["id"]


async def test_created_resources_have_a_location(api: Any, user: Any) -> None:
    status, body, headers = await api.post(
        "/v1/profiles", user, json={"platform_id": "loc-" + os_token(), "display_name": "x"}
    )
    assert status == 201
    assert headers["Location"] == f"/v1/profiles/{body['id']}"
    assert (await api.get(headers["Location"], user))[0] == 200


async def test_health_and_openapi_need_no_key(api: Any) -> None:
    assert (await api.get("/healthz"))[:2] == (200, {"status": "ok"})
    assert (await api.get("/readyz"))[:2] == (200, {"status": "ready"})
    status, doc, _ = await api.get("/openapi.json")
    assert status == 200 and doc["openapi"].startswith("3.1")
    operation_ids = {
        op["operationId"] for path in doc["paths"].values() for op in path.values()
    }
    assert operation_ids == set(OPERATIONS) | {feeds.OPERATION_ID}  # the one route beside it


async def test_timestamps_are_utc_whole_seconds(api: Any, user: Any) -> None:
    _, body, _ = await api.post(
        "/v1/profiles", user, json={"platform_id": "ts-" + os_token(), "display_name": "x"}
    )
    for field in ("created_at", "updated_at"):
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", body[field]), body[field]


async def _raw(base: str, data: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send `data` as it is (no HTTP client would) and read the answer to the end:
    the server closes the connection after refusing a message it cannot parse."""
    url = urlsplit(base)
    reader, writer = await asyncio.open_connection(url.hostname, url.port)
    try:
        writer.write(data)
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), 30)
    finally:
        writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines)}
    return int(status_line.split()[1]), headers, body


@pytest.mark.parametrize(("raw", "expected", "code"), [
    (b"GET /v1/profiles?q=" + b"a" * 8200 + b" HTTP/1.1\r\nHost: kalends\r\n\r\n",
     431, "header_too_large"),
    (b"GET /healthz HTTP/1.1\r\nHost: kalends\r\nX-Note: a\x00b\r\n\r\n",
     400, "invalid_json"),
    (b"GET /healthz HTTP/1.1\r\nHost: kalends\r\nX-Long: " + b"b" * 9000 + b"\r\n\r\n",
     431, "header_too_large"),
], ids=["request line over 8190 bytes", "NUL in a header", "header over 8190 bytes"])
async def test_what_the_http_parser_refuses_gets_the_envelope(live_server: Any, raw: bytes,
                                                             expected: int, code: str,
                                                             caplog: Any) -> None:
    """aiohttp's parser refuses these before any middleware runs (web/protocol.py):
    still the error envelope, and one access line at info, no error or traceback."""
    caplog.set_level(logging.INFO)
    status, headers, body = await _raw(live_server.url, raw)
    assert headers["content-type"] == "application/json", body
    error = assert_error(status, orjson.loads(body), expected, code)
    assert error["type"] == "invalid_request_error"
    assert headers["x-request-id"] == error["request_id"]
    mine = [r for r in caplog.records if r.name.startswith(("aiohttp", "kalends.http", "kalends.access"))]
    assert [(r.levelno, r.getMessage(), getattr(r, "status", None), r.exc_info)
            for r in mine] == [(logging.INFO, "request", expected, None)], mine
    assert mine[0].request_id == error["request_id"]  # type: ignore[attr-defined]
