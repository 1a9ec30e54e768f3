"""What a calendar provider adapter is: the one interface the sync engine uses.

An adapter knows its provider's protocol and nothing else: how to check
credentials, list calendars, fetch what changed since a token (or everything),
and write or delete one event by a stable key. Scheduling, storing, diffing,
mapping, retries, account state and agenda warnings belong to the engine
(`domain.connected.engine`), written once for all providers.

Events cross this boundary as `Component`s: one VEVENT-like definition each (a
master with its recurrence, or one overridden or cancelled instance), with
times as the provider states them (a date, a wall-clock time in a named zone, a
floating wall-clock time, or a UTC instant), so that the agenda expands them
in the event's own zone exactly as the provider defines them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Literal, Protocol

import aiohttp

Provider = Literal["ios", "google", "microsoft"]
PROVIDERS: tuple[Provider, ...] = ("ios", "google", "microsoft")

# A moment as a provider states it: a `date` (all-day), a naive `datetime` (wall
# clock: in `zone` when one is named, else floating), or an aware `datetime`.
Moment = date | datetime


class ProviderError(Exception):
    """The provider could not be reached or answered with an error: the sync
    failed and is retried later. The message is for the operator's log."""


class OriginRefused(ProviderError):
    """The provider pointed somewhere this account's traffic may not go (an href,
    a link or a redirect to another host; docs/api-choices.md, "Connected calendars"): nothing
    was sent there. The message names the host."""


class CredentialsRefused(ProviderError):
    """The provider refused the account's credentials (401, `invalid_grant`):
    the account is disabled until it is connected again."""


class SyncTokenRefused(ProviderError):
    """The provider no longer accepts the sync token (CalDAV `valid-sync-token`,
    Google 410, Microsoft 410 / `syncStateNotFound`): sync everything and diff."""


class RateLimited(ProviderError):
    """The provider asks to slow down (429, 403 `rateLimitExceeded`)."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def retry_after(value: str | None) -> float | None:
    """A `Retry-After` header in seconds (the delay form; None if absent or a date)."""
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None


class WriteRefused(ProviderError):
    """A write the account may not make (403 on a calendar, read-only calendar)."""


class Unsupported(ProviderError):
    """The provider cannot hold this event as it is (a recurrence rule it has no
    form for): the copy is not written, and the rest of the sync goes on."""


class Conflict(ProviderError):
    """A conditional write lost (412 Precondition Failed): the remote copy changed."""


class Gone(ProviderError):
    """The event to update or delete is no longer there (404, 410)."""


@dataclass(frozen=True)
class Credentials:
    """What `kalends admin connect-calendars` collected. `secret` is the
    app-specific password (CalDAV) or the OAuth refresh token."""

    provider: Provider
    secret: str
    url: str | None = None
    username: str | None = None


@dataclass(frozen=True)
class RemoteCalendar:
    """A calendar of the account; `remote_id` is whatever the adapter needs to
    address it again (a CalDAV collection URL, a Google or Graph calendar id)."""

    remote_id: str
    name: str
    description: str | None = None
    color: str | None = None
    can_edit: bool | None = None
    time_zone: str | None = None
    is_primary: bool | None = None


@dataclass(frozen=True)
class Component:
    """One event definition.

    A master has `recurrence_id` None and may recur (`rrule`, `rdates`,
    `exdates`); an override replaces, or (`cancelled`) removes, the instance whose
    original start is `recurrence_id`. `end` None: a point in time (timed) or one
    day (all-day)."""

    uid: str
    start: Moment
    zone: str | None = None
    end: Moment | None = None
    end_zone: str | None = None
    title: str = ""
    description: str | None = None
    location: str | None = None
    recurrence_id: Moment | None = None
    rrule: str | None = None
    rdates: tuple[Moment, ...] = ()
    exdates: tuple[Moment, ...] = ()
    cancelled: bool = False
    transparent: bool = False
    sequence: int = 0


@dataclass(frozen=True)
class RemoteEvent:
    """One addressable provider resource (a CalDAV object, a Google or Graph
    event) and the components it holds."""

    key: str
    etag: str | None
    components: tuple[Component, ...]


@dataclass
class Changes:
    """What `changes()` found. With `full`, `upserts` is everything there is and
    whatever the engine holds beyond it was deleted; else `deleted` lists keys."""

    upserts: list[RemoteEvent] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    token: str | None = None
    full: bool = False


class Adapter(Protocol):
    """One provider's protocol. Built per account, with the service's own HTTP
    session (from `domain.outbound.account_session`: every request goes only
    where the account's traffic may go (docs/api-choices.md, "Connected calendars"), through
    `outbound.AccountOrigins.request`); it keeps no state across calls except an
    OAuth access token and, where the provider rotates it, the refresh token
    (`secret`)."""

    provider: Provider

    @property
    def secret(self) -> str:
        """The current secret; the engine stores it again when it changed."""
        ...

    async def verify(self) -> None:
        """Raise CredentialsRefused if the credentials do not work."""

    async def calendars(self) -> Sequence[RemoteCalendar]: ...

    async def changes(self, calendar: RemoteCalendar, token: str | None) -> Changes:
        """Changes since `token`; everything (`full`) when `token` is None.
        Raise SyncTokenRefused when the provider no longer accepts `token`."""
        ...

    async def put(self, calendar: RemoteCalendar, key: str | None, component: Component,
                  etag: str | None, overrides: Sequence[Component] = (),
                  reset: Sequence[Component] = ()) -> RemoteEvent:
        """Create (`key` None; the adapter derives a key from `component.uid`
        where the provider allows) or replace the event `key`, conditionally on
        `etag` when given, with the instances `overrides` changes (RECURRENCE-ID;
        a master's EXDATEs take out the ones cancelled). `reset`: instances an
        earlier write overrode that are as the rule makes them again (a provider
        that keeps instances apart from their series writes them back; one that
        replaces the whole object needs nothing). Returns the stored resource's
        key and etag."""
        ...

    async def delete(self, calendar: RemoteCalendar, key: str, etag: str | None) -> None:
        """Delete the event `key` (conditionally on `etag`); Gone if it is not there."""


class AdapterFactory(Protocol):
    def __call__(self, session: aiohttp.ClientSession, credentials: Credentials,
                 settings: ProviderSettings) -> Adapter: ...


@dataclass(frozen=True)
class ProviderSettings:
    """Base URLs and OAuth client settings; configuration, so that tests point
    them at protocol fakes and operators at the real services."""

    caldav_url: str = "https://caldav.icloud.com"
    google_api_url: str = "https://www.googleapis.com/calendar/v3"
    google_token_url: str = "https://oauth2.googleapis.com/token"
    google_client_id: str | None = None
    google_client_secret: str | None = None
    microsoft_api_url: str = "https://graph.microsoft.com/v1.0"
    microsoft_token_url: str = "https://login.microsoftonline.com/common/oauth2/v2.0/token"
    microsoft_client_id: str | None = None
    microsoft_client_secret: str | None = None
    timeout_seconds: float = 30.0
    """Per provider request."""
    sync_days_back: int = 31
    sync_days_ahead: int = 366
    """Window for providers whose change feed needs one (Graph calendarView delta);
    it covers the agenda's bounds (30 days back, 365 ahead)."""

    def sync_window(self, now: datetime) -> tuple[datetime, datetime]:
        return (now - timedelta(days=self.sync_days_back),
                now + timedelta(days=self.sync_days_ahead))
