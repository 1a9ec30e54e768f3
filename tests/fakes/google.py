"""A protocol fake of the Google Calendar API v3 and Google's OAuth token
endpoint, for tests: Google cannot be reached from the test machines. It
follows the public documentation of the parts Kalends uses:

- `POST /token` (grant_type=refresh_token): `{"access_token", "expires_in",
  "token_type"}`; a revoked refresh token is `400 {"error": "invalid_grant"}`.
  Access tokens expire (`401` with `WWW-Authenticate: Bearer`).
- `GET /users/me/calendarList`: pages (`maxResults`, `pageToken`,
  `nextPageToken`), `accessRole`, `primary`, `backgroundColor`, `timeZone`.
- `GET /calendars/{id}/events` with `singleEvents=false`, `showDeleted`,
  `pageToken`/`nextPageToken`; `nextSyncToken` on the last page only; with
  `syncToken`, only what changed since, deleted events as `status: cancelled`
  tombstones; an expired token is `410 Gone`. Recurring masters carry
  `recurrence`; modified or cancelled instances are events with
  `recurringEventId` and `originalStartTime`.
- `POST /calendars/{id}/events` (a client-supplied `id` must be unused: `409`),
  `PUT`/`DELETE /calendars/{id}/events/{eventId}` with `If-Match` (`412`);
  every write gives a new `etag`. A `PUT` to an instance of a recurring event, by the
  id `events.instances` gives it (`<eventId>_<original start: YYYYMMDDTHHMMSSZ, or
  YYYYMMDD all-day>`), changes that instance: an event of its own with
  `recurringEventId` and `originalStartTime`, as sync lists it.
- Rate limits: `403` with reason `rateLimitExceeded`, or `429`, with `Retry-After`.
"""

from __future__ import annotations

import itertools
import re
import secrets
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

PAGE = 3
_INSTANCE = re.compile(r"(.+)_([0-9]{8}(?:T[0-9]{6}Z)?)")


@dataclass
class GoogleState:
    refresh_tokens: set[str] = field(default_factory=set)
    access_tokens: set[str] = field(default_factory=set)
    calendars: list[dict[str, Any]] = field(default_factory=list)
    events: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    # Each write stamps the event with the next sequence number; a sync token is
    # the number it was issued at.
    clock: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    changed_at: dict[tuple[str, str], int] = field(default_factory=dict)
    expired_before: int = 0
    limited: int = 0
    limit_status: int = 403
    requests: list[str] = field(default_factory=list)

    def reset(self) -> None:
        """One mailbox again, empty: earlier grants revoked, calendars gone."""
        for store in (self.refresh_tokens, self.access_tokens, self.calendars, self.events,
                      self.changed_at, self.requests):
            store.clear()
        self.limited = 0

    def grant(self) -> str:
        token = "rt-" + secrets.token_hex(8)
        self.refresh_tokens.add(token)
        return token

    def add_calendar(self, cal_id: str, summary: str, role: str = "owner", **extra: Any) -> None:
        self.calendars.append({"kind": "calendar#calendarListEntry", "id": cal_id,
                               "summary": summary, "accessRole": role, **extra})
        self.events.setdefault(cal_id, {})

    def put(self, cal_id: str, event: dict[str, Any]) -> dict[str, Any]:
        """Create or replace an event as another client would."""
        tick = next(self.clock)
        stored = {"kind": "calendar#event", "status": "confirmed",
                  "iCalUID": f"{event['id']}@google.com", **event, "etag": f'"{tick}"'}
        self.events[cal_id][event["id"]] = stored
        self.changed_at[(cal_id, event["id"])] = tick
        return stored

    def remove(self, cal_id: str, event_id: str) -> None:
        """Delete as Google does: a cancelled tombstone that sync tokens report."""
        self.put(cal_id, {**self.events[cal_id][event_id], "status": "cancelled"})

    def expire_sync_tokens(self) -> None:
        self.expired_before = next(self.clock)

    def live(self, cal_id: str) -> list[dict[str, Any]]:
        return [e for e in self.events[cal_id].values() if e["status"] != "cancelled"]


def app(state: GoogleState) -> web.Application:
    routes = web.RouteTableDef()

    @web.middleware
    async def gate(request: web.Request, handler: Any) -> web.StreamResponse:
        state.requests.append(f"{request.method} {request.path}")
        if request.path == "/token":
            return await handler(request)
        if state.limited > 0:
            state.limited -= 1
            body = {"error": {"code": state.limit_status, "message": "Rate Limit Exceeded",
                              "errors": [{"reason": "rateLimitExceeded"}]}}
            return web.json_response(body, status=state.limit_status,
                                     headers={"Retry-After": "120"})
        token = request.headers.get("Authorization", "").removeprefix("Bearer ")
        if token not in state.access_tokens:
            return web.json_response(
                {"error": {"code": 401, "message": "Invalid Credentials",
                           "errors": [{"reason": "authError"}]}},
                status=401, headers={"WWW-Authenticate": 'Bearer realm="https://accounts.google.com/"'})
        return await handler(request)

    @routes.post("/token")
    async def token(request: web.Request) -> web.Response:
        form = await request.post()
        if form.get("grant_type") != "refresh_token" or \
                form.get("refresh_token") not in state.refresh_tokens:
            return web.json_response({"error": "invalid_grant",
                                      "error_description": "Token has been expired or revoked."},
                                     status=400)
        access = "at-" + secrets.token_hex(8)
        state.access_tokens.add(access)
        return web.json_response({"access_token": access, "expires_in": 3599,
                                  "token_type": "Bearer"})

    @routes.get("/users/me/calendarList")
    async def calendar_list(request: web.Request) -> web.Response:
        return _page(request, state.calendars, {"kind": "calendar#calendarList"})

    @routes.get("/calendars/{cal}/events")
    async def events(request: web.Request) -> web.Response:
        cal = request.match_info["cal"]
        if cal not in state.events:
            return _error(404, "notFound")
        sync = request.query.get("syncToken")
        since = 0
        if sync is not None:
            since = int(sync.removeprefix("st-"))
            if since < state.expired_before:
                return _error(410, "fullSyncRequired")
        items = [e for e in state.events[cal].values()
                 if state.changed_at[(cal, e["id"])] > since
                 and (sync is not None or e["status"] != "cancelled"
                      or "recurringEventId" in e)]
        items.sort(key=lambda e: state.changed_at[(cal, e["id"])])
        return _page(request, items, {"kind": "calendar#events"},
                     sync_token=f"st-{max(state.changed_at.values(), default=0)}")

    @routes.post("/calendars/{cal}/events")
    async def insert(request: web.Request) -> web.Response:
        cal = request.match_info["cal"]
        if _read_only(cal):
            return _error(403, "requiredAccessLevel")
        body = await request.json()
        event_id = body.get("id") or secrets.token_hex(12)
        if event_id in state.events[cal]:
            return _error(409, "duplicate")
        return web.json_response(state.put(cal, {**body, "id": event_id}))

    @routes.put("/calendars/{cal}/events/{event}")
    async def update(request: web.Request) -> web.Response:
        cal, event_id = request.match_info["cal"], request.match_info["event"]
        current = state.events[cal].get(event_id)
        instance = _INSTANCE.fullmatch(event_id)
        if current is None and (instance is None or instance[1] not in state.events[cal]):
            return _error(404, "notFound")
        if current is not None and \
                request.headers.get("If-Match", current["etag"]) != current["etag"]:
            return _error(412, "conditionNotMet")
        body = await request.json()
        return web.json_response(state.put(cal, {**body, "id": event_id}))

    @routes.delete("/calendars/{cal}/events/{event}")
    async def delete(request: web.Request) -> web.Response:
        cal, event_id = request.match_info["cal"], request.match_info["event"]
        current = state.events[cal].get(event_id)
        if current is None or current["status"] == "cancelled":
            return _error(410, "deleted")
        if request.headers.get("If-Match", current["etag"]) != current["etag"]:
            return _error(412, "conditionNotMet")
        state.remove(cal, event_id)
        return web.Response(status=204)

    def _read_only(cal: str) -> bool:
        return any(c["id"] == cal and c["accessRole"] not in ("owner", "writer")
                   for c in state.calendars)

    application = web.Application(middlewares=[gate])
    application.add_routes(routes)
    return application


def _page(request: web.Request, items: list[dict[str, Any]], base: dict[str, Any],
          sync_token: str | None = None) -> web.Response:
    start = int(request.query.get("pageToken", "0"))
    size = min(int(request.query.get("maxResults", "250")), PAGE)
    body = {**base, "items": items[start:start + size]}
    if start + size < len(items):
        body["nextPageToken"] = str(start + size)
    elif sync_token is not None:
        body["nextSyncToken"] = sync_token
    return web.json_response(body)


def _error(status: int, reason: str) -> web.Response:
    return web.json_response({"error": {"code": status, "message": reason,
                                        "errors": [{"reason": reason}]}}, status=status)
