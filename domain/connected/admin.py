"""The operator's commands for connected calendars (docs/api-choices.md, "Connected calendars"):
connect, disconnect, sync now, select. Credentials arrive on standard input only, and
are stored sealed by the vault."""

from __future__ import annotations

from typing import Any

from yarl import URL

from core.errors import AdminError
from db import connected as store
from db.database import Database
from domain import ids
from domain.accounts import find_user
from domain.config import Settings
from domain.connected import engine
from domain.connected.provider import (
    PROVIDERS,
    Credentials,
    CredentialsRefused,
    Gone,
    OriginRefused,
    ProviderError,
)


async def connect(db: Database, settings: Settings, email: str, provider: str,
                  url: str | None, username: str | None, secret: str) -> dict[str, Any]:
    if provider not in PROVIDERS:
        raise AdminError(f"unknown provider {provider!r}: expected one of {', '.join(PROVIDERS)}")
    if not secret:
        raise AdminError("no secret on standard input (an app-specific password or an OAuth "
                         "refresh token)")
    if provider == "ios" and not username:
        raise AdminError("--username is required for ios (CalDAV)")
    if url is not None and not _is_http_url(url):
        raise AdminError(f"--url {url!r} is not an http(s) URL")
    user = await find_user(db, email)
    credentials = Credentials(provider=provider, secret=secret, url=url,
                              username=username)
    async with engine.new_session() as session:
        adapter = engine.adapter_for(provider, session, credentials, settings.providers)
        try:
            await adapter.verify()
            found = await adapter.calendars()
        except CredentialsRefused as exc:
            raise AdminError(f"the provider refused these credentials ({exc})") from None
        except OriginRefused as exc:
            raise AdminError(f"not connected: the provider pointed elsewhere: {exc}") from None
        except ProviderError as exc:
            raise AdminError(f"could not reach the provider: {exc}") from None
    sealed = engine.open_vault(settings).seal(adapter.secret)
    async with db.transaction() as tx:
        account_id = await tx.fetchval(
            """
            INSERT INTO external_accounts
                (id, user_id, provider, url, username, secret, next_sync_at)
            VALUES ($1, $2, $3, $4, $5, $6, now() + $7::interval)
            ON CONFLICT (user_id, provider, coalesce(url, ''), coalesce(username, ''))
            DO UPDATE SET secret = EXCLUDED.secret, status = 'ok', last_error = NULL,
                          failures = 0, next_sync_at = EXCLUDED.next_sync_at
            RETURNING id
            """,
            ids.new_id("xac"), user["id"], provider, url, username, sealed,
            # The sync queued below is this interval's: the scheduler would
            # otherwise queue a second one at its next tick.
            settings.sync_interval,
        )
        await store.put_calendars(tx, account_id, user["id"], provider, found,
                                  [ids.new_id("xcal") for _ in found])
        await engine.queue_sync(tx, account_id)
    calendars = await store.calendars_of_account(db, account_id)
    return {
        "account_id": account_id,
        "provider": provider,
        "calendars": [{"id": c["id"], "name": c["name"], "can_edit": c["can_edit"]}
                      for c in calendars],
    }


async def disconnect(db: Database, settings: Settings, account_id: str) -> dict[str, Any]:
    account_id = _id("xac", account_id, "--account")
    account = await store.account(db, account_id)
    if account is None:
        raise AdminError(f"no connected account {account_id}")
    # Wait for a running sync to finish, and keep the next from starting.
    async with store.account_lock(db, account_id, wait=True):
        await _remove_copies(db, settings, account)
        async with db.transaction() as tx:
            removed = await store.delete_account(tx, account_id)
    return {"account_id": account_id, "removed_calendars": removed or []}


async def _remove_copies(db: Database, settings: Settings, account: Any) -> None:
    """Delete what subscriptions pushed to the account, while its credentials
    still work; if the provider cannot be reached, the copies stay there (the
    account is removed all the same)."""
    if account["status"] == "disabled":
        return
    secret = engine.open_vault(settings).open(bytes(account["secret"]))
    credentials = Credentials(provider=account["provider"], secret=secret, url=account["url"],
                              username=account["username"])
    async with engine.new_session() as session:
        adapter = engine.adapter_for(account["provider"], session, credentials,
                                     settings.providers)
        for calendar in await store.calendars_of_account(db, account["id"]):
            for push in await store.pushes(db, calendar["id"]):
                try:
                    await adapter.delete(engine.remote(calendar), push["remote_key"], None)
                except Gone:
                    pass
                except ProviderError:
                    return


async def sync_now(db: Database, account_id: str | None) -> dict[str, Any]:
    if account_id is not None:
        account_id = _id("xac", account_id, "--account")
        account = await store.account(db, account_id)
        if account is None:
            raise AdminError(f"no connected account {account_id}")
        if account["status"] == "disabled":
            raise AdminError(f"account {account_id} is disabled: its credentials were refused; "
                             "connect it again")
        wanted = [account_id]
    else:
        wanted = await store.account_ids(db)
    async with db.transaction() as tx:
        for key in wanted:
            await engine.queue_sync(tx, key)
    return {"queued": len(wanted)}


async def select(db: Database, calendar_id: str, selected: str) -> dict[str, Any]:
    calendar_id = _id("xcal", calendar_id, "--id")
    if selected not in ("true", "false"):
        raise AdminError("--selected must be true or false")
    if not await store.select(db, calendar_id, selected == "true"):
        raise AdminError(f"no connected calendar {calendar_id}")
    return {"id": calendar_id, "selected": selected == "true"}


def _is_http_url(url: str) -> bool:
    try:
        parsed = URL(url)
        return parsed.scheme in ("http", "https") and bool(parsed.raw_host) and (
            parsed.port is not None)
    except ValueError:
        return False


def _id(prefix: str, value: str, option: str) -> str:
    if not ids.is_valid(prefix, value):
        raise AdminError(f"{option} {value!r} is not a {prefix}_ ID")
    return value.lower()
