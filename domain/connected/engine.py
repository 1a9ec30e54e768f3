"""The sync engine: one for every provider.

A sync of an account, run as a job on the pgqueuer queue:

1. takes the account's lock (a session advisory lock, so one sync per account
   runs at a time across processes, and a crash releases it); a job that finds
   it taken comes back a moment later instead of waiting on a connection;
2. lists the account's calendars and brings the stored list in line;
3. for each calendar, fetches the changes since its token (everything, when
   there is none or the provider refuses it) and applies them in one
   transaction with the new token, so a sync cut short leaves the last good
   state and its token, and running it again gives the same rows;
4. pushes subscription copies to the account's writable calendars: each
   Kalends event has at most one mapped remote event per calendar, created
   under a name derived from its UID (a lost answer cannot make a duplicate),
   written again only when what it holds changed, deleted when no live
   subscription sends it any more;
5. records the outcome: success; failure with back-off (a provider's
   `Retry-After` honoured); credentials refused, which disables the account.

A scheduler loop claims accounts whose next sync is due (`FOR UPDATE SKIP
LOCKED`: any number of processes may run it) and queues their jobs; one
account's sync never waits for another's.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from datetime import timedelta
from typing import Any

import aiohttp
import asyncpg

from db import connected as store
from db import embedded
from db import ical as ical_store
from db import occurrences as occurrence_store
from db.database import Database, Tx
from domain import expansion, ids, jobs, outbound
from domain.config import Settings
from domain.connected import components, vault
from domain.connected.provider import (
    Adapter,
    Changes,
    Component,
    Conflict,
    Credentials,
    CredentialsRefused,
    Gone,
    ProviderError,
    ProviderSettings,
    RateLimited,
    RemoteCalendar,
    RemoteEvent,
    SyncTokenRefused,
    Unsupported,
    WriteRefused,
)
from domain.connected.vault import Vault, VaultError
from domain.notify import ics

log = logging.getLogger("kalends.connected")

SYNC_ACCOUNT = "connected_sync"
_BUSY_RETRY = timedelta(seconds=2)
_FIRST_BACKOFF = 30.0
_TICK = 5.0


def adapter_for(provider: str, session: aiohttp.ClientSession, credentials: Credentials,
                settings: ProviderSettings) -> Adapter:
    # Imported here: each adapter module is only needed when its provider is used.
    if provider == "ios":
        from domain.connected.caldav import CalDavAdapter
        return CalDavAdapter(session, credentials, settings)
    if provider == "google":
        from domain.connected.google import GoogleAdapter
        return GoogleAdapter(session, credentials, settings)
    if provider == "microsoft":
        from domain.connected.microsoft import MicrosoftAdapter
        return MicrosoftAdapter(session, credentials, settings)
    raise ValueError(f"unknown provider {provider!r}")


def new_session() -> aiohttp.ClientSession:
    # The adapters send through it only where the account's traffic may go
    # (docs/api-choices.md, "Connected calendars").
    return outbound.account_session()


async def queue_sync(tx: Tx, account_id: str, *, push_only: bool = False,
                     after: timedelta | None = None) -> None:
    await jobs.enqueue(tx, SYNC_ACCOUNT, {"account": account_id, "push_only": push_only},
                       after=after)


async def queue_pushes(tx: Tx, account_ids: Sequence[str]) -> None:
    for account_id in sorted(set(account_ids)):
        await queue_sync(tx, account_id, push_only=True)


def remote(calendar: asyncpg.Record) -> RemoteCalendar:
    return RemoteCalendar(remote_id=calendar["remote_id"], name=calendar["name"],
                          can_edit=calendar["can_edit"])


def event_rows(events: Sequence[RemoteEvent]) -> list[dict[str, Any]]:
    """The `external_events` rows of fetched resources; the last of two
    components with the same key wins, as the provider's own storage would."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for event in events:
        for c in event.components:
            try:
                span_start, span_end = components.span(c)
            except (ValueError, OverflowError) as exc:
                log.warning("event %s of %s skipped: %s", c.uid, event.key, exc)
                continue
            key = (event.key, components.recurrence_key(c))
            rows[key] = {
                "id": ids.new_id("xcev"), "remote_key": event.key, "recurrence_key": key[1],
                "etag": event.etag, "uid": c.uid, "title": c.title,
                "description": c.description, "location": c.location,
                "cancelled": c.cancelled, "transparent": c.transparent,
                "times": components.times_json(c), "span_start": span_start,
                "span_end": span_end,
            }
    return list(rows.values())


class Engine:
    def __init__(self, db: Database, session: aiohttp.ClientSession,
                 vault: Callable[[], Vault], settings: ProviderSettings,
                 interval: timedelta) -> None:
        self._db = db
        self._session = session
        self._open_vault = vault
        self._settings = settings
        self._interval = interval

    @functools.cached_property
    def _vault(self) -> Vault:
        # Opened on first use: a service with no connected account never needs
        # the key file.
        return self._open_vault()

    def adapter(self, provider: str, credentials: Credentials) -> Adapter:
        return adapter_for(provider, self._session, credentials, self._settings)

    async def run_job(self, _db: Database, payload: dict[str, Any]) -> None:
        await self.sync(payload["account"], push_only=bool(payload.get("push_only")))

    async def sync(self, account_id: str, *, push_only: bool = False) -> None:
        async with store.account_lock(self._db, account_id, wait=False) as taken:
            if taken:
                await self._sync(account_id, push_only)
                return
        # Another sync of this account is running: come back after it.
        async with self._db.transaction() as tx:
            await queue_sync(tx, account_id, push_only=push_only, after=_BUSY_RETRY)

    async def _sync(self, account_id: str, push_only: bool) -> None:
        account = await store.account(self._db, account_id)
        if account is None or account["status"] == "disabled":
            return
        try:
            secret = self._vault.open(bytes(account["secret"]))
        except VaultError as exc:
            await store.failed(self._db, account_id, str(exc), disable=True, retry_in=None)
            return
        adapter = self.adapter(account["provider"], Credentials(
            provider=account["provider"], secret=secret, url=account["url"],
            username=account["username"]))
        if not push_only:
            await store.started(self._db, account_id)
        try:
            if not push_only:
                await self._pull_account(account, adapter)
            for calendar in await store.calendars_of_account(self._db, account_id):
                await self._push(calendar, adapter)
        except CredentialsRefused as exc:
            log.warning("account %s disabled: %s", account_id, exc)
            await store.failed(self._db, account_id, str(exc), disable=True, retry_in=None)
        except RateLimited as exc:
            await store.failed(self._db, account_id, str(exc), disable=False,
                               retry_in=self._backoff(account, exc.retry_after))
        except ProviderError as exc:
            log.warning("sync of account %s failed: %s", account_id, exc)
            await store.failed(self._db, account_id, str(exc), disable=False,
                               retry_in=self._backoff(account, None))
        else:
            if not push_only:
                await store.succeeded(self._db, account_id, self._rotated(adapter, secret))
                return
        finally:
            # A provider that rotated the refresh token has revoked the old one:
            # the new one is kept whatever else happened.
            sealed = self._rotated(adapter, secret)
            if sealed is not None:
                await self._db.execute(
                    "UPDATE external_accounts SET secret = $2 WHERE id = $1", account_id, sealed)

    def _rotated(self, adapter: Adapter, secret: str) -> bytes | None:
        return None if adapter.secret == secret else self._vault.seal(adapter.secret)

    def _backoff(self, account: asyncpg.Record, retry_after: float | None) -> timedelta:
        exponential = _FIRST_BACKOFF * 2 ** min(account["failures"], 10)
        seconds = min(exponential, self._interval.total_seconds())
        if retry_after is not None:
            seconds = max(seconds, retry_after)
        return timedelta(seconds=seconds)

    async def _pull_account(self, account: asyncpg.Record, adapter: Adapter) -> None:
        found = await adapter.calendars()
        async with self._db.transaction() as tx:
            new_ids = [ids.new_id("xcal") for _ in found]
            await store.put_calendars(tx, account["id"], account["user_id"],
                                      account["provider"], found, new_ids)
        for calendar in await store.calendars_of_account(self._db, account["id"]):
            await self._pull(calendar, adapter)

    async def _pull(self, calendar: asyncpg.Record, adapter: Adapter) -> None:
        target = remote(calendar)
        token = calendar["sync_token"]
        try:
            changes = await adapter.changes(target, token)
        except SyncTokenRefused:
            log.info("calendar %s: sync token refused; syncing everything", calendar["id"])
            changes = await adapter.changes(target, None)
        await self.apply(calendar["id"], changes)

    async def apply(self, calendar_id: str, changes: Changes) -> None:
        rows = event_rows(changes.upserts)
        async with self._db.transaction() as tx:
            if not await store.lock_calendar(tx, calendar_id):
                return  # removed meanwhile
            if changes.full:
                await store.keep_only_keys(tx, calendar_id, [e.key for e in changes.upserts])
            else:
                await store.remove_keys(
                    tx, calendar_id,
                    [*changes.deleted, *(e.key for e in changes.upserts if not e.components)])
            await store.put_events(tx, calendar_id, rows)
            await store.synced(tx, calendar_id, changes.token)

    async def _push(self, calendar: asyncpg.Record, adapter: Adapter) -> None:
        # Rendering walks each event's rule: beside the event loop.
        rows = {r["id"]: r for r in await store.wanted_copies(self._db, calendar["id"])}
        occurrences = await occurrence_store.for_events(self._db, list(rows))
        wanted = await expansion.run(_components, list(rows.values()), occurrences)
        have = {r["event_id"]: r for r in await store.pushes(self._db, calendar["id"])}
        if not wanted and not have:
            return
        target = remote(calendar)
        overridden = await ical_store.pushed_overrides(self._db, calendar["id"])
        for event_id, (component, *overrides) in wanted.items():
            digest = components.digest(component, overrides)
            known = have.get(event_id)
            if known is not None and known["digest"] == digest:
                continue
            slots = {components.recurrence_key(o) for o in overrides}
            reset = await expansion.run(_reset, rows[event_id],
                                        overridden.get(event_id, set()) - slots)
            try:
                written = await _write(adapter, target, known, component, overrides, reset)
            except WriteRefused as exc:
                log.warning("calendar %s refuses copies: %s", calendar["id"], exc)
                return
            except Unsupported as exc:
                log.warning("event %s not copied to %s: %s", event_id, calendar["id"], exc)
                continue
            await store.pushed(self._db, calendar["id"], event_id, written.key, written.etag,
                               digest)
            if slots or event_id in overridden:
                await ical_store.record_pushed_overrides(self._db, calendar["id"], event_id,
                                                         slots)
        for event_id in have.keys() - wanted.keys():
            known = have[event_id]
            with suppress(Gone):
                try:
                    await adapter.delete(target, known["remote_key"], known["etag"])
                except Conflict:
                    # Changed remotely since: it is still our copy, and it goes.
                    await adapter.delete(target, known["remote_key"], None)
            await store.unpushed(self._db, calendar["id"], event_id)

    async def schedule(self) -> None:
        """Queue a sync for every account that is due, every few seconds."""
        while True:
            try:
                async with self._db.transaction() as tx:
                    for account_id in await store.claim_due(tx, self._interval):
                        await queue_sync(tx, account_id)
            except Exception:
                log.exception("connected calendars: scheduling failed; trying again")
            await asyncio.sleep(_TICK)


async def _write(adapter: Adapter, target: RemoteCalendar, known: asyncpg.Record | None,
                 component: Component, overrides: Sequence[Component],
                 reset: Sequence[Component]) -> RemoteEvent:
    if known is None:
        return await adapter.put(target, None, component, None, overrides)
    try:
        return await adapter.put(target, known["remote_key"], component, known["etag"],
                                 overrides, reset)
    except Conflict:
        # Edited in the provider since we wrote it: the copy follows its source.
        return await adapter.put(target, known["remote_key"], component, None, overrides,
                                 reset)
    except Gone:
        return await adapter.put(target, None, component, None, overrides)


def open_vault(settings: Settings) -> Vault:
    return vault.load(settings.secret_key, embedded.data_dir())


@asynccontextmanager
async def connected_jobs(db: Database, settings: Settings
                         ) -> AsyncIterator[dict[str, jobs.Handler]]:
    """The engine's job handlers, with its HTTP session and scheduler, for as
    long as a worker runs."""
    session = new_session()
    engine = Engine(db, session, lambda: open_vault(settings), settings.providers,
                    settings.sync_interval)
    scheduler = asyncio.create_task(engine.schedule())
    try:
        yield {SYNC_ACCOUNT: engine.run_job}
    finally:
        scheduler.cancel()
        with suppress(asyncio.CancelledError):
            await scheduler
        await session.close()


def _reset(row: asyncpg.Record, slots: set[str]) -> list[Component]:
    """The occurrences of slots an earlier copy overrode and none does now, as the
    rule makes them (those it still makes)."""
    made = expansion.still_made(row, sorted(slots)) if slots else []
    return [ics.of_occurrence(row, slot, None) for slot in made]


def _components(rows: Sequence[asyncpg.Record],
                occurrences: Mapping[str, Sequence[asyncpg.Record]]
                ) -> dict[str, tuple[Component, ...]]:
    """Kalends events as the components pushed for them: each its master, then its
    overrides (`ics.of_series`: the feed's VEVENTs)."""
    return {r["id"]: ics.of_series(r, occurrences.get(r["id"], ())) for r in rows}
