"""A protocol fake of Microsoft Graph v1.0 calendars and the Microsoft identity
platform's token endpoint, for tests: Microsoft cannot be reached from the
test machines. It follows the public documentation of the parts Kalends uses:

- `POST /token` (grant_type=refresh_token, scope): a new access token and a
  new refresh token every time; the one just used stops working (rotation), and
  a revoked or used one is `400 {"error": "invalid_grant"}`.
- `GET /me/calendars`: `value`, `@odata.nextLink` (absolute), `canEdit`,
  `isDefaultCalendar`, `hexColor`.
- `GET /me/calendars/{id}/calendarView/delta?startDateTime&endDateTime`:
  instances in the window (singleInstance, occurrence, exception; series
  masters too, which clients skip) in pages linked by absolute
  `@odata.nextLink` (`$skiptoken`), then an `@odata.deltaLink` (`$deltatoken`);
  the delta link returns what changed since, deletions as
  `{"id", "@removed": {"reason": "deleted"}}`. An invalidated token is `410`
  with code `syncStateNotFound`.
- `POST /me/calendars/{id}/events` (a repeated `transactionId` returns the
  event already made), `PATCH`/`DELETE /me/events/{id}` with `If-Match` (`412`);
  every write changes `@odata.etag`.
- Throttling: `429` with `Retry-After`.
"""

from __future__ import annotations

import itertools
import secrets
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

PAGE = 3


@dataclass
class GraphState:
    refresh_tokens: set[str] = field(default_factory=set)
    access_tokens: set[str] = field(default_factory=set)
    calendars: list[dict[str, Any]] = field(default_factory=list)
    events: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    removed: dict[str, dict[str, int]] = field(default_factory=dict)
    clock: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    changed_at: dict[str, int] = field(default_factory=dict)
    transactions: dict[str, str] = field(default_factory=dict)
    expired_before: int = 0
    limited: int = 0
    requests: list[str] = field(default_factory=list)

    def reset(self) -> None:
        """One mailbox again, empty: earlier grants revoked, calendars gone."""
        for store in (self.refresh_tokens, self.access_tokens, self.calendars, self.events,
                      self.removed, self.changed_at, self.transactions, self.requests):
            store.clear()
        self.limited = 0

    def grant(self) -> str:
        token = "mrt-" + secrets.token_hex(8)
        self.refresh_tokens.add(token)
        return token

    def add_calendar(self, cal_id: str, name: str, can_edit: bool = True, **extra: Any) -> None:
        self.calendars.append({"id": cal_id, "name": name, "canEdit": can_edit,
                               "hexColor": "", "isDefaultCalendar": False, **extra})
        self.events.setdefault(cal_id, {})
        self.removed.setdefault(cal_id, {})

    def put(self, cal_id: str, event: dict[str, Any]) -> dict[str, Any]:
        tick = next(self.clock)
        stored = {"type": "singleInstance", "isCancelled": False, "showAs": "busy",
                  "iCalUId": f"040000008200E000{event['id']}", **event,
                  "@odata.etag": f'W/"{tick}"'}
        self.events[cal_id][event["id"]] = stored
        self.changed_at[event["id"]] = tick
        return stored

    def remove(self, cal_id: str, event_id: str) -> None:
        self.events[cal_id].pop(event_id)
        self.removed[cal_id][event_id] = next(self.clock)

    def expire_delta_tokens(self) -> None:
        self.expired_before = next(self.clock)


def app(state: GraphState) -> web.Application:
    routes = web.RouteTableDef()

    @web.middleware
    async def gate(request: web.Request, handler: Any) -> web.StreamResponse:
        state.requests.append(f"{request.method} {request.path_qs}")
        if request.path == "/token":
            return await handler(request)
        if state.limited > 0:
            state.limited -= 1
            return web.json_response(
                {"error": {"code": "TooManyRequests", "message": "Please retry again later."}},
                status=429, headers={"Retry-After": "90"})
        token = request.headers.get("Authorization", "").removeprefix("Bearer ")
        if token not in state.access_tokens:
            return web.json_response(
                {"error": {"code": "InvalidAuthenticationToken",
                           "message": "Access token has expired or is not yet valid."}},
                status=401, headers={"WWW-Authenticate": 'Bearer realm=""'})
        return await handler(request)

    @routes.post("/token")
    async def token(request: web.Request) -> web.Response:
        form = await request.post()
        used = str(form.get("refresh_token"))
        if form.get("grant_type") != "refresh_token" or used not in state.refresh_tokens:
            return web.json_response({"error": "invalid_grant",
                                      "error_description": "AADSTS70008: expired or revoked"},
                                     status=400)
        state.refresh_tokens.discard(used)
        access = "mat-" + secrets.token_hex(8)
        state.access_tokens.add(access)
        return web.json_response({"token_type": "Bearer", "scope": str(form.get("scope")),
                                  "expires_in": 3599, "access_token": access,
                                  "refresh_token": state.grant()})

    @routes.get("/me/calendars")
    async def calendars(request: web.Request) -> web.Response:
        start = int(request.query.get("$skiptoken", "0"))
        size = int(request.query.get("$top", str(PAGE)))
        body: dict[str, Any] = {"value": state.calendars[start:start + size]}
        if start + size < len(state.calendars):
            body["@odata.nextLink"] = _link(request, "/me/calendars",
                                            {"$skiptoken": str(start + size)})
        return web.json_response(body)

    @routes.get("/me/calendars/{cal}/calendarView/delta")
    async def delta(request: web.Request) -> web.Response:
        cal = request.match_info["cal"]
        query = request.query
        path = request.path
        if "$deltatoken" in query:
            since = int(query["$deltatoken"])
            if since < state.expired_before:
                return web.json_response(
                    {"error": {"code": "syncStateNotFound",
                               "message": "The sync state is not found."}}, status=410)
            items: list[dict[str, Any]] = [
                e for e in state.events[cal].values() if state.changed_at[e["id"]] > since]
            items += [{"id": key, "@removed": {"reason": "deleted"}}
                      for key, tick in state.removed[cal].items() if tick > since]
            watermark = since
        elif "$skiptoken" in query:
            items = list(state.events[cal].values())
            watermark = int(query["watermark"])
        else:
            if "startDateTime" not in query or "endDateTime" not in query:
                return web.json_response({"error": {"code": "ErrorInvalidParameter"}},
                                         status=400)
            items = list(state.events[cal].values())
            watermark = 0
        start = int(query.get("$skiptoken", "0"))
        body: dict[str, Any] = {"value": items[start:start + PAGE]}
        if start + PAGE < len(items) and "$deltatoken" not in query:
            body["@odata.nextLink"] = _link(request, path, {
                "$skiptoken": str(start + PAGE), "watermark": str(watermark)})
        else:
            now = max([*state.changed_at.values(),
                       *(t for r in state.removed.values() for t in r.values()), 0])
            body["@odata.deltaLink"] = _link(request, path, {"$deltatoken": str(now)})
        return web.json_response(body)

    @routes.post("/me/calendars/{cal}/events")
    async def create(request: web.Request) -> web.Response:
        cal = request.match_info["cal"]
        if not next(c for c in state.calendars if c["id"] == cal)["canEdit"]:
            return _error(403, "ErrorAccessDenied")
        body = await request.json()
        transaction = body.pop("transactionId", None)
        if transaction in state.transactions:
            existing = state.transactions[transaction]
            return web.json_response(state.events[cal][existing], status=201)
        event_id = "AAMk" + secrets.token_hex(10)
        if transaction:
            state.transactions[transaction] = event_id
        return web.json_response(state.put(cal, {**body, "id": event_id}), status=201)

    @routes.patch("/me/events/{event}")
    async def update(request: web.Request) -> web.Response:
        event_id = request.match_info["event"]
        cal, current, refused = _writable(request, event_id)
        if refused is not None:
            return refused
        body = await request.json()
        return web.json_response(state.put(cal, {**current, **body, "id": event_id}))

    @routes.delete("/me/events/{event}")
    async def delete(request: web.Request) -> web.Response:
        event_id = request.match_info["event"]
        cal, _, refused = _writable(request, event_id)
        if refused is not None:
            return refused
        state.remove(cal, event_id)
        return web.Response(status=204)

    def _find(event_id: str) -> tuple[str | None, dict[str, Any] | None]:
        for cal, events in state.events.items():
            if event_id in events:
                return cal, events[event_id]
        return None, None

    def _writable(request: web.Request, event_id: str
                  ) -> tuple[str, dict[str, Any], web.Response | None]:
        """The event to change, or the answer refusing the change (missing, or
        an `If-Match` that is not its current etag)."""
        cal, current = _find(event_id)
        if current is None or cal is None:
            return "", {}, _error(404, "ErrorItemNotFound")
        if request.headers.get("If-Match", current["@odata.etag"]) != current["@odata.etag"]:
            return cal, current, _error(412, "ErrorIrresolvableConflict")
        return cal, current, None

    application = web.Application(middlewares=[gate])
    application.add_routes(routes)
    return application


def _link(request: web.Request, path: str, query: dict[str, str]) -> str:
    return str(request.url.origin().with_path(path).with_query(query))


def _error(status: int, code: str) -> web.Response:
    return web.json_response({"error": {"code": code, "message": code}}, status=status)
