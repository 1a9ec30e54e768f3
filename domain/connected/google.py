"""Google Calendar API v3 accounts (OAuth refresh token).

Changes come from `events.list` with `singleEvents=false` and `showDeleted`:
recurring masters carry their `recurrence` lines (RRULE, RDATE, EXDATE),
modified or cancelled instances are events of their own with
`recurringEventId` and `originalStartTime`; the last page's `nextSyncToken`
asks for what changed since. `410 Gone` means the token expired: sync
everything. Copies are created with an id derived from their UID, so a
retried insert answers 409 and becomes an update instead of a duplicate.
Rate limits: 429, or 403 with reason `rateLimitExceeded`/`userRateLimitExceeded`.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, date, datetime
from typing import Any
from urllib.parse import quote
from zoneinfo import ZoneInfo

import aiohttp

from domain import outbound
from domain.connected import components, ical
from domain.connected.components import zone_of
from domain.connected.oauth import OAuthClient
from domain.connected.provider import (
    Changes,
    Component,
    Credentials,
    Moment,
    Provider,
    ProviderError,
    ProviderSettings,
    RemoteCalendar,
    RemoteEvent,
    SyncTokenRefused,
)

_RATE_REASONS = {"rateLimitExceeded", "userRateLimitExceeded"}
_PAGE = "250"


class GoogleAdapter:
    provider: Provider = "google"

    def __init__(self, session: aiohttp.ClientSession, credentials: Credentials,
                 settings: ProviderSettings) -> None:
        self._api = settings.google_api_url.rstrip("/")
        # The API's and the token endpoint's origins are configuration: both may
        # be reached wherever they are. Every request the OAuth client sends (to
        # links the API returns, and through redirects) is checked against them.
        self._origins = outbound.AccountOrigins(settings.google_api_url, settings.google_token_url)
        self._oauth = OAuthClient(
            session, self._origins, token_url=settings.google_token_url,
            client_id=settings.google_client_id,
            client_secret=settings.google_client_secret, refresh_token=credentials.secret,
            scope=None, timeout=settings.timeout_seconds,
            rate_limited=lambda r: r.status == 403 and r.error_code() in _RATE_REASONS)

    @property
    def secret(self) -> str:
        return self._oauth.refresh_token

    async def verify(self) -> None:
        reply = await self._oauth.request("GET", f"{self._api}/users/me/calendarList",
                                          params={"maxResults": "1"})
        reply.check()

    async def calendars(self) -> Sequence[RemoteCalendar]:
        found = []
        async for item in self._pages(f"{self._api}/users/me/calendarList", {}):
            if item.get("deleted"):
                continue
            found.append(RemoteCalendar(
                remote_id=item["id"],
                name=item.get("summaryOverride") or item.get("summary") or item["id"],
                description=item.get("description"),
                color=item.get("backgroundColor"),
                can_edit=item.get("accessRole") in ("owner", "writer"),
                time_zone=item.get("timeZone"),
                is_primary=bool(item.get("primary", False)),
            ))
        return found

    async def changes(self, calendar: RemoteCalendar, token: str | None) -> Changes:
        params = {"singleEvents": "false", "showDeleted": "true", "maxResults": _PAGE}
        if token:
            params["syncToken"] = token
        changes = Changes(full=token is None)
        async for item in self._pages(self._events(calendar), params, changes):
            cancelled = item.get("status") == "cancelled"
            if cancelled and "originalStartTime" not in item:
                if token:
                    changes.deleted.append(item["id"])
                continue
            try:
                component = _component(item)
            except (KeyError, ValueError) as exc:
                raise ProviderError(f"unreadable event {item.get('id')}: {exc}") from exc
            changes.upserts.append(RemoteEvent(item["id"], item.get("etag"), (component,)))
        return changes

    async def put(self, calendar: RemoteCalendar, key: str | None, component: Component,
                  etag: str | None, overrides: Sequence[Component] = (),
                  reset: Sequence[Component] = ()) -> RemoteEvent:
        body = _body(component)
        if key is None:
            key = event_id(component.uid)
            reply = await self._oauth.request("POST", self._events(calendar),
                                              json={**body, "id": key})
            if reply.status == 409:
                # Already there: an earlier insert succeeded but its answer was lost.
                reply = await self._oauth.request("PUT", self._event(calendar, key), json=body)
        else:
            reply = await self._oauth.request(
                "PUT", self._event(calendar, key), json=body,
                headers={"If-Match": etag} if etag else None)
        reply.check_write(key)
        etag = reply.body.get("etag")
        for instance in (*overrides, *reset):
            await self._put_instance(calendar, key, component, instance)
        return RemoteEvent(key, etag, (component, *overrides))

    async def _put_instance(self, calendar: RemoteCalendar, key: str, master: Component,
                            instance: Component) -> None:
        """One instance of series `key` as `instance` says (an override, or the rule's
        own again), written to the id Google gives it (`events.instances`:
        `<series id>_<original start>`), with its original start in the series' zone."""
        assert instance.recurrence_id is not None
        original = _original(instance.recurrence_id, master.zone)
        body = {**_body(instance), "recurringEventId": key,
                "originalStartTime": _moment(original, master.zone)}
        instance_id = f"{key}_{components.slot_key(instance.recurrence_id, master.zone)}"
        reply = await self._oauth.request("PUT", self._event(calendar, instance_id), json=body)
        reply.check_write(instance_id)

    async def delete(self, calendar: RemoteCalendar, key: str, etag: str | None) -> None:
        reply = await self._oauth.request("DELETE", self._event(calendar, key),
                                          headers={"If-Match": etag} if etag else None)
        reply.check_write(key)

    def _events(self, calendar: RemoteCalendar) -> str:
        return f"{self._api}/calendars/{quote(calendar.remote_id, safe='')}/events"

    def _event(self, calendar: RemoteCalendar, key: str) -> str:
        return f"{self._events(calendar)}/{quote(key, safe='')}"

    async def _pages(self, url: str, params: dict[str, str], changes: Changes | None = None
                     ) -> AsyncIterator[dict[str, Any]]:
        """Every item of every page; the last page's sync token goes into `changes`."""
        page: str | None = None
        while True:
            reply = await self._oauth.request(
                "GET", url, params={**params, **({"pageToken": page} if page else {})})
            if reply.status == 410:
                raise SyncTokenRefused(f"{url}: sync token expired")
            reply.check()
            for item in reply.body.get("items", []):
                yield item
            page = reply.body.get("nextPageToken")
            if not page:
                if changes is not None:
                    changes.token = reply.body.get("nextSyncToken")
                return


def event_id(uid: str) -> str:
    """A Google event id for a UID: base32hex characters (hex digits are), stable."""
    return hashlib.sha1(uid.encode()).hexdigest()


def _when(value: dict[str, Any]) -> tuple[Moment, str | None]:
    if "date" in value:
        return date.fromisoformat(value["date"]), None
    instant = datetime.fromisoformat(value["dateTime"].replace("Z", "+00:00"))
    tz = zone_of(value.get("timeZone"))
    if tz is None or tz.key == "UTC":
        return instant.astimezone(UTC), None
    return instant.astimezone(tz).replace(tzinfo=None), tz.key


def _component(item: dict[str, Any]) -> Component:
    start, zone = _when(item["start"])
    end, end_zone = _when(item["end"]) if "end" in item else (None, None)
    recurrence_id = None
    if "originalStartTime" in item:
        original = dict(item["originalStartTime"])
        original.setdefault("timeZone", item["start"].get("timeZone"))
        moment, original_zone = _when(original)
        # On the instance's own clock when it is the same, else as the instant it is
        # (moved to another zone: ical.py's rule for RECURRENCE-ID).
        recurrence_id = moment if original_zone == zone or not isinstance(moment, datetime) \
            else components.instant(moment, original_zone)
    rrule, rdates, exdates = _recurrence(item.get("recurrence", []), start, zone)
    return Component(
        uid=item.get("iCalUID") or item["id"], start=start, zone=zone, end=end,
        end_zone=end_zone, title=item.get("summary", ""),
        description=item.get("description"), location=item.get("location"),
        recurrence_id=recurrence_id, rrule=rrule, rdates=rdates, exdates=exdates,
        cancelled=item.get("status") == "cancelled",
        transparent=item.get("transparency") == "transparent",
        sequence=int(item.get("sequence", 0)),
    )


def _recurrence(lines: list[str], start: Moment, zone: str | None
                ) -> tuple[str | None, tuple[Moment, ...], tuple[Moment, ...]]:
    """RRULE, RDATE and EXDATE lines, read as iCalendar does."""
    if not lines:
        return None, (), ()
    dtstart = (f"DTSTART;TZID={zone}:{start:%Y%m%dT%H%M%S}" if zone and isinstance(
        start, datetime) else f"DTSTART;VALUE=DATE:{start:%Y%m%d}" if not isinstance(
        start, datetime) else f"DTSTART:{start:%Y%m%dT%H%M%SZ}")
    text = "\r\n".join(["BEGIN:VCALENDAR", "BEGIN:VEVENT", "UID:x", dtstart, *lines,
                        "END:VEVENT", "END:VCALENDAR", ""])
    parsed = ical.parse(text)
    if not parsed:
        raise ValueError("unreadable recurrence")
    return parsed[0].rrule, parsed[0].rdates, parsed[0].exdates


def _moment(m: Moment, zone: str | None) -> dict[str, str]:
    if not isinstance(m, datetime):
        return {"date": m.isoformat()}
    if m.tzinfo is not None:
        return {"dateTime": m.astimezone(UTC).isoformat().replace("+00:00", "Z"),
                "timeZone": "UTC"}
    return {"dateTime": m.isoformat(), "timeZone": zone or "UTC"}


def _body(c: Component) -> dict[str, Any]:
    body: dict[str, Any] = {
        "iCalUID": c.uid,
        "summary": c.title,
        "description": c.description,
        "location": c.location,
        "start": _moment(c.start, c.zone),
        # Google wants an end: a point in time is an event of no length.
        "end": _moment(c.end if c.end is not None else c.start, c.end_zone or c.zone),
        "status": "cancelled" if c.cancelled else "confirmed",
        "transparency": "transparent" if c.transparent else "opaque",
    }
    if c.rrule:
        body["recurrence"] = [f"RRULE:{c.rrule}", *(_exdate(m, c.zone) for m in c.exdates)]
    return body


def _original(m: Moment, zone: str | None) -> Moment:
    """An instance's original start on the series' clock (a wall time in `zone`), or
    its date."""
    if isinstance(m, datetime) and m.tzinfo is not None and zone:
        return m.astimezone(ZoneInfo(zone)).replace(tzinfo=None)
    return m


def _exdate(m: Moment, zone: str | None) -> str:
    """An EXDATE line of `recurrence`, in DTSTART's form (its zone, or a date)."""
    if not isinstance(m, datetime):
        return f"EXDATE;VALUE=DATE:{m:%Y%m%d}"
    wall = _original(m, zone)
    assert isinstance(wall, datetime)
    if wall.tzinfo is not None or not zone:
        return f"EXDATE:{wall.astimezone(UTC):%Y%m%dT%H%M%SZ}"
    return f"EXDATE;TZID={zone}:{wall:%Y%m%dT%H%M%S}"
