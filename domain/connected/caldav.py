"""CalDAV (RFC 4791) accounts: iCloud, or any server given by URL.

Discovery follows RFC 6764 and RFC 5397: `/.well-known/caldav`, the
principal, its calendar home, then the calendars in it. Changes come from
`REPORT sync-collection` (RFC 6578): hrefs with etags, or 404 for deletions;
the changed objects are then fetched with `calendar-multiget`. A sync token
the server no longer knows (403/409 naming `valid-sync-token`) means a full
sync. Writes are conditional: `If-None-Match: *` to create, `If-Match` to
replace or delete.

Every request goes through `AccountOrigins` (docs/api-choices.md, "Connected calendars", "Where
the traffic goes"): to the origin of the account's URL, or to an https host of its registrable
domain at a public address (iCloud's partition hosts); an href or a redirect anywhere else is
refused before anything is sent there. Answers are parsed by defusedxml: no
DTD entities, no external references.
"""

from __future__ import annotations

import codecs
import contextlib
import hashlib
import re
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple
from xml.etree import ElementTree

import aiohttp
from defusedxml import DefusedXmlException
from defusedxml import ElementTree as SafeElementTree
from yarl import URL

from domain import outbound
from domain.connected import ical
from domain.connected.components import zone_of
from domain.connected.provider import (
    Changes,
    Component,
    Conflict,
    Credentials,
    CredentialsRefused,
    Gone,
    OriginRefused,
    Provider,
    ProviderError,
    ProviderSettings,
    RateLimited,
    RemoteCalendar,
    RemoteEvent,
    SyncTokenRefused,
    WriteRefused,
    retry_after,
)

_DAV, _CAL, _APPLE = "DAV:", "urn:ietf:params:xml:ns:caldav", "http://apple.com/ns/ical/"
_NS = f'xmlns:D="{_DAV}" xmlns:C="{_CAL}" xmlns:A="{_APPLE}"'
_MULTIGET_BATCH = 100
_SAFE_NAME = re.compile(r"[^A-Za-z0-9_.@-]")


class _Reply(NamedTuple):
    final_url: URL
    etag: str | None
    retry_after: str | None


def _q(ns: str, name: str) -> str:
    return f"{{{ns}}}{name}"


class CalDavAdapter:
    provider: Provider = "ios"

    def __init__(self, session: aiohttp.ClientSession, credentials: Credentials,
                 settings: ProviderSettings) -> None:
        self._session = session
        self._authorization = aiohttp.encode_basic_auth(credentials.username or "",
                                                         credentials.secret)
        self._secret = credentials.secret
        self._base = URL(credentials.url or settings.caldav_url)
        self._origins = outbound.AccountOrigins(str(self._base))
        self._timeout = aiohttp.ClientTimeout(total=settings.timeout_seconds)

    @property
    def secret(self) -> str:
        return self._secret

    async def verify(self) -> None:
        await self._home()

    async def calendars(self) -> Sequence[RemoteCalendar]:
        home = await self._home()
        body = f"""<?xml version="1.0" encoding="utf-8"?>
<D:propfind {_NS}><D:prop>
  <D:resourcetype/><D:displayname/><C:calendar-description/><A:calendar-color/>
  <D:current-user-privilege-set/><C:supported-calendar-component-set/>
  <C:calendar-timezone/>
</D:prop></D:propfind>"""
        found = []
        for href, props in await self._propfind(home, body, depth="1"):
            kinds = props.get(_q(_DAV, "resourcetype"))
            if kinds is None or kinds.find(_q(_CAL, "calendar")) is None:
                continue
            components = props.get(_q(_CAL, "supported-calendar-component-set"))
            if components is not None and not any(
                    c.get("name") == "VEVENT" for c in components):
                continue
            found.append(RemoteCalendar(
                remote_id=str(self._checked(home.join(URL(href)))),
                name=_text(props.get(_q(_DAV, "displayname"))) or href.rstrip("/").rsplit(
                    "/", 1)[-1],
                description=_text(props.get(_q(_CAL, "calendar-description"))),
                color=_text(props.get(_q(_APPLE, "calendar-color"))),
                can_edit=_can_write(props.get(_q(_DAV, "current-user-privilege-set"))),
                time_zone=_zone_name(_text(props.get(_q(_CAL, "calendar-timezone")))),
                is_primary=None,
            ))
        return found

    async def changes(self, calendar: RemoteCalendar, token: str | None) -> Changes:
        body = f"""<?xml version="1.0" encoding="utf-8"?>
<D:sync-collection {_NS}>
  <D:sync-token>{_escape(token or "")}</D:sync-token><D:sync-level>1</D:sync-level>
  <D:prop><D:getetag/></D:prop>
</D:sync-collection>"""
        url = URL(calendar.remote_id)
        status, text, _ = await self._request("REPORT", url, body, {})
        if status in (403, 409) and "valid-sync-token" in text:
            raise SyncTokenRefused(f"{url}: sync token refused")
        if status != 207:
            raise _error(status, text, url)
        root = _xml(text)
        changed: list[str] = []
        deleted: list[str] = []
        for response in root.iter(_q(_DAV, "response")):
            href = _href(url, response)
            if href is None or href.rstrip("/") == url.path.rstrip("/"):
                continue
            if _status(response) == 404:
                deleted.append(href)
            else:
                changed.append(href)
        new_token = _text(root.find(_q(_DAV, "sync-token")))
        upserts = [e for batch in _batches(changed) for e in await self._multiget(url, batch)]
        return Changes(upserts=upserts, deleted=[] if token is None else deleted,
                       token=new_token, full=token is None)

    async def put(self, calendar: RemoteCalendar, key: str | None, component: Component,
                  etag: str | None, overrides: Sequence[Component] = (),
                  reset: Sequence[Component] = ()) -> RemoteEvent:
        collection = URL(calendar.remote_id)
        body = ical.serialize(component, overrides)
        headers = {"Content-Type": "text/calendar; charset=utf-8"}
        if key is None:
            key = _object_path(collection, component.uid)
            status, text, reply = await self._request(
                "PUT", collection.with_path(key), body, headers | {"If-None-Match": "*"})
            if status == 412:
                # Already there: an earlier attempt succeeded but its answer was
                # lost. The name comes from the UID, so it is this copy.
                status, text, reply = await self._request(
                    "PUT", collection.with_path(key), body, headers)
        else:
            conditional = headers | ({"If-Match": etag} if etag else {})
            status, text, reply = await self._request(
                "PUT", collection.with_path(key), body, conditional)
            if status == 412:
                raise Conflict(f"{key} changed on the server")
        if status == 403:
            raise WriteRefused(f"{key}: writing refused")
        if status not in (200, 201, 204):
            raise _error(status, text, collection)
        return RemoteEvent(key=key, etag=reply.etag, components=(component, *overrides))

    async def delete(self, calendar: RemoteCalendar, key: str, etag: str | None) -> None:
        url = URL(calendar.remote_id).with_path(key)
        status, text, _ = await self._request(
            "DELETE", url, None, {"If-Match": etag} if etag else {})
        if status in (404, 410):
            raise Gone(f"{key} is not there")
        if status == 412:
            raise Conflict(f"{key} changed on the server")
        if status == 403:
            raise WriteRefused(f"{key}: deleting refused")
        if status not in (200, 204):
            raise _error(status, text, url)

    # -- discovery -------------------------------------------------------------

    async def _home(self) -> URL:
        principal_body = f"""<?xml version="1.0" encoding="utf-8"?>
<D:propfind {_NS}><D:prop><D:current-user-principal/></D:prop></D:propfind>"""
        start = self._base.join(URL("/.well-known/caldav"))
        try:
            context, found = await self._propfind_one(start, principal_body)
        except OriginRefused:
            raise  # the server named a destination: going elsewhere instead is no answer
        except ProviderError:
            context, found = await self._propfind_one(self._base, principal_body)
        principal = _href_in(found.get(_q(_DAV, "current-user-principal")))
        if principal is None:
            raise ProviderError(f"{self._base}: no current-user-principal")
        home_body = f"""<?xml version="1.0" encoding="utf-8"?>
<D:propfind {_NS}><D:prop><C:calendar-home-set/></D:prop></D:propfind>"""
        principal_url = context.join(URL(principal))
        context, found = await self._propfind_one(principal_url, home_body)
        home = _href_in(found.get(_q(_CAL, "calendar-home-set")))
        if home is None:
            raise ProviderError(f"{principal_url}: no calendar-home-set")
        return self._checked(context.join(URL(home)))

    def _checked(self, url: URL) -> URL:
        """`url` if this account's requests may go there, else OriginRefused."""
        try:
            return self._origins.check(url)
        except outbound.Refused as exc:
            raise OriginRefused(exc.reason) from None

    async def _propfind_one(self, url: URL, body: str) -> tuple[URL, dict[str, Any]]:
        status, text, reply = await self._request("PROPFIND", url, body, {"Depth": "0"})
        if status != 207:
            raise _error(status, text, url)
        responses = _responses(_xml(text))
        if not responses:
            raise ProviderError(f"{url}: empty PROPFIND answer")
        # Relative hrefs resolve against where the redirects ended.
        return reply.final_url, responses[0][1]

    async def _propfind(self, url: URL, body: str, depth: str
                        ) -> list[tuple[str, dict[str, Any]]]:
        status, text, _ = await self._request("PROPFIND", url, body, {"Depth": depth})
        if status != 207:
            raise _error(status, text, url)
        return _responses(_xml(text))

    async def _multiget(self, url: URL, hrefs: list[str]) -> list[RemoteEvent]:
        listed = "".join(f"<D:href>{_escape(h)}</D:href>" for h in hrefs)
        body = f"""<?xml version="1.0" encoding="utf-8"?>
<C:calendar-multiget {_NS}><D:prop><D:getetag/><C:calendar-data/></D:prop>{listed}
</C:calendar-multiget>"""
        status, text, _ = await self._request("REPORT", url, body, {"Depth": "1"})
        if status != 207:
            raise _error(status, text, url)
        found = []
        for response in _xml(text).iter(_q(_DAV, "response")):
            href = _href(url, response)
            data = response.find(f".//{_q(_CAL, 'calendar-data')}")
            if href is None or data is None or not data.text:
                continue  # gone between the two reports: the next sync says so
            etag = _text(response.find(f".//{_q(_DAV, 'getetag')}"))
            found.append(RemoteEvent(key=href, etag=etag, components=ical.parse(data.text)))
        return found

    async def _request(self, method: str, url: URL, body: str | bytes | None,
                       headers: dict[str, str]) -> tuple[int, str, _Reply]:
        if isinstance(body, str):
            headers = {"Content-Type": "application/xml; charset=utf-8"} | headers
            body = body.encode()
        try:
            reply = await self._origins.request(
                self._session, method, url, data=body,
                headers=headers | {"Authorization": self._authorization},
                timeout=self._timeout)
        except outbound.Refused as exc:
            raise OriginRefused(f"{url}: {exc.reason}") from exc
        except outbound.OutboundError as exc:
            raise ProviderError(f"{url}: {exc.reason}") from exc
        status, text = reply.status, _decode(reply)
        answer = _Reply(reply.url, reply.headers.get("ETag"), reply.headers.get("Retry-After"))
        if status == 401:
            raise CredentialsRefused(f"{url}: credentials refused")
        if status in (429, 503):
            raise RateLimited(f"{url}: {status}", retry_after(answer.retry_after))
        return status, text, answer


def _error(status: int, text: str, url: URL) -> ProviderError:
    return ProviderError(f"{url}: HTTP {status}: {text[:200]}")


def _decode(reply: outbound.Answer) -> str:
    charset = "utf-8"
    content_type = reply.headers.get("Content-Type", "")
    match = re.search(r"charset=\"?([\w.:-]+)", content_type, re.IGNORECASE)
    if match is not None:
        with contextlib.suppress(LookupError):
            charset = codecs.lookup(match.group(1)).name
    return reply.body.decode(charset, errors="replace")


def _xml(text: str) -> ElementTree.Element:
    # No entity is expanded (a "billion laughs" answer fails at its first
    # declaration, before any expansion) and no external reference is loaded.
    try:
        root: ElementTree.Element = SafeElementTree.fromstring(
            text, forbid_dtd=False, forbid_entities=True, forbid_external=True)
    except (ElementTree.ParseError, DefusedXmlException) as exc:
        raise ProviderError(f"unreadable XML answer: {exc}") from exc
    return root


def _responses(root: ElementTree.Element) -> list[tuple[str, dict[str, Any]]]:
    found = []
    for response in root.iter(_q(_DAV, "response")):
        href = _text(response.find(_q(_DAV, "href")))
        if href is None:
            continue
        props: dict[str, Any] = {}
        for propstat in response.iter(_q(_DAV, "propstat")):
            status = _text(propstat.find(_q(_DAV, "status"))) or ""
            if " 200" not in status:
                continue
            prop = propstat.find(_q(_DAV, "prop"))
            for child in prop if prop is not None else []:
                props[child.tag] = child
        found.append((href, props))
    return found


def _href(base: URL, response: ElementTree.Element) -> str | None:
    href = _text(response.find(_q(_DAV, "href")))
    return None if href is None else base.join(URL(href)).path


def _status(response: ElementTree.Element) -> int | None:
    text = _text(response.find(_q(_DAV, "status")))
    parts = (text or "").split()
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None


def _href_in(element: ElementTree.Element | None) -> str | None:
    return None if element is None else _text(element.find(_q(_DAV, "href")))


def _text(element: ElementTree.Element | None) -> str | None:
    if element is None or element.text is None:
        return None
    return element.text.strip() or None


def _can_write(privileges: ElementTree.Element | None) -> bool | None:
    if privileges is None:
        return None
    names = {child.tag for p in privileges.iter(_q(_DAV, "privilege")) for child in p}
    return bool(names & {_q(_DAV, "write"), _q(_DAV, "write-content"), _q(_DAV, "all")})


def _zone_name(vtimezone: str | None) -> str | None:
    """The TZID of a calendar-timezone VTIMEZONE, when it names an IANA zone."""
    if not vtimezone:
        return None
    match = re.search(r"^TZID:(.+)$", vtimezone, re.MULTILINE)
    if match is None:
        return None
    name = match.group(1).strip()
    return name if zone_of(name) is not None else None


def _object_path(collection: URL, uid: str) -> str:
    # The name derives from the UID, so a retried create lands on the same object.
    name = _SAFE_NAME.sub("_", uid)
    if len(name) > 100:
        name = hashlib.sha256(uid.encode()).hexdigest()
    return collection.path.rstrip("/") + "/" + name + ".ics"


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _batches(items: list[str]) -> Iterator[list[str]]:
    for i in range(0, len(items), _MULTIGET_BATCH):
        yield items[i:i + _MULTIGET_BATCH]
