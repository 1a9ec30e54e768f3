"""Microsoft Graph v1.0 accounts (OAuth refresh token, rotated on every use).

Changes come from `calendarView/delta` over the sync window (31 days back,
366 ahead: the agenda's bounds): Graph expands recurrence itself and returns
single events, occurrences and exceptions (series masters are skipped; their
instances cover the window), then a `@odata.deltaLink` that asks for what
changed since; deleted items come as `@removed`. `410 Gone` or
`syncStateNotFound` means a full sync. Occurrences share their series'
`iCalUId` and carry `originalStart`, so they are stored as instances of one
event. Copies are created with a `transactionId` derived from their UID:
Graph ignores a repeated create with the same one.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
from collections.abc import Sequence
from datetime import UTC, date, datetime
from typing import Any

import aiohttp

from domain import outbound
from domain.connected.components import zone_of
from domain.connected.oauth import OAuthClient
from domain.connected.provider import (
    Changes,
    Component,
    Credentials,
    Gone,
    Moment,
    Provider,
    ProviderError,
    ProviderSettings,
    RemoteCalendar,
    RemoteEvent,
    SyncTokenRefused,
    Unsupported,
)

log = logging.getLogger("kalends.connected")

_SCOPE = "offline_access Calendars.ReadWrite"
_RESYNC = {"syncStateNotFound", "resyncRequired", "SyncStateInvalid", "SyncStateNotFound"}
# Graph says "forbidden" with this code on statuses other than 403, too.
_DENIED = frozenset({"ErrorAccessDenied"})
_PREFER = 'odata.maxpagesize=100, outlook.timezone="UTC"'
_DAYS = {"MO": "monday", "TU": "tuesday", "WE": "wednesday", "TH": "thursday",
         "FR": "friday", "SA": "saturday", "SU": "sunday"}
_PATTERNS = {"DAILY": "daily", "WEEKLY": "weekly", "MONTHLY": "absoluteMonthly",
             "YEARLY": "absoluteYearly"}


class MicrosoftAdapter:
    provider: Provider = "microsoft"

    def __init__(self, session: aiohttp.ClientSession, credentials: Credentials,
                 settings: ProviderSettings) -> None:
        self._api = settings.microsoft_api_url.rstrip("/")
        # The API's and the token endpoint's origins are configuration: both may
        # be reached wherever they are. Every request the OAuth client sends (to
        # links the API returns, and through redirects) is checked against them.
        self._origins = outbound.AccountOrigins(settings.microsoft_api_url,
                                                settings.microsoft_token_url)
        self._settings = settings
        self._oauth = OAuthClient(
            session, self._origins, token_url=settings.microsoft_token_url,
            client_id=settings.microsoft_client_id,
            client_secret=settings.microsoft_client_secret, refresh_token=credentials.secret,
            scope=_SCOPE, timeout=settings.timeout_seconds,
            rate_limited=lambda r: r.status == 503 and "Retry-After" in r.headers)

    @property
    def secret(self) -> str:
        return self._oauth.refresh_token

    async def verify(self) -> None:
        reply = await self._oauth.request("GET", f"{self._api}/me/calendars",
                                          params={"$top": "1"})
        reply.check(denied=_DENIED)

    async def calendars(self) -> Sequence[RemoteCalendar]:
        found = []
        url: str | None = f"{self._api}/me/calendars"
        while url:
            reply = await self._oauth.request("GET", url)
            reply.check(denied=_DENIED)
            for item in reply.body.get("value", []):
                found.append(RemoteCalendar(
                    remote_id=item["id"], name=item.get("name") or item["id"],
                    color=item.get("hexColor") or None, can_edit=item.get("canEdit"),
                    is_primary=item.get("isDefaultCalendar")))
            url = reply.body.get("@odata.nextLink")
        return found

    async def changes(self, calendar: RemoteCalendar, token: str | None) -> Changes:
        if token:
            url: str | None = token
            params: dict[str, str] | None = None
        else:
            start, end = self._settings.sync_window(datetime.now(UTC))
            url = f"{self._api}/me/calendars/{calendar.remote_id}/calendarView/delta"
            params = {"startDateTime": _utc_text(start), "endDateTime": _utc_text(end)}
        changes = Changes(full=token is None)
        while url:
            reply = await self._oauth.request("GET", url, params=params,
                                              headers={"Prefer": _PREFER})
            params = None  # the links carry their own
            if reply.status == 410 or reply.error_code() in _RESYNC:
                raise SyncTokenRefused(f"delta token refused ({reply.error_code()})")
            reply.check(denied=_DENIED)
            for item in reply.body.get("value", []):
                if "@removed" in item:
                    if token:
                        changes.deleted.append(item["id"])
                    continue
                if item.get("type") == "seriesMaster":
                    continue
                try:
                    component = _component(item)
                except (KeyError, ValueError) as exc:
                    raise ProviderError(f"unreadable event {item.get('id')}: {exc}") from exc
                changes.upserts.append(RemoteEvent(
                    item["id"], item.get("@odata.etag") or item.get("changeKey"), (component,)))
            url = reply.body.get("@odata.nextLink")
            if url is None:
                changes.token = reply.body.get("@odata.deltaLink")
        return changes

    async def put(self, calendar: RemoteCalendar, key: str | None, component: Component,
                  etag: str | None, overrides: Sequence[Component] = (),
                  reset: Sequence[Component] = ()) -> RemoteEvent:
        if component.cancelled and key is not None:
            # Graph cancels only as an organizer, with attendees to tell: the copy of a
            # cancelled event is removed instead, which is what an attendee sees.
            with contextlib.suppress(Gone):
                await self.delete(calendar, key, None)
            return RemoteEvent(key, None, (component,))
        body = _body(component)
        if key is None:
            reply = await self._oauth.request(
                "POST", f"{self._api}/me/calendars/{calendar.remote_id}/events",
                json={**body, "transactionId": transaction_id(component.uid)})
        else:
            reply = await self._oauth.request(
                "PATCH", f"{self._api}/me/events/{key}", json=body,
                headers={"If-Match": etag} if etag else None)
        reply.check_write(key or "new event", denied=_DENIED)
        return RemoteEvent(reply.body["id"], reply.body.get("@odata.etag"), (component,))

    async def delete(self, calendar: RemoteCalendar, key: str, etag: str | None) -> None:
        reply = await self._oauth.request("DELETE", f"{self._api}/me/events/{key}",
                                          headers={"If-Match": etag} if etag else None)
        reply.check_write(key, denied=_DENIED)


def transaction_id(uid: str) -> str:
    return hashlib.sha256(uid.encode()).hexdigest()[:36]


def _utc_text(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _instant(value: dict[str, Any]) -> datetime:
    # Graph writes seven fractional digits; we asked for UTC (Prefer header).
    text = value["dateTime"].split(".")[0]
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def _when(value: dict[str, Any], all_day: bool, zone: str | None
          ) -> tuple[Moment, str | None]:
    if all_day:
        return date.fromisoformat(value["dateTime"][:10]), None
    instant = _instant(value)
    tz = zone_of(zone)
    if tz is None or tz.key == "UTC":
        return instant, None
    # On the event's own clock, so that recurrence and DST read as the organizer set them.
    return instant.astimezone(tz).replace(tzinfo=None), tz.key


def _component(item: dict[str, Any]) -> Component:
    all_day = bool(item.get("isAllDay"))
    zone = item.get("originalStartTimeZone")
    start, start_zone = _when(item["start"], all_day, zone)
    end, end_zone = _when(item["end"], all_day, item.get("originalEndTimeZone") or zone) \
        if item.get("end") else (None, None)
    recurrence_id: Moment | None = None
    if item.get("type") in ("occurrence", "exception") and item.get("originalStart"):
        original = datetime.fromisoformat(item["originalStart"].replace("Z", "+00:00"))
        recurrence_id = original.date() if all_day else original.astimezone(UTC)
    location = (item.get("location") or {}).get("displayName") or None
    return Component(
        uid=item.get("iCalUId") or item["id"], start=start, zone=start_zone, end=end,
        end_zone=end_zone, title=item.get("subject") or "",
        description=item.get("bodyPreview") or None, location=location,
        recurrence_id=recurrence_id, cancelled=bool(item.get("isCancelled")),
        transparent=item.get("showAs") == "free",
    )


def _moment(m: Moment, zone: str | None) -> dict[str, str]:
    if not isinstance(m, datetime):
        return {"dateTime": f"{m.isoformat()}T00:00:00", "timeZone": zone or "UTC"}
    if m.tzinfo is not None:
        return {"dateTime": m.astimezone(UTC).replace(tzinfo=None).isoformat(),
                "timeZone": "UTC"}
    return {"dateTime": m.isoformat(), "timeZone": zone or "UTC"}


def _body(c: Component) -> dict[str, Any]:
    all_day = not isinstance(c.start, datetime)
    body: dict[str, Any] = {
        "subject": c.title,
        "body": {"contentType": "text", "content": c.description or ""},
        "location": {"displayName": c.location or ""},
        "start": _moment(c.start, c.zone),
        "end": _moment(c.end if c.end is not None else c.start, c.end_zone or c.zone),
        "isAllDay": all_day,
        "showAs": "free" if c.transparent else "busy",
    }
    if c.rrule:
        body["recurrence"] = _recurrence(c.rrule, c.start)
    return body


def _recurrence(rule: str, start: Moment) -> dict[str, Any]:
    """An RRULE as Graph's pattern and range; Unsupported for what Graph cannot hold."""
    parts = dict(p.split("=", 1) for p in rule.upper().split(";") if "=" in p)
    freq = parts.pop("FREQ", "")
    if freq not in _PATTERNS:
        raise Unsupported(f"Graph cannot hold FREQ={freq}")
    first = start if not isinstance(start, datetime) else start.date()
    pattern: dict[str, Any] = {"type": _PATTERNS[freq], "interval": int(parts.pop("INTERVAL",
                                                                                 "1"))}
    if "BYDAY" in parts:
        days = parts.pop("BYDAY").split(",")
        if any(d not in _DAYS for d in days):
            raise Unsupported("Graph cannot hold a numbered BYDAY")
        pattern["daysOfWeek"] = [_DAYS[d] for d in days]
    elif freq == "WEEKLY":
        pattern["daysOfWeek"] = [first.strftime("%A").lower()]
    if freq in ("MONTHLY", "YEARLY"):
        pattern["dayOfMonth"] = int(parts.pop("BYMONTHDAY", str(first.day)))
    if freq == "YEARLY":
        pattern["month"] = int(parts.pop("BYMONTH", str(first.month)))
    parts.pop("WKST", None)
    range_: dict[str, Any] = {"type": "noEnd", "startDate": first.isoformat()}
    if "COUNT" in parts:
        range_ = {**range_, "type": "numbered", "numberOfOccurrences": int(parts.pop("COUNT"))}
    elif "UNTIL" in parts:
        until = parts.pop("UNTIL")
        range_ = {**range_, "type": "endDate",
                  "endDate": f"{until[:4]}-{until[4:6]}-{until[6:8]}"}
    if parts:
        raise Unsupported(f"Graph cannot hold {', '.join(sorted(parts))}")
    return {"pattern": pattern, "range": range_}
